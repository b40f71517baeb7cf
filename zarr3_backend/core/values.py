"""Values handed to a write, made into arrays of the array's dtype and the selection's shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ShapeError


def coerce_value(value: Any, dtype: np.dtype, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``value`` as an array of ``dtype`` broadcast to ``shape`` (numbers cast unsafely as numpy
    assignment does; strings and objects kept as objects); ``ShapeError`` naming ``where``."""
    try:
        if dtype.kind in "OT":
            arr = np.asarray(value, dtype=object)
        else:
            arr = np.asarray(value)
            if arr.dtype != dtype:
                arr = arr.astype(dtype, casting="unsafe" if arr.dtype.kind in "biufc" else "same_kind")
        return np.broadcast_to(arr, shape)
    except ValueError as e:
        raise ShapeError(
            f"{where}: value of shape {np.shape(value)} cannot be written to a selection of shape {shape}"
        ) from e
    except TypeError as e:
        raise ShapeError(f"{where}: cannot store value of type {type(value).__name__}: {e}") from e
