"""engine="zarr3" is lazy: opening reads only zarr.json documents (batched), indexing reads only
the chunks it touches, dask gets exactly one task per shard (or chunk), and a store with
hundreds of variables and a million chunks each opens without per-chunk work."""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.stores.base import Store

NT, NY, NX = 8, 32, 64


class CountingStore(Store):
    """Forwards to ``inner`` and records every request: (method, key, byte range)."""

    def __init__(self, inner: Store, log: list | None = None) -> None:
        super().__init__(read_only=True)
        self.inner = inner
        self.log: list[tuple[str, str, ByteRange | None]] = [] if log is None else log
        self.calls: Counter = Counter()
        self._lock = threading.Lock()

    def _record(self, method: str, items: Iterable[tuple[str, ByteRange | None]]) -> None:
        with self._lock:
            self.calls[method] += 1
            self.log.extend((method, k, r) for k, r in items)

    def reset(self) -> None:
        self.log.clear()
        self.calls.clear()

    @property
    def keys(self) -> list[str]:
        return [k for _, k, _ in self.log]

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        self._record("get", [(key, byte_range)])
        return self.inner.get(key, byte_range)

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self._record("get_many", [(k, None) for k in keys])
        return self.inner.get_many(keys)

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        self._record("get_partial_values", key_ranges)
        return self.inner.get_partial_values(key_ranges)

    def exists(self, key: str) -> bool:
        self._record("exists", [(key, None)])
        return self.inner.exists(key)

    def set(self, key: str, value) -> None:
        raise AssertionError(f"reading must not write {key!r}")

    def erase(self, key: str) -> None:
        raise AssertionError(f"reading must not erase {key!r}")

    def list(self) -> Iterator[str]:
        self._record("list", [("", None)])
        return self.inner.list()

    def list_prefix(self, prefix: str) -> Iterator[str]:
        self._record("list_prefix", [(prefix, None)])
        return self.inner.list_prefix(prefix)

    def list_dir(self, prefix: str) -> Iterator[str]:
        self._record("list_dir", [(prefix, None)])
        return self.inner.list_dir(prefix)

    def with_read_only(self, read_only: bool = True) -> Store:
        return self


def climate(nt=NT, ny=NY, nx=NX) -> xr.Dataset:
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                rng.normal(280, 5, (nt, ny, nx)).astype("float32"),
                {"units": "K"},
            ),
            "sp": (("time", "lat", "lon"), rng.normal(1e5, 500, (nt, ny, nx))),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=nt, freq="D"),
            "lat": np.linspace(-80, 80, ny),
            "lon": np.linspace(0, 355, nx),
        },
    )
    ds["t2m"].encoding = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768}
    return ds


LAYOUTS = {
    "chunked": {"chunks": (1, 16, 16)},
    "sharded": {"chunks": (1, 16, 16), "shards": (4, 32, 64)},
}


@pytest.fixture(params=list(LAYOUTS))
def layout(request) -> str:
    return request.param


def write(tmp_path, layout: str, consolidated: bool):
    path = tmp_path / f"{layout}-{consolidated}.zarr"
    ds = climate()
    for name in ("t2m", "sp"):
        ds[name].encoding = {**ds[name].encoding, **LAYOUTS[layout]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3, consolidated=consolidated)
    return path


# ---- what opening reads ---------------------------------------------------------------------
@pytest.mark.parametrize("consolidated", [True, False])
def test_open_touches_only_metadata(tmp_path, layout, consolidated):
    store = CountingStore(z3.LocalStore(write(tmp_path, layout, consolidated)))
    # xarray itself reads time values while CF-decoding them and index values while building
    # indexes; without those two steps the backend reads nothing but metadata
    ds = xr.open_dataset(store, engine="zarr3", create_default_indexes=False, decode_times=False)
    assert ds.t2m.shape == (NT, NY, NX)
    assert {m for m, _, _ in store.log} <= {"get", "get_many", "list_dir"}
    gets = [(m, k) for m, k, _ in store.log if m.startswith("get")]
    assert all(k == "zarr.json" or k.endswith("/zarr.json") for _, k in gets), gets
    if consolidated:
        assert store.log == [("get", "zarr.json", None)]  # one request, no listing
    else:
        # the root document, then every child's document in one batched call
        assert gets[0] == ("get", "zarr.json")
        assert store.calls["get_many"] == 1
        assert sorted(k for m, k in gets if m == "get_many") == sorted(
            f"{n}/zarr.json" for n in ("lat", "lon", "sp", "t2m", "time")
        )


