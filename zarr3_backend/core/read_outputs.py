"""Where read results go: fresh output arrays, and the part of one a whole chunk fills."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _slabs


def whole_chunk_target(p: Any, out: np.ndarray, chunk_shape: tuple[int, ...]) -> np.ndarray | None:
    """The region of ``out`` that chunk projection ``p`` fills, when it takes the whole chunk in
    C order and is one contiguous block of memory (then a chunk can be decoded straight into it)."""
    if not p.is_complete:
        return None
    for s, n in zip(p.chunk_selection, chunk_shape, strict=True):
        if isinstance(s, slice):
            if s.start != 0 or s.stop != n or (s.step is not None and s.step != 1):
                return None
        elif not isinstance(s, int | np.integer) or s != 0 or n != 1:
            return None
    for s in p.out_selection:  # an index array would make ``out[...]`` a copy, not a place in ``out``
        if not isinstance(s, slice):
            return None
    region = out[p.out_selection]
    if not isinstance(region, np.ndarray):  # a 0-d selection gives a numpy scalar
        return None
    n = math.prod(chunk_shape)
    if n == 0 or region.size != n or not region.flags.c_contiguous:
        return None
    return region


def outputs(shapes: Sequence[tuple[int, ...]], dtype: np.dtype) -> list[np.ndarray]:
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
        return [_slabs.empty(s, dtype) for s in shapes]
    outs: list[np.ndarray] = []
    slab, used = None, 0
    for shape, n in zip(shapes, sizes, strict=True):
        if not 0 < n <= small:
            outs.append(_slabs.empty(shape, dtype))
            continue
        step = -(-n // 64) * 64  # 64-byte aligned starts (slabs start aligned)
        if slab is None or used + n > len(slab):
            slab, used = _slabs.POOL.take(slab_bytes), 0
        outs.append(slab[used : used + n].view(dtype).reshape(shape))
        used += step
    return outs
