"""Data types zarr-python 3.4 writes: datetime64/timedelta64, struct, byte and text strings.

The stores under ``tests/fixtures/zarr34`` were written by zarr-python 3.4 (see
``tests/fixtures/make_zarr34_fixtures.py``); each test reads one and compares it exactly with
the values zarr-python read back, and writes the same array here to compare the metadata.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from numcodecs import GZip, Zstd

import zarr3_backend as z3
from zarr3_backend.core.dtypes import as_data_type, data_type_from_numpy, parse_data_type
from zarr3_backend.core.dtypes_struct import StructDataType
from zarr3_backend.core.dtypes_time import DateTime64DataType, TimeDelta64DataType
from zarr3_backend.errors import DataTypeError

FIXTURES = Path(__file__).parent / "fixtures" / "zarr34"
STORE = FIXTURES / "store"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())["arrays"]


def expected(name: str) -> np.ndarray:
    """The values zarr-python 3.4 read back from fixture array ``name``."""
    file = FIXTURES / MANIFEST[name]["expected"]
    if file.suffix == ".npy":
        return np.load(file, allow_pickle=False)
    doc = json.loads(file.read_text())
    items = [base64.b64decode(x) for x in doc["items"]] if doc["kind"] == "bytes" else doc["items"]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(doc["shape"])


def stored_json(name: str) -> dict:
    return json.loads((STORE / name / "zarr.json").read_text())


def assert_exact(got: np.ndarray, want: np.ndarray) -> None:
    """Equal dtype and shape, and equal bits (NaT, NaN and struct padding included)."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if want.dtype.kind in "OT":
        assert got.tolist() == want.tolist()
    else:
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


FIXED = [
    "datetime64_10s_gzip",
    "datetime64_ns_fill",
    "datetime64_D_big",
    "timedelta64_ms",
    "timedelta64_3h",
    "struct_flat",
    "struct_nested",
    "struct_bytes_only",
    "struct_big",
    "null_terminated_bytes",
    "fixed_length_utf32",
]
TEXT = ["variable_length_bytes", "string"]


@pytest.mark.parametrize("name", FIXED + TEXT)
def test_zarr_python_34_dtypes_read_exactly(name: str) -> None:
    a = z3.open_array(STORE, path=name, mode="r")
    want = expected(name)
    got = a[...]
    if name in TEXT:
        assert got.tolist() == want.tolist()
    else:
        assert_exact(got, want)
    if name not in TEXT:  # a partial read goes through the copy-and-scatter path
        assert_exact(a[1:], want[1:])


def test_zarr_python_34_datetime_zstd_whole_chunks() -> None:
    a = z3.open_array(STORE, path="datetime64_10s", mode="r")
    assert_exact(a[...], expected("datetime64_10s"))


def test_zarr_python_34_datetime_zstd_partial_chunk() -> None:
    a = z3.open_array(STORE, path="datetime64_10s", mode="r")
    assert_exact(a[1:3], expected("datetime64_10s")[1:3])


@pytest.mark.parametrize("name", FIXED)
def test_we_write_the_metadata_zarr_python_34_writes(tmp_path, name: str) -> None:
    """Same data type, fill value and codecs JSON as zarr-python 3.4; the data reads back."""
    theirs = stored_json(name)
    dt = parse_data_type(theirs["data_type"])
    fill = dt.parse_fill_value(theirs["fill_value"])
    a = z3.create_array(
        tmp_path / "o.zarr",
        "x",
        shape=tuple(theirs["shape"]),
        dtype=data_type_from_numpy(expected(name).dtype),
        chunks=tuple(theirs["chunk_grid"]["configuration"]["chunk_shape"]),
        codecs=theirs["codecs"],
        fill_value=fill,
    )
    ours = a.metadata.to_json()
    for key in ("data_type", "fill_value", "codecs"):
        assert ours[key] == theirs[key], key
    a[...] = expected(name)
    assert_exact(z3.open_array(tmp_path / "o.zarr", path="x")[...], expected(name))
    # our chunks hold the same bytes as zarr-python's (same codecs, same element layout)
    compressor = {"gzip": GZip(), "zstd": Zstd()}[theirs["codecs"][-1]["name"]]
    keys = sorted(p.relative_to(STORE / name) for p in (STORE / name).rglob("c/**/*") if p.is_file())
    assert keys
    for key in keys:
        theirs_raw = compressor.decode((STORE / name / key).read_bytes())
        ours_raw = compressor.decode((tmp_path / "o.zarr" / "x" / key).read_bytes())
        assert bytes(ours_raw) == bytes(theirs_raw), key


