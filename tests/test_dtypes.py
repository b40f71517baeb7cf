"""Data types and fill values: every core type, every JSON fill-value form, and the extension hook."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np
import pytest

from zarr3_backend.core import dtypes
from zarr3_backend.core.dtypes import (
    DataType,
    as_data_type,
    data_type_from_numpy,
    default_fill_value,
    fill_value_to_json,
    parse_data_type,
    parse_fill_value,
    register_data_type,
)
from zarr3_backend.errors import DataTypeError, MetadataError

CORE = {
    "bool": "bool",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint32": "u4",
    "uint64": "u8",
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
    "complex64": "c8",
    "complex128": "c16",
}
INTS = [n for n in CORE if "int" in n]
FLOATS = ["float16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
UINT_OF = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(value: Any) -> int:
    """The IEEE bit pattern of a numpy float scalar."""
    return int(np.array(value).reshape(1).view(UINT_OF[value.dtype.itemsize])[0])


def through_json(obj: Any) -> Any:
    """What a reader gets back after the value went through a strictly valid JSON document."""
    return json.loads(json.dumps(obj, allow_nan=False))


def assert_names(err: pytest.ExceptionInfo, *parts: str) -> None:
    for part in parts:
        assert part in str(err.value), f"{part!r} not in {err.value!s}"


# --- data type names ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", CORE)
def test_core_names_map_to_numpy(name: str) -> None:
    dt = parse_data_type(name)
    assert dt.name == name
    assert dt.numpy == np.dtype(CORE[name])
    assert dt.itemsize == np.dtype(CORE[name]).itemsize
    assert dt.to_json() == name


@pytest.mark.parametrize("name", CORE)
def test_object_form_equals_short_hand(name: str) -> None:
    assert parse_data_type({"name": name}) == parse_data_type(name)
    assert parse_data_type({"name": name, "configuration": {}}) == parse_data_type(name)
    assert parse_data_type({"name": name, "must_understand": True}) == parse_data_type(name)


@pytest.mark.parametrize("bits_, size", [(8, 1), (16, 2), (24, 3), (64, 8), (1024, 128)])
def test_raw_types(bits_: int, size: int) -> None:
    dt = parse_data_type(f"r{bits_}")
    assert dt.numpy == np.dtype(f"V{size}")
    assert dt.itemsize == size
    assert dt.to_json() == f"r{bits_}"


@pytest.mark.parametrize(
    "name", ["r0", "r12", "r08", "r", "r-8", "R8", "float128", "int", "string?", "Float32"]
)
def test_unknown_or_invalid_names(name: str) -> None:
    with pytest.raises(DataTypeError) as err:
        parse_data_type(name)
    assert_names(err, repr(name))


def test_data_type_error_is_metadata_error() -> None:
    assert issubclass(DataTypeError, MetadataError)


@pytest.mark.parametrize(
    "obj",
    [3, None, ["float32"], {"configuration": {}}, {"name": ""}, {"name": "float32", "extra": 1}],
)
def test_malformed_data_type_values(obj: Any) -> None:
    with pytest.raises(DataTypeError, match="data_type"):
        parse_data_type(obj)


def test_core_type_refuses_configuration() -> None:
    with pytest.raises(DataTypeError) as err:
        parse_data_type({"name": "int32", "configuration": {"endian": "big"}})
    assert_names(err, "'int32'", "endian")


@pytest.mark.parametrize("name", CORE)
@pytest.mark.parametrize("order", ["<", ">", "="])
def test_from_numpy_any_byte_order(name: str, order: str) -> None:
    npdt = np.dtype(CORE[name]).newbyteorder(order)
    dt = data_type_from_numpy(npdt)
    assert dt == parse_data_type(name)
    assert dt.numpy.isnative


def test_from_numpy_raw_and_aliases() -> None:
    assert data_type_from_numpy("V3") == parse_data_type("r24")
    assert data_type_from_numpy(np.float32) == parse_data_type("float32")
    assert data_type_from_numpy(bool) == parse_data_type("bool")


# datetime64, timedelta64 and structured dtypes have extension types (tests/test_dtypes_zarr34.py)
@pytest.mark.parametrize("npdt", ["O", "(2,)i4", "V0", [("a", "(2,)i4")]])
def test_from_numpy_unsupported(npdt: Any) -> None:
    with pytest.raises(DataTypeError) as err:
        data_type_from_numpy(npdt)
    assert_names(err, "numpy dtype")


def test_from_numpy_rejects_non_dtypes() -> None:
    with pytest.raises(DataTypeError):
        data_type_from_numpy(None)
    with pytest.raises(DataTypeError, match="not a numpy dtype"):
        data_type_from_numpy("not-a-dtype")


def test_as_data_type_takes_zarr_names_and_numpy_spellings() -> None:
    assert as_data_type("r16") == parse_data_type("r16")
    assert as_data_type("f4") == parse_data_type("float32")
    assert as_data_type(">i2") == parse_data_type("int16")
    assert as_data_type(np.dtype("u8")) == parse_data_type("uint64")
    assert as_data_type({"name": "float64"}) == parse_data_type("float64")
    dt = parse_data_type("int8")
    assert as_data_type(dt) is dt


def test_data_type_normalises_byte_order() -> None:
    assert DataType("float32", np.dtype(">f4")).numpy == np.dtype("<f4").newbyteorder("=")


# --- fill values: bool and integers -------------------------------------------------------------
def test_bool_fill_values() -> None:
    dt = parse_data_type("bool")
    assert parse_fill_value(True, dt) is np.True_
    assert parse_fill_value(False, dt) is np.False_
    assert fill_value_to_json(np.True_, dt) is True
    for bad in [0, 1, "true", None, [True]]:
        with pytest.raises(DataTypeError) as err:
            parse_fill_value(bad, dt)
        assert_names(err, repr(bad), "'bool'")


@pytest.mark.parametrize("name", INTS)
def test_int_fill_range_edges(name: str) -> None:
    dt = parse_data_type(name)
    info = np.iinfo(dt.numpy)
    for v in (int(info.min), int(info.max), 0):
        got = parse_fill_value(v, dt)
        assert got.dtype == dt.numpy and int(got) == v
        out = fill_value_to_json(got, dt)
        assert type(out) is int and out == v
    for v in (int(info.min) - 1, int(info.max) + 1):
        with pytest.raises(DataTypeError) as err:
            parse_fill_value(v, dt)
        assert_names(err, str(v), repr(name), "range")


@pytest.mark.parametrize("bad", [1.5, 1.0, "1", True, None, [1], "NaN"])
def test_int_fill_wrong_forms(bad: Any) -> None:
    with pytest.raises(DataTypeError) as err:
        parse_fill_value(bad, parse_data_type("int32"))
    assert_names(err, repr(bad), "'int32'")


def test_int_fill_from_numpy_scalars() -> None:
    dt = parse_data_type("uint8")
    assert parse_fill_value(np.int64(255), dt) == 255
    assert parse_fill_value(np.float64(7.0), dt) == 7
    with pytest.raises(DataTypeError):
        parse_fill_value(np.int64(256), dt)
    with pytest.raises(DataTypeError):
        parse_fill_value(np.float64(7.5), dt)


# --- fill values: floats ------------------------------------------------------------------------
CANONICAL_NAN = {"float16": 0x7E00, "float32": 0x7FC00000, "float64": 0x7FF8000000000000}


@pytest.mark.parametrize("name", FLOATS)
def test_float_string_forms(name: str) -> None:
    dt = parse_data_type(name)
    nan = parse_fill_value("NaN", dt)
    assert nan.dtype == dt.numpy and bits(nan) == CANONICAL_NAN[name]
    assert parse_fill_value("Infinity", dt) == np.inf
    assert parse_fill_value("-Infinity", dt) == -np.inf
    assert fill_value_to_json(nan, dt) == "NaN"
    assert fill_value_to_json(np.inf, dt) == "Infinity"
    assert fill_value_to_json(-np.inf, dt) == "-Infinity"


@pytest.mark.parametrize("name", FLOATS)
def test_float_numbers(name: str) -> None:
    dt = parse_data_type(name)
    assert parse_fill_value(1, dt) == 1.0
    assert parse_fill_value(-2.5, dt) == -2.5
    assert parse_fill_value(0.1, dt) == dt.numpy.type(0.1)
    neg_zero = parse_fill_value(-0.0, dt)
    assert neg_zero == 0 and np.signbit(neg_zero)
    assert np.signbit(parse_fill_value(through_json(fill_value_to_json(neg_zero, dt)), dt))
    # a JSON number is rounded to the type: beyond the range it overflows to infinity
    assert parse_fill_value(10**400, dt) == np.inf


@pytest.mark.parametrize(
    ("name", "hex_", "expected"),
    [
        ("float16", "0x3c00", 1.0),
        ("float32", "0x3f800000", 1.0),
        ("float64", "0x3ff0000000000000", 1.0),
        ("float32", "0xC0000000", -2.0),
        ("float64", "0x7ff0000000000000", np.inf),
    ],
)
def test_float_hex_of_ordinary_values(name: str, hex_: str, expected: float) -> None:
    assert parse_fill_value(hex_, parse_data_type(name)) == expected


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("float16", 0x7E01),
        ("float16", 0x7C01),  # signalling NaN
        ("float16", 0xFE00),  # negative quiet NaN
        ("float32", 0x7FC00001),
        ("float32", 0x7F800001),
        ("float32", 0xFFC00000),
        ("float64", 0x7FF8000000000001),
        ("float64", 0x7FF0000000000001),
        ("float64", 0xFFF8000000000000),
    ],
)
def test_nan_payload_round_trips_bit_exact(name: str, payload: int) -> None:
    dt = parse_data_type(name)
    width = 2 * dt.itemsize
    text = f"0x{payload:0{width}x}"
    value = parse_fill_value(text, dt)
    assert np.isnan(value) and bits(value) == payload
    out = fill_value_to_json(value, dt)
    assert out == text  # a non-default NaN is written in hex, not as "NaN"
    assert bits(parse_fill_value(through_json(out), dt)) == payload


def test_nan_payload_kept_from_numpy_scalar() -> None:
    dt = parse_data_type("float32")
    raw = np.array([0x7FC0ABCD], dtype=np.uint32).view(np.float32)[0]
    assert bits(parse_fill_value(raw, dt)) == 0x7FC0ABCD
    assert fill_value_to_json(raw, dt) == "0x7fc0abcd"


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize(
    "bad",
    ["0x", "0x1", "0x7fc000000", "0xzzzz", "0X7e00", "nan", "inf", "+Infinity", "1.0", True, None, [1.0]],
)
def test_float_wrong_forms(name: str, bad: Any) -> None:
    dt = parse_data_type(name)
    with pytest.raises(DataTypeError) as err:
        parse_fill_value(bad, dt)
    assert_names(err, repr(bad), repr(name))


@pytest.mark.parametrize(
    ("name", "hex_"), [("float16", "0x7fc00000"), ("float32", "0x7e00"), ("float64", "0x7fc00000")]
)
def test_float_hex_of_wrong_width(name: str, hex_: str) -> None:
    with pytest.raises(DataTypeError) as err:
        parse_fill_value(hex_, parse_data_type(name))
    assert_names(err, hex_, repr(name), f"{2 * parse_data_type(name).itemsize} hex digits")


def test_every_float16_round_trips_bit_exact() -> None:
    dt = parse_data_type("float16")
    for pattern in range(2**16):
        value = np.array([pattern], dtype=np.uint16).view(np.float16)[0]
        back = parse_fill_value(through_json(fill_value_to_json(value, dt)), dt)
        assert bits(back) == pattern, hex(pattern)


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_random_float_bit_patterns_round_trip(name: str) -> None:
    dt = parse_data_type(name)
    rng = np.random.default_rng(42)
    utype = UINT_OF[dt.itemsize]
    patterns = rng.integers(0, np.iinfo(utype).max, size=3000, dtype=utype, endpoint=True)
    for value in patterns.view(dt.numpy):
        back = parse_fill_value(through_json(fill_value_to_json(value, dt)), dt)
        assert bits(back) == bits(value)


def test_float_json_is_the_shortest_decimal() -> None:
    assert fill_value_to_json(np.float32(0.1), parse_data_type("float32")) == 0.1
    assert fill_value_to_json(np.float16(0.1), parse_data_type("float16")) == 0.1
    assert fill_value_to_json(0.1, parse_data_type("float64")) == 0.1
    assert fill_value_to_json(np.float32(1e20), parse_data_type("float32")) == 1e20


# --- fill values: complex -----------------------------------------------------------------------
@pytest.mark.parametrize("name", COMPLEX)
def test_complex_pairs_in_every_float_form(name: str) -> None:
    dt = parse_data_type(name)
    comp = np.dtype(f"f{dt.itemsize // 2}")
    assert parse_fill_value([1, -2.5], dt) == complex(1, -2.5)
    v = parse_fill_value(["-Infinity", "NaN"], dt)
    assert v.real == -np.inf and np.isnan(v.imag)
    assert fill_value_to_json(v, dt) == ["-Infinity", "NaN"]
    assert fill_value_to_json(parse_fill_value(["Infinity", 0.5], dt), dt) == ["Infinity", 0.5]
    payload = 0x7FC00001 if comp.itemsize == 4 else 0x7FF8000000000001
    hex_ = f"0x{payload:0{2 * comp.itemsize}x}"
    v = parse_fill_value([hex_, 3], dt)
    parts = np.array(v).reshape(1).view(comp)
    assert bits(parts[0]) == payload and parts[1] == 3
    out = fill_value_to_json(v, dt)
    assert out == [hex_, 3.0]
    again = parse_fill_value(through_json(out), dt)
    assert np.array(again).tobytes() == np.array(v).tobytes()


@pytest.mark.parametrize("bad", [1.0, [1], [1, 2, 3], ["x", 1], [1, "0x7e00"], "NaN", None, {"re": 1}])
def test_complex_wrong_forms(bad: Any) -> None:
    with pytest.raises(DataTypeError) as err:
        parse_fill_value(bad, parse_data_type("complex64"))
    assert_names(err, repr(bad), "'complex64'")


def test_complex_from_python_and_numpy() -> None:
    dt = parse_data_type("complex128")
    assert parse_fill_value(1 + 2j, dt) == 1 + 2j
    assert parse_fill_value(np.complex64(3j), dt) == 3j
    assert fill_value_to_json(1 + 2j, dt) == [1.0, 2.0]


# --- fill values: raw ---------------------------------------------------------------------------
def test_raw_fill_values() -> None:
    dt = parse_data_type("r24")
    v = parse_fill_value([1, 2, 255], dt)
    assert isinstance(v, np.void) and v.tobytes() == b"\x01\x02\xff"
    assert fill_value_to_json(v, dt) == [1, 2, 255]
    assert parse_fill_value(b"abc", dt).tobytes() == b"abc"
    assert np.full(2, v, dtype=dt.numpy).tobytes() == b"\x01\x02\xff" * 2


@pytest.mark.parametrize(
    "bad", [[1, 2], [1, 2, 3, 4], [1, 2, 256], [1, 2, -1], [1, 2, True], [1, 2, 1.0], "AAAA", 0, None]
)
def test_raw_wrong_forms(bad: Any) -> None:
    with pytest.raises(DataTypeError) as err:
        parse_fill_value(bad, parse_data_type("r24"))
    assert_names(err, repr(bad), "'r24'")


def test_raw_bytes_extension_from_zarr_python() -> None:
    dt = parse_data_type({"name": "raw_bytes", "configuration": {"length_bytes": 2}})
    assert dt.numpy == np.dtype("V2")
    assert dt.to_json() == {"name": "raw_bytes", "configuration": {"length_bytes": 2}}
    v = parse_fill_value("AQI=", dt)
    assert v.tobytes() == b"\x01\x02"
    assert fill_value_to_json(v, dt) == "AQI="
    for bad in ["AQIDBA==", "not base64!"]:
        with pytest.raises(DataTypeError) as err:
            parse_fill_value(bad, dt)
        assert_names(err, repr(bad), "'raw_bytes'")
    for config in [None, {"length_bytes": 0}, {"length_bytes": 2, "x": 1}]:
        with pytest.raises(DataTypeError, match="raw_bytes"):
            parse_data_type({"name": "raw_bytes", "configuration": config})


# --- default fill values ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "json_"),
    [
        ("bool", False),
        ("int8", 0),
        ("uint64", 0),
        ("float16", 0.0),
        ("float64", 0.0),
        ("complex64", [0.0, 0.0]),
        ("r16", [0, 0]),
    ],
)
def test_default_fill_values(name: str, json_: Any) -> None:
    dt = parse_data_type(name)
    v = default_fill_value(dt)
    assert v.dtype == dt.numpy
    assert np.array(v).tobytes() == bytes(dt.itemsize)
    out = fill_value_to_json(v, dt)
    assert out == json_ and type(out) is type(json_)


# --- the extension hook -------------------------------------------------------------------------
@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test vanish after it."""
    monkeypatch.setattr(dtypes, "_registry", dict(dtypes._registry))
    monkeypatch.setattr(dtypes, "_numpy_claimers", list(dtypes._numpy_claimers))


