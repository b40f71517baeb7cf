"""How a numpy-style selection on an Array is read: basic, orthogonal (``a.oindex``) or
vectorized (``a.vindex``), and the two indexing helpers behind those attributes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import indexing
from ..errors import SelectionError


def fancy_kind(selection: Any, shape: tuple[int, ...]) -> str | None:
    """How numpy would read ``selection``: None (basic), "orthogonal" or "vectorized".

    Like numpy (and zarr-python): several integer arrays with no slices, a multi-dimensional
    index array, or one boolean mask of the array's shape select points (vectorized); one array
    among slices and ints selects the same as orthogonal indexing.
    """
    sel = selection if isinstance(selection, tuple) else (selection,)
    try:
        arrays = [np.asarray(s) for s in sel if isinstance(s, np.ndarray | list)]
    except ValueError as e:  # a ragged list
        raise SelectionError(f"selection {selection!r} is not a valid index array: {e}") from e
    if not arrays:
        return None
    if len(sel) == 1 and arrays[0].dtype == bool and arrays[0].ndim == len(shape) > 1:
        return "vectorized"
    if any(a.ndim > 1 for a in arrays):
        return "nd-array" if len(arrays) == 1 and arrays[0].dtype != bool else "vectorized"
    if len(arrays) > 1:
        if all(isinstance(s, np.ndarray | list | int | np.integer) for s in sel):
            return "vectorized"
        raise SelectionError(
            f"selection {selection!r} mixes several index arrays with slices; numpy's rules for that are "
            "ambiguous here: use a.oindex[...] (per-axis) or a.vindex[...] (points)"
        )
    return "orthogonal"


def flatten_nd(selection: Any) -> tuple[tuple, int, tuple[int, ...]]:
    """For one multi-dimensional integer index array among slices/ints: the selection with that
    array raveled, the axis position of its result, and its shape (numpy places the array's
    dimensions where the indexed axis was)."""
    sel = selection if isinstance(selection, tuple) else (selection,)
    out, pos, shape = [], 0, ()
    for i, s in enumerate(sel):
        if isinstance(s, np.ndarray | list):
            arr = np.asarray(s)
            pos = sum(1 for t in sel[:i] if not isinstance(t, int | np.integer))
            shape = arr.shape
            out.append(arr.ravel())
        else:
            out.append(s)
    return tuple(out), pos, shape


class OIndex:
    """``a.oindex[...]``: orthogonal selections, read and write."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __getitem__(self, selection: Any) -> np.ndarray:
        a = self.array
        result = a._read(indexing.orthogonal_indexer(selection, a.shape, a.storage_chunks))
        return result[()] if result.ndim == 0 else result

    def __setitem__(self, selection: Any, value: Any) -> None:
        a = self.array
        a._write(indexing.orthogonal_indexer(selection, a.shape, a.storage_chunks), value)


class VIndex:
    """``a.vindex[...]``: vectorized (point) selections, read and write."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __getitem__(self, selection: Any) -> np.ndarray:
        a = self.array
        return a._read(indexing.vectorized_indexer(selection, a.shape, a.storage_chunks))

    def __setitem__(self, selection: Any, value: Any) -> None:
        a = self.array
        a._write(indexing.vectorized_indexer(selection, a.shape, a.storage_chunks), value)
