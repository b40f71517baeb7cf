"""Zarr <-> xarray conventions shared by the reader (backend) and the writer (to_zarr).

Pure functions: dimension names (``dimension_names``, the legacy ``_ARRAY_DIMENSIONS``
attribute, generated ``dim_i``), the CF ``_FillValue`` attribute in its base64 and plain JSON
forms, JSON-safe attribute values, and the split of a codec chain into the layout encoding keys
(``chunks``/``shards``/``filters``/``serializer``/``compressors``) that xarray's zarr engine uses.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..codecs import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, get_codec_class
from ..codecs.transpose import undo_transposes
from ..errors import ArgumentError, CodecError, MetadataError, ShapeError

#: The attribute older (xarray + zarr v2) stores use to name an array's dimensions.
DIMENSION_KEY = "_ARRAY_DIMENSIONS"

#: The encoding key of a sharded array's index settings (``index_location``, ``index_codecs``).
#: xarray's own writer silently drops it (an unknown key in ``variable.encoding``).
SHARD_INDEX_KEY = "shard_index"

#: The name of the sharding codec in ``zarr.json``.
SHARDING = "sharding_indexed"

#: Encoding keys the zarr engines understand when writing (``fill_value`` is v3 only).
ZARR_ENCODING_KEYS = frozenset(
    {
        "chunks",
        "shards",
        "compressors",
        "filters",
        "serializer",
        "fill_value",
        "write_empty_chunks",
        "chunk_key_encoding",
        "cache_metadata",
    }
)

_FLOAT_SPECIALS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class GeneratedDimensionWarning(UserWarning):
    """An array has neither ``dimension_names`` nor ``_ARRAY_DIMENSIONS``: names were made up."""


# ---- dimensions ----------------------------------------------------------------------------
def stored_names(
    name: str, ndim: int, dimension_names: Sequence[str | None] | None, attributes: Mapping[str, Any]
) -> list[str | None]:
    """The names stored for each axis of array ``name``: ``dimension_names``, with each null
    entry taken from the ``_ARRAY_DIMENSIONS`` attribute; ``None`` where neither names it. The
    one rule both the reader and the writer (matching stored arrays to dimensions) use."""
    names: list[str | None] = [None] * ndim
    if dimension_names is not None:
        names = _checked_names(name, "dimension_names", dimension_names, ndim)
    if any(n is None for n in names) and DIMENSION_KEY in attributes:
        legacy = _checked_names(name, f"attribute {DIMENSION_KEY!r}", attributes[DIMENSION_KEY], ndim)
        names = [n if n is not None else m for n, m in zip(names, legacy, strict=True)]
    return names


def array_dimensions(
    name: str,
    shape: Sequence[int],
    dimension_names: Sequence[str | None] | None,
    attributes: Mapping[str, Any],
) -> tuple[str, ...]:
    """The dimension names of array ``name``, by fallback: ``dimension_names``, then the
    ``_ARRAY_DIMENSIONS`` attribute, then ``dim_<axis>`` with a warning naming the array.

    Null entries fall back per axis. Raises ``MetadataError`` naming the array and the field
    when either source has the wrong length or non-string entries.
    """
    names = stored_names(name, len(shape), dimension_names, attributes)
    missing = [i for i, n in enumerate(names) if n is None]
    if missing:
        generated = [f"dim_{i}" for i in missing]
        warnings.warn(
            f"array {name!r} has no name for axes {missing} (no dimension_names or {DIMENSION_KEY}); "
            f"using {generated}",
            GeneratedDimensionWarning,
            stacklevel=2,
        )
        for i, g in zip(missing, generated, strict=True):
            names[i] = g
    return tuple(names)  # type: ignore[arg-type]


def _checked_names(array: str, field: str, value: Any, ndim: int) -> list[str | None]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise MetadataError(f"array {array!r}: {field} must be a list of names, got {value!r}")
    if len(value) != ndim:
        raise MetadataError(
            f"array {array!r}: {field} {list(value)!r} has {len(value)} entries for {ndim} axes"
        )
    bad = [v for v in value if v is not None and not isinstance(v, str)]
    if bad:
        raise MetadataError(f"array {array!r}: {field} entries must be strings or null, got {bad!r}")
    return list(value)


def check_dimension_sizes(arrays: Iterable[tuple[str, Sequence[str], Sequence[int]]]) -> dict[str, int]:
    """Dimension name -> size over ``(array name, dims, shape)`` triples.

    Raises ``ShapeError`` naming the dimension and both arrays when two arrays disagree.
    """
    sizes: dict[str, tuple[int, str]] = {}
    for array, dims, shape in arrays:
        for dim, size in zip(dims, shape, strict=True):
            seen = sizes.get(dim)
            if seen is None:
                sizes[dim] = (int(size), array)
            elif seen[0] != size:
                raise ShapeError(
                    f"dimension {dim!r} has size {seen[0]} in array {seen[1]!r} but {size} in array {array!r}"
                )
    return {dim: size for dim, (size, _) in sizes.items()}


# ---- CF _FillValue attribute ---------------------------------------------------------------
def decode_fill_value_attr(value: Any, dtype: np.dtype | str, *, where: str = "_FillValue") -> Any:
    """The value of a CF ``_FillValue``/``missing_value`` attribute for data of ``dtype``.

    Reads both forms found in stores: xarray's (floats as base64 of a little-endian float64,
    complex as a pair of those, bytes as base64) and plain JSON numbers/strings
    (``"NaN"``, ``"Infinity"``, ``"-Infinity"`` included). ``where`` names the attribute in errors.
    """
    if not _is_numpy(dtype):  # "string" / "bytes" style names of variable-length types
        return _decode_text_fill(value, str(dtype), where)
    dt = np.dtype(dtype)
    if isinstance(value, list | tuple) and dt.kind != "c":  # several missing values
        return [decode_fill_value_attr(v, dt, where=where) for v in value]
    try:
        if dt.kind == "f":
            return _decode_float(value)
        if dt.kind == "c":
            if not (isinstance(value, list | tuple) and len(value) == 2):
                raise ArgumentError("expected [real, imag]")
            return complex(_decode_float(value[0]), _decode_float(value[1]))
        if dt.kind == "b":
            return bool(value)
        if dt.kind in "iu":
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise ArgumentError("expected a number")
            return int(value)
        if dt.kind in "UT":
            return str(value)
        if dt.kind in "SO":
            return _decode_text_fill(value, "bytes", where)
    except (ValueError, TypeError, binascii.Error, struct.error) as e:
        raise MetadataError(f"{where} {value!r} is not a valid fill value for {dt}: {e}") from e
    return value


def _is_numpy(dtype: Any) -> bool:
    try:
        np.dtype(dtype)
    except TypeError:
        return False
    return True


def _decode_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ArgumentError("expected a number, got a boolean")
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    if isinstance(value, str):
        if value in _FLOAT_SPECIALS:
            return _FLOAT_SPECIALS[value]
        raw = base64.standard_b64decode(value.encode("ascii"))
        if len(raw) == 8:
            return struct.unpack("<d", raw)[0]
        if len(raw) == 4:
            return struct.unpack("<f", raw)[0]
        raise ArgumentError(f"base64 value decodes to {len(raw)} bytes, expected 8")
    raise ArgumentError(f"expected a number or a base64 string, got {type(value).__name__}")


def _decode_text_fill(value: Any, kind: str, where: str) -> Any:
    if kind == "bytes" or kind == "variable_length_bytes":
        if isinstance(value, bytes):
            return value
        if not isinstance(value, str):
            raise MetadataError(
                f"{where} {value!r} is not a valid fill value for bytes: expected base64 text"
            )
        try:
            return base64.standard_b64decode(value.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError) as e:
            raise MetadataError(f"{where} {value!r} is not valid base64: {e}") from e
    return str(value)


def encode_fill_value_attr(value: Any, dtype: np.dtype) -> Any:
    """The JSON form of a CF ``_FillValue`` attribute as xarray's zarr engine writes it.

    Floats become base64 of a little-endian float64 (so NaN and infinities survive JSON),
    complex a pair of those, bytes base64, integers and booleans plain JSON.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode("ascii")
    if dt.kind == "c":
        c = complex(value)
        return [
            encode_fill_value_attr(c.real, np.dtype("f8")),
            encode_fill_value_attr(c.imag, np.dtype("f8")),
        ]
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        return int(value)
    if dt.kind == "S" or isinstance(value, bytes):
        return base64.standard_b64encode(bytes(value)).decode("ascii")
    if dt.kind in "UTO":
        return str(value)
    raise MetadataError(f"_FillValue {value!r}: cannot encode a fill value for data type {dt}")


