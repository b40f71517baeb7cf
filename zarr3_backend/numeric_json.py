"""The spec's JSON forms of integer and floating-point scalars (the fill value encoding).

Integers are JSON integers; floats are JSON numbers or the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"`` and ``"0x<hex of the bits>"``. The data types (fill values) and the codecs
whose configuration holds scalars in that encoding (``scale_offset``, ``cast_value``) share
these rules; each raises ``ValueError`` with the reason, for the caller to wrap in its typed
error naming the field.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "CANONICAL_NAN_BITS",
    "StoredNonFinite",
    "parse_json_constant",
    "float_to_json",
    "non_finite_spelled",
    "parse_float_json",
    "parse_int_json",
    "parse_number_json",
]

#: The bits the spec gives the string "NaN": sign 0, exponent all ones, only the mantissa MSB set.
CANONICAL_NAN_BITS = {2: 0x7E00, 4: 0x7FC0_0000, 8: 0x7FF8_0000_0000_0000}
FLOAT_STRINGS = ("NaN", "Infinity", "-Infinity", "0x<hex>")


def parse_int_json(value: Any, dtype: np.dtype) -> np.generic:
    """The integer scalar of ``dtype`` that ``value`` encodes (range-checked)."""
    if isinstance(value, bool | np.bool_):
        raise ValueError("expected an integer, not a boolean")
    if isinstance(value, np.floating) and np.isfinite(value) and float(value).is_integer():
        value = int(value)  # a numpy float scalar holding an integer (user input, never JSON)
    if not isinstance(value, int | np.integer):
        raise ValueError("expected a JSON integer (no fraction or exponent)")
    info = np.iinfo(dtype)
    if not info.min <= int(value) <= info.max:
        raise ValueError(f"out of range [{info.min}, {info.max}]")
    return dtype.type(int(value))


def float_from_bits(bits: int, dtype: np.dtype) -> np.generic:
    """The float of ``dtype`` with the given bit pattern."""
    return np.array([bits], dtype=f"u{dtype.itemsize}").view(dtype)[0]


def parse_float_json(value: Any, dtype: np.dtype) -> np.generic:
    """The float scalar of ``dtype`` that ``value`` encodes; NaN payloads are kept bit-exact."""
    if isinstance(value, np.generic):
        if isinstance(value, np.floating) and value.dtype.itemsize == dtype.itemsize:
            return np.array(value).reshape(1).view(dtype)[0]  # same type: keep the bits exactly
        if isinstance(value, np.floating | np.integer) and not isinstance(value, np.bool_):
            with np.errstate(over="ignore"):
                return dtype.type(value)
        raise ValueError("expected a real number")
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    if isinstance(value, int | float):
        try:
            as_float = float(value)
        except OverflowError:  # an integer beyond float64: rounds to infinity like any overflow
            as_float = math.inf if value > 0 else -math.inf
        with np.errstate(over="ignore"):
            return dtype.type(as_float)
    if isinstance(value, str):
        if value == "NaN":
            return float_from_bits(CANONICAL_NAN_BITS[dtype.itemsize], dtype)
        if value == "Infinity":
            return dtype.type(np.inf)
        if value == "-Infinity":
            return dtype.type(-np.inf)
        if value.startswith("0x"):
            digits = value[2:]
            width = 2 * dtype.itemsize
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"hex form needs exactly {width} hex digits after '0x'")
            return float_from_bits(int(digits, 16), dtype)
        raise ValueError(f"expected a number or one of {', '.join(map(repr, FLOAT_STRINGS))}")
    raise ValueError("expected a number or a string form")


def parse_number_json(value: Any, dtype: np.dtype) -> np.generic:
    """A scalar of the integer or floating-point ``dtype`` from its JSON form."""
    if dtype.kind in "iu":
        return parse_int_json(value, dtype)
    if dtype.kind == "f":
        return parse_float_json(value, dtype)
    raise ValueError(f"{dtype} is not an integer or floating-point type")


def float_to_json(value: np.floating) -> float | str:
    """The canonical JSON form of a float: a number, or a string for NaN and the infinities."""
    size = value.dtype.itemsize
    if np.isnan(value):
        bits = int(np.array(value).reshape(1).view(f"u{size}")[0])
        return "NaN" if bits == CANONICAL_NAN_BITS[size] else f"0x{bits:0{2 * size}x}"
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    # numpy's str() is the shortest decimal that round-trips in the value's own precision
    return float(str(value))


class StoredNonFinite(float):
    """A NaN or infinity that a stored document holds as a bare JSON token (``NaN``,
    ``Infinity``: Python's json and zarr-python write attributes so): a rewrite of the document
    keeps it a bare number (``metadata.to_bytes``), where a new non-finite value is spelled as a
    string. Otherwise a plain float."""

    __slots__ = ()


def parse_json_constant(token: str) -> StoredNonFinite:
    """``json.loads``' ``parse_constant``: a bare ``NaN``/``Infinity``/``-Infinity`` token as a
    ``StoredNonFinite``, so a rewrite can tell it from a value set since."""
    return StoredNonFinite(token)


def non_finite_spelled(obj: Any, keep_stored: bool = False) -> Any:
    """``obj`` (parsed JSON: dicts, lists, scalars) with every non-finite float spelled as the
    specs spell it (``"NaN"``, ``"Infinity"``, ``"-Infinity"``): what ``json.dumps`` then writes
    is strictly valid JSON that the other libraries read back. With ``keep_stored``, the bare
    tokens a stored document held (``StoredNonFinite``) stay numbers: a rewrite keeps them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        if keep_stored and isinstance(obj, StoredNonFinite):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: non_finite_spelled(v, keep_stored) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [non_finite_spelled(v, keep_stored) for v in obj]
    return obj
