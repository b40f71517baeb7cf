"""xarray over rectilinear arrays (zarr-python 3.4's fixtures): dask chunks on the grid, every
kind of indexing, and the encoding in the form xarray's zarr engine gives."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentTypeError

FIXTURES = Path(__file__).parent / "fixtures" / "zarr34"
STORE = FIXTURES / "store"
NAMES = ["rectilinear_2d", "rectilinear_rle", "rectilinear_sharded"]


def _open(name: str, **kwargs) -> xr.Dataset:
    """The fixture store holds arrays of clashing sizes: open one variable."""
    others = [n for n in z3.open_group(STORE, mode="r").members() if n != name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fixtures have no dimension names
        return xr.open_dataset(STORE, engine="zarr3", drop_variables=others, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_dask_chunks_follow_the_rectilinear_grid(name: str) -> None:
    array = z3.open_array(STORE, path=name, mode="r")
    expected = np.load(FIXTURES / f"{name}.npy")
    var = _open(name, chunks={})[name]
    assert var.chunks == array.metadata.chunk_grid.axis_chunks(array.shape)  # one task per stored object
    np.testing.assert_array_equal(var.values, expected)


def test_the_encoding_of_a_rectilinear_array_is_what_xarrays_engine_gives() -> None:
    two_d = _open("rectilinear_2d")["rectilinear_2d"].encoding
    assert two_d["chunks"] == ((2, 3, 5), 4)  # an int where the axis is regular
    assert two_d["preferred_chunks"] == {"dim_0": (2, 3, 5), "dim_1": 4}
    assert two_d["shards"] is None
    sharded = _open("rectilinear_sharded")["rectilinear_sharded"].encoding
    assert sharded["chunks"] == (2, 2)  # the inner chunk
    assert sharded["shards"] == ((4, 8), 4)
    assert sharded["preferred_chunks"] == {"dim_0": (4, 8), "dim_1": 4}


@pytest.mark.parametrize("name", ["rectilinear_2d", "rectilinear_sharded"])
def test_every_kind_of_indexing_reads_a_rectilinear_array(name: str) -> None:
    expected = np.load(FIXTURES / f"{name}.npy")
    var = _open(name)[name]
    x, y = var.dims
    np.testing.assert_array_equal(var[1:9:3, 1].values, expected[1:9:3, 1])  # basic
    np.testing.assert_array_equal(
        var[[9, 0, 3, 3], [2, 0]].values, expected[[9, 0, 3, 3]][:, [2, 0]]
    )  # outer
    points = var.isel({x: xr.DataArray([0, 9, 4], dims="p"), y: xr.DataArray([1, 0, 2], dims="p")})
    np.testing.assert_array_equal(points.values, expected[[0, 9, 4], [1, 0, 2]])  # vectorized
    lazy = _open(name, chunks={})[name]
    np.testing.assert_array_equal(lazy[[9, 0, 3], 1:].values, expected[[9, 0, 3], 1:])


def test_writing_a_rectilinear_encoding_is_refused_naming_the_variable(tmp_path) -> None:
    ds = _open("rectilinear_2d").load()
    with pytest.raises(ArgumentTypeError, match=r"encoding\['chunks'\].*'rectilinear_2d' is a rectilinear"):
        z3.to_zarr(ds, tmp_path / "o.zarr", mode="w")
    del ds["rectilinear_2d"].encoding["chunks"]  # the way out the message gives
    z3.to_zarr(ds, tmp_path / "o.zarr", mode="w")
    back = xr.open_dataset(tmp_path / "o.zarr", engine="zarr3")
    np.testing.assert_array_equal(back["rectilinear_2d"].values, np.load(FIXTURES / "rectilinear_2d.npy"))
