"""review18: a to_zarr write into a group below the root whose own zarr.json holds inline
consolidated metadata (a store written at ``coll.zarr/2020`` and later addressed as group "2020"
of ``coll.zarr``, or ``consolidate_metadata(store, path="sub")``) left that copy stale: every
reader opening that group (ours, zarr-python, xarray's engine) saw the old shape and members, so
appended steps and added variables were invisible. Zarr v2 ancestors' ``.zmetadata`` are patched
(``refresh_v2_consolidated``); the v3 copies below the root were not."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3

warnings.filterwarnings("ignore", category=FutureWarning)

TIMES = pd.date_range("2000-01-01", periods=8, freq="6h")


def _ds(sl: slice) -> xr.Dataset:
    values = np.arange(8 * 3.0).reshape(8, 3)
    return xr.Dataset({"v": (("time", "x"), values[sl])}, coords={"time": TIMES[sl], "x": [1, 2, 3]})


def test_append_through_the_parent_store_is_seen_by_readers_of_the_group(tmp_path):
    coll = tmp_path / "coll.zarr"
    z3.to_zarr(_ds(slice(0, 4)), str(coll / "2020"), mode="w")  # consolidated: "2020" is its root
    z3.to_zarr(_ds(slice(4, 8)), str(coll), group="2020", append_dim="time")

    back = xr.open_dataset(str(coll / "2020"), engine="zarr3").load()
    assert back.sizes["time"] == 8
    np.testing.assert_array_equal(back.v.values, _ds(slice(0, 8)).v.values)
    assert z3.open_group(str(coll), path="2020", mode="r")["v"].shape == (8, 3)


def test_a_variable_added_to_a_consolidated_subgroup_is_listed_by_its_readers(tmp_path):
    path = str(tmp_path / "s.zarr")
    z3.to_zarr(_ds(slice(0, 8)), path, mode="w", group="sub")
    z3.consolidate_metadata(path, path="sub")
    z3.to_zarr(_ds(slice(0, 8)).rename(v="w"), path, mode="a", group="sub")

    sub = z3.open_group(path, path="sub", mode="r")
    assert sorted(sub.array_keys()) == ["time", "v", "w", "x"]
    back = xr.open_dataset(path + "/sub", engine="zarr3")
    assert "w" in back.data_vars


def test_zarr_python_reads_the_appended_group_whole(tmp_path):
    zarr = pytest.importorskip("zarr")
    if int(zarr.__version__.split(".")[0]) < 3:
        pytest.skip("zarr-python 3 reads Zarr v3")
    coll = tmp_path / "coll.zarr"
    z3.to_zarr(_ds(slice(0, 4)), str(coll / "2020"), mode="w")
    z3.to_zarr(_ds(slice(4, 8)), str(coll), group="2020", append_dim="time")
    assert zarr.open_group(str(coll / "2020"), mode="r")["v"].shape == (8, 3)
