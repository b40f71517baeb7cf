"""``to_zarr`` whose group another writer erases right after its commit returns (the write
succeeded) instead of raising GroupNotFoundError from the fresh open of the group it returned."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from store_doubles import ErasedAfterCommit

import zarr3_backend as z3
from zarr3_backend.core.group import Group
from zarr3_backend.core.txn_records import dump_doc, new_txn_id, parse_doc, txn_prefix, with_markers
from zarr3_backend.stores import MemoryStore


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize("mode", ["w", "a"])
def test_a_write_whose_group_is_erased_right_after_its_commit_returns_the_group(mode, zarr_format):
    store = ErasedAfterCommit()
    z3.to_zarr(xr.Dataset({"a": ("t", np.arange(3.0))}), store, group="g", zarr_format=zarr_format)
    store.erase_below = "g/"

    got = z3.to_zarr(
        xr.Dataset({"x": ("t", np.arange(3.0) + 10)}, attrs={"title": "mine"}),
        store,
        group="g",
        mode=mode,
        zarr_format=zarr_format,
    )

    assert store.committed is not None and not list(store.list_prefix("g/"))  # erased after the commit
    assert isinstance(got, Group) and got.path == "g"
    assert dict(got.attrs) == {"title": "mine"}  # the group as this write left it
    written = xr.open_dataset(MemoryStore(store.committed), engine="zarr3", group="g").load()
    np.testing.assert_array_equal(written["x"].values, np.arange(3.0) + 10)  # the data was written
    assert sorted(written.data_vars) == (["x"] if mode == "w" else ["a", "x"])


def test_the_group_is_opened_as_stored_when_nothing_erased_it():
    store = MemoryStore()
    got = z3.to_zarr(xr.Dataset({"x": ("t", np.arange(3.0))}, attrs={"k": 1}), store, group="g")
    assert not got.implicit and dict(got.attrs) == {"k": 1}
    assert list(got.members()) == ["x"]


def test_an_add_leaving_the_group_document_as_stored_returns_an_implicit_group_once_erased():
    store = ErasedAfterCommit()
    z3.to_zarr(xr.Dataset({"a": ("t", np.arange(3.0))}), store, group="g")
    store.erase_below = "g/"
    got = z3.to_zarr(xr.Dataset({"x": ("t", np.arange(3.0))}), store, group="g", mode="a")
    assert store.committed is not None
    assert got.path == "g" and got.implicit and dict(got.attrs) == {}
    assert "g/x/zarr.json" in store.committed


class _MarkedAfterCommit(MemoryStore):
    """Once a write's commit is done, marks ``g``'s document with another, live write's marker
    (its commit window begins): readers of ``g`` wait for it."""

    other = ""

    def erase(self, key):
        super().erase(key)
        if self.other == "" and key.endswith("/manifest.json"):
            self.other = new_txn_id()  # of this process: alive
            self.set(txn_prefix(self.other) + "manifest.json", b"{}")
            doc = parse_doc(self.get("g/zarr.json"), "g/zarr.json")
            self.set("g/zarr.json", dump_doc(with_markers(doc, {self.other: {}})))


def test_a_write_returns_its_group_without_waiting_on_another_writes_commit():
    store = _MarkedAfterCommit(settings={"commit_wait": 0.2})
    got = z3.to_zarr(xr.Dataset({"x": ("t", np.arange(3.0))}, attrs={"k": 1}), store, group="g")
    assert store.other  # g carried the other write's marker when to_zarr opened it to return it
    assert got.path == "g" and dict(got.attrs) == {"k": 1}
