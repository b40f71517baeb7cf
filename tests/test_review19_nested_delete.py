"""review19: ``del group[name]`` rebuilds the root's consolidated copy only when the *root* is
consolidated (6eb3ab1); a group below an unconsolidated root that holds its own inline copy
(``consolidate_metadata(store, path="sub")``, or a dataset written at ``coll.zarr/2020`` and
addressed through ``coll.zarr``) kept listing the deleted array: every consolidated reader of
that group (ours, xarray's engine, zarr-python) listed it and read it back as all fill."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.zarr"
    ds = xr.Dataset({"a": ("x", np.arange(4.0)), "b": ("x", np.ones(4))})
    z3.to_zarr(ds, path, mode="w", group="sub", consolidated=False)
    z3.consolidate_metadata(path, path="sub")  # the subgroup's copy; the root has none
    return path


def _sub_members(path) -> set[str]:
    return set(json.loads((path / "sub" / "zarr.json").read_text())["consolidated_metadata"]["metadata"])


@pytest.mark.parametrize("through", ["root", "sub"])
def test_deleted_array_leaves_the_subgroups_copy(store, through):
    if through == "root":
        del z3.open_group(store, mode="a")["sub/a"]
    else:
        del z3.open_group(store, path="sub", mode="a")["a"]
    assert "a" not in _sub_members(store)
    assert sorted(z3.open_group(store, path="sub", mode="r").array_keys()) == ["b"]
    ds = xr.open_dataset(store, group="sub", engine="zarr3")
    assert list(ds.data_vars) == ["b"]


def test_zarr_python_no_longer_lists_the_deleted_array(store):
    zarr = pytest.importorskip("zarr")
    if int(zarr.__version__.split(".")[0]) < 3:
        pytest.skip("zarr-python 3 reads Zarr v3")
    del z3.open_group(store, mode="a")["sub/a"]
    assert sorted(zarr.open_group(store, path="sub", mode="r").array_keys()) == ["b"]
