"""The ``cast_value`` codec (array -> array, zarr-extensions; zarr-python 3.4's definition).

Converts each element's *value* to ``data_type`` on encoding and back on decoding, in the
spec's order: an explicit ``scalar_map`` entry first, then exact values, then ``rounding``
(``nearest-even`` by default, ``towards-zero``, ``towards-positive``, ``towards-negative``,
``nearest-away``) followed by ``out_of_range`` (absent: an error; ``clamp``; ``wrap``, integer
targets only). NaN and infinities propagate between float types; into an integer type they are
an error unless mapped. Signed zeros are kept. Only integer and float data types take part.

Written by hand with numpy because no maintained library implements these rules (zarr-python
calls the Rust extension ``cast-value-rs``); each rule is one vectorised step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecError
from ..numeric_json import parse_number_json
from ._config import check_choice, check_keys
from .base import ArrayArrayCodec, ChunkSpec
from .registry import register_codec

__all__ = ["CastValueCodec"]

#: Data type names the codec may cast between (the spec also lists sub-byte and 8-bit float
#: types, which numpy has no dtype for).
NUMERIC_TYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}
ROUNDING = ("nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away")
OUT_OF_RANGE = ("clamp", "wrap")


def _type_name(dtype: np.dtype) -> str | None:
    return next((n for n, d in NUMERIC_TYPES.items() if d == dtype.newbyteorder("=")), None)


@register_codec
@dataclass(frozen=True, eq=False)
class CastValueCodec(ArrayArrayCodec):
    """Cast element values to ``data_type`` (encode) and back to the array's type (decode)."""

    name: ClassVar[str] = "cast_value"
    data_type: str
    rounding: str = "nearest-even"
    out_of_range: str | None = None
    scalar_map: Mapping[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.data_type, str) or self.data_type not in NUMERIC_TYPES:
            raise CodecError(
                f"codec 'cast_value': 'data_type' must be one of {', '.join(NUMERIC_TYPES)}, got {self.data_type!r}"
            )
        check_choice(self.name, "rounding", self.rounding, ROUNDING)
        if self.out_of_range is not None:
            check_choice(self.name, "out_of_range", self.out_of_range, OUT_OF_RANGE)
            if self.out_of_range == "wrap" and self.target.kind == "f":
                raise CodecError("codec 'cast_value': out_of_range 'wrap' needs an integer data_type")
        if self.scalar_map is not None:
            sm = check_keys(self.name, self.scalar_map, ("encode", "decode"))
            for direction, pairs in sm.items():
                if not isinstance(pairs, list | tuple) or not all(
                    isinstance(p, list | tuple) and len(p) == 2 for p in pairs
                ):
                    raise CodecError(
                        f"codec 'cast_value': scalar_map {direction!r} must be an array of [input, output] pairs, got {pairs!r}"
                    )
            object.__setattr__(self, "scalar_map", {k: [list(p) for p in v] for k, v in sm.items()})

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> CastValueCodec:
        """Build from ``{"data_type", "rounding"?, "out_of_range"?, "scalar_map"?}``."""
        config = check_keys(
            cls.name,
            configuration,
            ("data_type", "rounding", "out_of_range", "scalar_map"),
            required=("data_type",),
        )
        return cls(**config)

    def configuration(self) -> dict[str, Any]:
        config: dict[str, Any] = {"data_type": self.data_type}
        if self.rounding != "nearest-even":
            config["rounding"] = self.rounding
        if self.out_of_range is not None:
            config["out_of_range"] = self.out_of_range
        if self.scalar_map is not None:
            config["scalar_map"] = {k: [list(p) for p in v] for k, v in self.scalar_map.items()}
        return config

    @property
    def target(self) -> np.dtype:
        """The numpy dtype of the encoded elements."""
        return NUMERIC_TYPES[self.data_type]

    def _pairs(self, direction: str, src: np.dtype, dst: np.dtype) -> list[tuple[np.generic, np.generic]]:
        """The ``scalar_map`` entries of ``direction`` parsed in their data types (first key wins)."""
        out: list[tuple[np.generic, np.generic]] = []
        for key, value in (self.scalar_map or {}).get(direction, []):
            try:
                k, v = parse_number_json(key, src), parse_number_json(value, dst)
            except ValueError as e:
                raise CodecError(
                    f"codec 'cast_value': scalar_map {direction} entry {[key, value]!r}: {e}"
                ) from None
            if not any(_same_value(k, seen) for seen, _ in out):
                out.append((k, v))
        return out

    def validate(self, spec: ChunkSpec) -> None:
        """Refuse non-numeric array types and scalar_map entries their types cannot hold."""
        if _type_name(spec.dtype) is None:
            raise CodecError(f"codec 'cast_value' casts integer and floating-point data, not {spec.dtype}")
        self._pairs("encode", spec.dtype, self.target)
        self._pairs("decode", self.target, spec.dtype)
        fill = np.asarray(spec.fill_value, dtype=spec.dtype).reshape(1)
        encoded = self._cast(fill, self.target, "encode", spec.dtype)
        back = self._cast(encoded, spec.dtype, "decode", self.target)
        if not _same_value(back[0], fill[0]):
            raise CodecError(
                f"codec 'cast_value': the fill value {fill[0]!r} does not survive the cast to "
                f"{self.data_type} and back (it becomes {back[0]!r})"
            )

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """The encoded spec: ``data_type`` elements, the fill value cast like them."""
        fill = self._cast(
            np.asarray(spec.fill_value, dtype=spec.dtype).reshape(1), self.target, "encode", spec.dtype
        )
        return ChunkSpec(spec.shape, self.target, fill[0])

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        chunk = np.asarray(chunk)
        return self._cast(chunk, self.target, "encode", chunk.dtype)

    def decode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        chunk = np.asarray(chunk)
        return self._cast(chunk, spec.dtype, "decode", chunk.dtype)

    # --- the cast ----------------------------------------------------------------------------
    def _cast(self, x: np.ndarray, dst: np.dtype, direction: str, src: np.dtype) -> np.ndarray:
        x = np.asarray(x, dtype=src)
        pairs = self._pairs(direction, src, dst)
        if not pairs:  # no scalar_map (the usual case): no mask, no second output array
            return self._convert(x, dst)
        out = np.empty(x.shape, dtype=dst)
        todo = np.ones(x.shape, dtype=bool)
        for key, value in pairs:
            hit = todo & (np.isnan(x) if _is_nan(key) else (x == key) & (np.signbit(x) == np.signbit(key)))
            out[hit] = value
            todo &= ~hit
        if todo.all():
            out[...] = self._convert(x, dst)
        elif todo.any():
            out[todo] = self._convert(x[todo], dst)
        return out

    def _convert(self, x: np.ndarray, dst: np.dtype) -> np.ndarray:
        src = x.dtype
        if src.kind == "f" and dst.kind == "f":
            return self._float_to_float(x, dst)
        if src.kind == "f":
            return self._float_to_int(x, dst)
        if dst.kind == "f":
            return self._int_to_float(x, dst)
        return self._int_to_int(x, dst)

    def _fail(self, what: str, dst: np.dtype) -> CodecError:
        return CodecError(
            f"codec 'cast_value': {what} cannot be cast to {dst} (no scalar_map entry or out_of_range rule)"
        )

    def _int_to_int(self, x: np.ndarray, dst: np.dtype) -> np.ndarray:
        info = np.iinfo(dst)
        wide = x.astype(object) if x.dtype == np.uint64 or dst == np.uint64 else x.astype(np.int64)
        low, high = wide < info.min, wide > info.max
        if not (low.any() or high.any()):
            return wide.astype(dst)
        if self.out_of_range is None:
            raise self._fail(f"integer {wide[low | high].flat[0]} (outside [{info.min}, {info.max}])", dst)
        if self.out_of_range == "clamp":
            return np.where(low, info.min, np.where(high, info.max, wide)).astype(dst)
        return _wrap(wide, dst)

    def _float_to_int(self, x: np.ndarray, dst: np.dtype) -> np.ndarray:
        bad = ~np.isfinite(x)
        if bad.any():
            raise self._fail(f"{x[bad].flat[0]!r}", dst)
        r = _round_to_integer(x.astype(np.float64), self.rounding)
        info = np.iinfo(dst)
        low, high = r < info.min, r > info.max
        if not (low.any() or high.any()):
            return r.astype(dst)
        if self.out_of_range is None:
            raise self._fail(f"{x[low | high].flat[0]!r} (outside [{info.min}, {info.max}])", dst)
        if self.out_of_range == "clamp":
            return np.where(low, info.min, np.where(high, info.max, r)).astype(dst)
        as_int = np.array([int(v) for v in r.reshape(-1)], dtype=object).reshape(r.shape)
        return _wrap(as_int, dst)

    def _int_to_float(self, x: np.ndarray, dst: np.dtype) -> np.ndarray:
        with np.errstate(over="ignore"):
            r = x.astype(dst)  # nearest-even; exact whenever the value is representable
        if self.rounding != "nearest-even" and _inexact_ints(x, dst):
            r = _directed_int(x, r, self.rounding)
        return self._float_range(r, np.ones(x.shape, dtype=bool), dst, x)

    def _float_to_float(self, x: np.ndarray, dst: np.dtype) -> np.ndarray:
        with np.errstate(over="ignore"):
            r = x.astype(dst)
        if dst.itemsize < x.dtype.itemsize and self.rounding != "nearest-even":
            r = _directed_float(x, r, self.rounding)
        return self._float_range(r, np.isfinite(x), dst, x)

    def _float_range(self, r: np.ndarray, finite_in: np.ndarray, dst: np.dtype, x: np.ndarray) -> np.ndarray:
        """Finite inputs that became infinite overflowed: an error, or infinity with clamp."""
        over = finite_in & ~np.isfinite(r)
        if over.any() and self.out_of_range is None:
            raise self._fail(f"{x[over].flat[0]!r} (beyond the finite range of {dst})", dst)
        return r


