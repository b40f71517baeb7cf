"""The Store ABC: the abstract store interface of the Zarr v3 core spec, synchronous and batched.

Keys are "/"-separated strings with no leading slash (``"t2m/c/0/1/2"``, ``"zarr.json"``).
Every method that reads many values takes them all in one call so a backend can fetch them
concurrently. Missing keys read as ``None`` (never an exception per chunk).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol, TypeAlias

from .._threads import thread_map
from ..byte_range import ByteRange
from ..errors import ArgumentError, InvalidKeyError, ReadOnlyError, WriteConflictError
from ..settings import Settings
from ..settings import check as check_settings
from ..settings import current as current_settings

BytesLike = bytes | bytearray | memoryview

#: An opaque, hashable, picklable token naming one stored generation of a value (a counter, an
#: ``(inode, mtime_ns, size)`` triple, an ETag): equal tokens mean the value was not replaced.
Version: TypeAlias = Hashable


class StoreArgumentError(ArgumentError):
    """An argument choosing or configuring a store is invalid (type, mode, storage_options)."""


class PositionedReader(Protocol):
    """One value open for positioned reads into caller buffers (``Store.open_reader``)."""

    size: int

    def read_into(self, offset: int, buffers: Sequence[memoryview]) -> int: ...

    def close(self) -> None: ...

    def __enter__(self) -> PositionedReader: ...

    def __exit__(self, *exc: object) -> None: ...


class ValueReader:
    """Positioned reads of one value held in memory: what ``Store.open_reader`` gives by default
    (the value read whole with ``get``); the shape of ``LocalStore``'s ``FileReader``."""

    __slots__ = ("_view", "size")

    def __init__(self, value: BytesLike) -> None:
        self._view = memoryview(value).cast("B")
        self.size = len(self._view)

    def read_into(self, offset: int, buffers: Sequence[memoryview]) -> int:
        """Fill ``buffers`` in order from ``offset``; the bytes copied (short only at the end)."""
        got = 0
        for buf in buffers:
            part = self._view[offset + got : offset + got + len(buf)]
            buf[: len(part)] = part
            got += len(part)
            if len(part) < len(buf):
                break
        return got

    def close(self) -> None:
        """Nothing to release (the value is plain memory)."""

    def __enter__(self) -> ValueReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rebuild_store(cls: type, args: tuple, kwargs: dict) -> Store:
    """Pickle helper: ``cls(*args, **kwargs)`` (lets ``__reduce__`` pass keyword arguments)."""
    return cls(*args, **kwargs)


def validate_key(key: str) -> str:
    """Refuse keys that are empty, absolute, contain backslashes or ``.``/``..`` segments, or
    have no UTF-8 form (object stores, zarr.json and every other implementation need one)."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"store key must be a non-empty string, got {key!r}")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidKeyError(f"invalid store key {key!r}: absolute paths, backslashes and NUL are refused")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidKeyError(f"invalid store key {key!r}: empty, '.' and '..' segments are refused")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate ('\udcff', as os.fsdecode makes them)
            raise InvalidKeyError(f"invalid store key {key!r}: not valid Unicode text ({e.reason})") from e
    return key


def validate_prefix(prefix: str) -> str:
    """A prefix is ``""`` (the root) or a valid key optionally ending in ``/``."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def dir_prefix(prefix: str) -> str:
    """A validated directory prefix: ``""`` for the root, else ending in exactly one ``/``."""
    validate_prefix(prefix)
    return prefix if prefix == "" or prefix.endswith("/") else prefix + "/"


class RequestFeed(list):
    """Requests for ``Store.stream_partial_values`` that grow while they stream: the consumer
    appends ``(key, range)`` pairs between the values it takes (positions go on from the end)
    and calls ``close`` once it will add no more; the stream ends when it is closed and every
    request in it has been answered. A plain list is a feed closed from the start."""

    closed = False

    def close(self) -> None:
        """No more requests will be added."""
        self.closed = True