@pytest.mark.usefixtures("clean_registry")
def test_register_a_fixed_extension_type() -> None:
    @register_data_type
    class Kelvin(DataType):
        """float32 temperatures whose fill value is written as {"kelvin": x}."""

        json_names: ClassVar[tuple[str, ...]] = ("test.kelvin",)
        fixed_numpy: ClassVar[np.dtype] = np.dtype("float32")

        def parse_fill_value(self, value: Any) -> Any:
            if not (isinstance(value, dict) and set(value) == {"kelvin"}):
                raise DataTypeError(f"fill value {value!r} is not valid for data type {self.name!r}")
            return np.float32(value["kelvin"])

        def fill_value_to_json(self, value: Any) -> Any:
            return {"kelvin": float(value)}

    dt = parse_data_type("test.kelvin")
    assert isinstance(dt, Kelvin) and dt.numpy == np.dtype("float32")
    assert parse_data_type({"name": "test.kelvin"}) == dt
    assert parse_fill_value({"kelvin": 273.5}, dt) == np.float32(273.5)
    assert fill_value_to_json(np.float32(1.5), dt) == {"kelvin": 1.5}
    assert default_fill_value(dt) == 0  # inherited from the numpy kind
    with pytest.raises(DataTypeError, match=r"test\.kelvin"):
        parse_fill_value(1.0, dt)
    assert data_type_from_numpy("float32") == parse_data_type("float32")  # claims no numpy dtype
    with pytest.raises(DataTypeError, match="no configuration"):
        parse_data_type({"name": "test.kelvin", "configuration": {"x": 1}})


