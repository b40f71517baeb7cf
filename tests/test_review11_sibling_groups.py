"""``to_zarr(mode="w", group="g")`` replaces group ``g`` alone: its erase was the key prefix
``"g"`` rather than ``"g/"``, so every sibling whose name starts with ``g`` (``g2``, ``grid``)
was erased with it, data and documents (a DataTree written under ``group="g"`` too)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3


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
