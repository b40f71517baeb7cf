"""to_zarr: same meaning as xarray's Dataset.to_zarr; readable identically by engine="zarr3"
and engine="zarr"; validated before anything is written; data, then metadata."""

from __future__ import annotations

import json

import dask
import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from dask.delayed import Delayed
from store_doubles import RecordingStore

import zarr3_backend as z3
from zarr3_backend.codecs import GzipCodec
from zarr3_backend.errors import ArgumentTypeError, ChunkAlignmentError, NodeExistsError
from zarr3_backend.stores import LocalStore, MemoryStore


def climate(ntime=12, nlat=6, nlon=8, seed=0):
    """A small (time, lat, lon) dataset with the usual climate trimmings."""
    rng = np.random.default_rng(seed)
    t2m = (250 + 40 * rng.random((ntime, nlat, nlon))).astype("float32")
    t2m[0, 0, 0] = np.nan
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 metre temperature"}),
            "mask": (("lat", "lon"), rng.random((nlat, nlon)) > 0.5),
            "count": (("time",), np.arange(ntime, dtype="int32")),
        },
        coords={
            "time": pd.date_range("2001-01-01", periods=ntime, freq="D"),
            "lat": np.linspace(-75, 75, nlat),
            "lon": np.arange(nlon) * 45.0,
            "station": ("lon", np.array([f"st{i}" for i in range(nlon)])),
            "area": (("lat", "lon"), rng.random((nlat, nlon))),
        },
        attrs={"title": "synthetic", "history": "made in a test"},
    )


def open_both(path, **kw):
    return [xr.open_dataset(path, engine=e, **kw).load() for e in ("zarr3", "zarr")]


def zarr_json(path, name=""):
    p = path / name / "zarr.json" if name else path / "zarr.json"
    return json.loads(p.read_text())


# ---- round trips ----------------------------------------------------------------------------
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("sharded", [False, True])
def test_round_trip_opens_identically_with_both_engines(tmp_path, chunked, sharded):
    ds = climate()
    src = ds.chunk({"time": 4, "lat": 6, "lon": 4}) if chunked else ds
    enc = {"t2m": {"chunks": (2, 3, 4), "shards": (4, 6, 4)}} if sharded else {"t2m": {"chunks": (4, 3, 4)}}
    g = z3.to_zarr(src, tmp_path / "o.zarr", encoding=enc)
    assert isinstance(g, z3.Group)
    for back in open_both(tmp_path / "o.zarr"):
        xr.testing.assert_identical(back, ds)
    meta = zarr_json(tmp_path / "o.zarr", "t2m")
    assert meta["dimension_names"] == ["time", "lat", "lon"]
    assert meta["fill_value"] == "NaN"  # floats default to NaN, as xarray's writer does
    if sharded:
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [4, 6, 4]
        assert meta["codecs"][0]["name"] == "sharding_indexed"
        assert meta["codecs"][0]["configuration"]["chunk_shape"] == [2, 3, 4]


def test_cf_packing_times_and_strings_are_encoded_as_xarray_does(tmp_path):
    ds = climate().assign_coords(owner=("lon", np.array(["met office", "dwd", "", "knmi"] * 2, dtype=object)))
    enc = {
        "t2m": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32767},
        "time": {"units": "hours since 2000-01-01", "calendar": "standard"},
    }
    z3.to_zarr(ds, tmp_path / "p.zarr", encoding=enc)
    t2m = zarr_json(tmp_path / "p.zarr", "t2m")
    assert t2m["data_type"] == "int16"
    assert t2m["attributes"]["_FillValue"] == -32767
    assert t2m["attributes"]["scale_factor"] == 0.01
    time = zarr_json(tmp_path / "p.zarr", "time")
    assert time["attributes"]["units"] == "hours since 2000-01-01"
    # as xarray's engine stores them: fixed-width text keeps its width, object text is vlen
    station = zarr_json(tmp_path / "p.zarr", "station")
    assert station["data_type"]["name"] == "fixed_length_utf32"
    assert station["data_type"]["configuration"]["length_bytes"] == ds.station.dtype.itemsize
    owner = zarr_json(tmp_path / "p.zarr", "owner")
    assert owner["data_type"] == "string"
    assert owner["codecs"][0]["name"] == "vlen-utf8"
    for back in open_both(tmp_path / "p.zarr"):
        xr.testing.assert_allclose(back, ds, atol=0.006)
        assert np.isnan(back.t2m.values[0, 0, 0])
        assert list(back.station.values) == list(ds.station.values)
        assert list(back.owner.values) == list(ds.owner.values)


