"""make_store: turn what a user passes (path, URL, Store, dict) into a Store."""

from __future__ import annotations

import importlib.util
import os
import urllib.parse
import urllib.request
from collections.abc import MutableMapping
from typing import Any

from ..errors import ReadOnlyError
from .base import Store, StoreArgumentError
from .fsspec_options import SETTINGS_KEY, split_storage_options
from .fsspec_store import READ_ONLY_PROTOCOLS, FsspecStore
from .local import LocalStore
from .memory import MemoryStore
from .obstore_options import url_kind
from .zarr_python import ZarrPythonStore, is_zarr_python_store

MODES = ("r", "r+", "a", "w", "w-")

#: The environment variable choosing the store for remote URLs when the call does not.
BACKEND_ENV = "ZARR3_STORE_BACKEND"
#: Its values (and those of ``storage_options["zarr3"]["backend"]``).
BACKENDS = ("auto", "obstore", "fsspec")


def _local_path_from_file_url(url: str) -> str:
    """The path of a ``file://`` URL (RFC 8089; percent-escapes decoded)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise StoreArgumentError(
            f"file URL {url!r} names host {parsed.netloc!r}; only local files are supported"
        )
    return urllib.request.url2pathname(parsed.path)


def _local_file_settings(storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """The store settings of a ``file://`` URL whose options hold nothing else (no fsspec
    option, no fsspec-only setting, no choice of ``backend``): that URL is a LocalStore, which
    keeps what local files can do (positioned reads, atomic renames) that fsspec's would not.
    ``None`` when the options ask for fsspec's file system. ``split_storage_options`` owns
    what the ``"zarr3"`` section may hold (``batch_size`` included)."""
    options, own = split_storage_options(storage_options)
    section = (storage_options or {}).get(SETTINGS_KEY) or {}
    if options or "backend" in section or own.retries is not None or own.unguarded_partial_writes is not None:
        return None
    return own.overrides


def _choose_backend(storage_options: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    """``(backend, storage_options without the choice)``: ``storage_options["zarr3"]["backend"]``
    if given, else the ``ZARR3_STORE_BACKEND`` environment variable, else ``"auto"``."""
    section = (storage_options or {}).get(SETTINGS_KEY)
    if isinstance(section, dict) and "backend" in section:
        rest = {k: v for k, v in section.items() if k != "backend"}
        backend = section["backend"]
        storage_options = {k: v for k, v in storage_options.items() if k != SETTINGS_KEY}  # type: ignore[union-attr]
        if rest:
            storage_options[SETTINGS_KEY] = rest
        where = f"storage_options[{SETTINGS_KEY!r}]['backend']"
    else:
        backend = os.environ.get(BACKEND_ENV) or "auto"
        where = f"the environment variable {BACKEND_ENV}"
    if backend not in BACKENDS:
        raise StoreArgumentError(f"{where} must be one of {', '.join(BACKENDS)}; got {backend!r}")
    return backend, storage_options


def obstore_installed() -> bool:
    """Whether the optional obstore package can be imported."""
    return importlib.util.find_spec("obstore") is not None


def _obstore_store(
    url: str, backend: str, read_only: bool | None, storage_options: dict[str, Any] | None
) -> Store | None:
    """An ObstoreStore for ``url`` when the backend choice allows one and it can be made; None
    to fall back to fsspec (``"auto"`` only: obstore missing, a scheme or options it cannot take)."""
    if backend == "fsspec":
        return None
    usable = url_kind(url) is not None and obstore_installed()
    if not usable:
        if backend == "obstore":
            raise StoreArgumentError(
                f"the obstore backend was asked for {url!r}, but "
                + (
                    "obstore is not installed (pip install obstore)"
                    if url_kind(url)
                    else "it serves only s3, gs, az and http(s) URLs"
                )
            )
        return None
    from .obstore_store import ObstoreStore  # obstore is an optional extra

    try:
        return ObstoreStore(url, storage_options, read_only=read_only)
    except StoreArgumentError:
        if backend == "obstore":
            raise
        return None  # options only fsspec understands: fsspec serves this URL


def _url_store(url: str, mode: str, storage_options: dict[str, Any] | None) -> Store:
    """The store for a remote URL: an ObstoreStore for s3/gs/az/http(s) URLs when obstore is
    installed, else an FsspecStore (see ``make_store`` for the switch). http(s) URLs are
    read-only whatever the mode, and a mode that must write (``w``, ``w-``, ``r+``) is refused
    for them before anything is sent."""
    backend, storage_options = _choose_backend(storage_options)
    read_only = True if mode == "r" else None  # None: read-only only where the protocol is
    store = _obstore_store(url, backend, read_only, storage_options)
    if store is None:
        store = FsspecStore.from_url(url, storage_options=storage_options, read_only=read_only)
        read_only_protocol = store.protocol in READ_ONLY_PROTOCOLS
    else:
        read_only_protocol = url_kind(url) == "http"
    if read_only_protocol:
        if mode in ("w", "w-", "r+"):
            scheme = url.split("://", 1)[0]
            raise ReadOnlyError(f"{url!r} is served over {scheme}, which is read-only; mode {mode!r} writes")
        return store if store.read_only else store.with_read_only(True)
    return store


def make_store(obj: Any, *, mode: str = "r", storage_options: dict[str, Any] | None = None) -> Store:
    """A Store for ``obj``: a Store (as is), a zarr-python store object (ZarrPythonStore:
    Icechunk's ``session.store``, VirtualiZarr's ``ManifestStore``), a local path (LocalStore), an fsspec URL
    (FsspecStore; plain ``file://`` URLs give a LocalStore; http(s) URLs are read-only), an
    fsspec mapper, or a dict (MemoryStore). ``mode == "r"`` makes the store read-only.
    ``storage_options`` go to the fsspec filesystem unchanged, except the section
    ``"zarr3": {"retries": ..., "backend": ..., <setting>: ...}``, which configures the store
    itself (see FsspecStore, ObstoreStore; a setting is a ``zarr3_backend.settings`` name such
    as ``requests_in_flight``, whose older name ``batch_size`` is accepted too).

    Remote URLs: ``s3://``, ``gs://``, ``az://`` (``abfs://``) and ``http(s)://`` URLs get an
    ObstoreStore when obstore is installed (``pip install zarr3_backend[obstore]``), an
    FsspecStore otherwise. One switch chooses: ``storage_options["zarr3"]["backend"]``, or when
    that is not given the environment variable ``ZARR3_STORE_BACKEND``, each ``"auto"``
    (the default), ``"obstore"`` or ``"fsspec"``. ``"auto"`` falls back to fsspec when obstore
    is missing or cannot take the URL or the options (an option with no obstore equivalent);
    ``"obstore"`` refuses those with a StoreArgumentError instead; ``"fsspec"`` always uses
    fsspec. Chained URLs (``"simplecache::s3://..."``) and other schemes always use fsspec.
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
        local_settings = _local_file_settings(storage_options) if obj.startswith("file://") else None
        if local_settings is not None:
            return LocalStore(_local_path_from_file_url(obj), read_only=read_only, settings=local_settings)
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
