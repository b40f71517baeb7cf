"""Stores: where Zarr keys and values live (memory, local directory, any fsspec filesystem, any
zarr-python store object such as an Icechunk session's)."""

from .base import Store, StoreArgumentError, validate_key
from .fsspec_store import FsspecStore
from .local import LocalStore
from .memory import MemoryStore
from .resolve import make_store
from .zarr_python import ZarrPythonStore

__all__ = [
    "FsspecStore",
    "LocalStore",
    "MemoryStore",
    "Store",
    "StoreArgumentError",
    "ZarrPythonStore",
    "make_store",
    "validate_key",
]
