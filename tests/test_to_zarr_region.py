"""Region writes: explicit and "auto" regions into a compute=False template, concurrent
writers on disjoint shard-aligned regions, and refusal of regions that cut a shard."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ChunkAlignmentError
from zarr3_backend.stores import MemoryStore

ENC = {"t2m": {"chunks": (2, 4, 4), "shards": (4, 4, 8)}}


def dataset(ntime=16, nlat=4, nlon=8, seed=0):
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), rng.random((ntime, nlat, nlon)).astype("float32")),
            "flag": (("time",), np.arange(ntime, dtype="int16")),
        },
        coords={
            "time": pd.date_range("2010-01-01", periods=ntime, freq="D"),
            "lat": np.linspace(-45, 45, nlat),
            "lon": np.arange(nlon) * 45.0,
        },
    )


def template(store, ds):
    """Metadata and coordinates now, data never: what parallel region writers fill in."""
    z3.to_zarr(ds.chunk({"time": 4}), store, encoding=ENC, compute=False)


def snapshot(store) -> dict:
    return {k: store.get(k) for k in store.list()}


def test_explicit_and_auto_regions_fill_a_template():
    ds, store = dataset(), MemoryStore()
    template(store, ds)
    assert np.isnan(xr.open_dataset(store, engine="zarr3").t2m.values).all()
    z3.to_zarr(ds.isel(time=slice(0, 8)).chunk({"time": 4}), store, region={"time": slice(0, 8)})
    part = ds.isel(time=slice(8, 16))
    z3.to_zarr(part.chunk({"time": 4}), store, region="auto")
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), ds)


def test_two_concurrent_region_writers_on_disjoint_shard_aligned_regions(tmp_path):
    ds = dataset(ntime=32)
    path = tmp_path / "r.zarr"
    template(path, ds)
    halves = [slice(0, 16), slice(16, 32)]

    def write(sl):
        piece = ds.isel(time=sl).chunk({"time": 4})
        return z3.to_zarr(
            piece, path, region={"time": sl}, chunkmanager_store_kwargs={"scheduler": "threads"}
        )

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, halves))
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(path, engine=engine).load(), ds)


def test_a_region_that_cuts_a_shard_is_refused_unless_safe_chunks_is_false():
    ds, store = dataset(), MemoryStore()
    template(store, ds)
    before = snapshot(store)
    piece = ds.isel(time=slice(2, 10)).chunk({"time": (2, 4, 2)})  # blocks own their shards
    with pytest.raises(ChunkAlignmentError, match=r"'t2m'.*time=2:10.*safe_chunks=False"):
        z3.to_zarr(piece, store, region={"time": slice(2, 10)})
    assert snapshot(store) == before
    # one writer only: the partly covered edge shards get tasks of their own
    z3.to_zarr(piece, store, region={"time": slice(2, 10)}, safe_chunks=False)
    back = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_identical(back.isel(time=slice(2, 10)), ds.isel(time=slice(2, 10)))
    assert np.isnan(back.t2m.values[:2]).all() and np.isnan(back.t2m.values[10:]).all()


def test_auto_region_errors_name_the_coordinate():
    ds, store = dataset(), MemoryStore()
    template(store, ds)
    outside = ds.isel(time=slice(0, 4)).assign_coords(time=pd.date_range("2030-01-01", periods=4))
    with pytest.raises(KeyError, match="'time'"):
        z3.to_zarr(outside, store, region="auto")
    gappy = ds.isel(time=[0, 2, 4])
    with pytest.raises(ValueError, match="non-contiguous"):
        z3.to_zarr(gappy, store, region="auto")


def test_region_argument_errors():
    ds, store = dataset(), MemoryStore()
    template(store, ds)
    before = snapshot(store)
    orog = xr.DataArray(np.zeros((4, 8)), dims=("lat", "lon"))
    with pytest.raises(ValueError, match=r"drop_vars\(\['orog'\]"):
        z3.to_zarr(
            ds.isel(time=slice(0, 4)).assign(orog=orog), store, region={"time": slice(0, 4)}, mode="r+"
        )
    with pytest.raises(ValueError, match="'level' is not a dimension"):
        z3.to_zarr(ds, store, region={"level": slice(0, 1)})
    with pytest.raises(ValueError, match="step 1"):
        z3.to_zarr(ds.isel(time=slice(0, 4, 2)), store, region={"time": slice(0, 4, 2)})
    with pytest.raises(ValueError, match="sizes"):
        z3.to_zarr(ds.isel(time=slice(0, 4)), store, region={"time": slice(0, 8)})
    with pytest.raises(ValueError, match=r"\['extra'\]"):
        z3.to_zarr(ds.isel(time=slice(0, 4)).assign(extra=ds.flag[:4]), store, region={"time": slice(0, 4)})
    with pytest.raises(ValueError, match="cannot set region"):
        z3.to_zarr(ds, store, region={"time": slice(0, 4)}, mode="w")
    assert snapshot(store) == before
