"""LocalStore: the Zarr v3 file-system store (key ``"a/b/c"`` is the file ``root/a/b/c``).

Writes are atomic (temporary file in the same directory, then ``os.replace``), keys can never
reach outside the root (validated, then the resolved path is checked), and batched calls run
on the "io" thread pool.

Temporary files are named after their writer (``.z3tmp-<host tag>.<owner token>.<random>``,
see ``_owner``): the first write into a directory through a store object removes the ones
whose writer, on this host, is certainly dead (killed mid-write), never a live writer's nor
another host's. Conditional writes
(``set_if``/``erase_if``) hold an exclusive ``flock`` on the key's directory around the check
of the stored file's version and the rename. A version is ``(device, inode, mtime_ns, size,
crc32c)``: the checksum, compared only when the rest matches, catches a freed inode reused
within one coarse mtime tick for a value of the same size. Both need Linux (``/proc``, ``*at``
calls); elsewhere the store has no conditional writes and leaves temporary files alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from crc32c import crc32c

from .._owner import current_owner, host_tag, token_is_dead
from .._threads import thread_map
from ..byte_range import ByteRange
from ..errors import InvalidKeyError, StoreError
from .base import BytesLike, Store, Version, dir_prefix, rebuild_store, validate_key, validate_prefix

try:
    import fcntl
except ImportError:  # Windows: no flock, so no conditional writes
    fcntl = None

#: Names of in-flight temporary files start with this; they are never listed as keys, and keys
#: with a segment starting with it are refused.
TEMP_PREFIX = ".z3tmp-"

#: The store-wide lock file of file systems that cannot lock directories (never a key: it
#: starts with TEMP_PREFIX, and it is not a temporary file name ``_temp_name`` makes).
LOCK_NAME = TEMP_PREFIX + "lock"

_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_WRITE_RETRIES = 20  # each retry means a concurrent erase pruned the directory: progress
_PROC_FD = os.path.isdir("/proc/self/fd")  # Linux: an open file's real path is one readlink away
# writes open the target directory once, check it, and create/rename relative to it
_DIR_FD = (
    _PROC_FD
    and hasattr(os, "O_DIRECTORY")
    and {os.open, os.rename, os.unlink, os.mkdir} <= os.supports_dir_fd
)


#: O_PATH (Linux): the directory needs search permission only, as creating a file in it does
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0)
#: a directory opened to hold a flock on it (O_PATH descriptors cannot be locked)
_LOCK_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
_UNCONDITIONAL = object()  # ``_write``'s ``expected`` for a plain ``set``


def _temp_name() -> str:
    """A new temporary file name carrying this writer's identity (see ``dead_writers_temp``)."""
    owner = current_owner()
    return f"{TEMP_PREFIX}{host_tag(owner.host)}.{owner.token()}.{secrets.token_hex(6)}"


def temp_file_writer(name: str) -> tuple[str, str] | None:
    """``(host tag, owner token)`` of the writer a temporary file name carries, or ``None`` for
    names not made by ``_temp_name`` (older writers, or not a temporary file)."""
    parts = name[len(TEMP_PREFIX) :].split(".")
    if not name.startswith(TEMP_PREFIX) or len(parts) != 3:
        return None
    return parts[0], parts[1]


def dead_writers_temp(name: str) -> bool:
    """Whether ``name`` is a temporary file of a writer on this host that is certainly gone;
    never for another host's writers or for names not made by ``_temp_name``."""
    writer = temp_file_writer(name)
    return writer is not None and writer[0] == host_tag(current_owner().host) and token_is_dead(writer[1])


def _has_utf8_form(name: str) -> bool:
    """Whether a file name decoded by ``os.fsdecode`` is text (no lone surrogates)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _file_id(info: os.stat_result) -> tuple[int, int, int, int]:
    """The cheap part of a stored file's version: a rename-into-place makes a new inode."""
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)


def _fd_path(fd: int) -> str:
    """The real path of an open file or directory (Linux ``/proc/self/fd``). The kernel appends
    " (deleted)" once it is unlinked; that suffix is dropped only then, so a real sibling named
    "<root> (deleted)" is never taken for the root."""
    real = os.readlink(f"/proc/self/fd/{fd}")
    if real.endswith(" (deleted)") and os.fstat(fd).st_nlink == 0:
        real = real.removesuffix(" (deleted)")
    return real


