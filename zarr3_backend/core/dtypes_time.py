"""The ``numpy.datetime64`` and ``numpy.timedelta64`` data types (zarr-extensions specs).

JSON form ``{"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 10}}``
is numpy ``datetime64[10s]``; elements are 64-bit signed integers (byte order from the
``bytes`` codec). The fill value is a JSON integer in ``[-2**63, 2**63 - 1]`` or ``"NaT"``
(``-2**63``, which is also how zarr-python writes NaT). With no fill value given the fill is
NaT, as zarr-python chooses.

Importing :mod:`zarr3_backend.core.dtypes` registers them.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import DataTypeError
from ._extension import check_config_keys
from .dtypes import DataType, register_data_type

__all__ = ["DateTime64DataType", "TimeDelta64DataType", "TIME_UNITS"]

#: The units of the spec; "μs" is read as numpy's "us" (numpy treats them as one unit).
TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "μs", "ns", "ps", "fs", "as", "generic")
_MAX_SCALE = 2**31 - 1
_NAT = -(2**63)


def _bad_fill(value: Any, dt: DataType, why: str) -> DataTypeError:
    return DataTypeError(f"fill value {value!r} is not valid for data type {dt.name!r}: {why}")


@dataclass(frozen=True)
class _TimeDataType(DataType):
    """Shared rules of the two time types; ``numpy_kind`` is numpy's ``datetime64``/``timedelta64``."""

    numpy_kind: ClassVar[str] = ""
    numpy_char: ClassVar[str] = ""

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        if configuration is None:
            raise DataTypeError(f"data type {name!r} needs a configuration with 'unit' and 'scale_factor'")
        config = check_config_keys(
            configuration, {"unit", "scale_factor"}, f"data type {name!r}", DataTypeError
        )
        unit, scale = config.get("unit"), config.get("scale_factor")
        if unit not in TIME_UNITS:
            raise DataTypeError(f"data type {name!r}: 'unit' must be one of {list(TIME_UNITS)}, got {unit!r}")
        if not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= _MAX_SCALE:
            raise DataTypeError(
                f"data type {name!r}: 'scale_factor' must be an integer in [1, {_MAX_SCALE}], got {scale!r}"
            )
        if unit == "generic":
            if scale != 1:
                raise DataTypeError(
                    f"data type {name!r}: the 'generic' unit takes scale_factor 1, got {scale}"
                )
            return cls(name, np.dtype(cls.numpy_kind))
        unit = "us" if unit == "μs" else unit
        return cls(name, np.dtype(f"{cls.numpy_kind}[{scale}{unit}]"))

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        if dtype.kind == cls.numpy_char:
            return cls(cls.json_names[0], dtype)
        return None

    @property
    def unit(self) -> str:
        """numpy's unit of the elements ("s", "ms", ..., or "generic")."""
        return np.datetime_data(self.numpy)[0]

    @property
    def scale_factor(self) -> int:
        """How many ``unit`` one step of the stored integer is."""
        return int(np.datetime_data(self.numpy)[1])

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"unit": self.unit, "scale_factor": self.scale_factor}}

    def parse_fill_value(self, value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if isinstance(value, str) and value == "NaT":
            return self.numpy.type("NaT", *self._unit_args())
        if isinstance(value, np.datetime64 | np.timedelta64 | _dt.datetime | _dt.date | _dt.timedelta):
            # user input (never JSON; np.timedelta64 is also an np.integer): a time value of any unit, converted to this unit
            try:
                converted = np.array(value).astype(self.numpy, casting="same_kind")
            except (TypeError, ValueError) as e:
                raise _bad_fill(value, self, str(e)) from None
            return converted[()]
        if isinstance(value, bool | np.bool_):
            raise _bad_fill(value, self, "expected an integer or 'NaT', not a boolean")
        if isinstance(value, int | np.integer):
            if not _NAT <= int(value) < 2**63:
                raise _bad_fill(value, self, "out of the int64 range")
            return np.array(int(value), dtype=np.int64).view(self.numpy)[()]
        raise _bad_fill(value, self, "expected a JSON integer or the string 'NaT'")

    def fill_value_to_json(self, value: Any) -> int:
        """The fill value as the integer zarr-python writes (NaT is ``-2**63``)."""
        return int(np.array(self.parse_fill_value(value)).view(np.int64))

    def default_fill_value(self) -> Any:
        """NaT, as zarr-python chooses when no fill value is given."""
        return self.numpy.type("NaT", *self._unit_args())

    def _unit_args(self) -> tuple[Any, ...]:
        unit, scale = np.datetime_data(self.numpy)
        return () if unit == "generic" else (f"{scale}{unit}",)


@register_data_type
@dataclass(frozen=True)
class DateTime64DataType(_TimeDataType):
    """``numpy.datetime64``: moments since the Unix epoch in ``scale_factor`` x ``unit`` steps."""

    json_names: ClassVar[tuple[str, ...]] = ("numpy.datetime64",)
    numpy_kind: ClassVar[str] = "datetime64"
    numpy_char: ClassVar[str] = "M"


@register_data_type
@dataclass(frozen=True)
class TimeDelta64DataType(_TimeDataType):
    """``numpy.timedelta64``: durations in ``scale_factor`` x ``unit`` steps."""

    json_names: ClassVar[tuple[str, ...]] = ("numpy.timedelta64",)
    numpy_kind: ClassVar[str] = "timedelta64"
    numpy_char: ClassVar[str] = "m"
