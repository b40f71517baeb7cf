"""review18: ``region="auto"`` that cannot place the dataset in the store raised a bare
``KeyError`` (no ``Zarr3Error``): a coordinate the store does not hold, or values of it that are
not stored. Typed now, still a ``KeyError`` as xarray's engine raises; nothing is written."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import Zarr3Error


@pytest.fixture
def path(tmp_path):
    out = str(tmp_path / "r.zarr")
    z3.to_zarr(xr.Dataset({"v": ("x", np.arange(4.0))}, coords={"x": [10, 20, 30, 40]}), out, mode="w")
    return out


def test_values_not_in_the_stored_coordinate(path):
    part = xr.Dataset({"v": ("x", [1.0, 2.0])}, coords={"x": [20, 99]})
    with pytest.raises(Zarr3Error, match="not all values of coordinate 'x'") as e:
        z3.to_zarr(part, path, region="auto")
    assert isinstance(e.value, KeyError)
    np.testing.assert_array_equal(xr.open_dataset(path, engine="zarr3").v.values, np.arange(4.0))


def test_a_coordinate_the_store_does_not_hold(tmp_path):
    out = str(tmp_path / "n.zarr")
    z3.to_zarr(xr.Dataset({"v": ("x", np.arange(4.0))}), out, mode="w")
    part = xr.Dataset({"v": ("x", [1.0, 2.0])}, coords={"x": [0, 1]})
    with pytest.raises(Zarr3Error, match="needs the coordinate 'x' in the store") as e:
        z3.to_zarr(part, out, region="auto")
    assert isinstance(e.value, KeyError)
