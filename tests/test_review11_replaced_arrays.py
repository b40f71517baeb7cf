"""A write that claims an array at the shape it planned from (an append, a resize, a
``to_zarr(mode="a")`` overwrite of the whole array) while another writer replaced the array by
one of the same shape with another layout (data type, chunks) before the commit: the claim
checked the shape alone, so the write committed units encoded for the old layout under the new
document, and reading the array failed or gave wrong values. Now the commit checks the array's
document too and the write is made again over the new array (what running the two one after
the other gives)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from store_doubles import CommitHookedStore, SnapshotOnSetStore

import zarr3_backend as z3
from zarr3_backend.core import commit
from zarr3_backend.errors import InterruptedWriteError


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_to_zarr_overwrite_planned_before_a_replacement_is_made_again_over_it(zarr_format):
    store = CommitHookedStore()
    old = xr.Dataset({"y": (("x",), np.arange(8.0))})
    z3.to_zarr(old, store, mode="w", encoding={"y": {"chunks": (2,)}}, zarr_format=zarr_format)
    replacement = xr.Dataset({"y": (("x",), np.arange(8, dtype="f4") * 3)})
    store.hook = lambda: z3.to_zarr(
        replacement, store, mode="w", encoding={"y": {"chunks": (4,)}}, zarr_format=zarr_format
    )
    z3.to_zarr(xr.Dataset({"y": (("x",), np.arange(8.0) + 100)}), store, mode="a")
    assert store.hook is None  # the replacement ran
    got = z3.open_array(store, "y")
    assert (got.dtype, got.chunks) == (np.dtype("f4"), (4,))
    np.testing.assert_array_equal(got[...], np.arange(8.0) + 100)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_append_planned_before_a_replacement_goes_after_the_new_arrays_rows(zarr_format):
    store = CommitHookedStore()
    a = z3.create_array(
        store, "a", shape=(4,), dtype="f8", chunks=(2,), fill_value=0, zarr_format=zarr_format
    )
    a[...] = 1

    def replace() -> None:
        b = z3.create_array(
            store,
            "a",
            shape=(4,),
            dtype="i2",
            chunks=(3,),
            fill_value=0,
            overwrite=True,
            zarr_format=zarr_format,
        )
        b[...] = 5

    store.hook = replace
    z3.open_array(store, "a", mode="r+").append(np.array([9.0, 9.0]))
    assert store.hook is None
    got = z3.open_array(store, "a")
    assert (got.dtype, got.chunks, got.shape) == (np.dtype("i2"), (3,), (6,))
    np.testing.assert_array_equal(got[...], [5, 5, 5, 5, 9, 9])


@pytest.mark.parametrize(
    "field,value", [("planned", {"a/zarr.json": 5}), ("planned", []), ("hold", [5]), ("hold", "a/zarr.json")]
)
def test_a_manifest_whose_planned_or_held_documents_are_malformed_is_refused_by_name(
    monkeypatch, field, value
):
    """The manifest's new fields are checked as the others are: a malformed one refuses the
    write's repair with InterruptedWriteError naming the field, and nothing is written."""
    store = SnapshotOnSetStore()
    z3.create_array(store, "a", shape=(2,), dtype="i4", chunks=(2,), fill_value=0)[...] = 1
    store.when = lambda key: key.endswith("/manifest.json")
    z3.open_array(store, "a", mode="r+").append(np.array([7, 7], "i4"))
    left = z3.MemoryStore(store.snapshot)
    (txn,) = commit.pending_writes(left)
    key = f".z3-txn/{txn}/manifest.json"
    left.set(key, json.dumps({**json.loads(left.get(key)), field: value}).encode())
    monkeypatch.setattr(commit, "writer_is_dead", lambda t: t == txn)
    with pytest.raises(InterruptedWriteError, match=f"field '{field}' has the wrong form"):
        commit.repair(left)
    np.testing.assert_array_equal(z3.open_array(left, "a")[...], [1, 1])
