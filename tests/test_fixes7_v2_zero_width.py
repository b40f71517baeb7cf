"""A Zarr v2 ``.zarray`` whose dtype is a zero-width string (``<U0``, ``|S0``) is refused with a
``DataTypeError`` naming the document and its ``dtype`` field, never read as the
variable-length ``string`` type (which its chunks do not hold).

numpy has no array of zero-width elements (``np.zeros(3, "<U0")`` is ``<U1``); zarr-python 2.18
reads such an array back with the width of whatever was last written (or fails), and
zarr-python 3 refuses it (``length must be >= 1``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.core.metadata_v2 import array_document
from zarr3_backend.errors import DataTypeError
from zarr3_backend.stores.memory import MemoryStore

ZERO_WIDTH = ["<U0", ">U0", "|S0", "S0", "|V0"]


def zarray(dtype, **extra) -> dict:
    return {
        "zarr_format": 2,
        "shape": [3],
        "chunks": [3],
        "dtype": dtype,
        "fill_value": None,
        "order": "C",
        "filters": None,
        "compressor": None,
        **extra,
    }


@pytest.mark.parametrize("dtype", ZERO_WIDTH)
def test_translation_refuses_a_zero_width_dtype_naming_the_field(dtype):
    with pytest.raises(DataTypeError, match=r"a/\.zarray: field 'dtype': .*0-byte elements") as e:
        array_document(zarray(dtype), {}, "a")
    assert repr(np.dtype(dtype).str) in str(e.value)


@pytest.mark.parametrize("dtype", ["<U0", "|S0"])
def test_opening_a_zero_width_array_is_refused_not_read_as_variable_length_text(dtype):
    store = MemoryStore()
    store.set("a/.zarray", json.dumps(zarray(dtype)).encode())
    store.set("a/0", b"x\0\0\0y\0\0\0z\0\0\0")
    with pytest.raises(DataTypeError, match=r"a/\.zarray: field 'dtype'"):
        z3.open_array(store, path="a", mode="r")


def test_a_zero_width_string_with_the_vlen_filter_is_refused_by_its_dtype(tmp_path):
    # the string a user meant is "|O" with vlen-utf8: the message says so instead of the filter rule
    doc = zarray("<U0", filters=[{"id": "vlen-utf8"}])
    with pytest.raises(DataTypeError, match=r"field 'dtype'.*'\|O' with the 'vlen-utf8' filter"):
        array_document(doc, {}, "a")


def test_xarray_and_consolidated_metadata_refuse_it_too(tmp_path):
    root = tmp_path / "v2.zarr"
    (root / "s").mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / ".zattrs").write_text("{}")
    (root / "s" / ".zarray").write_text(json.dumps(zarray("<U0")))
    (root / "s" / ".zattrs").write_text('{"_ARRAY_DIMENSIONS": ["x"]}')
    docs = {
        ".zgroup": {"zarr_format": 2},
        ".zattrs": {},
        "s/.zarray": zarray("<U0"),
        "s/.zattrs": {"_ARRAY_DIMENSIONS": ["x"]},
    }
    (root / ".zmetadata").write_text(json.dumps({"zarr_consolidated_format": 1, "metadata": docs}))
    for consolidated in (True, False):
        with pytest.raises(DataTypeError, match=r"s/\.zarray: field 'dtype'"):
            xr.open_dataset(root, engine="zarr3", consolidated=consolidated)


def test_widths_of_one_and_more_still_read(tmp_path):
    store = MemoryStore()
    store.set("a/.zarray", json.dumps(zarray("<U1")).encode())
    store.set("a/0", b"x\0\0\0y\0\0\0z\0\0\0")
    assert z3.open_array(store, path="a", mode="r")[:].tolist() == ["x", "y", "z"]
