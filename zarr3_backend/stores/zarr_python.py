"""ZarrPythonStore: our Store over a zarr-python store object (an Icechunk session's store,
VirtualiZarr's ManifestStore, zarr's own stores).

This is the library's one import of zarr-python, and it happens lazily: only when such an
object is passed (``is_zarr_python_store`` tells without importing zarr; an object of a
zarr-python store class cannot exist unless zarr is already imported). The wrapped store's
async API runs on zarr-python's own event loop (see ``_run``); batched calls gather their
requests there, at most the store's ``requests_in_flight`` setting in flight.

Icechunk specifics live here too, because they ride on its zarr-python store: pickling rules
for sessions (``__reduce__``), the receipts of writes through a ``ForkSession`` on dask workers
(each worker's copy of the fork, merged back into the client's), and ``commit``, which turns
Icechunk's conflict errors into ``WriteConflictError``.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..byte_range import ByteRange
from ..errors import ReadOnlyError, StoreError, WriteConflictError, Zarr3Error
from ._aio import _bounded
from .base import BytesLike, Store, StoreArgumentError, dir_prefix, validate_key, validate_prefix
from .fsspec_errors import ResponseMismatchError
from .range_answers import may_be_short, range_length_problem

T = TypeVar("T")

_ZARR_STORE_MODULE = "zarr.abc.store"


def is_zarr_python_store(obj: object) -> bool:
    """Whether ``obj`` is a zarr-python store (``zarr.abc.store.Store``), without importing zarr."""
    module = sys.modules.get(_ZARR_STORE_MODULE)
    return module is not None and isinstance(obj, module.Store)


# ---- the event loop ------------------------------------------------------------------------
def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on zarr-python's own event loop (one daemon thread per process, made anew
    after ``fork``) and wait for its result.

    Not a loop of our own: a zarr-python store's async resources belong to the loop zarr-python
    drives it on (the aiohttp session of an fsspec filesystem, e.g. s3fs, is bound to the loop
    that first used it), so a second loop would break a store that zarr-python also uses."""
    from zarr.core.sync import sync

    return sync(coro)


async def _all(calls: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Every call's result, at most ``limit`` in flight; the first failure is raised (calls not
    yet started when one fails are not sent)."""
    results = await _bounded(calls, limit, lambda e: True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def _byte_request(byte_range: ByteRange | None) -> Any:
    """zarr-python's request object for one of our byte ranges (None: the whole value)."""
    if byte_range is None:
        return None
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if byte_range.is_suffix:
        return SuffixByteRequest(-byte_range.offset)
    if byte_range.length is None:
        return OffsetByteRequest(byte_range.offset)
    return RangeByteRequest(byte_range.offset, byte_range.offset + byte_range.length)


@dataclass(frozen=True)
class Inherited:
    """The keys (and erased directory prefixes) that a fork's store had changed in its fork
    when it was copied for a dask worker: the copy must not change them again.

    Icechunk merges a fork's whole change set, what it inherited included, so a worker's fork
    would bring an inherited chunk back over another worker's rewrite of it when merged."""

    keys: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    def covers(self, key: str) -> bool:
        """Whether ``key`` was changed before the copy was made."""
        return key in self.keys or any(key.startswith(p) for p in self.prefixes)


def _rebuild(
    data: bytes, read_only: bool, settings: Mapping[str, Any], inherited: Inherited | None = None
) -> ZarrPythonStore:
    """Pickle helper: unpickle the wrapped store, then wrap it again (marked as a copy)."""
    store = ZarrPythonStore(pickle.loads(data), read_only=read_only, settings=settings)
    if inherited is not None:
        store._inherited = inherited
    return store


def _distinct(objects: Iterable[Any]) -> list[Any]:
    """``objects`` without Nones and without repeats of one object (tasks run in one worker
    return that worker's one fork)."""
    return list({id(o): o for o in objects if o is not None}.values())


