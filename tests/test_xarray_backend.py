"""engine="zarr3" against xarray's own engine="zarr" (zarr-python) on realistic climate stores.

Every store is written by xarray itself (``to_zarr(..., zarr_format=3)``), sharded and not,
consolidated and not; both engines open the same store and must give identical datasets,
attributes and encodings (codecs compared through their JSON form).
"""

from __future__ import annotations

import base64
import json
import math
import os
import pathlib
import struct
import warnings

import cftime
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import (
    DataTypeError,
    GroupNotFoundError,
    MetadataError,
    NodeExistsError,
    NodeNotFoundError,
    ReadOnlyError,
    ShapeError,
    UnknownCodecError,
    Zarr3Error,
)
from zarr3_backend.stores.base import StoreArgumentError
from zarr3_backend.xarray import Zarr3BackendEntrypoint
from zarr3_backend.xarray.encoding import GeneratedDimensionWarning

pytestmark = [
    pytest.mark.interop,
    # zarr-python warns about its own unstable string types; xarray about consolidation
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
    pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part"),
]

NT, NY, NX = 12, 16, 20


# ---- realistic climate data -----------------------------------------------------------------
def climate_dataset() -> xr.Dataset:
    """2 m temperature packed as int16, a CF time axis, a 2-D auxiliary coordinate, stations."""
    rng = np.random.default_rng(1)
    time = pd.date_range("2001-01-01", periods=NT, freq="6h")
    lat = np.linspace(-75, 75, NY, dtype="float32")
    lon = np.linspace(0, 342, NX, dtype="float32")
    t2m = (273.15 + 15 * np.cos(np.deg2rad(lat))[None, :, None] + rng.normal(0, 3, (NT, NY, NX))).astype(
        "float32"
    )
    t2m[0, :3, :4] = np.nan  # missing values: masked through the CF _FillValue
    cell_area = (np.cos(np.deg2rad(lat))[:, None] * np.ones(NX)).astype("float64")
    stations = np.array(["Oslo", "Bergen", "Tromsø", "Bodø"])
    ds = xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                t2m,
                {"units": "K", "long_name": "2 metre temperature", "standard_name": "air_temperature"},
            ),
            "precip": (
                ("time", "lat", "lon"),
                rng.gamma(0.5, 2, (NT, NY, NX)).astype("float64"),
                {"units": "mm"},
            ),
            "station_t2m": (("time", "station"), rng.normal(280, 5, (NT, 4)).astype("float32")),
            "n_obs": (("time",), np.arange(NT, dtype="int32")),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
            "cell_area": (("lat", "lon"), cell_area, {"units": "m2"}),
            "station": ("station", stations),
            "station_code": ("station", np.array(["OSL", "BGO", "TOS", "BOO"], dtype=object)),
        },
        attrs={"title": "synthetic reanalysis", "Conventions": "CF-1.8", "history": "made in a test"},
    )
    ds["t2m"].encoding = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32768}
    ds["time"].encoding = {"units": "hours since 2001-01-01", "calendar": "proleptic_gregorian"}
    return ds


def model_dataset() -> xr.Dataset:
    """A model run on a noleap calendar (cftime), for a nested group."""
    times = xr.date_range("2050-02-27", periods=5, freq="D", calendar="noleap", use_cftime=True)
    rng = np.random.default_rng(2)
    ds = xr.Dataset(
        {"sst": (("time", "lat"), rng.normal(290, 2, (5, 4)).astype("float32"), {"units": "K"})},
        coords={"time": times, "lat": ("lat", np.array([-30.0, -10.0, 10.0, 30.0]))},
        attrs={"model": "toy-1"},
    )
    ds["time"].encoding = {"units": "days since 2050-01-01", "calendar": "noleap"}
    return ds


