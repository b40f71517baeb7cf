"""Options for remote stores: the store's own settings, and bounded defaults for the filesystem.

Users reach a store only through ``storage_options`` (``open_group(url, storage_options=...)``,
``xr.open_dataset(..., storage_options=...)``), so the store's own settings travel there too, in
a section the filesystem never sees::

    storage_options={"anon": True, "zarr3": {"retries": 2, "requests_in_flight": 16}}

The section takes every name of ``zarr3_backend.settings.Settings`` (the store's overrides of
the package's settings), the store's ``retries`` and ``unguarded_partial_writes``, and
``batch_size``, the older name of ``requests_in_flight``.

``"unguarded_partial_writes": True`` lets a store without conditional writes (GCS, Azure,
``memory://``, ...) write part of a chunk or shard by an unguarded read-modify-write: safe only
when no other writer touches the same chunk or shard at the same time.

For S3 and HTTP(S) the store builds a private filesystem instance (not fsspec's shared, cached
one) with bounded connect/read timeouts and exactly one retry layer, its own: s3fs' nested
retries are switched off on that instance and botocore's too, unless the user configured
botocore's (``config_kwargs={"retries": ...}``), in which case the store adds none by default.
Options the user gives always win over these defaults.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec

from ..settings import NAMES as SETTING_NAMES
from ..settings import check as check_settings
from .base import StoreArgumentError

#: The ``storage_options`` key holding the store's own settings.
SETTINGS_KEY = "zarr3"
#: Retries of transient failures when nothing else retries.
DEFAULT_RETRIES = 3
#: The byte-range coalescing gap of object stores (``Store.default_coalesce_gap``): at tens of
#: milliseconds a request and 100 MB/s or more, reading 1 MiB more costs less than a request.
OBJECT_STORE_COALESCE_GAP = 2**20
#: Seconds to open a connection, and to wait for the next bytes of an answer (S3, HTTP).
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 12.0

S3_PROTOCOLS = frozenset({"s3", "s3a"})
HTTP_PROTOCOLS = frozenset({"http", "https"})
_PRIVATE_CACHE_SIZE = 32


@dataclass(frozen=True)
class StoreSettings:
    """The store's own settings (``storage_options["zarr3"]`` and the store's keywords): its
    retries and partial-write policy (None: the default), and overrides of the package's
    settings (``zarr3_backend.settings.Settings`` names). ``batch_size`` is the documented
    older name of the ``requests_in_flight`` setting."""

    retries: int | None = None
    batch_size: int | None = None
    unguarded_partial_writes: bool | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        flag = self.unguarded_partial_writes
        if flag is not None and not isinstance(flag, bool):
            raise StoreArgumentError(
                f"store setting unguarded_partial_writes must be a bool or None, got {flag!r}"
            )
        for name in ("retries", "batch_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise StoreArgumentError(
                    f"store setting {name} must be a non-negative int or None, got {value!r}"
                )
        if self.batch_size == 0:
            raise StoreArgumentError("store setting batch_size must be at least 1 (or None)")
        checked = check_settings(
            self.settings, error=StoreArgumentError, where=f"storage_options[{SETTINGS_KEY!r}]"
        )
        in_flight = checked.get("requests_in_flight")
        if self.batch_size is not None and in_flight is not None and in_flight != self.batch_size:
            raise StoreArgumentError(
                f"store setting batch_size={self.batch_size!r} (the older name of requests_in_flight) "
                f"disagrees with requests_in_flight={in_flight!r}"
            )
        object.__setattr__(self, "settings", checked)

    @property
    def overrides(self) -> dict[str, Any]:
        """The package-setting overrides these stand for (``batch_size`` as ``requests_in_flight``)."""
        if self.batch_size is None:
            return dict(self.settings)
        return {**self.settings, "requests_in_flight": self.batch_size}

    def merged(
        self, settings: Mapping[str, Any] | None = None, **explicit: int | bool | None
    ) -> StoreSettings:
        """These settings with ``explicit`` keyword values and ``settings`` overrides added;
        the same setting given both ways with different values is refused."""
        values = {
            "retries": self.retries,
            "batch_size": self.batch_size,
            "unguarded_partial_writes": self.unguarded_partial_writes,
        }
        for name, value in [*explicit.items(), *(settings or {}).items()]:
            if value is None:
                continue
            known = values[name] if name in values else self.settings.get(name)
            if known is not None and known != value:
                raise StoreArgumentError(
                    f"store setting {name} given twice: {value!r} as a keyword and "
                    f"{known!r} in storage_options[{SETTINGS_KEY!r}]"
                )
        values.update({k: v for k, v in explicit.items() if v is not None})
        return StoreSettings(**values, settings={**self.settings, **(settings or {})})


#: What ``storage_options["zarr3"]`` may hold besides the package's setting names
#: (``backend``: ``make_store``'s choice of store).
STORE_KEYS = ("retries", "batch_size", "unguarded_partial_writes", "backend")


def split_storage_options(storage_options: dict[str, Any] | None) -> tuple[dict[str, Any], StoreSettings]:
    """``(options for the filesystem, the store's settings)`` from what the user passed."""
    if storage_options is None:
        return {}, StoreSettings()
    if not isinstance(storage_options, dict):
        raise StoreArgumentError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    options = dict(storage_options)
    section = options.pop(SETTINGS_KEY, None)
    if section is None:
        return options, StoreSettings()
    if not isinstance(section, dict):
        raise StoreArgumentError(
            f"storage_options[{SETTINGS_KEY!r}] must be a dict, got {type(section).__name__}"
        )
    unknown = sorted(set(section) - set(STORE_KEYS) - SETTING_NAMES)
    if unknown:
        raise StoreArgumentError(
            f"unknown store setting(s) {', '.join(map(repr, unknown))} in storage_options[{SETTINGS_KEY!r}]; "
            f"known: {', '.join(map(repr, sorted([*STORE_KEYS, *SETTING_NAMES])))}"
        )
    mine = {k: v for k, v in section.items() if k in STORE_KEYS and k != "backend"}
    settings = {k: v for k, v in section.items() if k in SETTING_NAMES}
    return options, StoreSettings(**mine, settings=settings)


async def http_client(connections: int, **client_kwargs: Any) -> Any:
    """fsspec HTTP's ``get_client`` with at most ``connections`` open connections (aiohttp's
    default connector holds 100, fewer than a store keeps requests in flight)."""
    import aiohttp  # fsspec's HTTP filesystem is built on it

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections), **client_kwargs)


