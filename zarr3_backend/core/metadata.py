"""Array and group metadata (``zarr.json``): parse and validate per the v3 core spec, write back.

Reading is strict about structure (missing or unknown fields, wrong types) and names the node
path and field in every error. Writing is deterministic: ``zarr_format``, ``node_type``, then the
spec's field order, two-space indent, and never a bare ``NaN``/``Infinity`` token.

Non-finite floats inside ``attributes`` (e.g. a CF ``missing_value: nan``) are written as the
strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the spec's fill-value spelling): a reader
gets those strings back. Bare ``NaN`` tokens, which zarr-python writes in attributes, are
accepted on read. numpy scalars and arrays in attributes are written as JSON numbers and lists.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..codecs import ChunkSpec, Codec, CodecChain, codec_from_json
from ..errors import InterruptedWriteError, MetadataError, UnknownFieldError, Zarr3Error
from ..numeric_json import StoredNonFinite, parse_json_constant
from ._extension import parse_extension
from .chunk_grid import ChunkGrid, parse_chunk_grid
from .chunk_key_encoding import ChunkKeyEncoding, parse_chunk_key_encoding
from .dtypes import DataType, as_data_type, parse_data_type

__all__ = [
    "ARRAY_FIELDS",
    "GROUP_FIELDS",
    "MAX_JSON_DEPTH",
    "MAX_SIZE",
    "ArrayMetadata",
    "GroupMetadata",
    "check_json_depth",
    "load_json",
    "parse_node",
    "parse_node_json",
    "to_bytes",
]

#: Fields of an array's zarr.json in the order they are written.
ARRAY_FIELDS = (
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "storage_transformers",
    "dimension_names",
)
_ARRAY_REQUIRED = ARRAY_FIELDS[:8]
#: Fields of a group's zarr.json in the order they are written.
GROUP_FIELDS = ("zarr_format", "node_type", "attributes", "consolidated_metadata")


#: The extension field a write puts (with ``"must_understand": true``) into every ``zarr.json`` it
#: changes while it is in flight, so that every reader (ours, zarr-python, tensorstore) refuses.
WRITE_IN_PROGRESS_FIELD = "zarr3_backend.write_in_progress"

#: Deepest nesting of arrays and objects accepted in a stored JSON document: deeper ones are
#: refused before any recursive code (ours, json, xarray's) could run out of stack on them.
MAX_JSON_DEPTH = 128

#: Largest element count of an array or a chunk, and largest byte size of one chunk: numpy's
#: index type (int64) must hold them, or ``nchunks``/``size`` and every offset would wrap.
MAX_SIZE = 2**63 - 1


# --- JSON documents ---------------------------------------------------------------------------
def check_json_depth(doc: Any, key: str) -> Any:
    """``doc`` (parsed JSON: plain dicts and lists) after refusing nesting deeper than
    ``MAX_JSON_DEPTH`` with a ``MetadataError`` naming ``key``. Level by level, never recursive."""
    level = [doc] if type(doc) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise MetadataError(f"{key}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        below: list[Any] = []
        for node in level:
            below += [v for v in (node.values() if type(node) is dict else node) if type(v) in _CONTAINERS]
        level = below
    return doc


_CONTAINERS = (dict, list)


def load_json(data: bytes | bytearray | memoryview | str, key: str) -> Any:
    """A stored JSON document (``zarr.json``, ``.zarray``, ...) parsed, its nesting bounded;
    ``MetadataError`` naming ``key`` when it is not UTF-8 JSON or is nested too deeply."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        doc = json.loads(text, parse_constant=parse_json_constant)
    except RecursionError:  # the C scanner's own guard: the stack has unwound, nothing is lost
        raise MetadataError(f"{key}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise MetadataError(f"{key}: invalid JSON: {e}") from e
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # cannot nest deeper: skip the walk
        return doc
    return check_json_depth(doc, key)


def _check_sizes(shape: tuple[int, ...], chunk_shape: tuple[int, ...], itemsize: int) -> None:
    """Refuse an array or chunk too large for int64 element counts and byte offsets."""
    if math.prod(shape) > MAX_SIZE or any(s > MAX_SIZE for s in shape):
        raise MetadataError(f"field 'shape' {list(shape)} holds more than 2**63-1 elements")
    if math.prod(chunk_shape) * max(itemsize, 1) > MAX_SIZE:
        raise MetadataError(
            f"field 'chunk_grid': chunk_shape {list(chunk_shape)} makes chunks of more than 2**63-1 bytes"
        )


# --- helpers ----------------------------------------------------------------------------------
def _where(kind: str, path: str) -> str:
    return f"{kind} {path or '/'!r}"


def _rename(e: Zarr3Error, prefix: str) -> Zarr3Error:
    """``e`` re-created with ``prefix`` before its message (same type, so callers can catch it)."""
    try:
        return type(e)(f"{prefix}: {e}")
    except Exception:  # an error type with an unusual constructor
        return MetadataError(f"{prefix}: {e}")


def _check_attributes(attributes: Any) -> dict[str, Any]:
    if not isinstance(attributes, Mapping):
        raise MetadataError(f"field 'attributes' must be an object, got {attributes!r}")
    bad = [k for k in attributes if not isinstance(k, str)]
    if bad:
        raise MetadataError(f"field 'attributes': keys must be strings, got {bad!r}")
    return dict(attributes)


def _check_extra_fields(extra: Any, known: Sequence[str]) -> dict[str, Any]:
    """Unknown top-level fields: each must be an object with ``"must_understand": false``."""
    if not isinstance(extra, Mapping):
        raise MetadataError(f"extra_fields must be a mapping, got {extra!r}")
    for name, value in extra.items():
        if name in known:
            raise MetadataError(f"extra field {name!r} clashes with a field of the spec")
        if name == WRITE_IN_PROGRESS_FIELD:
            txn = value.get("id") if isinstance(value, Mapping) else None
            raise InterruptedWriteError(
                f"write {txn!r} has not committed (still running, or interrupted): the stored state "
                "may be part old, part new; the next write or zarr3_backend.repair() finishes it"
            )
        if not (isinstance(value, Mapping) and value.get("must_understand") is False):
            raise UnknownFieldError(
                f'unknown field {name!r}: not part of the spec and not marked "must_understand": false'
            )
    return dict(extra)


def _split_fields(doc: Mapping[str, Any], known: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in known}


def _check_header(doc: Any, node_type: str) -> None:
    if not isinstance(doc, Mapping):
        raise MetadataError(f"metadata document must be a JSON object, got {type(doc).__name__}")
    if "zarr_format" not in doc:
        raise MetadataError("missing required field 'zarr_format'")
    fmt = doc["zarr_format"]
    if fmt != 3 or isinstance(fmt, bool) or not isinstance(fmt, int):
        raise MetadataError(f"field 'zarr_format' must be 3, got {fmt!r}")
    if "node_type" not in doc:
        raise MetadataError("missing required field 'node_type'")
    if doc["node_type"] != node_type:
        raise MetadataError(f"field 'node_type' must be {node_type!r}, got {doc['node_type']!r}")


def _fill_key(value: Any) -> Any:
    """What makes two fill values equal: their bytes for numpy scalars (NaN payloads included)."""
    if isinstance(value, np.generic) and value.dtype.kind != "O":
        return (value.dtype.str, value.tobytes())
    return value


# --- arrays -----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ArrayMetadata:
    """The metadata of one array, validated: a codec chain that cannot encode its chunks is refused.

    The constructor also accepts loose forms (JSON dicts, numpy dtypes, Python fill values);
    ``codecs`` holds the chain's codecs after ``evolve`` (e.g. ``bytes`` endian filled in).
    """

    shape: tuple[int, ...]
    data_type: DataType
    chunk_grid: ChunkGrid
    chunk_key_encoding: ChunkKeyEncoding
    fill_value: Any
    codecs: tuple[Codec, ...]
    attributes: dict = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    storage_transformers: tuple = ()
    extra_fields: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        shape = self.shape
        if isinstance(shape, str | bytes) or not isinstance(shape, Sequence | np.ndarray):
            raise MetadataError(f"field 'shape' must be an array of non-negative integers, got {shape!r}")
        if any(isinstance(s, bool | np.bool_) or not isinstance(s, int | np.integer) or s < 0 for s in shape):
            raise MetadataError(
                f"field 'shape' must be an array of non-negative integers, got {list(shape)!r}"
            )
        set_(self, "shape", tuple(int(s) for s in shape))
        ndim = len(self.shape)

        dt = self.data_type if isinstance(self.data_type, DataType) else as_data_type(self.data_type)
        set_(self, "data_type", dt)
        grid = parse_chunk_grid(self.chunk_grid)
        if grid.ndim != ndim:
            raise MetadataError(
                f"field 'chunk_grid': {grid.to_json()['configuration']} has {grid.ndim} dimensions, "
                f"shape {list(self.shape)} has {ndim}"
            )
        grid.check_covers(self.shape)
        largest = grid.chunk_shape if grid.is_regular else tuple(max(c) for c in grid.axis_chunks(self.shape))
        _check_sizes(self.shape, largest, dt.numpy.itemsize)
        set_(self, "chunk_grid", grid)
        set_(self, "chunk_key_encoding", parse_chunk_key_encoding(self.chunk_key_encoding))
        set_(self, "fill_value", dt.parse_fill_value(self.fill_value))

        codecs = self.codecs
        if isinstance(codecs, str | bytes | Mapping) or not isinstance(codecs, Sequence):
            raise MetadataError(f"field 'codecs' must be an array of codecs, got {codecs!r}")
        if not codecs:
            raise MetadataError(
                "field 'codecs' must not be empty: it needs an array->bytes codec such as 'bytes'"
            )
        spec = ChunkSpec(grid.codec_shape((0,) * ndim), dt.numpy, self.fill_value)  # the first chunk's
        chain = CodecChain.build([codec_from_json(c) for c in codecs], spec)
        set_(self, "codecs", chain.codecs)
        set_(self, "_chain", chain)

        set_(self, "attributes", _check_attributes(self.attributes))
        names = self.dimension_names
        if names is not None:
            if isinstance(names, str | bytes) or not isinstance(names, Sequence):
                raise MetadataError(
                    f"field 'dimension_names' must be an array of strings or nulls, got {names!r}"
                )
            if any(n is not None and not isinstance(n, str) for n in names):
                raise MetadataError(
                    f"field 'dimension_names' must hold strings or nulls, got {list(names)!r}"
                )
            if len(names) != ndim:
                raise MetadataError(
                    f"field 'dimension_names' has {len(names)} names, the array has {ndim} dimensions"
                )
            set_(self, "dimension_names", tuple(names))
        set_(self, "storage_transformers", _check_storage_transformers(self.storage_transformers))
        set_(self, "extra_fields", _check_extra_fields(self.extra_fields, ARRAY_FIELDS))

    # --- parsing and writing ------------------------------------------------------------------
    @classmethod
    def from_json(cls, doc: Mapping[str, Any], path: str = "") -> ArrayMetadata:
        """Validate a parsed ``zarr.json`` of an array; errors name ``path`` and the field."""
        where = _where("array", path)
        try:
            _check_header(doc, "array")
            for name in _ARRAY_REQUIRED:
                if name not in doc:
                    raise MetadataError(f"missing required field {name!r}")
            extra = _check_extra_fields(_split_fields(doc, ARRAY_FIELDS), ARRAY_FIELDS)
            data_type = parse_data_type(doc["data_type"])
            grid = parse_chunk_grid(doc["chunk_grid"])
            encoding = parse_chunk_key_encoding(doc["chunk_key_encoding"])
            transformers = doc.get("storage_transformers", [])
            if not isinstance(transformers, list):
                raise MetadataError(f"field 'storage_transformers' must be an array, got {transformers!r}")
            names = doc.get("dimension_names")
            if names is not None and not isinstance(names, list):
                raise MetadataError(f"field 'dimension_names' must be an array, got {names!r}")
            if not isinstance(doc["shape"], list):
                raise MetadataError(f"field 'shape' must be an array, got {doc['shape']!r}")
            codecs = doc["codecs"]
            if not isinstance(codecs, list):
                raise MetadataError(f"field 'codecs' must be an array, got {codecs!r}")
            return cls(
                shape=doc["shape"],
                data_type=data_type,
                chunk_grid=grid,
                chunk_key_encoding=encoding,
                fill_value=doc["fill_value"],
                codecs=tuple(codecs),
                attributes=doc.get("attributes", {}),
                dimension_names=names,
                storage_transformers=tuple(transformers),
                extra_fields=extra,
            )
        except Zarr3Error as e:
            raise _rename(e, where) from e

    def to_json(self) -> dict[str, Any]:
        """The ``zarr.json`` document as a dict, in the written field order."""
        doc: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type.to_json(),
            "chunk_grid": self.chunk_grid.to_json(),
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": self.data_type.fill_value_to_json(self.fill_value),
            "codecs": [c.to_json() for c in self.codecs],
            "attributes": dict(self.attributes),
        }
        if self.storage_transformers:
            doc["storage_transformers"] = [dict(t) for t in self.storage_transformers]
        if self.dimension_names is not None:
            doc["dimension_names"] = list(self.dimension_names)
        doc.update(self.extra_fields)
        return doc

    # --- derived ----------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def chunk_spec(self) -> ChunkSpec:
        """The representation of one (whole) chunk: chunk shape, numpy dtype, fill value."""
        return self._chain.spec  # type: ignore[attr-defined]

    def codec_chain(self) -> CodecChain:
        """The codec chain bound to ``chunk_spec`` (built once, when the metadata was validated)."""
        return self._chain  # type: ignore[attr-defined]

    def evolve(self, **changes: Any) -> ArrayMetadata:
        """A copy with ``changes`` applied and validated again (e.g. a new shape on resize)."""
        return replace(self, **changes)

    # --- equality: fill values compare by their bytes so NaN == NaN with the same payload ----
    def _key(self) -> tuple:
        return tuple(
            _fill_key(self.fill_value) if f.name == "fill_value" else getattr(self, f.name)
            for f in fields(self)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ArrayMetadata):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(
            (
                self.shape,
                self.data_type,
                self.chunk_grid,
                self.chunk_key_encoding,
                _fill_key(self.fill_value),
                self.codecs,
            )
        )


