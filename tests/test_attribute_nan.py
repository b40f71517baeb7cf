"""Non-finite attribute values across rewrites of a node's document.

zarr-python writes a NaN attribute as a bare ``NaN`` token (not strict JSON; tensorstore then
refuses the document). This library writes new non-finite values as the strings the specs use,
and keeps the bare tokens a stored document already held when it rewrites it: an attribute
update must not turn someone else's number into a string."""

from __future__ import annotations

import json
import math

import zarr3_backend as z3
from zarr3_backend.stores import MemoryStore


def _with_bare_nan(store: MemoryStore, key: str = "zarr.json") -> None:
    doc = json.loads(store.get(key))
    doc["attributes"] = {"missing": float("nan"), "top": float("inf"), "nested": [1.0, float("-inf")]}
    store.set(key, json.dumps(doc).encode())  # bare NaN / Infinity, as zarr-python writes them


def test_an_attribute_update_keeps_the_bare_numbers_it_did_not_touch():
    store = MemoryStore()
    z3.create_array(store, shape=(4,), dtype="f4", chunks=(2,))
    _with_bare_nan(store)
    a = z3.open_array(store, mode="r+")
    a.attrs["units"] = "K"
    raw = store.get("zarr.json").decode()
    assert '"missing": NaN' in raw and '"top": Infinity' in raw and "-Infinity" in raw
    attrs = z3.open_array(store, mode="r").attrs
    assert math.isnan(attrs["missing"]) and attrs["top"] == math.inf and attrs["nested"][1] == -math.inf
    assert attrs["units"] == "K"


def test_a_new_non_finite_value_is_spelled_as_a_string_strict_json():
    store = MemoryStore()
    a = z3.create_array(store, shape=(4,), dtype="f4", chunks=(2,))
    a.attrs["new"] = float("nan")
    raw = store.get("zarr.json").decode()
    json.loads(raw, parse_constant=lambda token: (_ for _ in ()).throw(ValueError(token)))  # strict
    assert z3.open_array(store, mode="r").attrs["new"] == "NaN"


def test_group_attributes_and_consolidated_copies_keep_them_too():
    store = MemoryStore()
    g = z3.open_group(store, mode="w")
    g.create_array("a", shape=(4,), dtype="f4", chunks=(2,))
    _with_bare_nan(store)
    _with_bare_nan(store, "a/zarr.json")
    g = z3.open_group(store, mode="r+")
    g.attrs["title"] = "t"
    z3.consolidate_metadata(store)
    root = z3.open_group(store, mode="r", use_consolidated=True)
    assert math.isnan(root.attrs["missing"]) and root.attrs["title"] == "t"
    assert math.isnan(root["a"].attrs["missing"]) and root["a"].attrs["top"] == math.inf


def test_a_v2_attribute_update_keeps_them_in_zattrs_and_zmetadata():
    """Zarr v2 as zarr-python 2 writes it: bare NaN in ``.zattrs`` (and its ``.zmetadata``
    copy) stays a number when another attribute is written; a new NaN is spelled ``"NaN"``."""
    store = MemoryStore()
    store.set(".zgroup", b'{"zarr_format": 2}')
    store.set(
        "x/.zarray",
        json.dumps(
            {
                "zarr_format": 2,
                "shape": [4],
                "chunks": [2],
                "dtype": "<f4",
                "compressor": None,
                "fill_value": None,
                "order": "C",
                "filters": None,
            }
        ).encode(),
    )
    store.set("x/.zattrs", b'{"missing": NaN}')
    z3.consolidate_metadata(store)
    a = z3.open_array(store, path="x", mode="r+")
    a.attrs["units"] = "K"
    a.attrs["new"] = float("nan")
    zattrs = json.loads(store.get("x/.zattrs"))
    assert math.isnan(zattrs["missing"]) and zattrs["units"] == "K" and zattrs["new"] == "NaN"
    assert math.isnan(json.loads(store.get(".zmetadata"))["metadata"]["x/.zattrs"]["missing"])
    assert math.isnan(z3.open_array(store, path="x", mode="r").attrs["missing"])
