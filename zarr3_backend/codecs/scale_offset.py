"""The ``scale_offset`` codec (array -> array, zarr-extensions; zarr-python 3.4's definition).

Encoding is ``(x - offset) * scale`` and decoding ``x / scale + offset``, in the arithmetic of
the array's data type: floats stay in their precision; integers must neither overflow nor (on
decoding) leave a remainder, else the codec raises ``CodecError``. ``offset`` and ``scale`` are
written in the data type's fill value encoding and kept exactly as given, so a document read is
written back unchanged. The fill value passes through the same transform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecError
from ..numeric_json import parse_number_json
from ._config import check_keys
from .base import ArrayArrayCodec, ChunkSpec
from .registry import register_codec

__all__ = ["ScaleOffsetCodec"]


@register_codec
@dataclass(frozen=True, eq=False)
class ScaleOffsetCodec(ArrayArrayCodec):
    """``out = (in - offset) * scale`` on encode, ``in / scale + offset`` on decode."""

    name: ClassVar[str] = "scale_offset"
    offset: Any = 0
    scale: Any = 1

    def __post_init__(self) -> None:
        for key in ("offset", "scale"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float | str | np.number):
                raise CodecError(
                    f"codec 'scale_offset': {key!r} must be a number or its string form, got {value!r}"
                )
            if isinstance(value, np.number):
                object.__setattr__(self, key, value.item())

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> ScaleOffsetCodec:
        """Build from ``{"offset"?, "scale"?}`` (both optional)."""
        return cls(**check_keys(cls.name, configuration, ("offset", "scale")))

    def configuration(self) -> dict[str, Any] | None:
        config = {}
        if self.offset != 0:
            config["offset"] = self.offset
        if self.scale != 1:
            config["scale"] = self.scale
        return config or None

    def _params(self, dtype: np.dtype) -> tuple[np.generic, np.generic]:
        out = []
        for key in ("offset", "scale"):
            value = getattr(self, key)
            try:
                out.append(parse_number_json(value, dtype))
            except ValueError as e:
                raise CodecError(
                    f"codec 'scale_offset': {key} {value!r} is not a {dtype} value: {e}"
                ) from None
        return out[0], out[1]

    def validate(self, spec: ChunkSpec) -> None:
        """Refuse non-numeric data types, parameters the data type cannot hold, and scale 0."""
        if spec.dtype.kind not in "iuf":
            raise CodecError(
                f"codec 'scale_offset' supports integer and floating-point data, not {spec.dtype}"
            )
        if self._params(spec.dtype)[1] == 0:
            raise CodecError("codec 'scale_offset': 'scale' must not be zero")

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """Same shape and data type; the fill value encoded like the elements."""
        fill = self.encode(np.asarray(spec.fill_value, dtype=spec.dtype), spec)
        return ChunkSpec(spec.shape, spec.dtype, fill[()])

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        chunk = np.asarray(chunk)
        offset, scale = self._params(chunk.dtype)
        if chunk.dtype.kind == "f":
            with np.errstate(over="ignore", invalid="ignore"):
                return _same_dtype((chunk - offset) * scale, chunk.dtype)
        off, mul = int(offset), int(scale)
        return _checked(_exact(_exact(_wide(chunk), lambda w: w - off), lambda w: w * mul), chunk.dtype)

    def decode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        chunk = np.asarray(chunk)
        offset, scale = self._params(chunk.dtype)
        if chunk.dtype.kind == "f":
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                return _same_dtype(chunk / scale + offset, chunk.dtype)
        wide = _wide(chunk)
        if np.any(wide % int(scale)):
            raise CodecError(
                f"codec 'scale_offset': decoding divides by scale {self.scale!r} with a remainder; "
                f"the result is not a {chunk.dtype} value"
            )
        div, off = int(scale), int(offset)
        return _checked(_exact(wide, lambda w: w // div + off), chunk.dtype)


def _same_dtype(result: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float arithmetic must stay in the array's precision (the spec's "data type semantics")."""
    if result.dtype != dtype:  # cannot happen with same-dtype scalars; a guard, not a cast
        raise CodecError(
            f"codec 'scale_offset': arithmetic changed the data type from {dtype} to {result.dtype}"
        )
    return result


def _wide(chunk: np.ndarray) -> np.ndarray:
    """Integers in a type that holds every intermediate: int64, or Python ints for uint64."""
    return chunk.astype(object if chunk.dtype == np.uint64 else np.int64)


def _exact(wide: np.ndarray, op: Any) -> np.ndarray:
    """``op(wide)`` without silent int64 overflow: ``op`` is monotone in the element, so its
    values at the extremes bound every result; beyond int64 it runs on Python ints."""
    if wide.dtype == object or wide.size == 0:
        return op(wide)
    lo, hi = int(wide.min()), int(wide.max())
    if all(-(2**63) <= b < 2**63 for b in (op(lo), op(hi))):
        return op(wide)
    return op(wide.astype(object))


def _checked(result: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``result`` as ``dtype``; a ``CodecError`` when a value is outside its range."""
    info = np.iinfo(dtype)
    if result.size and (result.min() < info.min or result.max() > info.max):
        raise CodecError(
            f"codec 'scale_offset' produced a value outside the range of {dtype} [{info.min}, {info.max}]"
        )
    return result.astype(dtype)