def test_default_open_loads_only_index_coordinates(tmp_path, layout):
    store = CountingStore(z3.LocalStore(write(tmp_path, layout, True)))
    xr.open_dataset(store, engine="zarr3")
    touched = {k.split("/")[0] for k in store.keys if not k.endswith("zarr.json")}
    assert touched == {"time", "lat", "lon"}  # pandas indexes need their values; data stays put


# ---- what indexing reads --------------------------------------------------------------------
def test_small_selection_reads_one_chunk(tmp_path, layout):
    path = write(tmp_path, layout, True)
    store = CountingStore(z3.LocalStore(path))
    ds = xr.open_dataset(store, engine="zarr3")
    store.reset()
    values = ds.t2m[0, :10, :10].values
    np.testing.assert_allclose(values, climate().t2m.values[0, :10, :10], atol=0.006)
    data_requests = [(m, k, r) for m, k, r in store.log]
    if layout == "chunked":
        assert data_requests == [("get_many", "t2m/c/0/0/0", None)]
    else:
        # one shard: its index (a suffix range), then one inner chunk's byte range
        assert {k for _, k, _ in data_requests} == {"t2m/c/0/0/0"}
        ranges = [r for _, _, r in data_requests]
        assert len(ranges) == 2 and ranges[0].is_suffix
        assert ranges[1] is not None and not ranges[1].is_suffix and ranges[1].length > 0
        assert store.calls["get_partial_values"] == 2


def test_outer_and_vectorized_indexing_match_numpy(tmp_path, layout):
    path = write(tmp_path, layout, False)
    got = xr.open_dataset(path, engine="zarr3")
    ref = xr.open_dataset(path, engine="zarr", consolidated=False)
    outer = dict(time=[0, 5, 2], lat=slice(3, 30, 4), lon=[63, 0, 17])
    xr.testing.assert_identical(got.t2m.isel(outer).load(), ref.t2m.isel(outer).load())
    points = dict(time=xr.DataArray([0, 7, 3], dims="p"), lat=xr.DataArray([1, 31, 16], dims="p"))
    xr.testing.assert_identical(got.t2m.isel(points).load(), ref.t2m.isel(points).load())
    mixed = dict(
        time=xr.DataArray([[1, 2], [6, 7]], dims=("a", "b")),
        lon=slice(60, 10, -7),
        lat=xr.DataArray([[0, 9], [20, 31]], dims=("a", "b")),
    )
    xr.testing.assert_identical(got.sp.isel(mixed).load(), ref.sp.isel(mixed).load())
    assert float(got.sp[2, 3, 4]) == float(ref.sp[2, 3, 4])


def test_vectorized_read_touches_only_needed_chunks(tmp_path):
    store = CountingStore(z3.LocalStore(write(tmp_path, "chunked", True)))
    ds = xr.open_dataset(store, engine="zarr3")
    store.reset()
    _ = ds.sp.isel(
        time=xr.DataArray([0, 7], dims="p"),
        lat=xr.DataArray([0, 31], dims="p"),
        lon=xr.DataArray([0, 63], dims="p"),
    ).values
    assert sorted(store.keys) == ["sp/c/0/0/0", "sp/c/7/1/3"]


