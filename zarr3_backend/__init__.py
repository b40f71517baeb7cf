"""zarr3_backend: read and write Zarr v3 from numpy, dask and xarray, without zarr-python.

Layers (each imports only those below it): ``xarray`` > ``dask`` > ``core`` > ``codecs`` |
``stores`` > ``errors``/``byte_range``/``indexing``.
"""

from . import errors, settings
from ._slabs import release_memory
from .core.api import (
    consolidate_metadata,
    create_array,
    create_group,
    open_array,
    open_group,
    open_node,
    repair,
)
from .core.array import Array
from .core.group import Group, UnreadableNode
from .stores import FsspecStore, LocalStore, MemoryStore, Store

__version__ = "0.1.0"


def __getattr__(name: str):  # the writer pulls in xarray and dask: import it on first use
    if name == "to_zarr":
        from .xarray.writer import to_zarr

        return to_zarr
    raise AttributeError(f"module 'zarr3_backend' has no attribute {name!r}")


__all__ = [
    "Array",
    "FsspecStore",
    "Group",
    "UnreadableNode",
    "LocalStore",
    "MemoryStore",
    "Store",
    "consolidate_metadata",
    "create_array",
    "create_group",
    "errors",
    "open_array",
    "open_group",
    "open_node",
    "repair",
    "release_memory",
    "settings",
    "to_zarr",
]
