"""The regular chunk grid: which chunks an array has and which region of the array each covers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import MetadataError, SelectionError, ShapeError
from ._extension import check_config_keys, parse_extension

__all__ = ["RegularChunkGrid", "parse_chunk_grid"]


def _positive_ints(value: Any, field: str) -> tuple[int, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        raise MetadataError(f"{field} must be an array of positive integers, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer) or v <= 0:
            raise MetadataError(f"{field} must be an array of positive integers, got {list(value)!r}")
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class RegularChunkGrid:
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
            raise MetadataError(f"chunk_grid: unsupported chunk grid {ext.name!r} (supported: 'regular')")
        config = check_config_keys(ext.configuration, {"chunk_shape"}, "chunk_grid 'regular'")
        if "chunk_shape" not in config:
            raise MetadataError("chunk_grid 'regular': configuration needs 'chunk_shape'")
        return cls(config["chunk_shape"])

    def to_json(self) -> dict[str, Any]:
        """The ``chunk_grid`` value written to ``zarr.json``."""
        return {"name": self.name, "configuration": {"chunk_shape": list(self.chunk_shape)}}

    @property
    def ndim(self) -> int:
        """Number of dimensions of the grid (and of the array)."""
        return len(self.chunk_shape)

    def _check_ndim(self, array_shape: Sequence[int]) -> tuple[int, ...]:
        shape = tuple(int(s) for s in array_shape)
        if len(shape) != self.ndim:
            raise ShapeError(
                f"array shape {shape} has {len(shape)} dimensions, chunk shape {self.chunk_shape} has {self.ndim}"
            )
        return shape

    def grid_shape(self, array_shape: Sequence[int]) -> tuple[int, ...]:
        """Number of chunks along each axis: ceil(shape / chunk), 0 for an empty axis."""
        shape = self._check_ndim(array_shape)
        return tuple(-(-s // c) for s, c in zip(shape, self.chunk_shape, strict=True))

    def chunk_region(self, coords: Sequence[int], array_shape: Sequence[int]) -> tuple[slice, ...]:
        """The region of the array that chunk ``coords`` covers, clipped at the array's edge."""
        grid = self.grid_shape(array_shape)
        coords = tuple(int(c) for c in coords)
        if len(coords) != len(grid) or any(not 0 <= c < g for c, g in zip(coords, grid, strict=True)):
            raise SelectionError(f"chunk coordinates {coords} are outside the chunk grid of shape {grid}")
        return tuple(
            slice(c * n, min((c + 1) * n, s))
            for c, n, s in zip(coords, self.chunk_shape, array_shape, strict=True)
        )

    def iter_chunk_coords(self, array_shape: Sequence[int]) -> Iterator[tuple[int, ...]]:
        """Coordinates of every chunk of an array of ``array_shape``, in C order."""
        return itertools.product(*(range(g) for g in self.grid_shape(array_shape)))


def parse_chunk_grid(obj: Any) -> RegularChunkGrid:
    """The chunk grid for a ``chunk_grid`` metadata value (only "regular" exists in the spec)."""
    if isinstance(obj, RegularChunkGrid):
        return obj
    return RegularChunkGrid.from_json(obj)