def is_open_feed(requests: Sequence[object]) -> bool:
    """Whether ``requests`` is a ``RequestFeed`` that may still grow."""
    return isinstance(requests, RequestFeed) and not requests.closed


def refuse_open_feed(requests: Sequence[object]) -> None:
    """Raise when a stream has answered every request of a feed still open: nobody would add
    more, and the stream would wait for ever (a consumer that forgot to ``close`` it)."""
    if is_open_feed(requests):
        raise RuntimeError("a RequestFeed left open with every request answered")


class Store(ABC):
    """Abstract key/value store. Subclasses implement the ``_``-less abstract methods.

    Batched methods have serial defaults; real stores override them to run concurrently.
    """

    #: True for stores where one request is costly (object stores): the core then keeps decoded
    #: shard indexes in a bounded in-process cache instead of re-reading them.
    costly_requests: bool = False

    #: True for stores whose ``stream_partial_values`` holds landed answers of its own, not yet
    #: handed over, within half of ``window_bytes`` (ObstoreStore): the reader then keeps only
    #: the other half for values handed over and not yet decoded, else the whole window.
    holds_half_window: bool = False

    #: True for stores whose writes stay invisible until the store's own commit (an Icechunk
    #: session): the package's commit protocol then stages nothing and marks nothing.
    commits_externally: bool = False

    #: True when ``get_versioned``/``set_if``/``erase_if`` make a real compare-and-swap against
    #: concurrent writers (in other threads, processes or hosts).
    supports_conditional_writes: bool = False

    #: True when a partial chunk or shard write (read, merge, write back) must be refused on this
    #: store because it has no conditional writes and concurrent writers could lose updates
    #: (``WriteConflictError``); stores that leave it False accept such writes unguarded.
    refuses_unguarded_partial_writes: bool = False

    #: True for stores whose copies in other processes (dask workers) keep what they write to
    #: themselves until it is handed back (an Icechunk ForkSession): each write task then returns
    #: the copy's ``write_receipt()``, and the client's store takes them in ``merge_receipts``.
    returns_receipts: bool = False

    def __init__(self, *, read_only: bool = False, settings: Mapping[str, object] | None = None) -> None:
        self.read_only = read_only
        if settings:
            self.setting_overrides = MappingProxyType(
                check_settings(
                    settings, error=StoreArgumentError, where=f"the settings of {type(self).__name__}"
                )
            )

    # ---- read-path capabilities the core asks for (defaults built on ``get``) ----------------
    #: True when per-key calls are cheap synchronous system calls (local files): the core then
    #: reads, decodes and writes unit by unit from its CPU workers (``get_into``, ``set``,
    #: ``open_reader``) instead of batching every value in memory with ``get_many``/``set_many``.
    inline_io: bool = False

    def get_into(
        self, key: str, alloc: Callable[[int], memoryview], byte_range: ByteRange | None = None
    ) -> memoryview | None:
        """The value of ``key`` (or its ``byte_range``) in ``alloc(size)``, a writable buffer the
        caller provides (a shorter one takes only its length); ``None`` when missing. Default:
        ``get``, then one copy; stores that can read straight into the buffer override it."""
        value = self.get(key, byte_range)
        if value is None:
            return None
        buf = alloc(len(value))
        n = min(len(buf), len(value))
        buf[:n] = memoryview(value).cast("B")[:n]
        return buf[:n]

    def open_reader(self, key: str) -> PositionedReader | None:
        """``key``'s value open for several positioned reads (``size``, ``read_into``; close it
        or use it in ``with``); ``None`` when missing. Default: the value read whole with ``get``
        (worth it only where ``inline_io``); stores with real positioned reads override it."""
        value = self.get(key)
        return None if value is None else ValueReader(value)

    def will_need(self, keys: Sequence[str]) -> None:  # noqa: B027 - a no-op default
        """A hint that ``keys`` will be read soon (read-ahead); default: nothing."""

    def stream_partial_values(
        self, key_ranges: Sequence[tuple[str, ByteRange | None]], *, in_flight: int | None = None
    ) -> Iterator[tuple[int, BytesLike | None]]:
        """Yield ``(position, value)`` for each of ``key_ranges`` as it lands, in any order, with
        at most ``in_flight`` (default: ``settings.requests_in_flight``) requests outstanding or
        landed but not yet taken: the consumer's pace bounds the memory held. Values are as
        ``get_partial_values`` gives them. ``key_ranges`` may be a ``RequestFeed`` the consumer
        extends while it takes values (requests that depend on earlier answers, such as a
        shard's inner chunks on its index): an override must read its length as it goes, not
        once. Default: ``get_partial_values`` in batches, in order; stores with an event loop
        override it to hand each value over as it lands."""
        n = max(1, in_flight or self.settings.requests_in_flight)
        start = 0
        while start < len(key_ranges):
            batch = key_ranges[start : start + n]  # a plain list, also of a RequestFeed
            if all(r is None for _, r in batch):  # whole values: the store's own batched call
                values = self.get_many([k for k, _ in batch])
            else:
                values = self.get_partial_values(batch)
            yield from enumerate(values, start)
            start += len(batch)
        refuse_open_feed(key_ranges)

    # ---- settings --------------------------------------------------------------------------
    #: This store's own setting overrides (names of ``zarr3_backend.settings.Settings``), from
    #: its ``storage_options={"zarr3": {...}}`` or constructor; see ``settings``.
    setting_overrides: Mapping[str, object] = MappingProxyType({})

    @property
    def settings(self) -> Settings:
        """The settings in force for this store now (environment, this store's own overrides,
        then ``zarr3_backend.settings.using`` blocks); read when a call starts."""
        return current_settings(self.setting_overrides)

    #: The byte-range coalescing gap where the settings name none: reading the bytes between
    #: two ranges of one value costs less than another request when they are closer than this
    #: (local disk and memory: a few pages; object stores override it with about 1 MiB).
    default_coalesce_gap: int = 4096

    @property
    def coalesce_gap(self) -> int:
        """Byte ranges of one value closer than this are best fetched as one request: the
        ``coalesce_gap`` setting in force, else this store's ``default_coalesce_gap``."""
        gap = self.settings.coalesce_gap
        return self.default_coalesce_gap if gap is None else gap

    # ---- reading ---------------------------------------------------------------------------
    @abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or ``byte_range`` of it); ``None`` when the key is missing."""

    def get_many(self, keys: Sequence[str]) -> list[BytesLike | None]:
        """Values of many keys in one call (concurrent where the backend allows): ``bytes``, or
        a read-only buffer that stays valid as long as it is referenced (no copy)."""
        return [self.get(k) for k in keys]

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys in one call (concurrent where the backend allows)."""
        return [self.get(k, r) for k, r in key_ranges]

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        return self.get(key, ByteRange(0, 0)) is not None

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key holds a value, in one call (concurrent where the backend allows)."""
        return [self.exists(k) for k in keys]

    # ---- writing ---------------------------------------------------------------------------
    def check_writable(self, key: str | None = None) -> None:
        """Raise ReadOnlyError (naming this store and ``key``) if the store is read-only."""
        if self.read_only:
            what = "" if key is None else f"; refusing to write or erase {key!r}"
            raise ReadOnlyError(f"store {self!r} is read-only{what}")

    @abstractmethod
    def set(self, key: str, value: BytesLike) -> None:
        """Store ``value`` under ``key`` atomically (readers see the old or the new value)."""

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Store many values in one call (concurrent where the backend allows)."""
        for k, v in items.items():
            self.set(k, v)

    @abstractmethod
    def erase(self, key: str) -> None:
        """Remove ``key``; no error if it is missing."""

    def erase_many(self, keys: Iterable[str]) -> None:
        """Remove many keys in one call; missing keys are ignored."""
        for k in keys:
            self.erase(k)

    def move_prefix(self, src: str, dst: str) -> None:
        """Move every key under the directory prefix ``src`` to the same name under ``dst``
        (each move atomic for its readers); stores that can move whole directories override."""
        keys = list(self.list_prefix(src))
        thread_map(lambda key: self.move(key, dst + key[len(src) :]), keys, kind="io")

    def move(self, src: str, dst: str) -> None:
        """Put the value of ``src`` under ``dst`` (replacing it, atomically for readers of
        ``dst``) and remove ``src``; a missing ``src`` does nothing (a re-run move)."""
        value = self.get(src)
        if value is not None:
            self.set(dst, value)
            self.erase(src)

    def barrier(self) -> None:  # noqa: B027 - a no-op default, not an abstract method
        """Make every write this store has acknowledged survive a crash of the machine (power
        loss) before returning, where the ``durable`` setting asks for it: the commit protocol
        calls it between its steps, so no step is kept without the ones before it. Default:
        nothing to do (an object store acknowledges a write once it is durable; memory keeps
        nothing)."""

    def remove_dead_temporaries(self) -> list[str]:
        """Remove what killed writers of this store left beside the keys (temporary files);
        returns where they were. Stores whose writes leave nothing of the kind: nothing to do."""
        return []

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix``."""
        self.check_writable(prefix)
        self.erase_many(list(self.list_prefix(prefix)))

    # ---- conditional writes (compare-and-swap) ----------------------------------------------
    def _no_conditional_writes(self, key: str) -> WriteConflictError:
        return WriteConflictError(
            f"store {self!r} has no conditional writes (supports_conditional_writes is False); "
            f"cannot compare-and-swap key {key!r}"
        )

    def get_versioned(self, key: str) -> tuple[bytes | None, Version | None]:
        """``(value, version)`` of ``key`` read together; ``(None, None)`` when it is missing."""
        raise self._no_conditional_writes(key)

    def set_if(self, key: str, value: BytesLike, expected: Version | None) -> bool:
        """Store ``value`` under ``key`` (atomically, as ``set``) only if the stored version is
        still ``expected`` (``None``: only if the key is missing); False, writing nothing, when
        another writer got there first."""
        raise self._no_conditional_writes(key)

    def erase_if(self, key: str, expected: Version) -> bool:
        """Remove ``key`` only if its stored version is still ``expected``; False otherwise."""
        raise self._no_conditional_writes(key)

    # ---- listing ---------------------------------------------------------------------------
    @abstractmethod
    def list(self) -> Iterator[str]:
        """Every key in the store."""

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key that starts with ``prefix`` (full keys)."""
        return (k for k in self.list() if k.startswith(prefix))

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (``""`` or ending in ``/``): keys and child prefixes,
        without the prefix and without a trailing slash, each once."""
        prefix = dir_prefix(prefix)
        seen = set()
        for k in self.list_prefix(prefix):
            child = k[len(prefix) :].split("/", 1)[0]
            if child not in seen:
                seen.add(child)
                yield child

    # ---- receipts (``returns_receipts`` stores) -----------------------------------------------
    def write_receipt(self) -> object | None:
        """What a write task on this store hands back to the client (None: nothing to hand back)."""
        return None

    @staticmethod
    def combine_receipts(receipts: Sequence[object]) -> tuple[object, ...]:
        """Fewer receipts standing for all of ``receipts`` (run by the tasks that add up a write's
        counts, so the receipts shrink on their way to the client); the default keeps them all."""
        return tuple(receipts)

    def merge_receipts(self, receipts: Sequence[object]) -> None:  # noqa: B027 - a no-op default
        """Take the receipts of a finished write into this (the client's) store."""

    # ---- what the data is ---------------------------------------------------------------------
    @property
    def data_identity(self) -> Hashable:
        """Equal for stores on the same data, whatever their read-only flags (the key of the
        core's caches shared between Arrays). Default: the store object itself."""
        return self

    # ---- identity --------------------------------------------------------------------------
    def with_read_only(self, read_only: bool = True) -> Store:
        """A store on the same data with another read-only flag."""
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - a no-op default, not an abstract method
        """Release resources (connections, thread pools)."""
