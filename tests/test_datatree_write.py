"""z3.to_zarr(DataTree): every node a group, every mode, consolidated once at the root, read
identically by xarray's zarr engine and ours."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from store_doubles import RecordingStore

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentError, ArgumentTypeError, NodeExistsError


def three_levels(times: int = 2, start: str = "2000-01-01") -> xr.DataTree:
    return xr.DataTree.from_dict(
        {
            "/": xr.Dataset(
                {"a": ("x", np.arange(3.0))}, coords={"x": [10, 20, 30]}, attrs={"title": "root"}
            ),
            "/obs": xr.Dataset(
                {"t2m": (("x", "time"), np.arange(3.0 * times).reshape(3, times), {"units": "K"})},
                coords={"time": pd.date_range(start, periods=times)},
            ),
            "/obs/station": xr.Dataset(
                {"name": ("s", np.array(["alpha", "b"])), "flag": ("s", np.array([True, False]))},
                attrs={"level": 3},
            ),
        }
    )


def _files(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("engine", ["zarr3", "zarr"])
def test_three_level_tree_round_trips_on_both_engines(tmp_path, engine):
    tree = three_levels()
    z3.to_zarr(tree, tmp_path / "t.zarr", mode="w")
    back = xr.open_datatree(tmp_path / "t.zarr", engine=engine).load()
    xr.testing.assert_identical(back, tree)


def test_tree_is_consolidated_once_at_the_root(monkeypatch):
    import zarr3_backend.core.consolidate as consolidate

    consolidations = []
    real = consolidate.consolidated_root_document

    def counting(*args):
        consolidations.append(args)
        return real(*args)

    monkeypatch.setattr(consolidate, "consolidated_root_document", counting)
    store = RecordingStore()
    z3.to_zarr(three_levels(), store, mode="w")
    assert len(consolidations) == 1
    assert store.writes.count("zarr.json") == 1  # the root document is written once, last
    assert store.writes[-1] == "zarr.json"
    root_doc = json.loads(store.get("zarr.json"))
    listed = set(root_doc["consolidated_metadata"]["metadata"])
    assert {"a", "x", "obs", "obs/t2m", "obs/time", "obs/station", "obs/station/name"} <= listed
    assert "consolidated_metadata" not in json.loads(store.get("obs/zarr.json"))


def test_mode_w_replaces_the_whole_tree(tmp_path):
    path = tmp_path / "t.zarr"
    z3.to_zarr(three_levels(), path, mode="w")
    small = xr.DataTree.from_dict({"/": xr.Dataset({"z": ("q", [1, 2])}), "/new": xr.Dataset()})
    z3.to_zarr(small, path, mode="w")
    back = xr.open_datatree(path, engine="zarr3").load()
    xr.testing.assert_identical(back, small)
    assert not (path / "obs").exists()


def test_a_failing_tree_write_leaves_the_old_store_as_it_was(tmp_path):
    path = tmp_path / "t.zarr"
    z3.to_zarr(three_levels(), path, mode="w")
    before = _files(path)
    bad = three_levels()
    bad["obs/station"].attrs["bad"] = object()  # only the deepest node is bad
    with pytest.raises(ArgumentTypeError, match="station"):
        z3.to_zarr(bad, path, mode="w")
    assert _files(path) == before


def test_mode_w_minus_refuses_an_existing_tree(tmp_path):
    path = tmp_path / "t.zarr"
    z3.to_zarr(three_levels(), path, mode="w-")
    with pytest.raises(NodeExistsError):
        z3.to_zarr(three_levels(), path, mode="w-")


def test_append_grows_the_nodes_with_the_append_dimension(tmp_path):
    path = tmp_path / "t.zarr"
    z3.to_zarr(three_levels(times=2), path, mode="w")
    z3.to_zarr(three_levels(times=3, start="2000-01-03"), path, append_dim="time")
    back = xr.open_datatree(path, engine="zarr").load()
    assert back["obs"].sizes["time"] == 5
    assert back["obs/time"].values[-1] == np.datetime64("2000-01-05")
    np.testing.assert_array_equal(back["obs/t2m"].values[:, 2:], np.arange(9.0).reshape(3, 3))
    xr.testing.assert_identical(
        back["obs/station"].to_dataset(inherit=False), three_levels()["obs/station"].to_dataset(inherit=False)
    )


def test_mode_a_adds_a_node_and_r_plus_rewrites_values(tmp_path):
    path = tmp_path / "t.zarr"
    z3.to_zarr(three_levels(), path, mode="w")
    grown = three_levels().copy()
    grown["extra"] = xr.DataTree(xr.Dataset({"e": ("k", [7, 8])}))
    z3.to_zarr(grown, path, mode="a")
    assert xr.open_datatree(path, engine="zarr3")["extra/e"].values.tolist() == [7, 8]
    changed = three_levels()
    changed["obs"]["t2m"] = changed["obs"]["t2m"] * 2
    z3.to_zarr(changed, path, mode="r+")
    back = xr.open_datatree(path, engine="zarr3").load()
    np.testing.assert_array_equal(back["obs/t2m"].values, np.arange(6.0).reshape(3, 2) * 2)


def test_encoding_is_keyed_by_node_path_and_unknown_paths_are_refused(tmp_path):
    path = tmp_path / "t.zarr"
    encoding = {"/obs": {"t2m": {"chunks": (1, 2), "shards": (3, 2)}}}
    z3.to_zarr(three_levels(), path, mode="w", encoding=encoding)
    back = xr.open_datatree(path, engine="zarr3")
    assert back["obs/t2m"].encoding["chunks"] == (1, 2)
    assert back["obs/t2m"].encoding["shards"] == (3, 2)
    with pytest.raises(ArgumentError, match="nope"):
        z3.to_zarr(three_levels(), tmp_path / "u.zarr", mode="w", encoding={"/nope": {}})


def test_compute_false_writes_the_dask_data_when_computed(tmp_path):
    path = tmp_path / "t.zarr"
    tree = three_levels().chunk()
    delayed = z3.to_zarr(tree, path, mode="w", compute=False)
    delayed.compute()
    back = xr.open_datatree(path, engine="zarr3").load()
    xr.testing.assert_identical(back, three_levels())


def test_tree_under_a_group(tmp_path):
    path = tmp_path / "t.zarr"
    z3.to_zarr(three_levels(), path, mode="w", group="run1")
    back = xr.open_datatree(path, engine="zarr3", group="run1").load()
    xr.testing.assert_identical(back, three_levels())


with warnings.catch_warnings():  # the wheel's marks are registered by xarray's repository conftest
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    from xarray.tests import test_backends_datatree as xarray_tree_tests  # its Test* classes unimported
    from xarray.tests.conftest import create_test_datatree, simple_datatree
    from xarray.tests.test_backends_datatree import unaligned_datatree_zarr_factory

__all__ = ["create_test_datatree", "simple_datatree", "unaligned_datatree_zarr_factory"]  # fixtures


class _OurTreeWriter:
    """Routes ``DataTree.to_zarr`` to ``zarr3_backend.to_zarr`` for the test."""

    @pytest.fixture(autouse=True)
    def _our_writer(self, monkeypatch):
        def to_zarr(tree, store, mode="w-", encoding=None, consolidated=True, **kwargs):
            return z3.to_zarr(tree, store, mode=mode, encoding=encoding, consolidated=consolidated, **kwargs)

        monkeypatch.setattr(xr.DataTree, "to_zarr", to_zarr)


# xarray's own DataTree zarr tests (TestZarrDatatreeIO, from the installed wheel), read back with
# xarray's zarr engine, written by ours: its test functions in a class parametrized for
# zarr_format=3 here (xarray's class also runs zarr_format=2; DataTree writes as v2 are
# covered by tests/test_v2_write_xarray.py).
TestXarrayDatatreeTestsOnOurWriter = pytest.mark.parametrize("zarr_format", [3])(
    type(
        "TestXarrayDatatreeTestsOnOurWriter",
        (_OurTreeWriter,),
        {
            k: v
            for k, v in vars(xarray_tree_tests.TestZarrDatatreeIO).items()
            if not k.startswith("__") and k != "pytestmark"
        },
    )
)
