"""The package's tunable settings in one place: threads, requests in flight, buffers, caches.

Each setting has a default, an environment variable (read each time the setting is used, not
at import) and can be overridden for a block of code (``with zarr3_backend.settings.using(...)``)
or for one store (``storage_options={"zarr3": {...}}`` or a store's ``settings=`` argument).
Precedence, highest first: ``using(...)`` blocks, the store's own settings, environment
variables, defaults. Code that needs a value calls ``current()`` (or ``store.settings``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import types
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

_MiB = 2**20


@dataclass(frozen=True)
class Settings:
    """Every tunable of the package; a frozen value (``dataclasses.replace`` makes variants)."""

    #: Threads of the "io" pool (blocking store requests, one per thread).
    io_threads: int = 32
    #: Threads of the "cpu" pool (encoding and decoding; numcodecs releases the GIL).
    cpu_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    #: Requests one batched or streamed call keeps in flight on an object store.
    requests_in_flight: int = 256
    #: Compressed bytes a streamed read holds that have landed but are not decoded yet; past it
    #: no new request goes out until decoding catches up.
    window_bytes: int = 32 * _MiB
    #: Byte ranges of one value closer than this are fetched as one request; ``None``: the
    #: store's own default (small on local disk, about 1 MiB on object stores).
    coalesce_gap: int | None = None
    #: Decoded shard indexes kept per array on stores with costly requests.
    shard_index_cache_bytes: int = 16 * _MiB
    #: Decoded chunks kept per store in a least-recently-used cache (0: no cache).
    chunk_cache_bytes: int = 0
    #: How long an open waits for another writer's commit window before refusing (seconds).
    commit_wait: float = 30.0
    #: ``open_dataset(chunks={})`` on a store with costly requests: one dask task reads this
    #: many bytes of stored units (a whole number of them), so each task keeps many requests
    #: in flight. 0: one stored unit per task, as on local stores.
    remote_task_bytes: int = 64 * _MiB


#: The environment variable of each setting.
ENVIRONMENT: Mapping[str, str] = {
    "io_threads": "ZARR3_IO_THREADS",
    "cpu_threads": "ZARR3_CPU_THREADS",
    "requests_in_flight": "ZARR3_REQUESTS_IN_FLIGHT",
    "window_bytes": "ZARR3_WINDOW_BYTES",
    "coalesce_gap": "ZARR3_COALESCE_GAP",
    "shard_index_cache_bytes": "ZARR3_SHARD_INDEX_CACHE_BYTES",
    "chunk_cache_bytes": "ZARR3_CHUNK_CACHE_BYTES",
    "commit_wait": "ZARR3_COMMIT_WAIT",
    "remote_task_bytes": "ZARR3_REMOTE_TASK_BYTES",
}

_NAMES = frozenset(f.name for f in fields(Settings))
_NONE: Mapping[str, Any] = types.MappingProxyType({})
_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "zarr3_settings", default=_NONE
)


def _parse(name: str, raw: str) -> Any:
    """The value of environment variable text for setting ``name``; a bad value warns, then
    the default stands."""
    kind = float if name == "commit_wait" else int
    try:
        value = kind(float(raw)) if kind is int else kind(raw)
    except ValueError:
        warnings.warn(f"{ENVIRONMENT[name]}={raw!r} is not a number: using the default", stacklevel=3)
        return None
    return value if value >= 0 else None


def check(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as setting overrides, refusing unknown names and negative or non-numbers."""
    from .errors import ArgumentError

    out = {}
    for name, value in values.items():
        if name not in _NAMES:
            raise ArgumentError(f"unknown zarr3_backend setting {name!r}; known: {', '.join(sorted(_NAMES))}")
        if value is None and name == "coalesce_gap":
            out[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ArgumentError(f"setting {name!r} must be a non-negative number, got {value!r}")
        out[name] = value
    return out


def current(store_overrides: Mapping[str, Any] | None = None) -> Settings:
    """The settings in force here and now: defaults, then environment variables, then
    ``store_overrides`` (one store's own), then the innermost ``using(...)`` blocks."""
    values: dict[str, Any] = {}
    for name, var in ENVIRONMENT.items():
        raw = os.environ.get(var)
        if raw is not None:
            parsed = _parse(name, raw)
            if parsed is not None:
                values[name] = parsed
    if store_overrides:
        values.update(store_overrides)
    values.update(_overrides.get())
    return Settings(**values)


@contextlib.contextmanager
def using(**values: Any) -> Iterator[Settings]:
    """Override settings for the calls made inside the ``with`` block in this thread (or asyncio
    task); a call reads them when it starts. Yields the settings then in force."""
    token = _overrides.set({**_overrides.get(), **check(values)})
    try:
        yield current()
    finally:
        _overrides.reset(token)
