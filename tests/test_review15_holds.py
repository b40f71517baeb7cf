"""review15: races of the shared holds (node_claims.hold_modes) found by reading."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from sample_data import small_dataset, stored_values
from store_doubles import PausedAfterMove, PausedInEraseGap

import zarr3_backend as z3
from zarr3_backend.core.node_claims import stored_node_documents


@pytest.mark.parametrize("adder_mode", ["a", "w-"])
def test_an_add_to_a_new_group_and_a_mode_w_of_that_group_never_leave_the_add_all_fill(adder_mode):
    # Neither writer finds g stored when it plans: the eraser (mode="w" of g) holds no node
    # below g (none stored) and the root shared; the adder holds g/zarr.json and the root shared.
    # Nothing conflicts, so the erase of "g/" runs after the adder moved its values in, before
    # its documents: b is left all fill while to_zarr returned.
    store = PausedAfterMove()
    z3.to_zarr(small_dataset(a=[0, 0]), store, mode="w", consolidated=False)  # a root group, no g
    store.race["other"] = lambda: z3.to_zarr(
        small_dataset(x=[5, 6, 7, 8]), store, mode="w", group="g", consolidated=False
    )
    try:
        z3.to_zarr(small_dataset(b=[1, 2, 3, 4]), store, mode=adder_mode, group="g", consolidated=False)
    except z3.errors.Zarr3Error:
        pass  # refused (e.g. NodeExistsError): allowed, as long as nothing is half there
    store.race["thread"].join(60)
    got = stored_values(store, "g")
    # one after the other: the erase last -> {"x"}; the add last -> {"b", "x"} with b whole
    assert got in ({"x": [5.0, 6.0, 7.0, 8.0]}, {"b": [1.0, 2.0, 3.0, 4.0], "x": [5.0, 6.0, 7.0, 8.0]}), got


def _renamed(store, path: str, new_path: str):
    """The array at ``path`` moved to ``new_path``: a node named like a document, which this
    package refuses to create (review17) but other writers' stores may hold."""
    store.move_prefix(path + "/", new_path + "/")
    return z3.open_array(store, path=new_path, mode="r+")


@pytest.mark.parametrize("name", [".zattrs", ".zmetadata", ".zgroup"])
def test_an_append_to_an_array_named_like_a_document_and_a_mode_w_of_its_group_take_turns(name):
    # node_claims.stored_node_documents skips every listed name in _DOCUMENT_NAMES as a file,
    # so the erase of g holds no claim on g/<name>/zarr.json (before the walk, the listing
    # found it): the append's rows move in, the erase takes them, and the append's document
    # brings the array back over the erased group with its old rows gone.
    store = PausedAfterMove()
    root = z3.open_group(store, mode="w")
    group = root.create_group("g")
    group.create_array("a", shape=(2,), chunks=(2,), dtype="f8", fill_value=np.nan)[:] = [1.0, 2.0]
    arr = _renamed(store, "g/a", f"g/{name}")
    store.race["other"] = lambda: z3.to_zarr(
        small_dataset(x=[5, 6, 7, 8]), store, mode="w", group="g", consolidated=False
    )
    try:
        arr.append(np.array([3.0, 4.0]))
    except z3.errors.Zarr3Error:
        pass  # refused once the erase went first: the array is gone
    store.race["thread"].join(60)
    assert stored_values(store, "g") == {"x": [5.0, 6.0, 7.0, 8.0]}
    try:
        left = z3.open_array(store, path=f"g/{name}")[:].tolist()
    except z3.errors.Zarr3Error:
        left = None  # erased last: gone
    # the append last: the array whole with its four rows; the erase last: gone
    assert left in (None, [1.0, 2.0, 3.0, 4.0]), left