# --- the data type objects ----------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"])
@pytest.mark.parametrize(
    "kind,cls", [("datetime64", DateTime64DataType), ("timedelta64", TimeDelta64DataType)]
)
def test_time_units_and_scale_factors(unit: str, kind: str, cls: type) -> None:
    js = {"name": f"numpy.{kind}", "configuration": {"unit": unit, "scale_factor": 7}}
    dt = parse_data_type(js)
    assert isinstance(dt, cls)
    assert dt.numpy == np.dtype(f"{kind}[7{unit}]")
    assert dt.to_json() == js
    assert data_type_from_numpy(np.dtype(f"{kind}[7{unit}]").newbyteorder(">")) == dt


def test_time_mu_s_and_generic() -> None:
    dt = parse_data_type({"name": "numpy.datetime64", "configuration": {"unit": "μs", "scale_factor": 1}})
    assert dt.numpy == np.dtype("datetime64[us]")
    generic = parse_data_type(
        {"name": "numpy.timedelta64", "configuration": {"unit": "generic", "scale_factor": 1}}
    )
    assert generic.numpy == np.dtype("timedelta64")
    assert generic.to_json()["configuration"] == {"unit": "generic", "scale_factor": 1}
    assert np.isnat(generic.default_fill_value())


@pytest.mark.parametrize(
    "config",
    [
        None,
        {"unit": "s"},
        {"unit": "s", "scale_factor": 0},
        {"unit": "s", "scale_factor": 2**31},
        {"unit": "s", "scale_factor": True},
        {"unit": "sec", "scale_factor": 1},
        {"unit": "generic", "scale_factor": 2},
        {"unit": "s", "scale_factor": 1, "endian": "little"},
    ],
)
def test_time_bad_configurations(config) -> None:
    obj = (
        {"name": "numpy.datetime64"}
        if config is None
        else {"name": "numpy.datetime64", "configuration": config}
    )
    with pytest.raises(DataTypeError, match=r"numpy\.datetime64"):
        parse_data_type(obj)


def test_time_fill_values() -> None:
    dt = as_data_type("datetime64[10s]")
    nat = dt.parse_fill_value("NaT")
    assert np.isnat(nat) and nat.dtype == np.dtype("datetime64[10s]")
    assert dt.fill_value_to_json(nat) == -(2**63)
    assert np.isnat(dt.parse_fill_value(-(2**63)))
    assert dt.parse_fill_value(3) == np.datetime64(30, "s")
    assert dt.fill_value_to_json(np.datetime64("1970-01-01T00:01:00")) == 6
    assert dt.fill_value_to_json(dt.parse_fill_value(2**63 - 1)) == 2**63 - 1
    assert np.isnat(dt.default_fill_value())
    for bad in (2**63, -(2**63) - 1, 1.5, True, "2020-01-01", None, [1]):
        with pytest.raises(DataTypeError, match="fill value"):
            dt.parse_fill_value(bad)


