"""The writing side of Zarr v2: v3 metadata (as this package holds it) -> ``.zarray``/``.zgroup``/
``.zattrs`` documents, the inverse of ``metadata_v2``'s translation.

Pure functions. A node read from v2 keeps its ``.zarray`` (without ``shape``) in its
``V2_MARKER`` field, so rewriting it changes only what the write changed (the shape, the
attributes); a v3 description (a new array, or ``zarr3 copy --zarr-format 2``) is encoded
field by field: an ``order: "F"`` leading ``transpose``, array -> array numcodecs filters, the
serializer's byte order into the ``dtype``, ``vlen-utf8``/``vlen-bytes`` as the first filter of
an ``|O`` array, and the last bytes -> bytes codec as the ``compressor`` (any before it become
byte filters). What v2 cannot express (sharding, other transposes, v3-only codecs) is refused
with ``CodecError`` naming the codec.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..codecs.blosc import SHUFFLES
from ..errors import CodecError, MetadataError
from ..numeric_json import non_finite_spelled
from .metadata import ArrayMetadata, GroupMetadata, load_json, parse_node_json, to_bytes, utf8_json
from .metadata_v2 import (
    ARRAY_KEY,
    ATTRS_KEY,
    CONSOLIDATED_KEY,
    DTYPE_KEYS,
    GROUP_KEY,
    V2_MARKER,
    array_document,
    group_document,
)
from .paths import join_path, metadata_key

#: The compressor ``create_array(..., zarr_format=2)`` uses by default (zarr-python 3's for v2).
DEFAULT_V2_COMPRESSOR: dict[str, Any] = {"id": "zstd", "level": 0}
#: ``order`` values of a ``.zarray``.
ORDERS = ("C", "F")
#: The ``.zgroup`` document.
ZGROUP: dict[str, Any] = {"zarr_format": 2}
#: v3 codecs that have a v2 (numcodecs) form.
_V3_COMPRESSORS = ("blosc", "zstd", "gzip")


def is_v2(meta: ArrayMetadata | GroupMetadata) -> bool:
    """Whether ``meta`` describes a Zarr v2 node (translated from, and stored as, v2 documents)."""
    return V2_MARKER in meta.extra_fields


# ---- fill values ---------------------------------------------------------------------------------
def fill_value_json(value: Any, dtype: np.dtype) -> Any:
    """The ``.zarray`` ``fill_value`` of ``value`` for numpy ``dtype``, as the v2 spec spells it:
    ``"NaN"``/``"Infinity"``/``"-Infinity"`` for non-finite floats, ``[re, im]`` for complex
    numbers, base64 for raw bytes (``S``, ``V``, structures), integers for datetimes; ``None``
    stays ``None`` (no fill value)."""
    if value is None:
        return None
    kind = dtype.kind
    if kind == "O":  # text: the string; zarr-python 2 also wrote numbers, read as their text
        if isinstance(value, bytes | bytearray):
            raise MetadataError(
                f"field 'fill_value': no Zarr v2 form for {value!r} of a variable-length array"
            )
        return value if isinstance(value, str) else str(value)
    scalar = np.asarray(value, dtype=dtype)[()] if dtype.fields is None else np.asarray(value).astype(dtype)
    if kind == "b":
        return bool(scalar)
    if kind in "iu":
        return int(scalar)
    if kind == "f":
        return non_finite_spelled(float(scalar))
    if kind == "c":
        return [non_finite_spelled(float(scalar.real)), non_finite_spelled(float(scalar.imag))]
    if kind in "mM":
        return int(np.asarray(scalar).view("i8"))
    if kind == "U":
        return str(scalar)
    if kind == "S":
        return base64.standard_b64encode(bytes(scalar)).decode()
    if kind == "V":
        return base64.standard_b64encode(np.asarray(scalar, dtype=dtype).tobytes()).decode()
    raise MetadataError(f"field 'fill_value': no Zarr v2 form for {value!r} of dtype {dtype}")


# ---- codecs ----------------------------------------------------------------------------------------
def _v2_codec(codec: Mapping[str, Any], field: str) -> dict[str, Any]:
    """The numcodecs configuration of one v3 bytes -> bytes codec."""
    name, conf = codec["name"], dict(codec.get("configuration") or {})
    if name.startswith("numcodecs."):
        return {"id": name[len("numcodecs.") :], **conf}
    if name == "blosc":
        out = {"id": "blosc", "cname": conf.get("cname", "lz4"), "clevel": conf.get("clevel", 5)}
        out["shuffle"] = SHUFFLES.get(conf.get("shuffle"), -1)
        out["blocksize"] = conf.get("blocksize", 0)
        return out
    if name == "zstd":
        out = {"id": "zstd", "level": conf.get("level", 0)}
        if conf.get("checksum"):
            out["checksum"] = True
        return out
    if name == "gzip":
        return {"id": "gzip", "level": conf.get("level", 1)}
    raise CodecError(
        f"{field}: codec {name!r} has no Zarr v2 form (v2 takes numcodecs codecs and "
        f"{', '.join(_V3_COMPRESSORS)})"
    )


def _with_byte_order(conf: Mapping[str, Any], order: str) -> dict[str, Any]:
    """A filter configuration with its dtype settings in the stored byte order ``order``."""
    out = dict(conf)
    for key in DTYPE_KEYS:
        if isinstance(out.get(key), str):
            dt = np.dtype(out[key])
            out[key] = dt.newbyteorder(order).str if dt.itemsize > 1 and dt.kind not in "SVO" else dt.str
    return out


def _descr_json(descr: Any) -> list:
    """A structured dtype's ``descr`` as the v2 ``dtype`` JSON: ``[[name, type], ...]``, nested."""
    return [[name, _descr_json(t) if isinstance(t, list) else t, *rest] for name, t, *rest in descr]


