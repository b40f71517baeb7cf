"""engine="zarr3" on object storage: opening in few round trips, dask tasks of several units.

A latency server on 127.0.0.1 (``benchmarks.latency_server``: every request waits, none is
serialised, each is logged) serves stores written by xarray's own zarr engine; the tests count
the requests and round trips (groups of overlapping requests) an open costs, compare the values
with ``engine="zarr"`` on the same files, and check the dask chunks ``chunks={}`` gives over
http (whole stored units, several per task) and on local disk (one unit per task).
"""

from __future__ import annotations

import os
import pickle
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from xarray.core import indexing

import zarr3_backend as z3
from benchmarks import latency_server
from zarr3_backend import settings
from zarr3_backend.errors import ShapeError
from zarr3_backend.xarray.backend_array import Zarr3BackendArray
from zarr3_backend.xarray.index_prefetch import IndexBatch, is_index_coordinate
from zarr3_backend.xarray.task_chunks import task_block

pytestmark = [
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning"),
]

#: Long enough that requests sent together overlap even on a loaded machine.
LATENCY_MS = 100
#: The data variable's stored chunk and its size in bytes.
UNIT = (3, 8, 16)
UNIT_BYTES = 3 * 8 * 16 * 4
#: The shards of the sharded data variable ``sp`` (of 2x2x2 chunks of ``UNIT``).
SHARD = (6, 16, 32)
#: The index coordinates of ``climate()`` (what xarray loads to build indexes).
INDEXES = ("band", "lat", "level", "lon", "time")


def climate() -> xr.Dataset:
    """Index coordinates of every kind xarray decodes (CF times, packed and masked integers,
    strings, a coordinate stored in several chunks), a 2-D coordinate and a chunked variable."""
    rng = np.random.default_rng(3)
    time = pd.date_range("2001-01-01", periods=12, freq="D")
    lat = np.linspace(-80, 80, 32, dtype="float32")
    lon = np.linspace(0, 357.5, 64)
    level = xr.Variable(("level",), np.array([1000.0, 850.0, 500.0, 250.0]))
    level.encoding = {"dtype": "int16", "scale_factor": 0.5, "add_offset": 10.0, "_FillValue": -1}
    t2m = rng.normal(280, 10, (12, 32, 64)).astype("float32")
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K"}),
            "gain": (("band", "level"), rng.random((3, 4))),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon),
            "band": ("band", np.array(["red", "green", "blue"])),
            "level": level,
            "area": (("lat", "lon"), rng.random((32, 64))),
        },
    )
    ds["sp"] = ds.t2m * 100
    ds["t2m"].encoding = {"chunks": UNIT}
    ds["sp"].encoding = {"chunks": UNIT, "shards": SHARD}
    ds["lat"].encoding = {"chunks": (8,)}
    ds["lon"].encoding = {"chunks": (16,), "shards": (64,)}  # a sharded index coordinate
    return ds


#: The child group's own dimensions (a child of a DataTree must align with its parent's).
CHILD_DIMS = {"time": "day", "lat": "y", "lon": "x", "band": "channel", "level": "plev"}


def child() -> xr.Dataset:
    """The climate dataset, half of it, over dimensions of its own."""
    return climate().isel(time=slice(0, 6)).drop_vars("area").rename(CHILD_DIMS)


def write(
    ds: xr.Dataset, path: Path, *, consolidated: bool, group: str | None = None, mode: str = "w"
) -> Path:
    """Write ``ds`` with xarray's own engine (zarr-python), Zarr v3."""
    ds.to_zarr(path, mode=mode, zarr_format=3, consolidated=consolidated, group=group)
    return path


