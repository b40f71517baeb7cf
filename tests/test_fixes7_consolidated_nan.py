"""Attributes holding a bare ``NaN``/``Infinity`` (as zarr-python and Python's json write float
attributes) read the same through the consolidated copy as through the member's own
``zarr.json``: the copy keeps the number, not the string ``"NaN"``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.consolidate import consolidated_root_document, unconsolidated_root_document
from zarr3_backend.core.metadata import parse_node
from zarr3_backend.stores.local import LocalStore

#: What zarr-python (``json.dumps``) writes for float attributes: bare NaN/Infinity tokens.
FOREIGN = {"missing": float("nan"), "hi": float("inf"), "lo": float("-inf"), "pair": [1.5, float("nan")]}


def spelled(attrs) -> str:
    """Attributes as JSON text, so NaN compares equal to NaN and a number differs from a string."""
    return json.dumps(dict(attrs), sort_keys=True)


def _add_foreign_attributes(doc_path: Path) -> None:
    """Put ``FOREIGN`` into a stored ``zarr.json`` the way zarr-python writes it."""
    doc = json.loads(doc_path.read_text())
    doc["attributes"].update(FOREIGN)
    doc_path.write_text(json.dumps(doc, indent=2))  # allow_nan: bare tokens
    with pytest.raises(ValueError, match="bare"):  # really bare tokens, not strings
        json.loads(doc_path.read_text(), parse_constant=_refuse)


def _refuse(token: str) -> None:
    raise ValueError(f"bare {token}")


@pytest.fixture
def store(tmp_path) -> Path:
    """A consolidated dataset whose variable ``t`` and root carry zarr-python's NaN attributes."""
    path = tmp_path / "d.zarr"
    ds = xr.Dataset({"t": ("x", np.arange(4.0))}, attrs={"title": "d"})
    z3.to_zarr(ds, path, mode="w", consolidated=True)
    _add_foreign_attributes(path / "t" / "zarr.json")
    _add_foreign_attributes(path / "zarr.json")
    return path


def _member_attrs(path: Path, name: str) -> str:
    return spelled(z3.open_array(path, path=name, mode="r").attrs)


def test_a_commit_refreshing_the_consolidated_copy_keeps_nan_attributes_numbers(store):
    # appending a variable with consolidated=True rebuilds the root's copy in the commit
    z3.to_zarr(xr.Dataset({"u": ("x", np.ones(4))}), store, mode="a", consolidated=True)
    member = _member_attrs(store, "t")
    assert json.loads(member)["missing"] != json.loads(member)["missing"]  # the member: a float NaN
    via_copy = z3.open_group(store, mode="r", use_consolidated=True)
    assert via_copy.metadata.consolidated_metadata is not None  # really read from the copy
    assert spelled(via_copy["t"].attrs) == member
    # and through xarray: the consolidated path gives what the member-by-member path gives
    with (
        xr.open_dataset(store, engine="zarr3", consolidated=True) as a,
        xr.open_dataset(store, engine="zarr3", consolidated=False) as b,
    ):
        assert spelled(a["t"].attrs) == spelled(b["t"].attrs)
        assert np.isnan(a["t"].attrs["missing"]) and a["t"].attrs["hi"] == np.inf
        assert spelled(a.attrs) == spelled(b.attrs)


@pytest.mark.parametrize("rebuild", [consolidated_root_document, unconsolidated_root_document])
def test_the_root_document_a_commit_rebuilds_keeps_its_own_nan_attributes_numbers(store, rebuild):
    raw = rebuild(LocalStore(store), None)
    assert spelled(parse_node(raw, "").attributes) == spelled({"title": "d", **FOREIGN})


def test_attributes_this_package_wrote_stay_strict_json(tmp_path):
    """Without foreign bare tokens the consolidated root is strictly valid JSON, and a NaN
    attribute this package wrote (spelled ``"NaN"`` in the member) is spelled so in the copy."""
    path = tmp_path / "own.zarr"
    g = z3.open_group(path, mode="w")
    a = g.create_array("a", shape=(2,), dtype="f4", chunks=(2,))
    a.attrs["missing"] = float("nan")
    member = _member_attrs(path, "a")
    z3.to_zarr(xr.Dataset({"u": ("x", np.ones(4))}), path, mode="a", consolidated=True)
    raw = (path / "zarr.json").read_text()
    json.loads(raw, parse_constant=_refuse)  # strict JSON: no bare token
    assert spelled(z3.open_group(path, mode="r", use_consolidated=True)["a"].attrs) == member


def test_consolidate_metadata_keeps_nan_attributes_numbers(store):
    z3.consolidate_metadata(store)
    via_copy = z3.open_group(store, mode="r", use_consolidated=True)
    assert spelled(via_copy["t"].attrs) == _member_attrs(store, "t")
    assert spelled(via_copy.attrs) == spelled({"title": "d", **FOREIGN})
    with xr.open_dataset(store, engine="zarr3", consolidated=True) as ds:
        assert np.isnan(ds["t"].attrs["missing"])
