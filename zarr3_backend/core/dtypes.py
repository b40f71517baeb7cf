"""Zarr v3 data types: metadata names <-> numpy dtypes, and fill values <-> their JSON forms.

The core types of the spec (bool, int8..uint64, float16..float64, complex64/128, raw ``r<N>``)
are one table and share the base class :class:`DataType`, whose fill-value rules follow the
numpy kind. Any other type is a small :class:`DataType` subclass registered with
:func:`register_data_type` (or through the ``zarr3_backend.data_types`` entry-point group); it
overrides the hooks it needs: ``from_json_object``, ``from_numpy_dtype``, ``to_json``,
``parse_fill_value``, ``fill_value_to_json``, ``default_fill_value``. Example::

    @register_data_type
    class FixedLengthUTF32(DataType):
        json_names = ("fixed_length_utf32",)

        @classmethod
        def from_json_object(cls, name, configuration):
            return cls(name, np.dtype(f"U{configuration['length_bytes'] // 4}"))

        @classmethod
        def from_numpy_dtype(cls, dtype):
            return cls("fixed_length_utf32", dtype) if dtype.kind == "U" else None

        def to_json(self):
            return {"name": self.name, "configuration": {"length_bytes": self.itemsize}}

        def parse_fill_value(self, value):
            return np.str_(value)

        def fill_value_to_json(self, value):
            return str(value)

        def default_fill_value(self):
            return np.str_("")
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar

import numpy as np

from ..errors import DataTypeError
from ..numeric_json import float_to_json, parse_float_json, parse_int_json
from ._extension import parse_extension

__all__ = [
    "ENTRY_POINT_GROUP",
    "DataType",
    "RawBytesDataType",
    "as_data_type",
    "data_type_from_numpy",
    "default_fill_value",
    "fill_value_to_json",
    "parse_data_type",
    "parse_fill_value",
    "register_data_type",
    "registered_data_types",
]

ENTRY_POINT_GROUP = "zarr3_backend.data_types"

#: Core data types of the spec and the numpy dtype each one maps to.
_CORE_TYPES: dict[str, np.dtype] = {
    name: np.dtype(code)
    for name, code in (
        ("bool", "bool"),
        ("int8", "i1"),
        ("int16", "i2"),
        ("int32", "i4"),
        ("int64", "i8"),
        ("uint8", "u1"),
        ("uint16", "u2"),
        ("uint32", "u4"),
        ("uint64", "u8"),
        ("float16", "f2"),
        ("float32", "f4"),
        ("float64", "f8"),
        ("complex64", "c8"),
        ("complex128", "c16"),
    )
}
_CORE_BY_NUMPY: dict[tuple[str, int], str] = {
    (dt.kind, dt.itemsize): name for name, dt in _CORE_TYPES.items()
}

#: Raw bits ``r<N>``: N a positive multiple of 8, written without leading zeros.
_RAW_NAME = re.compile(r"r([1-9][0-9]*)")


def _bad_fill(value: Any, dt: DataType, why: str) -> DataTypeError:
    return DataTypeError(f"fill value {value!r} is not valid for data type {dt.name!r}: {why}")


@dataclass(frozen=True)
class DataType:
    """A Zarr data type: its metadata ``name`` and the native-byte-order numpy dtype of its elements.

    The base class implements every core type; extension types subclass it (see module doc).
    """

    name: str
    numpy: np.dtype

    #: Names a registered subclass answers to in ``zarr.json`` (``register_data_type`` reads it).
    json_names: ClassVar[tuple[str, ...]] = ()
    #: For simple extension types: the numpy dtype every instance has (used by the default
    #: ``from_json_object``).
    fixed_numpy: ClassVar[np.dtype | None] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DataTypeError(f"data type name must be a non-empty string, got {self.name!r}")
        dtype = np.dtype(self.numpy)
        if not dtype.isnative:
            dtype = dtype.newbyteorder("=")
        object.__setattr__(self, "numpy", dtype)

    # --- identity ---------------------------------------------------------------------------
    @property
    def itemsize(self) -> int:
        """Bytes per element in memory (numpy's itemsize)."""
        return self.numpy.itemsize

    def to_json(self) -> str | dict[str, Any]:
        """The ``data_type`` value written to ``zarr.json`` (the bare name for core types)."""
        return self.name

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        """Build from a ``data_type`` name and configuration; extension types with settings override."""
        if configuration:
            raise DataTypeError(f"data type {name!r} takes no configuration, got {dict(configuration)!r}")
        numpy = cls.fixed_numpy if cls.fixed_numpy is not None else _core_numpy(name)
        if numpy is None:
            raise DataTypeError(f"data type class {cls.__name__} cannot build {name!r}")
        return cls(name, numpy)

    @classmethod
    def from_numpy_dtype(cls, dtype: np.dtype) -> DataType | None:
        """The instance of this type for numpy ``dtype``, or ``None`` if it does not claim it."""
        return None

    # --- fill values ------------------------------------------------------------------------
    def parse_fill_value(self, value: Any) -> Any:
        """The fill value (a numpy scalar of ``self.numpy``) from its JSON form or a numpy/Python value."""
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        parser = _FILL_PARSERS.get(self.numpy.kind)
        if parser is None:
            raise _bad_fill(value, self, "this data type defines no fill value rule")
        return parser(value, self.numpy, self)

    def fill_value_to_json(self, value: Any) -> Any:
        """The canonical JSON form of fill value ``value`` (never a bare NaN or Infinity)."""
        value = self.parse_fill_value(value)
        kind = self.numpy.kind
        if kind == "b":
            return bool(value)
        if kind in "iu":
            return int(value)
        if kind == "f":
            return float_to_json(value)
        if kind == "c":
            parts = np.array(value).reshape(1).view(_component_dtype(self.numpy))
            return [float_to_json(parts[0]), float_to_json(parts[1])]
        if kind == "V":
            return list(value.tobytes())
        raise _bad_fill(value, self, "this data type defines no fill value JSON form")

    def default_fill_value(self) -> Any:
        """The fill value used when none is given: zero of the type (what zarr-python writes)."""
        if self.numpy.kind not in _FILL_PARSERS:
            raise DataTypeError(f"data type {self.name!r} defines no default fill value")
        return np.zeros((), dtype=self.numpy)[()]


# --- fill value parsers per numpy kind --------------------------------------------------------
def _parse_bool(value: Any, dtype: np.dtype, dt: DataType) -> np.generic:
    if isinstance(value, bool | np.bool_):
        return np.bool_(value)
    raise _bad_fill(value, dt, "expected true or false")


def _parse_int(value: Any, dtype: np.dtype, dt: DataType) -> np.generic:
    try:
        return parse_int_json(value, dtype)
    except ValueError as e:
        raise _bad_fill(value, dt, str(e)) from None


def _parse_float(value: Any, dtype: np.dtype, dt: DataType) -> np.generic:
    try:
        return parse_float_json(value, dtype)
    except ValueError as e:
        raise _bad_fill(value, dt, str(e)) from None


def _component_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"f{dtype.itemsize // 2}")


