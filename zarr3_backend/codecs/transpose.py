"""The ``transpose`` codec (array -> array): permutes the chunk's dimensions, as a view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecError
from ._config import check_int, check_keys
from .base import ArrayArrayCodec, ChunkSpec
from .registry import register_codec


@register_codec
@dataclass(frozen=True, eq=False)
class TransposeCodec(ArrayArrayCodec):
    """Store the chunk with axes in ``order``: encoded axis ``i`` is decoded axis ``order[i]``."""

    name: ClassVar[str] = "transpose"
    order: tuple[int, ...]

    def __post_init__(self) -> None:
        order = self.order
        if not isinstance(order, list | tuple):
            raise CodecError(f"codec 'transpose': 'order' must be a list of integers, got {order!r}")
        order = tuple(check_int(self.name, "order", i) for i in order)
        if sorted(order) != list(range(len(order))):
            raise CodecError(
                f"codec 'transpose': 'order' {list(order)} is not a permutation of 0..{len(order) - 1}"
            )
        object.__setattr__(self, "order", order)

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> TransposeCodec:
        """Build from ``{"order": [permutation]}``."""
        return cls(**check_keys(cls.name, configuration, ("order",), required=("order",)))

    def configuration(self) -> dict[str, Any]:
        return {"order": list(self.order)}

    @cached_property
    def inverse(self) -> tuple[int, ...]:
        """The permutation that undoes ``order``."""
        return tuple(int(i) for i in np.argsort(self.order))

    def validate(self, spec: ChunkSpec) -> None:
        """Refuse an ``order`` whose length is not the chunk's number of dimensions."""
        if len(self.order) != len(spec.shape):
            raise CodecError(
                f"codec 'transpose': order {list(self.order)} is not a permutation of range({len(spec.shape)}) "
                f"for a chunk of {len(spec.shape)} dimensions {spec.shape}"
            )

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """The encoded spec: ``shape[i] = spec.shape[order[i]]``."""
        return ChunkSpec(tuple(spec.shape[i] for i in self.order), spec.dtype, spec.fill_value)

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """A transposed view; the array -> bytes codec makes it contiguous when it serialises."""
        return np.asarray(chunk).transpose(self.order)

    def decode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """A view of ``chunk`` with the decoded (``spec``) axis order."""
        return np.asarray(chunk).transpose(self.inverse)


def undo_transposes(orders: Sequence[Sequence[int]], shape: Sequence[int]) -> tuple[int, ...]:
    """``shape``, given in the axes after transposes ``orders`` (in chain order), in the axes
    before the first: e.g. a sharding codec's inner chunk shape in the array's axis order."""
    out = tuple(shape)
    for order in reversed(orders):
        back = [0] * len(out)
        for axis, size in zip(order, out, strict=True):  # encoded axis i is decoded axis order[i]
            back[axis] = size
        out = tuple(back)
    return out