def write(
    ds: xr.Dataset,
    path: pathlib.Path,
    *,
    sharded: bool,
    consolidated: bool,
    group: str | None = None,
    mode: str = "w",
) -> pathlib.Path:
    """Write with xarray's own zarr engine (zarr-python), zarr_format=3."""
    ds = ds.copy()
    if sharded:
        for name in ("t2m", "precip"):
            if name in ds:
                ds[name].encoding = {**ds[name].encoding, "chunks": (1, 8, 10), "shards": (4, 16, 20)}
    elif "t2m" in ds:
        ds["t2m"].encoding = {**ds["t2m"].encoding, "chunks": (3, 8, 10)}
    ds.to_zarr(path, mode=mode, zarr_format=3, consolidated=consolidated, group=group)
    return path


@pytest.fixture(
    params=[(False, False), (False, True), (True, False), (True, True)],
    ids=["plain", "plain-consolidated", "sharded", "sharded-consolidated"],
)
def climate_store(request, tmp_path) -> tuple[pathlib.Path, bool, bool]:
    sharded, consolidated = request.param
    path = write(climate_dataset(), tmp_path / "climate.zarr", sharded=sharded, consolidated=consolidated)
    return path, sharded, consolidated


def codec_json(c):
    return c if isinstance(c, dict) else c.to_dict()


def same_value(a, b) -> bool:
    if isinstance(a, float | np.floating) and isinstance(b, float | np.floating) and math.isnan(a):
        return math.isnan(b) and type(a) is type(b)
    return type(a) is type(b) and a == b


#: Layout keys our encoding holds and xarray's engine="zarr" does not (checked against zarr.json
#: in test_layout_keys_match_zarr_json).
EXTRA_KEYS = {"chunk_key_encoding", "shard_index"}


def assert_same_encoding(ref: xr.Variable, got: xr.Variable, name: str) -> None:
    """Encodings equal key by key; codecs by JSON; preferred_chunks is the storage unit in ours."""
    er, eg = ref.encoding, got.encoding
    assert EXTRA_KEYS <= set(eg), name
    assert set(er) - {"source"} == set(eg) - {"source"} - EXTRA_KEYS, name
    for key in er:
        if key in ("compressors", "filters"):
            assert [codec_json(c) for c in er[key]] == list(eg[key]), (name, key)
        elif key == "serializer":
            assert codec_json(er[key]) == eg[key], (name, key)
        elif key == "preferred_chunks":
            unit = eg["shards"] or eg["chunks"]
            assert eg[key] == dict(zip(got.dims, unit, strict=True)), name
            assert er[key] == dict(zip(ref.dims, er["chunks"], strict=True)), name  # zarr: inner chunk
        elif key == "fill_value":
            assert same_value(er[key], eg[key]), (name, er[key], eg[key])
        elif key != "source":
            assert np.array_equal(er[key], eg[key], equal_nan=np.asarray(er[key]).dtype.kind == "f") and type(
                er[key]
            ) is type(eg[key]), (name, key, er[key], eg[key])


def assert_same_dataset(ref: xr.Dataset, got: xr.Dataset) -> None:
    xr.testing.assert_identical(ref, got)
    for name in ref.variables:
        assert ref[name].dtype == got[name].dtype, name
        assert_same_encoding(ref[name].variable, got[name].variable, name)


def open_both(path, consolidated, **kwargs):
    ref = xr.open_dataset(path, engine="zarr", consolidated=consolidated, **kwargs)
    got = xr.open_dataset(path, engine="zarr3", **kwargs)
    return ref, got


# ---- identical datasets -----------------------------------------------------------------------
def test_climate_store_identical_to_zarr_engine(climate_store):
    path, sharded, consolidated = climate_store
    ref, got = open_both(path, consolidated)
    assert_same_dataset(ref, got)
    # the decoded physical values, not just equality of two readers
    source = climate_dataset()
    np.testing.assert_allclose(got.t2m.values, source.t2m.values, atol=0.006, equal_nan=True)
    assert np.isnan(got.t2m.values[0, :3, :4]).all()
    assert got.t2m.encoding["shards"] == ((4, 16, 20) if sharded else None)
    assert got.t2m.encoding["chunks"] == ((1, 8, 10) if sharded else (3, 8, 10))
    assert got.t2m.encoding["dtype"] == np.dtype("int16")
    assert got.t2m.encoding["scale_factor"] == 0.01 and got.t2m.encoding["add_offset"] == 273.15
    assert got.t2m.encoding["_FillValue"] == -32768
    assert got.time.encoding["units"] == "hours since 2001-01-01"
    assert "cell_area" in got.coords and got.cell_area.dims == ("lat", "lon")
    assert list(got.station.values) == ["Oslo", "Bergen", "Tromsø", "Bodø"]
    assert set(got.indexes) == {"time", "lat", "lon", "station"}


