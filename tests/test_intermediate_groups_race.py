"""A write that creates groups that did not exist when it was planned (``to_zarr(group=
"a/b")`` with ``a`` missing, ``mode="a"`` into a new group) finds at commit whether another
writer stored a node at one of those paths meanwhile: it is planned again over what is stored,
instead of writing an empty group document over that writer's array or group."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from sample_data import small_dataset, stored_values
from store_doubles import CommitHookedStore

import zarr3_backend as z3
from zarr3_backend.errors import NodeExistsError


def _hooked(hook) -> CommitHookedStore:
    store = CommitHookedStore()
    store.hook = hook
    return store


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_array_stored_at_a_missing_parent_is_not_replaced(zarr_format):
    other = xr.Dataset({"v": ("x", np.arange(3.0))})

    def add_array_at_parent():  # another writer stores an array at "a" meanwhile
        z3.to_zarr(xr.Dataset({"a": ("x", np.arange(3.0))}), store, mode="a", zarr_format=zarr_format)

    store = _hooked(add_array_at_parent)
    with pytest.raises(NodeExistsError, match="'a'"):
        z3.to_zarr(other, store, group="a/b", mode="a", zarr_format=zarr_format)
    # the other writer's array is intact, and nothing of the refused write is stored
    np.testing.assert_array_equal(xr.open_dataset(store, engine="zarr3")["a"].values, np.arange(3.0))
    assert not [k for k in store.list() if k.startswith("a/b")]


def test_a_group_created_at_a_missing_parent_keeps_its_attributes():
    def create_parent():
        z3.to_zarr(xr.Dataset(attrs={"title": "theirs"}), store, group="a", mode="a")

    store = _hooked(create_parent)
    z3.to_zarr(small_dataset(v=[1, 2]), store, group="a/b", mode="a")
    assert z3.open_group(store, path="a", mode="r").attrs["title"] == "theirs"
    assert stored_values(store, "a/b") == {"v": [1.0, 2.0]}


def test_two_writers_creating_one_group_end_as_if_one_ran_after_the_other():
    """The second is planned again over the group the first created: both variables stay, and
    the group's attributes are the second's (mode="a" sets them, as xarray's engine does)."""
    first = xr.Dataset({"u": ("x", np.arange(4.0))}, attrs={"title": "first"})
    second = xr.Dataset({"w": ("x", np.ones(4))}, attrs={"source": "second"})

    store = _hooked(lambda: z3.to_zarr(first, store, group="g", mode="a"))
    z3.to_zarr(second, store, group="g", mode="a")
    ds = xr.open_dataset(store, engine="zarr3", group="g")
    np.testing.assert_array_equal(ds["u"].values, np.arange(4.0))
    np.testing.assert_array_equal(ds["w"].values, np.ones(4))
    assert ds.attrs == {"source": "second"}


def test_a_root_group_opens_for_writing_beside_another_writers_staged_values():
    """An empty store whose only keys are another writer's staged values (``.z3-txn/``) holds no
    node: ``open_group(mode="a")`` creates the root (it raised NodeExistsError)."""
    store = CommitHookedStore()
    opened = []
    store.hook = lambda: opened.append(z3.open_group(store, mode="a", attributes={"by": "other"}))
    z3.to_zarr(small_dataset(v=[1, 2]), store, group="g", mode="a")
    assert opened[0].attrs["by"] == "other"
    assert stored_values(store, "g") == {"v": [1.0, 2.0]}