def zarray_document(
    meta: ArrayMetadata, *, order: str = "C", fill_value: Any = ..., field: str | None = None
) -> dict[str, Any]:
    """The ``.zarray`` of an array: its stored one (shape updated) when ``meta`` was read from
    v2, else encoded from the v3 description (``order`` says how chunks are laid out;
    ``fill_value``, when given, is the v2 JSON fill value, else ``meta``'s own is encoded; a
    leading transpose reversing the axes makes the order ``"F"``).
    ``field`` names the argument refused codecs came from (``None``: ``filters``,
    ``serializer`` or ``compressors`` by where the codec sits)."""
    filters_field, serializer_field, compressors_field = (
        (field, field, field) if field else ("filters", "serializer", "compressors")
    )
    field = field or "codecs"
    marker = meta.extra_fields.get(V2_MARKER)
    if isinstance(marker, Mapping) and isinstance(marker.get("zarray"), Mapping):
        return {"shape": list(meta.shape), **{k: v for k, v in marker["zarray"].items() if k != "shape"}}
    if order not in ORDERS:
        raise MetadataError(f"field 'order' must be 'C' or 'F', got {order!r}")
    if not meta.chunk_grid.is_regular:
        raise CodecError(f"{field}: a rectilinear chunk grid has no Zarr v2 form")
    codecs = [c.to_json() for c in meta.codecs]
    ndim = len(meta.shape)
    if codecs and codecs[0]["name"] == "transpose":
        want = list(range(ndim))[::-1]
        if list(codecs[0]["configuration"]["order"]) != want:
            raise CodecError(f"{field}: only a transpose that reverses every axis (order 'F') has a v2 form")
        order = "F"
        codecs = codecs[1:]
    filters: list[dict[str, Any]] = []
    serializer_at = next(
        (i for i, c in enumerate(codecs) if c["name"] in ("bytes", "vlen-utf8", "vlen-bytes")), None
    )
    if serializer_at is None:
        names = [c["name"] for c in codecs]
        raise CodecError(
            f"{serializer_field}: the chain {names} has no Zarr v2 form (sharding and numcodecs "
            "serializers have none)"
        )
    serializer = codecs[serializer_at]
    npdt = meta.data_type.numpy
    if serializer["name"] == "bytes":
        if npdt.kind in "OT":  # variable-length values reach the bytes codec only through a filter
            raise CodecError(
                f"{serializer_field}: the variable-length data type {meta.data_type.to_json()!r} has no "
                "Zarr v2 form with the 'bytes' serializer (v2 needs 'vlen-utf8' or 'vlen-bytes')"
            )
        endian = (serializer.get("configuration") or {}).get("endian", "little")
        byte_order = ">" if endian == "big" else "<"
        ordered = npdt.newbyteorder(byte_order)
        dtype: Any = ordered.str if npdt.fields is None else _descr_json(ordered.descr)
        if npdt.fields is None and (npdt.itemsize <= 1 or npdt.kind in "SV"):
            dtype = npdt.str
    else:
        byte_order = "<"
        dtype = "|O"
        filters.append({"id": serializer["name"]})
    for c in codecs[:serializer_at]:
        if not c["name"].startswith("numcodecs."):
            raise CodecError(f"{filters_field}: array codec {c['name']!r} has no Zarr v2 form")
        filters.append(_with_byte_order(_v2_codec(c, filters_field), byte_order))
    after = [_v2_codec(c, compressors_field) for c in codecs[serializer_at + 1 :]]
    filters += after[:-1]
    compressor = after[-1] if after else None
    if fill_value is ...:
        fill_value = fill_value_json(meta.fill_value, npdt if npdt.kind not in "OT" else np.dtype("O"))
    encoding = meta.chunk_key_encoding
    separator = encoding.separator if encoding.name == "v2" else "."
    return {
        "shape": list(meta.shape),
        "chunks": list(meta.chunk_grid.chunk_shape),
        "dtype": dtype,
        "fill_value": fill_value,
        "order": order,
        "filters": filters or None,
        "dimension_separator": separator,
        "compressor": compressor,
        "zarr_format": 2,
    }