def test_layout_keys_match_zarr_json(climate_store):
    """chunk_key_encoding and the shard index settings are those zarr-python wrote."""
    path, sharded, _ = climate_store
    got = xr.open_dataset(path, engine="zarr3")
    for name in ("t2m", "precip", "n_obs", "time"):
        doc = json.loads((path / name / "zarr.json").read_text())
        assert got[name].encoding["chunk_key_encoding"] == doc["chunk_key_encoding"], name
        if sharded and name in ("t2m", "precip"):
            config = doc["codecs"][0]["configuration"]
            assert got[name].encoding["shard_index"] == {
                "index_location": config["index_location"],
                "index_codecs": tuple(config["index_codecs"]),
            }
        else:
            assert got[name].encoding["shard_index"] is None, name


def test_identical_with_dask_chunks(climate_store):
    path, _, consolidated = climate_store
    ref, got = open_both(path, consolidated, chunks={})
    xr.testing.assert_identical(ref.compute(), got.compute())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"decode_times": False},
        {"decode_cf": False},
        {"mask_and_scale": False},
        {"decode_coords": False},
        {"decode_coords": "all"},
        {"concat_characters": False},
        {"drop_variables": ["precip", "cell_area"]},
        {"drop_variables": "precip"},
        {"decode_timedelta": True},
        {"decode_times": xr.coders.CFDatetimeCoder(use_cftime=True)},
        {"decode_times": xr.coders.CFDatetimeCoder(time_unit="s")},
    ],
    ids=repr,
)
def test_cf_options_match_zarr_engine(tmp_path, kwargs):
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=False, consolidated=True)
    ref, got = open_both(path, True, **kwargs)
    assert_same_dataset(ref, got)


def test_noleap_calendar_and_timedelta(tmp_path):
    ds = model_dataset()
    ds["lead"] = ("time", pd.to_timedelta(np.arange(5), "h").values)
    ds["lead"].encoding = {"units": "hours"}
    path = tmp_path / "model.zarr"
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    ref, got = open_both(path, False, decode_timedelta=True)
    assert_same_dataset(ref, got)
    assert isinstance(got.time.values[0], cftime.DatetimeNoLeap)
    assert got.time.values[2] == cftime.DatetimeNoLeap(2050, 3, 1)  # Feb 29 does not exist
    assert got.time.encoding["calendar"] == "noleap"
    assert got.lead.dtype.kind == "m"


# ---- groups and trees -----------------------------------------------------------------------
def climate_tree() -> xr.DataTree:
    return xr.DataTree.from_dict(
        {
            "/": xr.Dataset(attrs={"title": "tree"}),
            "/reanalysis": climate_dataset().drop_vars(["precip"]),
            "/models/toy": model_dataset(),
            "/models/toy/member1": xr.Dataset({"bias": ("lat", np.arange(4.0))}),
        }
    )


@pytest.mark.parametrize("consolidated", [False, True])
def test_open_datatree_nested_groups(tmp_path, consolidated):
    path = tmp_path / "tree.zarr"
    climate_tree().to_zarr(path, zarr_format=3, consolidated=consolidated)
    ref = xr.open_datatree(path, engine="zarr", consolidated=consolidated)
    got = xr.open_datatree(path, engine="zarr3")
    xr.testing.assert_identical(ref, got)
    assert got["models/toy"].time.encoding["calendar"] == "noleap"
    groups = xr.open_groups(path, engine="zarr3")
    assert set(groups) == {"/", "/reanalysis", "/models", "/models/toy", "/models/toy/member1"}
    sub = xr.open_datatree(path, engine="zarr3", group="models")
    xr.testing.assert_identical(
        sub, xr.open_datatree(path, engine="zarr", group="models", consolidated=consolidated)
    )


