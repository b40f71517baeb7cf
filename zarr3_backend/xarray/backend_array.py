"""The lazy array xarray holds for each variable: basic, outer and vectorized indexing go
straight to the core Array, which reads only the chunks (or inner chunks of shards) touched."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
from xarray.backends.common import BackendArray
from xarray.core import indexing

from ..core import rectilinear
from ..core.array import Array
from ..errors import ShapeError

#: How a ``NumpyIndexingAdapter`` takes each explicit indexer kind (values read ahead).
_NUMPY_INDEXERS = {
    indexing.BasicIndexer: lambda a, k: a[k],
    indexing.OuterIndexer: lambda a, k: a.oindex[k],
    indexing.VectorizedIndexer: lambda a, k: a.vindex[k],
}


class Zarr3BackendArray(BackendArray):
    """A read-only xarray ``BackendArray`` over one ``zarr3_backend`` Array.

    ``values``, when given, returns the array's whole stored values, read together with other
    arrays' (an index coordinate's, ``index_prefetch.IndexBatch``): indexing then serves them
    from memory instead of sending requests of its own.
    """

    __slots__ = ("_array", "_regular", "_values", "dtype", "shape")

    def __init__(self, array: Array, values: Callable[[], np.ndarray] | None = None) -> None:
        self._array = array
        self._values = values
        self.shape = tuple(array.shape)
        self.dtype = array.dtype
        #: a rectilinear grid is read through ``core.rectilinear`` (orthogonal selections only:
        #: xarray then splits a vectorized selection into an outer one and a numpy step)
        self._regular = array.metadata.chunk_grid.is_regular

    def get_array(self) -> Array:
        """The wrapped core Array (for writers that need its metadata)."""
        return self._array

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        if self._values is not None:
            return self._served(key)
        support = indexing.IndexingSupport.VECTORIZED
        if not self._regular:  # xarray hands on a basic or outer key; rectilinear.read takes both
            method, support = self._rectilinear, indexing.IndexingSupport.OUTER
        elif isinstance(key, indexing.VectorizedIndexer):
            method = self._vindex
        elif isinstance(key, indexing.OuterIndexer):
            method = self._oindex
        else:
            method = self._getitem
        value = indexing.explicit_indexing_adapter(key, self.shape, support, method)
        return self._as_array(value)

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        """``__getitem__`` on a worker thread, for ``Dataset.load_async``; the core's I/O is
        already batched and concurrent, so a thread is all an event loop needs."""
        return await asyncio.to_thread(self.__getitem__, key)

    def _served(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        """``key`` of the values read ahead, by numpy's own rules for each indexer kind, as a
        fresh copy (as a read from the store would be: the caller may write into it)."""
        values = self._values()  # type: ignore[misc]
        if values.shape != self.shape:
            raise ShapeError(
                f"array {self._array.path or '/'!r}: values read ahead have shape {values.shape}, "
                f"the array {self.shape}"
            )
        part = _NUMPY_INDEXERS[type(key)](indexing.NumpyIndexingAdapter(values), key)
        return np.array(part, dtype=self.dtype, copy=True)

    def _getitem(self, key: tuple) -> Any:
        return self._array[key]

    def _oindex(self, key: tuple) -> Any:
        return self._array.oindex[key]

    def _rectilinear(self, key: tuple) -> Any:
        return rectilinear.read(self._array, key)

    def _vindex(self, key: tuple) -> Any:
        return self._array.vindex[arrayize(key, self.shape)]

    def _as_array(self, value: Any) -> np.ndarray:
        """0-d reads come back as scalars; keep them arrays of the variable's dtype."""
        if isinstance(value, np.ndarray):
            return value
        return np.asarray(value, dtype=self.dtype)


def arrayize(key: tuple, shape: tuple[int, ...]) -> tuple:
    """A vectorized key with its slices replaced by integer arrays.

    xarray's vectorized indexers may mix slices with integer arrays: the arrays broadcast
    together into the leading result axes and each slice adds one trailing axis. The returned
    key gives the same result with pure numpy broadcasting rules.
    """
    n_slices = sum(isinstance(k, slice) for k in key)
    if n_slices == 0:
        return key
    arrays = [k for k in key if not isinstance(k, slice)]
    lead = np.broadcast_shapes(*(np.shape(a) for a in arrays)) if arrays else ()
    out = []
    slice_pos = 0
    for k, size in zip(key, shape, strict=True):
        if isinstance(k, slice):
            axis_shape = (1,) * (len(lead) + slice_pos) + (-1,) + (1,) * (n_slices - slice_pos - 1)
            out.append(np.arange(*k.indices(size)).reshape(axis_shape))
            slice_pos += 1
        else:
            a = np.broadcast_to(np.asarray(k), lead)
            out.append(a.reshape(lead + (1,) * n_slices))
    return tuple(out)
