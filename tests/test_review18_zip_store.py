"""review18: engine="zarr3" on a zarr-python ``ZipStore`` (written by xarray's engine, a common
way to ship a Zarr store as one file) failed with ``StoreError: 'ZipStore' object has no
attribute '_lock'``: zarr-python opens a store (``Store._ensure_open``) before its first request,
and the adapter sent requests to the store unopened. xarray's engine reads the same object."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3

zarr = pytest.importorskip("zarr")
if int(zarr.__version__.split(".")[0]) < 3:
    pytest.skip("needs zarr-python 3 (its ZipStore)", allow_module_level=True)

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.fixture
def zip_path(tmp_path):
    path = str(tmp_path / "data.zarr.zip")
    ds = xr.Dataset({"v": (("x", "y"), np.arange(12.0).reshape(3, 4))}, coords={"x": [1, 2, 3]})
    with zarr.storage.ZipStore(path, mode="w") as store:
        ds.to_zarr(store, mode="w")
    return path


def test_open_dataset_reads_an_unopened_zip_store(zip_path):
    ref = xr.open_dataset(zarr.storage.ZipStore(zip_path, mode="r"), engine="zarr").load()
    back = xr.open_dataset(zarr.storage.ZipStore(zip_path, mode="r"), engine="zarr3").load()
    xr.testing.assert_identical(back, ref)


def test_open_group_reads_an_unopened_zip_store(zip_path):
    g = z3.open_group(zarr.storage.ZipStore(zip_path, mode="r"), mode="r")
    np.testing.assert_array_equal(g["v"][...], np.arange(12.0).reshape(3, 4))
