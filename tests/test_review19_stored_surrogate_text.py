"""review19: metadata text with no UTF-8 form (a lone surrogate: what ``os.fsdecode`` makes of a
Latin-1 file name, ``attrs["source"] = "caf\\udce9.nc"``) is valid JSON as an escape, and
zarr-python (xarray's own engine) stores it so. A consolidating commit rewrites every member's
stored document into the root's (or a subgroup's) consolidated copy after the values have moved:
``to_zarr(mode="a")`` of a new variable, or ``del group[name]``, failed there when such text
could not be written (untyped before review17, MetadataError after), leaving the root marked
for good (``repair`` failed the same way). It is now written as zarr-python writes it (JSON
escapes, ``utf8_json``): the commit finishes with the copy whole (no ConsolidationSkippedWarning)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.errors import ConsolidationSkippedWarning

warnings.filterwarnings("ignore", category=FutureWarning)

NAME = "caf\udce9.nc"  # os.fsdecode(b"caf\xe9.nc")


def _store_text_as_zarr_python_does(doc_path, text: str) -> None:
    """Put ``text`` in the node's attributes as zarr-python writes it (ASCII JSON escapes)."""
    doc = json.loads(doc_path.read_text())
    doc["attributes"]["source"] = text
    doc_path.write_text(json.dumps(doc, indent=2))  # ensure_ascii: "caf\\udce9.nc"


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.zarr"
    z3.to_zarr(xr.Dataset({"a": ("t", np.arange(4.0)), "b": ("t", np.ones(4))}), path, mode="w")
    _store_text_as_zarr_python_does(path / "a" / "zarr.json", NAME)
    assert xr.open_dataset(path, engine="zarr3", consolidated=False)["a"].attrs["source"] == NAME
    return path


def _readable(path) -> None:
    ds = xr.open_dataset(path, engine="zarr3", consolidated=False)
    assert ds["a"].attrs["source"] == NAME
    np.testing.assert_array_equal(ds["a"].values, np.arange(4.0))
    assert z3.repair(path) == []  # nothing left to finish


def test_adding_a_variable_beside_stored_surrogate_text_commits(store):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConsolidationSkippedWarning)
        z3.to_zarr(xr.Dataset({"c": ("y", [1.0, 2.0])}), store, mode="a")
    _readable(store)
    assert xr.open_dataset(store, engine="zarr3", consolidated=True)["a"].attrs["source"] == NAME
    np.testing.assert_array_equal(xr.open_dataset(store, engine="zarr3")["c"].values, [1.0, 2.0])


def test_deleting_beside_stored_surrogate_text_commits(store):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConsolidationSkippedWarning)
        del z3.open_group(store, mode="a")["b"]
    _readable(store)
    assert sorted(z3.open_group(store, mode="r").members()) == ["a"]


def test_a_subgroups_copy_beside_stored_surrogate_text(tmp_path):
    path = tmp_path / "s.zarr"
    z3.to_zarr(xr.Dataset({"a": ("t", np.arange(4.0))}), path, mode="w", group="sub")
    z3.consolidate_metadata(path, path="sub")
    _store_text_as_zarr_python_does(path / "sub" / "a" / "zarr.json", NAME)  # set by zarr-python
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConsolidationSkippedWarning)
        z3.to_zarr(xr.Dataset({"c": ("y", [1.0, 2.0])}), path, mode="a", group="sub")
    sub = xr.open_dataset(path, engine="zarr3", group="sub")
    assert sorted(sub.data_vars) == ["a", "c"]
    assert sub["a"].attrs["source"] == NAME
