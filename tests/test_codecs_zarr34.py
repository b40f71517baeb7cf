"""The ``cast_value`` and ``scale_offset`` codecs, against what zarr-python 3.4 writes.

Each fixture under ``tests/fixtures/zarr34`` was written by zarr-python 3.4 (with its
``cast-value-rs`` backend): we read it exactly, and writing the same values with the same
codecs stores the same encoded elements, for every rounding mode and out-of-range rule.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend.codecs import ChunkSpec, codec_from_json, get_codec_class, registered_codecs
from zarr3_backend.codecs.cast_value import CastValueCodec
from zarr3_backend.codecs.scale_offset import ScaleOffsetCodec
from zarr3_backend.errors import CodecError

FIXTURES = Path(__file__).parent / "fixtures" / "zarr34"
STORE = FIXTURES / "store"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())["arrays"]
NAMES = sorted(n for n in MANIFEST if n.startswith(("cast", "scale_offset")))


def test_registered_by_name() -> None:
    assert get_codec_class("cast_value") is CastValueCodec
    assert get_codec_class("scale_offset") is ScaleOffsetCodec
    assert {"cast_value", "scale_offset"} <= set(registered_codecs())


@pytest.mark.parametrize("name", NAMES)
def test_zarr_python_34_arrays_read_exactly(name: str) -> None:
    a = z3.open_array(STORE, path=name, mode="r")
    expected = np.load(FIXTURES / f"{name}.npy")
    got = a[...]
    assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()  # NaN, -0.0 included
    assert a.metadata.to_json()["codecs"] == json.loads((STORE / name / "zarr.json").read_text())["codecs"]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "cast_sharded"])
def test_we_store_what_zarr_python_34_stores(tmp_path, name: str) -> None:
    theirs = json.loads((STORE / name / "zarr.json").read_text())
    a = z3.create_array(
        tmp_path / "o.zarr",
        shape=tuple(theirs["shape"]),
        dtype=theirs["data_type"],
        chunks=tuple(theirs["chunk_grid"]["configuration"]["chunk_shape"]),
        codecs=theirs["codecs"],
        fill_value=theirs["fill_value"],
    )
    assert a.metadata.to_json()["codecs"] == theirs["codecs"]
    a[...] = np.load(FIXTURES / f"{name}.npy")
    keys = sorted(p.relative_to(STORE / name) for p in (STORE / name).rglob("c/*") if p.is_file())
    assert keys
    for key in keys:
        ours = gzip.decompress((tmp_path / "o.zarr" / key).read_bytes())
        assert ours == gzip.decompress((STORE / name / key).read_bytes()), key


def test_sharded_cast_round_trip(tmp_path) -> None:
    expected = np.load(FIXTURES / "cast_sharded.npy")
    theirs = json.loads((STORE / "cast_sharded" / "zarr.json").read_text())
    a = z3.create_array(
        tmp_path / "s.zarr", shape=(4, 4), dtype="float32", chunks=(4, 4), codecs=theirs["codecs"]
    )
    a[...] = np.linspace(0, 10, 16, dtype="float32").reshape(4, 4)
    np.testing.assert_array_equal(a[...], expected)
    np.testing.assert_array_equal(a[1:3, 2], expected[1:3, 2])


# --- cast_value rules -------------------------------------------------------------------------------
def cast(config: dict, values, src: str) -> np.ndarray:
    codec = codec_from_json({"name": "cast_value", "configuration": config})
    spec = ChunkSpec((len(values),), np.dtype(src), np.dtype(src).type(0))
    codec.validate(spec)
    return codec.encode(np.array(values, dtype=src), spec)


@pytest.mark.parametrize(
    "rounding,expected",
    [
        ("nearest-even", [0, 2, 2, -2, 2]),
        ("towards-zero", [0, 1, 2, -2, 1]),
        ("towards-positive", [1, 2, 3, -2, 2]),
        ("towards-negative", [0, 1, 2, -3, 1]),
        ("nearest-away", [1, 2, 3, -3, 2]),
    ],
)
def test_float_to_int_rounding(rounding: str, expected: list) -> None:
    assert (
        cast({"data_type": "int8", "rounding": rounding}, [0.5, 1.5, 2.5, -2.5, 1.7], "float64").tolist()
        == expected
    )


def test_out_of_range_rules() -> None:
    values = [-300, -129, 127, 128, 32767]
    assert cast({"data_type": "int8", "out_of_range": "clamp"}, values, "int16").tolist() == [
        -128,
        -128,
        127,
        127,
        127,
    ]
    assert cast({"data_type": "int8", "out_of_range": "wrap"}, values, "int16").tolist() == [
        -44,
        127,
        127,
        -128,
        -1,
    ]
    assert cast({"data_type": "int16", "out_of_range": "wrap"}, [32768, 32769, -32769], "int64").tolist() == [
        -32768,
        -32767,
        32767,
    ]
    assert cast({"data_type": "uint64", "out_of_range": "clamp"}, [-1, 5], "int8").tolist() == [0, 5]
    assert cast({"data_type": "int64", "out_of_range": "clamp"}, [2**64 - 1], "uint64").tolist() == [
        2**63 - 1
    ]
    with pytest.raises(CodecError, match=r"128.*int8"):
        cast({"data_type": "int8"}, [128], "int16")
    with pytest.raises(CodecError, match="nan"):
        cast({"data_type": "int8", "out_of_range": "clamp"}, [np.nan], "float32")


def test_float_targets_keep_nan_infinity_and_signed_zero() -> None:
    out = cast({"data_type": "float16"}, [np.nan, np.inf, -np.inf, -0.0, 0.1], "float64")
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == -np.inf
    assert np.signbit(out[3]) and out[4] == np.float16(0.1)
    with pytest.raises(CodecError, match="finite range of float16"):
        cast({"data_type": "float16"}, [70000.0], "float64")
    assert cast({"data_type": "float16", "out_of_range": "clamp"}, [70000.0, -7e4], "float64").tolist() == [
        np.inf,
        -np.inf,
    ]


def test_directed_float_rounding() -> None:
    x = 1 + 2.0**-11  # halfway between float16 1.0 and 1.0009765625
    up, down = float(np.nextafter(np.float16(1), np.float16(2))), 1.0
    assert cast({"data_type": "float16", "rounding": "nearest-even"}, [x], "float64").tolist() == [down]
    assert cast({"data_type": "float16", "rounding": "nearest-away"}, [x, -x], "float64").tolist() == [
        up,
        -up,
    ]
    assert cast(
        {"data_type": "float16", "rounding": "towards-positive"}, [1 + 2.0**-20], "float64"
    ).tolist() == [up]
    assert cast(
        {"data_type": "float16", "rounding": "towards-negative"}, [-(1 + 2.0**-20)], "float64"
    ).tolist() == [-up]
    assert cast({"data_type": "float16", "rounding": "towards-zero"}, [1.0009], "float64").tolist() == [down]


def test_integer_to_float_rounding_is_exact() -> None:
    big = [2**24 + 1, -(2**24) - 1]
    assert cast({"data_type": "float32"}, big, "int64").tolist() == [2.0**24, -(2.0**24)]
    assert cast({"data_type": "float32", "rounding": "towards-positive"}, big, "int64").tolist() == [
        2.0**24 + 2,
        -(2.0**24),
    ]
    assert cast({"data_type": "float32", "rounding": "nearest-away"}, big, "int64").tolist() == [
        2.0**24 + 2,
        -(2.0**24) - 2,
    ]


def test_scalar_map_comes_first_and_first_key_wins() -> None:
    config = {"data_type": "uint8", "scalar_map": {"encode": [["NaN", 0], ["NaN", 9], [1.0, 200]]}}
    assert cast(config, [np.nan, 1.0, 2.0], "float64").tolist() == [0, 200, 2]
    codec = codec_from_json({"name": "cast_value", "configuration": config})
    assert codec.to_json()["configuration"]["scalar_map"] == config["scalar_map"]


def test_fill_value_must_survive_the_round_trip(tmp_path) -> None:
    with pytest.raises(CodecError, match="does not survive"):
        z3.create_array(
            tmp_path / "f.zarr",
            shape=(4,),
            dtype="float32",
            chunks=(4,),
            fill_value=0.5,
            codecs=[{"name": "cast_value", "configuration": {"data_type": "int8"}}, "bytes"],
        )
    with pytest.raises(CodecError, match="nan"):  # a NaN fill needs a scalar_map entry for an integer target
        z3.create_array(
            tmp_path / "g.zarr",
            shape=(4,),
            dtype="float32",
            chunks=(4,),
            fill_value=np.nan,
            codecs=[{"name": "cast_value", "configuration": {"data_type": "uint8"}}, "bytes"],
        )


@pytest.mark.parametrize(
    "config,match",
    [
        ({}, "'data_type' is required"),
        ({"data_type": "bfloat16"}, "'data_type' must be one of"),
        ({"data_type": "int8", "rounding": "up"}, "'rounding'"),
        ({"data_type": "float32", "out_of_range": "wrap"}, "'wrap' needs an integer"),
        ({"data_type": "int8", "out_of_range": "saturate"}, "'out_of_range'"),
        ({"data_type": "int8", "extra": 1}, "unknown configuration key 'extra'"),
        ({"data_type": "int8", "scalar_map": {"encode": [[1]]}}, r"\[input, output\] pairs"),
        ({"data_type": "int8", "scalar_map": {"both": []}}, "unknown configuration key 'both'"),
    ],
)
def test_cast_value_bad_configurations(config: dict, match: str) -> None:
    with pytest.raises(CodecError, match=match):
        codec_from_json({"name": "cast_value", "configuration": config})


def test_cast_value_refuses_non_numeric_data(tmp_path) -> None:
    with pytest.raises(CodecError, match="integer and floating-point"):
        z3.create_array(
            tmp_path / "b.zarr",
            shape=(2,),
            dtype="bool",
            chunks=(2,),
            codecs=[{"name": "cast_value", "configuration": {"data_type": "uint8"}}, "bytes"],
        )
    with pytest.raises(CodecError, match="scalar_map encode"):
        cast({"data_type": "uint8", "scalar_map": {"encode": [["NaN", 300]]}}, [1.0], "float32")


# --- scale_offset rules ---------------------------------------------------------------------------
def scale_offset(config: dict | None, dtype: str) -> tuple[ScaleOffsetCodec, ChunkSpec]:
    codec = codec_from_json({"name": "scale_offset", "configuration": config} if config else "scale_offset")
    spec = ChunkSpec((3,), np.dtype(dtype), np.dtype(dtype).type(0))
    codec.validate(spec)
    return codec, spec


def test_scale_offset_float_arithmetic_stays_in_the_data_type() -> None:
    codec, spec = scale_offset({"offset": 5, "scale": 0.1}, "float32")
    x = np.array([5.0, 15.0, -5.0], dtype="float32")
    enc = codec.encode(x, spec)
    assert enc.dtype == np.float32
    assert enc.tolist() == ((x - np.float32(5)) * np.float32(0.1)).tolist()
    assert codec.decode(enc, spec).tolist() == (enc / np.float32(0.1) + np.float32(5)).tolist()
    assert codec.to_json() == {"name": "scale_offset", "configuration": {"offset": 5, "scale": 0.1}}
    assert codec_from_json("scale_offset").to_json() == {"name": "scale_offset"}
    assert scale_offset({"scale": "Infinity"}, "float64")[0].to_json()["configuration"] == {
        "scale": "Infinity"
    }


def test_scale_offset_integers_never_wrap() -> None:
    codec, spec = scale_offset({"offset": 1000, "scale": 2}, "uint16")
    assert codec.encode(np.array([1000, 1010, 33767], dtype="uint16"), spec).tolist() == [0, 20, 65534]
    with pytest.raises(CodecError, match="outside the range of uint16"):
        codec.encode(np.array([999], dtype="uint16"), spec)
    with pytest.raises(CodecError, match="remainder"):
        codec.decode(np.array([3], dtype="uint16"), spec)
    assert codec.decode(np.array([0, 20, 65534], dtype="uint16"), spec).tolist() == [1000, 1010, 33767]
    big, spec64 = scale_offset({"offset": 1, "scale": 2}, "uint64")  # beyond int64: Python ints
    assert big.encode(np.array([2**63], dtype="uint64"), spec64).tolist() == [2**64 - 2]
    assert big.decode(np.array([2**64 - 2], dtype="uint64"), spec64).tolist() == [2**63]
    with pytest.raises(CodecError, match="outside the range of uint64"):
        big.encode(np.array([2**63 + 1], dtype="uint64"), spec64)
    i64, spec_i = scale_offset({"scale": 2}, "int64")
    with pytest.raises(CodecError, match="outside the range of int64"):
        i64.encode(np.array([2**62], dtype="int64"), spec_i)


@pytest.mark.parametrize(
    "config,dtype,match",
    [
        ({"scale": 0}, "int32", "must not be zero"),
        ({"scale": "0x0000"}, "float16", "must not be zero"),
        ({"offset": 0.5}, "int32", "offset 0.5 is not a int32 value"),
        ({"offset": "NaN"}, "int8", "offset 'NaN'"),
        ({"offset": 300}, "uint8", "out of range"),
        ({"bias": 1}, "int32", "unknown configuration key 'bias'"),
        ({"scale": True}, "int32", "must be a number"),
        ({"scale": 2}, "bool", "integer and floating-point"),
    ],
)
def test_scale_offset_bad_configurations(config: dict, dtype: str, match: str) -> None:
    with pytest.raises(CodecError, match=match):
        scale_offset(config, dtype)


def test_scale_offset_fill_value_is_encoded_for_the_next_codec(tmp_path) -> None:
    a = z3.create_array(
        tmp_path / "f.zarr",
        shape=(6,),
        dtype="uint16",
        chunks=(3,),
        fill_value=1000,
        codecs=[
            {"name": "scale_offset", "configuration": {"offset": 1000}},
            {"name": "cast_value", "configuration": {"data_type": "uint8"}},
            "bytes",
        ],
    )
    assert a.metadata.codec_chain().specs[-1].fill_value == 0
    a[:3] = [1000, 1001, 1255]
    np.testing.assert_array_equal(a[...], [1000, 1001, 1255, 1000, 1000, 1000])
    assert not (tmp_path / "f.zarr" / "c" / "1").exists()
    with pytest.raises(CodecError, match="uint8"):
        a[3:] = 1256  # 256 after the offset: out of uint8's range and no out_of_range rule
