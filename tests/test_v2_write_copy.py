"""``zarr3 copy --zarr-format 2``: v3 to v2 and back, read by zarr-python and xarray's engine."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import zarr3_backend as z3
from zarr3_backend.cli import main

zarr = pytest.importorskip("zarr")
pytestmark = pytest.mark.interop


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_copy_v3_to_v2_and_back(tmp_path):
    src = tmp_path / "src.zarr"
    ds = xr.Dataset(
        {
            "t": (("y", "x"), np.arange(60, dtype="f4").reshape(6, 10), {"units": "K"}),
            "s": (("y",), np.array(["a", "bb", "c", "dd", "e", "ff"], dtype=object)),
        },
        coords={"y": np.arange(6), "x": np.arange(10.0)},
        attrs={"title": "source"},
    )
    ds["t"][0, 0] = np.nan
    z3.to_zarr(ds, src, encoding={"t": {"chunks": (2, 5), "shards": (6, 10)}})
    v2 = tmp_path / "v2.zarr"
    result = run("copy", src, v2, "--zarr-format", "2", "--json")
    assert result.exit_code == 0, result.output
    assert not list(v2.rglob("zarr.json")) and (v2 / ".zgroup").exists()
    zarray = json.loads((v2 / "t" / ".zarray").read_text())
    assert zarray["chunks"] == [2, 5] and zarray["fill_value"] == "NaN"  # the inner chunks
    # xarray's v2 meaning: the CF _FillValue is the fill_value, not an attribute
    assert json.loads((v2 / "t" / ".zattrs").read_text()) == {"units": "K", "_ARRAY_DIMENSIONS": ["y", "x"]}
    assert json.loads((v2 / "y" / ".zarray").read_text())["fill_value"] is None  # no mask on ints
    np.testing.assert_array_equal(zarr.open_array(v2 / "t", mode="r", zarr_format=2)[...], ds["t"].values)
    z3.consolidate_metadata(v2)
    xr.testing.assert_identical(xr.open_dataset(v2, engine="zarr", consolidated=True).load(), ds)
    # and back: v2 -> v3 -> v2 keeps the values and the .zarray
    back = tmp_path / "back.zarr"
    assert run("copy", v2, back).exit_code == 0
    assert (back / "zarr.json").exists()
    again = tmp_path / "again.zarr"
    assert run("copy", back, again, "--zarr-format", "2").exit_code == 0
    for name in ("t", "s", "y", "x"):
        a, b = (json.loads((p / name / ".zarray").read_text()) for p in (v2, again))
        assert a == b, name
    xr.testing.assert_identical(xr.open_dataset(again, engine="zarr3").load(), ds)


def test_copy_f_order_v2_source_stays_f_order(tmp_path):
    src = tmp_path / "f.zarr"
    values = np.arange(24, dtype=">i4").reshape(4, 6)
    zarr.create_array(src, shape=(4, 6), chunks=(3, 4), dtype=">i4", order="F", zarr_format=2, fill_value=0)[
        ...
    ] = values
    dst = tmp_path / "g.zarr"
    assert run("copy", src, dst, "--zarr-format", "2").exit_code == 0
    want = json.loads((src / ".zarray").read_text())
    assert json.loads((dst / ".zarray").read_text()) == want
    np.testing.assert_array_equal(zarr.open_array(dst, mode="r", zarr_format=2)[...], values)


def test_copy_to_v2_refuses_what_v2_cannot_hold(tmp_path):
    src = tmp_path / "s.zarr"
    z3.create_array(src, shape=(8,), chunks=(2,), dtype="i4", compressors=["crc32c"])[...] = np.arange(8)
    result = run("copy", src, tmp_path / "d.zarr", "--zarr-format", "2")
    assert result.exit_code != 0 and "crc32c" in result.output + str(result.exception)
    result = run("copy", src, tmp_path / "d.zarr", "--zarr-format", "2", "--shards", "4")
    assert result.exit_code != 0 and "--shards" in result.output + str(result.exception)
    assert not (tmp_path / "d.zarr" / ".zarray").exists()