def test_vectorized_read_in_one_shard_reads_only_its_inner_chunks(tmp_path):
    path = write(tmp_path, "sharded", True)
    store = CountingStore(z3.LocalStore(path))
    ds = xr.open_dataset(store, engine="zarr3")
    store.reset()
    # two points in shard (0, 0, 0), in inner chunks (0, 0, 0) and (1, 1, 3) of its 4 x 2 x 4
    got = ds.sp.isel(
        time=xr.DataArray([0, 1], dims="p"),
        lat=xr.DataArray([0, 31], dims="p"),
        lon=xr.DataArray([0, 63], dims="p"),
    ).values
    np.testing.assert_array_equal(got, climate().sp.values[[0, 1], [0, 31], [0, 63]])
    assert set(store.keys) == {"sp/c/0/0/0"}
    assert {m for m, _, _ in store.log} == {"get_partial_values"}  # never the whole shard
    ranges = [r for _, _, r in store.log]
    assert sum(r.is_suffix for r in ranges) == 1  # the index, once
    # the shard index (end of the shard: 4 x 2 x 4 (offset, nbytes) uint64 pairs + crc32c) says
    # where the two inner chunks are; each range starts at one and covers it
    shard = (path / "sp" / "c" / "0" / "0" / "0").read_bytes()
    index = np.frombuffer(shard[-(32 * 16 + 4) : -4], dtype="<u8").reshape(4, 2, 4, 2)
    wanted = sorted((int(index[c][0]), int(index[c][1])) for c in [(0, 0, 0), (1, 1, 3)])
    inner = sorted((r.offset, r.length) for r in ranges if not r.is_suffix)
    assert [off for off, _ in inner] == [off for off, _ in wanted]
    assert all(length >= nbytes for (_, length), (_, nbytes) in zip(inner, wanted, strict=True))
    assert sum(length for _, length in inner) < len(shard) / 4  # 2 of 32 inner chunks, not the shard


# ---- dask graphs ----------------------------------------------------------------------------
def n_tasks(darr) -> int:
    return len(dict(darr.__dask_graph__()))


def test_chunks_empty_gives_one_task_per_storage_unit(tmp_path, layout):
    path = write(tmp_path, layout, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the preferred chunks are whole shards: nothing to warn
        ds = xr.open_dataset(path, engine="zarr3", chunks={}, inline_array=True)
    unit = LAYOUTS[layout].get("shards", LAYOUTS[layout]["chunks"])
    expected = tuple(-(-s // u) for s, u in zip((NT, NY, NX), unit, strict=True))
    for name in ("t2m", "sp"):
        data = ds[name].data
        assert data.numblocks == expected
        assert data.chunksize == unit
        assert n_tasks(data) == int(np.prod(expected))  # one task per block, nothing more
    assert ds.t2m.encoding["preferred_chunks"] == dict(zip(("time", "lat", "lon"), unit, strict=True))
    np.testing.assert_allclose(ds.t2m.values, climate().t2m.values, atol=0.006)


def test_chunks_inner_shape_gives_one_task_per_inner_chunk(tmp_path):
    path = write(tmp_path, "sharded", True)
    # xarray warns because the tasks split the preferred chunks (whole shards): documented, expected
    with pytest.warns(UserWarning, match="The specified chunks separate the stored chunks"):
        ds = xr.open_dataset(
            path, engine="zarr3", chunks={"time": 1, "lat": 16, "lon": 16}, inline_array=True
        )
    assert ds.t2m.data.numblocks == (NT, 2, 4)
    assert n_tasks(ds.t2m.data) == NT * 2 * 4
    np.testing.assert_allclose(ds.t2m.values, climate().t2m.values, atol=0.006)


def test_chunks_auto_are_multiples_of_the_storage_unit(tmp_path, layout):
    path = write(tmp_path, layout, True)
    with dask.config.set({"array.chunk-size": "64KiB"}):
        ds = xr.open_dataset(path, engine="zarr3", chunks="auto")
    unit = LAYOUTS[layout].get("shards", LAYOUTS[layout]["chunks"])
    for sizes, u, total in zip(ds.sp.data.chunks, unit, (NT, NY, NX), strict=True):
        assert all(s % u == 0 for s in sizes[:-1]) and (sizes[-1] % u == 0 or sum(sizes) == total)


# ---- a huge synthetic store (metadata only) ------------------------------------------------------
N_VARS = 200
SHAPE = (1000, 1000)


def synthetic_store(sharded: bool, consolidated: bool) -> dict[str, bytes]:
    """200 float32 variables of 1000 x 1000 chunks of 1 x 1 each (10^6 chunks), no chunk data."""
    codecs: list[dict] = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
    ]
    grid = [1, 1]
    if sharded:
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [1, 1],
                    "codecs": codecs,
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"},
                    ],
                    "index_location": "end",
                },
            }
        ]
        grid = [100, 1000]  # 10 shards of 10^5 inner chunks each
    docs = {}
    for i in range(N_VARS):
        docs[f"v{i:03d}"] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(SHAPE),
            "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "NaN",
            "codecs": codecs,
            "attributes": {"units": "K", "index": i},
            "dimension_names": ["y", "x"],
        }
    root = {"zarr_format": 3, "node_type": "group", "attributes": {"title": "huge"}}
    if consolidated:
        root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": docs}
    data = {"zarr.json": json.dumps(root).encode()}
    data.update({f"{name}/zarr.json": json.dumps(doc).encode() for name, doc in docs.items()})
    return data


