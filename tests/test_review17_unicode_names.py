"""review17: names and metadata text with no UTF-8 form (a lone surrogate, what ``os.fsdecode``
makes of a file name that is not UTF-8, e.g. a variable named after a file: ``"v\\udcff"``).

On main a ``to_zarr(mode="w")`` of a dataset with such a variable name stages the array, erases
the old contents of the store, moves the new array into place and only then fails (an untyped
``UnicodeEncodeError``) writing the root's consolidated metadata. The store is left marked as
mid-commit: the old variables are gone, every reader and writer (zarr-python too) is refused,
and ``repair`` fails with the same ``UnicodeEncodeError`` every time, so no later write can
finish it. Attributes, dimension names and fill values with such text fail untyped as well.
Such a key cannot be an object-store key nor appear in any ``zarr.json``: it must be refused
before anything is written.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend import errors

BAD = "v\udcff"


@pytest.mark.parametrize("mode", ["w", "a"])
def test_to_zarr_of_a_bad_variable_name_leaves_the_store_as_it_was(tmp_path, mode):
    path = tmp_path / "d.zarr"
    z3.to_zarr(xr.Dataset({"good": ("x", [1, 2])}), path, mode="w")
    with pytest.raises(errors.Zarr3Error, match="not valid Unicode"):
        z3.to_zarr(xr.Dataset({BAD: ("x", [3, 4])}), path, mode=mode)
    assert xr.open_dataset(path, engine="zarr3")["good"].values.tolist() == [1, 2]
    z3.to_zarr(xr.Dataset({"other": ("x", [5, 6])}), path, mode="a")  # the store still takes writes
    assert sorted(xr.open_dataset(path, engine="zarr3").data_vars) == ["good", "other"]


def test_bad_node_names_are_refused():
    store = z3.MemoryStore()
    with pytest.raises(errors.InvalidKeyError, match="not valid Unicode"):
        z3.create_array(store, BAD, shape=(2,), dtype="i1")
    with pytest.raises(errors.InvalidKeyError, match="not valid Unicode"):
        z3.open_group(store, mode="a").create_group(BAD)


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"attributes": {"source": BAD}},
        {"dimension_names": [BAD]},
        {"dtype": "U3", "fill_value": "\udcff"},
        {"dtype": "string", "fill_value": "\udcff"},
    ],
    ids=["attributes", "dimension_names", "fixed_text_fill", "text_fill"],
)
def test_metadata_text_with_no_utf8_form_is_written_as_json_escapes(zarr_format, kwargs):
    """As zarr-python writes it (``\\udcff``): it reads back the same, in ASCII documents."""
    store = z3.MemoryStore()
    args = {"shape": (2,), "dtype": "i1", **kwargs}
    z3.create_array(store, "a", zarr_format=zarr_format, **args)
    docs = [k for k in store.list_prefix("a/") if k.rpartition("/")[2] in ("zarr.json", ".zarray", ".zattrs")]
    assert all(store.get(k).isascii() for k in docs)
    a = z3.open_array(store, "a")
    if "attributes" in kwargs:
        assert a.attrs["source"] == BAD
    elif "dimension_names" in kwargs:
        assert (
            a.metadata.dimension_names == (BAD,)
            if zarr_format == 3
            else a.attrs["_ARRAY_DIMENSIONS"] == [BAD]
        )
    else:
        assert a.fill_value == "\udcff"


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_attribute_update_with_no_utf8_form_reads_back(zarr_format):
    store = z3.MemoryStore()
    a = z3.create_array(store, "a", shape=(2,), dtype="i1", zarr_format=zarr_format, attributes={"k": 1})
    a.attrs["source"] = BAD
    assert dict(z3.open_array(store, "a").attrs) == {"k": 1, "source": BAD}
    np.testing.assert_array_equal(z3.open_array(store, "a")[...], [0, 0])