@pytest.mark.usefixtures("clean_registry")
def test_register_a_configured_type_that_claims_a_numpy_dtype() -> None:
    @register_data_type
    class FixedAscii(DataType):
        json_names: ClassVar[tuple[str, ...]] = ("test.fixed_ascii",)

        @classmethod
        def from_json_object(cls, name: str, configuration: Any) -> DataType:
            return cls(name, np.dtype(f"S{configuration['length_bytes']}"))

        @classmethod
        def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
            return cls("test.fixed_ascii", dtype) if dtype.kind == "S" else None

        def to_json(self) -> Any:
            return {"name": self.name, "configuration": {"length_bytes": self.itemsize}}

        def parse_fill_value(self, value: Any) -> Any:
            return np.bytes_(value.encode("ascii"))

        def fill_value_to_json(self, value: Any) -> Any:
            return bytes(value).decode("ascii")

        def default_fill_value(self) -> Any:
            return np.bytes_(b"")

    dt = data_type_from_numpy("S5")
    assert isinstance(dt, FixedAscii) and dt.itemsize == 5
    assert parse_data_type(dt.to_json()) == dt
    assert as_data_type("S5") == dt
    assert fill_value_to_json(parse_fill_value("hi", dt), dt) == "hi"
    assert default_fill_value(dt) == b""
    assert "test.fixed_ascii" in dtypes.registered_data_types()


@pytest.mark.usefixtures("clean_registry")
def test_register_names_override_and_validation() -> None:
    class Alias(DataType):
        fixed_numpy: ClassVar[np.dtype] = np.dtype("int16")

    register_data_type(Alias, names=("test.alias_a", "test.alias_b"))
    assert parse_data_type("test.alias_b") == Alias("test.alias_b", np.dtype("int16"))
    with pytest.raises(TypeError, match="no names"):
        register_data_type(type("Nameless", (DataType,), {}))
    with pytest.raises(TypeError, match="DataType subclass"):
        register_data_type(int)  # type: ignore[arg-type]
