"""review17: a node may not be named as a metadata document (``zarr.json``, ``.zarray``,
``.zgroup``, ``.zattrs``, ``.zmetadata``) or as this package's transaction area (``.z3-txn``).

On main ``to_zarr`` takes such variable names. ``mode="w"`` with a variable named ``zarr.json``
erases the old dataset, then fails half-way through moving the new one into place (an untyped
``FileExistsError``: the root's ``zarr.json`` is a file, not the array's folder) and leaves the
store marked mid-commit: every read and write is refused with ``InterruptedWriteError`` and
zarr-python refuses the root. A variable named ``.zarray``/``.zattrs``/``.zgroup``/``.zmetadata``
or ``.z3-txn`` is written without an error and then missing from the dataset read back (the
store reads as an empty dataset). The core API already refuses ``__x``-style names; these are
refused nowhere.
"""

from __future__ import annotations

import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend import errors

RESERVED = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", ".z3-txn"]


@pytest.mark.parametrize("name", RESERVED)
def test_to_zarr_refuses_a_reserved_variable_name_and_keeps_the_store(tmp_path, name):
    path = tmp_path / "d.zarr"
    z3.to_zarr(xr.Dataset({"good": ("x", [1, 2])}), path, mode="w", consolidated=True)
    with pytest.raises(errors.Zarr3Error, match="cannot be a Zarr array name"):
        z3.to_zarr(xr.Dataset({name: ("x", [3, 4])}), path, mode="w", consolidated=True)
    assert xr.open_dataset(path, engine="zarr3")["good"].values.tolist() == [1, 2]
    z3.to_zarr(xr.Dataset({"other": ("x", [5, 6])}), path, mode="a")
    assert sorted(xr.open_dataset(path, engine="zarr3").data_vars) == ["good", "other"]


@pytest.mark.parametrize("name", RESERVED)
def test_the_core_refuses_a_reserved_node_name(tmp_path, name):
    g = z3.open_group(tmp_path / "d.zarr", mode="w")
    with pytest.raises(errors.InvalidKeyError, match="not node names"):
        g.create_array(name, shape=(2,), dtype="i1")
    with pytest.raises(errors.InvalidKeyError, match="not node names"):
        g.create_group(f"sub/{name}")
    g = z3.open_group(tmp_path / "d.zarr", mode="r")
    assert g.array_keys() == [] and g.group_keys() == []


def test_names_that_only_look_alike_are_still_taken(tmp_path):
    ds = xr.Dataset({"zarr.jsonx": ("x", [1, 2]), "c": ("x", [3, 4]), "zarr": ("x", [5, 6])})
    z3.to_zarr(ds, tmp_path / "d.zarr", mode="w")
    assert sorted(xr.open_dataset(tmp_path / "d.zarr", engine="zarr3").data_vars) == [
        "c",
        "zarr",
        "zarr.jsonx",
    ]


@pytest.mark.parametrize("group", ["zarr.json", "a/.zarray", ".z3-txn"])
def test_to_zarr_refuses_a_reserved_group_name_and_keeps_the_store(tmp_path, group):
    """``group="zarr.json"`` with ``mode="w"`` wedged the store on main exactly as the variable
    name does (untyped ``FileExistsError`` mid-commit, every later read refused)."""
    path = tmp_path / "d.zarr"
    z3.to_zarr(xr.Dataset({"good": ("x", [1, 2])}), path, mode="w")
    with pytest.raises(errors.InvalidKeyError, match="not node names"):
        z3.to_zarr(xr.Dataset({"v": ("x", [3, 4])}), path, mode="w", group=group)
    assert xr.open_dataset(path, engine="zarr3")["good"].values.tolist() == [1, 2]
    tree = xr.DataTree.from_dict(
        {"/": xr.Dataset({"a": ("x", [1])}), f"/{group.split('/')[-1]}": xr.Dataset()}
    )
    with pytest.raises(errors.InvalidKeyError, match="not node names"):
        z3.to_zarr(tree, tmp_path / "t.zarr", mode="w")