def _parse_complex(value: Any, dtype: np.dtype, dt: DataType) -> np.generic:
    if isinstance(value, np.complexfloating) and value.dtype.itemsize == dtype.itemsize:
        return np.array(value).reshape(1).view(dtype)[0]
    if isinstance(value, complex | np.number) and not isinstance(value, bool | np.bool_):
        # Python complex or a numpy scalar: user input, never a JSON form
        return dtype.type(value)
    if isinstance(value, list | tuple) and len(value) == 2:
        comp = _component_dtype(dtype)
        try:
            parts = [_parse_float(v, comp, dt) for v in value]
        except DataTypeError as e:
            raise _bad_fill(value, dt, f"a component is invalid ({e})") from None
        return np.array(parts, dtype=comp).view(dtype)[0]
    raise _bad_fill(value, dt, "expected a two-element array [real, imaginary]")


def _parse_raw(value: Any, dtype: np.dtype, dt: DataType) -> np.generic:
    size = dtype.itemsize
    if isinstance(value, np.void):
        data = value.tobytes()
    elif isinstance(value, bytes | bytearray):
        data = bytes(value)
    elif isinstance(value, list | tuple):
        if not all(
            isinstance(b, int | np.integer) and not isinstance(b, bool) and 0 <= b <= 255 for b in value
        ):
            raise _bad_fill(value, dt, "raw fill values are arrays of integers in [0, 255]")
        data = bytes(int(b) for b in value)
    else:
        raise _bad_fill(value, dt, f"expected an array of {size} byte values")
    if len(data) != size:
        raise _bad_fill(value, dt, f"expected {size} bytes, got {len(data)}")
    return np.void(data)