def test_an_add_to_an_empty_store_and_a_mode_w_of_its_root_never_leave_the_add_all_fill():
    # As above at the root: the eraser of "" finds nothing stored to hold (no claim at all,
    # on main before the shared holds too), the adder holds the root's document: b left all fill.
    store = PausedAfterMove()
    store.race["other"] = lambda: z3.to_zarr(
        small_dataset(x=[5, 6, 7, 8]), store, mode="w", consolidated=False
    )
    try:
        z3.to_zarr(small_dataset(b=[1, 2, 3, 4]), store, mode="a", consolidated=False)
    except z3.errors.Zarr3Error:
        pass  # refused: allowed, as long as nothing is half there
    store.race["thread"].join(60)
    got = stored_values(store)
    assert got in ({"x": [5.0, 6.0, 7.0, 8.0]}, {"b": [1.0, 2.0, 3.0, 4.0], "x": [5.0, 6.0, 7.0, 8.0]}), got


def test_the_erase_walk_finds_nodes_named_like_documents():
    store = z3.MemoryStore()
    g = z3.open_group(store, mode="w").create_group("g")
    for name in (".zattrs", ".zmetadata", ".zgroup"):
        g.create_array("a", shape=(4,), chunks=(2,), dtype="f8")[...] = 1.0
        _renamed(store, "g/a", f"g/{name}")
    want = sorted(k for k in store.list_prefix("g/") if k.endswith("zarr.json"))
    assert stored_node_documents(store, "g/") == want


def test_an_append_to_an_array_added_after_the_erase_listed_its_nodes_is_whole_or_gone():
    # Pre-existing (db1d128 too): the erase of g lists the nodes it holds before its manifest;
    # an array added to g after that listing is not held, and its appender holds only the
    # array's own claim: its document is written after the erase removed the array, which comes
    # back holding only the appended rows.
    store = PausedInEraseGap()
    z3.to_zarr(small_dataset(a=[0, 0]), store, mode="w", group="g", consolidated=False)
    errors = []

    def append():
        try:
            z3.open_array(store, path="g/n", mode="r+").append(np.array([3.0, 4.0]))
        except z3.errors.Zarr3Error as e:  # refused (the array erased first): allowed
            errors.append(e)

    store.add = lambda: z3.to_zarr(small_dataset(n=[1, 2]), store, mode="a", group="g", consolidated=False)
    store.racer = append
    z3.to_zarr(small_dataset(x=[5, 6]), store, mode="w", group="g", consolidated=False)
    assert not store.thread.is_alive()
    try:
        left = z3.open_array(store, path="g/n")[:].tolist()
    except z3.errors.Zarr3Error:
        left = None
    assert left in (None, [1.0, 2.0, 3.0, 4.0]), left


class _CountingZmetadata(z3.MemoryStore):
    """Counts the writes of any ``.zmetadata`` (plain or conditional)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.zmetadata_writes = 0

    def set(self, key, value):
        self.zmetadata_writes += key.endswith(".zmetadata")
        super().set(key, value)

    def set_if(self, key, value, expected):
        self.zmetadata_writes += key.endswith(".zmetadata")
        return super().set_if(key, value, expected)


@pytest.mark.parametrize("group", [None, "g"])
def test_a_consolidated_v2_commit_writes_the_roots_zmetadata_once(group):
    # commit._apply patches the root's .zmetadata with the commit's documents
    # (refresh_v2_consolidated(rebuild=False)), then rebuilds it (_update): two conditional
    # writes and two reads where main before wrote it once
    store = _CountingZmetadata()
    z3.to_zarr(small_dataset(a=[1, 2]), store, mode="w", zarr_format=2, consolidated=True)
    store.zmetadata_writes = 0
    z3.to_zarr(small_dataset(b=[1, 2]), store, mode="a", group=group, zarr_format=2, consolidated=True)
    assert store.zmetadata_writes == 1
    assert sorted(xr.open_dataset(store, engine="zarr3", group=group, consolidated=True).data_vars) == (
        ["a", "b"] if group is None else ["b"]
    )
