"""Stores: where Zarr keys and values live (memory, local directory, any fsspec filesystem,
S3/GCS/Azure/HTTP through obstore when installed, any zarr-python store object such as an
Icechunk session's)."""

from typing import Any

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


def __getattr__(name: str) -> Any:
    """``ObstoreStore`` is imported on first use: obstore is an optional extra (so it is not in
    ``__all__``: a star import must not need it)."""
    if name == "ObstoreStore":
        from .obstore_store import ObstoreStore

        return ObstoreStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