def chunk_objects(root: Path, arrays: tuple[str, ...]) -> int:
    """How many chunk (or shard) objects the arrays ``arrays`` of the group at ``root`` hold."""
    return sum(
        1 for name in arrays for _, _, files in os.walk(root / name) for f in files if f != "zarr.json"
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A latency server over a directory with the climate store consolidated and not, and a
    datatree of two groups; yields (server, directory)."""
    root = tmp_path_factory.mktemp("served")
    write(climate(), root / "consolidated.zarr", consolidated=True)
    write(climate(), root / "plain.zarr", consolidated=False)
    tree = root / "tree.zarr"
    write(climate(), tree, consolidated=False)
    write(child(), tree, consolidated=False, group="child", mode="a")
    with latency_server.running(root, LATENCY_MS) as server:
        yield server, root


@pytest.fixture(autouse=True)
def fsspec_http(monkeypatch):
    """fsspec's http filesystem (it lists a plain web server's HTML pages; obstore's does not)."""
    monkeypatch.setenv("ZARR3_STORE_BACKEND", "fsspec")


def traffic_of(server, action):
    """``(result of action(), the server's traffic while it ran)``."""
    server.reset()
    result = action()
    return result, server.stats()


# ---- E: open_dataset reads every index coordinate at once ------------------------------------
def test_consolidated_open_costs_two_round_trips(served):
    server, root = served
    ds, traffic = traffic_of(
        server, lambda: xr.open_dataset(f"{server.url}/consolidated.zarr", engine="zarr3")
    )
    assert traffic["round_trips"] == 2  # the root document, then every index coordinate at once
    # the root zarr.json, then each chunk object of each index coordinate (not of area or t2m)
    assert traffic["requests"] == 1 + chunk_objects(root / "consolidated.zarr", INDEXES)
    paths = [e[3] for e in traffic["log"]]
    assert not any(f"/{name}/" in p for p in paths for name in ("t2m", "sp", "area", "gain"))
    assert traffic["peak_in_flight"] >= len(INDEXES)
    assert set(ds.indexes) == set(INDEXES)


def test_unconsolidated_open_reads_the_coordinates_in_one_round_trip(served):
    server, root = served
    url = f"{server.url}/plain.zarr"
    ds, traffic = traffic_of(server, lambda: xr.open_dataset(url, engine="zarr3", consolidated=False))
    log = sorted(traffic["log"])
    chunk_reads = [e for e in log if not e[3].endswith("zarr.json") and e[3].count("/") > 2]
    assert len(chunk_reads) == chunk_objects(root / "plain.zarr", INDEXES)
    # every chunk read overlaps every other one: one round trip, after the metadata
    assert max(e[0] for e in chunk_reads) < min(e[1] for e in chunk_reads)
    # the root document, the listing, the children's documents at once, the coordinates
    assert traffic["round_trips"] == 4
    assert set(ds.indexes) == set(INDEXES)


@pytest.mark.parametrize("store", ["consolidated.zarr", "plain.zarr"])
@pytest.mark.parametrize("chunks", [None, {}])
def test_values_equal_engine_zarr(served, store, chunks):
    server, root = served
    consolidated = store == "consolidated.zarr"
    got = xr.open_dataset(f"{server.url}/{store}", engine="zarr3", chunks=chunks, consolidated=consolidated)
    ref = xr.open_dataset(root / store, engine="zarr", chunks=chunks, consolidated=consolidated)
    assert got.time.dtype == np.dtype("datetime64[ns]") and got.level.dtype.kind == "f"
    xr.testing.assert_identical(got.load(), ref.load())
    for name in INDEXES:  # the index is built from the decoded values, as engine="zarr"'s
        assert got.indexes[name].equals(ref.indexes[name]), name


def test_open_datatree_reads_every_groups_coordinates_at_once(served):
    server, root = served
    url = f"{server.url}/tree.zarr"
    tree, traffic = traffic_of(server, lambda: xr.open_datatree(url, engine="zarr3", consolidated=False))
    chunk_reads = [e for e in traffic["log"] if not e[3].endswith("zarr.json") and e[3].count("/") > 2]
    child_indexes = tuple(CHILD_DIMS[n] for n in INDEXES)
    both = chunk_objects(root / "tree.zarr", INDEXES) + chunk_objects(
        root / "tree.zarr" / "child", child_indexes
    )
    assert len(chunk_reads) == both
    assert max(e[0] for e in chunk_reads) < min(e[1] for e in chunk_reads)  # one round trip
    ref = xr.open_datatree(root / "tree.zarr", engine="zarr", consolidated=False)
    xr.testing.assert_identical(tree.load(), ref.load())
    assert len(tree["child"].day) == 6


def test_open_groups_shares_one_read_of_every_groups_coordinates(served):
    server, root = served
    url = f"{server.url}/tree.zarr"
    groups, traffic = traffic_of(server, lambda: xr.open_groups(url, engine="zarr3", consolidated=False))
    assert set(groups) == {"/", "/child"}
    chunk_reads = [e for e in traffic["log"] if not e[3].endswith("zarr.json") and e[3].count("/") > 2]
    read = {e[3].split("/c/")[0].rsplit("/", 1)[1] for e in chunk_reads}  # the arrays read
    assert read == set(INDEXES) | set(CHILD_DIMS.values())
    assert max(e[0] for e in chunk_reads) < min(e[1] for e in chunk_reads)  # one round trip
    ref = xr.open_groups(root / "tree.zarr", engine="zarr", consolidated=False)
    for name, ds in groups.items():
        xr.testing.assert_identical(ds.load(), ref[name].load())


def test_drop_variables_are_not_read(served):
    server, _ = served
    url = f"{server.url}/consolidated.zarr"
    ds, traffic = traffic_of(server, lambda: xr.open_dataset(url, engine="zarr3", drop_variables=["lon"]))
    assert "lon" not in ds.variables
    assert not any("/lon/" in e[3] for e in traffic["log"])


# ---- D: chunks={} on a store with costly requests --------------------------------------------
def _units_of(chunks: tuple[tuple[int, ...], ...], shape: tuple[int, ...]) -> None:
    """Every dask chunk boundary falls on a stored unit boundary (or the array's end)."""
    for sizes, unit, length in zip(chunks, UNIT, shape, strict=True):
        stops = np.cumsum(sizes)
        assert stops[-1] == length
        assert all(stop % unit == 0 for stop in stops[:-1]), (sizes, unit)


def test_chunks_default_over_http_is_several_whole_units(served):
    server, _ = served
    budget = 8 * UNIT_BYTES  # the whole of lon (4 units), then 2 units of lat
    with settings.using(remote_task_bytes=budget):
        ds = xr.open_dataset(f"{server.url}/consolidated.zarr", engine="zarr3", chunks={})
    t2m = ds.t2m
    assert t2m.encoding["preferred_chunks"] == {"time": 3, "lat": 16, "lon": 64}
    assert t2m.encoding["chunks"] == UNIT  # the stored chunk is still what encoding says
    assert t2m.chunks == ((3, 3, 3, 3), (16, 16), (64,))
    _units_of(t2m.chunks, t2m.shape)
    block = [c[0] for c in t2m.chunks]
    assert np.prod(block) * t2m.dtype.itemsize <= budget  # a task reads at most the budget


def test_chunks_default_over_http_is_several_whole_shards(served):
    server, _ = served
    with settings.using(remote_task_bytes=2 * 8 * UNIT_BYTES):  # two shards: the whole of lon
        ds = xr.open_dataset(f"{server.url}/consolidated.zarr", engine="zarr3", chunks={})
    sp = ds.sp
    assert (sp.encoding["chunks"], sp.encoding["shards"]) == (UNIT, SHARD)
    assert sp.encoding["preferred_chunks"] == {"time": 6, "lat": 16, "lon": 64}
    assert sp.chunks == ((6, 6), (16, 16), (64,))
    ref = xr.open_dataset(served[1] / "consolidated.zarr", engine="zarr").sp.values
    np.testing.assert_array_equal(sp.values, ref)


def test_chunks_default_on_local_disk_is_one_unit(served):
    _, root = served
    with settings.using(remote_task_bytes=64 * UNIT_BYTES):
        ds = xr.open_dataset(root / "consolidated.zarr", engine="zarr3", chunks={})
    assert ds.t2m.encoding["preferred_chunks"] == dict(zip(("time", "lat", "lon"), UNIT, strict=True))
    assert ds.t2m.chunks == ((3,) * 4, (8,) * 4, (16,) * 4)
    assert ds.sp.chunks == ((6, 6), (16, 16), (32, 32))  # one shard per task


def test_remote_task_bytes_zero_keeps_one_unit_and_explicit_chunks_are_obeyed(served):
    server, _ = served
    url = f"{server.url}/consolidated.zarr"
    with settings.using(remote_task_bytes=0):
        one = xr.open_dataset(url, engine="zarr3", chunks={})
    assert one.t2m.chunks == ((3,) * 4, (8,) * 4, (16,) * 4)
    # smaller than the preferred block: obeyed, and xarray warns that they split it
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        explicit = xr.open_dataset(url, engine="zarr3", chunks={"time": 6, "lat": 8})
    assert explicit.t2m.chunks == ((6, 6), (8,) * 4, (64,))  # lon: the preferred block


def test_dask_mean_over_http_equals_numpy_and_keeps_many_requests_in_flight(served):
    server, root = served
    source = xr.open_dataset(root / "consolidated.zarr", engine="zarr").t2m.values
    with settings.using(remote_task_bytes=16 * UNIT_BYTES):  # 4 tasks of 16 units
        ds = xr.open_dataset(f"{server.url}/consolidated.zarr", engine="zarr3", chunks={})
    assert ds.t2m.data.npartitions == 4
    t2m = ds.t2m.reset_coords(drop=True)  # without the dask coordinate area
    mean, traffic = traffic_of(server, lambda: t2m.mean("time").compute(scheduler="threads").values)
    np.testing.assert_allclose(mean, source.mean(axis=0, dtype="float64"), rtol=1e-6)
    assert traffic["requests"] == 64  # each stored chunk read once
    assert traffic["peak_in_flight"] >= 16  # a task's units are fetched together


# ---- the pieces --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("unit", "shape", "budget", "expected"),
    [
        ((3, 8, 16), (12, 32, 64), 0, (3, 8, 16)),  # 0: one unit
        ((3, 8, 16), (12, 32, 64), 100, (3, 8, 16)),  # smaller than one unit: still one
        ((3, 8, 16), (12, 32, 64), 2 * UNIT_BYTES, (3, 8, 32)),  # the last axis first
        ((3, 8, 16), (12, 32, 64), 8 * UNIT_BYTES, (3, 16, 64)),  # whole lon, then lat
        ((3, 8, 16), (12, 32, 64), 10**9, (12, 32, 64)),  # the whole array
        ((3, 8, 16), (10, 30, 60), 16 * UNIT_BYTES, (3, 30, 60)),  # partial last units: whole axes
        ((5, 1), (5, 1), 10**9, (5, 1)),  # one unit in all
        ((4, 4), (0, 8), 10**9, (4, 8)),  # an empty axis
    ],
)
def test_task_block(unit, shape, budget, expected):
    assert task_block(unit, shape, 4, budget) == expected