@pytest.mark.parametrize("consolidated", [False, True])
def test_open_dataset_group(tmp_path, consolidated):
    path = tmp_path / "tree.zarr"
    climate_tree().to_zarr(path, zarr_format=3, consolidated=consolidated)
    for group in ("reanalysis", "/models/toy", "models/toy/member1"):
        ref, got = open_both(path, consolidated, group=group)
        assert_same_dataset(ref, got)


def test_implicit_groups_in_datatree(tmp_path):
    path = tmp_path / "implicit.zarr"
    climate_tree().to_zarr(path, zarr_format=3, consolidated=False)
    os.remove(path / "models" / "zarr.json")  # "models" becomes an implicit group
    tree = xr.open_datatree(path, engine="zarr3")
    assert "models" in tree.children and tree["models"].attrs == {}
    xr.testing.assert_identical(
        tree["models/toy"].to_dataset(), xr.open_dataset(path, engine="zarr3", group="models/toy")
    )


def test_stray_files_do_not_break_opening(tmp_path):
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=True, consolidated=False)
    (path / "._zarr.json").write_bytes(b"\x00\x05\x16\x07 resource fork")
    (path / "t2m" / "._zarr.json").write_bytes(b"\x00\x05\x16\x07")
    (path / ".DS_Store").write_bytes(b"junk")
    got = xr.open_dataset(path, engine="zarr3")
    assert_same_dataset(xr.open_dataset(path, engine="zarr", consolidated=False), got)
    assert set(xr.open_groups(path, engine="zarr3")) == {"/"}


# ---- inputs -----------------------------------------------------------------------------------
def test_inputs_path_url_store_and_group(tmp_path):
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=False, consolidated=False)
    ref = xr.open_dataset(path, engine="zarr3")
    for target in (str(path), path, path.as_uri(), z3.LocalStore(path), z3.open_group(path, mode="r")):
        got = xr.open_dataset(target, engine="zarr3")
        xr.testing.assert_identical(ref, got)
        got.close()


def test_fsspec_url_with_storage_options(tmp_path):
    import fsspec

    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=True, consolidated=True)
    fs = fsspec.filesystem("memory")
    fs.put(str(path), "/xr-backend-test/c.zarr", recursive=True)
    try:
        got = xr.open_dataset(
            "memory://xr-backend-test/c.zarr", engine="zarr3", storage_options={"skip_instance_cache": True}
        )
        xr.testing.assert_identical(xr.open_dataset(path, engine="zarr3"), got)
    finally:
        fs.rm("/xr-backend-test", recursive=True)


def test_entrypoint_registered_and_guess_can_open(tmp_path):
    assert "zarr3" in xr.backends.list_engines()
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=False, consolidated=False)
    ep = Zarr3BackendEntrypoint()
    assert ep.guess_can_open(path) and ep.guess_can_open(str(path))
    assert ep.guess_can_open(z3.MemoryStore())
    (tmp_path / "empty").mkdir()
    (tmp_path / "data.nc").write_bytes(b"CDF\x01")
    assert not ep.guess_can_open(tmp_path / "empty")
    assert not ep.guess_can_open(tmp_path / "data.nc")
    assert not ep.guess_can_open(tmp_path / "missing.zarr")


# ---- fill values --------------------------------------------------------------------------------
def _never_written_store(tmp_path) -> pathlib.Path:
    """int16 and float32 arrays whose second chunk was never written (zarr fill values -1, 7.5)."""
    path = tmp_path / "fill.zarr"
    g = z3.create_group(path)
    a = g.create_array(
        "counts", shape=(6,), dtype="int16", chunks=(3,), fill_value=-1, dimension_names=("x",)
    )
    a[:3] = [5, 6, 7]
    b = g.create_array(
        "temp",
        shape=(6,),
        dtype="float32",
        chunks=(3,),
        fill_value=7.5,
        dimension_names=("x",),
        attributes={"_FillValue": "AAAAAAAA+H8="},
    )
    b[:3] = [1.0, np.nan, 3.0]
    return path


