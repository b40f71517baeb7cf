"""xarray's own zarr backend tests for ``zarr_format=2``, with our writer.

As ``test_xarray_conformance`` does for v3: ``ZarrBase`` from the installed xarray wheel, with
zarr-python's default format set to 2 (xarray's ``default_zarr_format`` fixture), save =
``zarr3_backend.to_zarr(..., zarr_format=2)`` and open = ``engine="zarr3"``;
``TestZarr3V2ConformanceWriter`` also routes the tests' own ``to_zarr`` calls to our writer
(read back by xarray's engine, through zarr-python 3.1.6). Deselected tests, with reasons, are
in the tables below.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import xarray as xr
from test_xarray_conformance import DESELECTED, DESELECTED_WRITER, _OurWriter

import zarr3_backend as z3

zarr = pytest.importorskip("zarr")

with warnings.catch_warnings():  # the wheel's marks are registered by xarray's repository conftest
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    from xarray.tests.conftest import time_unit, use_dask  # fixtures the tests ask for
    from xarray.tests.test_backends import ZarrBase, create_tmp_file, tmp_store

__all__ = ["time_unit", "tmp_store", "use_dask"]  # imported to register them as fixtures

pytestmark = pytest.mark.interop

#: Tests that cannot pass for reasons outside the v2 writer (each reported to the lead).
DESELECTED_V2: dict[str, str] = {
    **DESELECTED,
    "test_pickle": (
        "reading: a dataset whose v2 arrays use numcodecs codecs (the numcodecs.* adapter classes "
        "are made at import and cannot be pickled by name); not the writer"
    ),
    "test_pickle_dataarray": "as test_pickle",
    "test_zarr_fill_value_setting": (
        "reading: with use_zarr_fill_value_as_mask=False xarray's engine still reports a v2 "
        "fill_value as the _FillValue attribute, engine='zarr3' does not (the written store is "
        "the one xarray's engine writes, checked in test_v2_write_xarray.py)"
    ),
}


@pytest.fixture
def default_zarr_format(request):
    """xarray's fixture for zarr_format=2: honours its ``skip_if_param`` marks and sets
    zarr-python's default format, which the tests read to choose what they expect."""
    for mark in request.node.iter_markers("skip_if_param"):
        if mark.kwargs.get("default_zarr_format") == 2 and mark.kwargs.get("condition", True):
            pytest.skip(mark.kwargs.get("reason", "skipped by xarray for zarr_format=2"))
    with zarr.config.set(default_zarr_format=2):
        yield


class TestZarr3V2Conformance(ZarrBase):
    """xarray's zarr backend tests, written as Zarr v2 by us and read by our engine."""

    @contextlib.contextmanager
    def create_zarr_target(self):
        with create_tmp_file(suffix=".zarr") as tmp:
            yield tmp

    def save(self, dataset, store_target, **kwargs):
        kwargs.setdefault("zarr_format", 2)
        return z3.to_zarr(dataset, store_target, **kwargs)

    @contextlib.contextmanager
    def open(self, path, **kwargs):
        with xr.open_dataset(path, engine="zarr3", mode="r", **kwargs) as ds:
            yield ds


class _OurV2Writer(_OurWriter):
    """The tests' own ``to_zarr`` calls, written by us as v2 (zarr-python's default format)."""

    @pytest.fixture(autouse=True)
    def _our_writer(self, monkeypatch):
        def to_zarr(obj, store=None, chunk_store=None, mode=None, synchronizer=None, group=None, **kwargs):
            assert chunk_store is None and synchronizer is None, "not arguments of our writer"
            kwargs.pop("zarr_version", None)
            if kwargs.get("zarr_format") is None and mode not in ("a", "a-", "r+"):
                kwargs["zarr_format"] = 2  # what xarray's engine writes under this default
            return z3.to_zarr(obj, store, mode=mode, group=group, **kwargs)

        monkeypatch.setattr(xr.Dataset, "to_zarr", to_zarr)
        monkeypatch.setattr(xr.DataArray, "to_zarr", to_zarr)


@pytest.mark.slow
class TestZarr3V2ConformanceWriter(_OurV2Writer, TestZarr3V2Conformance):
    """The same tests, their own ``to_zarr`` calls written by us (read back by xarray's engine)."""


for _name in DESELECTED_V2:
    setattr(TestZarr3V2Conformance, _name, None)
for _name in {**DESELECTED_V2, **DESELECTED_WRITER}:
    setattr(TestZarr3V2ConformanceWriter, _name, None)
