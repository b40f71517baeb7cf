"""The projection of a selection of one shard onto its inner chunk grid (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import indexing
from ..errors import CodecError


def inner_indexer(selection: Any, shard_shape: Sequence[int], chunk_shape: Sequence[int]) -> indexing.Indexer:
    """Project a numpy-ready selection of one shard onto its inner chunk grid.

    Takes what the Array's indexers put in ``ChunkProjection.chunk_selection``: ints and slices of
    any step (basic), 1-d or ``np.ix_``-shaped int arrays (orthogonal), or int arrays that
    broadcast together (vectorized points); the projections' shape is ``shard[selection].shape``.
    """
    sel = indexing.normalize_selection(selection, shard_shape)
    if not any(isinstance(s, np.ndarray) for s in sel):  # normalised once, on the layout's checked grid
        return indexing.BasicIndexer(sel, tuple(shard_shape), tuple(chunk_shape))
    orthogonal = _as_orthogonal(sel)
    if orthogonal is not None:
        return indexing.orthogonal_indexer(orthogonal, shard_shape, chunk_shape)
    if not any(isinstance(s, slice) for s in sel):
        return indexing.vectorized_indexer(sel, shard_shape, chunk_shape)
    # arrays mixed with slices in neither form: spell out every selected coordinate, numpy's way
    coords = tuple(
        np.broadcast_to(
            np.arange(n, dtype=np.intp).reshape([-1 if d == axis else 1 for d in range(len(sel))]),
            tuple(shard_shape),
        )[sel]
        for axis, n in enumerate(shard_shape)
    )
    return indexing.vectorized_indexer(coords, shard_shape, chunk_shape)


def output_indexer(
    selection: Any, shard_shape: Sequence[int], chunk_shape: Sequence[int], out: np.ndarray | None
) -> indexing.Indexer:
    """``inner_indexer``, refusing an output array ``out`` (when given) that does not have the
    selection's shape: every region read into a caller's array checks it so."""
    indexer = inner_indexer(selection, shard_shape, chunk_shape)
    if out is not None and out.shape != indexer.shape:
        raise CodecError(
            f"codec 'sharding_indexed': output of shape {out.shape} for a selection of shape {indexer.shape}"
        )
    return indexer


def _as_orthogonal(sel: tuple) -> tuple | None:
    """``sel`` as per-axis ints, slices and 1-d arrays when numpy gives it outer-product meaning:
    one 1-d array whose fellow ints sit next to it, or ``np.ix_``-shaped arrays (no slices)."""
    arrays = [s for s in sel if isinstance(s, np.ndarray)]
    if len(arrays) == 1 and arrays[0].ndim == 1:
        advanced = [i for i, s in enumerate(sel) if not isinstance(s, slice)]
        return sel if advanced[-1] - advanced[0] + 1 == len(advanced) else None
    if any(isinstance(s, slice) for s in sel):
        return None
    m = len(arrays)  # every non-int entry is an array here
    if m < 2:
        return None
    for k, a in enumerate(arrays):
        if a.ndim != m or any(d != 1 for j, d in enumerate(a.shape) if j != k):
            return None
    return tuple(s.reshape(-1) if isinstance(s, np.ndarray) else s for s in sel)
