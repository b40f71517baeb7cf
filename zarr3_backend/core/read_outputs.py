"""Where read results go: fresh output arrays (small ones carved from shared slabs)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import _slabs
from ..errors import ResourceLimitError


def output(shape: tuple[int, ...], dtype: np.dtype, where: str) -> np.ndarray:
    """A fresh uninitialised array (recycled memory for chunk-sized results, ``_slabs``), or a
    ResourceLimitError naming ``where`` when numpy cannot make one of that shape (too large for
    memory, or a size that overflows, as a shape of ``(2**62, 0)`` does)."""
    try:
        return _slabs.empty(shape, dtype)
    except (MemoryError, ValueError):
        raise ResourceLimitError(
            f"{where}: a selection of shape {shape} of {dtype} does not fit in memory"
        ) from None


def outputs(shapes: Sequence[tuple[int, ...]], dtype: np.dtype, where: str) -> list[np.ndarray]:
    """Fresh uninitialised arrays of ``shapes``; small ones are views of shared slabs.

    Results of at most a quarter of a slab are carved out of shared 32 MiB slabs: one large
    allocation faults its memory in huge pages, several times cheaper per byte than many ~1 MiB
    arrays, and a slab whose results are all gone is reused (``_slabs``). A result keeps its
    slab alive, so slabs stay small."""
    itemsize = dtype.itemsize
    sizes = [int(np.prod(s, dtype=np.int64)) * itemsize for s in shapes]
    slab_bytes = _slabs.SLAB_BYTES
    small = slab_bytes // 4
    if dtype.hasobject or sum(n for n in sizes if 0 < n <= small) < 2 * small:
        return [output(s, dtype, where) for s in shapes]
    outs: list[np.ndarray] = []
    slab, used = None, 0
    for shape, n in zip(shapes, sizes, strict=True):
        if not 0 < n <= small:
            outs.append(output(shape, dtype, where))
            continue
        step = -(-n // 64) * 64  # 64-byte aligned starts (slabs start aligned)
        if slab is None or used + n > len(slab):
            slab, used = _slabs.POOL.take(slab_bytes), 0
        outs.append(slab[used : used + n].view(dtype).reshape(shape))
        used += step
    return outs
