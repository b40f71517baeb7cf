"""Stores: where Zarr keys and values live (memory, local directory, any fsspec filesystem)."""

from .base import Store, StoreArgumentError, validate_key
from .fsspec_store import FsspecStore
from .local import LocalStore
from .memory import MemoryStore
from .resolve import make_store

__all__ = [
    "FsspecStore",
    "LocalStore",
    "MemoryStore",
    "Store",
    "StoreArgumentError",
    "make_store",
    "validate_key",
]