def _check_storage_transformers(value: Any) -> tuple:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise MetadataError(f"field 'storage_transformers' must be an array, got {value!r}")
    out = []
    for t in value:
        ext = parse_extension(t, "storage_transformers")
        if ext.must_understand:
            raise MetadataError(
                f"field 'storage_transformers': storage transformer {ext.name!r} is not supported"
            )
        out.append(dict(t))  # ignorable (must_understand false): kept so it is written back
    return tuple(out)


# --- groups -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupMetadata:
    """The metadata of one group: attributes, optional inline consolidated metadata, extra fields."""

    attributes: dict = field(default_factory=dict)
    consolidated_metadata: dict | None = None
    extra_fields: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _check_attributes(self.attributes))
        cm = self.consolidated_metadata
        if cm is not None:
            object.__setattr__(self, "consolidated_metadata", _check_consolidated(cm))
        # an ignorable consolidated_metadata of a kind we do not know is kept as an extra field
        known = GROUP_FIELDS if cm is not None else GROUP_FIELDS[:-1]
        object.__setattr__(self, "extra_fields", _check_extra_fields(self.extra_fields, known))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], path: str = "") -> GroupMetadata:
        """Validate a parsed ``zarr.json`` of a group; errors name ``path`` and the field."""
        try:
            _check_header(doc, "group")
            extra = _check_extra_fields(_split_fields(doc, GROUP_FIELDS), GROUP_FIELDS)
            cm = doc.get("consolidated_metadata")
            if isinstance(cm, Mapping) and cm.get("kind") != "inline" and cm.get("must_understand") is False:
                extra["consolidated_metadata"] = cm  # a form we do not know but may ignore: keep it
                cm = None
            return cls(attributes=doc.get("attributes", {}), consolidated_metadata=cm, extra_fields=extra)
        except Zarr3Error as e:
            raise _rename(e, _where("group", path)) from e

    def to_json(self) -> dict[str, Any]:
        """The ``zarr.json`` document as a dict, in the written field order."""
        doc: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": dict(self.attributes)}
        if self.consolidated_metadata is not None:
            doc["consolidated_metadata"] = self.consolidated_metadata
        doc.update(self.extra_fields)
        return doc


