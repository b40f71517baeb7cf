"""``store``: write a dask array into a zarr3_backend Array with one task per target shard.

Before any byte is written the writer proves that no storage unit (shard, or chunk when
unsharded) is touched by two tasks: misaligned dask chunks are refused with a message naming the
fix, or rechunked when ``align_chunks=True``. Each write task then takes the part of one aligned
block that falls in one unit, so it owns exactly that unit; a retried task (worker lost)
rewrites its unit whole, and the partly covered units at the edges of a region or append get
tasks of their own that read-modify-write only their unit. No lock is needed, on threads or on
a cluster.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Sequence
from itertools import product
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.blockwise import optimize_blockwise
from dask.core import flatten
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.layers import ArraySliceDep

from ..core import rectilinear
from ..core.array import Array
from ..errors import ChunkAlignmentError, SelectionError, ShapeError
from .alignment import Unit, aligned_sizes, check_alignment, prove_disjoint, split_sizes, storage_units
from .progress import compute_with_progress
from .read import array_token
from .tree import CountTree, Tally, receipts_of, sum_counts

WRITE_PREFIX = "zarr3-write-"
DONE_PREFIX = "zarr3-done-"


def normalize_region(
    region: Sequence[slice] | None, shape: tuple[int, ...], value_shape: tuple[int, ...], name: str = ""
) -> tuple[slice, ...]:
    """Concrete step-1 slices inside ``shape`` whose extent equals ``value_shape``."""
    label = name or "<unnamed>"
    if region is None:
        region = (slice(None),) * len(shape)
    region = tuple(region)
    if len(region) != len(shape):
        raise SelectionError(
            f"array {label!r}: region {region} has {len(region)} dimensions, the array has {len(shape)}"
        )
    out = []
    for axis, (sl, n) in enumerate(zip(region, shape, strict=True)):
        if not isinstance(sl, slice) or sl.step not in (None, 1):
            raise SelectionError(
                f"array {label!r}: region entries must be slices with step 1, got {sl!r} on axis {axis}"
            )
        start = 0 if sl.start is None else int(sl.start)
        stop = n if sl.stop is None else int(sl.stop)
        if not 0 <= start <= stop <= n:
            raise SelectionError(
                f"array {label!r}: region {start}:{stop} on axis {axis} is outside the array's extent {n}"
            )
        out.append(slice(start, stop))
    extent = tuple(s.stop - s.start for s in out)
    if extent != tuple(value_shape):
        raise ShapeError(
            f"array {label!r}: data of shape {tuple(value_shape)} does not fit the region {out} of shape {extent}"
        )
    return tuple(out)


def _done(target: Array, ndim: int) -> Any:
    """A write task's result: a one-element count, or on a store that returns receipts a Tally
    with the store's receipt (what this process wrote, for the client to merge)."""
    store = target.store
    if store.returns_receipts:
        receipt = store.write_receipt()
        return Tally(1, () if receipt is None else (receipt,), type(store))
    return np.ones((1,) * ndim, dtype=np.int64) if ndim else 1


def _write_unit(target: Array, region: tuple[slice, ...], value: np.ndarray) -> None:
    """Write one task's share of ONE storage unit: a single write of that unit (atomic as it
    is, so no transaction: on a rectilinear grid ``set_region`` would open one per task, and
    every task would contend for the array's document)."""
    if target.metadata.chunk_grid.is_regular:
        target.set_region(region, value)
    else:
        rectilinear.write(target, region, value)


def _write_block(
    block: np.ndarray, target: Array, block_slices: tuple[slice, ...], starts: tuple[int, ...]
) -> np.ndarray:
    """Write one block (exactly one storage unit's share) and return a one-element count."""
    region = tuple(slice(s.start + o, s.stop + o) for s, o in zip(block_slices, starts, strict=True))
    _write_unit(target, region, block)
    return _done(target, block.ndim)


def _write_whole(value: np.ndarray, target: Array, region: tuple[slice, ...]) -> Any:
    target.set_region(region, value)
    return _done(target, 0)


def _write_piece(
    block: np.ndarray, target: Array, in_block: tuple[slice, ...], region: tuple[slice, ...]
) -> np.ndarray:
    """Write the part of a dask block that falls in one storage unit."""
    _write_unit(target, region, block[in_block])
    return _done(target, block.ndim)


def _pieces(block_sizes: Sequence[int], unit: Unit, start: int) -> list[tuple[int, slice, slice]]:
    """Along one axis: (block index, slice inside the block, slice of the array) per unit piece.

    The blocks are aligned, so cutting each block at unit boundaries gives one piece per unit.
    """
    out = []
    pos = start
    for b, n in enumerate(block_sizes):
        offset = 0
        for m in split_sizes(n, unit, pos) if n else ():
            out.append((b, slice(offset, offset + m), slice(pos, pos + m)))
            offset += m
            pos += m
    return out