def _is_nan(v: np.generic) -> bool:
    return bool(np.issubdtype(np.asarray(v).dtype, np.floating) and np.isnan(v))


def _same_value(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN and -0.0 distinct from 0.0."""
    if _is_nan(a) or _is_nan(b):
        return _is_nan(a) and _is_nan(b)
    return bool(a == b) and bool(np.signbit(a) == np.signbit(b))


def _wrap(wide: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Two's complement wrap of integer values (int64 or Python ints) into ``dst``."""
    bits = 8 * dst.itemsize
    mod = (wide.astype(object) % (1 << bits)) if wide.dtype == object else wide.astype(np.int64)
    if wide.dtype == object:
        signed = dst.kind == "i"
        vals = [
            int(v) - (1 << bits) if signed and int(v) >= 1 << (bits - 1) else int(v) for v in mod.reshape(-1)
        ]
        return np.array(vals, dtype=dst).reshape(wide.shape)
    return mod.astype(dst)  # numpy's integer casts wrap in two's complement


def _round_to_integer(x: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "nearest-even":
        return np.rint(x)
    if rounding == "towards-zero":
        return np.trunc(x)
    if rounding == "towards-positive":
        return np.ceil(x)
    if rounding == "towards-negative":
        return np.floor(x)
    return np.copysign(np.floor(np.abs(x) + 0.5), x)  # nearest-away


def _directed_float(x: np.ndarray, r: np.ndarray, rounding: str) -> np.ndarray:
    """Re-round ``r`` (``x`` rounded to nearest-even in a narrower float) by ``rounding``.

    Comparisons run in float64, where the narrower values and the midpoints between two
    neighbours are exact."""
    xs = x.astype(np.float64)
    rs = r.astype(np.float64)
    finite = np.isfinite(xs) & np.isfinite(rs)
    toward = {"towards-zero": 0.0, "towards-positive": np.inf, "towards-negative": -np.inf}
    if rounding in toward:
        if rounding == "towards-zero":
            move = finite & (np.abs(rs) > np.abs(xs))
        elif rounding == "towards-positive":
            move = finite & (rs < xs)
        else:
            move = finite & (rs > xs)
        out = r.copy()
        out[move] = np.nextafter(r[move], np.asarray(toward[rounding], dtype=r.dtype))
        if rounding != "towards-zero":  # overflow to infinity under directed rounding
            return out
        # towards-zero never overflows: an infinity from a finite input becomes the max finite
        over = np.isfinite(xs) & ~np.isfinite(rs)
        out[over] = np.copysign(np.finfo(r.dtype).max, xs[over]).astype(r.dtype)
        return out
    # nearest-away: only ties differ from nearest-even; move them away from zero
    other = np.nextafter(r, np.where(xs > rs, np.inf, -np.inf).astype(r.dtype))
    tie = finite & (rs != xs) & (xs == (rs + other.astype(np.float64)) / 2)
    out = r.copy()
    away = tie & (np.abs(other.astype(np.float64)) > np.abs(rs))
    out[away] = other[away]
    return out


def _inexact_ints(x: np.ndarray, dst: np.dtype) -> bool:
    """Whether some integers of ``x`` may not be exact in float ``dst`` (more bits than its mantissa)."""
    return x.dtype.itemsize * 8 > np.finfo(dst).nmant + 1


def _directed_int(x: np.ndarray, r: np.ndarray, rounding: str) -> np.ndarray:
    """Re-round integer -> float results by ``rounding``, comparing as Python ints (exact)."""
    out = r.reshape(-1).copy()
    dst = r.dtype
    for i, (e, f) in enumerate(zip(x.reshape(-1).tolist(), out.tolist(), strict=True)):
        if not np.isfinite(f) or int(f) == e:
            continue
        near = dst.type(f)
        other = np.nextafter(near, dst.type(np.inf if int(f) < e else -np.inf))
        lo, hi = (near, other) if int(f) < e else (other, near)
        if rounding == "towards-zero":
            out[i] = lo if e >= 0 else hi
        elif rounding == "towards-positive":
            out[i] = hi
        elif rounding == "towards-negative":
            out[i] = lo
        elif e - int(lo) == int(hi) - e:  # nearest-away: a tie goes away from zero
            out[i] = hi if e >= 0 else lo
    return out.reshape(r.shape)
