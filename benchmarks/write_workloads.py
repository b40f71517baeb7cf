"""The remote-write group: metadata-heavy writes through a store that charges a latency per request.

Appending a time step to a dataset of many variables, or writing a region of each, is what
users of object storage do every day; there the number of round trips one after another, not
bytes, sets the time. The HTTP server of the remote group serves reads only, so these cases run
in one process over an in-memory store whose every request sleeps ``latency_ms`` first (the
sleep releases the GIL: requests a library sends together overlap, as on an object store):

- zarr3_backend: its ``MemoryStore`` declared an object store (``costly_requests``; conditional
  writes, as S3 offers them), each public request one latency (calls made inside another, e.g.
  the keys of a batch, are free: one round trip for the batch).
- zarr-python (through xarray's own zarr engine): its ``MemoryStore`` in a latency wrapper that
  charges ``get``, ``set``, ``exists``, ``delete``, listings and batched reads alike.

Workloads (a 20-variable float64 dataset of 4 time steps, consolidated): ``append`` 2 steps
along ``time``; ``region`` rewrites steps 0-1 of every variable; ``overwrite`` rewrites every
variable whole (``mode="a"``). Each repetition starts from a fresh store (untimed); the result
is read back and compared with what was written.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .worker import Runner

NVARS = 20
#: The requests of zarr3_backend's store API (what an object store answers with a round trip).
_Z3_REQUESTS = (
    "erase",
    "erase_if",
    "erase_many",
    "erase_prefix",
    "exists",
    "exists_many",
    "get",
    "get_many",
    "get_partial_values",
    "get_versioned",
    "list",
    "list_dir",
    "list_prefix",
    "move",
    "move_prefix",
    "set",
    "set_if",
    "set_many",
    "stream_partial_values",
)


def dataset(t0: int = 0, nt: int = 4, seed: int = 0) -> Any:
    """``NVARS`` float64 variables over (time, lat, lon), time steps ``t0`` onwards."""
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(seed + t0)
    time_ = pd.date_range("2000-01-01", periods=nt) + pd.Timedelta(days=t0)
    return xr.Dataset(
        {f"v{i}": (("time", "lat", "lon"), rng.random((nt, 32, 64))) for i in range(NVARS)},
        coords={"time": time_, "lat": np.arange(32.0), "lon": np.arange(64.0)},
    )


def z3_latency_store(latency: float) -> Any:
    """A zarr3_backend MemoryStore declared an object store, each request ``latency`` seconds."""
    from zarr3_backend.stores import MemoryStore

    depth = threading.local()

    def charged(name: str) -> Any:
        plain = getattr(MemoryStore, name)

        def request(self: Any, *args: Any, **kwargs: Any) -> Any:
            outer = getattr(depth, "n", 0)
            if outer == 0:
                time.sleep(latency)
            depth.n = outer + 1
            try:
                return plain(self, *args, **kwargs)
            finally:
                depth.n = outer

        return request

    namespace: dict[str, Any] = {name: charged(name) for name in _Z3_REQUESTS}
    namespace["costly_requests"] = True
    return type("LatencyMemoryStore", (MemoryStore,), namespace)()


def zarr_latency_store(latency: float) -> Any:
    """zarr-python's MemoryStore with ``latency`` seconds before every request."""
    from zarr.storage import MemoryStore, WrapperStore

    class Latency(WrapperStore):
        async def get(self, key, prototype, byte_range=None):
            await asyncio.sleep(latency)
            return await self._store.get(key, prototype, byte_range)

        async def get_partial_values(self, prototype, key_ranges):
            await asyncio.sleep(latency)
            return await self._store.get_partial_values(prototype, key_ranges)

        async def set(self, key, value):
            await asyncio.sleep(latency)
            await self._store.set(key, value)

        async def set_if_not_exists(self, key, value):
            await asyncio.sleep(latency)
            await self._store.set_if_not_exists(key, value)

        async def exists(self, key):
            await asyncio.sleep(latency)
            return await self._store.exists(key)

        async def delete(self, key):
            await asyncio.sleep(latency)
            await self._store.delete(key)

        async def _listed(self, listing):
            await asyncio.sleep(latency)
            async for key in listing:
                yield key

        def list(self):
            return self._listed(self._store.list())

        def list_prefix(self, prefix):
            return self._listed(self._store.list_prefix(prefix))

        def list_dir(self, prefix):
            return self._listed(self._store.list_dir(prefix))

    return Latency(MemoryStore())


def _write(lib: str, ds: Any, store: Any, **kwargs: Any) -> None:
    if lib == "z3":
        import zarr3_backend

        zarr3_backend.to_zarr(ds, store, consolidated=True, **kwargs)
    else:
        ds.to_zarr(store, zarr_format=3, consolidated=True, **kwargs)


def _read(lib: str, store: Any) -> Any:
    import xarray as xr

    if lib == "z3":
        return xr.open_dataset(store, engine="zarr3").load()
    return xr.open_dataset(store, engine="zarr", consolidated=True).load()


def do_latency_write(runner: Runner) -> dict:
    """Write ``runner.w.fixture`` (append | region | overwrite) into a fresh latency store."""
    import warnings

    import xarray as xr

    lib = runner.case.lib
    if lib not in ("z3", "zarr"):
        raise NotImplementedError(f"{lib}: no xarray writer")
    warnings.filterwarnings("ignore")  # zarr-python's notes on consolidated v3 metadata
    latency = (runner.w.latency_ms or 0) / 1000
    make = z3_latency_store if lib == "z3" else zarr_latency_store
    base, new = dataset(), dataset(seed=9)
    how = runner.w.fixture
    if how == "append":
        new = dataset(t0=4, nt=2, seed=9)
        write, want = {"append_dim": "time"}, xr.concat([base, new], dim="time")
    elif how == "region":
        new = new.isel(time=slice(0, 2)).drop_vars(["time", "lat", "lon"])
        write = {"region": {"time": slice(0, 2)}}
        want = base.copy(deep=True)
        for name in new.data_vars:
            want[name][0:2] = new[name].values
    else:
        write, want = {"mode": "a"}, new
    holder: dict[str, Any] = {}

    def before() -> None:
        holder["store"] = make(latency)
        _write(lib, base, holder["store"])

    stats = runner.measure(before, lambda: _write(lib, new, holder["store"], **write))
    got = _read(lib, holder["store"])
    for name in want.data_vars:
        if not np.array_equal(got[name].values, want[name].values):
            from .worker import CheckFailed

            raise CheckFailed(f"{how}: variable {name} differs from what was written")
    return stats
