"""The xarray layer: ``engine="zarr3"`` for ``xr.open_dataset``/``open_datatree``, and CF helpers.

Differences from xarray's own zarr engine, on purpose: ``encoding["preferred_chunks"]`` is the
shard shape (the chunk shape when unsharded) on local stores, so ``chunks={}`` gives one dask
task per stored object, and on stores with costly requests a block of whole shards up to
``settings.remote_task_bytes``, so each task keeps many requests in flight; codecs in ``encoding`` are their ``zarr.json`` dicts; ``use_zarr_fill_value_as_mask``
is honoured by ``open_dataset``; arrays without dimension names get ``dim_<axis>`` names.
"""

from __future__ import annotations

from typing import Any

from .backend import Zarr3BackendEntrypoint, open_target_group
from .backend_array import Zarr3BackendArray
from .datastore import Zarr3DataStore, array_encoding

__all__ = [
    "Zarr3BackendArray",
    "Zarr3BackendEntrypoint",
    "Zarr3DataStore",
    "array_encoding",
    "open_target_group",
    "to_zarr",
]


def __getattr__(name: str) -> Any:
    if name == "to_zarr":  # the writer lives in its own module (imported on first use)
        from .writer import to_zarr

        return to_zarr
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
