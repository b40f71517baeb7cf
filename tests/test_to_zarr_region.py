"""Region writes: explicit and "auto" regions into a compute=False template, concurrent
writers on disjoint shard-aligned regions, and refusal of regions that cut a shard."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentError, ChunkAlignmentError
from zarr3_backend.stores import LocalStore, MemoryStore

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


class SlowStore(LocalStore):
    """Every read and write of a chunk takes a while, so concurrent writers overlap in time."""

    def get_many(self, keys):
        time.sleep(0.02)
        return super().get_many(keys)

    def get_partial_values(self, key_ranges):
        time.sleep(0.02)
        return super().get_partial_values(key_ranges)

    def set_many(self, items):
        time.sleep(0.02)
        super().set_many(items)


class RendezvousStore(LocalStore):
    """Writers of ``key`` wait for each other (up to a few seconds) before writing it: two
    read-modify-writes of one shard then certainly overlap, as they might by bad luck."""

    def __init__(self, root, key, *, read_only=False):
        super().__init__(root, read_only=read_only)
        self.key = key
        self.arrived: set[int] = set()
        self.cond = threading.Condition()

    def set_many(self, items):
        # the key itself, or its staged copy (writes are staged, then committed)
        if any(k == self.key or k.endswith("/data/" + self.key) for k in items):
            with self.cond:
                self.arrived.add(threading.get_ident())
                self.cond.notify_all()
                self.cond.wait_for(lambda: len(self.arrived) >= 2, timeout=5)
        super().set_many(items)

    def set(self, key, value):
        self.set_many({key: value})

    def set_if(self, key, value, expected):
        if key == self.key:
            with self.cond:
                self.arrived.add(threading.get_ident())
                self.cond.notify_all()
                self.cond.wait_for(lambda: len(self.arrived) >= 2, timeout=5)
        return super().set_if(key, value, expected)


def write_concurrently(store, ds, regions, **kw):
    """Each region of ``ds`` written by its own thread; the exceptions raised, in order."""

    def write(sl):
        try:
            z3.to_zarr(ds.isel(time=sl), store, region={"time": sl}, **kw)
        except Exception as e:
            return e
        return None

    with ThreadPoolExecutor(len(regions)) as pool:
        return list(pool.map(write, regions))


def lost_rows(store, ds) -> list[int]:
    back = xr.open_dataset(store, engine="zarr3").load()
    return np.nonzero(np.isnan(back.t2m.values).any(axis=(1, 2)))[0].tolist()


def test_two_concurrent_region_writers_on_disjoint_shard_aligned_regions(tmp_path):
    ds = dataset(ntime=32)
    path = tmp_path / "r.zarr"
    template(path, ds)
    store = SlowStore(path)
    halves = [slice(0, 16), slice(16, 32)]
    errors = write_concurrently(
        store, ds.chunk({"time": 4}), halves, chunkmanager_store_kwargs={"scheduler": "threads"}
    )
    assert errors == [None, None]
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(path, engine=engine).load(), ds)


def test_two_writers_sharing_a_shard_lose_nothing_with_the_checks_lifted(tmp_path):
    """With the ownership check lifted (safe_chunks=False), two writers of regions meeting
    inside shard [4, 8) both read-modify-write it at the same moment (the rendezvous store makes
    sure they overlap): the conditional write makes the second one re-merge, so no row is lost."""
    ds = dataset()
    path = tmp_path / "r.zarr"
    template(path, ds)
    store = RendezvousStore(path, "t2m/c/1/0/0")
    errors = write_concurrently(store, ds, [slice(0, 6), slice(6, 16)], safe_chunks=False)
    assert errors == [None, None]
    assert lost_rows(path, ds) == []
    assert len(store.arrived) >= 2, "the writers never met: the test did not exercise the shared shard"


@pytest.mark.parametrize("mode", ["r+", "a"])
def test_concurrent_dask_regions_that_share_a_shard_are_refused(tmp_path, mode):
    """dask blocks cannot be merged again at commit, so dask regions must own their shards."""
    ds = dataset()
    path = tmp_path / "r.zarr"
    template(path, ds)
    before = snapshot(LocalStore(path))
    store = RendezvousStore(path, "t2m/c/1/0/0")
    src = ds.chunk({"time": (4, 2, 2, 4, 4)})  # dask blocks own their shards
    errors = write_concurrently(store, src, [slice(0, 6), slice(6, 16)], mode=mode)
    assert [type(e) for e in errors] == [ChunkAlignmentError, ChunkAlignmentError]
    assert "time=0:6" in str(errors[0]) and "time=6:16" in str(errors[1])
    assert snapshot(LocalStore(path)) == before  # refused before anything was written
    # shard-aligned regions go through, in either mode, and lose nothing
    assert write_concurrently(
        SlowStore(path), ds.chunk({"time": 4}), [slice(0, 8), slice(8, 16)], mode=mode
    ) == [
        None,
        None,
    ]
    assert lost_rows(path, ds) == []
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr3").load(), ds)


@pytest.mark.parametrize("mode", ["r+", "a"])
def test_concurrent_numpy_regions_that_share_a_shard_lose_nothing(tmp_path, mode):
    """numpy regions may cut a shard (as in xarray's engine): two writers meeting inside shard
    [4, 8) both read-modify-write it at the same moment, and the commit's conditional write makes
    the later one merge its rows again."""
    ds = dataset()
    path = tmp_path / "r.zarr"
    template(path, ds)
    store = RendezvousStore(path, "t2m/c/1/0/0")
    assert write_concurrently(store, ds, [slice(0, 6), slice(6, 16)], mode=mode) == [None, None]
    assert len(store.arrived) >= 2, "the writers never met: the test did not exercise the shared shard"
    assert lost_rows(path, ds) == []
    xr.testing.assert_identical(xr.open_dataset(path, engine="zarr3").load(), ds)


class _NoConditionalWrites(MemoryStore):
    supports_conditional_writes = False


def test_numpy_regions_that_cut_a_shard_are_refused_where_writes_cannot_be_conditional():
    ds, store = dataset(), _NoConditionalWrites()
    template(store, ds)
    before = snapshot(store)
    with pytest.raises(ChunkAlignmentError, match=r"'t2m'.*time=2:10.*safe_chunks=False"):
        z3.to_zarr(ds.isel(time=slice(2, 10)), store, region={"time": slice(2, 10)})
    assert snapshot(store) == before


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
    with pytest.raises(ValueError, match="'level' is not one of"):
        z3.to_zarr(ds, store, region={"level": slice(0, 1)})
    with pytest.raises(ValueError, match="step on all slices must be 1"):
        z3.to_zarr(ds.isel(time=slice(0, 4, 2)), store, region={"time": slice(0, 4, 2)})
    with pytest.raises(ValueError, match="sizes"):
        z3.to_zarr(ds.isel(time=slice(0, 4)), store, region={"time": slice(0, 8)})
    with pytest.raises(ValueError, match=r"\['extra'\]"):
        z3.to_zarr(ds.isel(time=slice(0, 4)).assign(extra=ds.flag[:4]), store, region={"time": slice(0, 4)})
    with pytest.raises(ValueError, match="cannot set region"):
        z3.to_zarr(ds, store, region={"time": slice(0, 4)}, mode="w")
    assert snapshot(store) == before


def test_numpy_regions_that_cut_a_rectilinear_chunk_are_refused(tmp_path):
    """The commit merges a cut unit again only on regular grids: on a rectilinear grid numpy
    regions must own their chunks, refused up front as dask regions are."""
    path = tmp_path / "r.zarr"
    g = z3.open_group(path, mode="w")
    g.create_array(
        "v", shape=(10,), dtype="f4", chunks=[[2, 3, 5]], dimension_names=("x",), fill_value=np.nan
    )
    before = snapshot(LocalStore(path))
    full = np.arange(10, dtype="f4")
    with pytest.raises(ChunkAlignmentError, match=r"x=0:3"):
        z3.to_zarr(xr.Dataset({"v": ("x", full[:3])}), path, region={"x": slice(0, 3)})
    assert snapshot(LocalStore(path)) == before
    z3.to_zarr(xr.Dataset({"v": ("x", full[:5])}), path, region={"x": slice(0, 5)})  # whole chunks
    np.testing.assert_array_equal(z3.open_array(path, "v")[:5], full[:5])


def test_a_region_write_checks_the_indexes_of_the_other_dimensions():
    # xarray's engine refuses an index that shares no dimension with the region; dropped
    # unchecked, latitudes in another order stored the values under the store's latitudes
    ds, store = dataset(), MemoryStore()
    template(store, ds)
    before = snapshot(store)
    part = ds.isel(time=slice(0, 4)).drop_vars("flag")
    for wrong in (part.isel(lat=slice(None, None, -1)), part.assign_coords(lon=part.lon + 1)):
        with pytest.raises(ValueError, match=r"differs from the one in the store.*region write"):
            z3.to_zarr(wrong, store, region={"time": slice(0, 4)})
        assert snapshot(store) == before
    z3.to_zarr(part, store, region={"time": slice(0, 4)})  # the same indexes: checked, not written
    back = xr.open_dataset(store, engine="zarr3").load()
    np.testing.assert_array_equal(back.t2m.isel(time=slice(0, 4)).values, part.t2m.values)
    np.testing.assert_array_equal(back.lat.values, ds.lat.values)
    # an index the store does not hold is left out, as before
    z3.to_zarr(
        part.assign_coords(extra=("lat", np.arange(4))).set_xindex("extra"),
        store,
        region={"time": slice(0, 4)},
    )
    assert "extra" not in xr.open_dataset(store, engine="zarr3").variables


def test_auto_region_over_a_stored_coordinate_with_repeated_values_is_a_typed_error():
    ds = xr.Dataset({"v": (("x",), np.arange(4.0))}, coords={"x": [0, 1, 1, 2]})
    store = MemoryStore()
    z3.to_zarr(ds, store)
    with pytest.raises(ArgumentError, match="'x' repeats values"):
        z3.to_zarr(ds.isel(x=slice(0, 2)), store, region="auto")
    z3.to_zarr(ds.isel(x=slice(0, 2)).drop_vars("x"), store, region={"x": slice(0, 2)})  # a slice works