def test_struct_forms_read_and_written() -> None:
    new = {
        "name": "struct",
        "configuration": {
            "fields": [
                {"name": "a", "data_type": "int32"},
                {
                    "name": "p",
                    "data_type": {
                        "name": "struct",
                        "configuration": {"fields": [{"name": "x", "data_type": "float32"}]},
                    },
                },
                {
                    "name": "t",
                    "data_type": {
                        "name": "numpy.datetime64",
                        "configuration": {"unit": "s", "scale_factor": 1},
                    },
                },
                {
                    "name": "s",
                    "data_type": {"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}},
                },
            ]
        },
    }
    dt = parse_data_type(new)
    assert isinstance(dt, StructDataType)
    assert dt.numpy == np.dtype([("a", "i4"), ("p", [("x", "f4")]), ("t", "M8[s]"), ("s", "S3")])
    assert dt.numpy.itemsize == 4 + 4 + 8 + 3  # packed, no padding
    assert dt.to_json() == new
    fill_json = {"a": -1, "p": {"x": "NaN"}, "t": "NaT", "s": "YWI="}
    fill = dt.parse_fill_value(fill_json)
    assert dt.fill_value_to_json(fill) == {"a": -1, "p": {"x": "NaN"}, "t": -(2**63), "s": "YWI="}
    legacy = {"name": "structured", "configuration": {"fields": [["a", "int32"], ["b", "uint8"]]}}
    ldt = parse_data_type(legacy)
    assert ldt.numpy == np.dtype([("a", "i4"), ("b", "u1")])
    assert ldt.to_json() == legacy
    assert ldt.fill_value_to_json(np.array((1, 2), dtype=ldt.numpy)[()]) == "AQAAAAI="
    assert ldt.parse_fill_value("AQAAAAI=").tolist() == (1, 2)
    assert data_type_from_numpy(np.dtype([("a", ">i4"), ("b", "u1")])).to_json()["name"] == "struct"


@pytest.mark.parametrize(
    "fields,match",
    [
        ([], "at least one"),
        ([{"name": "a", "data_type": "int8"}, {"name": "a", "data_type": "int8"}], "duplicate"),
        ([{"name": "a", "data_type": "string"}], "variable-length"),
        ([{"name": "", "data_type": "int8"}], "non-empty"),
        ([{"name": "a", "data_type": "nope"}], "field 'a'"),
        ([{"name": "a"}], "a field must"),
        ("a", "must be an array"),
    ],
)
def test_struct_bad_definitions(fields, match: str) -> None:
    with pytest.raises(DataTypeError, match=match):
        parse_data_type({"name": "struct", "configuration": {"fields": fields}})


def test_struct_fill_value_needs_every_field() -> None:
    dt = as_data_type(np.dtype([("a", "i4"), ("b", "f4")]))
    with pytest.raises(DataTypeError, match=r"missing fields \['b'\]"):
        dt.parse_fill_value({"a": 1})
    with pytest.raises(DataTypeError, match="unknown fields"):
        dt.parse_fill_value({"a": 1, "b": 2.0, "c": 3})
    with pytest.raises(DataTypeError, match="field 'a'"):
        dt.parse_fill_value({"a": 1.5, "b": 2.0})
    with pytest.raises(DataTypeError, match="expected 8 bytes"):
        dt.parse_fill_value("AAE=")


def test_sub_array_fields_are_refused() -> None:
    with pytest.raises(DataTypeError, match="field 'a'"):
        data_type_from_numpy(np.dtype([("a", "f4", (3,))]))


def test_bytes_fill_value_as_integer_array() -> None:
    dt = parse_data_type("bytes")
    assert dt.parse_fill_value([1, 2, 3]) == b"\x01\x02\x03"
    assert dt.fill_value_to_json(b"\x01\x02\x03") == "AQID"


def test_every_zarr_python_34_fixture_opens_in_one_listing() -> None:
    """The whole group lists: no member is unreadable (tree() would name it and why)."""
    group = z3.open_group(STORE, mode="r")
    members = group.members()
    assert sorted(members) == sorted(MANIFEST)
    text = group.tree()
    assert "unreadable" not in text
    assert "  struct_nested (3,) [('p', [('x', '<f4'), ('y', '<f4')]), ('t', '<M8[s]'), ('v', '<i2')]" in text
    assert "  timedelta64_3h (3,) timedelta64[3h]" in text


def test_aligned_struct_dtypes_are_stored_packed(tmp_path) -> None:
    aligned = np.dtype([("a", "u1"), ("b", "<f8")], align=True)  # 7 padding bytes in memory
    a = z3.create_array(tmp_path / "p.zarr", shape=(3,), dtype=aligned, chunks=(2,))
    assert a.dtype == np.dtype([("a", "u1"), ("b", "<f8")]) and a.dtype.itemsize == 9
    value = np.zeros(3, dtype=aligned)
    value["a"], value["b"] = [1, 2, 3], [0.5, 1.5, 2.5]
    a[...] = value
    got = a[...]
    assert got["a"].tolist() == [1, 2, 3] and got["b"].tolist() == [0.5, 1.5, 2.5]


def test_xarray_reads_the_new_data_types(tmp_path) -> None:
    import xarray as xr

    g = z3.open_group(tmp_path / "x.zarr", mode="w")
    chain = [
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "gzip", "configuration": {"level": 1}},
    ]
    values = {
        "when": np.array([0, 1, "NaT"], dtype="datetime64[10s]"),
        "span": np.array([5, -1, "NaT"], dtype="timedelta64[ms]"),
        "rec": np.array([(1, 0.5), (2, 1.5), (3, 2.5)], dtype=[("a", "<i4"), ("b", "<f4")]),
    }
    for name, v in values.items():
        g.create_array(name, shape=v.shape, dtype=v.dtype, chunks=(3,), dimension_names=("t",), codecs=chain)[
            ...
        ] = v
    ds = xr.open_dataset(tmp_path / "x.zarr", engine="zarr3")
    for name, v in values.items():
        assert ds[name].dtype == v.dtype
        assert ds[name].values.tobytes() == v.tobytes()


def test_struct_fill_value_given_as_a_tuple():
    dt = np.dtype([("a", "<i4"), ("b", "<f8")])
    a = z3.create_array(z3.MemoryStore(), shape=(3,), dtype=dt, fill_value=(1, 2.5))
    assert a[...].tolist() == [(1, 2.5)] * 3
