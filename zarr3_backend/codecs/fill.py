"""The one test for "this chunk holds only the fill value", shared by the Array and sharding.

Both decide with it whether a chunk (or inner chunk) needs storing, so they must agree: the
comparison is bit for bit (``-0.0`` is not the fill ``0.0``), except that with a NaN fill value
any NaN payload counts as fill.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["is_fill"]


def is_fill(chunk: np.ndarray, fill_value: Any) -> bool:
    """True when every element of ``chunk`` equals ``fill_value`` bit for bit.

    Floats compare by bits, except that with a NaN fill value any NaN counts as fill; complex
    numbers apply this to the real and imaginary parts separately. Object and variable-length
    string arrays compare by value.
    """
    chunk = np.asarray(chunk)
    if chunk.dtype.hasobject:
        return bool(np.all(chunk == fill_value))
    fill = np.asarray(fill_value, dtype=chunk.dtype)
    if chunk.size > 2 and not _all_fill(chunk.flat[[0, -1]], fill):
        return False  # fast path: a chunk of data almost always differs at its first or last element
    return _all_fill(chunk, fill)


def _all_fill(chunk: np.ndarray, fill: np.ndarray) -> bool:
    dtype = chunk.dtype
    if dtype.kind == "c":
        return _float_is_fill(chunk.real, fill.real) and _float_is_fill(chunk.imag, fill.imag)
    if dtype.kind == "f":
        return _float_is_fill(chunk, fill)
    return _bits_equal(chunk, fill)


def _float_is_fill(chunk: np.ndarray, fill: np.ndarray) -> bool:
    if np.isnan(fill):
        return bool(np.isnan(chunk).all())
    return _bits_equal(chunk, fill)


def _bits_equal(chunk: np.ndarray, fill: np.ndarray) -> bool:
    size = chunk.dtype.itemsize
    if size in (1, 2, 4, 8):  # a same-size view works on any strides, without a copy
        uint = np.dtype(f"u{size}")
        return bool(np.all(chunk.view(uint) == fill.reshape(()).view(uint)))
    raw = np.ascontiguousarray(chunk).view(np.uint8).reshape(-1, size)
    return bool(np.all(raw == np.frombuffer(fill.tobytes(), dtype=np.uint8)))