def test_codecs_as_objects_numcodecs_instances_dicts_or_a_full_chain(tmp_path):
    ds = climate()[["t2m", "count"]]
    enc = {
        "t2m": {"compressors": [numcodecs.Blosc(cname="lz4", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE)]},
        "count": {
            "compressors": GzipCodec(level=5),
            "filters": [{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}],
        },
        "lat": {"codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}]},
    }
    z3.to_zarr(ds, tmp_path / "c.zarr", encoding=enc)
    t2m = zarr_json(tmp_path / "c.zarr", "t2m")["codecs"]
    assert t2m[1]["name"] == "blosc" and t2m[1]["configuration"]["cname"] == "lz4"
    assert t2m[1]["configuration"]["shuffle"] == "shuffle"
    count = zarr_json(tmp_path / "c.zarr", "count")["codecs"]
    assert [c["name"] for c in count] == ["numcodecs.delta", "bytes", "gzip"]
    lat = zarr_json(tmp_path / "c.zarr", "lat")["codecs"]
    assert lat == [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}]
    for back in open_both(tmp_path / "c.zarr"):
        xr.testing.assert_identical(back, ds)


def test_open_modify_write_keeps_the_layout(tmp_path):
    ds = climate()
    z3.to_zarr(
        ds.chunk({"time": 4}),
        tmp_path / "a.zarr",
        encoding={"t2m": {"chunks": (2, 3, 4), "shards": (4, 6, 8), "compressors": [GzipCodec(level=2)]}},
    )
    reopened = xr.open_dataset(tmp_path / "a.zarr", engine="zarr3", chunks={})
    z3.to_zarr(reopened, tmp_path / "b.zarr")
    a, b = zarr_json(tmp_path / "a.zarr", "t2m"), zarr_json(tmp_path / "b.zarr", "t2m")
    assert a["codecs"] == b["codecs"] and a["chunk_grid"] == b["chunk_grid"]
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "b.zarr", engine="zarr3").load(), ds)


def test_dataarray_group_and_store_objects(tmp_path):
    ds = climate()
    store = LocalStore(tmp_path / "g.zarr")
    z3.to_zarr(ds.t2m, store, group="sub/level")
    back = xr.open_dataset(tmp_path / "g.zarr", engine="zarr3", group="sub/level").load()
    xr.testing.assert_identical(back.t2m, ds.t2m)
    mem = MemoryStore()
    z3.to_zarr(ds, mem)
    xr.testing.assert_identical(xr.open_dataset(mem, engine="zarr3").load(), ds)


# ---- modes ----------------------------------------------------------------------------------
def test_modes_w_minus_w_a_and_r_plus(tmp_path):
    ds = climate()
    path = tmp_path / "m.zarr"
    z3.to_zarr(ds, path)
    with pytest.raises(NodeExistsError):
        z3.to_zarr(ds, path)  # mode defaults to "w-"
    z3.to_zarr(ds[["count"]], path, mode="w")  # replaces everything
    assert set(xr.open_dataset(path, engine="zarr3").data_vars) == {"count"}
    z3.to_zarr(ds[["mask"]], path, mode="a")  # adds a variable
    assert set(xr.open_dataset(path, engine="zarr3").data_vars) == {"count", "mask"}
    with pytest.raises(ValueError, match=r"\['t2m'\].*mode='a'"):
        z3.to_zarr(ds[["t2m"]], path, mode="r+")
    with pytest.raises(ValueError, match="append_dim"):
        z3.to_zarr(ds, path, mode="w", append_dim="time")
    with pytest.raises(ValueError, match="mode must be one of"):
        z3.to_zarr(ds, path, mode="x")


