"""Recycled memory for read results.

Fresh memory costs the kernel a page fault and zeroing on first touch, and glibc hands large
freed blocks back to the kernel (a thread's heap is trimmed, a big block unmapped), so the next
read of the same size pays again: as much CPU as copying the data out of the page cache. Read
results from 1 MiB up to 64 MiB, or up to a quarter of the pool's limit if that is larger (a
chunk or shard a dask task reads; the 32 MiB slabs ``get_regions`` carves small results from; a
whole array read again and again, as in a loop) are therefore taken from a pool of buffers, and
a buffer nothing refers to any more is handed out again instead of being faulted in afresh.

A buffer is free again when nothing refers to it: every numpy view of a buffer holds a
reference to the buffer itself (numpy points a view's ``base`` at the array that owns the
memory), and so does anything holding a view (memoryviews, DLPack capsules, other libraries'
tensors). The pool keeps at most ``settings.buffer_pool_bytes`` of buffers, read when a buffer
is taken (environment: ``ZARR3_BUFFER_POOL_MB``; default: 1/16 of physical memory, at most
1 GiB; 64 MiB in processes that ask malloc to return memory promptly with
``MALLOC_TRIM_THRESHOLD_``, as dask's nanny does for its workers; 0 turns reuse off). Beyond
that, results are plain allocations.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
from collections import deque
from collections.abc import Mapping

import numpy as np

from .settings import current as current_settings
from .settings import value as setting_value

SLAB_BYTES = 32 * 2**20
#: Results of this size range come from the pool.
POOLED_MIN = 2**20
#: Results up to this size are pooled, and up to a quarter of the pool's limit when larger.
POOLED_MAX = 64 * 2**20
_ALIGN = 64
_MiB = 2**20
#: Buffers of one size checked per request (the least recently handed out first).
_PROBES = 8


def default_cap_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The pool's size limit: the ``buffer_pool_bytes`` setting (with the environment
    variables of ``environ``, default ``os.environ``), else the defaults described above."""
    # asked for at every pooled allocation: current() is memoised for os.environ itself
    configured = (
        setting_value("buffer_pool_bytes")
        if environ is None
        else current_settings(environ=environ).buffer_pool_bytes
    )
    if configured is not None:
        return configured
    if "MALLOC_TRIM_THRESHOLD_" in (os.environ if environ is None else environ):
        return 64 * _MiB
    return min(1024 * _MiB, _physical_memory() // 16)


@functools.cache
def _physical_memory() -> int:
    """The machine's memory in bytes (8 GiB when the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def _refcounts_reliable() -> bool:
    """Reuse relies on reference counts, exact only where a global interpreter lock runs."""
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is None or is_gil_enabled()


class BufferPool:
    """Byte buffers (64-byte aligned) handed out again once nothing refers to them."""

    def __init__(self, cap_bytes: int | None = None) -> None:
        self._cap_bytes = cap_bytes
        self._reliable = _refcounts_reliable()
        self.pooled_bytes = 0
        self._by_size: dict[int, deque[tuple[np.ndarray, int]]] = {}  # (buffer, aligned start)
        self._lock = threading.Lock()

    @property
    def cap_bytes(self) -> int:
        """The most memory the pool keeps: the one given, else ``default_cap_bytes()`` now."""
        if not self._reliable:
            return 0
        return self._cap_bytes if self._cap_bytes is not None else default_cap_bytes()

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of ``nbytes``: a pooled buffer nothing refers to any more, a
        new pooled buffer while under the cap, else a plain allocation."""
        with self._lock:
            ring = self._by_size.get(nbytes)
            if ring:
                for _ in range(min(_PROBES, len(ring))):
                    ring.rotate(-1)  # the least recently handed out moves to the back ...
                    # ... and is free when its ring entry and the call's argument (a fresh
                    # reference, counted on every Python: no local name is involved) are its
                    # only references
                    if sys.getrefcount(ring[-1][0]) == 2:
                        raw, start = ring[-1]
                        return raw[start : start + nbytes]
        cap = self.cap_bytes  # read outside the lock (it reads the environment), only when needed
        raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
        start = -raw.ctypes.data % _ALIGN
        with self._lock:
            if self.pooled_bytes + raw.nbytes > cap:
                self._evict_free(self.pooled_bytes + raw.nbytes - cap)
            if self.pooled_bytes + raw.nbytes <= cap:
                self._by_size.setdefault(nbytes, deque()).append((raw, start))
                self.pooled_bytes += raw.nbytes
        return raw[start : start + nbytes]

    def _evict_free(self, wanted: int) -> None:
        """Forget free buffers (nothing else refers to them), the largest sizes first, until
        ``wanted`` bytes are freed or none is left: a size no longer asked for (a one-off large
        result) does not keep the pool from serving the sizes asked for now. Under the lock."""
        for size in sorted(self._by_size, reverse=True):
            ring = self._by_size[size]
            kept: deque[tuple[np.ndarray, int]] = deque()
            while ring:
                entry = ring.popleft()
                # free when ``entry`` (its only holder now), the argument and nothing else refer to it
                if wanted > 0 and sys.getrefcount(entry[0]) == 2:
                    wanted -= entry[0].nbytes
                    self.pooled_bytes -= entry[0].nbytes
                else:
                    kept.append(entry)
                del entry
            if kept:
                self._by_size[size] = kept
            else:
                del self._by_size[size]
            if wanted <= 0:
                return

    def clear(self) -> None:
        """Forget every pooled buffer (memory in use stays valid; the rest goes back to the kernel)."""
        with self._lock:
            self._by_size.clear()
            self.pooled_bytes = 0


POOL = BufferPool()


def _reset_after_fork() -> None:  # a thread of the parent may have held the lock mid-fork
    POOL._lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, from the pool when its size is in the pooled range: 1 MiB to
    64 MiB or a quarter of the pool's limit (a few results of one size fit), if larger."""
    nbytes = math.prod(shape) * dtype.itemsize
    if dtype.hasobject or nbytes < POOLED_MIN or (nbytes > POOLED_MAX and nbytes > POOL.cap_bytes // 4):
        return np.empty(shape, dtype=dtype)
    return POOL.take(nbytes).view(dtype).reshape(shape)


def release_memory() -> None:
    """Let the kernel have back the memory pooled read results no longer use."""
    POOL.clear()