@pytest.mark.slow
@pytest.mark.parametrize("consolidated", [False, True])
def test_open_200_variables_of_a_million_chunks(consolidated, capsys):
    store = CountingStore(z3.MemoryStore(synthetic_store(sharded=False, consolidated=consolidated)))
    start = time.perf_counter()
    ds = xr.open_dataset(store, engine="zarr3")
    elapsed = time.perf_counter() - start
    assert len(ds.data_vars) == N_VARS and ds.sizes == {"y": 1000, "x": 1000}
    assert all(k.endswith("zarr.json") for m, k, _ in store.log if m != "list_dir")
    assert len(store.log) == (1 if consolidated else 1 + 1 + N_VARS)  # root, listing, one batch
    assert ds.v007.attrs == {"units": "K", "index": 7}
    assert float(ds.v199[999, 999]) != float(ds.v199[999, 999])  # never written: NaN fill
    with capsys.disabled():
        print(f"\nopen_dataset, {N_VARS} vars x 10^6 chunks, consolidated={consolidated}: {elapsed:.3f} s")


@pytest.mark.slow
def test_dask_graph_of_a_million_inner_chunks_has_one_task_per_shard(capsys):
    store = z3.MemoryStore(synthetic_store(sharded=True, consolidated=True))
    start = time.perf_counter()
    ds = xr.open_dataset(store, engine="zarr3", chunks={}, inline_array=True)
    elapsed = time.perf_counter() - start
    assert ds.v000.encoding["chunks"] == (1, 1) and ds.v000.encoding["shards"] == (100, 1000)
    assert all(ds[name].data.numblocks == (10, 1) for name in ds.data_vars)
    assert sum(n_tasks(ds[name].data) for name in ds.data_vars) == N_VARS * 10
    with capsys.disabled():
        print(f"\nopen_dataset(chunks={{}}), {N_VARS} sharded vars x 10^6 inner chunks: {elapsed:.3f} s")


# ---- async and pickling ------------------------------------------------------------------------
def test_load_async_matches_sync(tmp_path, layout):
    import asyncio

    path = write(tmp_path, layout, True)
    ds = xr.open_dataset(path, engine="zarr3")
    loaded = asyncio.run(ds.t2m.isel(time=[1, 6], lon=slice(5, 50)).load_async())
    xr.testing.assert_identical(loaded, ds.t2m.isel(time=[1, 6], lon=slice(5, 50)).load())


def test_lazy_dataset_pickles_for_distributed_workers(tmp_path, layout):
    import pickle

    path = write(tmp_path, layout, True)
    ds = xr.open_dataset(path, engine="zarr3", chunks={})
    clone = pickle.loads(pickle.dumps(ds))
    xr.testing.assert_identical(clone.compute(), ds.compute())
    lazy = xr.open_dataset(path, engine="zarr3")
    xr.testing.assert_identical(pickle.loads(pickle.dumps(lazy)).load(), lazy.load())
