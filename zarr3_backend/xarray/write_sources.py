"""Sources that mode="w" would erase: lazily read variables whose data lives in the target group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import xarray as xr
from dask.highlevelgraph import MaterializedLayer
from xarray.core.variable import Variable

from ..core.array import Array
from ..dask.read import BlockReader, store_token
from ..errors import (
    ArgumentError,
)
from ..stores import LocalStore, make_store
from ..stores.base import Store
from ..stores.zarr_python import is_zarr_python_store
from .backend_array import Zarr3BackendArray

# ---- sources that mode="w" would erase -------------------------------------------------------
_MAX_WRAPPERS = 16


@dataclass(frozen=True)
class _Source:
    """Where a zarr-python array (read through xarray's own engine) lives, as our Store sees it."""

    store: Store
    path: str


def _zarr_python_source(array: Any) -> _Source | None:
    """The store and path of a zarr-python ``Array``: a zarr-python ``LocalStore`` as ours over
    its directory (so it matches a target given as a path), any other store wrapped as is."""
    store = getattr(getattr(array, "store_path", None), "store", None)
    if not is_zarr_python_store(store):
        return None
    root = getattr(store, "root", None)
    if type(store).__name__ == "LocalStore" and root is not None:
        ours: Store = LocalStore(root, read_only=True)
    else:
        ours = make_store(store, mode="r")
    return _Source(ours, str(array.path).strip("/"))


def _core_arrays(obj: Any) -> list[Array | _Source]:
    """The arrays an object of a dask graph or a lazy variable reads (their store and path),
    looking through our readers, xarray's lazy-indexing wrappers and its zarr engine's."""
    for _ in range(_MAX_WRAPPERS):
        if isinstance(obj, Array):
            return [obj]
        if isinstance(obj, BlockReader):
            return [obj.array]
        if isinstance(obj, Zarr3BackendArray):
            return [obj.get_array()]
        if type(obj).__name__ == "ZarrArrayWrapper":  # xarray's zarr engine (zarr-python)
            source = _zarr_python_source(obj.get_array())
            return [source] if source is not None else []
        if type(obj).__name__ == "DataNode":  # dask's wrapper of a literal in a graph
            obj = getattr(obj, "value", None)
            continue
        if type(obj).__module__.startswith("xarray.") and hasattr(obj, "array"):
            obj = obj.array
            continue
        return []
    return []


def _graph_literals(darr: da.Array) -> list[Any]:
    """Objects held as data (not tasks) in a dask array's graph: where array-likes live."""
    found = []
    for layer in darr.dask.layers.values():
        indices = getattr(layer, "indices", None)
        if indices is not None:  # Blockwise: inlined arguments have no index
            found.extend(arg for arg, index in indices if index is None)
        elif isinstance(layer, MaterializedLayer):
            found.extend(v for v in layer.mapping.values() if not isinstance(v, tuple | list | str))
    return found


def _reads_target(var: Variable, target_store: str, path: str) -> list[str]:
    """Paths of arrays under ``path`` of the target store that ``var`` reads lazily."""
    data = var._data  # the lazy wrapper, not the values
    objs = _graph_literals(data) if isinstance(data, da.Array) else [data]
    out = []
    for obj in objs:
        for arr in _core_arrays(obj):
            inside = not path or arr.path == path or arr.path.startswith(path + "/")
            if inside and store_token(arr.store) == target_store:
                out.append(arr.path)
    return out


def detach_from_target(ds: xr.Dataset, zstore: Store, path: str) -> xr.Dataset:
    """Load lazily read numpy variables that mode="w" would erase, refuse dask ones.

    mode="w" erases the group before any data is computed, so data read lazily from it would
    come back as fill values. Numpy-backed lazy variables are loaded now (the write loads
    them anyway); dask variables may be larger than memory, so they are refused.
    """
    target = store_token(zstore)
    to_load = []
    for name, var in ds.variables.items():
        sources = _reads_target(var, target, path)
        if not sources:
            continue
        if isinstance(var._data, da.Array):
            raise ArgumentError(
                f"variable {name!r} is read lazily (dask) from {sources[0]!r} in the store being "
                f"overwritten, and mode='w' erases group {path or '/'!r} before the data is computed, "
                "so it would be written as fill values. Load it first (.load() or .persist() on a "
                "distributed cluster), write to another store or group, or overwrite in place with "
                "mode='a' (or mode='r+')"
            )
        to_load.append(name)
    if not to_load:
        return ds
    ds = ds.copy(deep=False)
    for name in to_load:
        ds.variables[name].load()
    return ds
