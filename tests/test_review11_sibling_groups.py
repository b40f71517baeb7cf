"""``to_zarr(mode="w", group="g")`` replaces group ``g`` alone: its erase was the key prefix
``"g"`` rather than ``"g/"``, so every sibling whose name starts with ``g`` (``g2``, ``grid``)
was erased with it, data and documents (a DataTree written under ``group="g"`` too)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.stores import MemoryStore


def _ds(name: str, start: float) -> xr.Dataset:
    return xr.Dataset({name: ("t", np.arange(3.0) + start)})


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_mode_w_of_a_group_keeps_siblings_sharing_its_name_prefix(tmp_path, zarr_format):
    root = str(tmp_path / "s.zarr")
    z3.to_zarr(_ds("kept", 1), root, group="g2", mode="w", zarr_format=zarr_format)
    z3.to_zarr(_ds("kept_too", 5), root, group="grid/sub", mode="w", zarr_format=zarr_format)
    z3.to_zarr(_ds("old", 0), root, group="g", mode="w", zarr_format=zarr_format)
    z3.to_zarr(_ds("new", 9), root, group="g", mode="w", zarr_format=zarr_format)

    assert list(xr.open_dataset(root, engine="zarr3", group="g").data_vars) == ["new"]
    np.testing.assert_array_equal(xr.open_dataset(root, engine="zarr3", group="g2")["kept"], [1, 2, 3])
    np.testing.assert_array_equal(
        xr.open_dataset(root, engine="zarr3", group="grid/sub")["kept_too"], [5, 6, 7]
    )


def test_a_tree_written_with_mode_w_under_a_group_keeps_its_siblings(tmp_path):
    root = str(tmp_path / "t.zarr")
    z3.to_zarr(_ds("kept", 1), root, group="tree2", mode="w")
    tree = xr.DataTree.from_dict({"/": _ds("top", 0), "/child": _ds("leaf", 3)})
    z3.to_zarr(tree, root, group="tree", mode="w")
    z3.to_zarr(tree, root, group="tree", mode="w")
    np.testing.assert_array_equal(xr.open_dataset(root, engine="zarr3", group="tree2")["kept"], [1, 2, 3])
    assert xr.open_datatree(root, engine="zarr3", group="tree")["child"]["leaf"].values.tolist() == [3, 4, 5]


def test_a_repair_of_an_older_write_naming_its_group_without_the_slash_spares_the_siblings():
    # writes made before the fix recorded mode="w" of group "g" as the erase prefix "g": rolled
    # forward by today's repair, it erases "g/" only
    import json

    from zarr3_backend.core.txn_records import MANIFEST, TXN_DIR

    store = MemoryStore()
    z3.to_zarr(xr.Dataset({"a": ("x", np.arange(3.0))}), store, group="g")
    z3.to_zarr(xr.Dataset({"b": ("x", np.arange(3.0))}), store, group="g2")

    class Dies(Exception):
        pass

    def rewrite_manifest(key, value):
        if key.endswith(MANIFEST):
            doc = json.loads(value)
            doc["erase_prefixes"] = ["g"]  # as the older code wrote it
            value = json.dumps(doc).encode()
        MemoryStore.set(store, key, value)

    def die_once_the_manifest_is_written():  # the commit's first step after it
        if any(k.endswith(MANIFEST) for k in store.list_prefix(TXN_DIR + "/")):
            raise Dies()

    store.set, store.barrier = rewrite_manifest, die_once_the_manifest_is_written
    with pytest.raises(Dies):
        z3.to_zarr(xr.Dataset({"c": ("x", np.arange(3.0))}), store, group="g", mode="w")
    del store.set, store.barrier
    assert any(k.startswith(TXN_DIR) for k in store.list())
    z3.repair(store, all_writers=True)
    assert list(xr.open_dataset(store, engine="zarr3", group="g").data_vars) == ["c"]
    np.testing.assert_array_equal(xr.open_dataset(store, engine="zarr3", group="g2").b.values, np.arange(3.0))
