"""One unreadable member does not hide the others: ``members(errors="keep")``, ``tree()``, xarray."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.group import UnreadableNode
from zarr3_backend.errors import DataTypeError, MetadataError, Zarr3Error


def _bad_array_doc() -> dict:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [3],
        "data_type": "float128",  # no such Zarr data type
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["x"],
    }


@pytest.fixture
def store(tmp_path):
    """A group with good arrays, an array of an unknown data type, a non-JSON document, and a
    subgroup with an unknown must-understand field (and a good array below it)."""
    root = tmp_path / "g.zarr"
    g = z3.open_group(root, mode="w")
    g.create_array("good", shape=(3,), dtype="int16", chunks=(3,), dimension_names=("x",))[...] = [1, 2, 3]
    sub = g.create_group("sub")
    sub.create_array("inner", shape=(2,), dtype="f4", chunks=(2,))
    ok = g.create_group("ok")
    ok.create_array("leaf", shape=(2,), dtype="u1", chunks=(2,))
    (root / "bad").mkdir()
    (root / "bad" / "zarr.json").write_text(json.dumps(_bad_array_doc()))
    (root / "garbled").mkdir()
    (root / "garbled" / "zarr.json").write_bytes(b"{not json")
    doc = json.loads((root / "sub" / "zarr.json").read_text())
    doc["future_field"] = {"must_understand": True}
    (root / "sub" / "zarr.json").write_text(json.dumps(doc))
    return root


def test_members_keep_lists_unreadable_members_with_the_reason(store) -> None:
    g = z3.open_group(store, mode="r")
    members = g.members(max_depth=None, errors="keep")
    assert sorted(members) == ["bad", "garbled", "good", "ok", "ok/leaf", "sub"]  # nothing below 'sub'
    bad = members["bad"]
    assert isinstance(bad, UnreadableNode)
    assert bad.path == "bad" and bad.name == "bad" and bad.node_type == "array"
    assert isinstance(bad.error, DataTypeError) and "float128" in bad.reason
    assert members["garbled"].node_type is None
    assert isinstance(members["garbled"].error, MetadataError)
    assert members["sub"].node_type == "group" and "future_field" in members["sub"].reason
    np.testing.assert_array_equal(members["good"][...], [1, 2, 3])
    with pytest.raises(DataTypeError, match="float128"):
        bad.metadata  # noqa: B018  (touching the metadata raises the reason)


def test_members_default_raises_a_typed_error_naming_the_member(store) -> None:
    g = z3.open_group(store, mode="r")
    with pytest.raises(Zarr3Error) as err:
        g.members(max_depth=None)
    assert any(name in str(err.value) for name in ("'bad'", "'garbled'", "'sub'"))
    with pytest.raises(DataTypeError, match="'bad'"):
        g["bad"]
    with pytest.raises(ValueError, match="errors"):
        g.members(errors="ignore")


def test_tree_shows_unreadable_members(store) -> None:
    text = z3.open_group(store, mode="r").tree()
    lines = text.splitlines()
    assert lines[0] == "/"
    assert "  good (3,) int16" in lines
    assert any(line.startswith("  bad (unreadable: DataTypeError:") and "float128" in line for line in lines)
    assert any(line.startswith("  garbled (unreadable: MetadataError:") for line in lines)
    assert any(line.startswith("  sub/ (unreadable:") for line in lines)
    assert "    leaf (2,) uint8" in lines


def test_iteration_and_length_count_unreadable_members(store) -> None:
    g = z3.open_group(store, mode="r")
    assert list(g) == ["bad", "garbled", "good", "ok", "sub"]
    assert len(g) == 5
    assert "bad" in g  # it exists, even though it cannot be opened
    assert "nothing" not in g


def test_consolidated_members_keep_unreadable_entries(tmp_path) -> None:
    root = tmp_path / "c.zarr"
    g = z3.open_group(root, mode="w")
    g.create_array("good", shape=(2,), dtype="i1", chunks=(2,))
    z3.consolidate_metadata(root)
    doc = json.loads((root / "zarr.json").read_text())
    doc["consolidated_metadata"]["metadata"]["bad"] = _bad_array_doc()
    (root / "zarr.json").write_text(json.dumps(doc))
    g = z3.open_group(root, mode="r")
    assert g.consolidated is not None
    members = g.members(errors="keep")
    assert isinstance(members["bad"], UnreadableNode) and "float128" in members["bad"].reason
    assert members["good"].shape == (2,)
    assert "bad (unreadable:" in g.tree()
    with pytest.raises(DataTypeError, match="bad"):
        g.members()


def test_xarray_names_the_unreadable_variable_and_drop_variables_gets_past_it(tmp_path) -> None:
    root = tmp_path / "x.zarr"
    g = z3.open_group(root, mode="w")
    g.create_array("t", shape=(3,), dtype="f8", chunks=(3,), dimension_names=("x",))[...] = [1.0, 2.0, 3.0]
    (root / "bad").mkdir()
    (root / "bad" / "zarr.json").write_text(json.dumps(_bad_array_doc()))
    with pytest.raises(DataTypeError, match="'bad'"):
        xr.open_dataset(root, engine="zarr3")
    ds = xr.open_dataset(root, engine="zarr3", drop_variables=["bad"])
    assert list(ds.data_vars) == ["t"]
    np.testing.assert_array_equal(ds["t"].values, [1.0, 2.0, 3.0])
    tree = xr.open_datatree(root, engine="zarr3", drop_variables=["bad"])
    assert list(tree.ds.data_vars) == ["t"]
