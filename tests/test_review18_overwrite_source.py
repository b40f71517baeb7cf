"""review18: ``to_zarr(mode="w", compute=False)`` refuses dask data read lazily from the group it
erases when that data was opened with ``engine="zarr3"``, but not when it was opened with
xarray's own engine (``xr.open_zarr``, the most common way to open a store): the commit erased
the group, the returned Delayed then read the erased chunks, and the store was left all NaN
without an error. (With ``compute=True`` the data is staged before the erase and survives.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentError

zarr = pytest.importorskip("zarr")
if int(zarr.__version__.split(".")[0]) < 3:
    pytest.skip("needs zarr-python 3 behind xarray's engine", allow_module_level=True)

warnings.filterwarnings("ignore", category=FutureWarning)

VALUES = np.arange(8.0)


@pytest.fixture
def path(tmp_path):
    out = str(tmp_path / "data.zarr")
    z3.to_zarr(xr.Dataset({"v": ("x", VALUES)}).chunk(4), out, mode="w")
    return out


def test_deferred_overwrite_of_the_group_xarrays_engine_read_is_refused(path):
    source = xr.open_zarr(path)  # xarray's engine, dask
    with pytest.raises(ArgumentError, match="mode='w' erases"):
        delayed = z3.to_zarr(source.assign_attrs(title="t"), path, mode="w", compute=False)
        delayed.compute()
    back = xr.open_dataset(path, engine="zarr3").load()
    np.testing.assert_array_equal(back.v.values, VALUES)


def test_xarrays_engine_source_elsewhere_is_still_written(path, tmp_path):
    source = xr.open_zarr(path)
    other = str(tmp_path / "other.zarr")
    z3.to_zarr(source, other, mode="w", compute=False).compute()
    np.testing.assert_array_equal(xr.open_dataset(other, engine="zarr3").v.values, VALUES)
