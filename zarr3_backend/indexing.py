"""Selections -> chunk projections: which chunks a selection touches and where each piece goes.

A bottom-layer pure module (numpy and ``errors`` only). Array reads and writes, and sharding for
inner chunks, iterate an indexer's ``ChunkProjection`` values; every step costs time in
proportion to the chunks (and points) the selection touches, never to the size of the grid.

Three kinds of selection, as in zarr-python and numpy:

- basic (``a[...]``): ints (negative ok), slices of any non-zero step (negative steps are
  supported and give numpy's reversed order), ``Ellipsis``, tuples shorter than ``ndim``;
- orthogonal (``a.oindex[...]``): per axis an int, slice, 1-d int array or 1-d bool mask;
  arrays apply independently per axis, like ``x[np.ix_(...)]``;
- vectorized (``a.vindex[...]``): int arrays broadcast together (numpy fancy indexing), or one
  bool mask of the array's shape.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from .errors import SelectionError, ShapeError

__all__ = [
    "BasicIndexer",
    "ChunkProjection",
    "Indexer",
    "OrthogonalIndexer",
    "VectorizedIndexer",
    "basic_indexer",
    "chunk_bounding_box",
    "normalize_selection",
    "orthogonal_indexer",
    "shift_selection",
    "vectorized_indexer",
]


class ChunkProjection(NamedTuple):
    """The part of one chunk a selection touches (immutable; a NamedTuple because one is made
    per chunk of every read, at a third of a frozen dataclass's cost).

    ``out[out_selection] = chunk[chunk_selection]`` reads it (``chunk`` is the full-size chunk,
    edge chunks padded); ``chunk[chunk_selection] = value[out_selection]`` writes it.
    ``is_complete``: every axis is ``slice(0, n, 1)`` with ``n`` the chunk's in-bounds extent, or
    an int where that extent is 1: the selection covers each in-bounds element of the chunk once,
    in order, so a write needs no read of the old chunk (``a[t] = frame`` with chunks ``(1, ...)``).
    """

    chunk_coords: tuple[int, ...]
    chunk_selection: tuple
    out_selection: tuple
    is_complete: bool


@runtime_checkable
class Indexer(Protocol):
    """What Array reads and writes consume: the result shape and the per-chunk projections."""

    shape: tuple[int, ...]
    nchunks: int

    def __iter__(self) -> Iterator[ChunkProjection]: ...


# ---- validation and normalisation -----------------------------------------------------------


def _check_grid(shape: Sequence[int], chunk_shape: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate an array shape and its regular chunk shape; return both as int tuples."""
    shape_t = tuple(map(int, shape))
    chunks_t = tuple(map(int, chunk_shape))
    if len(shape_t) != len(chunks_t):
        raise ShapeError(
            f"chunk shape {chunks_t} has {len(chunks_t)} dimensions, array shape {shape_t} has {len(shape_t)}"
        )
    if shape_t and min(shape_t) < 0:
        raise ShapeError(f"array shape {shape_t} has a negative extent")
    if chunks_t and min(chunks_t) < 1:
        raise ShapeError(f"chunk shape {chunks_t} must be positive along every axis")
    return shape_t, chunks_t


def _out_of_bounds(index: Any, axis: int, size: int) -> SelectionError:
    return SelectionError(f"index {index} is out of bounds for axis {axis} with size {size}")


def _normalize_int(index: int, axis: int, size: int) -> int:
    if not -size <= index < size:
        raise _out_of_bounds(index, axis, size)
    return index + size if index < 0 else index


def _normalize_slice(sel: slice, axis: int, size: int) -> slice:
    """A slice with concrete ``start``/``step`` (``stop`` is ``None`` only when a negative step
    runs past index 0); empty slices become ``slice(0, 0, 1)``."""
    try:
        start, stop, step = sel.indices(size)
    except (TypeError, ValueError) as e:
        raise SelectionError(f"axis {axis}: invalid slice {sel!r}: {e}") from e
    if not (stop > start if step > 0 else stop < start):
        return slice(0, 0, 1)
    if step < 0 and stop < 0:
        return slice(start, None, step)
    return slice(start, stop, step)


def _normalize_array(arr: np.ndarray, axis: int, size: int) -> np.ndarray:
    """A bounds-checked, non-negative ``intp`` copy of an integer index array (any ndim)."""
    if arr.dtype.kind == "b":
        raise SelectionError(f"axis {axis}: a boolean mask is only allowed as a 1-d per-axis index here")
    if arr.dtype.kind not in "iu":
        if arr.size == 0:  # ``[]`` arrives as float64
            return np.zeros(arr.shape, dtype=np.intp)
        raise SelectionError(
            f"axis {axis}: index array of dtype {arr.dtype} is not supported; use integers or booleans"
        )
    if arr.size:
        bad = (arr >= size) | (arr < -size) if arr.dtype.kind == "i" else arr >= size
        if bad.any():
            raise _out_of_bounds(arr[bad].flat[0], axis, size)
    out = arr.astype(np.intp, copy=True)
    if out.size and out.min() < 0:
        out[out < 0] += size
    return out


def _mask_to_indices(mask: np.ndarray, axis: int, size: int) -> np.ndarray:
    if mask.ndim != 1 or mask.shape[0] != size:
        raise SelectionError(
            f"axis {axis}: boolean mask of shape {mask.shape} does not match the axis length {size}"
        )
    return np.flatnonzero(mask).astype(np.intp, copy=False)


def _as_index_array(entry: Any, axis: int) -> np.ndarray:
    """``np.asarray(entry)``; a ragged list (numpy refuses it) is a ``SelectionError``."""
    try:
        return np.asarray(entry)
    except ValueError as e:
        raise SelectionError(f"axis {axis}: index {entry!r} is not a rectangular array: {e}") from None


def _normalize_entry(entry: Any, axis: int, size: int) -> int | slice | np.ndarray:
    """One axis of a selection: a non-negative int, a normalised slice or an ``intp`` array."""
    if isinstance(entry, slice):
        return _normalize_slice(entry, axis, size)
    if isinstance(entry, bool | np.bool_):
        raise SelectionError(f"axis {axis}: boolean scalar index {entry!r} is not supported")
    if isinstance(entry, np.ndarray | list | tuple | range):
        arr = _as_index_array(entry, axis)
        if arr.ndim == 0 and arr.dtype.kind in "iu":
            return _normalize_int(int(arr), axis, size)
        if arr.dtype.kind == "b":
            return _mask_to_indices(arr, axis, size)
        return _normalize_array(arr, axis, size)
    if entry is None:
        raise SelectionError(f"axis {axis}: newaxis (None) is not supported in a selection")
    try:
        index = operator.index(entry)
    except TypeError:
        raise SelectionError(
            f"axis {axis}: index {entry!r} of type {type(entry).__name__} is not an int, slice or integer array"
        ) from None
    return _normalize_int(index, axis, size)


def _expand(selection: Any, ndim: int) -> tuple:
    """Wrap, expand one ``Ellipsis`` and pad with full slices to ``ndim`` entries."""
    sel = selection if isinstance(selection, tuple) else (selection,)
    at, count = -1, 0  # a loop, not ``in``/``count``: those compare entries (arrays) with ==
    for i, s in enumerate(sel):
        if s is Ellipsis:
            at, count = i, count + 1
    if count > 1:
        raise SelectionError(f"a selection may hold at most one Ellipsis, got {count}")
    real = len(sel) - count
    if real > ndim:
        raise SelectionError(f"too many indices: {real} given for an array of {ndim} dimension(s)")
    if real == ndim and not count:
        return sel
    fill = (slice(None),) * (ndim - real)
    return sel[:at] + fill + sel[at + 1 :] if count else sel + fill


def normalize_selection(selection: Any, shape: Sequence[int]) -> tuple:
    """Validate a selection against ``shape``: one entry per axis, each a non-negative int, a
    normalised slice or a non-negative ``intp`` array (1-d bool masks become their indices)."""
    return _normalize(selection, tuple(map(int, shape)))


def _normalize(selection: Any, shape_t: tuple[int, ...]) -> tuple:
    """``normalize_selection`` for a shape already made an int tuple."""
    sel = _expand(selection, len(shape_t))
    return tuple(
        [
            _normalize_slice(e, axis, size) if isinstance(e, slice) else _normalize_entry(e, axis, size)
            for axis, (e, size) in enumerate(zip(sel, shape_t, strict=True))
        ]
    )


# ---- per-axis projections --------------------------------------------------------------------


class _Part(NamedTuple):
    """One chunk's share along one axis."""

    chunk: int
    chunk_sel: int | slice | np.ndarray
    out_sel: slice | np.ndarray | None  # None: the axis is dropped from the output (int index)
    complete: bool


def _extent(k: int, c: int, size: int) -> int:
    """In-bounds length of chunk ``k`` (chunk length ``c``) along an axis of length ``size``."""
    return min(c, size - k * c)


class _IntDim:
    """An int index: one chunk, axis dropped; complete when that chunk is one element long."""

    def __init__(self, index: int, c: int, size: int) -> None:
        k, local = divmod(index, c)
        self._part = _Part(k, local, None, _extent(k, c, size) == 1)
        self.nchunks = 1
        self.out_len: int | None = None

    def parts(self) -> Iterator[_Part]:
        yield self._part


class _SliceDim:
    """A slice; chunk selections stay slices. Chunks a stepped slice skips are not yielded."""

    def __init__(self, sel: slice, c: int, size: int) -> None:
        start, stop, step = sel.start, sel.stop, sel.step  # normalised (``_normalize_slice``)
        # the same elements in ascending order: first, first + step, ..., last
        self._reverse = step < 0
        if self._reverse:
            rng = range(start, -1 if stop is None else stop, step)
            n = len(rng)
            first = rng[-1] if n else 0
        else:
            n = (stop - start - 1) // step + 1 if stop > start else 0
            first = start if n else 0
        self.out_len = n
        self._c, self._size, self._n = c, size, n
        self._step = abs(step)
        self._first = first
        self._last = first + (n - 1) * self._step
        if n == 0:
            self.nchunks = 0
        elif self._step <= c:  # every chunk between the first and last element is touched
            self.nchunks = self._last // c - self._first // c + 1
        else:  # no two elements share a chunk
            self.nchunks = n

    def _part(self, k: int, f: int, count: int) -> _Part:
        """Chunk ``k`` holds ``count`` elements starting at absolute index ``f``."""
        c, step, o = self._c, self._step, k * self._c
        lo = f - o
        j = (f - self._first) // step  # output position of ``f`` in ascending order
        if count == 1:
            return _Part(
                k, slice(lo, lo + 1, 1), self._flip(j, j + 1), lo == 0 and _extent(k, c, self._size) == 1
            )
        hi = lo + (count - 1) * step
        out = self._flip(j, j + count)
        if self._reverse:
            stop = lo - step
            return _Part(k, slice(hi, stop if stop >= 0 else None, -step), out, False)
        complete = step == 1 and lo == 0 and hi + 1 == _extent(k, c, self._size)
        return _Part(k, slice(lo, hi + 1, step), out, complete)

    def _flip(self, a: int, b: int) -> slice:
        return slice(self._n - b, self._n - a) if self._reverse else slice(a, b)

    def parts(self) -> Iterator[_Part]:
        if self._n == 0:
            return
        c, step, first, last = self._c, self._step, self._first, self._last
        if step > c:
            for j in range(self._n):
                k = (first + j * step) // c
                yield self._part(k, first + j * step, 1)
            return
        if step == 1 and not self._reverse:  # the common case, kept cheap
            size, stop = self._size, last + 1
            for k in range(first // c, last // c + 1):  # (conditional expressions: cheaper than min/max)
                o = k * c
                end = o + c
                lo = first if first > o else o
                hi = stop if stop < end else end
                whole = lo == o and hi == (end if end < size else size)
                yield _Part(k, slice(lo - o, hi - o, 1), slice(lo - first, hi - first), whole)
            return
        for k in range(first // c, last // c + 1):
            o = k * c
            f = first if first >= o else first + -((first - o) // step) * step
            end = min(o + c, last + 1)
            yield self._part(k, f, (end - 1 - f) // step + 1)


def _run_or_array(a: np.ndarray) -> slice | np.ndarray:
    """``slice(a[0], a[-1] + 1)`` when ``a`` is a run of consecutive ints, else ``a``."""
    if len(a) == 1 or (len(a) and a[-1] - a[0] == len(a) - 1 and np.all(np.diff(a) == 1)):
        return slice(int(a[0]), int(a[-1]) + 1, 1)
    return a


class _ArrayDim:
    """A 1-d int array (any order, duplicates ok): points grouped by chunk with one sort."""

    def __init__(self, idx: np.ndarray, c: int, size: int) -> None:
        self._c, self._size = c, size
        self.out_len = len(idx)
        ordered = len(idx) < 2 or bool(np.all(idx[1:] >= idx[:-1]))
        self._order = None if ordered else np.argsort(idx, kind="stable")
        self._sorted = idx if ordered else idx[self._order]
        chunk_ids = self._sorted // c
        starts = np.flatnonzero(chunk_ids[1:] != chunk_ids[:-1]) + 1
        self._starts = np.concatenate(([0], starts)).tolist() if len(idx) else []
        self._ends = [*self._starts[1:], len(idx)] if len(idx) else []
        self._chunks = chunk_ids[self._starts].tolist() if len(idx) else []
        self.nchunks = len(self._chunks)

    def parts(self) -> Iterator[_Part]:
        c = self._c
        for k, s, e in zip(self._chunks, self._starts, self._ends, strict=True):
            local = _run_or_array(self._sorted[s:e] - k * c)
            out = slice(s, e) if self._order is None else _run_or_array(self._order[s:e])
            complete = (
                isinstance(local, slice) and local.start == 0 and local.stop == _extent(k, c, self._size)
            )
            yield _Part(k, local, out, complete)


def _outer(entries: Sequence[Any], lengths: Sequence[int]) -> tuple:
    """Make ints/slices/1-d arrays select their outer product under numpy's rules.

    A single array whose fellow advanced indices (ints) sit next to it already does; otherwise
    every non-int axis becomes an ``np.ix_``-style array (slices expanded over ``lengths``).
    """
    n_arrays = sum(isinstance(e, np.ndarray) for e in entries)
    if n_arrays == 0:
        return tuple(entries)
    advanced = [i for i, e in enumerate(entries) if not isinstance(e, slice)]
    if n_arrays == 1 and advanced[-1] - advanced[0] + 1 == len(advanced):
        return tuple(entries)
    m = sum(not isinstance(e, int | np.integer) for e in entries)
    result: list = []
    k = 0
    for e, length in zip(entries, lengths, strict=True):
        if isinstance(e, int | np.integer):
            result.append(e)
            continue
        a = np.arange(length, dtype=np.intp)[e] if isinstance(e, slice) else e
        shape = [1] * m
        shape[k] = -1
        result.append(a.reshape(shape))
        k += 1
    return tuple(result)


#: Inner axes with at most this many parts in total are listed once and reused (fast path).
_CACHE_PARTS = 1 << 20
#: An outer axis with at most this many parts is listed too; a longer one is streamed, so the
#: first projection of a long 1-d read comes at once, not after listing every chunk.
_LISTED_HEAD = 1 << 10


def _product(dims: Sequence[Any]) -> Iterator[tuple[_Part, ...]]:
    """Lazy cartesian product of the per-axis parts, outer axis first (C order of chunks).

    Axes with few parts in all (the usual case) are listed once and multiplied by
    ``itertools.product``; otherwise the outer axis is streamed part by part, and the inner
    ones listed once when they are few (else re-generated for every outer part).
    """
    if not dims or (dims[0].nchunks <= _LISTED_HEAD and sum(d.nchunks for d in dims[1:]) <= _CACHE_PARTS):
        return itertools.product(*[list(d.parts()) for d in dims])
    return _product_lazy(dims)


def _product_lazy(dims: Sequence[Any]) -> Iterator[tuple[_Part, ...]]:
    """``_product`` with the outer axis streamed: part by part, the inner axes listed once when
    they are few, else generated again for each outer part."""
    head, rest = dims[0], dims[1:]
    inner = [list(d.parts()) for d in rest] if sum(d.nchunks for d in rest) <= _CACHE_PARTS else None
    for part in head.parts():
        for tail in itertools.product(*inner) if inner is not None else _product(rest):
            yield (part, *tail)


# ---- indexers ----------------------------------------------------------------------------------


class _GridIndexer:
    """Projections of a per-axis (basic or orthogonal) selection: product of per-axis parts."""

    def __init__(self, sel: tuple, shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> None:
        dims: list[Any] = []
        arrays = False
        kept: list[int] = []  # axes kept in the output (an int index drops its axis)
        out_shape: list[int] = []
        nchunks = 1
        for axis, (entry, size, c) in enumerate(zip(sel, shape, chunk_shape, strict=True)):
            if isinstance(entry, slice):
                d: Any = _SliceDim(entry, c, size)
            elif isinstance(entry, np.ndarray):
                d = _ArrayDim(entry, c, size)
                arrays = True
            else:
                d = _IntDim(entry, c, size)
            dims.append(d)
            nchunks *= d.nchunks
            if d.out_len is not None:
                kept.append(axis)
                out_shape.append(d.out_len)
        self._dims = dims
        self._chunk_shape = chunk_shape
        self._has_arrays = arrays
        self._kept = kept if len(kept) < len(dims) else None  # None: every axis is kept
        self.shape: tuple[int, ...] = tuple(out_shape)
        self.nchunks: int = nchunks

    def __iter__(self) -> Iterator[ChunkProjection]:
        if self.nchunks == 0:
            return
        chunk_shape, shape, arrays, kept = self._chunk_shape, self.shape, self._has_arrays, self._kept
        for parts in _product(self._dims):
            coords, chunk_sel, out_sel, complete = zip(*parts, strict=True) if parts else ((), (), (), ())
            if kept is not None:
                out_sel = tuple([out_sel[i] for i in kept])
            if arrays:
                chunk_sel, out_sel = _outer(chunk_sel, chunk_shape), _outer(out_sel, shape)
            yield ChunkProjection(coords, chunk_sel, out_sel, all(complete))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape}, nchunks={self.nchunks})"


class BasicIndexer(_GridIndexer):
    """Projections of a basic selection (ints, slices, Ellipsis): made by ``basic_indexer``, or
    directly from a selection ``normalize_selection`` made (no arrays) on a checked grid."""


class OrthogonalIndexer(_GridIndexer):
    """Projections of an orthogonal selection (per-axis ints, slices, int arrays, bool masks)."""


def basic_indexer(selection: Any, shape: Sequence[int], chunk_shape: Sequence[int]) -> BasicIndexer:
    """Index a regularly chunked array with ints, slices and ``Ellipsis`` (numpy basic indexing)."""
    shape_t, chunks_t = _check_grid(shape, chunk_shape)
    sel = _normalize(selection, shape_t)
    for axis, entry in enumerate(sel):
        if isinstance(entry, np.ndarray):
            raise SelectionError(
                f"axis {axis}: an array index is not a basic selection; use oindex (orthogonal) "
                "or vindex (vectorized)"
            )
    return BasicIndexer(sel, shape_t, chunks_t)


def orthogonal_indexer(selection: Any, shape: Sequence[int], chunk_shape: Sequence[int]) -> OrthogonalIndexer:
    """Index with per-axis ints, slices, 1-d int arrays or 1-d bool masks (``x[np.ix_(...)]``)."""
    shape_t, chunks_t = _check_grid(shape, chunk_shape)
    sel = _normalize(selection, shape_t)
    for axis, entry in enumerate(sel):
        if isinstance(entry, np.ndarray) and entry.ndim != 1:
            raise SelectionError(
                f"axis {axis}: an orthogonal index array must be 1-d, got shape {entry.shape}; "
                "use vindex for multi-dimensional coordinate arrays"
            )
    return OrthogonalIndexer(sel, shape_t, chunks_t)


class VectorizedIndexer:
    """Projections of a vectorized selection: points grouped by chunk with one lexsort."""

    def __init__(
        self, coords: tuple[np.ndarray, ...], out_shape: tuple[int, ...], chunk_shape: tuple[int, ...]
    ) -> None:
        self.shape: tuple[int, ...] = out_shape
        self._out_shape = out_shape
        self._scalar = len(out_shape) == 0
        n = int(np.prod(out_shape, dtype=np.int64))
        flat = [np.broadcast_to(a, out_shape).reshape(-1) for a in coords]
        chunk_ids = [a // c for a, c in zip(flat, chunk_shape, strict=True)]
        if n and chunk_ids:
            order = (
                np.lexsort(chunk_ids[::-1]) if len(chunk_ids) > 1 else np.argsort(chunk_ids[0], kind="stable")
            )
            sorted_ids = [k[order] for k in chunk_ids]
            change = np.zeros(n - 1, dtype=bool)
            for k in sorted_ids:
                change |= k[1:] != k[:-1]
            starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        else:
            order = np.arange(n, dtype=np.intp)
            sorted_ids = chunk_ids
            starts = np.zeros(min(n, 1), dtype=np.intp)
        self._order = order
        self._local = [(a - k * c)[order] for a, k, c in zip(flat, chunk_ids, chunk_shape, strict=True)]
        self._starts = starts.tolist()
        self._ends = [*self._starts[1:], n] if n else []
        self._coords = (
            list(zip(*(k[starts].tolist() for k in sorted_ids), strict=True))
            if chunk_ids
            else [()] * len(self._starts)
        )
        self.nchunks: int = len(self._starts)

    def __iter__(self) -> Iterator[ChunkProjection]:
        for coords, s, e in zip(self._coords, self._starts, self._ends, strict=True):
            if self._scalar:
                yield ChunkProjection(coords, tuple(int(a[0]) for a in self._local), (), False)
                continue
            if not self._local:  # a 0-d array under a True mask: its one element, as out[0]
                yield ChunkProjection(coords, (), (0,), False)
                continue
            chunk_sel = tuple(a[s:e] for a in self._local)
            pos = self._order[s:e]
            if len(self._out_shape) == 1:
                out_sel: tuple = (_run_or_array(pos),)
            else:
                out_sel = np.unravel_index(pos, self._out_shape)
            yield ChunkProjection(coords, chunk_sel, out_sel, False)

    def __repr__(self) -> str:
        return f"VectorizedIndexer(shape={self.shape}, nchunks={self.nchunks})"


def vectorized_indexer(selection: Any, shape: Sequence[int], chunk_shape: Sequence[int]) -> VectorizedIndexer:
    """Index with int arrays broadcast together, one per axis, or one bool mask of the array's
    shape (numpy fancy indexing); the result has the broadcast shape (or ``(n_true,)``)."""
    shape_t, chunks_t = _check_grid(shape, chunk_shape)
    ndim = len(shape_t)
    sel = selection if isinstance(selection, tuple) else (selection,)
    if len(sel) == 1 and isinstance(sel[0], np.ndarray | list) and _as_index_array(sel[0], 0).dtype == bool:
        mask = np.asarray(sel[0])
        if mask.shape != shape_t:
            raise SelectionError(
                f"boolean mask of shape {mask.shape} does not match the array shape {shape_t}"
            )
        if ndim == 0:
            n = int(bool(mask))
            return VectorizedIndexer(tuple(), (n,), chunks_t) if n else _empty_vectorized((0,))
        coords = tuple(a.astype(np.intp, copy=False) for a in np.nonzero(mask))
        return VectorizedIndexer(coords, (len(coords[0]),), chunks_t)
    if len(sel) != ndim:
        raise SelectionError(
            f"a vectorized selection needs one integer array per axis: got {len(sel)} for an array of {ndim} dimension(s)"
        )
    arrays = []
    for axis, (entry, size) in enumerate(zip(sel, shape_t, strict=True)):
        if isinstance(entry, slice) or entry is Ellipsis:
            raise SelectionError(f"axis {axis}: a vectorized selection takes integer arrays, not {entry!r}")
        normalized = _normalize_entry(entry, axis, size)
        arrays.append(np.asarray(normalized, dtype=np.intp))
    try:
        out_shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError as e:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise SelectionError(
            f"vectorized index arrays of shapes {shapes} cannot be broadcast together"
        ) from e
    return VectorizedIndexer(tuple(arrays), tuple(out_shape), chunks_t)


def _empty_vectorized(out_shape: tuple[int, ...]) -> VectorizedIndexer:
    return VectorizedIndexer((), out_shape, ())


# ---- helpers on chunk selections ---------------------------------------------------------------


def chunk_bounding_box(chunk_selection: tuple, chunk_shape: Sequence[int]) -> tuple[slice, ...]:
    """The smallest step-1 box holding every element a chunk selection touches (what a partial
    decode must fetch); ``slice(0, 0)`` on every axis when it touches nothing."""
    sel = chunk_selection if isinstance(chunk_selection, tuple) else (chunk_selection,)
    shape_t = tuple(int(s) for s in chunk_shape)
    if len(sel) != len(shape_t):
        raise SelectionError(
            f"chunk selection has {len(sel)} entries for a chunk of {len(shape_t)} dimension(s)"
        )
    box: list[slice] = []
    for axis, (entry, length) in enumerate(zip(sel, shape_t, strict=True)):
        if isinstance(entry, slice):
            r = range(*entry.indices(length))
            if not r:
                return tuple(slice(0, 0) for _ in shape_t)
            box.append(slice(min(r[0], r[-1]), max(r[0], r[-1]) + 1))
            continue
        a = np.asarray(entry)
        if a.dtype.kind == "b":
            a = np.flatnonzero(a)
        if a.size == 0:
            return tuple(slice(0, 0) for _ in shape_t)
        if a.dtype.kind not in "iu":
            raise SelectionError(f"axis {axis}: chunk selection entry of dtype {a.dtype} is not an index")
        lo, hi = int(a.min()), int(a.max())
        if lo < -length or hi >= length:
            raise _out_of_bounds(lo if lo < -length else hi, axis, length)
        if lo < 0:
            a = np.where(a < 0, a + length, a)
            lo, hi = int(a.min()), int(a.max())
        box.append(slice(lo, hi + 1))
    return tuple(box)


def shift_selection(chunk_selection: tuple, box: Sequence[slice]) -> tuple:
    """Re-express a chunk selection relative to ``box`` (from ``chunk_bounding_box``), so it
    indexes the sub-array ``chunk[box]`` that a partial decode returns (reversed slices too)."""
    out: list = []
    for entry, b in zip(chunk_selection, box, strict=True):
        o = b.start
        if isinstance(entry, slice):
            start = None if entry.start is None else entry.start - o
            if entry.step is not None and entry.step < 0:
                stop = None if entry.stop is None or entry.stop - o < 0 else entry.stop - o
            else:
                stop = None if entry.stop is None else entry.stop - o
            out.append(slice(start, stop, entry.step))
        else:
            out.append(entry - o)
    return tuple(out)


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