def test_index_coordinates_are_one_dimensional_and_named_as_their_dimension():
    assert is_index_coordinate("time", ("time",))
    assert not is_index_coordinate("area", ("lat", "lon"))
    assert not is_index_coordinate("lat2", ("lat",))
    assert not is_index_coordinate("x", ())


def test_backend_array_serves_values_read_ahead_like_the_store(tmp_path):
    g = z3.create_group(tmp_path / "g.zarr")
    a = g.create_array("x", shape=(10,), dtype="i4", chunks=(4,))
    a[...] = np.arange(10) * 3
    batch = IndexBatch({"x": a})
    ahead = Zarr3BackendArray(a, partial(batch.values, "x"))
    plain = Zarr3BackendArray(a)
    keys = [
        indexing.BasicIndexer((slice(2, 9, 3),)),
        indexing.BasicIndexer((4,)),
        indexing.OuterIndexer((np.array([7, 1, 1]),)),
        indexing.VectorizedIndexer((np.array([[0, 9], [3, 3]]),)),
    ]
    for key in keys:
        got, want = ahead[key], plain[key]
        assert type(got) is np.ndarray and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    a[0] = 99  # served from memory: what was read first
    out = ahead[indexing.BasicIndexer((slice(None),))]
    assert out[0] == 0 and plain[indexing.BasicIndexer((0,))] == 99
    out[1] = -1  # a copy: what is read ahead stays as stored
    assert ahead[indexing.BasicIndexer((1,))] == 3
    copy = pickle.loads(pickle.dumps(ahead))  # a dask worker's copy reads afresh
    assert copy[indexing.BasicIndexer((0,))] == 99
    wrong = Zarr3BackendArray(a, lambda: np.zeros(3, "i4"))
    with pytest.raises(ShapeError, match="'x'"):
        wrong[indexing.BasicIndexer((0,))]


def test_nothing_is_read_when_xarray_asks_for_no_index(served):
    server, _ = served
    url = f"{server.url}/consolidated.zarr"
    ds, traffic = traffic_of(
        server,
        lambda: xr.open_dataset(url, engine="zarr3", create_default_indexes=False, decode_times=False),
    )
    assert traffic["requests"] == 1  # zarr.json
    assert not ds.indexes
    _, traffic = traffic_of(server, lambda: ds.lat.values)
    # the first index coordinate asked for brings all of them, at once
    assert traffic["round_trips"] == 1
    assert {e[3].split("/")[2] for e in traffic["log"]} == set(INDEXES)
    _, traffic = traffic_of(server, lambda: (ds.lon.values, ds.time.values))
    assert traffic["requests"] == 0