# ---- attributes ----------------------------------------------------------------------------
def encode_attr_value(value: Any) -> Any:
    """A JSON-friendly attribute value: arrays become lists, numpy scalars Python scalars."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def visible_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes shown to users: without ``_ARRAY_DIMENSIONS`` and NetCDF-internal ``_nc*``."""
    return {k: v for k, v in attributes.items() if k != DIMENSION_KEY and not k.lower().startswith("_nc")}


# ---- codecs --------------------------------------------------------------------------------
def codec_kind(codec: Mapping[str, Any]) -> str:
    """``"array_array"``, ``"array_bytes"`` or ``"bytes_bytes"`` for a codec's JSON form."""
    name = codec.get("name") if isinstance(codec, Mapping) else codec
    cls = get_codec_class(name)  # type: ignore[arg-type]  # UnknownCodecError names it
    if issubclass(cls, ArrayArrayCodec):
        return "array_array"
    if issubclass(cls, ArrayBytesCodec):
        return "array_bytes"
    if issubclass(cls, BytesBytesCodec):
        return "bytes_bytes"
    raise CodecError(f"codec {name!r} is none of array->array, array->bytes, bytes->bytes")


def split_chain(chain: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``filters``, ``serializer``, ``compressors`` encoding keys of one codec chain, as is
    (array->array codecs before the array->bytes codec, bytes->bytes codecs after it)."""
    filters: list[dict] = []
    serializer: dict | None = None
    compressors: list[dict] = []
    for c in chain:
        kind = codec_kind(c)
        if kind == "array_array" and serializer is None:
            filters.append(dict(c))
        elif kind == "array_bytes" and serializer is None:
            serializer = dict(c)
        else:
            compressors.append(dict(c))
    return {"filters": tuple(filters), "serializer": serializer, "compressors": tuple(compressors)}


def split_codecs(
    codecs: Sequence[Mapping[str, Any]], grid_shape: Sequence[int | Sequence[int]]
) -> dict[str, Any]:
    """The layout encoding keys of an array with codec chain ``codecs`` and chunk grid shape
    ``grid_shape`` (per axis, a chunk length, or the chunk lengths of a rectilinear grid), in a
    form both ``to_zarr`` writers (ours and xarray's) write back.

    Returns ``chunks``, ``shards``, ``shard_index`` and either the split chain (``filters``,
    ``serializer``, ``compressors``) or, when the chain cannot be split, the whole chain as
    ``codecs`` (only our writer reads that key; xarray's falls back to its defaults):

    - unsharded: ``chunks`` is the grid shape, ``shards`` and ``shard_index`` are ``None``;
    - one ``sharding_indexed`` codec, optionally after ``transpose`` codecs: ``shards`` is the
      grid shape, ``chunks`` the inner chunk in array axis order, the inner chain is split (the
      transposes lead its filters) and ``shard_index`` holds ``index_location``/``index_codecs``;
    - any other chain with sharding (other filters before it, codecs after it): ``chunks`` is the
      grid shape, ``shards`` ``None`` and ``codecs`` the chain as written.
    """
    chain = [dict(c) for c in codecs]
    grid = tuple(int(n) if isinstance(n, int | np.integer) else tuple(int(m) for m in n) for n in grid_shape)
    at = next((i for i, c in enumerate(chain) if c.get("name") == SHARDING), None)
    if at is None:
        return {"chunks": grid, "shards": None, SHARD_INDEX_KEY: None, **split_chain(chain)}
    before, sharding, after = chain[:at], chain[at], chain[at + 1 :]
    config = dict(sharding.get("configuration") or {})
    inner_chunks = _inner_chunks_in_array_order(before, config.get("chunk_shape"), len(grid))
    if after or inner_chunks is None:
        return {"chunks": grid, "shards": None, SHARD_INDEX_KEY: None, "codecs": tuple(chain)}
    layout = split_chain([*before, *config.get("codecs", [])])
    shard_index = {
        "index_location": config.get("index_location", "end"),
        "index_codecs": tuple(dict(c) for c in config.get("index_codecs", [])),
    }
    return {"chunks": inner_chunks, "shards": grid, SHARD_INDEX_KEY: shard_index, **layout}


def _inner_chunks_in_array_order(
    before: Sequence[Mapping[str, Any]], chunk_shape: Any, ndim: int
) -> tuple[int, ...] | None:
    """The sharding codec's inner ``chunk_shape`` in the array's axis order, undoing the
    ``transpose`` codecs ``before`` it; ``None`` when another codec precedes it or a shape is
    malformed (the chain is then kept whole)."""
    if not isinstance(chunk_shape, list | tuple) or len(chunk_shape) != ndim:
        return None
    orders = []
    for codec in before:
        order = (codec.get("configuration") or {}).get("order") if codec.get("name") == "transpose" else None
        if not isinstance(order, list | tuple) or sorted(order) != list(range(ndim)):
            return None
        orders.append([int(i) for i in order])
    return undo_transposes(orders, [int(c) for c in chunk_shape])