def _write_all(fd: int, value: BytesLike) -> None:
    """Write every byte of ``value`` (any C-contiguous buffer) to ``fd``."""
    view = memoryview(value)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    """Up to ``length`` bytes at ``offset`` (fewer only at end of file), in as few reads as the
    kernel allows."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class FileReader:
    """One open file of a ``LocalStore`` for several positioned reads: one open and one path
    check however many ranges are read (``LocalStore.open_reader``). Thread-safe: ``preadv``
    does not move a shared file position."""

    __slots__ = ("_fd", "_store", "key", "size")

    def __init__(self, store: LocalStore, key: str, fd: int, size: int) -> None:
        self._store, self.key, self._fd, self.size = store, key, fd, size

    def read_into(self, offset: int, buffers: Sequence[memoryview]) -> int:
        """Fill ``buffers`` (writable byte views) in order from ``offset``: one vectored read
        unless the kernel returns less. The bytes read: short only at the end of the file."""
        want = sum(len(b) for b in buffers)
        got = 0
        pending = list(buffers)
        try:
            while got < want:
                n = os.preadv(self._fd, pending, offset + got)
                if n == 0:  # end of file
                    break
                got += n
                while pending and n >= len(pending[0]):
                    n -= len(pending.pop(0))
                if n:
                    pending[0] = pending[0][n:]
        except OSError as e:
            raise self._store._error("reading", self.key, e) from e
        return got

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_version(dfd: int, name: str, expected: object) -> bool:
    """Whether the file ``name`` in directory ``dfd`` is at version ``expected`` (None: missing);
    its bytes are read (for the checksum) only when everything else already matches."""
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
    except _MISSING:
        return expected is None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return expected is None
        if expected is None or _file_id(info) != expected[:4]:
            return False
        return crc32c(_pread_all(fd, 0, info.st_size)) == expected[4]
    finally:
        os.close(fd)


#: flock failures meaning "this file system cannot lock a directory" (NFS emulates flock with
#: POSIX locks, which need a descriptor open for writing): the store-wide lock file is used
_NO_DIR_LOCK = frozenset({errno.EBADF, errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP})
#: POSIX locks belong to the process, not the descriptor: threads take this one first
_PROCESS_LOCK = threading.Lock()


class _DirLock:
    """An exclusive ``flock`` on an open directory, released (and the descriptor closed) on
    exit; held only around a version check and one rename or unlink. Where directories cannot
    be locked, a POSIX lock on the store's lock file ``fallback`` (one for the whole store)."""

    __slots__ = ("_fallback", "_fd", "_thread_lock")

    def __init__(self, fd: int, fallback: str) -> None:
        self._fd, self._fallback, self._thread_lock = fd, fallback, None

    def __enter__(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            return
        except OSError as e:
            os.close(self._fd)
            self._fd = -1
            if e.errno not in _NO_DIR_LOCK:
                raise
        except BaseException:
            os.close(self._fd)
            raise
        _PROCESS_LOCK.acquire()
        self._thread_lock = _PROCESS_LOCK
        try:
            self._fd = os.open(self._fallback, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor releases the lock
            self._fd = -1
        if self._thread_lock is not None:
            self._thread_lock.release()
            self._thread_lock = None


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` (Linux), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs() if sys.platform.startswith("linux") else None


def flush_file_system(path: str) -> None:
    """Put every write to the file system holding ``path`` on disk, directory entries included.

    Written by hand: Python has ``os.sync``, which flushes every file system of the machine,
    but not Linux's ``syncfs``, which flushes only this one (one call covers every file of a
    commit step, where ``fsync`` would take one call per file and per directory)."""
    if _SYNCFS is None:
        sync = getattr(os, "sync", None)  # macOS and the BSDs: the whole machine
        if sync is None:  # Windows has neither: say so (typed by the caller), never skip it
            raise OSError(errno.ENOTSUP, "no syncfs or sync on this platform", path)
        sync()
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


class LocalStore(Store):
    """A store over a directory of the local file system.

    A missing key, or a key naming a directory, reads as ``None``. A byte range that runs past
    the end of a value returns the bytes that exist (possibly ``b""``).
    """

    #: ``flock`` on directory descriptors and ``*at`` calls (Linux): see the module docstring
    supports_conditional_writes = _DIR_FD and fcntl is not None

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        read_only: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(read_only=read_only, settings=settings)
        self.root = os.path.abspath(os.fspath(root))
        self._real_root = os.path.realpath(self.root)
        self._swept: set[str] = set()  # directories already cleared of dead writers' temp files

    # ---- keys and paths --------------------------------------------------------------------
    def _key_path(self, key: str) -> str:
        """The file path of ``key`` after refusing malformed keys (symlinks not yet checked)."""
        validate_key(key)
        parts = key.split("/")
        if any(p.startswith(TEMP_PREFIX) for p in parts):
            raise InvalidKeyError(
                f"invalid store key {key!r}: names starting with {TEMP_PREFIX!r} are reserved"
            )
        return os.path.join(self.root, *parts)

    def _path(self, key: str) -> str:
        """The file path of ``key``, refusing keys that are malformed or resolve outside root."""
        path = self._key_path(key)
        self._check_inside(key, os.path.realpath(path))
        return path

    def _check_inside(self, key: str, real: str) -> None:
        if not self._inside(real):
            raise InvalidKeyError(f"store key {key!r} resolves outside the store root {self.root!r}")

    def _inside(self, real: str) -> bool:
        root = self._real_root
        return real == root or real.startswith(root if root.endswith(os.sep) else root + os.sep)

    def _open_read(self, key: str, path: str) -> int | None:
        """An fd open for reading ``path`` (from ``_key_path``), or ``None`` when missing; the
        opened file's real path (one readlink of ``/proc/self/fd``, else ``realpath``) must lie
        inside root, so symlinks cannot escape and no per-component ``lstat`` walk is needed."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except _MISSING:
            self._check_inside(key, os.path.realpath(path))  # a refused key stays refused
            return None
        except OSError as e:
            raise self._error("reading", key, e) from e
        try:
            self._check_inside(key, _fd_path(fd) if _PROC_FD else os.path.realpath(path))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _dir(self, prefix: str) -> tuple[str, str]:
        """``(directory path, key prefix)`` for a directory prefix (``""`` or ending in ``/``)."""
        prefix = dir_prefix(prefix)
        return (self.root if prefix == "" else self._path(prefix[:-1])), prefix

    def _error(self, action: str, key: str, exc: OSError) -> StoreError:
        return StoreError(f"{action} key {key!r} in {self!r} failed: {exc}")

    # ---- reading ---------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the file)."""
        return self._read(key, self._key_path(key), byte_range)

    def _read(self, key: str, path: str, byte_range: ByteRange | None) -> bytes | None:
        fd = self._open_read(key, path)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            if byte_range is None:
                return _pread_all(fd, 0, size)
            # clipped to the file: a length from stored bytes (a shard index) may be absurd
            span = byte_range.slice(size)
            return _pread_all(fd, span.start, max(span.stop - span.start, 0))
        except _MISSING:
            return None
        except OSError as e:
            raise self._error("reading", key, e) from e
        finally:
            os.close(fd)

    #: Per-key calls are cheap synchronous system calls (``Store.inline_io``). A subclass that
    #: overrides get/get_many/set/set_many should set this to False.
    inline_io = True

    def get_into(
        self, key: str, alloc: Callable[[int], memoryview], byte_range: ByteRange | None = None
    ) -> memoryview | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the file) read
        into ``alloc(size)``, a writable buffer of ``size`` bytes (e.g. reused scratch memory or
        the output array itself; a shorter buffer reads only its length); ``None`` when missing."""
        reader = self.open_reader(key)
        if reader is None:
            return None
        with reader:
            size = reader.size
            span = slice(0, size) if byte_range is None else byte_range.slice(size)
            start, stop = min(span.start, size), span.stop
            stop = max(stop, start)
            buf = alloc(stop - start)
            got = reader.read_into(start, [buf[: min(len(buf), stop - start)]])
            return buf[:got]  # short only when the file shrank under us: what exists

    def open_reader(self, key: str) -> FileReader | None:
        """``key``'s file open for positioned reads (close it, or use it in ``with``); ``None``
        when the key is missing or names a directory. Paths are checked as by every other read."""
        fd = self._open_read(key, self._key_path(key))
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
        except OSError as e:
            os.close(fd)
            raise self._error("reading", key, e) from e
        if stat.S_ISDIR(info.st_mode):
            os.close(fd)
            return None
        return FileReader(self, key, fd, info.st_size)

    def will_need(self, keys: Sequence[str]) -> None:
        """Ask the kernel to start reading these keys' files into the page cache (read-ahead
        for cold data while the caller decodes earlier chunks); missing keys are ignored."""
        if not hasattr(os, "posix_fadvise"):
            return
        for key in keys:
            try:
                fd = os.open(self._key_path(key), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of many keys, read concurrently on the "io" pool."""
        return self.get_partial_values([(key, None) for key in keys])

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys, read concurrently on the "io" pool."""
        jobs = [(key, self._key_path(key), byte_range) for key, byte_range in key_ranges]
        return thread_map(lambda job: self._read(*job), jobs, kind="io")

    def exists(self, key: str) -> bool:
        """Whether ``key`` is a file."""
        return os.path.isfile(self._path(key))

    # ---- writing ---------------------------------------------------------------------------
    def set(self, key: str, value: BytesLike) -> None:
        """Write ``value`` to a temporary file beside the target, then rename it into place."""
        self.check_writable(key)
        self._write(key, self._key_path(key), value)

    def _write(self, key: str, path: str, value: BytesLike, expected: object = _UNCONDITIONAL) -> bool:
        """Write a temporary file, then rename it over ``path``: unconditionally, or (``set_if``)
        under the directory's lock only while the stored version is still ``expected``."""
        name = os.path.basename(path)
        try:
            dfd, tmp, fd = self._create_temp(key, path)
        except OSError as e:
            raise self._error("writing", key, e) from e
        renamed = False
        try:
            try:
                _write_all(fd, value)
                if self.settings.durable:
                    # a renamed file's name can reach the disk before its blocks (an empty file
                    # after a power loss): its contents go first
                    os.fsync(fd)
            finally:
                os.close(fd)
            if expected is not _UNCONDITIONAL:
                renamed = self._rename_if(dfd, tmp, name, expected)
            elif dfd is not None:  # both names resolve in the directory that was checked
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces, as on POSIX
                renamed = True
            else:
                os.replace(tmp, path)
                renamed = True
            return renamed
        except BaseException as e:
            if isinstance(e, OSError):
                raise self._error("writing", key, e) from e
            raise
        finally:
            if not renamed:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
            if dfd is not None:
                os.close(dfd)

    def _rename_if(self, dfd: int, tmp: str, name: str, expected: object) -> bool:
        """Under the directory's lock: rename ``tmp`` to ``name`` if ``name``'s version is
        ``expected``. The directory cannot vanish meanwhile: ``tmp`` keeps it non-empty."""
        with self._locked(dfd):
            if not _is_version(dfd, name, expected):
                return False
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return True

    def _locked(self, dfd: int) -> _DirLock:
        return _DirLock(os.open(".", _LOCK_FLAGS, dir_fd=dfd), os.path.join(self.root, LOCK_NAME))

    def _check_conditional(self, key: str) -> None:
        self.check_writable(key)
        if not self.supports_conditional_writes:
            raise self._no_conditional_writes(key)

    def _create_temp(self, key: str, path: str) -> tuple[int | None, str, int]:
        """``(directory fd, temporary name, open fd)``: a new empty temporary file beside
        ``path``, created (with any missing directories) only once ``path`` is known to
        resolve inside root. Where the platform allows, the directory is opened and checked
        once (one ``readlink``, no per-component walk) and the file created relative to it, so
        the directory cannot be swapped between check and write; the fd is ``None`` elsewhere
        and the names returned are full paths."""
        parent = os.path.dirname(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        for attempt in range(_WRITE_RETRIES):
            last = attempt == _WRITE_RETRIES - 1
            tmp = _temp_name()
            dfd = None
            try:
                if _DIR_FD:
                    dfd = os.open(parent, _DIR_FLAGS)
                    self._check_dir_fd(key, dfd, path)
                    if parent not in self._swept:
                        self._sweep(parent, dfd)
                else:
                    self._check_inside(key, os.path.realpath(path))
                    tmp = os.path.join(parent, tmp)
                return dfd, tmp, os.open(tmp, flags, 0o666, dir_fd=dfd)
            except (FileNotFoundError, FileExistsError):
                # the parent is missing (or was pruned by a concurrent erase after we opened
                # it), or the temporary name was taken: make the directories and try again
                if dfd is not None:
                    os.close(dfd)
                if last:
                    raise
                try:
                    if _DIR_FD:
                        self._make_dirs(key, parent)
                    else:
                        self._check_inside(key, os.path.realpath(path))  # before creating anything
                        os.makedirs(parent, exist_ok=True)
                except (FileExistsError, FileNotFoundError):
                    pass  # a concurrent erase pruned a level while they were made: try again
            except BaseException:
                if dfd is not None:
                    os.close(dfd)
                raise
        raise AssertionError("unreachable")

    def barrier(self) -> None:
        """With the ``durable`` setting, flush the file system holding the store (see
        ``flush_file_system``); without it, nothing (writes are as durable as the page cache)."""
        if self.read_only or not self.settings.durable:
            return
        try:
            flush_file_system(self.root)
        except OSError as e:
            raise StoreError(f"{self.root}: flushing the file system for a durable write failed: {e}") from e

    def remove_dead_temporaries(self) -> list[str]:
        """Every temporary file of a dead writer on this host, anywhere under root, removed
        (the explicit repair; writes sweep only the directories they write into)."""
        removed = []
        for directory, _dirs, files in os.walk(self.root):
            for name in files:
                if dead_writers_temp(name):
                    path = os.path.join(directory, name)
                    try:
                        os.unlink(path)
                    except OSError:
                        continue
                    removed.append(os.path.relpath(path, self.root).replace(os.sep, "/"))
        return sorted(removed)

    def _sweep(self, directory: str, dfd: int) -> None:
        """Remove the temporary files of dead writers from ``directory`` (checked, open as
        ``dfd``): once per directory per store object, so a write costs no scan after the first."""
        self._swept.add(directory)
        try:
            with os.scandir(directory) as it:
                names = [
                    e.name for e in it if e.name.startswith(TEMP_PREFIX) and e.is_file(follow_symlinks=False)
                ]
        except OSError:
            return  # cleanup is best effort: the write itself decides success
        for name in names:
            if dead_writers_temp(name):
                try:
                    os.unlink(name, dir_fd=dfd)
                except OSError:
                    pass

    def _make_dirs(self, key: str, parent: str) -> None:
        """Create the missing directories down to ``parent`` one level at a time, each in a
        directory already checked to lie inside root (symlinks are followed, then checked), so
        no directory is ever made outside root, whatever is swapped in meanwhile."""
        os.makedirs(self.root, exist_ok=True)  # the root the caller named, as given
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            self._check_inside(key, _fd_path(fd))
            rel = os.path.relpath(parent, self.root)
            for part in [] if rel == os.curdir else rel.split(os.sep):
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                self._check_inside(key, _fd_path(fd))
        finally:
            os.close(fd)

    def _check_dir_fd(self, key: str, dfd: int, path: str) -> None:
        """The opened directory of ``path`` lies inside root, and so does ``path`` if it is a
        symlink (it is refused like every other key that resolves outside)."""
        self._check_inside(key, _fd_path(dfd))
        try:
            info = os.stat(os.path.basename(path), dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            self._check_inside(key, os.path.realpath(path))

    # ---- conditional writes ----------------------------------------------------------------
    def get_versioned(self, key: str) -> tuple[bytes | None, Version | None]:
        """``(value, (device, inode, mtime_ns, size, crc32c))`` of ``key``'s file, both from one
        open file; ``(None, None)`` when missing."""
        if not self.supports_conditional_writes:
            raise self._no_conditional_writes(key)
        fd = self._open_read(key, self._key_path(key))
        if fd is None:
            return None, None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                return None, None
            data = _pread_all(fd, 0, info.st_size)
            return data, (*_file_id(info), crc32c(data))
        except OSError as e:
            raise self._error("reading", key, e) from e
        finally:
            os.close(fd)

    def set_if(self, key: str, value: BytesLike, expected: Version | None) -> bool:
        """Write ``value`` as ``set`` does, renaming it into place (under the directory's lock)
        only if the stored file is still version ``expected`` (None: still missing)."""
        self._check_conditional(key)
        return self._write(key, self._key_path(key), value, expected)

    def erase_if(self, key: str, expected: Version) -> bool:
        """Remove ``key``'s file (under the directory's lock) only if it is still ``expected``."""
        self._check_conditional(key)
        path = self._path(key)
        if expected is None:
            return False
        try:
            dfd = os.open(os.path.dirname(path), _DIR_FLAGS)
        except _MISSING:
            return False
        except OSError as e:
            raise self._error("erasing", key, e) from e
        try:
            self._check_inside(key, _fd_path(dfd))
            name = os.path.basename(path)
            with self._locked(dfd):
                if not _is_version(dfd, name, expected):
                    return False
                os.unlink(name, dir_fd=dfd)
        except OSError as e:
            raise self._error("erasing", key, e) from e
        finally:
            os.close(dfd)
        self._prune(os.path.dirname(path))
        return True

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Write many values concurrently; every key is checked before anything is written."""
        paths = {}
        for key in items:
            self.check_writable(key)
            paths[key] = self._path(key)
        thread_map(lambda k: self._write(k, paths[k], items[k]), list(items), kind="io")

    def move_prefix(self, src: str, dst: str) -> None:
        """Merge the directory of ``src`` into that of ``dst``: an entry whose destination does
        not exist yet is renamed whole (a new array's chunk tree in one rename), an existing
        directory is merged into, a file replaces the file it lands on (each rename atomic)."""
        self.check_writable(dst or None)
        source = self._path(dir_prefix(src)[:-1])
        target = self.root if dst == "" else self._path(dir_prefix(dst)[:-1])
        if os.path.isdir(source):
            self._merge_dir(dst, source, target)

    def _merge_dir(self, key: str, source: str, target: str) -> None:
        # the root is trusted as given (it may be a link); nothing below it may be one
        if (target != self.root and os.path.islink(target)) or not self._inside(os.path.realpath(target)):
            raise InvalidKeyError(f"store key {key!r} resolves outside the store root {self.root!r}")
        os.makedirs(target, exist_ok=True)
        with os.scandir(source) as it:
            entries = [e for e in it if not e.name.startswith(TEMP_PREFIX)]
        for e in entries:
            there = os.path.join(target, e.name)
            sub = f"{key}/{e.name}" if key else e.name
            if e.is_dir(follow_symlinks=False):
                if not os.path.lexists(there):
                    try:
                        os.rename(e.path, there)
                        continue
                    except OSError:
                        pass  # made meanwhile: merge into it
                self._merge_dir(sub, e.path, there)
            elif os.path.islink(there) or os.path.isdir(there):
                raise InvalidKeyError(f"store key {sub!r}: a directory or link is in the way of a value")
            else:
                self._replace_into(sub, e.path, there)

    def _replace_into(self, key: str, source: str, there: str) -> None:
        """``os.replace``, making the target's directory again if a concurrent erase pruned it."""
        for attempt in range(_WRITE_RETRIES):
            try:
                os.replace(source, there)
                return
            except FileNotFoundError:
                if not os.path.exists(source) or attempt == _WRITE_RETRIES - 1:
                    raise
                if _DIR_FD:
                    self._make_dirs(key, os.path.dirname(there))
                else:
                    os.makedirs(os.path.dirname(there), exist_ok=True)

    def move(self, src: str, dst: str) -> None:
        """One rename of ``src``'s file onto ``dst``: readers of ``dst`` see the old or the new
        value; a missing ``src`` does nothing (a re-run move)."""
        self.check_writable(dst)
        source, target = self._path(src), self._path(dst)
        for attempt in range(_WRITE_RETRIES):
            try:
                os.replace(source, target)
                return
            except FileNotFoundError:
                if not os.path.lexists(source) or attempt == _WRITE_RETRIES - 1:
                    if os.path.lexists(source):
                        raise
                    return
                parent = os.path.dirname(target)
                try:
                    if _DIR_FD:
                        self._make_dirs(dst, parent)
                    else:
                        os.makedirs(parent, exist_ok=True)
                except (FileExistsError, FileNotFoundError):
                    pass  # a concurrent erase pruned a level: try again
            except OSError as e:
                raise self._error("moving", dst, e) from e

    def erase(self, key: str) -> None:
        """Remove the file of ``key`` and any parent directories left empty; missing is a no-op.

        A key naming a directory is not a key, so it is left alone (use ``erase_prefix``).
        """
        self.check_writable(key)
        self._erase(key, self._path(key))

    def _erase(self, key: str, path: str) -> None:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                return
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as e:
            raise self._error("erasing", key, e) from e
        self._prune(os.path.dirname(path))

    def _prune(self, directory: str) -> None:
        """Remove ``directory`` and its ancestors below root while they are empty."""
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return
            directory = os.path.dirname(directory)

    def erase_many(self, keys: Iterable[str]) -> None:
        """Remove many keys concurrently; every key is checked before anything is removed."""
        paths = {}
        for key in keys:
            self.check_writable(key)
            paths[key] = self._path(key)
        thread_map(lambda k: self._erase(k, paths[k]), list(paths), kind="io")

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key starting with ``prefix``; a directory prefix removes its whole tree."""
        self.check_writable(prefix)
        validate_prefix(prefix)
        if prefix != "" and not prefix.endswith("/"):
            self.erase_many(list(self.list_prefix(prefix)))
            return
        directory, _ = self._dir(prefix)
        if os.path.islink(directory):
            self.erase_many(list(self.list_prefix(prefix)))
            return
        try:
            if prefix == "":
                with os.scandir(directory) as it:
                    entries = list(it)
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        shutil.rmtree(e.path)
                    else:
                        os.unlink(e.path)
            else:
                shutil.rmtree(directory)
                self._prune(os.path.dirname(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as e:
            raise self._error("erasing prefix", prefix, e) from e

    # ---- listing ---------------------------------------------------------------------------
    def _entries(self, directory: str) -> list[tuple[str, str, bool | None]]:
        """``(name, path, is_dir)`` of the entries of ``directory`` that are keys or prefixes:
        files and directories (``is_dir`` None: a symlinked directory, listed but not walked),
        not temp files, not symlinks leading outside root, not names with no UTF-8 form (bytes
        ``os.fsdecode`` spells as lone surrogates: no key holds them, ``validate_key``). Entries
        that cannot be resolved (symlink loops, dangling links) hold no value and are skipped,
        so one bad link, or one stray file another tool named, never makes the whole store
        unlistable (nor a commit's erase of its prefix fail once the nodes are marked)."""
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except _MISSING:
            return []
        except OSError as e:
            raise StoreError(f"listing {directory!r} in {self!r} failed: {e}") from e
        found = []
        for e in entries:
            if e.name.startswith(TEMP_PREFIX) or not _has_utf8_form(e.name):
                continue
            try:
                if e.is_symlink() and not self._inside(os.path.realpath(e.path, strict=True)):
                    continue
                if e.is_dir(follow_symlinks=False):
                    found.append((e.name, e.path, True))
                elif e.is_file():
                    found.append((e.name, e.path, False))
                elif e.is_symlink() and e.is_dir():  # a symlinked directory: a prefix, not walked
                    found.append((e.name, e.path, None))
            except OSError:  # ELOOP, a link dangling or removed meanwhile
                continue
        return found

    def _walk(self, directory: str, key_prefix: str) -> Iterator[str]:
        for name, path, is_dir in self._entries(directory):
            if is_dir:
                yield from self._walk(path, key_prefix + name + "/")
            elif is_dir is False:
                yield key_prefix + name

    def list(self) -> Iterator[str]:
        """Every file below root as a key (symlinked directories are not followed)."""
        return self._walk(self.root, "")

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix``; walks only the directories that can match."""
        validate_prefix(prefix)
        if prefix == "" or prefix.endswith("/"):
            directory, key_prefix = self._dir(prefix)
            return self._walk(directory, key_prefix)
        parent, _, stem = prefix.rpartition("/")
        directory, key_prefix = self._dir(parent)
        return self._list_matching(directory, key_prefix, stem)

    def _list_matching(self, directory: str, key_prefix: str, stem: str) -> Iterator[str]:
        for name, path, is_dir in self._entries(directory):
            if not name.startswith(stem):
                continue
            if is_dir:
                yield from self._walk(path, key_prefix + name + "/")
            elif is_dir is False:
                yield key_prefix + name

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names of the files and directories directly under ``prefix``."""
        directory, _ = self._dir(prefix)
        return iter([name for name, _, _ in self._entries(directory)])

    # ---- identity --------------------------------------------------------------------------
    def with_read_only(self, read_only: bool = True) -> LocalStore:
        """A store on the same directory with another read-only flag."""
        return LocalStore(self.root, read_only=read_only, settings=self.setting_overrides)

    @property
    def data_identity(self) -> Hashable:
        """The root directory."""
        return (LocalStore, self.root)

    def __eq__(self, other: object) -> bool:
        """Equal when both are LocalStores on the same root with the same flag."""
        if not isinstance(other, LocalStore):
            return NotImplemented
        return self.root == other.root and self.read_only == other.read_only

    def __hash__(self) -> int:
        return hash((LocalStore, self.root, self.read_only))

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r}, read_only={self.read_only})"

    def __reduce__(self):
        """Pickle by root path, flags and setting overrides."""
        kwargs = {"read_only": self.read_only, "settings": dict(self.setting_overrides)}
        return rebuild_store, (LocalStore, (self.root,), kwargs)
