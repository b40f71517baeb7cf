"""Reading and writing arrays whose chunk grid is rectilinear (chunks of different shapes).

The Array's chunk pipeline works with one codec shape for every chunk. A rectilinear array is
therefore read and written one chunk at a time through a *chunk view*: an Array over the same
store and codecs whose whole (regular, one-chunk) grid is that one chunk, and whose chunk key is
the real chunk's key. Everything the pipeline does (sharding, partial reads, skipping chunks
equal to the fill value, byte-range merging, checksums) then applies unchanged; the chunk grid
(:mod:`.chunk_grid`) alone says which chunk holds which index.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .._threads import thread_map
from ..errors import ShapeError
from ..indexing import normalize_selection
from .chunk_grid import RegularChunkGrid
from .chunk_key_encoding import ChunkKeyEncoding
from .metadata import ArrayMetadata

if TYPE_CHECKING:
    from .array import Array

__all__ = ["check_codecs", "chunk_view", "read", "write"]


@dataclass(frozen=True)
class _ChunkAt(ChunkKeyEncoding):
    """The key encoding of a chunk view: its chunk ``(0, ..., 0)`` is the real chunk ``origin``."""

    base: ChunkKeyEncoding | None = None
    origin: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        assert self.base is not None
        return self.base.to_json()

    def encode_chunk_key(self, coords: Sequence[int]) -> str:
        assert self.base is not None
        return self.base.encode_chunk_key(tuple(o + int(c) for o, c in zip(self.origin, coords, strict=True)))


def chunk_view(array: Array, coords: Sequence[int]) -> Array:
    """An Array whose only chunk is chunk ``coords`` of ``array`` (same store, key, codecs)."""
    meta = array.metadata
    coords = tuple(int(c) for c in coords)
    shape = meta.chunk_grid.codec_shape(coords)
    encoding = meta.chunk_key_encoding
    view = replace(
        meta,
        shape=shape,
        chunk_grid=RegularChunkGrid(shape),
        chunk_key_encoding=_ChunkAt(encoding.separator, encoding, coords),
    )
    # type(array): this module needs no import of core.array, so the Array can dispatch here
    return type(array)(
        array.store, array.path, view, read_only=array.read_only, write_empty_chunks=array.write_empty_chunks
    )


def _plan(array: Array, selection: Any) -> tuple[list[np.ndarray], list[bool], list[tuple]]:
    """Per axis the selected indices and whether the axis is dropped (an integer index), and per
    touched chunk ``(coords, chunk selection, output selection)``."""
    shape = array.shape
    grid = array.metadata.chunk_grid
    sel = normalize_selection(selection, shape)
    indices, dropped, runs = [], [], []
    for axis, (entry, size) in enumerate(zip(sel, shape, strict=True)):
        if isinstance(entry, slice):
            idx = np.arange(size, dtype=np.int64)[entry]
        else:
            idx = np.atleast_1d(np.asarray(entry, dtype=np.int64))
        indices.append(idx)
        dropped.append(not isinstance(entry, slice | np.ndarray))
        offsets = grid.axis_offsets(axis, size)
        ids = grid.chunk_indices(axis, idx, size)
        cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), len(idx)]
        axis_runs = []
        for a, b in itertools.pairwise(cuts):
            if a < b:
                k = int(ids[a])
                axis_runs.append((k, _as_slice(idx[a:b] - offsets[k]), slice(a, b)))
        runs.append(axis_runs)
    plan = [
        (tuple(r[0] for r in combo), tuple(r[1] for r in combo), tuple(r[2] for r in combo))
        for combo in itertools.product(*runs)
    ]
    return indices, dropped, plan


def _as_slice(local: np.ndarray) -> slice | np.ndarray:
    """A step slice for an increasing arithmetic run of indices, else the indices themselves."""
    if len(local) == 1:
        return slice(int(local[0]), int(local[0]) + 1)
    step = int(local[1] - local[0])
    if step > 0 and np.all(np.diff(local) == step):
        return slice(int(local[0]), int(local[-1]) + 1, step)
    return local


def read(array: Array, selection: Any = ...) -> np.ndarray:
    """``array[selection]`` for a rectilinear array: integers and slices as in numpy, and
    integer arrays or boolean masks per axis (orthogonal, as ``Array.oindex``)."""
    indices, dropped, plan = _plan(array, selection)
    out = np.empty(tuple(len(i) for i in indices), dtype=array.dtype)

    def read_one(item: tuple) -> None:
        coords, chunk_sel, out_sel = item
        out[out_sel] = chunk_view(array, coords).oindex[chunk_sel]

    thread_map(read_one, plan, kind="io")  # chunks are independent: fetched and decoded concurrently
    return out[tuple(0 if d else slice(None) for d in dropped)]


def write(array: Array, selection: Any, value: Any) -> None:
    """``array[selection] = value`` for a rectilinear array (selections as in :func:`read`)."""
    indices, dropped, plan = _plan(array, selection)
    full = tuple(len(i) for i in indices)
    kept = tuple(n for n, d in zip(full, dropped, strict=True) if not d)
    value = np.asarray(value, dtype=object if array.dtype.kind in "OT" else None)
    try:
        value = np.broadcast_to(value, kept).reshape(full)
    except ValueError as e:
        raise ShapeError(
            f"array {array.path or '/'!r}: value of shape {value.shape} cannot be written to a "
            f"selection of shape {kept}"
        ) from e

    def write_one(item: tuple) -> None:
        coords, chunk_sel, out_sel = item
        chunk_view(array, coords).oindex[chunk_sel] = value[out_sel]

    thread_map(write_one, plan, kind="io")  # each task owns its chunk: no two touch the same key


def check_codecs(meta: ArrayMetadata) -> None:
    """Validate the codec chain for every chunk shape of a rectilinear array (the metadata
    itself validates it for the first chunk only), e.g. shard edges that the inner chunks divide."""
    grid = meta.chunk_grid
    if grid.is_regular:
        return
    for shape in grid.distinct_codec_shapes(meta.shape):
        replace(meta, shape=shape, chunk_grid=RegularChunkGrid(shape))