# ---- validation: nothing written by a failed call -------------------------------------------
def test_invalid_encoding_is_refused_naming_variable_and_key():
    store = MemoryStore()
    with pytest.raises(ValueError, match=r"'t2m'.*\['bogus'\]"):
        z3.to_zarr(climate(), store, encoding={"t2m": {"bogus": 1}})
    with pytest.raises(ValueError, match=r"\['nope'\]"):
        z3.to_zarr(climate(), store, encoding={"nope": {}})
    with pytest.raises(ValueError, match=r"'t2m'.*either"):
        z3.to_zarr(climate(), store, encoding={"t2m": {"codecs": [{"name": "bytes"}], "compressors": None}})
    assert list(store.list()) == []


def test_attributes_that_cannot_be_stored_are_refused_before_any_write():
    store = MemoryStore()
    ds = climate()
    ds.t2m.attrs["bad"] = {1, 2}
    with pytest.raises(ArgumentTypeError, match=r"variable 't2m'.*bad"):
        z3.to_zarr(ds, store)
    ds = climate()
    ds.attrs["bad"] = {3}
    with pytest.raises(ArgumentTypeError, match=r"dataset attributes.*bad"):
        z3.to_zarr(ds.chunk({"time": 4}), store)
    assert list(store.list()) == []


def test_encoding_for_an_existing_variable_is_refused_in_append_modes():
    store = MemoryStore()
    z3.to_zarr(climate(), store)
    before = dict(store._data)
    with pytest.raises(ValueError, match=r"'t2m'.*already exist"):
        z3.to_zarr(climate(), store, mode="a", encoding={"t2m": {"chunks": (1, 1, 1)}})
    assert store._data == before


def test_misaligned_dask_chunks_are_refused_before_any_write_then_exact_when_aligned():
    ds = climate(ntime=8, nlat=8, nlon=8)
    src = ds.chunk({"time": 2, "lat": 2, "lon": 2})
    store = RecordingStore()
    with pytest.raises(ChunkAlignmentError) as info:
        z3.to_zarr(src, store, encoding={"t2m": {"chunks": (2, 2, 2), "shards": (4, 4, 4)}})
    msg = str(info.value)
    assert "'t2m'" in msg and "'time'" in msg and "(2, 2, 2, 2)" in msg and "size 4" in msg
    assert ".chunk({'time': 4})" in msg
    assert store.writes == [] and list(store.list()) == []
    z3.to_zarr(src, store, encoding={"t2m": {"chunks": (2, 2, 2), "shards": (4, 4, 4)}}, align_chunks=True)
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), ds)


def test_shards_without_chunks_take_the_inner_chunk_from_dask_capped_by_the_shard(tmp_path):
    ds = xr.Dataset({"v": (("y", "x"), np.arange(256.0).reshape(16, 16))})
    cases = [(16, (8, 8), (8, 8)), (4, (8, 8), (4, 4)), (3, (8, 6), (2, 3))]  # dask, shards, inner
    for i, (dask_size, shards, inner) in enumerate(cases):
        path = tmp_path / f"{i}.zarr"
        z3.to_zarr(ds.chunk(dask_size), path, encoding={"v": {"shards": shards}}, align_chunks=True)
        meta = zarr_json(path, "v")
        sharding = meta["codecs"][0]["configuration"]
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(shards)
        assert sharding["chunk_shape"] == list(inner)
        xr.testing.assert_identical(xr.open_dataset(path, engine="zarr").load(), ds)


def test_layout_errors_say_where_each_shape_came_from():
    ds = xr.Dataset({"v": (("y", "x"), np.arange(256.0).reshape(16, 16))})
    with pytest.raises(ValueError) as info:
        z3.to_zarr(ds.chunk(4), MemoryStore(), encoding={"v": {"chunks": (3, 3), "shards": (8, 8)}})
    msg = str(info.value)
    assert "'v'" in msg
    assert "chunks (3, 3) from encoding['chunks']" in msg and "shards (8, 8) from encoding['shards']" in msg
    with pytest.raises(ChunkAlignmentError, match=r"shard shape \(6, 6\) from encoding\['v'\]\['shards'\]"):
        z3.to_zarr(ds.chunk(4), MemoryStore(), encoding={"v": {"shards": (6, 6)}})
    store = MemoryStore()
    z3.to_zarr(ds.chunk(8), store, encoding={"v": {"shards": (8, 8)}})
    with pytest.raises(ChunkAlignmentError, match=r"as stored in 'v/zarr.json'"):
        z3.to_zarr(ds.chunk(4).isel(y=slice(0, 8)), store, mode="r+", region={"y": slice(0, 8)})


