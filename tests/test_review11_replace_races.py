"""``to_zarr(mode="w")`` of a group racing a ``mode="a"`` write into it that adds a variable or
appends to one: the mode="w" commit erased what was under the group, taking no claim, while the
other commit had moved its values but not yet written its documents, so the added variable was
left stored with no values (all fill), or the appended array brought back over erased rows. Now
a commit that erases a group holds the claims of the nodes stored under it, and one that adds a
node to a group holds the group's: the two commit one after the other."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from store_doubles import CommitHookedStore, PausedAfterMove

import zarr3_backend as z3
from zarr3_backend.errors import ArrayNotFoundError


def _dataset(**variables) -> xr.Dataset:
    return xr.Dataset({name: ("t", np.asarray(values, dtype="f8")) for name, values in variables.items()})


def _replace_with(store, ds: xr.Dataset) -> None:
    z3.to_zarr(ds, store, mode="w", consolidated=False)


def _stored(store) -> dict[str, list[float]]:
    got = xr.open_dataset(store, engine="zarr3", consolidated=False).load()
    return {name: got[name].values.tolist() for name in sorted(got.data_vars)}


def test_a_variable_added_while_its_group_is_replaced_is_whole_or_gone():
    store = PausedAfterMove()
    _replace_with(store, _dataset(a=[1, 2, 3, 4]))
    replacement = _dataset(b=[5, 6, 7, 8])
    store.race["other"] = lambda: _replace_with(store, replacement)
    z3.to_zarr(_dataset(x=[10, 11, 12, 13]), store, mode="a", consolidated=False)
    store.race["thread"].join(60)
    # the replacement last: b alone; the addition last: b and x (x whole, never fill)
    assert _stored(store) in (
        {"b": [5, 6, 7, 8]},
        {"b": [5, 6, 7, 8], "x": [10, 11, 12, 13]},
    )


def test_an_append_while_its_group_is_replaced_is_whole_or_gone():
    store = PausedAfterMove()
    _replace_with(store, _dataset(a=[1, 2, 3, 4]))
    replacement = _dataset(a=[5, 6, 7, 8])
    store.race["other"] = lambda: _replace_with(store, replacement)
    z3.to_zarr(_dataset(a=[9, 9]), store, append_dim="t", consolidated=False)
    store.race["thread"].join(60)
    # the replacement last: its values; the append last: its rows after the replacement's
    assert _stored(store) in ({"a": [5, 6, 7, 8]}, {"a": [5, 6, 7, 8, 9, 9]})


def test_an_overwrite_planned_before_a_replacement_dropped_the_variable_adds_it_again():
    """A ``mode="a"`` overwrite of ``o`` planned, then a ``mode="w"`` replacement without ``o``
    committed first: the overwrite is planned again and adds ``o`` (what the two one after the
    other give); it was refused with ArrayNotFoundError."""
    store = CommitHookedStore()
    _replace_with(store, _dataset(o=[0, 0, 0, 0], keep=[1, 1, 1, 1]))
    store.hook = lambda: _replace_with(store, _dataset(keep=[2, 2, 2, 2]))
    z3.to_zarr(_dataset(o=[7, 7, 7, 7]), store, mode="a", consolidated=False)
    assert store.hook is None
    assert _stored(store) == {"keep": [2, 2, 2, 2], "o": [7, 7, 7, 7]}


def test_an_append_to_an_array_another_writer_erased_is_refused_by_name():
    """``Array.append`` has nothing to plan again from: the erased array is refused, nothing
    written."""
    store = CommitHookedStore()
    z3.create_array(store, "g/a", shape=(2,), dtype="i4", chunks=(2,), fill_value=0)[...] = 1
    store.hook = lambda: z3.to_zarr(_dataset(b=[1, 2]), store, group="g", mode="w", consolidated=False)
    with pytest.raises(ArrayNotFoundError, match=r"g/a/zarr\.json"):
        z3.open_array(store, "g/a", mode="r+").append(np.array([5, 5], "i4"))
    assert "g/a/zarr.json" not in list(store.list_prefix("g/"))
