"""make_store: turn what a user passes (path, URL, Store, dict) into a Store."""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from collections.abc import MutableMapping
from typing import Any

from ..errors import ReadOnlyError
from .base import Store, StoreArgumentError
from .fsspec_store import READ_ONLY_PROTOCOLS, FsspecStore
from .local import LocalStore
from .memory import MemoryStore
from .zarr_python import ZarrPythonStore, is_zarr_python_store

MODES = ("r", "r+", "a", "w", "w-")


def _local_path_from_file_url(url: str) -> str:
    """The path of a ``file://`` URL (RFC 8089; percent-escapes decoded)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise StoreArgumentError(
            f"file URL {url!r} names host {parsed.netloc!r}; only local files are supported"
        )
    return urllib.request.url2pathname(parsed.path)


def _url_store(url: str, mode: str, storage_options: dict[str, Any] | None) -> FsspecStore:
    """An FsspecStore for ``url``; http(s) URLs are read-only whatever the mode, and a mode
    that must write (``w``, ``w-``, ``r+``) is refused for them before anything is sent."""
    read_only = True if mode == "r" else None  # None: read-only only where the protocol is
    store = FsspecStore.from_url(url, storage_options=storage_options, read_only=read_only)
    if store.protocol in READ_ONLY_PROTOCOLS:
        if mode in ("w", "w-", "r+"):
            raise ReadOnlyError(
                f"{url!r} is served over {store.protocol}, which is read-only; mode {mode!r} writes"
            )
        return store if store.read_only else store.with_read_only(True)
    return store


def make_store(obj: Any, *, mode: str = "r", storage_options: dict[str, Any] | None = None) -> Store:
    """A Store for ``obj``: a Store (as is), a zarr-python store object (ZarrPythonStore:
    Icechunk's ``session.store``, VirtualiZarr's ``ManifestStore``), a local path (LocalStore), an fsspec URL
    (FsspecStore; plain ``file://`` URLs give a LocalStore; http(s) URLs are read-only), an
    fsspec mapper, or a dict (MemoryStore). ``mode == "r"`` makes the store read-only.
    ``storage_options`` go to the fsspec filesystem unchanged, except the section
    ``"zarr3": {"retries": ..., "batch_size": ...}``, which configures the store itself
    (see FsspecStore).
    """
    if mode not in MODES:
        raise StoreArgumentError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    read_only = mode == "r"
    if is_zarr_python_store(obj):  # Icechunk session stores, VirtualiZarr's ManifestStore, ...
        obj = ZarrPythonStore(obj)  # with the wrapped store's flag; the mode is applied below
    if isinstance(obj, Store):
        if storage_options:
            raise StoreArgumentError(
                f"storage_options can only be used with a URL, not with the store {obj!r}"
            )
        if read_only and not obj.read_only:
            return obj.with_read_only(True)
        if not read_only and obj.read_only:
            raise ReadOnlyError(f"store {obj!r} is read-only but mode {mode!r} writes")
        return obj
    if isinstance(obj, str) and ("://" in obj or "::" in obj):
        if obj.startswith("file://") and not storage_options:
            return LocalStore(_local_path_from_file_url(obj), read_only=read_only)
        return _url_store(obj, mode, storage_options)
    if isinstance(obj, str | os.PathLike):
        if storage_options:
            raise StoreArgumentError(
                f"storage_options can only be used with an fsspec URL, not with the local path {os.fspath(obj)!r}"
            )
        return LocalStore(obj, read_only=read_only)
    fs = getattr(obj, "fs", None)
    if fs is not None and isinstance(getattr(obj, "root", None), str):  # an fsspec FSMap
        if storage_options:
            raise StoreArgumentError(f"storage_options cannot be used with the mapper {obj!r}")
        return FsspecStore(fs, obj.root, read_only=read_only)
    if isinstance(obj, dict):
        return MemoryStore(obj, read_only=read_only)
    if isinstance(obj, MutableMapping):
        raise StoreArgumentError(
            f"cannot make a store from mapping type {type(obj).__name__}; wrap it in a Store"
        )
    raise StoreArgumentError(
        f"cannot make a store from {type(obj).__name__} {obj!r}: expected a Store, path, URL or fsspec mapper"
    )