def _check_consolidated(cm: Any) -> dict[str, Any]:
    """The inline consolidated metadata form: ``{"kind": "inline", "metadata": {path: doc}}``."""
    if not isinstance(cm, Mapping):
        raise MetadataError(f"field 'consolidated_metadata' must be an object or null, got {cm!r}")
    if cm.get("kind") != "inline":
        raise MetadataError(
            f"field 'consolidated_metadata': unsupported kind {cm.get('kind')!r} (expected 'inline')"
        )
    docs = cm.get("metadata", {})
    if not isinstance(docs, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Mapping) for k, v in docs.items()
    ):
        raise MetadataError(
            "field 'consolidated_metadata': 'metadata' must map node paths to metadata objects"
        )
    return {**cm, "metadata": dict(docs)}


# --- documents --------------------------------------------------------------------------------
def _doc_key(path: str) -> str:
    return f"{path.strip('/')}/zarr.json" if path.strip("/") else "zarr.json"


def parse_node_json(doc: Any, path: str = "") -> ArrayMetadata | GroupMetadata:
    """Array or group metadata from an already-parsed ``zarr.json`` object (e.g. a consolidated entry)."""
    if not isinstance(doc, Mapping):
        raise MetadataError(f"{_doc_key(path)}: metadata must be a JSON object, got {type(doc).__name__}")
    fmt = doc.get("zarr_format")
    if fmt != 3 or isinstance(fmt, bool):
        raise MetadataError(f"{_doc_key(path)}: field 'zarr_format' must be 3, got {fmt!r}")
    node_type = doc.get("node_type")
    if node_type == "array":
        return ArrayMetadata.from_json(doc, path)
    if node_type == "group":
        return GroupMetadata.from_json(doc, path)
    raise MetadataError(f"{_doc_key(path)}: field 'node_type' must be 'array' or 'group', got {node_type!r}")