_FILL_PARSERS: dict[str, Callable[[Any, np.dtype, DataType], Any]] = {
    "b": _parse_bool,
    "i": _parse_int,
    "u": _parse_int,
    "f": _parse_float,
    "c": _parse_complex,
    "V": _parse_raw,
}


# --- the extension data type zarr-python writes for numpy "V<n>" --------------------------------
@dataclass(frozen=True)
class RawBytesDataType(DataType):
    """zarr-python's ``raw_bytes`` type: fixed-length opaque bytes, fill value in base64."""

    json_names: ClassVar[tuple[str, ...]] = ("raw_bytes",)

    @classmethod
    def from_json_object(cls, name: str, configuration: Mapping[str, Any] | None) -> DataType:
        config = dict(configuration or {})
        length = config.pop("length_bytes", None)
        if config:
            raise DataTypeError(f"data type {name!r}: unknown configuration keys {sorted(config)}")
        if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
            raise DataTypeError(
                f"data type {name!r}: 'length_bytes' must be a positive integer, got {length!r}"
            )
        return cls(name, np.dtype(f"V{length}"))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"length_bytes": self.itemsize}}

    def parse_fill_value(self, value: Any) -> Any:
        if not isinstance(value, str):
            return super().parse_fill_value(value)
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as e:
            raise _bad_fill(value, self, f"not valid base64 ({e})") from None
        if len(data) != self.itemsize:
            raise _bad_fill(value, self, f"decodes to {len(data)} bytes, expected {self.itemsize}")
        return np.void(data)

    def fill_value_to_json(self, value: Any) -> str:
        return base64.b64encode(self.parse_fill_value(value).tobytes()).decode("ascii")


# --- registry ---------------------------------------------------------------------------------
_registry: dict[str, type[DataType]] = {}
_numpy_claimers: list[type[DataType]] = []
_entry_points_loaded = False


def register_data_type(cls: type[DataType], names: tuple[str, ...] | None = None) -> type[DataType]:
    """Register DataType subclass ``cls`` under ``names`` (default ``cls.json_names``); a decorator.

    ``parse_data_type`` then builds it with ``cls.from_json_object`` and ``data_type_from_numpy``
    asks ``cls.from_numpy_dtype``. A later registration wins over earlier ones and over core types.
    """
    if not (isinstance(cls, type) and issubclass(cls, DataType)):
        raise TypeError(f"register_data_type expects a DataType subclass, got {cls!r}")
    names = tuple(names if names is not None else cls.json_names)
    if not names:
        raise TypeError(f"{cls.__name__}: no names to register (set json_names or pass names=)")
    for name in names:
        _registry[name] = cls
    if cls in _numpy_claimers:
        _numpy_claimers.remove(cls)
    _numpy_claimers.append(cls)
    return cls


def registered_data_types() -> dict[str, type[DataType]]:
    """Extension data types by name, entry points included (core types are not listed)."""
    _load_entry_points()
    return dict(_registry)


