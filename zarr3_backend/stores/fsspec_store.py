"""FsspecStore: a store over any fsspec filesystem (memory, file, s3, gcs, http, ...).

Batched reads go through one ``fs.cat_ranges`` call, which async filesystems (s3fs, gcsfs, http)
run concurrently, at most ``batch_size`` requests at a time; missing keys come back as values
(``on_error="return"``), never as an exception round trip per key. On async filesystems batched
writes are one PUT per key, all in flight together. Transient failures (timeouts, dropped
connections, 5xx) are retried a bounded number of times; what still fails raises a typed
StoreError naming the URL (see ``fsspec_errors``).

The store pickles by configuration (filesystem class, its arguments, root, options), never by
a live connection, and rebuilds its filesystem in a process forked after it was used.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import fsspec
import fsspec.asyn
import fsspec.core

from ..byte_range import ByteRange
from ..errors import Zarr3Error
from .base import BytesLike, Store, StoreArgumentError, dir_prefix, validate_key, validate_prefix
from .fsspec_errors import BucketNotFoundError, is_missing_container, is_transient, store_error

T = TypeVar("T")

_GLOB = re.compile(r"[*?\[]")  # fs.rm would expand these; such paths are erased one by one
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_WRITE_RETRIES = 5  # directory filesystems: a concurrent erase may prune a parent we just made

#: Retries of transient failures when the filesystem does not retry by itself.
DEFAULT_RETRIES = 3
#: Seconds before the first retry; doubled for each further one.
RETRY_BACKOFF = 0.1
#: Protocols that can only be read (plain HTTP servers).
READ_ONLY_PROTOCOLS = frozenset({"http", "https"})


def _rebuild(
    fs_class: type,
    args: tuple,
    options: dict[str, Any],
    root: str,
    read_only: bool,
    batch_size: int | None,
    retries: int | None,
) -> FsspecStore:
    """Pickle helper: make the filesystem anew in this process, then the store on it."""
    return FsspecStore(
        fs_class(*args, **options), root, read_only=read_only, batch_size=batch_size, retries=retries
    )


def _is_error(result: object) -> bool:
    return isinstance(result, BaseException)


def _is_async(fs: fsspec.AbstractFileSystem) -> bool:
    return bool(getattr(fs, "async_impl", False))


async def _pipe_each(fs: Any, items: list[tuple[str, bytes]], batch_size: int | None) -> list[object]:
    """One ``_pipe_file`` per item, ``batch_size`` at a time; exceptions returned in place."""
    coros = [fs._pipe_file(path, value) for path, value in items]
    return await fsspec.asyn._run_coros_in_chunks(
        coros, batch_size=batch_size, nofiles=True, return_exceptions=True
    )


class FsspecStore(Store):
    """A store over an fsspec filesystem, rooted at ``root`` (a path on that filesystem).

    ``batch_size`` bounds how many requests one batched call keeps in flight (None: fsspec's
    configured default). ``retries`` is how often a transiently failed request is sent again
    (None: 0 when the filesystem retries by itself, as s3fs and gcsfs do, else
    ``DEFAULT_RETRIES``). Missing keys read as ``None``; other failures raise StoreError (or a
    subclass) naming the URL. A byte range that runs past the end of a value returns the bytes
    that exist. Writes are as atomic as the filesystem's own (object stores: yes; "file": no,
    use LocalStore, which ``make_store`` picks for local paths).
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        *,
        read_only: bool = False,
        batch_size: int | None = None,
        retries: int | None = None,
    ) -> None:
        if not isinstance(fs, fsspec.AbstractFileSystem):
            raise StoreArgumentError(f"FsspecStore needs an fsspec filesystem, got {type(fs).__name__}")
        if _is_async(fs) and getattr(fs, "asynchronous", False):
            raise StoreArgumentError(
                f"FsspecStore needs a filesystem made with asynchronous=False, got {fs!r} for root {root!r}"
            )
        for name, value in (("batch_size", batch_size), ("retries", retries)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise StoreArgumentError(
                    f"FsspecStore {name} must be a non-negative int or None, got {value!r}"
                )
        if batch_size == 0:
            raise StoreArgumentError("FsspecStore batch_size must be at least 1 (or None)")
        super().__init__(read_only=read_only)
        self._fs = fs
        self._pid = os.getpid()
        self.batch_size = batch_size
        self.retries = retries
        stripped = fs._strip_protocol(root)
        self.root: str = stripped.rstrip("/") or stripped
        self._prefix = "" if not self.root else self.root if self.root.endswith("/") else self.root + "/"

    @classmethod
    def from_url(
        cls,
        url: str,
        storage_options: dict[str, Any] | None = None,
        read_only: bool | None = None,
        *,
        batch_size: int | None = None,
        retries: int | None = None,
    ) -> FsspecStore:
        """A store for an fsspec URL such as ``"s3://bucket/data.zarr"`` or ``"memory://x"``.

        ``storage_options`` go to the filesystem unchanged (endpoint, credentials, anon, ...).
        ``read_only=None`` means read-only for http(s) URLs, writable otherwise.
        """
        try:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError, TypeError) as e:
            raise StoreArgumentError(f"cannot open an fsspec filesystem for {url!r}: {e}") from e
        if read_only is None:
            read_only = _protocol(fs) in READ_ONLY_PROTOCOLS
        return cls(fs, path, read_only=read_only, batch_size=batch_size, retries=retries)

    # ---- configuration ---------------------------------------------------------------------
    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem; an async one is made anew in a process forked after it was used
        (its event loop and connections stayed behind in the parent)."""
        if self._pid != os.getpid():
            if _is_async(self._fs):
                self._fs = type(self._fs)(*self._fs.storage_args, **self._fs.storage_options)
            self._pid = os.getpid()
        return self._fs

    @property
    def protocol(self) -> str:
        """The filesystem's protocol name, as ``fsspec.filesystem`` takes it."""
        return _protocol(self._fs)

    @property
    def storage_options(self) -> dict[str, Any]:
        """The keyword arguments the filesystem was made with."""
        return dict(self._fs.storage_options)

    @property
    def url(self) -> str:
        """The root as a URL (``"memory:///x"``, ``"s3://bucket/data.zarr"``)."""
        return self._fs.unstrip_protocol(self.root)

    @property
    def cache_shard_index(self) -> bool:
        """Object stores (async filesystems) ask the core to cache shard indexes: a request
        there costs a round trip."""
        return _is_async(self._fs)

    @property
    def _has_dirs(self) -> bool:
        # Sync fsspec filesystems (local, memory, sftp, ...) have real directories; the async
        # ones (s3, gcs, abfs, http) are object stores where a write needs no parent.
        return not _is_async(self._fs)

    @property
    def _retries(self) -> int:
        if self.retries is not None:
            return self.retries
        return 0 if isinstance(getattr(self._fs, "retries", None), int) else DEFAULT_RETRIES

    def _batch_kwargs(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size} if self.batch_size and _is_async(self._fs) else {}

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
                if attempt < self._retries and is_transient(e):
                    self._pause(attempt)
                    attempt += 1
                    continue
                raise store_error(action, where, e) from e

    def _value(self, path: str, result: object) -> bytes | None:
        """One fetched result: bytes, None for a missing key, else a typed StoreError."""
        if isinstance(result, _MISSING):
            if is_missing_container(result):
                raise BucketNotFoundError(
                    f"reading {self._key_url(path)!r} failed: the bucket of {self.url!r} does not exist: {result}"
                ) from result
            return None
        if isinstance(result, BaseException):
            raise store_error("reading", self._key_url(path), result) from result
        return bytes(result)

    # ---- reading ---------------------------------------------------------------------------
    def _fetch(self, requests: Sequence[tuple[str, int | None, int | None]]) -> list[object]:
        """``(path, start, end)`` requests through ``fs.cat_ranges``; each result is bytes or
        the exception it raised. Transient failures are sent again (bounded), alone."""
        results: list[object] = [None] * len(requests)
        pending = list(range(len(requests)))
        attempt = 0
        while pending:
            call = functools.partial(
                self.fs.cat_ranges,
                [requests[i][0] for i in pending],
                [requests[i][1] for i in pending],
                [requests[i][2] for i in pending],
                on_error="return",
                **self._batch_kwargs(),
            )
            got = self._call("reading", self.url, call)
            for i, result in zip(pending, got, strict=True):
                results[i] = result
            pending = [i for i in pending if _is_error(results[i]) and is_transient(results[i])]
            if attempt >= self._retries:
                break
            if pending:
                self._pause(attempt)
            attempt += 1
        return results

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the value)."""
        return self.get_partial_values([(key, byte_range)])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of many keys through one concurrent ``fs.cat_ranges`` call."""
        return self.get_partial_values([(k, None) for k in keys])

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys through one concurrent ``fs.cat_ranges`` call.

        Suffix ranges are sent as a negative start (HTTP/S3 ``bytes=-n``); a range the
        filesystem refuses (no suffix support, start past the end) is retried by the value's size.
        """
        requests = [(self._path(k), r) for k, r in key_ranges]
        out: list[object] = [None] * len(requests)
        batch = []
        for i, (path, r) in enumerate(requests):
            if r is not None and r.length == 0:  # no request can say "0 bytes": ask if it exists
                out[i] = b"" if self.exists(key_ranges[i][0]) else FileNotFoundError(path)
            else:
                batch.append(i)
        if batch:
            # a whole value is asked for as "from byte 0": one GET, where s3fs would first ask
            # for the size (HEAD) to decide on a multi-part download
            whole = 0 if _is_async(self._fs) else None
            fetch = []
            for i in batch:
                path, r = requests[i]
                end = None if r is None or r.length is None else r.offset + r.length
                fetch.append((path, whole if r is None else r.offset, end))
            for i, result in zip(batch, self._fetch(fetch), strict=True):
                path, r = requests[i]
                if _is_error(result) and not isinstance(result, _MISSING) and not is_transient(result):
                    if r is not None or whole is not None:  # a range refused (e.g. 416 on b"")
                        result = self._range_by_size(path, r or ByteRange(0))
                out[i] = result
        return [self._value(path, res) for (path, _), res in zip(requests, out, strict=True)]

    def _range_by_size(self, path: str, byte_range: ByteRange) -> object:
        """Fallback for one range: look up the size, clip, and fetch absolute offsets."""
        try:
            size = self.fs.size(path)
            if size is None:
                raise OSError("the filesystem does not report the size")
            window = byte_range.slice(size)
            if window.start >= window.stop:
                return b""
            return self.fs.cat_file(path, start=window.start, end=window.stop)
        except Exception as e:
            return e

    def exists(self, key: str) -> bool:
        """Whether ``key`` is a file (asks the backend, not a cached listing)."""
        path = self._path(key)

        def check() -> bool:
            self.fs.invalidate_cache(path)
            return self.fs.isfile(path)

        return self._call("checking", self._key_url(path), check)

    # ---- writing ---------------------------------------------------------------------------
    def set(self, key: str, value: BytesLike) -> None:
        """Write ``value`` under ``key`` (one PUT on object stores)."""
        self.check_writable(key)
        self._write({self._path(key): bytes(value)})

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Write many values; every key is checked first. On object stores one PUT per key,
        concurrently; a failed key is named in the error, the others are written."""
        for key in items:
            self.check_writable(key)
        data = {self._path(k): bytes(v) for k, v in items.items()}
        if data:
            self._write(data)

    def _write(self, data: dict[str, bytes]) -> None:
        if _is_async(self._fs):
            self._put_each(data)
        else:
            self._pipe(data)

    def _put_each(self, data: dict[str, bytes]) -> None:
        """Object stores: one ``_pipe_file`` per key, transient failures sent again (bounded)."""
        pending = list(data.items())
        attempt = 0
        while True:
            fs = self.fs
            call = functools.partial(fsspec.asyn.sync, fs.loop, _pipe_each, fs, pending, self.batch_size)
            results = self._call("writing", self.url, call)
            failed = [(item, r) for item, r in zip(pending, results, strict=True) if _is_error(r)]
            if not failed:
                return
            if attempt < self._retries and all(is_transient(r) for _, r in failed):
                self._pause(attempt)
                attempt += 1
                pending = [item for item, _ in failed]
                continue
            (path, _), error = failed[0]
            others = f" (and {len(failed) - 1} more keys)" if len(failed) > 1 else ""
            raise store_error("writing", self._key_url(path), error, note=others) from error

    def _pipe(self, data: dict[str, bytes]) -> None:
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

    def erase(self, key: str) -> None:
        """Remove ``key`` (and, on filesystems with directories, parents left empty)."""
        self.check_writable(key)
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
        return iter(self._find(self.root))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix``; lists only the directory that can match."""
        validate_prefix(prefix)
        parent = prefix[:-1] if prefix.endswith("/") else prefix.rpartition("/")[0]
        path = self._path(parent) if parent else self.root
        return iter([k for k in self._find(path) if k.startswith(prefix)])

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (``fs.ls``)."""
        prefix = dir_prefix(prefix)
        path = self._path(prefix[:-1]) if prefix else self.root

        def ls() -> list[str]:
            self.fs.invalidate_cache(path)
            try:
                return self.fs.ls(path, detail=False)
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
    def with_read_only(self, read_only: bool = True) -> FsspecStore:
        """A store on the same filesystem, root and options with another read-only flag."""
        return FsspecStore(
            self.fs, self.root, read_only=read_only, batch_size=self.batch_size, retries=self.retries
        )

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
            self.batch_size,
            self.retries,
        )


def _protocol(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return p if isinstance(p, str) else p[0]
