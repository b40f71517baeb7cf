"""The ``struct`` data type (zarr-extensions spec) and its legacy spelling ``structured``.

``{"name": "struct", "configuration": {"fields": [{"name": "x", "data_type": "float32"}, ...]}}``
is a packed numpy structured dtype (fields in order, no padding; nested structs allowed). Every
field has a fixed size. The fill value is an object mapping every field name to that field's
fill value (``{"x": 0.0, "y": 1.5}``), which is what zarr-python 3.4 writes.

zarr-python 3.1 wrote ``{"name": "structured", "configuration": {"fields": [["x", "float32"],
...]}}`` with a base64 fill value; both forms are read, and an array read in the legacy form
is written back in it (so a metadata rewrite keeps older readers working). New arrays are
written as ``struct``. Importing :mod:`zarr3_backend.core.dtypes` registers it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import DataTypeError
from ._extension import check_config_keys
from .dtypes import DataType, data_type_from_numpy, parse_data_type, register_data_type

__all__ = ["StructDataType"]

LEGACY_NAME = "structured"


def _bad_fill(value: Any, dt: DataType, why: str) -> DataTypeError:
    return DataTypeError(f"fill value {value!r} is not valid for data type {dt.name!r}: {why}")


@register_data_type
@dataclass(frozen=True)
class StructDataType(DataType):
    """``struct``: fixed-size records of named, typed fields; a packed numpy structured dtype."""

    json_names: ClassVar[tuple[str, ...]] = ("struct", LEGACY_NAME)

    #: ``(field name, field data type)`` in declaration (= byte) order.
    fields: tuple[tuple[str, DataType], ...] = field(default=())

    @classmethod
    def from_fields(cls, name: str, fields: Sequence[tuple[str, DataType]]) -> StructDataType:
        """Build from ordered ``(name, DataType)`` pairs, checking the spec's rules on them."""
        where = f"data type {name!r}"
        if not fields:
            raise DataTypeError(f"{where}: 'fields' must list at least one field")
        seen: set[str] = set()
        for fname, fdt in fields:
            if not isinstance(fname, str) or not fname:
                raise DataTypeError(f"{where}: field names must be non-empty strings, got {fname!r}")
            if fname in seen:
                raise DataTypeError(f"{where}: duplicate field name {fname!r}")
            seen.add(fname)
            if fdt.numpy.hasobject or fdt.numpy.itemsize == 0 or fdt.numpy.kind in "OT":
                raise DataTypeError(
                    f"{where}: field {fname!r} has the variable-length data type {fdt.name!r}"
                )
        numpy = np.dtype([(fname, fdt.numpy) for fname, fdt in fields])
        return cls(name, numpy, tuple(fields))

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        where = f"data type {name!r}"
        if configuration is None:
            raise DataTypeError(f"{where} needs a configuration with 'fields'")
        config = check_config_keys(configuration, {"fields"}, where, DataTypeError)
        raw = config.get("fields")
        if not isinstance(raw, list):
            raise DataTypeError(f"{where}: 'fields' must be an array, got {raw!r}")
        fields = []
        for item in raw:
            if isinstance(item, Mapping) and set(item) == {"name", "data_type"}:
                fname, fjson = item["name"], item["data_type"]
            elif isinstance(item, list) and len(item) == 2:  # the legacy ``[name, data_type]`` pair
                fname, fjson = item
            else:
                raise DataTypeError(f"{where}: a field must be {{'name', 'data_type'}}, got {item!r}")
            try:
                fdt = parse_data_type(fjson)
            except DataTypeError as e:
                raise DataTypeError(f"{where}: field {fname!r}: {e}") from None
            fields.append((fname, fdt))
        return cls.from_fields(name, fields)

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        if dtype.fields is None:
            return None
        fields = []
        for fname in dtype.names:
            try:
                fields.append((fname, data_type_from_numpy(dtype.fields[fname][0])))
            except DataTypeError as e:
                raise DataTypeError(f"numpy dtype {dtype!r}: field {fname!r}: {e}") from None
        return cls.from_fields("struct", fields)

    @property
    def is_legacy(self) -> bool:
        """True for zarr-python 3.1's ``structured`` spelling (pairs, base64 fill values)."""
        return self.name == LEGACY_NAME

    def as_legacy(self) -> StructDataType:
        """The same type in zarr-python 3.1's ``structured`` spelling (nested structs too), for
        arrays that zarr-python < 3.4 must read."""
        fields = tuple(
            (fname, fdt.as_legacy() if isinstance(fdt, StructDataType) else fdt) for fname, fdt in self.fields
        )
        return type(self)(LEGACY_NAME, self.numpy, fields)

    def to_json(self) -> dict[str, Any]:
        if self.is_legacy:
            fields: list[Any] = [[fname, fdt.to_json()] for fname, fdt in self.fields]
        else:
            fields = [{"name": fname, "data_type": fdt.to_json()} for fname, fdt in self.fields]
        return {"name": self.name, "configuration": {"fields": fields}}

    def parse_fill_value(self, value: Any) -> np.void:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if isinstance(value, Mapping):
            missing = [fname for fname, _ in self.fields if fname not in value]
            extra = sorted(set(value) - {fname for fname, _ in self.fields})
            if missing or extra:
                why = f"missing fields {missing}" if missing else f"unknown fields {extra}"
                raise _bad_fill(value, self, f"{why} (every field needs a fill value)")
            parts = []
            for fname, fdt in self.fields:
                try:
                    parts.append(fdt.parse_fill_value(value[fname]))
                except DataTypeError as e:
                    raise _bad_fill(value, self, f"field {fname!r}: {e}") from None
            return np.array([tuple(parts)], dtype=self.numpy)[0]
        if isinstance(value, str):  # base64 of the packed native-order bytes (zarr-python 3.1)
            try:
                value = base64.b64decode(value.encode("ascii"), validate=True)
            except (binascii.Error, ValueError) as e:
                raise _bad_fill(value, self, f"not valid base64 ({e})") from None
        if isinstance(value, bytes | bytearray):
            if len(value) != self.itemsize:
                raise _bad_fill(value, self, f"expected {self.itemsize} bytes, got {len(value)}")
            return np.frombuffer(bytes(value), dtype=self.numpy)[0]
        if isinstance(value, tuple | list):  # user input: the field values, each checked by its type
            if len(value) != len(self.fields):
                raise _bad_fill(value, self, f"{len(value)} values for {len(self.fields)} fields")
            return self.parse_fill_value({fname: v for (fname, _), v in zip(self.fields, value, strict=True)})
        if isinstance(value, np.void):  # a record
            try:
                return np.array([value.item()], dtype=self.numpy)[0]
            except (TypeError, ValueError, OverflowError) as e:
                raise _bad_fill(value, self, str(e)) from None
        raise _bad_fill(value, self, "expected an object mapping each field to its fill value")

    def fill_value_to_json(self, value: Any) -> Any:
        """An object of per-field JSON fill values; base64 text for the legacy ``structured``."""
        record = self.parse_fill_value(value)
        if self.is_legacy:
            return base64.b64encode(record.tobytes()).decode("ascii")
        return {fname: fdt.fill_value_to_json(record[fname]) for fname, fdt in self.fields}

    def default_fill_value(self) -> np.void:
        """All-zero bytes, as zarr-python chooses when no fill value is given."""
        return np.zeros((), dtype=self.numpy)[()]
