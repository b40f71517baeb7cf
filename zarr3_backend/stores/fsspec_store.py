"""FsspecStore: a store over any fsspec filesystem (memory, file, s3, gcs, http, ...).

Batched reads go through one ``fs.cat`` / ``fs.cat_ranges`` call, which async filesystems
(s3fs, gcsfs, http) run concurrently; batched writes through one ``fs.pipe`` call. The store
pickles by configuration (protocol, root, storage_options), never by a live connection.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import fsspec
import fsspec.core

from ..byte_range import ByteRange
from ..errors import StoreError, Zarr3Error
from .base import BytesLike, Store, StoreArgumentError, dir_prefix, validate_key, validate_prefix

T = TypeVar("T")

_GLOB = re.compile(r"[*?\[]")  # fs.cat / fs.rm would expand these; such paths go one by one
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_WRITE_RETRIES = 5


def _fsspec_store_from_config(
    protocol: str, storage_options: dict[str, Any], root: str, read_only: bool
) -> FsspecStore:
    """Pickle helper: rebuild the filesystem in this process, then the store on it."""
    return FsspecStore(fsspec.filesystem(protocol, **storage_options), root, read_only=read_only)


class FsspecStore(Store):
    """A store over an fsspec filesystem, rooted at ``root`` (a path on that filesystem).

    Missing keys read as ``None``; any other backend failure raises StoreError naming the URL.
    A byte range that runs past the end of a value returns the bytes that exist.
    Writes are as atomic as the filesystem's own (object stores: yes; "file": no, use
    LocalStore, which ``make_store`` picks for local paths).
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, *, read_only: bool = False) -> None:
        if not isinstance(fs, fsspec.AbstractFileSystem):
            raise StoreArgumentError(f"FsspecStore needs an fsspec filesystem, got {type(fs).__name__}")
        if getattr(fs, "async_impl", False) and getattr(fs, "asynchronous", False):
            raise StoreArgumentError(
                f"FsspecStore needs a filesystem made with asynchronous=False, got {fs!r} for root {root!r}"
            )
        super().__init__(read_only=read_only)
        self.fs = fs
        stripped = fs._strip_protocol(root)
        self.root: str = stripped.rstrip("/") or stripped
        self._prefix = "" if not self.root else self.root if self.root.endswith("/") else self.root + "/"

    @classmethod
    def from_url(
        cls, url: str, storage_options: dict[str, Any] | None = None, read_only: bool = False
    ) -> FsspecStore:
        """A store for an fsspec URL such as ``"s3://bucket/data.zarr"`` or ``"memory://x"``."""
        try:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError, TypeError) as e:
            raise StoreArgumentError(f"cannot open an fsspec filesystem for {url!r}: {e}") from e
        return cls(fs, path, read_only=read_only)

    # ---- configuration ---------------------------------------------------------------------
    @property
    def protocol(self) -> str:
        """The filesystem's protocol name, as ``fsspec.filesystem`` takes it."""
        p = self.fs.protocol
        return p if isinstance(p, str) else p[0]

    @property
    def storage_options(self) -> dict[str, Any]:
        """The keyword arguments the filesystem was made with."""
        return dict(self.fs.storage_options)

    @property
    def url(self) -> str:
        """The root as a URL (``"memory:///x"``, ``"s3://bucket/data.zarr"``)."""
        return self.fs.unstrip_protocol(self.root)

    @property
    def _has_dirs(self) -> bool:
        # Sync fsspec filesystems (local, memory, sftp, ...) have real directories; the async
        # ones (s3, gcs, abfs, http) are object stores where a write needs no parent.
        return not getattr(self.fs, "async_impl", False)

    def _path(self, key: str) -> str:
        return self._prefix + validate_key(key)

    def _key_url(self, path: str) -> str:
        return self.fs.unstrip_protocol(path)

    def _call(self, action: str, where: str, fn: Callable[[], T]) -> T:
        """Run one fsspec call; a failure other than our own errors becomes StoreError."""
        try:
            return fn()
        except Zarr3Error:
            raise
        except Exception as e:
            raise StoreError(f"{action} {where!r} failed: {type(e).__name__}: {e}") from e

    def _value(self, path: str, result: object) -> bytes | None:
        """One result of cat/cat_ranges: bytes, None for a missing key, else StoreError."""
        if isinstance(result, _MISSING):
            return None
        if isinstance(result, BaseException):
            raise StoreError(
                f"reading {self._key_url(path)!r} failed: {type(result).__name__}: {result}"
            ) from result
        return bytes(result)

    # ---- reading ---------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the value)."""
        if byte_range is None:
            return self.get_many([key])[0]
        return self.get_partial_values([(key, byte_range)])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of many keys through one ``fs.cat`` call (concurrent on async filesystems)."""
        paths = [self._path(k) for k in keys]
        plain = sorted({p for p in paths if not _GLOB.search(p)})
        globby = sorted({p for p in paths if _GLOB.search(p)})
        results: dict[str, object] = {}
        if plain:
            out = self._call("reading", self.url, lambda: self.fs.cat(plain, on_error="return"))
            strip = self.fs._strip_protocol
            for p in plain:
                results[p] = out[p] if p in out else out.get(strip(p), FileNotFoundError(p))
        if globby:
            n = len(globby)
            out = self._call(
                "reading",
                self.url,
                lambda: self.fs.cat_ranges(globby, [None] * n, [None] * n, on_error="return"),
            )
            results.update(zip(globby, out, strict=True))
        return [self._value(p, results[p]) for p in paths]

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys through one ``fs.cat_ranges`` call.

        Suffix ranges are sent as a negative start (HTTP/S3 ``bytes=-n``); a filesystem that
        refuses that, or a range past the end, is retried with the value's size.
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
            paths = [requests[i][0] for i in batch]
            starts: list[int | None] = []
            ends: list[int | None] = []
            for i in batch:
                r = requests[i][1]
                starts.append(None if r is None else r.offset)
                ends.append(None if r is None or r.length is None else r.offset + r.length)
            got = self._call(
                "reading", self.url, lambda: self.fs.cat_ranges(paths, starts, ends, on_error="return")
            )
            for i, result in zip(batch, got, strict=True):
                path, r = requests[i]
                if r is not None and isinstance(result, BaseException) and not isinstance(result, _MISSING):
                    result = self._range_by_size(path, r)
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
        """Whether ``key`` is a file."""
        path = self._path(key)
        return self._call("checking", self._key_url(path), lambda: self.fs.isfile(path))

    # ---- writing ---------------------------------------------------------------------------
    def set(self, key: str, value: BytesLike) -> None:
        """Write ``value`` under ``key`` with ``fs.pipe``."""
        self.check_writable(key)
        self._pipe({self._path(key): bytes(value)})

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Write many values with one ``fs.pipe`` call; every key is checked first."""
        for key in items:
            self.check_writable(key)
        data = {self._path(k): bytes(v) for k, v in items.items()}
        if data:
            self._pipe(data)

    def _pipe(self, data: dict[str, bytes]) -> None:
        where = self._key_url(next(iter(data))) if len(data) == 1 else f"{self.url} ({len(data)} keys)"
        try:
            self.fs.pipe(data)
            return
        except FileNotFoundError as e:
            if not self._has_dirs:
                raise StoreError(f"writing {where!r} failed: {type(e).__name__}: {e}") from e
        except Exception as e:
            raise StoreError(f"writing {where!r} failed: {type(e).__name__}: {e}") from e

        def with_parents() -> None:  # a filesystem with directories wants the parents first
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
        try:
            self.fs.rm_file(path)
        except _MISSING:
            return
        except Exception as e:
            raise StoreError(f"erasing {self._key_url(path)!r} failed: {type(e).__name__}: {e}") from e
        if self._has_dirs:
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
            try:
                self.fs.rm(plain)
                plain = []
            except FileNotFoundError:
                pass  # some were missing: go one by one below
            except Exception as e:
                raise StoreError(f"erasing {len(plain)} keys under {self.url!r} failed: {e}") from e
        for p in plain + [p for p in paths if _GLOB.search(p)]:
            self._erase_one(p)

    # ---- listing ---------------------------------------------------------------------------
    def _find(self, path: str) -> list[str]:
        try:
            found = self.fs.find(path)
        except _MISSING:
            return []
        except Exception as e:
            raise StoreError(f"listing {self._key_url(path)!r} failed: {type(e).__name__}: {e}") from e
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
        try:
            entries = self.fs.ls(path, detail=False)
        except _MISSING:
            return iter([])
        except Exception as e:
            raise StoreError(f"listing {self._key_url(path)!r} failed: {type(e).__name__}: {e}") from e
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
        """A store on the same filesystem and root with another read-only flag."""
        return FsspecStore(self.fs, self.root, read_only=read_only)

    def __eq__(self, other: object) -> bool:
        """Equal when filesystem (fsspec's token), root and flag are equal."""
        if not isinstance(other, FsspecStore):
            return NotImplemented
        return self.fs == other.fs and self.root == other.root and self.read_only == other.read_only

    def __hash__(self) -> int:
        return hash((FsspecStore, self.url, self.read_only))

    def __repr__(self) -> str:
        return f"FsspecStore({self.url!r}, read_only={self.read_only})"

    def __reduce__(self):
        """Pickle by (protocol, storage_options, root, flag): the unpickling process rebuilds
        the filesystem with ``fsspec.filesystem``, never sharing a live connection."""
        return _fsspec_store_from_config, (self.protocol, self.storage_options, self.root, self.read_only)
