"""Fixed-width text from xarray is stored fixed-width, as xarray's zarr engine stores it, so
either engine can append to a store the other wrote; text that would not fit is refused."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentError


def _text(times: list[int], names: list[str], codes: list[bytes]) -> xr.Dataset:
    return xr.Dataset(
        {
            "name": ("time", np.array(names, dtype="<U5")),
            "code": ("time", np.array(codes, dtype="S3")),
            "note": ("time", np.array([n.upper() for n in names], dtype=object)),
            "value": ("time", np.arange(len(times), dtype="f4")),
        },
        coords={"time": times},
    )


def _meta(root, name: str) -> dict:
    return json.loads((root / name / "zarr.json").read_text())


def _xarray_to_zarr(ds: xr.Dataset, root, **kwargs) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's warnings about unstable v3 data types
        ds.to_zarr(root, zarr_format=3, **kwargs)


def _open_both(root) -> tuple[xr.Dataset, xr.Dataset]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (
            xr.open_dataset(root, engine="zarr3").load(),
            xr.open_dataset(root, engine="zarr").load(),
        )


def test_text_is_stored_as_xarrays_engine_stores_it(tmp_path):
    ds = _text([0, 1], ["ab", "cdefg"], [b"x", b"yz"])
    z3.to_zarr(ds, tmp_path / "ours.zarr", mode="w")
    _xarray_to_zarr(ds, tmp_path / "theirs.zarr", mode="w")
    assert _meta(tmp_path / "ours.zarr", "name")["data_type"] == {
        "name": "fixed_length_utf32",
        "configuration": {"length_bytes": 20},
    }
    assert _meta(tmp_path / "ours.zarr", "code")["data_type"] == {
        "name": "null_terminated_bytes",
        "configuration": {"length_bytes": 3},
    }
    assert _meta(tmp_path / "ours.zarr", "note")["data_type"] == "string"  # object text: vlen
    for name in ("name", "code", "note"):
        ours, theirs = _meta(tmp_path / "ours.zarr", name), _meta(tmp_path / "theirs.zarr", name)
        assert ours["data_type"] == theirs["data_type"], name
        assert ours["fill_value"] == theirs["fill_value"], name
    for root in (tmp_path / "ours.zarr", tmp_path / "theirs.zarr"):
        ours, theirs = _open_both(root)
        xr.testing.assert_identical(ours, theirs)
        assert ours["name"].dtype == np.dtype("<U5") and ours["code"].dtype == np.dtype("S3")
        assert ours["name"].values.tolist() == ["ab", "cdefg"]


def test_a_vlen_serializer_asks_for_variable_length_text(tmp_path):
    ds = _text([0], ["ab"], [b"x"])
    z3.to_zarr(
        ds,
        tmp_path / "v.zarr",
        mode="w",
        encoding={"name": {"serializer": "vlen-utf8"}, "code": {"serializer": "vlen-bytes"}},
    )
    assert _meta(tmp_path / "v.zarr", "name")["data_type"] == "string"
    assert _meta(tmp_path / "v.zarr", "code")["data_type"] == "variable_length_bytes"
    back = xr.open_dataset(tmp_path / "v.zarr", engine="zarr3").load()
    assert back["name"].values.tolist() == ["ab"] and back["code"].values.tolist() == [b"x"]


@pytest.mark.interop
def test_an_xarray_append_into_a_store_we_wrote_with_fixed_width_strings(tmp_path):
    root = tmp_path / "a.zarr"
    first = _text([0, 1], ["ab", "cdefg"], [b"x", b"yz"])
    more = _text([2, 3, 4], ["hij", "k", "lmnop"], [b"abc", b"", b"q"])
    z3.to_zarr(first, root, mode="w")
    _xarray_to_zarr(more, root, append_dim="time")  # "Mismatched dtypes" when text was vlen
    ours, theirs = _open_both(root)
    xr.testing.assert_identical(ours, theirs)
    expected = xr.concat([first, more], dim="time")
    assert ours["name"].values.tolist() == expected["name"].values.tolist()
    assert ours["code"].values.tolist() == expected["code"].values.tolist()
    assert ours["note"].values.tolist() == expected["note"].values.tolist()
    # and ours appends into what xarray wrote
    z3.to_zarr(_text([5], ["rs"], [b"t"]), root, append_dim="time")
    ours, theirs = _open_both(root)
    xr.testing.assert_identical(ours, theirs)
    assert ours["name"].values.tolist()[-2:] == ["lmnop", "rs"]


@pytest.mark.parametrize(
    "longer",
    [
        {"name": ("time", np.array(["abcdefgh"], dtype="<U8"))},  # a wider dtype: xarray refuses it too
        {"name": ("time", np.array(["abcdefgh"], dtype=object))},  # object text: would be truncated
        {"code": ("time", np.array([b"abcd"], dtype=object))},
    ],
)
def test_text_longer_than_the_stored_width_is_refused_naming_the_variable(tmp_path, longer):
    root = tmp_path / "a.zarr"
    z3.to_zarr(_text([0], ["ab"], [b"x"]), root, mode="w")
    before = xr.open_dataset(root, engine="zarr3").load()
    more = _text([1], ["cd"], [b"y"]).assign(longer)
    name = next(iter(longer))
    with pytest.raises(ArgumentError, match=rf"variable '{name}'"):
        z3.to_zarr(more, root, append_dim="time")
    xr.testing.assert_identical(xr.open_dataset(root, engine="zarr3").load(), before)  # nothing written
    with pytest.raises(ArgumentError, match=rf"variable '{name}'"):
        z3.to_zarr(more.drop_vars("time"), root, region={"time": slice(0, 1)})
    xr.testing.assert_identical(xr.open_dataset(root, engine="zarr3").load(), before)


def test_shorter_object_text_fits_a_fixed_width_store(tmp_path):
    root = tmp_path / "a.zarr"
    z3.to_zarr(_text([0], ["abc"], [b"xy"]), root, mode="w")
    more = _text([1], ["d"], [b"z"]).assign(
        name=("time", np.array(["de"], dtype=object)), code=("time", np.array([b"q"], dtype=object))
    )
    z3.to_zarr(more, root, append_dim="time")
    back = xr.open_dataset(root, engine="zarr3").load()
    assert back["name"].dtype == np.dtype("<U5") and back["name"].values.tolist() == ["abc", "de"]
    assert back["code"].values.tolist() == [b"xy", b"q"]