class FusingDelayed(Delayed):
    """A Delayed whose graph gets the blockwise fusion dask gives arrays when it is computed."""

    __slots__ = ()

    @staticmethod
    def __dask_optimize__(dsk: Any, keys: Any, **kwargs: Any) -> HighLevelGraph:
        """Delayed's culling plus the blockwise fusion dask gives arrays: each write task takes
        in the blockwise tasks that make its block (one task per unit on a cluster, not a
        source task and a write task). Applied to the graph of all writes computed together,
        so blocks that several writes share are still computed once. As with
        ``dask.array.store``, a write computed in the same call as the array it writes (or
        another collection using its blocks) computes those blocks twice: compute them apart,
        or ``persist`` the array first."""
        keys = list(flatten(keys)) if isinstance(keys, list) else [keys]
        if not isinstance(dsk, HighLevelGraph):
            dsk = HighLevelGraph.from_collections(str(id(dsk)), dsk, dependencies=())
        return optimize_blockwise(dsk, keys=keys).cull(set(keys))  # dask.array's order


class WriteDelayed(FusingDelayed):
    """The Delayed a write returns. Its ``compute()`` also makes the caller's Array forget its
    cached shard indexes, which the tasks may have made stale by rewriting shards through
    their own copies of the Array (worker processes, a cluster)."""

    __slots__ = ("_target",)

    def __init__(self, key: Any, dsk: Any, target: Array, layer: str | None = None) -> None:
        super().__init__(key, dsk, layer=layer)
        self._target = target

    def compute(self, **kwargs: Any) -> Any:
        """Compute the write, hand the receipts it carries to the caller's store (a store that
        returns them), then refresh the caller's Array (runs in the calling process)."""
        try:
            result = super().compute(**kwargs)
            self._target.store.merge_receipts(receipts_of(result))
            return result
        finally:  # a failed write may have rewritten some shards too
            self._target.invalidate_cache()


def _as_write(d: Delayed, a: Array) -> WriteDelayed:
    return WriteDelayed(d.key, d.dask, a)


def _write_graph(darr: da.Array, a: Array, starts: tuple[int, ...], token: str) -> WriteDelayed:
    """A graph of one write task per storage unit and a lazy tree that waits for them all.

    When every dask block is exactly one unit's share, the write layer is a lazy Blockwise
    layer (no per-block objects at build time); otherwise each task takes its slice of the
    block holding its unit (no rechunk tasks in between).
    """
    units = storage_units(a)
    name = WRITE_PREFIX + token
    target = dask.delayed(a, name="zarr3-target-" + token, pure=True)
    split = tuple(split_sizes(n, u, s) for n, u, s in zip(darr.shape, units, starts, strict=True))
    if split == darr.chunks:
        counts = da.map_blocks(
            _write_block,
            darr,
            target,
            ArraySliceDep(split),
            starts,
            name=name,
            chunks=tuple((1,) * len(c) for c in split),
            meta=np.empty((0,) * darr.ndim, dtype=np.int64),
        )
        layers, deps = dict(counts.dask.layers), dict(counts.dask.dependencies)
        grid = counts.numblocks
    else:
        axes = [_pieces(c, u, s) for c, u, s in zip(darr.chunks, units, starts, strict=True)]
        target_key = target.key
        layer = {}
        src = darr.name
        per_axis = [[(i, b, inner, outer) for i, (b, inner, outer) in enumerate(p)] for p in axes]
        gc_was_enabled = gc.isenabled()
        gc.disable()  # millions of small tuples: the cyclic collector would dominate the build
        try:
            for combo in product(*per_axis):
                idx, blocks, inner, outer = zip(*combo, strict=True)
                layer[(name, *idx)] = (_write_piece, (src, *blocks), target_key, inner, outer)
        finally:
            if gc_was_enabled:
                gc.enable()
        layers = {**darr.dask.layers, **target.dask.layers, name: MaterializedLayer(layer)}
        deps = {**darr.dask.dependencies, **target.dask.dependencies}
        deps[name] = {*darr.__dask_layers__(), *target.__dask_layers__()}
        grid = tuple(len(p) for p in axes)
    tree = CountTree(DONE_PREFIX + token, name, grid)
    layers[tree.name] = tree
    deps[tree.name] = {name}
    return WriteDelayed(tree.root, HighLevelGraph(layers, deps), a)