@pytest.mark.parametrize("chunks", [{}, None])
def test_mode_w_over_the_store_the_data_is_read_from(tmp_path, chunks):
    """mode="w" erases the group before the data is computed: a lazy (dask) source in it is
    refused, a lazy numpy one is loaded first; a source in another group is no concern."""
    path = tmp_path / "s.zarr"
    ds0 = xr.Dataset({"v": (("x",), np.arange(8.0))})
    z3.to_zarr(ds0, path, encoding={"v": {"chunks": (4,)}})
    z3.to_zarr(ds0 * 10, path, group="other")
    other = xr.open_dataset(path, engine="zarr3", group="other", chunks=chunks)
    z3.to_zarr(other, path, mode="w", group="copy")  # erases group "copy" only
    np.testing.assert_array_equal(
        xr.open_dataset(path, engine="zarr", group="copy").v.values, ds0.v.values * 10
    )
    before = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    src = xr.open_dataset(path, engine="zarr3", chunks=chunks)
    if chunks is None:
        z3.to_zarr(src, path, mode="w")  # loaded before the erase
        np.testing.assert_array_equal(xr.open_dataset(path, engine="zarr").v.values, ds0.v.values)
    else:
        for lazy in (src, src + 1, src.chunk({"x": 2})):
            with pytest.raises(ValueError, match=r"variable 'v' is read lazily \(dask\) from 'v'.*mode='w'"):
                z3.to_zarr(lazy, path, mode="w")
        assert {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
        z3.to_zarr(src + 1, path, mode="a")  # in place: each task rewrites the shard it read
        np.testing.assert_array_equal(xr.open_dataset(path, engine="zarr").v.values, ds0.v.values + 1)


def test_a_failing_write_in_mode_w_leaves_the_old_data():
    store = MemoryStore()
    z3.to_zarr(climate(), store)
    before = dict(store._data)
    with pytest.raises(ValueError):
        z3.to_zarr(climate(), store, mode="w", encoding={"t2m": {"bogus": 1}})
    assert store._data == before


# ---- ordering, consolidation, compute=False ---------------------------------------------------
def test_data_then_array_metadata_then_consolidated_metadata():
    store = RecordingStore()
    ds = climate().chunk({"time": 4})
    z3.to_zarr(ds, store, encoding={"t2m": {"shards": (4, 6, 8), "chunks": (2, 3, 4)}})
    writes = store.writes
    root = [i for i, k in enumerate(writes) if k == "zarr.json"]
    for name in ds.variables:
        data = [i for i, k in enumerate(writes) if k.startswith(f"{name}/c/")]
        meta = writes.index(f"{name}/zarr.json")
        assert data and max(data) < meta < root[-1], name
    doc = json.loads(store._data["zarr.json"])
    cm = doc["consolidated_metadata"]
    assert cm is not None and set(cm["metadata"]) == set(ds.variables)
    assert cm["metadata"]["t2m"] == json.loads(store._data["t2m/zarr.json"])


def test_consolidated_metadata_is_kept_up_to_date_and_never_null():
    store = MemoryStore()
    ds = climate()
    z3.to_zarr(ds, store)
    # even with consolidated=False, a store that has consolidated metadata keeps it current
    z3.to_zarr(ds.isel(time=slice(0, 3)), store, mode="a", append_dim="time", consolidated=False)
    doc = json.loads(store._data["zarr.json"])
    assert doc["consolidated_metadata"]["metadata"]["t2m"]["shape"][0] == 15
    assert doc["consolidated_metadata"]["metadata"]["time"] == json.loads(store._data["time/zarr.json"])
    fresh = MemoryStore()
    z3.to_zarr(ds, fresh, consolidated=False)
    assert "consolidated_metadata" not in json.loads(fresh._data["zarr.json"])  # absent, never null


def test_compute_false_template_reads_nan_until_computed(tmp_path):
    ds = climate()
    src = ds.chunk({"time": 4})
    d = z3.to_zarr(src, tmp_path / "t.zarr", compute=False, encoding={"t2m": {"chunks": (4, 6, 8)}})
    assert isinstance(d, Delayed)
    template = xr.open_dataset(tmp_path / "t.zarr", engine="zarr3").load()
    assert template.t2m.shape == ds.t2m.shape
    assert np.isnan(template.t2m.values).all()  # unwritten float cells read as NaN
    np.testing.assert_array_equal(template.lat.values, ds.lat.values)  # numpy coords are written now
    d.compute()
    for back in open_both(tmp_path / "t.zarr"):
        xr.testing.assert_identical(back, ds)


def test_write_empty_chunks(tmp_path):
    ds = xr.Dataset({"z": (("x",), np.zeros(8))})
    z3.to_zarr(ds, tmp_path / "e.zarr", encoding={"z": {"chunks": (2,), "fill_value": 0.0}})
    assert not (tmp_path / "e.zarr" / "z" / "c").exists()
    z3.to_zarr(
        ds, tmp_path / "f.zarr", encoding={"z": {"chunks": (2,), "fill_value": 0.0}}, write_empty_chunks=True
    )
    assert len(list((tmp_path / "f.zarr" / "z" / "c").iterdir())) == 4
    with pytest.raises(ValueError, match="write_empty_chunks"):
        z3.to_zarr(
            ds, tmp_path / "g.zarr", encoding={"z": {"write_empty_chunks": False}}, write_empty_chunks=True
        )


def test_open_modify_write_keeps_shard_index_and_key_encoding(tmp_path):
    """A store's layout (index at start without crc32c, '.' key separator) survives
    open_dataset(engine="zarr3") -> z3.to_zarr."""
    import xarray as xr

    import zarr3_backend as z3

    src = tmp_path / "src.zarr"
    g = z3.open_group(src, mode="w")
    a = g.create_array(
        "t",
        shape=(8, 6),
        dtype="f4",
        chunks=(2, 3),
        shards=(4, 6),
        dimension_names=("time", "x"),
        chunk_key_encoding={"name": "default", "configuration": {"separator": "."}},
        shard_index={
            "index_location": "start",
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        },
    )
    a[...] = np.arange(48, dtype="f4").reshape(8, 6)
    ds = xr.open_dataset(src, engine="zarr3")
    ds["t"] = ds["t"].copy(data=ds["t"].values * 2)  # keeps the encoding, as xarray does
    z3.to_zarr(ds, tmp_path / "dst.zarr", mode="w")
    b = z3.open_array(tmp_path / "dst.zarr", "t")
    config = b.codecs[0]["configuration"]
    assert config["index_location"] == "start"
    assert [c["name"] for c in config["index_codecs"]] == ["bytes"]
    assert b.metadata.chunk_key_encoding.to_json()["configuration"]["separator"] == "."
    assert (b.chunks, b.shards) == ((2, 3), (4, 6))
    np.testing.assert_array_equal(b[...], np.arange(48, dtype="f4").reshape(8, 6) * 2)


def test_bad_writer_arguments_are_typed_package_errors(tmp_path):
    import xarray as xr

    import zarr3_backend as z3
    from zarr3_backend.errors import ArgumentError, ArgumentTypeError, Zarr3Error

    ds = xr.Dataset({"v": (("t",), np.arange(4.0))})
    with pytest.raises(ArgumentError) as info:
        z3.to_zarr(ds, tmp_path / "o.zarr", mode="w", zarr_format=4)
    assert isinstance(info.value, Zarr3Error) and isinstance(info.value, ValueError)
    with pytest.raises(ArgumentTypeError):
        z3.to_zarr(np.arange(3), tmp_path / "o.zarr", mode="w")
    assert not (tmp_path / "o.zarr").exists()


def test_safe_chunks_false_rechunks_dask_blocks_that_split_a_shard(tmp_path):
    # xarray writes these unchecked (two tasks may rewrite one shard); we rechunk: data intact
    ds = xr.Dataset({"v": ("x", np.arange(12.0))}).chunk({"x": 3})
    ds["v"].encoding = {"chunks": (2,), "shards": (4,)}
    with pytest.raises(ChunkAlignmentError, match=r"named 'v' would overlap multiple Dask chunks"):
        z3.to_zarr(ds, tmp_path / "a.zarr", mode="w")
    z3.to_zarr(ds, tmp_path / "a.zarr", mode="w", safe_chunks=False)
    back = xr.open_dataset(tmp_path / "a.zarr", engine="zarr3").load()
    np.testing.assert_array_equal(back["v"].values, np.arange(12.0))
    assert back["v"].encoding["shards"] == (4,)


def test_a_variable_named_none_is_stored_as_xarray_stores_it(tmp_path):
    ds = xr.Dataset({None: (("x",), np.arange(3))})
    z3.to_zarr(ds, tmp_path / "n.zarr", mode="w")
    assert (tmp_path / "n.zarr" / "__values__" / "zarr.json").is_file()
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(xr.open_dataset(tmp_path / "n.zarr", engine=engine).load(), ds)


def test_stringdtype_nulls_are_written_as_empty_strings(tmp_path):
    data = np.array(["ab", None, "c"], dtype=np.dtypes.StringDType(na_object=None))
    z3.to_zarr(xr.Dataset({"s": ("t", data)}), tmp_path / "s.zarr", mode="w")
    back = xr.open_dataset(tmp_path / "s.zarr", engine="zarr3").load()
    assert back["s"].values.tolist() == ["ab", "", "c"]


def test_fill_value_none_in_encoding_omits_the_cf_fill_value(tmp_path):
    ds = xr.Dataset({"x": ("y", [np.pi, -np.pi])}, coords={"y": [0.0, 1.0]})
    z3.to_zarr(
        ds, tmp_path / "f.zarr", mode="w", encoding={"x": {"_FillValue": None}, "y": {"_FillValue": None}}
    )
    back = xr.open_dataset(tmp_path / "f.zarr", engine="zarr3")
    assert "_FillValue" not in back["x"].encoding and "_FillValue" not in back["y"].encoding


def test_execution_stages_the_data_then_commits_everything_at_once():
    """mode="w" over an existing group: nothing of the old group changes until every value is
    staged and the manifest written; then the marks, the erases, the values put in place and
    the documents (the root's consolidated metadata last)."""
    from zarr3_backend.xarray.write_exec import execute
    from zarr3_backend.xarray.writer import WriteOptions, prepare

    store = RecordingStore()
    z3.to_zarr(climate(), store, mode="w", group="g")
    old = dict(store._data)
    store.writes.clear()
    options = WriteOptions("w", None, None, True, False, None, True)
    plan = prepare(climate().chunk({"time": 4}), store, "g", None, options)
    assert store.writes == []  # planning writes nothing
    assert plan.erase_prefixes == ["g"]
    execute([plan], store, path="g", consolidate=True, compute=True, align_chunks=False, run=dask.compute)
    writes = store.writes
    manifest = next(i for i, k in enumerate(writes) if k.endswith("/manifest.json"))
    staged = [i for i, k in enumerate(writes) if k.startswith(".z3-txn/") and "/data/" in k]
    assert staged and max(staged) < manifest
    assert all(k.startswith(".z3-txn/") for k in writes[:manifest])  # the old group untouched
    placed = [i for i, k in enumerate(writes) if k.startswith("g/t2m/c/")]
    docs = [i for i, k in enumerate(writes) if k == "g/t2m/zarr.json"]
    assert placed and docs and max(placed) < docs[-1] < len(writes) - 1
    assert writes[-1] == "zarr.json"  # the root (with consolidated metadata) is written last
    assert not [k for k in store._data if k.startswith(".z3-txn/")]
    assert set(old) - set(store._data) <= {k for k in old if "/c/" in k}  # only replaced chunks went
    xr.testing.assert_identical(xr.open_dataset(store, group="g", engine="zarr3").load(), climate())
