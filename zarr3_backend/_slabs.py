"""Recycled memory for many small results (``Array.get_regions``).

Fresh memory costs the kernel a page fault and zeroing on first touch: for a batch of a
thousand 1 MiB reads from the page cache that is as much CPU as the reads themselves. Results
are therefore carved out of 32 MiB slabs, and a slab whose results are all gone is used again
by the next batch instead of being returned to the kernel and faulted in afresh.

A slab is free again when nothing refers to it: every numpy view of a slab holds a reference
to the slab itself (numpy points a view's ``base`` at the array that owns the memory), and so
does anything holding a view (memoryviews, DLPack capsules, other libraries' tensors). The pool
keeps at most ``ZARR3_SLAB_CACHE_MB`` (default: 1/16 of physical memory, at most 1024) of
slabs; beyond that, slabs are plain allocations that go back to the kernel when freed.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

SLAB_BYTES = 32 * 2**20
_ALIGN = 64
_MiB = 2**20


def _default_cap_bytes() -> int:
    env = os.environ.get("ZARR3_SLAB_CACHE_MB")
    if env is not None:
        return max(int(env), 0) * _MiB
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 8 * 2**30
    return min(1024 * _MiB, physical // 16)


def _refcounts_reliable() -> bool:
    """Reuse relies on reference counts, exact only where a global interpreter lock runs."""
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is None or is_gil_enabled()


class SlabPool:
    """Slabs of ``slab_bytes`` (64-byte aligned) reused once nothing refers to them."""

    def __init__(self, cap_bytes: int, slab_bytes: int = SLAB_BYTES) -> None:
        self.slab_bytes = slab_bytes
        self.cap_slabs = cap_bytes // (slab_bytes + _ALIGN) if _refcounts_reliable() else 0
        self._slabs: list[np.ndarray] = []  # every pooled slab, in use or not
        self._lock = threading.Lock()

    def take(self) -> np.ndarray:
        """A writable uint8 array of ``slab_bytes``: a pooled slab nothing refers to any more,
        a new pooled slab while under the cap, else a plain allocation."""
        with self._lock:
            for raw in self._slabs:
                # the pool's list and the call's argument are the only references: unused
                if sys.getrefcount(raw) == 3:  # + this loop's variable
                    return self._aligned(raw)
            raw = np.empty(self.slab_bytes + _ALIGN, dtype=np.uint8)
            if len(self._slabs) < self.cap_slabs:
                self._slabs.append(raw)
            return self._aligned(raw)

    def _aligned(self, raw: np.ndarray) -> np.ndarray:
        start = -raw.ctypes.data % _ALIGN
        return raw[start : start + self.slab_bytes]

    def clear(self) -> None:
        """Forget every pooled slab (memory in use stays valid; the rest goes back to the kernel)."""
        with self._lock:
            self._slabs.clear()

    @property
    def pooled_bytes(self) -> int:
        return len(self._slabs) * (self.slab_bytes + _ALIGN)


POOL = SlabPool(_default_cap_bytes())