def _scalar_write(darr: da.Array, a: Array, region: tuple[slice, ...], token: str) -> WriteDelayed:
    """The write of a 0-d dask array: one blockwise task (not a Delayed taking the array, which
    would give each write its own copy of the array's graph to compute)."""
    target = dask.delayed(a, name="zarr3-target-" + token, pure=True)
    written = da.map_blocks(
        _write_whole, darr, target, region, name=WRITE_PREFIX + token, meta=np.empty((), dtype=np.int64)
    )
    (key,) = flatten([written.__dask_keys__()])
    return WriteDelayed(key, written.dask, a, layer=written.name)


def plan_chunks(
    darr: da.Array,
    a: Array,
    region: tuple[slice, ...],
    *,
    align_chunks: bool = False,
    name: str | None = None,
    dims: Sequence[str | None] | None = None,
    unit_source: str = "",
) -> tuple[tuple[int, ...], ...] | None:
    """The dask chunks to rechunk to before writing (``None``: keep them), or raise.

    Raises ``ChunkAlignmentError`` for misaligned chunks unless ``align_chunks``;
    ``unit_source`` says in the message where the shard (or chunk) shape came from.
    """
    units = storage_units(a)
    starts = tuple(s.start for s in region)
    label = name if name is not None else a.name
    dim_names = dims if dims is not None else a.dimension_names
    try:
        check_alignment(
            darr.chunks,
            units,
            starts,
            name=label,
            dims=dim_names,
            sharded=a.shards is not None,
            unit_source=unit_source,
        )
    except ChunkAlignmentError:
        if not align_chunks:
            raise
        return tuple(aligned_sizes(c, u, s) for c, u, s in zip(darr.chunks, units, starts, strict=True))
    return None


def store(
    darr: Any,
    a: Array,
    region: Sequence[slice] | None = None,
    compute: bool = True,
    align_chunks: bool = False,
    *,
    name: str | None = None,
    dims: Sequence[str | None] | None = None,
    progress: bool = False,
    **compute_kwargs: Any,
) -> Delayed | None:
    """Write ``darr`` into ``a[region]``: one write task per target shard (chunk if unsharded).

    ``compute=False`` returns a ``Delayed`` computing to the number of storage units written
    (on a store that returns receipts, an Icechunk fork's, a ``Tally`` whose ``receipts``
    ``a.store.merge_receipts`` takes; the Delayed's own ``.compute()`` hands them over itself).
    Raises ``ChunkAlignmentError`` (naming variable, dimension, sizes and fix) before writing
    anything when dask blocks would share a shard, unless ``align_chunks=True`` rechunks them.
    ``name``/``dims`` label error messages (default: the array's name and dimension names).

    Every call builds a graph of its own (keys carry a per-call nonce), so a cluster never
    mistakes a new write for an earlier one. Tasks on other processes write through copies of
    ``a``, so ``a`` forgets its cached shard indexes after ``compute=True`` and after the
    returned Delayed's own ``.compute()``. Computed any other way (``dask.compute(d)``,
    ``client.compute(d)``, ``persist``), ``a`` is not told: call ``a.invalidate_cache()`` or
    reopen the array before reading what the workers wrote.
    """
    a_label = name if name is not None else a.name
    if not isinstance(darr, da.Array):
        value = np.asarray(darr)
        reg = normalize_region(region, a.shape, value.shape, a_label)
        if compute:  # one writer, one batched call: nothing to coordinate
            a.set_region(reg, value)
            return None
        return _as_write(dask.delayed(_write_whole, pure=False)(value, a, reg), a)

    reg = normalize_region(region, a.shape, darr.shape, a_label)
    new_chunks = plan_chunks(darr, a, reg, align_chunks=align_chunks, name=name, dims=dims)
    if new_chunks is not None:
        darr = darr.rechunk(new_chunks, method="tasks")
    units = storage_units(a)
    starts = tuple(s.start for s in reg)
    prove_disjoint(darr.chunks, units, starts)  # the ownership proof, whatever path led here

    token = tokenize(darr.name, array_token(a), reg, uuid.uuid4().hex)
    if darr.size == 0:
        d = _as_write(dask.delayed(sum_counts, pure=False)([], dask_key_name=DONE_PREFIX + token), a)
    elif darr.ndim == 0:
        d = _scalar_write(darr, a, reg, token)
    else:
        d = _write_graph(darr, a, starts, token)
    if not compute:
        return d
    (result,) = compute_with_progress(d, progress=progress, **compute_kwargs)
    a.store.merge_receipts(receipts_of(result))  # what the workers' copies of a fork wrote
    a.invalidate_cache()  # the workers rewrote shards this (client) Array may have indexes of
    return None
