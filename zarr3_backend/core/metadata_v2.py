"""Zarr v2 metadata (``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata``) as the equivalent
Zarr v3 ``zarr.json`` documents, so one core reads both formats.

Pure functions: parsed JSON in, v3 documents out; errors name the v2 document and its field.
The translation follows the v2 spec: ``order: "F"`` becomes a leading ``transpose``, filters
stay array -> array codecs in their order (an object codec such as ``vlen-utf8`` becomes the
array -> bytes codec), the ``compressor`` becomes a bytes -> bytes codec, the data type's byte
order goes to the ``bytes`` codec, and keys use the ``v2`` chunk key encoding with the array's
``dimension_separator``. ``M8``/``m8`` dtypes become the ``numpy.datetime64``/``numpy.timedelta64``
data types and structured dtypes (the ``[[name, dtype], ...]`` list, nested too) the ``struct``
type, whose base64 fill value becomes per-field values; a structure mixing byte orders or
holding a sub-array field has no v3 form and is refused, naming the field. Every translated
document carries ``V2_MARKER`` (an ignorable extra field holding the original ``fill_value``
and, for an array, its ``.zarray`` without the shape): the node stays v2 when written, and
``metadata_v2_write`` turns it back into its v2 documents.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..codecs.numcodecs_adapter import NUMCODECS_KINDS
from ..errors import DataTypeError, MetadataError, Zarr3Error
from .dtypes import MAX_ITEMSIZE, DataType, data_type_from_numpy, parse_data_type
from .metadata import check_json_depth
from .paths import join_path

ARRAY_KEY, GROUP_KEY, ATTRS_KEY, CONSOLIDATED_KEY = ".zarray", ".zgroup", ".zattrs", ".zmetadata"
#: The v2 documents of one node, in the order they are fetched.
NODE_KEYS = (ARRAY_KEY, GROUP_KEY, ATTRS_KEY)
#: Extra field of a translated document: ``{"must_understand": false, "fill_value": <v2 JSON>}``.
V2_MARKER = "zarr3_backend_zarr_v2"

#: numcodecs ids of v2 object codecs this package decodes -> (v3 data type, v3 array -> bytes codec)
_OBJECT_CODECS = {"vlen-utf8": ("string", "vlen-utf8"), "vlen-bytes": ("variable_length_bytes", "vlen-bytes")}


def _where(path: str, doc: str) -> str:
    return join_path(path, doc) if path else doc


def _fail(path: str, doc: str, message: str, kind: type[Zarr3Error] = MetadataError) -> Zarr3Error:
    return kind(f"{_where(path, doc)}: {message}")


def _int_list(value: Any, field: str, path: str) -> list[int]:
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value
    ):
        raise _fail(
            path, ARRAY_KEY, f"field {field!r} must be a list of non-negative integers, got {value!r}"
        )
    return list(value)


def _codec_config(config: Any, field: str, path: str) -> tuple[str, dict[str, Any]]:
    """``(numcodecs id, configuration without the id)`` of one v2 codec object."""
    if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
        raise _fail(
            path, ARRAY_KEY, f"field {field!r}: a codec must be an object with an 'id', got {config!r}"
        )
    rest = {k: v for k, v in config.items() if k != "id"}
    return config["id"], rest


def _descr_entry(entry: Any, path: str) -> tuple[str, Any]:
    """One ``[name, type]`` field of a v2 structured ``dtype`` as numpy's ``(name, type)`` pair
    (a nested structure's type converted too); sub-array fields have no v3 data type."""
    if (
        not isinstance(entry, list)
        or len(entry) not in (2, 3)
        or not isinstance(entry[0], str)
        or not isinstance(entry[1], str | list)
    ):
        raise _fail(
            path,
            ARRAY_KEY,
            f"field 'dtype': a structured field must be [name, dtype] or [name, dtype, shape], got {entry!r}",
            DataTypeError,
        )
    if len(entry) == 3:
        raise _fail(
            path,
            ARRAY_KEY,
            f"field 'dtype': field {entry[0]!r} is a sub-array {entry[2]!r}; the Zarr v3 struct data "
            "type has no sub-array fields",
            DataTypeError,
        )
    name, ftype = entry[0], entry[1]
    return name, [_descr_entry(e, path) for e in ftype] if isinstance(ftype, list) else ftype


def _byte_order(npdt: np.dtype, path: str, field: str = "") -> str | None:
    """``"<"`` or ``">"``: the one byte order of a dtype's multi-byte values (every field of a
    structure), ``None`` when byte order does not matter; mixed orders are refused, naming the
    field, since the v3 ``bytes`` codec has one ``endian`` for the whole element."""
    if npdt.fields is None:
        if npdt.itemsize <= 1 or npdt.kind in "SV":
            return None
        return ">" if _endian(npdt) == "big" else "<"
    found: str | None = None
    for fname in npdt.names:
        where = f"{field}.{fname}" if field else fname
        order = _byte_order(npdt.fields[fname][0], path, where)
        if order is not None and found is not None and order != found:
            raise _fail(
                path,
                ARRAY_KEY,
                f"field 'dtype': structured field {where!r} is {'big' if order == '>' else 'little'}-endian "
                "but earlier fields are not; the Zarr v3 bytes codec has one byte order per element",
                DataTypeError,
            )
        found = found or order
    return found


def _numpy_dtype(dtype: Any, path: str) -> np.dtype:
    """The numpy dtype of a v2 ``dtype`` field: a type string or a structured list."""
    try:
        if isinstance(dtype, list):
            return np.dtype([_descr_entry(e, path) for e in dtype])
        if isinstance(dtype, str):
            return np.dtype(dtype)
    except DataTypeError:
        raise  # a field's own refusal (_descr_entry), already naming the key and field
    except (TypeError, ValueError) as e:
        raise _fail(
            path, ARRAY_KEY, f"field 'dtype': {dtype!r} is not a data type ({e})", DataTypeError
        ) from None
    raise _fail(
        path, ARRAY_KEY, f"field 'dtype' must be a string or a list of fields, got {dtype!r}", DataTypeError
    )


def _data_type(npdt: np.dtype, filters: list, path: str) -> tuple[Any, dict[str, Any], list]:
    """``(v3 data_type, array -> bytes codec, remaining filters)`` for a v2 ``dtype`` (parsed by
    ``_numpy_dtype``); the ``bytes`` codec's byte order is set once the filters are known.
    ``M8``/``m8`` become the ``numpy.datetime64``/``numpy.timedelta64`` types, structures the
    ``struct`` type."""
    dtype = npdt.str if npdt.fields is None else npdt.descr
    if npdt.itemsize > MAX_ITEMSIZE:
        raise _fail(
            path,
            ARRAY_KEY,
            f"field 'dtype': {dtype!r} has {npdt.itemsize}-byte elements, more than {MAX_ITEMSIZE}",
            DataTypeError,
        )
    if npdt.itemsize == 0 and npdt.kind in "USV":
        # numpy's unsized flexible type (``np.dtype(str)``) names no stored width: numpy makes no
        # array of it, zarr-python 3 refuses it; read as text it would be the variable-length type
        raise _fail(
            path,
            ARRAY_KEY,
            f"field 'dtype': {dtype!r} has 0-byte elements, which no chunk can hold; a fixed-width "
            "type needs a width of at least 1 (e.g. '<U1'), variable-length text is '|O' with the "
            "'vlen-utf8' filter",
            DataTypeError,
        )
    if npdt.kind == "O":
        codec_id = filters[0].get("id") if filters and isinstance(filters[0], Mapping) else None
        if not isinstance(codec_id, str) or codec_id not in _OBJECT_CODECS:
            raise _fail(
                path,
                ARRAY_KEY,
                f"field 'filters': object dtype {dtype!r} needs 'vlen-utf8' or 'vlen-bytes' as its first "
                f"filter, got {codec_id!r}",
                DataTypeError,
            )
        name, serializer = _OBJECT_CODECS[codec_id]
        return name, {"name": serializer}, filters[1:]
    _byte_order(npdt, path)  # refuse mixed byte orders before the type is built
    try:
        dt = data_type_from_numpy(npdt)
    except DataTypeError as e:
        raise _fail(path, ARRAY_KEY, f"field 'dtype': {e}", DataTypeError) from None
    return dt.to_json(), {"name": "bytes"}, filters  # its byte order: see array_document


#: Filter configuration keys that name a numpy dtype (numcodecs delta, fixedscaleoffset,
#: quantize, astype, ...); the filter's output dtype is the first "out" key present.
DTYPE_KEYS = ("dtype", "astype", "encode_dtype", "decode_dtype")
_OUT_KEYS = ("astype", "encode_dtype", "dtype")


def _as_dtype(value: Any, key: str, path: str) -> np.dtype:
    try:
        return np.dtype(value)
    except (TypeError, ValueError) as e:
        raise _fail(path, ARRAY_KEY, f"field 'filters': {key} {value!r} is not a data type ({e})") from None


def _filter_output(codec_id: str, conf: Mapping[str, Any], current: np.dtype, path: str) -> np.dtype:
    """The dtype a v2 array filter hands on: the byte order of the stored bytes is that of the
    last filter's output."""
    if codec_id == "packbits":
        return np.dtype("u1")
    for key in _OUT_KEYS:
        if isinstance(conf.get(key), str):
            return _as_dtype(conf[key], key, path)
    return current


def _native_dtypes(conf: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``conf`` with every dtype setting in native byte order: in the v3 chain a filter works on
    decoded (native) values, and the ``bytes`` codec alone owns the byte order."""
    out = dict(conf)
    for key in DTYPE_KEYS:
        if isinstance(out.get(key), str):
            out[key] = _as_dtype(out[key], key, path).newbyteorder("=").str
    return out


def _endian(dtype: np.dtype) -> str:
    big = dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian)
    return "big" if big else "little"


def _fill_value(value: Any, npdt: np.dtype, dt: DataType, path: str) -> Any:
    """The v3 JSON form of a v2 ``fill_value`` for an array of numpy dtype ``npdt`` (``None``
    stays ``None``: the caller picks the default)."""
    if value is None:
        return None
    kind = npdt.kind
    # forms zarr-python 2 wrote, and reads: a number for an object (string) array, 0/1 for
    # bool, integral floats for integers
    if kind == "O" and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if kind == "b" and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if kind in "iu" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "V" and isinstance(value, str):  # v2 writes raw bytes as base64, v3 as a list
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as e:
            raise _fail(path, ARRAY_KEY, f"field 'fill_value': not valid base64 ({e})") from None
        if npdt.fields is None:
            return list(raw)
        # a structure: base64 of one record in the v2 dtype's byte order -> v3 per-field values
        if len(raw) != npdt.itemsize:
            raise _fail(
                path,
                ARRAY_KEY,
                f"field 'fill_value': {len(raw)} bytes of base64, the structured dtype has {npdt.itemsize}",
            )
        return dt.fill_value_to_json(np.frombuffer(raw, dtype=npdt).astype(dt.numpy)[0])
    return value


def array_document(zarray: Any, zattrs: Any = None, path: str = "") -> dict[str, Any]:
    """The v3 ``zarr.json`` document equivalent to a v2 ``.zarray`` (+ ``.zattrs``).

    ``dimension_names`` come from xarray's ``_ARRAY_DIMENSIONS`` attribute (or NCZarr's
    ``dimrefs``) when it names every dimension; the attribute itself is kept, as stored.
    """
    if not isinstance(zarray, Mapping):
        raise _fail(path, ARRAY_KEY, f"metadata must be a JSON object, got {type(zarray).__name__}")
    if zarray.get("zarr_format") != 2 or isinstance(zarray.get("zarr_format"), bool):
        raise _fail(path, ARRAY_KEY, f"field 'zarr_format' must be 2, got {zarray.get('zarr_format')!r}")
    for field in ("shape", "chunks", "dtype"):
        if field not in zarray:
            raise _fail(path, ARRAY_KEY, f"missing field {field!r}")
    shape = _int_list(zarray["shape"], "shape", path)
    chunks = _int_list(zarray["chunks"], "chunks", path)
    if len(chunks) != len(shape):
        raise _fail(
            path, ARRAY_KEY, f"field 'chunks' {chunks} has {len(chunks)} dimensions, 'shape' {len(shape)}"
        )
    if any(c == 0 for c in chunks):
        raise _fail(path, ARRAY_KEY, f"field 'chunks' must be positive, got {chunks}")
    order = zarray.get("order", "C")
    if order not in ("C", "F"):
        raise _fail(path, ARRAY_KEY, f"field 'order' must be 'C' or 'F', got {order!r}")
    separator = zarray.get("dimension_separator") or "."
    if separator not in (".", "/"):
        raise _fail(path, ARRAY_KEY, f"field 'dimension_separator' must be '.' or '/', got {separator!r}")
    filters = zarray.get("filters") or []
    if not isinstance(filters, list):
        raise _fail(path, ARRAY_KEY, f"field 'filters' must be a list or null, got {filters!r}")
    npdt = _numpy_dtype(zarray["dtype"], path)
    data_type, serializer, rest = _data_type(npdt, filters, path)

    codecs: list[dict[str, Any]] = []
    stored = npdt  # the dtype whose bytes are stored (what the filters leave)
    if order == "F" and len(shape) > 1:
        codecs.append({"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}})
    byte_filters: list[dict[str, Any]] = []  # filters that work on bytes (shuffle, checksums)
    for config in rest:
        codec_id, conf = _codec_config(config, "filters", path)
        if codec_id in _OBJECT_CODECS:
            raise _fail(
                path, ARRAY_KEY, f"field 'filters': {codec_id!r} must be the first filter of an object array"
            )
        if NUMCODECS_KINDS.get(codec_id) == "bb":
            byte_filters.append({"name": f"numcodecs.{codec_id}", "configuration": conf})
            continue
        if byte_filters:
            raise _fail(
                path,
                ARRAY_KEY,
                f"field 'filters': array filter {codec_id!r} after a bytes filter is not supported",
            )
        stored = _filter_output(codec_id, conf, stored, path)
        codecs.append({"name": f"numcodecs.{codec_id}", "configuration": _native_dtypes(conf, path)})
    order = _byte_order(stored, path) if serializer["name"] == "bytes" else None
    if order is not None:  # of what the filters leave
        serializer["configuration"] = {"endian": "big" if order == ">" else "little"}
    codecs.append(serializer)
    codecs.extend(byte_filters)
    compressor = zarray.get("compressor")
    if compressor is not None:
        codec_id, conf = _codec_config(compressor, "compressor", path)
        codecs.append({"name": f"numcodecs.{codec_id}", "configuration": conf})

    attrs = _attributes(zattrs, path)
    dt = parse_data_type(data_type)
    fill = _fill_value(zarray.get("fill_value"), npdt, dt, path)
    if fill is None:  # "no fill value": missing chunks read as the type's default
        fill = dt.fill_value_to_json(dt.default_fill_value())
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": separator}},
        "fill_value": fill,
        "codecs": codecs,
        "attributes": attrs,
        V2_MARKER: {
            "must_understand": False,
            "fill_value": zarray.get("fill_value"),
            "zarray": {k: v for k, v in zarray.items() if k != "shape"},
        },
    }
    dims = _dimension_names(attrs, zarray)
    if dims is not None and len(dims) == len(shape):
        doc["dimension_names"] = dims
    return doc


def _dimension_names(attrs: Mapping[str, Any], zarray: Mapping[str, Any]) -> list[str] | None:
    """xarray's ``_ARRAY_DIMENSIONS`` attribute, else NCZarr's ``_NCZARR_ARRAY.dimrefs`` in the
    ``.zarray`` (fully qualified names such as ``"/grp/time"``: the last part names the
    dimension), as xarray's zarr engine reads them."""
    dims = attrs.get("_ARRAY_DIMENSIONS")
    if dims is None:
        nczarr = zarray.get("_NCZARR_ARRAY")
        refs = nczarr.get("dimrefs") if isinstance(nczarr, Mapping) else None
        if isinstance(refs, list) and all(isinstance(r, str) for r in refs):
            dims = [r.rstrip("/").rpartition("/")[2] for r in refs]
    if isinstance(dims, list) and all(isinstance(d, str) for d in dims):
        return list(dims)
    return None


def _attributes(zattrs: Any, path: str) -> dict[str, Any]:
    if zattrs is None:
        return {}
    if not isinstance(zattrs, Mapping):
        raise _fail(path, ATTRS_KEY, f"attributes must be a JSON object, got {type(zattrs).__name__}")
    return dict(zattrs)


def group_document(zgroup: Any, zattrs: Any = None, path: str = "") -> dict[str, Any]:
    """The v3 ``zarr.json`` document equivalent to a v2 ``.zgroup`` (+ ``.zattrs``)."""
    if not isinstance(zgroup, Mapping):
        raise _fail(path, GROUP_KEY, f"metadata must be a JSON object, got {type(zgroup).__name__}")
    if zgroup.get("zarr_format") != 2 or isinstance(zgroup.get("zarr_format"), bool):
        raise _fail(path, GROUP_KEY, f"field 'zarr_format' must be 2, got {zgroup.get('zarr_format')!r}")
    return {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": _attributes(zattrs, path),
        V2_MARKER: {"must_understand": False},
    }


def node_document(docs: Mapping[str, Any], path: str = "") -> dict[str, Any] | None:
    """The v3 document of one node from its v2 documents (``{".zarray": ..., ".zattrs": ...}``,
    parsed), or ``None`` when it has neither ``.zarray`` nor ``.zgroup``."""
    for name, doc in docs.items():
        check_json_depth(doc, _where(path, str(name)))
    if docs.get(ARRAY_KEY) is not None:
        return array_document(docs[ARRAY_KEY], docs.get(ATTRS_KEY), path)
    if docs.get(GROUP_KEY) is not None:
        return group_document(docs[GROUP_KEY], docs.get(ATTRS_KEY), path)
    return None


def pending_entry(docs: Mapping[str, Any]) -> dict[str, Any] | None:
    """A node's v2 documents kept untranslated in a group's table of descendants (translated
    only when the node is opened, so one node this package cannot read does not stop the
    rest): ``{"zarr_format": 2, "node_type": ..., "documents": {...}}``, or ``None`` when they
    hold neither ``.zarray`` nor ``.zgroup``."""
    if docs.get(ARRAY_KEY) is not None:
        kind = "array"
    elif docs.get(GROUP_KEY) is not None:
        kind = "group"
    else:
        return None
    return {"zarr_format": 2, "node_type": kind, "documents": dict(docs)}


def is_pending(entry: Mapping[str, Any]) -> bool:
    """Whether a table entry holds untranslated v2 documents (``pending_entry``)."""
    return entry.get("zarr_format") == 2 and isinstance(entry.get("documents"), Mapping)


def entry_document(entry: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The v3 document of a table entry: translated now if it is a pending v2 one."""
    if not is_pending(entry):
        return entry
    doc = node_document(entry["documents"], path)
    assert doc is not None  # pending_entry keeps only nodes with a .zarray or a .zgroup
    return doc


def consolidated_documents(zmetadata: Any, path: str = "") -> dict[str, dict[str, Any]]:
    """Relative node path -> pending entry (``pending_entry``) of every node in a v2
    ``.zmetadata`` (the group at ``path`` itself under ``""``)."""
    if not isinstance(zmetadata, Mapping) or not isinstance(zmetadata.get("metadata"), Mapping):
        raise _fail(path, CONSOLIDATED_KEY, "must be an object with a 'metadata' object")
    if zmetadata.get("zarr_consolidated_format", 1) != 1:
        raise _fail(
            path,
            CONSOLIDATED_KEY,
            f"field 'zarr_consolidated_format' must be 1, got {zmetadata.get('zarr_consolidated_format')!r}",
        )
    check_json_depth(zmetadata, _where(path, CONSOLIDATED_KEY))
    by_node: dict[str, dict[str, Any]] = {}
    for key, doc in zmetadata["metadata"].items():
        if not isinstance(key, str):
            continue
        node, _, name = key.rpartition("/")
        if name in NODE_KEYS:
            node = "/".join(part for part in node.split("/") if part)  # "/a", "a//" -> "a"
            if any(part in (".", "..") for part in node.split("/")):
                raise _fail(path, CONSOLIDATED_KEY, f"key {key!r} is not a node path")
            by_node.setdefault(node, {})[name] = doc
    out = {}
    for node, docs in by_node.items():
        entry = pending_entry(docs)
        if entry is not None:
            out[node] = entry
    return out


def v2_fill_value_is_null(metadata: Any) -> bool:
    """Whether array metadata was translated from a v2 ``.zarray`` whose ``fill_value`` is null
    (v2's "no fill value"; the array reads missing chunks as zeros, but nothing is masked)."""
    marker = metadata.extra_fields.get(V2_MARKER)
    return isinstance(marker, Mapping) and "fill_value" in marker and marker["fill_value"] is None
