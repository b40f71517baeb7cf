"""Chunk grids: which chunks an array has, which region each covers, which chunk holds an index.

Two grids exist: ``regular`` (the core spec: equal chunks from the origin) and ``rectilinear``
(zarr-extensions, written by zarr-python 3.4: per axis an explicit list of chunk edge lengths,
with a bare integer and ``[value, count]`` run-length pairs as short forms). Both answer through
:class:`ChunkGrid`; the codecs of a chunk see its *codec shape* (the full chunk, also where it
runs past the array's edge), while :meth:`ChunkGrid.chunk_region` is the part inside the array.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from ..errors import MetadataError, SelectionError, ShapeError
from ._extension import check_config_keys, parse_extension

__all__ = [
    "MAX_EDGES",
    "ChunkGrid",
    "RectilinearChunkGrid",
    "RegularChunkGrid",
    "parse_chunk_grid",
    "rectilinear_from_arg",
]


#: Most explicit chunk edges a rectilinear grid may list (all axes together, run-length pairs
#: expanded): the edges are held expanded, so a metadata document must not size them at will.
#: A million chunks along explicit edges is far beyond any layout seen; larger regular runs
#: belong in a ``regular`` grid (or a bare integer axis).
MAX_EDGES = 2**20


def _positive_ints(value: Any, field: str) -> tuple[int, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        raise MetadataError(f"{field} must be an array of positive integers, got {value!r}")
    out = []
    for v in value:
        if not _is_positive_int(v):
            raise MetadataError(f"{field} must be an array of positive integers, got {list(value)!r}")
        out.append(int(v))
    return tuple(out)


def _is_positive_int(v: Any) -> bool:
    return not isinstance(v, bool | np.bool_) and isinstance(v, int | np.integer) and v > 0


class ChunkGrid:
    """What every chunk grid answers; the Array, the dask graph builders and the shard
    alignment ask a grid, never compute chunk boundaries themselves."""

    name: ClassVar[str] = ""
    #: True when every chunk has the same codec shape (``chunk_shape``).
    is_regular: ClassVar[bool] = True

    @property
    def ndim(self) -> int:
        """Number of dimensions of the grid (and of the array)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The ``chunk_grid`` value written to ``zarr.json``."""
        raise NotImplementedError

    def axis_offsets(self, axis: int, size: int) -> tuple[int, ...]:
        """Start of every chunk along ``axis`` of an axis of length ``size``, then ``size``:
        chunk ``k`` covers ``[offsets[k], offsets[k + 1])``."""
        raise NotImplementedError

    def codec_shape(self, coords: Sequence[int]) -> tuple[int, ...]:
        """The shape the codecs see for chunk ``coords`` (not clipped at the array's edge)."""
        raise NotImplementedError

    def check_covers(self, array_shape: Sequence[int]) -> None:
        """Raise ``MetadataError`` unless the grid has ``len(array_shape)`` axes covering it."""
        self._check_ndim(array_shape)

    # --- derived from the above ---------------------------------------------------------------
    def _check_ndim(self, array_shape: Sequence[int]) -> tuple[int, ...]:
        shape = tuple(int(s) for s in array_shape)
        if len(shape) != self.ndim:
            raise ShapeError(
                f"array shape {shape} has {len(shape)} dimensions, the chunk grid has {self.ndim}"
            )
        return shape

    def grid_shape(self, array_shape: Sequence[int]) -> tuple[int, ...]:
        """Number of chunks along each axis that hold array elements (0 for an empty axis)."""
        shape = self._check_ndim(array_shape)
        return tuple(len(self.axis_offsets(i, s)) - 1 for i, s in enumerate(shape))

    def axis_chunks(self, array_shape: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """Per axis, the lengths of the chunks inside the array (dask's ``chunks``)."""
        shape = self._check_ndim(array_shape)
        out = []
        for i, s in enumerate(shape):
            offsets = self.axis_offsets(i, s)
            out.append(tuple(b - a for a, b in itertools.pairwise(offsets)) or (0,))
        return tuple(out)

    def chunk_region(self, coords: Sequence[int], array_shape: Sequence[int]) -> tuple[slice, ...]:
        """The region of the array that chunk ``coords`` covers, clipped at the array's edge."""
        shape = self._check_ndim(array_shape)
        coords = tuple(int(c) for c in coords)
        grid = self.grid_shape(shape)
        if len(coords) != len(grid) or any(not 0 <= c < g for c, g in zip(coords, grid, strict=True)):
            raise SelectionError(f"chunk coordinates {coords} are outside the chunk grid of shape {grid}")
        out = []
        for i, (c, s) in enumerate(zip(coords, shape, strict=True)):
            offsets = self.axis_offsets(i, s)
            out.append(slice(offsets[c], offsets[c + 1]))
        return tuple(out)

    def chunk_indices(self, axis: int, indices: np.ndarray, size: int) -> np.ndarray:
        """The chunk along ``axis`` holding each of ``indices`` (valid indices of an axis of ``size``)."""
        offsets = np.asarray(self.axis_offsets(axis, size), dtype=np.int64)
        return np.searchsorted(offsets, np.asarray(indices, dtype=np.int64), side="right") - 1

    def iter_chunk_coords(self, array_shape: Sequence[int]) -> Iterator[tuple[int, ...]]:
        """Coordinates of every chunk of an array of ``array_shape``, in C order."""
        return itertools.product(*(range(g) for g in self.grid_shape(array_shape)))


@dataclass(frozen=True)
class RegularChunkGrid(ChunkGrid):
    """A grid of equal hyperrectangular chunks of ``chunk_shape``, aligned at the array origin."""

    chunk_shape: tuple[int, ...]

    name: ClassVar[str] = "regular"

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunk_shape", _positive_ints(self.chunk_shape, "chunk_grid.chunk_shape"))

    @classmethod
    def from_json(cls, obj: Any) -> RegularChunkGrid:
        """Parse ``{"name": "regular", "configuration": {"chunk_shape": [...]}}``."""
        ext = parse_extension(obj, "chunk_grid")
        if ext.name != cls.name:
            raise MetadataError(f"chunk_grid: expected 'regular', got {ext.name!r}")
        config = check_config_keys(ext.configuration, {"chunk_shape"}, "chunk_grid 'regular'")
        if "chunk_shape" not in config:
            raise MetadataError("chunk_grid 'regular': configuration needs 'chunk_shape'")
        return cls(config["chunk_shape"])

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"chunk_shape": list(self.chunk_shape)}}

    @property
    def ndim(self) -> int:
        return len(self.chunk_shape)

    def axis_offsets(self, axis: int, size: int) -> tuple[int, ...]:
        return (*range(0, size, self.chunk_shape[axis]), size) if size else (0,)

    def codec_shape(self, coords: Sequence[int]) -> tuple[int, ...]:
        return self.chunk_shape

    def grid_shape(self, array_shape: Sequence[int]) -> tuple[int, ...]:
        """Number of chunks along each axis: ceil(shape / chunk), 0 for an empty axis."""
        shape = self._check_ndim(array_shape)
        return tuple(-(-s // c) for s, c in zip(shape, self.chunk_shape, strict=True))

    def chunk_indices(self, axis: int, indices: np.ndarray, size: int) -> np.ndarray:
        return np.asarray(indices, dtype=np.int64) // self.chunk_shape[axis]


@dataclass(frozen=True)
class RectilinearChunkGrid(ChunkGrid):
    """Per axis an explicit sequence of chunk edge lengths (the ``rectilinear`` extension).

    ``chunk_shapes`` holds, per axis, a bare integer (a regular step repeated to cover the axis)
    or a tuple of edge lengths, already expanded from run-length pairs. The edges must reach the
    array's extent; they may run past it (whole chunks beyond it are not part of the grid).
    """

    chunk_shapes: tuple[int | tuple[int, ...], ...]

    name: ClassVar[str] = "rectilinear"
    is_regular: ClassVar[bool] = False

    def __post_init__(self) -> None:
        field = "chunk_grid 'rectilinear': 'chunk_shapes'"
        if isinstance(self.chunk_shapes, str | bytes) or not isinstance(self.chunk_shapes, Sequence):
            raise MetadataError(f"{field} must be an array, got {self.chunk_shapes!r}")
        parsed: list[int | tuple[int, ...]] = []
        budget = MAX_EDGES  # edges of every axis together
        for axis, spec in enumerate(self.chunk_shapes):
            if _is_positive_int(spec):
                parsed.append(int(spec))
            elif isinstance(spec, Sequence | np.ndarray) and not isinstance(spec, str | bytes):
                if len(spec) > budget:
                    raise MetadataError(
                        f"{field}[{axis}]: {len(spec)} entries make more than the supported {MAX_EDGES} chunk edges"
                    )
                edges = _expand_rle(spec, f"{field}[{axis}]", budget)
                budget -= len(edges)
                if not edges:
                    raise MetadataError(f"{field}[{axis}] has no chunk edges")
                parsed.append(edges)
            else:
                raise MetadataError(
                    f"{field}[{axis}] must be a positive integer or an array of edge lengths, got {spec!r}"
                )
        object.__setattr__(self, "chunk_shapes", tuple(parsed))

    @classmethod
    def from_json(cls, obj: Any) -> RectilinearChunkGrid:
        """Parse ``{"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": [...]}}``."""
        ext = parse_extension(obj, "chunk_grid")
        if ext.name != cls.name:
            raise MetadataError(f"chunk_grid: expected 'rectilinear', got {ext.name!r}")
        config = check_config_keys(ext.configuration, {"kind", "chunk_shapes"}, "chunk_grid 'rectilinear'")
        if config.get("kind") != "inline":
            raise MetadataError(
                f"chunk_grid 'rectilinear': 'kind' must be 'inline' (the only kind defined), got {config.get('kind')!r}"
            )
        if "chunk_shapes" not in config:
            raise MetadataError("chunk_grid 'rectilinear': configuration needs 'chunk_shapes'")
        return cls(config["chunk_shapes"])

    def to_json(self) -> dict[str, Any]:
        """Edges as zarr-python 3.4 writes them: run-length pairs where that is shorter."""
        shapes: list[Any] = []
        for spec in self.chunk_shapes:
            if isinstance(spec, int):
                shapes.append(spec)
            else:
                rle = _compress_rle(spec)
                shapes.append(rle if len(rle) < len(spec) else list(spec))
        return {"name": self.name, "configuration": {"kind": "inline", "chunk_shapes": shapes}}

    @property
    def ndim(self) -> int:
        return len(self.chunk_shapes)

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """Refused: chunks differ in shape (ask ``codec_shape(coords)``); a typed error, so a
        caller that assumes a regular grid fails loudly instead of reading the wrong chunks."""
        raise ShapeError(
            "a rectilinear chunk grid has no single chunk shape: its chunks are "
            f"{self.to_json()['configuration']['chunk_shapes']}"
        )

    @cached_property
    def _cumulative(self) -> tuple[tuple[int, ...] | None, ...]:
        return tuple(
            None if isinstance(spec, int) else tuple(itertools.accumulate(spec)) for spec in self.chunk_shapes
        )

    def check_covers(self, array_shape: Sequence[int]) -> None:
        shape = self._check_ndim(array_shape)
        for axis, (s, cum) in enumerate(zip(shape, self._cumulative, strict=True)):
            if cum is not None and cum[-1] < s:
                raise MetadataError(
                    f"chunk_grid 'rectilinear': the edges of axis {axis} add up to {cum[-1]}, "
                    f"less than the array's extent {s}"
                )

    def axis_offsets(self, axis: int, size: int) -> tuple[int, ...]:
        spec = self.chunk_shapes[axis]
        if isinstance(spec, int):
            return (*range(0, size, spec), size) if size else (0,)
        cum = self._cumulative[axis]
        assert cum is not None
        if size == 0:
            return (0,)
        if cum[-1] < size:
            raise ShapeError(
                f"axis {axis} of length {size} runs past its chunk edges (they end at {cum[-1]})"
            )
        n = bisect.bisect_left(cum, size) + 1  # chunks holding at least one element
        return (0, *cum[: n - 1], size)

    def edges(self, axis: int, size: int) -> tuple[int, ...]:
        """The full (unclipped) edge lengths of the chunks along ``axis`` inside an axis of ``size``."""
        offsets = self.axis_offsets(axis, size)
        spec = self.chunk_shapes[axis]
        n = len(offsets) - 1
        return (spec,) * n if isinstance(spec, int) else tuple(spec[:n])

    def codec_shape(self, coords: Sequence[int]) -> tuple[int, ...]:
        out = []
        for axis, c in enumerate(coords):
            spec = self.chunk_shapes[axis]
            if isinstance(spec, int):
                out.append(spec)
            elif 0 <= c < len(spec):
                out.append(spec[c])
            else:
                raise SelectionError(
                    f"chunk index {c} along axis {axis} is outside the grid's {len(spec)} chunks"
                )
        return tuple(out)

    def distinct_codec_shapes(self, array_shape: Sequence[int]) -> set[tuple[int, ...]]:
        """Every codec shape a chunk inside the array has (to validate a codec chain once each)."""
        shape = self._check_ndim(array_shape)
        per_axis = [sorted(set(self.edges(i, s))) or [1] for i, s in enumerate(shape)]
        if math.prod(len(p) for p in per_axis) > 4096:  # bounded: per-axis extremes are checked
            per_axis = [sorted({p[0], p[-1]}) for p in per_axis]
        return set(itertools.product(*per_axis))

    def update_shape(self, old_shape: Sequence[int], new_shape: Sequence[int]) -> RectilinearChunkGrid:
        """The grid after a resize, as zarr-python 3.4 does it: explicit edges that no longer
        reach the new extent get one more edge covering the difference; the rest is kept."""
        specs: list[int | tuple[int, ...]] = []
        for spec, new in zip(self.chunk_shapes, new_shape, strict=True):
            if isinstance(spec, int) or sum(spec) >= new:
                specs.append(spec)
            else:
                specs.append((*spec, new - sum(spec)))
        return RectilinearChunkGrid(tuple(specs))


def _expand_rle(spec: Any, field: str, budget: int = MAX_EDGES) -> tuple[int, ...]:
    """Edge lengths from a list of lengths and ``[value, count]`` run-length pairs; more than
    ``budget`` edges in all are refused before they are expanded."""
    out: list[int] = []
    for item in spec:
        if _is_positive_int(item):
            out.append(int(item))
        elif (
            isinstance(item, Sequence | np.ndarray)
            and not isinstance(item, str | bytes)
            and len(item) == 2
            and all(_is_positive_int(v) for v in item)
        ):
            value, count = int(item[0]), int(item[1])
            if count > budget - len(out):  # never let a metadata document decide a huge allocation
                raise MetadataError(
                    f"{field}: run length {count} makes more than the supported {MAX_EDGES} chunk edges"
                )
            out.extend([value] * count)
        else:
            raise MetadataError(
                f"{field}: each entry must be a positive edge length or a [length, count] pair of "
                f"positive integers, got {item!r}"
            )
    if len(out) > budget:  # bare edges (at most ``len(spec)``, checked by the caller) add up too
        raise MetadataError(f"{field}: {len(out)} chunk edges, more than the supported {MAX_EDGES}")
    return tuple(out)


def _compress_rle(edges: Sequence[int]) -> list[Any]:
    """Runs of equal edges as ``[value, count]`` pairs (single edges stay bare)."""
    out: list[Any] = []
    for value, run in itertools.groupby(edges):
        count = len(list(run))
        out.append([value, count] if count > 1 else value)
    return out


def parse_chunk_grid(obj: Any) -> ChunkGrid:
    """The chunk grid for a ``chunk_grid`` metadata value: ``regular`` or ``rectilinear``."""
    if isinstance(obj, ChunkGrid):
        return obj
    ext = parse_extension(obj, "chunk_grid")
    if ext.name == RegularChunkGrid.name:
        return RegularChunkGrid.from_json(obj)
    if ext.name == RectilinearChunkGrid.name:
        return RectilinearChunkGrid.from_json(obj)
    raise MetadataError(
        f"chunk_grid: unsupported chunk grid {ext.name!r} (supported: 'regular', 'rectilinear')"
    )


def rectilinear_from_arg(value: Any, ndim: int) -> RectilinearChunkGrid | None:
    """The rectilinear grid a ``chunks=``/``shards=`` argument asks for (per axis a list of edge
    lengths, e.g. ``[[2, 3, 5], 4]``), or ``None`` when it is a regular shape (or absent)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        return None
    if not any(isinstance(v, Sequence | np.ndarray) and not isinstance(v, str | bytes) for v in value):
        return None
    if len(value) != ndim:
        raise ShapeError(f"chunk edges {value!r} have {len(value)} axes, the array has {ndim}")
    return RectilinearChunkGrid(tuple(value))
