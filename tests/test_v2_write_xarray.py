"""``to_zarr`` into Zarr v2 stores, against xarray's own engine (zarr-python 3.1.6): appends and
region writes in both directions, the same documents for the same dataset, ``.zmetadata`` equal
to a fresh consolidation after every write, nothing rewritten that the write did not change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from zmetadata_oracle import fresh_zmetadata

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentError, CodecError

zarr = pytest.importorskip("zarr")
pytestmark = pytest.mark.interop


def full_dataset(n: int = 10) -> xr.Dataset:
    rng = np.random.default_rng(0)
    t2m = rng.random((n, 3, 4)).astype("f4")
    t2m[1, 0, 0] = np.nan
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "temperature"}),
            "count": (("time",), np.arange(n, dtype="i4")),
            "flag": (("time", "lat"), rng.random((n, 3)) > 0.5),
            "label": (("time",), np.array([f"d{i}" * (i % 3 + 1) for i in range(n)], dtype=object)),
            "code": (("lat",), np.array(["ab", "c", "def"])),
        },
        coords={
            "time": pd.date_range("2000-01-01", periods=n, freq="D"),
            "lat": [10.0, 20.0, 30.0],
            "lon": np.arange(4, dtype="i8"),
        },
        attrs={"title": "daily", "history": "made by a test"},
    )


ENCODING = {
    "t2m": {"chunks": (2, 3, 2)},
    "count": {"chunks": (2,)},
    "flag": {"chunks": (2, 3)},
    "label": {"chunks": (2,)},
}


def _read(path: Path, engine: str) -> xr.Dataset:
    kwargs = {"consolidated": True} if engine == "zarr" else {}
    with xr.open_dataset(path, engine=engine, **kwargs) as ds:
        return ds.load()


def _assert_consolidated_fresh(path: Path, tmp: Path) -> None:
    assert json.loads((path / ".zmetadata").read_text()) == fresh_zmetadata(path, tmp)


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("lazy", [False, True])
def test_we_append_to_what_xarrays_engine_wrote_as_v2(tmp_path, lazy):
    full = full_dataset()
    path = tmp_path / "a.zarr"
    full.isel(time=slice(0, 6)).to_zarr(path, zarr_format=2, encoding=ENCODING)
    before = _snapshot(path)
    more = full.isel(time=slice(6, 10))
    if lazy:
        more = more.chunk({"time": 2})
    z3.to_zarr(more.drop_vars(["code", "lat", "lon"]), path, mode="a", append_dim="time")
    for engine in ("zarr", "zarr3"):
        xr.testing.assert_identical(_read(path, engine), full)
    _assert_consolidated_fresh(path, tmp_path)
    after = _snapshot(path)
    # nothing became v3; what the append did not change is byte for byte as xarray wrote it
    assert not any(k.endswith("zarr.json") for k in after)
    for key in ("code/.zarray", "code/.zattrs", "lat/.zarray", "lon/0", "t2m/.zattrs", ".zattrs", ".zgroup"):
        assert after[key] == before[key], key
    assert json.loads(after["t2m/.zarray"]) == {**json.loads(before["t2m/.zarray"]), "shape": [10, 3, 4]}


def test_xarrays_engine_appends_to_what_we_wrote_as_v2(tmp_path):
    full = full_dataset()
    path = tmp_path / "b.zarr"
    z3.to_zarr(full.isel(time=slice(0, 6)), path, zarr_format=2, encoding=ENCODING)
    full.isel(time=slice(6, 10)).drop_vars(["code"]).to_zarr(path, mode="a", append_dim="time")
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(_read(path, engine), full)
    _assert_consolidated_fresh(path, tmp_path)


def test_we_write_the_documents_xarrays_engine_writes(tmp_path):
    full = full_dataset(4)
    full.to_zarr(tmp_path / "theirs.zarr", zarr_format=2, encoding=ENCODING)
    z3.to_zarr(full, tmp_path / "ours.zarr", zarr_format=2, encoding=ENCODING)
    theirs, ours = _snapshot(tmp_path / "theirs.zarr"), _snapshot(tmp_path / "ours.zarr")
    assert sorted(theirs) == sorted(ours)  # the same chunk keys too
    for key in theirs:
        if key.rpartition("/")[2].startswith(".z"):
            assert json.loads(ours[key]) == json.loads(theirs[key]), key
    xr.testing.assert_identical(_read(tmp_path / "ours.zarr", "zarr"), full)


@pytest.mark.parametrize("writer", ["zarr3", "zarr"])
def test_region_writes_in_both_directions(tmp_path, writer):
    full = full_dataset()
    path = tmp_path / "r.zarr"
    if writer == "zarr3":  # xarray's engine made the store, we write the region, and back
        full.to_zarr(path, zarr_format=2, encoding=ENCODING)
    else:
        z3.to_zarr(full, path, zarr_format=2, encoding=ENCODING)
    before = _snapshot(path)
    patch = full.isel(time=slice(2, 6)).drop_vars(["code", "lat", "lon"])
    patch = patch.assign(t2m=patch.t2m * 0 - 5.0, count=patch["count"] + 100)
    patch["t2m"].attrs = full["t2m"].attrs
    if writer == "zarr3":
        z3.to_zarr(patch, path, region={"time": slice(2, 6)})
        z3.to_zarr(patch.isel(time=slice(0, 2)), path, region="auto")
    else:
        patch.to_zarr(path, region={"time": slice(2, 6)})
    expected = full.copy(deep=True)
    for name in ("t2m", "count", "flag", "label"):
        expected[name][2:6] = patch[name].values
    for engine in ("zarr3", "zarr"):
        xr.testing.assert_identical(_read(path, engine), expected)
    after = _snapshot(path)
    for key in before:  # a region write changes chunks only
        if key.rpartition("/")[2].startswith(".z"):
            assert after[key] == before[key], key
    _assert_consolidated_fresh(path, tmp_path)


def test_opening_a_v2_store_for_writing_changes_nothing(tmp_path):
    path = tmp_path / "o.zarr"
    full_dataset(4).to_zarr(path, zarr_format=2)
    before = _snapshot(path)
    g = z3.open_group(path, mode="a")
    assert g.zarr_format == 2 and not g.read_only
    assert g["t2m"].zarr_format == 2 and z3.open_array(path, path="t2m", mode="r+").shape == (4, 3, 4)
    xr.open_dataset(path, engine="zarr3").load()
    assert _snapshot(path) == before


def test_new_v2_group_and_datatree(tmp_path):
    path = tmp_path / "t.zarr"
    tree = xr.DataTree.from_dict({"/": full_dataset(3), "/child": xr.Dataset({"v": ("x", [1.5, 2.5])})})
    z3.to_zarr(tree, path, zarr_format=2)
    assert not list(path.rglob("zarr.json")) and (path / "child" / ".zgroup").exists()
    back = xr.open_datatree(path, engine="zarr", consolidated=True)
    xr.testing.assert_identical(back["child"].to_dataset().load(), tree["child"].to_dataset())
    xr.testing.assert_identical(back.to_dataset().load(), full_dataset(3))
    _assert_consolidated_fresh(path, tmp_path)


def test_bad_v2_encodings_are_refused_naming_the_field(tmp_path):
    path = tmp_path / "bad.zarr"
    ds = xr.Dataset({"v": ("x", np.arange(4.0))})
    with pytest.raises(ArgumentError, match=r"\['fill_value'\].*Use `_FillValue`"):
        z3.to_zarr(ds, path, zarr_format=2, encoding={"v": {"fill_value": 1.0}})
    with pytest.raises(CodecError, match="variable 'v': shards"):
        z3.to_zarr(ds, path, zarr_format=2, encoding={"v": {"chunks": (2,), "shards": (4,)}})
    with pytest.raises(CodecError, match="variable 'v': compressors: codec 'crc32c'"):
        z3.to_zarr(ds, path, zarr_format=2, encoding={"v": {"compressors": ["crc32c"]}})
    assert not path.exists()
    ds.to_zarr(path, zarr_format=2)
    with pytest.raises(ArgumentError, match="zarr_format=3 was given"):
        z3.to_zarr(ds, path, mode="a", append_dim="x", zarr_format=3)


def test_a_sharded_v3_dataset_read_back_cannot_be_written_as_v2_and_says_why(tmp_path):
    # the encoding read from a sharded store names its shard index too: refused as sharding is,
    # typed (a TypeError from the v2 metadata builder before)
    ds = xr.Dataset({"t": (("x",), np.arange(8.0))})
    z3.to_zarr(ds, tmp_path / "s.zarr", encoding={"t": {"chunks": (2,), "shards": (4,)}})
    back = xr.open_dataset(tmp_path / "s.zarr", engine="zarr3")
    assert back.t.encoding["shard_index"] is not None
    with pytest.raises(CodecError, match="Zarr v2 has no sharding"):
        z3.to_zarr(back, tmp_path / "v2.zarr", zarr_format=2)
    with pytest.raises(CodecError, match="shard_index: Zarr v2 has no sharding"):
        z3.create_array(
            tmp_path / "a.zarr", shape=(8,), dtype="f8", chunks=(2,), zarr_format=2, shard_index={}
        )
    z3.to_zarr(back.drop_encoding(), tmp_path / "v2.zarr", zarr_format=2)
    xr.testing.assert_identical(xr.open_dataset(tmp_path / "v2.zarr", engine="zarr3").load(), ds)


def test_mode_w_and_deferred_writes_as_v2(tmp_path):
    path = tmp_path / "w.zarr"
    z3.to_zarr(full_dataset(4), path)  # v3 first
    ds = full_dataset(6)
    lazy = ds.chunk({"time": 2})
    delayed = z3.to_zarr(lazy, path, mode="w", zarr_format=2, compute=False, encoding=ENCODING)
    assert not (path / "zarr.json").exists() and (path / "t2m" / ".zarray").exists()
    delayed.compute()
    for engine in ("zarr", "zarr3"):
        xr.testing.assert_identical(_read(path, engine), ds)
    _assert_consolidated_fresh(path, tmp_path)
