"""The package's tunable settings in one place: threads, requests in flight, buffers, caches.

Each setting has a default, an environment variable (read each time the setting is used, not
at import) and can be overridden for a block of code (``with zarr3_backend.settings.using(...)``)
or for one store (``storage_options={"zarr3": {...}}`` or a store's ``settings=`` argument).
Precedence, highest first: ``using(...)`` blocks, the store's own settings, environment
variables, defaults. Code that needs a value calls ``current()`` (or ``store.settings``).
A bad environment value warns and is ignored; a bad value given in code raises ``ArgumentError``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
import types
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from .errors import ArgumentError

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
    #: Compressed bytes a streamed read holds that have landed but are not decoded yet: half
    #: for values handed to the decoders, half for answers the store has read and not handed
    #: over (ObstoreStore reads a body only within it); past it, intake waits for decoding.
    window_bytes: int = 32 * _MiB
    #: Byte ranges of one value closer than this are fetched as one request; ``None``: the
    #: store's own default (``Store.coalesce_gap``: small on local disk, about 1 MiB on object
    #: stores).
    coalesce_gap: int | None = None
    #: Bytes a store with costly requests delivers in about one round trip, over all its
    #: connections (bandwidth x latency): regions inside shards whose indexes are not cached
    #: read those shards whole, one request each, instead of each index and then the inner
    #: chunks, when the inner chunks the read does not touch hold at most this many bytes (at
    #: their largest) over all of them. 0: always the indexes first.
    round_trip_bytes: int = 16 * _MiB
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
    #: Memory kept for recycling read results of 1 MiB to max(64 MiB, a quarter of it) (``_slabs``;
    #: 0 turns reuse off).
    #: ``None``: 1/16 of physical memory, at most 1 GiB; 64 MiB in processes that ask malloc to
    #: return memory promptly (``MALLOC_TRIM_THRESHOLD_`` set, as in dask's workers). Its
    #: environment variable counts MiB: ``ZARR3_BUFFER_POOL_MB``.
    buffer_pool_bytes: int | None = None
    #: Local stores: every step of a write survives a power loss or a crash of the machine
    #: (each value is on disk before its name, and the file system is flushed between the
    #: commit's steps and before a write, document change or creation outside a commit
    #: returns). Off, writes are as durable as the page cache (as in zarr-python): a crash of
    #: the process never tears a store, a crash of the machine can.
    durable: bool = False


#: The environment variable of each setting.
ENVIRONMENT: Mapping[str, str] = types.MappingProxyType(
    {
        "io_threads": "ZARR3_IO_THREADS",
        "cpu_threads": "ZARR3_CPU_THREADS",
        "requests_in_flight": "ZARR3_REQUESTS_IN_FLIGHT",
        "window_bytes": "ZARR3_WINDOW_BYTES",
        "coalesce_gap": "ZARR3_COALESCE_GAP",
        "round_trip_bytes": "ZARR3_ROUND_TRIP_BYTES",
        "shard_index_cache_bytes": "ZARR3_SHARD_INDEX_CACHE_BYTES",
        "chunk_cache_bytes": "ZARR3_CHUNK_CACHE_BYTES",
        "commit_wait": "ZARR3_COMMIT_WAIT",
        "remote_task_bytes": "ZARR3_REMOTE_TASK_BYTES",
        "buffer_pool_bytes": "ZARR3_BUFFER_POOL_MB",
        "durable": "ZARR3_DURABLE",
    }
)
#: Environment variables counting another unit than the setting: the setting's value per unit.
ENVIRONMENT_UNITS: Mapping[str, int] = types.MappingProxyType({"buffer_pool_bytes": _MiB})

#: Settings whose value is a count that must be at least 1 (a pool of 0 threads, 0 requests).
_AT_LEAST_ONE = frozenset({"io_threads", "cpu_threads", "requests_in_flight"})
#: Settings that take a fractional number; the others are whole numbers.
_FRACTIONAL = frozenset({"commit_wait"})
#: Settings that are on or off (environment: 1/0, true/false, yes/no, on/off).
_SWITCHES = frozenset({"durable"})
_SWITCH_WORDS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}
#: Settings for which ``None`` means "the default rule" (a value cannot be written for it).
_OPTIONAL = frozenset({"coalesce_gap", "buffer_pool_bytes"})
NAMES: frozenset[str] = frozenset(f.name for f in fields(Settings))

_NONE: Mapping[str, Any] = types.MappingProxyType({})
_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "zarr3_settings", default=_NONE
)


def _problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be setting ``name``; None when it can."""
    if value is None:
        return None if name in _OPTIONAL else "must not be None"
    if name in _SWITCHES:
        return None if isinstance(value, bool) else "must be True or False"
    kinds = (int, float) if name in _FRACTIONAL else (int,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        return "must be a number" if name in _FRACTIONAL else "must be a whole number"
    if not math.isfinite(value):
        return "must be finite"
    least = 1 if name in _AT_LEAST_ONE else 0
    if value < least:
        return f"must be at least {least}"
    return None


def _parse(name: str, raw: str) -> Any:
    """The value of environment variable text for setting ``name``; ``None`` (after a
    warning naming the variable) when the text is not a valid value."""
    var = ENVIRONMENT[name]
    if name in _SWITCHES:
        switch = _SWITCH_WORDS.get(raw.strip().lower())
        if switch is None:
            warnings.warn(
                f"{var}={raw!r} is not one of {', '.join(_SWITCH_WORDS)}: using the default", stacklevel=4
            )
        return switch
    try:
        number = float(raw)
        unit = ENVIRONMENT_UNITS.get(name, 1)
        value: Any = number if name in _FRACTIONAL else int(number * unit)
        problem = _problem(name, value)
        if problem is None and name not in _FRACTIONAL and unit == 1 and number != value:
            problem = "is not a whole number"
    except (ValueError, OverflowError):
        problem = "is not a number"
    if problem is not None:
        warnings.warn(f"{var}={raw!r} {problem}: using the default", stacklevel=4)
        return None
    return value


def check(
    values: Mapping[str, Any], *, error: type[ArgumentError] = ArgumentError, where: str = ""
) -> dict[str, Any]:
    """``values`` as setting overrides, refusing unknown names and bad values with ``error``
    (naming ``where`` they were given, if said)."""
    at = f" in {where}" if where else ""
    unknown = sorted(set(values) - NAMES)
    if unknown:
        raise error(
            f"unknown zarr3_backend setting(s) {', '.join(map(repr, unknown))}{at}; known: {', '.join(sorted(NAMES))}"
        )
    out = {}
    for name, value in values.items():
        problem = _problem(name, value)
        if problem is not None:
            raise error(f"setting {name!r}{at} {problem}, got {value!r}")
        out[name] = value
    return out


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings the environment variables of ``environ`` (default: ``os.environ``, read
    now) set; bad values warn and are left out."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, var in ENVIRONMENT.items():
        raw = environ.get(var)
        if raw is not None and raw.strip() != "":
            parsed = _parse(name, raw)
            if parsed is not None:
                values[name] = parsed
    return values


def current(
    store_overrides: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None
) -> Settings:
    """The settings in force here and now: defaults, then environment variables (of
    ``environ``, default ``os.environ``), then ``store_overrides`` (one store's own, checked),
    then the innermost ``using(...)`` blocks."""
    blocks = _overrides.get()
    if environ is None:  # the common case, asked for on every read: memoised (values are hashable)
        raw = tuple(os.environ.get(var) for var in _VARIABLES)
        key = (raw, tuple(store_overrides.items()) if store_overrides else (), tuple(blocks.items()))
        found = _resolved.get(key)
        if found is not None:
            return found
    values = from_environment(environ)
    clean = environ is None and all(
        r is None or r.strip() == "" or name in values for name, r in zip(ENVIRONMENT, raw, strict=True)
    )
    if store_overrides:
        values.update(store_overrides)
    values.update(blocks)
    settings = Settings(**values)
    if clean:  # a bad environment value warns each time: not memoised
        if len(_resolved) >= 256:
            _resolved.clear()
        _resolved[key] = settings
    return settings


_VARIABLES = tuple(ENVIRONMENT.values())
_DEFAULTS = Settings()


def value(name: str) -> Any:
    """One process-wide setting now (``using(...)`` blocks, then its environment variable, then
    the default), without resolving the others: for the hot paths that need just one (thread
    pool sizes, the buffer pool's cap), asked for on every call."""
    blocks = _overrides.get()
    if name in blocks:
        return blocks[name]
    raw = os.environ.get(ENVIRONMENT[name])
    if raw is not None and raw.strip() != "":
        parsed = _parse(name, raw)
        if parsed is not None:
            return parsed
    return getattr(_DEFAULTS, name)


#: ``current()`` results by (environment text, store overrides, ``using`` overrides).
_resolved: dict[tuple, Settings] = {}


@contextlib.contextmanager
def using(**values: Any) -> Iterator[Settings]:
    """Override settings for the calls made inside the ``with`` block in this thread (or asyncio
    task, and the package's thread-pool work those calls start); a call reads them when it
    starts. Yields the settings then in force."""
    token = _overrides.set({**_overrides.get(), **check(values, where="using()")})
    try:
        yield current()
    finally:
        _overrides.reset(token)