# ---- documents ------------------------------------------------------------------------------------
def _attributes(meta: ArrayMetadata | GroupMetadata) -> dict[str, Any]:
    """The attributes as ``zarr.json`` would hold them (numpy values plain, checked JSON)."""
    # load_json: the bare tokens to_bytes kept (stored ones) stay StoredNonFinite for _dump
    return load_json(to_bytes(GroupMetadata(attributes=dict(meta.attributes))), ATTRS_KEY)["attributes"]


def _dump(doc: Any, attributes: bool = False) -> bytes:
    """A v2 document as strictly valid JSON: non-finite numbers (a ``fill_value`` zarr-python
    2 wrote as a bare ``Infinity``) are spelled as v2 spells them, except, in ``.zattrs``
    (``attributes``), values a stored document held as bare tokens (zarr-python 2 writes NaN
    attributes so): spelled as strings they would turn into text."""
    return utf8_json(non_finite_spelled(doc, attributes))


def node_documents(path: str, meta: ArrayMetadata | GroupMetadata) -> dict[str, bytes]:
    """The stored documents of the node at ``path``: ``{zarr.json: ...}`` for v3, else its
    ``.zattrs`` then its ``.zarray``/``.zgroup`` (in the order they are to be written: a v2
    reader finds a node by the latter, and must then find its attributes)."""
    if not is_v2(meta):
        return {metadata_key(path): to_bytes(meta)}
    attrs = _dump(_attributes(meta), attributes=True)
    if isinstance(meta, ArrayMetadata):
        return {join_path(path, ATTRS_KEY): attrs, join_path(path, ARRAY_KEY): _dump(zarray_document(meta))}
    return {join_path(path, ATTRS_KEY): attrs, join_path(path, GROUP_KEY): _dump(ZGROUP)}


def metadata_from_documents(path: str, docs: Mapping[str, bytes]) -> ArrayMetadata | GroupMetadata:
    """The metadata a reader of ``node_documents(path, meta)`` sees (the inverse)."""
    if metadata_key(path) in docs:
        return parse_node_json(load_json(docs[metadata_key(path)], metadata_key(path)), path)
    attrs = load_json(docs[join_path(path, ATTRS_KEY)], join_path(path, ATTRS_KEY))
    array_key, group_key = join_path(path, ARRAY_KEY), join_path(path, GROUP_KEY)
    if array_key in docs:
        return parse_node_json(array_document(load_json(docs[array_key], array_key), attrs, path), path)
    return parse_node_json(group_document(load_json(docs[group_key], group_key), attrs, path), path)


def v2_array_metadata(
    zarray: Mapping[str, Any], attributes: Mapping[str, Any], path: str = ""
) -> ArrayMetadata:
    """The metadata of a v2 array with these documents (what a reader will see)."""
    meta = parse_node_json(array_document(dict(zarray), dict(attributes), path), path)
    assert isinstance(meta, ArrayMetadata)
    return meta


def v2_group_metadata(attributes: Mapping[str, Any], path: str = "") -> GroupMetadata:
    """The metadata of a new v2 group with these attributes."""
    meta = parse_node_json(group_document(ZGROUP, dict(attributes), path), path)
    assert isinstance(meta, GroupMetadata)
    return meta


def is_v2_document_key(key: str) -> bool:
    """Whether ``key`` is a v2 metadata document (``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata``)."""
    return key.rpartition("/")[2] in (ARRAY_KEY, GROUP_KEY, ATTRS_KEY, CONSOLIDATED_KEY)


def consolidated_document(entries: Mapping[str, Any]) -> bytes:
    """A ``.zmetadata`` holding ``entries`` (``{"a/.zarray": {...}, ...}``, parsed), in the form
    zarr-python writes; non-finite numbers spelled as v2 spells them, except attributes the
    stored ``.zattrs`` held as bare tokens (kept, as in the documents themselves)."""
    spelled = {k: non_finite_spelled(v, k.rpartition("/")[2] == ATTRS_KEY) for k, v in entries.items()}
    return json.dumps({"metadata": spelled, "zarr_consolidated_format": 1}).encode()


def patched_consolidated(zmetadata: bytes, group_path: str, docs: Mapping[str, bytes]) -> bytes | None:
    """The ``.zmetadata`` of the group at ``group_path`` with the v2 documents among ``docs``
    (store keys -> bytes) that lie below it put in; ``None`` when none do (nothing changes)."""
    prefix = group_path + "/" if group_path else ""
    doc = load_json(zmetadata, join_path(group_path, CONSOLIDATED_KEY))
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        raise MetadataError(f"{join_path(group_path, CONSOLIDATED_KEY)}: must hold a 'metadata' object")
    changed = False
    for key, raw in docs.items():
        if key.startswith(prefix) and is_v2_document_key(key) and not key.endswith(CONSOLIDATED_KEY):
            doc["metadata"][key[len(prefix) :]] = load_json(raw, key)
            changed = True
    return consolidated_document(doc["metadata"]) if changed else None
