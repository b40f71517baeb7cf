"""Text and byte-string data types, spelled as zarr-python 3.1 writes them in ``zarr.json``.

- ``"string"``: variable-length UTF-8 (``vlen-utf8`` codec), numpy ``StringDType`` as
  zarr-python and xarray's zarr engine return it (object on numpy < 2); fill value a JSON string.
- ``"variable_length_bytes"`` (also read as ``"bytes"``): variable-length bytes (``vlen-bytes``
  codec), numpy object holding ``bytes``; fill value base64 text.
- ``{"name": "fixed_length_utf32", "configuration": {"length_bytes": 4n}}``: numpy ``<U{n}``;
  fill value a JSON string.
- ``{"name": "null_terminated_bytes", "configuration": {"length_bytes": n}}``: numpy ``S{n}``
  (what xarray writes for byte strings and characters); fill value base64 text.

Importing this module registers them with :func:`zarr3_backend.core.dtypes.register_data_type`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import DataTypeError
from .dtypes import DataType, register_data_type

#: The numpy dtype of "string" arrays: StringDType when numpy has it (numpy >= 2).
STRING_NUMPY: np.dtype = np.dtypes.StringDType() if hasattr(np.dtypes, "StringDType") else np.dtype(object)


def _bad_fill(value: Any, dt: DataType, why: str) -> DataTypeError:
    return DataTypeError(f"fill value {value!r} is not valid for data type {dt.name!r}: {why}")


def _no_config(name: str, configuration: Mapping[str, Any] | None) -> None:
    if configuration:
        raise DataTypeError(f"data type {name!r} takes no configuration, got {dict(configuration)!r}")


def _length_bytes(name: str, configuration: Mapping[str, Any] | None, multiple: int) -> int:
    config = dict(configuration or {})
    length = config.pop("length_bytes", None)
    if config:
        raise DataTypeError(f"data type {name!r}: unknown configuration keys {sorted(config)}")
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0 or length % multiple:
        raise DataTypeError(
            f"data type {name!r}: 'length_bytes' must be a positive multiple of {multiple}, got {length!r}"
        )
    return length


def _b64decode(value: Any, dt: DataType) -> bytes:
    if isinstance(value, bytes | np.bytes_):
        return bytes(value)
    if isinstance(value, list) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in value
    ):
        return bytes(value)  # the "bytes" spec's other fill form: an array of byte values
    if not isinstance(value, str):
        raise _bad_fill(value, dt, "expected base64 text or an array of byte values")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, ValueError) as e:
        raise _bad_fill(value, dt, f"not valid base64 ({e})") from None


def _b64encode(value: bytes) -> str:
    return base64.b64encode(bytes(value)).decode("ascii")


@register_data_type
@dataclass(frozen=True)
class VariableLengthUTF8(DataType):
    """``"string"``: variable-length UTF-8 text; numpy ``StringDType``."""

    json_names: ClassVar[tuple[str, ...]] = ("string",)

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        _no_config(name, configuration)
        return cls("string", STRING_NUMPY)

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind == "T" or (dtype.kind == "U" and dtype.itemsize == 0):
            return cls("string", STRING_NUMPY)
        if dtype.kind == "O" and (dtype.metadata or {}).get("element_type") is str:
            return cls("string", STRING_NUMPY)  # xarray's object dtype for str (plain "O" is ambiguous)
        return None

    def parse_fill_value(self, value: Any) -> str:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if not isinstance(value, str):
            raise _bad_fill(value, self, "expected a string")
        return str(value)

    def fill_value_to_json(self, value: Any) -> str:
        return self.parse_fill_value(value)

    def default_fill_value(self) -> str:
        return ""


@register_data_type
@dataclass(frozen=True)
class VariableLengthBytes(DataType):
    """``"variable_length_bytes"`` (alias ``"bytes"``): variable-length byte strings; numpy object."""

    json_names: ClassVar[tuple[str, ...]] = ("variable_length_bytes", "bytes")

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        _no_config(name, configuration)
        return cls(name, np.dtype(object))

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind == "O" and (dtype.metadata or {}).get("element_type") is bytes:
            return cls("variable_length_bytes", np.dtype(object))
        return None

    def parse_fill_value(self, value: Any) -> bytes:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        return _b64decode(value, self)

    def fill_value_to_json(self, value: Any) -> str:
        return _b64encode(self.parse_fill_value(value))

    def default_fill_value(self) -> bytes:
        return b""


@register_data_type
@dataclass(frozen=True)
class FixedLengthUTF32(DataType):
    """``fixed_length_utf32``: fixed-length UCS-4 text of ``length_bytes / 4`` characters; numpy ``<U{n}``."""

    json_names: ClassVar[tuple[str, ...]] = ("fixed_length_utf32",)

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        return cls(name, np.dtype(f"U{_length_bytes(name, configuration, 4) // 4}"))

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind == "U" and dtype.itemsize > 0:
            return cls("fixed_length_utf32", dtype)
        return None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"length_bytes": self.itemsize}}

    def parse_fill_value(self, value: Any) -> np.str_:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if not isinstance(value, str):
            raise _bad_fill(value, self, "expected a string")
        n = self.itemsize // 4
        if len(value) > n:
            raise _bad_fill(value, self, f"longer than {n} characters")
        return np.str_(value)

    def fill_value_to_json(self, value: Any) -> str:
        return str(self.parse_fill_value(value))

    def default_fill_value(self) -> np.str_:
        return np.str_("")


@register_data_type
@dataclass(frozen=True)
class NullTerminatedBytes(DataType):
    """``null_terminated_bytes``: fixed-length byte strings (numpy ``S{n}``); fill value base64."""

    json_names: ClassVar[tuple[str, ...]] = ("null_terminated_bytes",)

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        return cls(name, np.dtype(f"S{_length_bytes(name, configuration, 1)}"))

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind == "S" and dtype.itemsize > 0:
            return cls("null_terminated_bytes", dtype)
        return None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"length_bytes": self.itemsize}}

    def parse_fill_value(self, value: Any) -> np.bytes_:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        raw = _b64decode(value, self)
        if len(raw) > self.itemsize:
            raise _bad_fill(value, self, f"longer than {self.itemsize} bytes")
        return np.bytes_(raw)

    def fill_value_to_json(self, value: Any) -> str:
        return _b64encode(self.parse_fill_value(value))

    def default_fill_value(self) -> np.bytes_:
        return np.bytes_(b"")


TEXT_DATA_TYPES: tuple[type[DataType], ...] = (
    VariableLengthUTF8,
    VariableLengthBytes,
    FixedLengthUTF32,
    NullTerminatedBytes,
)
