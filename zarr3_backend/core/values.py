"""Values handed to a write, made into arrays of the array's dtype and the selection's shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, ShapeError


def coerce_value(value: Any, dtype: np.dtype, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``value`` as an array of ``dtype`` broadcast to ``shape`` (numbers cast unsafely as numpy
    assignment does; text as the ``string`` type's numpy dtype, so that every write path stores
    the same text; bytes and objects kept as objects); ``ShapeError`` naming ``where``."""
    try:
        if dtype.kind == "T":  # text as the data type holds it, whichever path encodes it
            arr = np.asarray(value, dtype=dtype)
        elif dtype.kind == "O":
            arr = np.asarray(value, dtype=object)
        else:
            arr = np.asarray(value)
            if arr.dtype != dtype:
                arr = arr.astype(dtype, casting="unsafe" if arr.dtype.kind in "biufc" else "same_kind")
        return np.broadcast_to(arr, shape)
    except UnicodeError as e:  # a lone surrogate ('\udcff' from os.fsdecode), bytes not UTF-8
        raise ArgumentError(f"{where}: a value is not valid Unicode text: {e}") from e
    except ValueError as e:
        raise ShapeError(
            f"{where}: value of shape {np.shape(value)} cannot be written to a selection of shape {shape}"
        ) from e
    except TypeError as e:
        raise ShapeError(f"{where}: cannot store value of type {type(value).__name__}: {e}") from e