def _is_icechunk_store(obj: object) -> bool:
    """Whether ``obj`` is an Icechunk session's store (writes become visible at its commit)."""
    store_module = sys.modules.get("icechunk.store")
    return store_module is not None and isinstance(obj, store_module.IcechunkStore)


def _is_icechunk_fork_store(obj: object) -> bool:
    """Whether ``obj`` is the store of an Icechunk ``ForkSession`` (writes meant to be merged)."""
    session_module = sys.modules.get("icechunk.session")
    store_module = sys.modules.get("icechunk.store")
    if session_module is None or store_module is None or not isinstance(obj, store_module.IcechunkStore):
        return False
    return isinstance(obj.session, session_module.ForkSession)


class ZarrPythonStore(Store):
    """A Store over a zarr-python store object, e.g. ``session.store`` of Icechunk or
    VirtualiZarr's ``ManifestStore``; ``make_store`` wraps such objects in it.

    ``read_only`` defaults to the wrapped store's flag; a read-only view of a writable store
    is allowed, a writable view of a read-only store is refused. ``close`` leaves the wrapped
    store open: it belongs to the caller. Pickles by pickling the wrapped store, under that
    store's rules: an Icechunk writable session refuses (fork it). A writable fork's store
    pickles, and returns receipts: the dask write tasks hand each worker's copy of the fork back
    to the client, which merges them into the fork it wrote to (``merge_receipts``); then
    ``session.merge(fork)`` and ``commit`` as Icechunk documents. One distributed write per
    fresh fork (as Icechunk's ``to_icechunk``): Icechunk merges whole change sets, so a fork that
    holds changes this store did not make is not sent to workers, and a worker's copy refuses
    to change what the fork had changed before (``Inherited``).
    """

    #: Every request is a round trip through the wrapped store (often an object store).
    costly_requests = True

    def __init__(
        self,
        store: Any,
        *,
        read_only: bool | None = None,
        concurrency: int | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not is_zarr_python_store(store):
            raise StoreArgumentError(
                f"ZarrPythonStore needs a zarr-python store object, got {type(store).__name__}"
            )
        if read_only is None:
            read_only = bool(store.read_only)
        elif not read_only and store.read_only:
            raise ReadOnlyError(f"the zarr-python store {store!r} is read-only; cannot open it for writing")
        if concurrency is not None:  # the older name of the requests_in_flight setting
            given = (settings or {}).get("requests_in_flight", concurrency)
            if given != concurrency:
                raise StoreArgumentError(
                    f"concurrency={concurrency!r} (the older name of requests_in_flight) disagrees "
                    f"with settings['requests_in_flight']={given!r}"
                )
            settings = {**(settings or {}), "requests_in_flight": concurrency}
        super().__init__(read_only=read_only, settings=settings)
        self.store = store
        if not getattr(store, "_is_open", True):
            # zarr-python opens a store before its first request (``StorePath`` calls
            # ``_ensure_open``); a ZipStore answers none unopened
            self._call("open", store._ensure_open())
        self._prototype: Any = None
        # an Icechunk session is itself a transaction: its commit makes every write visible at
        # once, so the package's own staging and markers would only get in its way
        self.commits_externally = _is_icechunk_store(store)
        # writes through a copy of a fork (on a dask worker) stay in the copy until merged back
        self.returns_receipts = not read_only and _is_icechunk_fork_store(store)
        # a fork's store records what it changes in its fork (None: not known, as when the fork
        # held changes already), so that its copies on dask workers never change it again
        # (see Inherited); a copy knows what it inherited
        clean = self.returns_receipts and not store.session.has_uncommitted_changes
        self._changed: set[str] | None = set() if clean else None
        self._erased_dirs: set[str] = set()
        self._inherited: Inherited | None = None  # set on a copy (another process)
        self._receipt: Any = None

    def _changing(self, keys: Iterable[str]) -> None:
        """Record keys about to change in a fork (refuse, on a worker's copy, those it inherited)."""
        if not self.returns_receipts:
            return
        if self._inherited is not None:
            for key in keys:
                if self._inherited.covers(key):
                    raise WriteConflictError(
                        f"{self!r}: key {key!r} was changed in this ForkSession before it was sent "
                        "to dask workers; rewriting it there could be undone when the workers' "
                        "forks are merged. Merge the fork into its session, commit, and write "
                        "from a fresh fork"
                    )
        elif self._changed is not None:
            self._changed.update(keys)

    @property
    def concurrency(self) -> int:
        """Requests one batched call keeps in flight (the ``requests_in_flight`` setting)."""
        return int(self.settings.requests_in_flight)

    # ---- plumbing --------------------------------------------------------------------------
    def _buffers(self) -> Any:
        if self._prototype is None:
            from zarr.core.buffer import default_buffer_prototype

            self._prototype = default_buffer_prototype()
        return self._prototype

    def _call(self, what: str, coro: Coroutine[Any, Any, T]) -> T:
        """Run one request; a failure of the wrapped store becomes a StoreError naming ``what``."""
        try:
            return _run(coro)
        except Zarr3Error:
            raise
        except Exception as e:
            raise StoreError(f"{self.store!r}: {what} failed: {type(e).__name__}: {e}") from e

    def _batch(self, what: str, calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
        if not calls:
            return []
        return self._call(what, _all(calls, self.concurrency))

    async def _get(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        """``key``'s value or ``byte_range`` of it, checked to be as many bytes as the range
        spans; a failure of the wrapped store raises StoreError naming the key."""
        try:
            return await self._get_checked(key, byte_range)
        except Zarr3Error:
            raise
        except Exception as e:
            raise StoreError(f"{self.store!r}: get {key!r} failed: {type(e).__name__}: {e}") from e

    async def _get_checked(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        buffers = self._buffers()
        try:
            value = await self.store.get(key, buffers, _byte_request(byte_range))
        except Exception:
            if byte_range is None or byte_range.is_suffix or byte_range.length is None:
                raise
            # Icechunk 1.x fails (a Rust panic) on a range running past the end of a value;
            # our contract clips such a range, so read the whole value and cut it here.
            value = await self.store.get(key, buffers, None)
            return None if value is None else byte_range.apply(value.to_bytes())
        if value is None:
            return None
        data = value.to_bytes()
        if byte_range is not None:
            # a store that gave more than the range (the whole value?) or less inside the
            # value would have its bytes decoded as another part of the value
            problem = range_length_problem(byte_range, len(data))
            if problem is not None or may_be_short(byte_range, len(data)):
                size = await self.store.getsize(key)
                if problem is not None and len(data) == size:  # the whole value: Range ignored
                    return byte_range.apply(data)
                problem = range_length_problem(byte_range, len(data), size)
            if problem is not None:
                raise ResponseMismatchError(f"{self.store!r}: get {key!r}: {problem}")
        return data

    async def _exists(self, key: str) -> bool:
        try:
            return bool(await self.store.exists(key))
        except KeyError:
            # Icechunk 1.x raises KeyError from ``exists`` for a Zarr v2 key (it holds v3 only)
            # where zarr-python's contract answers False; ``mode="w-"`` asks for both versions
            return False

    async def _set(self, key: str, value: BytesLike) -> None:
        await self.store.set(key, self._buffers().buffer.from_bytes(bytes(value)))

    async def _list(self, listing: Any) -> list[str]:
        return [k async for k in listing]

    def _check_listing(self) -> None:
        if not self.store.supports_listing:
            raise StoreError(f"the zarr-python store {self.store!r} cannot list its keys")

    # ---- reading ---------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or ``byte_range`` of it); ``None`` when the key is missing."""
        validate_key(key)
        return self._call(f"get {key!r}", self._get(key, byte_range))

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of many keys, fetched concurrently."""
        return self.get_partial_values([(k, None) for k in keys])

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys, fetched concurrently."""
        for key, _ in key_ranges:
            validate_key(key)
        calls = [lambda k=k, r=r: self._get(k, r) for k, r in key_ranges]
        return self._batch(f"reading {len(calls)} keys", calls)

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        validate_key(key)
        return self._call(f"exists {key!r}", self._exists(key))

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key holds a value, asked concurrently."""
        for key in keys:
            validate_key(key)
        calls = [lambda k=k: self._exists(k) for k in keys]
        return self._batch(f"checking {len(calls)} keys", calls)

    # ---- writing ---------------------------------------------------------------------------
    def set(self, key: str, value: BytesLike) -> None:
        """Store ``value`` under ``key``."""
        self.check_writable(key)
        validate_key(key)
        self._changing([key])
        self._call(f"set {key!r}", self._set(key, value))

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Store many values concurrently; every key is checked before anything is written."""
        for key in items:
            self.check_writable(key)
            validate_key(key)
        self._changing(items)
        calls = [lambda k=k, v=v: self._set(k, v) for k, v in items.items()]
        self._batch(f"writing {len(calls)} keys", calls)

    def erase(self, key: str) -> None:
        """Remove ``key``; no error if it is missing."""
        self.check_writable(key)
        validate_key(key)
        self._changing([key])
        self._call(f"delete {key!r}", self.store.delete(key))

    def erase_many(self, keys: Iterable[str]) -> None:
        """Remove many keys concurrently; every key is checked before anything is removed.

        Metadata documents go last: Icechunk drops a node with its ``zarr.json``, and then
        refuses to delete chunks of the node it no longer has."""
        keys = list(keys)
        for key in keys:
            self.check_writable(key)
            validate_key(key)
        self._changing(keys)
        is_metadata = [k == "zarr.json" or k.endswith("/zarr.json") for k in keys]
        for last in (False, True):
            calls = [
                lambda k=k: self.store.delete(k) for k, m in zip(keys, is_metadata, strict=True) if m == last
            ]
            self._batch(f"deleting {len(calls)} keys", calls)

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix``; a directory prefix (``""`` or ending in ``/``) is
        removed by the wrapped store's ``delete_dir`` in one call."""
        self.check_writable(prefix)
        validate_prefix(prefix)
        if prefix and not prefix.endswith("/"):
            super().erase_prefix(prefix)
            return
        if not self.store.supports_deletes:
            raise ReadOnlyError(f"the zarr-python store {self.store!r} cannot delete keys")
        if self._inherited is not None:  # a copy: refuse to erase what it inherited
            self._changing([k for k in self._inherited.keys if k.startswith(prefix)])
        self._erased_dirs.add(prefix)
        self._call(f"delete_dir {prefix!r}", self.store.delete_dir(prefix.rstrip("/")))

    # ---- listing ---------------------------------------------------------------------------
    def list(self) -> Iterator[str]:
        """Every key in the store (a snapshot taken when called)."""
        self._check_listing()
        return iter(self._call("list", self._list(self.store.list())))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix`` (full keys; a snapshot taken when called).

        The wrapped store lists the directory holding ``prefix``; Icechunk lists only
        directories that are nodes (``"t2m/"``, not ``"t2m/c/"``)."""
        validate_prefix(prefix)
        self._check_listing()
        # zarr-python stores list by directory; a prefix ending inside a name filters here
        directory = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        keys = self._call(f"list_prefix {prefix!r}", self._list(self.store.list_prefix(directory)))
        return iter([k for k in keys if k.startswith(prefix)])

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (keys and child prefixes, each once, no slashes)."""
        prefix = dir_prefix(prefix)
        self._check_listing()
        names = self._call(f"list_dir {prefix!r}", self._list(self.store.list_dir(prefix.rstrip("/"))))
        return iter(dict.fromkeys(n.rstrip("/") for n in names))

    # ---- receipts (an Icechunk ForkSession written to on dask workers) -----------------------
    def write_receipt(self) -> Any:
        """This copy's ForkSession, holding what was written through it (None in the process
        that made the store: its writes are already in the fork). One object per copy, so the
        receipts of tasks run by one worker are merged once (``store.session`` makes a new
        wrapper at each call)."""
        if not (self.returns_receipts and self._inherited is not None):
            return None
        if self._receipt is None:
            self._receipt = self.store.session
        return self._receipt

    @staticmethod
    def combine_receipts(receipts: Sequence[Any]) -> tuple[Any, ...]:
        """One ForkSession holding the changes of all ``receipts`` (a fresh copy of the first,
        so no worker's live fork is changed), as Icechunk's own dask reduction merges them."""
        forks = _distinct(receipts)
        if len(forks) < 2:
            return tuple(forks)
        merged = pickle.loads(pickle.dumps(forks[0]))
        merged.merge(*forks[1:])
        return (merged,)

    def merge_receipts(self, receipts: Sequence[Any]) -> None:
        """Merge the forks that write tasks sent back into the fork this store writes to."""
        forks = _distinct(receipts)
        if forks and self.returns_receipts:
            self.store.session.merge(*forks)
            self._changed = None  # the fork now holds what the workers wrote, keys unknown

    # ---- identity --------------------------------------------------------------------------
    def with_read_only(self, read_only: bool = True) -> ZarrPythonStore:
        """A store on the same wrapped object with another read-only flag."""
        return ZarrPythonStore(self.store, read_only=read_only, settings=self.setting_overrides)

    @property
    def data_identity(self) -> Hashable:
        """The wrapped store object."""
        return (ZarrPythonStore, id(self.store))

    def __eq__(self, other: object) -> bool:
        """Equal when both wrap the same object with the same flag."""
        if not isinstance(other, ZarrPythonStore):
            return NotImplemented
        return self.store is other.store and self.read_only == other.read_only

    def __hash__(self) -> int:
        return hash((ZarrPythonStore, id(self.store), self.read_only))

    def __repr__(self) -> str:
        return f"ZarrPythonStore({self.store!r}, read_only={self.read_only})"

    def _inheritance(self) -> Inherited | None:
        """What a copy of this store inherits (None for stores that return no receipts)."""
        if not self.returns_receipts:
            return None
        if self._inherited is not None:  # a copy copied again
            return self._inherited
        if self._changed is None:
            raise StoreArgumentError(
                f"{self!r} writes into an Icechunk ForkSession that holds changes this store did "
                "not make (made before it, or merged from dask workers): forks of it on workers "
                "would carry them back and could undo each other's chunks when merged. Write "
                "from a fresh fork for each distributed write: session.merge(fork), commit, "
                "then fork the new session"
            )
        # a directory erased and made anew (its zarr.json written) is a new node: its chunks
        # start empty, so writing them is safe
        prefixes = tuple(p for p in self._erased_dirs if p + "zarr.json" not in self._changed)
        return Inherited(frozenset(self._changed), prefixes)

    def __reduce__(self) -> tuple[Callable[..., ZarrPythonStore], tuple[Any, ...]]:
        """Pickle the wrapped store (an Icechunk writable session refuses: fork it). A fork's
        copy returns what it writes as receipts (``write_receipt``) and refuses to change again
        what the fork had changed when it was copied (``Inherited``); a fork holding changes
        this store did not make is refused."""
        inherited = self._inheritance()
        try:
            data = pickle.dumps(self.store)
        except Exception as e:
            raise StoreArgumentError(
                f"cannot pickle {self!r} (for dask workers or another process): {type(e).__name__}: {e}"
            ) from e
        return _rebuild, (data, self.read_only, dict(self.setting_overrides), inherited)


def commit(session: Any, message: str, **kwargs: Any) -> str:
    """``session.commit(message, **kwargs)`` for an Icechunk session; a conflict with another
    commit raises WriteConflictError (wrapping Icechunk's error). Returns the snapshot id."""
    import icechunk

    try:
        return session.commit(message, **kwargs)
    except (icechunk.ConflictError, icechunk.RebaseFailedError) as e:
        branch = session.branch
        raise WriteConflictError(
            f"commit {message!r} to Icechunk branch {branch!r} conflicts with a commit made since "
            f"the session started: {e}"
        ) from e
