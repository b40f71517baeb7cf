"""``del group[name]`` in a store with consolidated metadata rebuilds the root's members table
(as zarr-python's ``Group.__delitem__`` does): a consolidated open no longer lists the deleted
node, which before read back as all fill values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3


def _root_members(path) -> set[str]:
    doc = json.loads((path / "zarr.json").read_text())
    return set(doc["consolidated_metadata"]["metadata"])


@pytest.fixture
def consolidated_store(tmp_path):
    path = tmp_path / "s.zarr"
    ds = xr.Dataset({"a": ("x", np.arange(4.0)), "b": ("x", np.ones(4))})
    z3.to_zarr(ds, path, consolidated=True)
    sub = z3.open_group(path, mode="a").create_group("sub")
    sub.create_array("c", shape=(2,), dtype="i4")
    z3.to_zarr(xr.Dataset({"d": ("y", np.zeros(3))}), path, group="sub", mode="a", consolidated=True)
    assert {"a", "b", "sub", "sub/c", "sub/d"} <= _root_members(path)
    return path


def test_deleted_array_leaves_the_consolidated_table(consolidated_store):
    group = z3.open_group(consolidated_store, mode="a")
    del group["a"]
    assert "a" not in _root_members(consolidated_store)
    assert sorted(z3.open_group(consolidated_store, mode="r").members(max_depth=None)) == [
        "b",
        "sub",
        "sub/c",
        "sub/d",
    ]
    ds = xr.open_dataset(consolidated_store, engine="zarr3")
    assert list(ds.data_vars) == ["b"]
    np.testing.assert_array_equal(ds["b"].values, np.ones(4))


def test_deleting_a_group_drops_everything_below_it(consolidated_store):
    del z3.open_group(consolidated_store, mode="a")["sub"]
    assert _root_members(consolidated_store) == {"a", "b"}
    with pytest.raises(z3.errors.NodeNotFoundError):
        xr.open_dataset(consolidated_store, engine="zarr3", group="sub")


def test_deleting_a_nested_member_through_its_path(consolidated_store):
    del z3.open_group(consolidated_store, mode="a")["sub/c"]
    assert "sub/c" not in _root_members(consolidated_store)
    assert "sub/d" in _root_members(consolidated_store)
    assert sorted(z3.open_group(consolidated_store, mode="r")["sub"].members()) == ["d"]


def test_an_unconsolidated_store_stays_unconsolidated(tmp_path):
    path = tmp_path / "s.zarr"
    z3.to_zarr(xr.Dataset({"a": ("x", np.arange(4.0)), "b": ("x", np.ones(4))}), path, consolidated=False)
    del z3.open_group(path, mode="a")["a"]
    assert "consolidated_metadata" not in json.loads((path / "zarr.json").read_text()) or (
        json.loads((path / "zarr.json").read_text())["consolidated_metadata"] is None
    )
    assert sorted(z3.open_group(path, mode="r").members()) == ["b"]
