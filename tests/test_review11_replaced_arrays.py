"""A write into an array that another writer replaced, before the commit, by one of the same
shape with another layout (data type, chunks): an append, a resize or a ``to_zarr(mode="a")``
overwrite of the whole array (whose claim checked the shape alone), and a region write (which
checked nothing), committed units encoded for the old layout under the new document, and
reading the array failed or gave wrong values. Now the commit checks the array's document too
and ``to_zarr`` is planned again over the new array (what running the two one after the other
gives); an ``Array`` write through a handle of the old array is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from store_doubles import CommitHookedStore, SnapshotOnSetStore

import zarr3_backend as z3
from zarr3_backend.core import commit
from zarr3_backend.errors import InterruptedWriteError, ShapeMovedError


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


class _StagingHookedStore(z3.MemoryStore):
    """Runs ``hook["run"]`` once, right after the first value a transaction stages: another
    writer committing while this one's values are being staged (long before its manifest)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hook: dict = {"run": None}

    def _after(self, keys) -> None:
        run = self.hook["run"]
        if run is not None and any("/data/" in k for k in keys):
            self.hook["run"] = None
            run()

    def set(self, key, value):
        super().set(key, value)
        self._after([key])

    def set_many(self, items):
        super().set_many(items)
        self._after(list(items))


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_region_write_planned_before_a_replacement_is_made_again_over_it(zarr_format):
    store = _StagingHookedStore()
    old = xr.Dataset({"y": (("x",), np.arange(8.0))})
    z3.to_zarr(old, store, mode="w", encoding={"y": {"chunks": (2,)}}, zarr_format=zarr_format)
    replacement = xr.Dataset({"y": (("x",), np.arange(8, dtype="f4"))})
    store.hook["run"] = lambda: z3.to_zarr(
        replacement, store, mode="w", encoding={"y": {"chunks": (4,)}}, zarr_format=zarr_format
    )
    z3.to_zarr(xr.Dataset({"y": (("x",), np.arange(4.0) + 100)}), store, region={"x": slice(0, 4)})
    assert store.hook["run"] is None
    got = z3.open_array(store, "y")
    assert (got.dtype, got.chunks) == (np.dtype("f4"), (4,))
    np.testing.assert_array_equal(got[...], [100, 101, 102, 103, 4, 5, 6, 7])
    assert not list(store.list_prefix(".z3-txn/"))  # the refused try left nothing staged


def test_an_array_write_through_a_handle_of_a_replaced_array_is_refused():
    store = _StagingHookedStore()
    z3.create_array(store, "a", shape=(8,), dtype="f8", chunks=(2,), fill_value=0)[...] = 1
    stale = z3.open_array(store, "a", mode="r+")

    def replace() -> None:
        z3.create_array(store, "a", shape=(8,), dtype="i2", chunks=(4,), fill_value=0, overwrite=True)[
            ...
        ] = 5

    store.hook["run"] = replace
    with pytest.raises(ShapeMovedError, match="replaced the array"):
        stale[0:6] = 9.0
    np.testing.assert_array_equal(z3.open_array(store, "a")[...], [5] * 8)
    assert not list(store.list_prefix(".z3-txn/"))


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
