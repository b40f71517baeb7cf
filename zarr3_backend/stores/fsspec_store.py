"""FsspecStore: a store over any fsspec filesystem (memory, file, s3, gcs, http, ...).

Batched reads and writes on async filesystems (s3fs, gcsfs, http) send one request per key, at
most ``requests_in_flight`` (a setting) in flight; missing keys come back as values, never as
an exception round trip per key; streamed reads hand each value over as it lands. Transient failures (timeouts, dropped connections, 5xx) are sent again a bounded
number of times; what still fails raises a typed StoreError naming the URL (``fsspec_errors``).
A batch stops sending once the endpoint is found down (timeout, refused connection), so a dead
server costs a few timeouts, not one per key. Settings and bounded defaults: ``fsspec_options``.

The store pickles by configuration (filesystem class, its arguments, root, settings), never by
a live connection, and rebuilds its filesystem in a process forked after it was used.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import fsspec
import fsspec.asyn
import fsspec.core
from fsspec.implementations.local import LocalFileSystem

from ..byte_range import ByteRange
from ..errors import Zarr3Error
from ..settings import current as current_settings
from ._aio import run_bounded, stream_bounded
from .base import BytesLike, Store, StoreArgumentError, Version, dir_prefix, validate_key, validate_prefix
from .fsspec_checked import checked_cat
from .fsspec_conditional import conditional_backend
from .fsspec_errors import (
    BucketNotFoundError,
    ResponseMismatchError,
    is_endpoint_down,
    is_missing_container,
    is_range_refused,
    is_transient,
    is_unsatisfiable_range,
    store_error,
)
from .fsspec_options import (
    DEFAULT_RETRIES,
    HTTP_PROTOCOLS,
    OBJECT_STORE_COALESCE_GAP,
    S3_PROTOCOLS,
    StoreSettings,
    filesystem_retries_itself,
    private_filesystem,
    rebuild_private,
    split_storage_options,
    tuned_options,
)
from .local import LocalStore

T = TypeVar("T")

_GLOB = re.compile(r"[*?\[]")  # fs.rm would expand these; such paths are erased one by one
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_WRITE_RETRIES = 5  # directory filesystems: a concurrent erase may prune a parent we just made

#: Seconds before the first retry; doubled for each further one.
RETRY_BACKOFF = 0.1
#: Protocols that can only be read (plain HTTP servers).
READ_ONLY_PROTOCOLS = frozenset({"http", "https"})


@dataclass(frozen=True)
class _Origin:
    """How ``from_url`` made a private filesystem: the options the user gave (the filesystem
    has them plus bounded defaults) and whether the user asked the filesystem to retry."""

    user_options: dict[str, Any] = field(default_factory=dict)
    retries_itself: bool = False


def _rebuild(
    fs_class: type,
    args: tuple,
    options: dict[str, Any],
    root: str,
    read_only: bool,
    settings: Mapping[str, Any],
    retries: int | None,
    origin: _Origin | None = None,
    unguarded_partial_writes: bool = False,
) -> FsspecStore:
    """Pickle helper: make the filesystem anew in this process, then the store on it."""
    fs = rebuild_private(fs_class, args, options) if origin is not None else fs_class(*args, **options)
    store = FsspecStore(
        fs,
        root,
        read_only=read_only,
        retries=retries,
        unguarded_partial_writes=unguarded_partial_writes,
        settings=settings,
    )
    store._origin = origin
    return store


def _is_error(result: object) -> bool:
    return isinstance(result, BaseException)


def _is_async(fs: fsspec.AbstractFileSystem) -> bool:
    return bool(getattr(fs, "async_impl", False))


def _url_protocol(url: str) -> str | None:
    """The protocol of a plain URL; None for a chained one (``"simplecache::s3://..."``)."""
    if "::" in url:
        return None
    return fsspec.core.split_protocol(url)[0] or "file"


class FsspecStore(Store):
    """A store over an fsspec filesystem, rooted at ``root`` (a path on that filesystem).

    ``settings`` overrides the package's settings for this store (``zarr3_backend.settings``
    names; ``requests_in_flight`` bounds how many requests one batched or streamed call keeps
    in flight); ``batch_size`` is the older name of ``requests_in_flight``. ``retries`` is how
    often a transiently failed request is sent again (None: ``DEFAULT_RETRIES``, or 0 when the
    filesystem retries by itself).

    All can be given where only ``storage_options`` reach (``open_group``, ``open_array``,
    ``xr.open_dataset``, ``to_zarr``), in a section the filesystem never sees::

        storage_options={"key": ..., "zarr3": {"retries": 2, "requests_in_flight": 16}}

    For ``s3://`` and ``http(s)://`` URLs ``from_url`` builds a private filesystem instance
    (shared only with stores of the same options) with bounded timeouts (connect 5 s, read 12 s)
    and a single retry layer, the store's: s3fs' nested retries are off on that instance, and
    botocore's too unless ``config_kwargs={"retries": ...}`` is given (then the store adds no
    retries unless ``retries`` is set). Timeouts are the filesystem's own options
    (s3fs ``config_kwargs={"connect_timeout": ..., "read_timeout": ...}``, HTTP
    ``client_kwargs={"timeout": aiohttp.ClientTimeout(...)}``); what the user gives wins.
    A filesystem passed in directly is used as it is.

    On the local filesystem (``file://``) every call goes to a ``LocalStore`` on the same root:
    keys stay inside root whatever symlinks say, writes are atomic renames, and conditional
    writes are the LocalStore's. On S3 conditional writes use ETags (``fsspec_conditional``).
    Elsewhere there are none, and a partial chunk or shard write (a read-modify-write that a
    concurrent writer could undo) raises WriteConflictError unless ``unguarded_partial_writes``
    is True (also ``storage_options={"zarr3": {"unguarded_partial_writes": True}}``).

    Missing keys read as ``None``; other failures raise StoreError (or a subclass) naming the
    URL. A byte range that runs past the end of a value returns the bytes that exist. Writes
    are as atomic as the filesystem's own (object stores: yes; "file": no, use LocalStore,
    which ``make_store`` picks for local paths).
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        *,
        read_only: bool = False,
        batch_size: int | None = None,
        retries: int | None = None,
        unguarded_partial_writes: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(fs, fsspec.AbstractFileSystem):
            raise StoreArgumentError(f"FsspecStore needs an fsspec filesystem, got {type(fs).__name__}")
        if _is_async(fs) and getattr(fs, "asynchronous", False):
            raise StoreArgumentError(
                f"FsspecStore needs a filesystem made with asynchronous=False, got {fs!r} for root {root!r}"
            )
        own = StoreSettings(retries, batch_size, unguarded_partial_writes, settings or {})  # validates them
        super().__init__(read_only=read_only, settings=own.overrides)
        self._fs = fs
        self._pid = os.getpid()
        self._origin: _Origin | None = None  # set when from_url made a private filesystem
        self.retries = retries
        stripped = fs._strip_protocol(root)
        self.root: str = stripped.rstrip("/") or stripped
        self._prefix = "" if not self.root else self.root if self.root.endswith("/") else self.root + "/"
        self.unguarded_partial_writes = unguarded_partial_writes
        # file://: the LocalStore rules (containment, atomic renames, conditional writes) apply
        # (with this store's settings: ``durable`` among them)
        local = isinstance(fs, LocalFileSystem)
        self._local = LocalStore(self.root or "/", settings=self.setting_overrides) if local else None
        self._conditional = conditional_backend(_protocol(fs))

    @classmethod
    def from_url(
        cls,
        url: str,
        storage_options: dict[str, Any] | None = None,
        read_only: bool | None = None,
        *,
        batch_size: int | None = None,
        retries: int | None = None,
        unguarded_partial_writes: bool | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> FsspecStore:
        """A store for an fsspec URL such as ``"s3://bucket/data.zarr"`` or ``"memory://x"``.

        ``storage_options`` go to the filesystem (endpoint, credentials, anon, ...) except the
        ``"zarr3"`` section: the store's ``retries``, ``unguarded_partial_writes`` and settings
        (``zarr3_backend.settings`` names; ``batch_size`` for ``requests_in_flight``), also
        accepted as keywords (the same one given both ways must agree). ``read_only=None``
        means read-only for http(s) URLs, writable otherwise.
        """
        options, own = split_storage_options(storage_options)
        own = own.merged(
            settings,
            retries=retries,
            batch_size=batch_size,
            unguarded_partial_writes=unguarded_partial_writes,
        )
        protocol = _url_protocol(url)
        in_flight = current_settings(own.overrides).requests_in_flight
        tuned = tuned_options(protocol, options, in_flight)
        try:
            if tuned is None:
                fs, path = fsspec.core.url_to_fs(url, **options)
            else:
                fs, path = fsspec.core.url_to_fs(url, skip_instance_cache=True, **tuned)
                fs = private_filesystem(fs)
        except (ImportError, ValueError, TypeError) as e:
            raise StoreArgumentError(f"cannot open an fsspec filesystem for {url!r}: {e}") from e
        if read_only is None:
            read_only = _protocol(fs) in READ_ONLY_PROTOCOLS
        store = cls(
            fs,
            path,
            read_only=read_only,
            retries=own.retries,
            unguarded_partial_writes=bool(own.unguarded_partial_writes),
            settings=own.overrides,
        )
        if tuned is not None:
            store._origin = _Origin(options, filesystem_retries_itself(protocol, options))
        return store

    # ---- configuration ---------------------------------------------------------------------
    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem; an async one is made anew in a process forked after it was used
        (its event loop and connections stayed behind in the parent)."""
        if self._pid != os.getpid():
            fs = self._fs
            if self._origin is not None:
                self._fs = rebuild_private(type(fs), fs.storage_args, fs.storage_options)
            elif _is_async(fs):
                self._fs = type(fs)(*fs.storage_args, **fs.storage_options)
            self._pid = os.getpid()
        return self._fs

    @property
    def protocol(self) -> str:
        """The filesystem's protocol name, as ``fsspec.filesystem`` takes it."""
        return _protocol(self._fs)

    @property
    def storage_options(self) -> dict[str, Any]:
        """The filesystem options as the user gave them (without bounded defaults added)."""
        if self._origin is not None:
            return dict(self._origin.user_options)
        return dict(self._fs.storage_options)

    @property
    def url(self) -> str:
        """The root as a URL (``"memory:///x"``, ``"s3://bucket/data.zarr"``)."""
        return self._fs.unstrip_protocol(self.root)

    @property
    def costly_requests(self) -> bool:
        """Object stores (async filesystems) ask the core to cache shard indexes: a request
        there costs a round trip."""
        return _is_async(self._fs)

    @property
    def batch_size(self) -> int:
        """Requests one batched or streamed call keeps in flight: the ``requests_in_flight``
        setting in force for this store (``batch_size`` is its older name)."""
        return self.settings.requests_in_flight

    @property
    def default_coalesce_gap(self) -> int:  # type: ignore[override]
        """About 1 MiB on object stores (async filesystems: a request costs a round trip),
        4 KiB on filesystems with directories."""
        return OBJECT_STORE_COALESCE_GAP if _is_async(self._fs) else Store.default_coalesce_gap

    @property
    def supports_conditional_writes(self) -> bool:
        """Local files (a directory lock) and S3 (ETags) have compare-and-swap writes."""
        return self._local is not None or self._conditional is not None

    @property
    def refuses_unguarded_partial_writes(self) -> bool:
        """No conditional writes and no opt-out: partial chunk writes raise WriteConflictError."""
        return not self.supports_conditional_writes and not self.unguarded_partial_writes

    @property
    def _has_dirs(self) -> bool:
        # Sync fsspec filesystems (local, memory, sftp, ...) have real directories; the async
        # ones (s3, gcs, abfs, http) are object stores where a write needs no parent.
        return not _is_async(self._fs)

    @property
    def _retries(self) -> int:
        if self.retries is not None:
            return self.retries
        if self._origin is not None:
            return 0 if self._origin.retries_itself else DEFAULT_RETRIES
        return 0 if isinstance(getattr(self._fs, "retries", None), int) else DEFAULT_RETRIES

    def _budget(self, error: object) -> int:
        """Retries for ``error``: the store's; for an answer refused by the range check (which a
        filesystem retrying itself never sees: the check runs after its GET) the default when
        no ``retries`` was given. An explicit ``retries=0`` still means none."""
        if isinstance(error, ResponseMismatchError) and self.retries is None:
            return max(self._retries, DEFAULT_RETRIES)
        return self._retries

    def _path(self, key: str) -> str:
        return self._prefix + validate_key(key)

    def _key_url(self, path: str) -> str:
        return self._fs.unstrip_protocol(path)

    @staticmethod
    def _pause(attempt: int) -> None:
        time.sleep(RETRY_BACKOFF * 2**attempt)

    def _call(self, action: str, where: str, fn: Callable[[], T]) -> T:
        """Run one fsspec call, retrying transient failures; others become a typed StoreError."""
        attempt = 0
        while True:
            try:
                return fn()
            except Zarr3Error:
                raise
            except Exception as e:
                if attempt < self._budget(e) and is_transient(e):
                    self._pause(attempt)
                    attempt += 1
                    continue
                raise store_error(action, where, e) from e

    def _attempts(self, n: int, once: Callable[[list[int]], list[object]]) -> list[object]:
        """Results of ``once`` over requests ``0..n-1`` (values or exceptions, in order); the
        transiently failed ones are sent again, alone, at most ``retries`` times."""
        results: list[object] = [None] * n
        pending = list(range(n))
        attempt = 0
        while pending:
            for i, result in zip(pending, once(pending), strict=True):
                results[i] = result
            pending = [
                i
                for i in pending
                if _is_error(results[i]) and is_transient(results[i]) and attempt < self._budget(results[i])
            ]
            if not pending:
                break
            self._pause(attempt)
            attempt += 1
        return results

    def _concurrently(self, action: str, calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[object]:
        """Async filesystems: ``calls`` at most ``requests_in_flight`` at a time, results in
        place; the ones not started yet when the endpoint is found down get that failure unsent."""
        fs, limit = self.fs, self.settings.requests_in_flight
        return self._call(action, self.url, lambda: run_bounded(fs, calls, limit, is_endpoint_down))

    def _value(self, path: str, result: object) -> bytes | None:
        """One fetched result: bytes, None for a missing key, else a typed StoreError."""
        if isinstance(result, _MISSING):
            self._missing_key(path, result, "reading")
            return None
        if isinstance(result, BaseException):
            raise store_error("reading", self._key_url(path), result) from result
        return bytes(result)

    def _missing_key(self, path: str, error: BaseException, action: str) -> None:
        """A "not found" for ``path``: fine, unless it is the bucket that is missing."""
        if is_missing_container(error):
            raise BucketNotFoundError(
                f"{action} {self._key_url(path)!r} failed: the bucket of {self.url!r} does not exist: {error}"
            ) from error

    # ---- reading ---------------------------------------------------------------------------
    def _fetch(self, requests: Sequence[tuple[str, int | None, int | None]]) -> list[object]:
        """``(path, start, end)`` requests, concurrent on async filesystems; each result is
        bytes or the exception it raised. Transient failures are sent again (bounded). A
        server that ignores ``Range`` (answers 200 with the whole value) is noticed by the length
        of its answer and the range cut out of it here; on HTTP, where that can happen, a range
        open to the end is asked as the whole value (its length proves nothing) and cut."""
        fs = self.fs
        sent = [_as_sent(r) for r in requests] if _protocol(fs) in HTTP_PROTOCOLS else list(requests)

        def once(indices: list[int]) -> list[object]:
            batch = [sent[i] for i in indices]
            if _is_async(fs):
                cat = checked_cat(fs)
                return self._concurrently(
                    "reading", [functools.partial(cat, p, start=s, end=e) for p, s, e in batch]
                )
            call = functools.partial(
                fs.cat_ranges,
                [p for p, _, _ in batch],
                [s for _, s, _ in batch],
                [e for _, _, e in batch],
                on_error="return",
            )
            return self._call("reading", self.url, call)

        results = self._attempts(len(requests), once)
        out = [_clip(r, s, res) for r, s, res in zip(requests, sent, results, strict=True)]
        if _protocol(fs) in HTTP_PROTOCOLS:
            self._settle_short_ranges(requests, out)
        return out

    def _settle_short_ranges(self, requests: Sequence[tuple[str, int | None, int | None]], out: list) -> None:
        """HTTP: a range ``[start, end)`` with ``start > 0`` answered with fewer bytes than it
        spans is either the value's tail (the range ran past the end) or, from a server that
        ignores ``Range``, the whole (smaller) value; the values' sizes (one batch, only for
        such answers) tell which, and a whole value is cut."""
        short = [
            i
            for i, (_, start, end) in enumerate(requests)
            if not _is_error(out[i]) and start and start > 0 and end is not None and len(out[i]) < end - start
        ]
        if not short:
            return
        sizes = self._sizes([requests[i][0] for i in short])
        for i, size in zip(short, sizes, strict=True):
            _, start, end = requests[i]
            if not _is_error(size) and size == len(out[i]) and size != start + len(out[i]):
                out[i] = out[i][start:end]

    def _sizes(self, paths: Sequence[str]) -> list[object]:
        """The size of each value (or the exception asking for it raised), concurrently."""
        fs = self.fs

        def size(path: str) -> object:
            try:
                return fs.size(path)
            except Exception as e:
                return e

        def once(indices: list[int]) -> list[object]:
            if _is_async(fs):
                return self._concurrently("reading", [functools.partial(fs._size, paths[i]) for i in indices])
            return [size(paths[i]) for i in indices]

        return self._attempts(len(paths), once)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the value)."""
        return self.get_partial_values([(key, byte_range)])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of many keys in one batched call (concurrent on async filesystems)."""
        return self.get_partial_values([(k, None) for k in keys])

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys in one batched call (concurrent on async filesystems).

        Suffix ranges are sent as a negative start (HTTP/S3 ``bytes=-n``). A range the backend
        refuses (416, no suffix support, an empty value) is asked again by the values' sizes,
        all in one more batch; no other failure costs an extra request.
        """
        if self._local is not None:
            return self._local.get_partial_values(key_ranges)
        requests = self._requests(key_ranges)
        out = self._fetch(requests)
        refused = []
        for i, (request, (_, r)) in enumerate(zip(requests, key_ranges, strict=True)):
            if r is not None and r.length == 0:
                out[i] = _zero_length(out[i])
            elif _range_refused(request, out[i]):
                refused.append(i)
        if refused:
            self._refetch_by_size(refused, requests, key_ranges, out)
        return [self._value(path, res) for (path, _, _), res in zip(requests, out, strict=True)]

    def _requests(
        self, key_ranges: Sequence[tuple[str, ByteRange | None]]
    ) -> list[tuple[str, int | None, int | None]]:
        """The ``(path, start, end)`` request for each key and range (keys checked)."""
        # a whole value is asked for as "from byte 0": one GET, where s3fs would first ask for
        # the size (HEAD) to decide on a multi-part download
        whole = 0 if _is_async(self._fs) else None
        requests = []
        for key, r in key_ranges:
            path = self._path(key)
            if r is None:
                requests.append((path, whole, None))
            elif r.length == 0:  # no request can say "0 bytes": ask for one, to learn if it exists
                requests.append((path, 0, 1))
            else:
                requests.append((path, r.offset, None if r.length is None else r.offset + r.length))
        return requests

    def stream_partial_values(
        self, key_ranges: Sequence[tuple[str, ByteRange | None]], *, in_flight: int | None = None
    ) -> Iterator[tuple[int, BytesLike | None]]:
        """``(position, value)`` for each of ``key_ranges`` as it lands (see ``Store``). Async
        filesystems: one request per range on the filesystem's event loop, at most ``in_flight``
        (default: ``requests_in_flight``) outstanding or landed but not taken, each answer
        settled by ``get_partial_values``' rules when the consumer takes it; an answer those
        rules must follow up (a transient failure to retry, a refused or short range, whose
        value's size must be asked) goes through ``get_partial_values`` itself then. Closing
        the iterator early cancels the outstanding requests. Other filesystems: in batches."""
        if self._local is not None or not _is_async(self._fs):
            return super().stream_partial_values(key_ranges, in_flight=in_flight)
        limit = max(1, in_flight or self.settings.requests_in_flight)
        fs = self.fs
        http = _protocol(fs) in HTTP_PROTOCOLS
        for key, _ in key_ranges:  # keys checked now (those a RequestFeed gains: when sent)
            self._path(key)

        def request(i: int) -> tuple[tuple[str, int | None, int | None], tuple[str, int | None, int | None]]:
            """(the request for position ``i``, what is sent for it): pure, so each thread
            works it out itself (a RequestFeed may grow meanwhile)."""
            asked = self._requests([key_ranges[i]])[0]
            return asked, _as_sent(asked) if http else asked

        cat = checked_cat(fs)

        def call(i: int) -> Any:
            path, start, end = request(i)[1]
            return cat(path, start=start, end=end)

        landed = stream_bounded(fs.loop, key_ranges, call, limit, is_endpoint_down)
        return self._settle_stream(landed, key_ranges, request, http)

    def _settle_stream(
        self,
        landed: Iterator[tuple[int, object]],
        key_ranges: Sequence[tuple[str, ByteRange | None]],
        request_of: Callable[
            [int], tuple[tuple[str, int | None, int | None], tuple[str, int | None, int | None]]
        ],
        http: bool,
    ) -> Iterator[tuple[int, BytesLike | None]]:
        with contextlib.closing(landed):  # an early stop cancels what is still outstanding
            for i, result in landed:
                (request, sent), r = request_of(i), key_ranges[i][1]
                result = _clip(request, sent, result)
                if r is not None and r.length == 0:
                    result = _zero_length(result)
                if self._needs_follow_up(request, result, http):
                    yield i, self.get_partial_values([key_ranges[i]])[0]
                else:
                    yield i, self._value(request[0], result)

    def _needs_follow_up(
        self, request: tuple[str, int | None, int | None], result: object, http: bool
    ) -> bool:
        """Whether one landed answer needs more than ``_value`` (what ``get_partial_values``
        does after its first batch): a transient failure to send again (not an endpoint found
        down: that is final at once), a range refused, or on HTTP a range answered short (is it
        the value's tail, or a whole smaller value from a server ignoring ``Range``?)."""
        if _is_error(result):
            if _range_refused(request, result):
                return True
            return self._budget(result) > 0 and is_transient(result) and not is_endpoint_down(result)
        _, start, end = request
        return http and bool(start) and start > 0 and end is not None and len(result) < end - start

    def _refetch_by_size(
        self,
        indices: list[int],
        requests: list[tuple[str, int | None, int | None]],
        key_ranges: Sequence[tuple[str, ByteRange | None]],
        out: list[object],
    ) -> None:
        """Refused ranges: look the sizes up (one batch), clip, fetch absolute offsets (one more).
        A range inside the value refused again is a broken answer (ResponseMismatchError)."""
        sizes = self._sizes([requests[i][0] for i in indices])
        again = []
        for i, size in zip(indices, sizes, strict=True):
            if _is_error(size) or size is None:
                out[i] = size if _is_error(size) else OSError("the filesystem does not report the size")
                continue
            window = (key_ranges[i][1] or ByteRange(0)).slice(size)
            if window.start >= window.stop:
                out[i] = b""
            else:
                again.append((i, (requests[i][0], window.start, window.stop), size))
        for (i, (_, start, stop), size), result in zip(
            again, self._fetch([req for _, req, _ in again]), strict=True
        ):
            if _is_error(result) and is_unsatisfiable_range(result):
                refused = ResponseMismatchError(
                    f"HTTP 416 for bytes [{start}, {stop}) of a value of {size} bytes"
                )
                refused.__cause__ = result
                result = refused
            out[i] = result

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value: one ranged GET of its first byte, no listing."""
        return self.exists_many([key])[0]

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key holds a value, in one batched call (a ranged GET of one byte each;
        an empty value answers 416, which also means it exists)."""
        if self._local is not None:
            return [self._local.exists(k) for k in keys]
        paths = [self._path(k) for k in keys]
        found = []
        for path, result in zip(paths, self._fetch([(p, 0, 1) for p in paths]), strict=True):
            if not _is_error(result) or is_unsatisfiable_range(result):
                found.append(True)
            elif isinstance(result, _MISSING):
                self._missing_key(path, result, "checking")
                found.append(False)
            else:
                raise store_error("checking", self._key_url(path), result) from result
        return found

    # ---- writing ---------------------------------------------------------------------------
    def _payload(self, value: BytesLike) -> BytesLike:
        """``value`` as the filesystem takes it, copied only when it must be: bytes and
        bytearray go as they are; other buffers go as a flat byte view to filesystems that write
        any buffer (local, memory), and as bytes to object stores (botocore takes no views)."""
        if isinstance(value, bytes | bytearray):
            return value
        view = memoryview(value)
        if _is_async(self._fs) or not view.c_contiguous:
            return view.tobytes()
        return view.cast("B")

    def set(self, key: str, value: BytesLike) -> None:
        """Write ``value`` under ``key`` (one PUT on object stores)."""
        self.check_writable(key)
        if self._local is not None:
            self._local.set(key, value)
            return
        self._write({self._path(key): self._payload(value)})

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Write many values; every key is checked first. On object stores one PUT per key,
        at most ``requests_in_flight`` in flight; a failed key is named in the error, the others are
        written."""
        for key in items:
            self.check_writable(key)
        if self._local is not None:
            self._local.set_many(items)
            return
        data = {self._path(k): self._payload(v) for k, v in items.items()}
        if data:
            self._write(data)

    def _write(self, data: dict[str, BytesLike]) -> None:
        if _is_async(self._fs):
            self._put_each(data)
        else:
            self._pipe(data)

    def _put_each(self, data: dict[str, BytesLike]) -> None:
        """Object stores: one ``_pipe_file`` per key, transient failures sent again (bounded)."""
        items = list(data.items())
        fs = self.fs

        def once(indices: list[int]) -> list[object]:
            return self._concurrently(
                "writing", [functools.partial(fs._pipe_file, *items[i]) for i in indices]
            )

        results = self._attempts(len(items), once)
        failed = [(items[i][0], r) for i, r in enumerate(results) if _is_error(r)]
        if failed:
            (path, error), others = failed[0], len(failed) - 1
            note = f" (and {others} more keys)" if others else ""
            raise store_error("writing", self._key_url(path), error, note=note) from error

    def _pipe(self, data: dict[str, BytesLike]) -> None:
        """Filesystems with directories: one ``fs.pipe`` call, making parents when asked to."""
        where = self._key_url(next(iter(data))) if len(data) == 1 else f"{self.url} ({len(data)} keys)"
        try:
            self.fs.pipe(data)
            return
        except FileNotFoundError:
            pass
        except Exception as e:
            raise store_error("writing", where, e) from e

        def with_parents() -> None:
            for attempt in range(_WRITE_RETRIES):  # a concurrent erase may prune them again
                for parent in sorted({self.fs._parent(p) for p in data}):
                    self.fs.makedirs(parent, exist_ok=True)
                try:
                    self.fs.pipe(data)
                    return
                except FileNotFoundError:
                    if attempt == _WRITE_RETRIES - 1:
                        raise

        self._call("writing", where, with_parents)

    def move(self, src: str, dst: str) -> None:
        """A copy made by the backend (S3 CopyObject: no bytes through this process), then the
        erase of ``src``; readers of ``dst`` see the old or the new object. A missing ``src``
        does nothing (a re-run move)."""
        self.check_writable(dst)
        if self._local is not None:
            self._local.move(src, dst)
            return
        source, target = self._path(src), self._path(dst)

        def copy() -> bool:
            try:
                self.fs.copy(source, target)
                return True
            except _MISSING:
                return False

        if self._call("moving", self._key_url(target), copy):
            self._erase_one(source)

    def move_prefix(self, src: str, dst: str) -> None:
        """On object stores, every key under ``src`` copied by the backend to its name under
        ``dst`` in one batched ``fs.copy`` (each copy atomic for readers of its destination),
        then the sources erased in one batched ``fs.rm``: ``move`` per key cost a delete request
        each (a commit's staged values took three requests per chunk on S3, now two). A source
        already gone (moved by an earlier run of the same commit) is skipped. Filesystems with
        directories move key by key."""
        if self._local is not None or self._has_dirs:
            super().move_prefix(src, dst)
            return
        self.check_writable(dst or None)
        keys = list(self.list_prefix(src))
        if not keys:
            return
        targets = [dst + k[len(src) :] for k in keys]
        for target in targets:
            validate_key(target)
        sources, paths = [self._path(k) for k in keys], [self._path(t) for t in targets]
        # on_error="ignore" passes over missing sources only; any other failure is raised
        self._call(
            "moving",
            f"{self.url} ({len(keys)} keys from {keys[0]!r})",
            lambda: self.fs.copy(sources, paths, on_error="ignore"),
        )
        self.erase_many(keys)  # only once every copy is in place: a re-run copies them again

    def erase(self, key: str) -> None:
        """Remove ``key`` (and, on filesystems with directories, parents left empty)."""
        self.check_writable(key)
        if self._local is not None:
            self._local.erase(key)
            return
        self._erase_one(self._path(key))

    def _erase_one(self, path: str) -> None:
        def rm() -> bool:
            try:
                self.fs.rm_file(path)
                return True
            except _MISSING:
                return False

        if self._call("erasing", self._key_url(path), rm) and self._has_dirs:
            self._prune(path)

    def _prune(self, path: str) -> None:
        """Remove the now-empty directories between ``path`` and root."""
        directory = self.fs._parent(path)
        while len(directory) > len(self._prefix) and directory.startswith(self._prefix):
            try:
                self.fs.rmdir(directory)
            except FileNotFoundError:
                pass
            except Exception:
                return
            directory = self.fs._parent(directory)

    def erase_many(self, keys: Iterable[str]) -> None:
        """Remove many keys; one batched ``fs.rm`` on object stores. Missing keys are ignored."""
        keys = list(keys)
        for key in keys:
            self.check_writable(key)
        if self._local is not None:
            self._local.erase_many(keys)
            return
        paths = [self._path(k) for k in keys]
        plain = [p for p in paths if not _GLOB.search(p)]
        if plain and not self._has_dirs:

            def rm_all() -> bool:
                try:
                    self.fs.rm(plain)
                    return True
                except FileNotFoundError:
                    return False  # some were missing: go one by one below

            if self._call("erasing", f"{self.url} ({len(plain)} keys)", rm_all):
                plain = []
        for p in plain + [p for p in paths if _GLOB.search(p)]:
            self._erase_one(p)

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key under ``prefix``."""
        self.check_writable(prefix)
        if self._local is not None:
            self._local.erase_prefix(prefix)
            return
        super().erase_prefix(prefix)

    # ---- conditional writes ----------------------------------------------------------------
    def _run_conditional(self, action: str, key: str, op: Callable[..., Awaitable[T]], *args: Any) -> T:
        """One conditional operation on the filesystem's loop (transient failures retried: a
        repeated swap that had in fact succeeded merely loses, and the caller re-merges)."""
        if self._conditional is None:
            raise self._no_conditional_writes(key)
        fs, path = self.fs, self._path(key)
        return self._call(action, self._key_url(path), lambda: fsspec.asyn.sync(fs.loop, op, fs, path, *args))

    def get_versioned(self, key: str) -> tuple[bytes | None, Version | None]:
        """``(value, version)``: the LocalStore's on ``file://``, the ETag on S3."""
        if self._local is not None:
            return self._local.get_versioned(key)
        return self._run_conditional("reading", key, self._conditional.get)

    def set_if(self, key: str, value: BytesLike, expected: Version | None) -> bool:
        """Write only while the stored version is ``expected`` (S3: ``If-Match``/``If-None-Match``)."""
        self.check_writable(key)
        if self._local is not None:
            return self._local.set_if(key, value, expected)
        return self._run_conditional("writing", key, self._conditional.put, self._payload(value), expected)

    def erase_if(self, key: str, expected: Version) -> bool:
        """Remove only while the stored version is ``expected`` (S3: ``If-Match``)."""
        self.check_writable(key)
        if self._local is not None:
            return self._local.erase_if(key, expected)
        if expected is None:
            return False
        return self._run_conditional("erasing", key, self._conditional.delete, expected)

    # ---- listing ---------------------------------------------------------------------------
    def _missing_listing(self, path: str, error: BaseException) -> None:
        if is_missing_container(error):
            raise BucketNotFoundError(
                f"listing {self._key_url(path)!r} failed: the bucket of {self.url!r} does not exist: {error}"
            ) from error

    def _find(self, path: str) -> list[str]:
        def find() -> list[str]:
            self.fs.invalidate_cache(path)  # list what is there now, not a cached listing
            try:
                return self.fs.find(path)
            except _MISSING as e:
                self._missing_listing(path, e)
                return []

        found = self._call("listing", self._key_url(path), find)
        n = len(self._prefix)
        return [p[n:] for p in found if p.startswith(self._prefix) and len(p) > n]

    def list(self) -> Iterator[str]:
        """Every key under root (``fs.find``)."""
        if self._local is not None:
            return self._local.list()
        return iter(self._find(self.root))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix``; lists only the directory that can match."""
        if self._local is not None:
            return self._local.list_prefix(prefix)
        validate_prefix(prefix)
        parent = prefix[:-1] if prefix.endswith("/") else prefix.rpartition("/")[0]
        path = self._path(parent) if parent else self.root
        return iter([k for k in self._find(path) if k.startswith(prefix)])

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (``fs.ls``)."""
        if self._local is not None:
            return self._local.list_dir(prefix)
        prefix = dir_prefix(prefix)
        path = self._path(prefix[:-1]) if prefix else self.root

        def ls() -> list[str]:
            fs = self.fs
            fs.invalidate_cache(path)
            try:
                if _protocol(fs) in S3_PROTOCOLS and hasattr(fs, "_lsdir"):
                    # one LIST: s3fs' ls lists the parent too when a prefix is empty, to tell a
                    # missing directory from a file; a store needs neither answer
                    return [e["name"] for e in fsspec.asyn.sync(fs.loop, fs._lsdir, path, refresh=True)]
                return fs.ls(path, detail=False)
            except _MISSING as e:
                self._missing_listing(path, e)
                return []

        entries = self._call("listing", self._key_url(path), ls)
        base = self._prefix + prefix
        names = []
        for entry in entries:
            entry = entry.rstrip("/")
            if entry.startswith(base) and len(entry) > len(base):
                name = entry[len(base) :]
                if "/" not in name:
                    names.append(name)
        return iter(names)

    # ---- identity --------------------------------------------------------------------------
    def barrier(self) -> None:
        """On ``file://``, the LocalStore's (``durable``); other filesystems acknowledge a write
        once it is kept (object stores), or offer no flush to ask for."""
        if self._local is not None and not self.read_only:
            self._local.barrier()

    def with_read_only(self, read_only: bool = True) -> FsspecStore:
        """A store on the same filesystem, root and settings with another read-only flag."""
        other = copy.copy(self)
        other.read_only = read_only
        return other

    @property
    def data_identity(self) -> Hashable:
        """The root as a URL."""
        return (FsspecStore, self.url)

    def __eq__(self, other: object) -> bool:
        """Equal when filesystem (fsspec's token), root and flag are equal."""
        if not isinstance(other, FsspecStore):
            return NotImplemented
        return self._fs == other._fs and self.root == other.root and self.read_only == other.read_only

    def __hash__(self) -> int:
        return hash((FsspecStore, self.url, self.read_only))

    def __repr__(self) -> str:
        return f"FsspecStore({self.url!r}, read_only={self.read_only})"

    def __reduce__(self):
        """Pickle by configuration: the unpickling process makes the filesystem anew from its
        class and arguments, never sharing a live connection or event loop."""
        fs = self._fs
        return _rebuild, (
            type(fs),
            tuple(getattr(fs, "storage_args", ())),
            dict(fs.storage_options),
            self.root,
            self.read_only,
            dict(self.setting_overrides),
            self.retries,
            self._origin,
            self.unguarded_partial_writes,
        )


def _zero_length(result: object) -> object:
    """A 0-byte range's answer (one byte was asked): empty when the value exists."""
    return b"" if not _is_error(result) or is_unsatisfiable_range(result) else result


def _range_refused(request: tuple[str, int | None, int | None], result: object) -> bool:
    """A ranged request the backend refused (416, no suffix support): to ask by size."""
    _, start, end = request
    return _is_error(result) and (start is not None or end is not None) and is_range_refused(result)


def _as_sent(request: tuple[str, int | None, int | None]) -> tuple[str, int | None, int | None]:
    """HTTP: a range from an offset to the end is asked as the whole value (see ``_clip``)."""
    path, start, end = request
    return (path, 0, None) if start is not None and start > 0 and end is None else request


def _clip(request: tuple[str, int | None, int | None], sent: tuple, result: object) -> object:
    """The bytes ``request`` asked for out of ``result``: a bounded or suffix range answered
    with more bytes than it spans was answered with the whole value (a server that ignores
    ``Range``), so the range is cut out of it; so is a range ``_as_sent`` asked whole."""
    _, start, end = request
    if _is_error(result) or start is None:
        return result
    if sent != request:
        return result[start:]
    if start < 0:
        return result[start:] if len(result) > -start else result
    if end is not None and len(result) > end - start:
        return result[start:end]
    return result


def _protocol(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return p if isinstance(p, str) else p[0]
