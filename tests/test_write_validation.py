"""to_zarr(mode="w") validates every variable before it erases anything: a failing write leaves
the old store byte for byte as it was, and it opens identically afterwards."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import (
    ArgumentError,
    ArgumentTypeError,
    EncodedRangeError,
    MetadataError,
    UnknownCodecError,
    Zarr3Error,
)


def _old() -> xr.Dataset:
    return xr.Dataset(
        {"t": (("time", "x"), np.arange(12.0).reshape(3, 4), {"units": "K"})},
        coords={"time": pd.date_range("2000-01-01", periods=3), "x": np.arange(4)},
        attrs={"title": "old"},
    )


def _files(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _with(**variables) -> xr.Dataset:
    return _old().assign(**variables)


BAD_INPUTS = {
    "dataset attribute": (lambda: _old().assign_attrs(bad=object()), {}, ArgumentTypeError),
    "variable attribute": (lambda: _with(t=_old().t.assign_attrs(bad={1, 2})), {}, ArgumentTypeError),
    "variable name with a slash": (lambda: _old().rename({"t": "a/b"}), {}, ArgumentError),
    "variable name '..'": (lambda: _old().rename({"t": ".."}), {}, ArgumentError),
    "mixed object dtype": (
        lambda: _with(o=("x", np.array([1, "a", 2.0, None], dtype=object))),
        {},
        ArgumentError,
    ),
    "timezone-aware times": (
        lambda: _with(z=("x", pd.date_range("2000", periods=4, tz="UTC"))),
        {},
        ArgumentTypeError,
    ),
    "integer overflow of the encoded dtype": (
        lambda: _with(i=("x", np.array([0.0, 1.0, 2.0, 1e6]))),
        {"i": {"dtype": "int8"}},
        EncodedRangeError,
    ),
    "unknown encoding key": (_old, {"t": {"foo": 1}}, ArgumentError),
    "encoding for a missing variable": (_old, {"nope": {"chunks": 1}}, ArgumentError),
    "chunks that are not ints": (_old, {"t": {"chunks": "abc"}}, ArgumentTypeError),
    "unknown codec": (_old, {"t": {"compressors": [{"name": "nope"}]}}, UnknownCodecError),
    "fill_value the dtype cannot hold": (_old, {"t": {"fill_value": "zz"}}, MetadataError),
    "shards that the chunks do not divide": (_old, {"t": {"chunks": (2, 3), "shards": (2, 4)}}, Zarr3Error),
    "0-d object variable of mixed content": (
        lambda: _with(s=((), np.array({"a": 1}, dtype=object))),
        {},
        Zarr3Error,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_failing_mode_w_leaves_the_old_store_as_it_was(tmp_path, case):
    make, encoding, error = BAD_INPUTS[case]
    path = tmp_path / "s.zarr"
    z3.to_zarr(_old(), path, mode="w")
    before = _files(path)
    expected = xr.open_dataset(path, engine="zarr3").load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = make()
    with pytest.raises(error):
        z3.to_zarr(bad, path, mode="w", encoding=encoding)
    assert _files(path) == before
    after = xr.open_dataset(path, engine="zarr3").load()
    xr.testing.assert_identical(after, expected)


def test_failing_mode_w_leaves_a_nested_group_and_its_siblings(tmp_path):
    path = tmp_path / "s.zarr"
    z3.to_zarr(_old(), path, mode="w", group="a")
    z3.to_zarr(_old(), path, mode="w", group="b")
    before = _files(path)
    with pytest.raises(ArgumentError):
        z3.to_zarr(_old().rename({"t": "x/y"}), path, mode="w", group="a")
    assert _files(path) == before


def test_a_bad_or_mismatched_zarr_format_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "s.zarr"
    z3.to_zarr(_old(), path, mode="w")
    before = _files(path)
    with pytest.raises(ArgumentError, match="zarr_format"):
        z3.to_zarr(_old(), path, mode="w", zarr_format=4)
    with pytest.raises(ArgumentError, match=r"zarr_format=2 was given, but group '/' .* is Zarr v3"):
        z3.to_zarr(_old(), path, mode="a", zarr_format=2)
    assert _files(path) == before


@pytest.mark.parametrize("engine", ["zarr3", "zarr"])
def test_zero_dimensional_string_coordinate_round_trips(tmp_path, engine):
    # what ds.sel(expver="0001") leaves: a 0-d string coordinate
    ds = xr.Dataset(
        {"v": ("expver", np.array([1.5, 2.5]))}, coords={"expver": np.array(["0001", "0005"])}
    ).sel(expver="0001")
    path = tmp_path / "s.zarr"
    z3.to_zarr(ds, path, mode="w")
    back = xr.open_dataset(path, engine=engine).load()
    assert back["expver"].ndim == 0
    assert str(back["expver"].values) == "0001"
    assert back["v"].item() == 1.5
    assert "expver" in back.coords


ZERO_D = {
    "string": np.array("0001"),
    "unicode string": np.array("ÄÖü"),
    "bytes": np.array(b"ab"),
    "float": np.array(1.5),
    "float nan": np.array(np.nan),
    "int": np.array(-7, dtype="int16"),
    "datetime": np.array(np.datetime64("2000-01-02T03:04:05", "ns")),
    "timedelta": np.array(np.timedelta64(90, "s")),
    "bool": np.array(True),
    "complex": np.array(1 + 2j),
}


@pytest.mark.parametrize("engine", ["zarr3", "zarr"])
@pytest.mark.parametrize("kind", sorted(ZERO_D))
def test_zero_dimensional_variables_of_every_kind_round_trip(tmp_path, kind, engine):
    value = ZERO_D[kind]
    ds = xr.Dataset({"v": ((), value), "data": ("x", [1.0, 2.0])}, coords={"c": ((), value)})
    path = tmp_path / "z.zarr"
    z3.to_zarr(ds, path, mode="w")
    back = xr.open_dataset(path, engine=engine).load()
    for name in ("v", "c"):
        assert back[name].ndim == 0
        text = {"U", "T"}
        assert back[name].dtype.kind == value.dtype.kind or {back[name].dtype.kind, value.dtype.kind} <= text
        if value.dtype.kind == "f" and np.isnan(value):
            assert np.isnan(back[name].values)
        else:
            assert back[name].values[()] == value[()], (name, back[name].values)
    assert "c" in back.coords