def _load_entry_points() -> None:
    """Load plugin data types once (on the first lookup), so plugins are seen consistently."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _registry:
            try:
                register_data_type(ep.load(), names=(ep.name,))
            except Exception as e:  # a broken plugin must not hide which one it was
                raise DataTypeError(f"data type plugin {ep.name!r} ({ep.value}) failed to load: {e}") from e


register_data_type(RawBytesDataType)


def _core_numpy(name: str) -> np.dtype | None:
    if name in _CORE_TYPES:
        return _CORE_TYPES[name]
    m = _RAW_NAME.fullmatch(name)
    if m:
        bits = int(m.group(1))
        if bits % 8:
            raise DataTypeError(f"raw data type {name!r}: the number of bits must be a multiple of 8")
        if bits // 8 > MAX_ITEMSIZE:
            raise DataTypeError(
                f"raw data type {name!r}: {bits // 8}-byte elements, more than {MAX_ITEMSIZE}"
            )
        return np.dtype(f"V{bits // 8}")
    return None


def _lookup(name: str) -> Callable[[str, Mapping[str, Any] | None], DataType] | None:
    _load_entry_points()
    cls = _registry.get(name)
    if cls is not None:
        return cls.from_json_object
    if _core_numpy(name) is not None:
        return DataType.from_json_object
    return None


# --- public parsing functions -----------------------------------------------------------------
#: Largest element accepted, in bytes (a 4 Mi-character fixed-width string): the fill value and
#: every chunk hold elements of this size, allocated before any data is read.
MAX_ITEMSIZE = 2**24


def parse_data_type(obj: Any) -> DataType:
    """The DataType for a ``data_type`` metadata value: a name or a ``{name, configuration}`` object."""
    if isinstance(obj, DataType):
        return obj
    ext = parse_extension(obj, "data_type", DataTypeError)
    factory = _lookup(ext.name)
    if factory is None:
        raise DataTypeError(
            f"unknown data type {ext.name!r} (known: {', '.join([*_CORE_TYPES, 'r<bits>', *sorted(_registry)])})"
        )
    try:
        dt = factory(ext.name, ext.configuration)
    except (TypeError, ValueError, OverflowError) as e:  # numpy refusing a size the config asks for
        raise DataTypeError(f"data type {ext.name!r} {ext.configuration or ''}: {e}") from e
    if dt.numpy.itemsize > MAX_ITEMSIZE:
        raise DataTypeError(
            f"data type {ext.name!r}: {dt.numpy.itemsize}-byte elements, more than {MAX_ITEMSIZE}"
        )
    return dt


def data_type_from_numpy(dtype: Any) -> DataType:
    """The DataType for a numpy dtype (any byte order); unstructured ``V<n>`` becomes raw ``r<8n>``."""
    if isinstance(dtype, DataType):
        return dtype
    if dtype is None:
        raise DataTypeError("data type None: give a numpy dtype or a Zarr data type name")
    try:
        npdt = np.dtype(dtype)
    except (TypeError, ValueError) as e:
        raise DataTypeError(f"{dtype!r} is not a numpy dtype: {e}") from None
    _load_entry_points()
    for cls in reversed(_numpy_claimers):
        found = cls.from_numpy_dtype(npdt)
        if found is not None:
            return found
    core = _core_from_numpy(npdt)
    if core is not None:
        return core
    if npdt.kind == "V" and (npdt.fields is not None or npdt.subdtype is not None):
        raise DataTypeError(
            f"numpy dtype {npdt!r}: structured and sub-array dtypes have no Zarr v3 data type"
        )
    raise DataTypeError(f"numpy dtype {npdt.str!r} has no Zarr v3 data type")


def _core_from_numpy(npdt: np.dtype) -> DataType | None:
    name = _CORE_BY_NUMPY.get((npdt.kind, npdt.itemsize))
    if name is not None:
        return DataType(name, npdt)
    if npdt.kind == "V" and npdt.fields is None and npdt.subdtype is None and npdt.itemsize > 0:
        return DataType(f"r{8 * npdt.itemsize}", np.dtype(f"V{npdt.itemsize}"))
    return None


def as_data_type(obj: Any) -> DataType:
    """A DataType from anything a user may pass as ``dtype``: a Zarr name or object, or a numpy dtype."""
    if isinstance(obj, DataType):
        return obj
    if isinstance(obj, Mapping):
        return parse_data_type(obj)
    if isinstance(obj, str) and _lookup(obj) is not None:
        return parse_data_type(obj)
    return data_type_from_numpy(obj)


def parse_fill_value(value: Any, dt: DataType) -> Any:
    """The fill value for ``dt`` from any JSON form of the spec (or a numpy/Python scalar)."""
    return dt.parse_fill_value(value)


def fill_value_to_json(value: Any, dt: DataType) -> Any:
    """The canonical JSON form of ``value`` for ``dt``; bit-exact for NaN payloads."""
    return dt.fill_value_to_json(value)


def default_fill_value(dt: DataType) -> Any:
    """Zero of ``dt`` (False, 0, 0.0, 0j, zero bytes): the fill value used when none is given."""
    return dt.default_fill_value()


# The built-in extension types live in their own modules and register themselves on import;
# importing them here (last, once every name above exists) makes them known wherever data
# types are parsed.
from . import dtypes_struct, dtypes_text, dtypes_time  # noqa: E402, F401