def parse_node(data: bytes | bytearray | memoryview | str, path: str) -> ArrayMetadata | GroupMetadata:
    """Array or group metadata from the bytes of a ``zarr.json`` at ``path``."""
    return parse_node_json(load_json(data, _doc_key(path)), path)


def _jsonable(obj: Any, where: str) -> Any:
    """``obj`` with numpy values made plain and non-finite floats spelled as strings, except
    those a stored document held as bare tokens (``StoredNonFinite``)."""
    if obj is None or (isinstance(obj, str | bool | int) and not isinstance(obj, np.generic)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, StoredNonFinite):
        return obj  # a bare token in the document it came from: written back the same way
    if isinstance(obj, float | np.floating):
        value = float(obj)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(obj, np.str_):
        return str(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise MetadataError(f"{where}: key {k!r} is not a string")
            out[k] = _jsonable(v, f"{where}.{k}")
        return out
    if isinstance(obj, list | tuple):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist(), where)
    raise MetadataError(f"{where}: value {obj!r} of type {type(obj).__name__} cannot be written to JSON")


def to_bytes(meta: ArrayMetadata | GroupMetadata) -> bytes:
    """The ``zarr.json`` bytes of ``meta``: deterministic, UTF-8, indent 2, strictly valid JSON
    unless it keeps bare ``NaN``/``Infinity`` tokens that the stored document it was read from
    already held (attributes zarr-python wrote: spelling them as strings would change them)."""
    doc = _jsonable(meta.to_json(), "zarr.json")  # only StoredNonFinite values remain non-finite
    return utf8_json(doc)


def utf8_json(doc: Any) -> bytes:
    """``doc`` as the UTF-8 JSON of a metadata document (indent 2). Text with no UTF-8 form (a
    lone surrogate, as ``os.fsdecode`` makes from a file name that is not UTF-8, or read from a
    document zarr-python wrote) is written as JSON escapes (``\\udce9``), as zarr-python
    writes it: it reads back the same, and a stored document holding it can be written again
    (a consolidated copy of its group, an attribute update) instead of failing a commit."""
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(doc, indent=2, ensure_ascii=True).encode("ascii")