def test_zarr_fill_value_is_not_a_mask_by_default(tmp_path):
    path = _never_written_store(tmp_path)
    got = xr.open_dataset(path, engine="zarr3")
    assert got.counts.dtype == np.dtype("int16")  # never turned into floats
    np.testing.assert_array_equal(got.counts.values, [5, 6, 7, -1, -1, -1])
    assert same_value(got.counts.encoding["fill_value"], np.int16(-1))
    assert "_FillValue" not in got.counts.attrs and "_FillValue" not in got.counts.encoding
    # a CF _FillValue (base64, as xarray writes it) does mask; zarr's fill value stays data
    np.testing.assert_array_equal(got.temp.values, [1.0, np.nan, 3.0, 7.5, 7.5, 7.5])
    assert math.isnan(got.temp.encoding["_FillValue"])
    ref = xr.open_dataset(path, engine="zarr", consolidated=False)
    assert_same_dataset(ref, got)


def test_use_zarr_fill_value_as_mask_really_masks(tmp_path):
    path = _never_written_store(tmp_path)
    got = xr.open_dataset(path, engine="zarr3", use_zarr_fill_value_as_mask=True)
    np.testing.assert_array_equal(got.counts.values, [5, 6, 7, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(got.temp.values, [1.0, np.nan, 3.0, np.nan, np.nan, np.nan])
    assert "fill_value" not in got.counts.encoding
    # oracle: xarray's own store with the flag (its open_dataset drops the flag)
    zstore = xr.backends.ZarrStore.open_group(
        str(path), mode="r", consolidated=False, use_zarr_fill_value_as_mask=True
    )
    xr.testing.assert_identical(xr.open_dataset(zstore), got)


def b64(x: float) -> str:
    return base64.standard_b64encode(struct.pack("<d", x)).decode()


@pytest.mark.parametrize("form", ["base64", "plain", "nan-string"])
def test_cf_fill_value_attribute_forms(tmp_path, form):
    value, expected = {
        "base64": (b64(-9999.0), -9999.0),
        "plain": (-9999.0, -9999.0),
        "nan-string": ("NaN", math.nan),
    }[form]
    path = tmp_path / "forms.zarr"
    a = z3.create_array(
        path,
        "v",
        shape=(4,),
        dtype="float64",
        chunks=(4,),
        fill_value=0.0,
        dimension_names=("x",),
        attributes={"_FillValue": value, "missing_value": b64(-1000.0)},
    )
    a[:] = [1.0, -9999.0, np.nan, -1000.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xr.SerializationWarning)  # "multiple fill values"
        got = xr.open_dataset(path, engine="zarr3")
    expected_values = [1.0, np.nan if form != "nan-string" else -9999.0, np.nan, np.nan]
    np.testing.assert_array_equal(got.v.values, expected_values)
    assert same_value(float(got.v.encoding["_FillValue"]), expected)
    assert got.v.encoding["missing_value"] == -1000.0


def test_bad_fill_value_attribute_names_the_array(tmp_path):
    path = tmp_path / "bad.zarr"
    z3.create_array(
        path,
        "v",
        shape=(2,),
        dtype="float32",
        dimension_names=("x",),
        attributes={"_FillValue": "not base64!"},
    )
    with pytest.raises(MetadataError, match=r"'v'.*_FillValue"):
        xr.open_dataset(path, engine="zarr3")


# ---- dimensions -----------------------------------------------------------------------------------
def test_dimension_fallbacks_and_zero_d(tmp_path):
    path = tmp_path / "dims.zarr"
    g = z3.create_group(path)
    g.create_array("named", shape=(2, 3), dtype="int8", dimension_names=("y", "x"))
    g.create_array("legacy", shape=(2, 3), dtype="int8", attributes={"_ARRAY_DIMENSIONS": ["y", "x"], "a": 1})
    g.create_array(
        "partial",
        shape=(2, 3),
        dtype="int8",
        dimension_names=("y", None),
        attributes={"_ARRAY_DIMENSIONS": ["ignored", "x"]},
    )
    g.create_array("scalar", shape=(), dtype="float64", fill_value=1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing here needs generated names
        ds = xr.open_dataset(path, engine="zarr3")
    assert ds.named.dims == ds.legacy.dims == ds.partial.dims == ("y", "x")
    assert ds.legacy.attrs == {"a": 1}  # _ARRAY_DIMENSIONS is hidden
    assert ds.scalar.dims == () and ds.scalar.values == 1.5


def test_generated_dimension_names_warn_naming_the_array(tmp_path):
    path = tmp_path / "nodims.zarr"
    z3.create_array(path, "anon", shape=(2, 5), dtype="int8")
    z3.create_array(path, "half", shape=(2,), dtype="int8", dimension_names=(None,))
    with pytest.warns(GeneratedDimensionWarning) as record:
        ds = xr.open_dataset(path, engine="zarr3")
    messages = sorted(str(w.message) for w in record)
    assert len(messages) == 2 and "'anon'" in messages[0] and "'half'" in messages[1]
    assert ds.anon.dims == ("dim_0", "dim_1") and ds.half.dims == ("dim_0",)


def test_conflicting_dimension_sizes_name_both_arrays(tmp_path):
    path = tmp_path / "conflict.zarr"
    z3.create_array(path, "a", shape=(3,), dtype="int8", dimension_names=("x",))
    z3.create_array(path, "b", shape=(4,), dtype="int8", dimension_names=("x",))
    with pytest.raises(ShapeError, match=r"'x'.*'a'.*'b'|'x'.*'b'.*'a'"):
        xr.open_dataset(path, engine="zarr3")
    # dropping one of them makes the store usable
    assert xr.open_dataset(path, engine="zarr3", drop_variables=["b"]).sizes == {"x": 3}


def test_bad_array_dimensions_attribute(tmp_path):
    path = tmp_path / "bad.zarr"
    z3.create_array(path, "v", shape=(2, 2), dtype="int8", attributes={"_ARRAY_DIMENSIONS": ["only_one"]})
    with pytest.raises(MetadataError, match=r"'v'.*_ARRAY_DIMENSIONS"):
        xr.open_dataset(path, engine="zarr3")


# ---- errors ----------------------------------------------------------------------------------------
def _corrupt_metadata(path: pathlib.Path, array: str, **changes) -> None:
    doc_path = path / array / "zarr.json"
    doc = json.loads(doc_path.read_text())
    doc.update(changes)
    doc_path.write_text(json.dumps(doc))


def _snapshot(path: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_unknown_codec_names_array_and_codec(tmp_path):
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=False, consolidated=False)
    _corrupt_metadata(
        path,
        "precip",
        codecs=[{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "mystery-squash"}],
    )
    before = _snapshot(path)
    with pytest.raises(UnknownCodecError, match=r"precip.*mystery-squash"):
        xr.open_dataset(path, engine="zarr3")
    assert _snapshot(path) == before  # opening never writes


def test_unknown_data_type_names_array_and_type(tmp_path):
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=False, consolidated=False)
    _corrupt_metadata(path, "n_obs", data_type="int4_packed")
    with pytest.raises(DataTypeError, match=r"n_obs.*int4_packed"):
        xr.open_dataset(path, engine="zarr3")


def test_missing_store_group_and_consolidation_errors(tmp_path):
    with pytest.raises(NodeNotFoundError):
        xr.open_dataset(tmp_path / "nothing.zarr", engine="zarr3")
    assert not (tmp_path / "nothing.zarr").exists()
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=False, consolidated=False)
    with pytest.raises(NodeNotFoundError, match="nope"):
        xr.open_dataset(path, engine="zarr3", group="nope")
    with pytest.raises(GroupNotFoundError, match="t2m"):
        xr.open_dataset(path, engine="zarr3", group="t2m")
    with pytest.raises(MetadataError, match="consolidated"):
        xr.open_dataset(path, engine="zarr3", consolidated=True)
    before = _snapshot(path)
    for mode in ("x", "w", "w-"):  # opening never creates or erases
        with pytest.raises(StoreArgumentError, match=f"mode.*'{mode}'"):
            xr.open_dataset(path, engine="zarr3", mode=mode)
    for bad in (4, "3"):
        with pytest.raises(StoreArgumentError, match=f"zarr_format.*{bad!r}"):
            xr.open_dataset(path, engine="zarr3", zarr_format=bad)
    assert issubclass(StoreArgumentError, ValueError) and issubclass(StoreArgumentError, Zarr3Error)
    assert _snapshot(path) == before
    assert "t2m" in xr.open_dataset(path, engine="zarr3", zarr_format=3)


# ---- Zarr v2 stores: read-only, as xarray's own zarr engine reads them ----------------------------
def _v2_store(tmp_path, consolidated: bool) -> pathlib.Path:
    path = tmp_path / "v2.zarr"
    ds = climate_dataset().drop_vars(["station_code"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=2, consolidated=consolidated)
    # a v2 subgroup too
    xr.Dataset({"x": ("i", np.arange(3))}).to_zarr(path, group="sub", zarr_format=2, consolidated=False)
    return path


@pytest.mark.parametrize("consolidated", [True, False])
def test_zarr_v2_store_reads_as_xarray_zarr_engine_reads_it(tmp_path, consolidated):
    path = _v2_store(tmp_path, consolidated)
    before = _snapshot(path)
    expected = xr.open_dataset(path, engine="zarr", consolidated=consolidated).load()
    assert len(expected.data_vars) == 4
    for kwargs in ({}, {"consolidated": False}, {"mode": "a"}, {"zarr_format": 2}, {"chunks": {}}):
        got = xr.open_dataset(path, engine="zarr3", **kwargs)
        xr.testing.assert_identical(got.load(), expected)
        for name in expected.variables:  # CF decoding and masking as in the zarr engine
            for key in ("_FillValue", "dtype", "units", "calendar"):
                mine, theirs = got[name].encoding.get(key), expected[name].encoding.get(key)
                assert mine == theirs or (pd.isna(mine) and pd.isna(theirs)), (name, key, mine, theirs)
    sub = xr.open_dataset(path, engine="zarr3", group="sub", consolidated=consolidated)
    xr.testing.assert_identical(sub.load(), xr.Dataset({"x": ("i", np.arange(3))}))
    # the root's .zmetadata predates "sub": a consolidated read does not see it, as with "zarr"
    for kwargs in ({}, {"consolidated": False}):
        tree = xr.open_datatree(path, engine="zarr3", **kwargs)
        assert set(tree.children) == set(xr.open_datatree(path, engine="zarr", **kwargs).children)
        assert set(xr.open_groups(path, engine="zarr3", **kwargs)) == set(
            xr.open_groups(path, engine="zarr", **kwargs)
        )
    tree = xr.open_datatree(path, engine="zarr3", consolidated=False)
    xr.testing.assert_identical(tree["sub"].to_dataset(inherit=False).load(), sub)
    xr.testing.assert_identical(tree.to_dataset().load(), expected)
    # reading never writes: mode="a" read above; a mode="r" group refuses writes (typed)
    with pytest.raises(StoreArgumentError, match=r"zarr_format=3.*Zarr v2"):
        xr.open_dataset(path, engine="zarr3", zarr_format=3)
    with pytest.raises(ReadOnlyError, match="read-only"):
        z3.open_group(path, mode="r").create_group("new")
    with pytest.raises(ReadOnlyError, match="read-only"):
        z3.open_group(path, mode="r")["t2m"][0] = 1
    assert _snapshot(path) == before


def test_folder_without_zarr_json_is_not_a_group(tmp_path):
    junk = tmp_path / "junk"
    (junk / "sub" / "deeper").mkdir(parents=True)
    (junk / "notes.txt").write_text("not zarr")
    (junk / "sub" / "deeper" / "data.bin").write_bytes(b"\x00" * 8)
    before = _snapshot(junk)
    with pytest.raises(GroupNotFoundError, match=r"no zarr\.json"):
        xr.open_dataset(junk, engine="zarr3")
    with pytest.raises(GroupNotFoundError, match=r"no zarr\.json"):
        xr.open_datatree(junk, engine="zarr3")
    with pytest.raises(GroupNotFoundError, match=r"no zarr\.json"):
        z3.open_group(junk, mode="r")
    with pytest.raises(NodeExistsError):  # mode "a" would create a group: not over foreign files
        z3.open_group(junk, mode="a")
    assert _snapshot(junk) == before


def test_named_group_must_have_zarr_json(tmp_path):
    """An implicit group (nodes below, no zarr.json) is read below the group named, not as it."""
    path = tmp_path / "tree.zarr"
    climate_tree().to_zarr(path, zarr_format=3, consolidated=False)
    os.remove(path / "zarr.json")
    os.remove(path / "models" / "zarr.json")
    for group in (None, "models"):
        with pytest.raises(GroupNotFoundError, match=r"no zarr\.json"):
            xr.open_dataset(path, engine="zarr3", group=group)
        with pytest.raises(GroupNotFoundError, match=r"no zarr\.json"):
            xr.open_dataset(path, engine="zarr3", group=group, consolidated=False)
    assert z3.open_group(path, mode="r").implicit  # the core still reads implicit groups
    ref = xr.open_dataset(path, engine="zarr", group="reanalysis", consolidated=False)
    assert_same_dataset(ref, xr.open_dataset(path, engine="zarr3", group="reanalysis"))
    tree = xr.open_datatree(path, engine="zarr3", group="models/toy")
    assert set(tree.children) == {"member1"}


# ---- drop_variables ------------------------------------------------------------------------------
@pytest.mark.parametrize("consolidated", [True, False])
def test_dropped_variables_metadata_is_never_parsed(tmp_path, consolidated):
    path = write(climate_dataset(), tmp_path / "c.zarr", sharded=True, consolidated=False)
    _corrupt_metadata(path, "n_obs", data_type="int4_packed")
    t2m = json.loads((path / "t2m" / "zarr.json").read_text())
    t2m["codecs"][0]["configuration"]["codecs"].append({"name": "mystery-squash"})
    (path / "t2m" / "zarr.json").write_text(json.dumps(t2m))
    if consolidated:  # the consolidated copies carry the same faults
        root = json.loads((path / "zarr.json").read_text())
        root["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": {
                p.parent.relative_to(path).as_posix(): json.loads(p.read_text())
                for p in path.glob("*/zarr.json")
            },
        }
        (path / "zarr.json").write_text(json.dumps(root))
    with pytest.raises(DataTypeError, match=r"n_obs.*int4_packed"):
        xr.open_dataset(path, engine="zarr3", drop_variables=["t2m"])
    with pytest.raises(UnknownCodecError, match=r"t2m.*mystery-squash"):
        xr.open_dataset(path, engine="zarr3", drop_variables="n_obs")
    ds = xr.open_dataset(path, engine="zarr3", drop_variables=["t2m", "n_obs"])
    assert "t2m" not in ds and "n_obs" not in ds and ds.precip.shape == (NT, NY, NX)
    tree = xr.open_datatree(path, engine="zarr3", drop_variables=["t2m", "n_obs"])
    assert set(tree.data_vars) == {"precip", "station_t2m"}


# ---- encoding round trip ----------------------------------------------------------------------------
LAYOUT_FIELDS = ("data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs", "dimension_names")


def test_open_modify_write_keeps_the_layout(climate_store, tmp_path):
    path, _, _ = climate_store
    ds = xr.open_dataset(path, engine="zarr3")
    ds.attrs["history"] = "regridded nowhere"
    ds["t2m"].attrs["comment"] = "touched"
    out = tmp_path / "copy.zarr"
    ds.to_zarr(out, zarr_format=3, consolidated=False)  # xarray's writer takes our encoding as is
    for name in ds.variables:
        before = json.loads((path / name / "zarr.json").read_text())
        after = json.loads((out / name / "zarr.json").read_text())
        for field in LAYOUT_FIELDS:
            assert after.get(field) == before.get(field), (name, field)
    back = xr.open_dataset(out, engine="zarr3")
    xr.testing.assert_identical(back, ds)
    assert back.t2m.attrs["comment"] == "touched"