def tuned_options(protocol: str | None, options: dict[str, Any], in_flight: int) -> dict[str, Any] | None:
    """Filesystem options with bounded timeouts, one retry layer and room for ``in_flight``
    concurrent requests added (the user's own values kept); None for protocols built as fsspec
    builds them (no private instance)."""
    if protocol in S3_PROTOCOLS:
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
        config.setdefault("read_timeout", DEFAULT_READ_TIMEOUT)
        config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
        config.setdefault("max_pool_connections", in_flight)
        return {**options, "config_kwargs": config}
    if protocol in HTTP_PROTOCOLS:
        client = dict(options.get("client_kwargs") or {})
        if "timeout" not in client:
            import aiohttp  # fsspec's HTTP filesystem is built on it

            client["timeout"] = aiohttp.ClientTimeout(
                total=None, sock_connect=DEFAULT_CONNECT_TIMEOUT, sock_read=DEFAULT_READ_TIMEOUT
            )
        tuned = {**options, "client_kwargs": client}
        if "get_client" not in options and "connector" not in client:
            tuned["get_client"] = functools.partial(http_client, in_flight)
        return tuned
    return None


def filesystem_retries_itself(protocol: str | None, options: dict[str, Any]) -> bool:
    """Whether a private filesystem made from ``options`` retries by itself: only when the user
    configured botocore's retries."""
    return protocol in S3_PROTOCOLS and "retries" in (options.get("config_kwargs") or {})


_private: OrderedDict[str, fsspec.AbstractFileSystem] = OrderedDict()
_private_lock = threading.Lock()


def private_filesystem(fs: fsspec.AbstractFileSystem) -> fsspec.AbstractFileSystem:
    """``fs`` (made with ``skip_instance_cache=True``) tuned for a store, or an equal one made
    before in this process: stores with the same options, and every unpickled copy of one in a
    dask worker, share one client instead of each opening its own connections. Nothing outside
    the stores sees these instances, so tuning them changes no one else's filesystem."""
    token = fs._fs_token  # fsspec's token: class, arguments and process id
    with _private_lock:
        known = _private.get(token)
        if known is not None:
            _private.move_to_end(token)
            return known
        if isinstance(getattr(type(fs), "retries", None), int) and _protocol(fs) in S3_PROTOCOLS:
            # s3fs retries every call itself, twice nested (5 x 5 tries by default, each of them
            # botocore's attempts): off on this instance, the store's retries are the only layer
            fs.retries = 1
        _private[token] = fs
        while len(_private) > _PRIVATE_CACHE_SIZE:
            _private.popitem(last=False)
        return fs


def rebuild_private(cls: type, args: tuple, options: dict[str, Any]) -> fsspec.AbstractFileSystem:
    """The private filesystem of class ``cls`` made with ``args`` and (tuned) ``options``."""
    return private_filesystem(cls(*args, skip_instance_cache=True, **options))


def _protocol(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return p if isinstance(p, str) else p[0]
