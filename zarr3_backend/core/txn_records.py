"""The names of the commit protocol's records and the documents it reads and writes: transaction
ids (who wrote them, on which host, whether that writer is gone), where a write keeps its records
(``.z3-txn/<id>/``), how a ``zarr.json`` is parsed and dumped when the protocol changes it, and
the marker of the writes in flight a ``zarr.json`` carries."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any

from .._owner import current_owner, host_tag, token_is_dead
from ..errors import InterruptedWriteError, MetadataError
from .metadata import WRITE_IN_PROGRESS_FIELD, ArrayMetadata, GroupMetadata, load_json, parse_node_json

#: Where transactions keep their staged values and manifests (at the store's root).
TXN_DIR = ".z3-txn"
#: The record, under a transaction's prefix, of what its commit writes and erases.
MANIFEST = "manifest.json"
_TXN_ID = re.compile(r"[0-9a-f]+-[0-9]+-[0-9x]+-[0-9a-fx]+-[0-9a-f]+-[0-9a-f]+")  # as new_txn_id makes them


def new_txn_id() -> str:
    """A fresh transaction id: creation time, the writer's liveness token, its host's tag and a
    random tail."""
    return f"{int(time.time() * 1000):x}-{current_owner().token()}-{host_tag()}-{secrets.token_hex(4)}"


def txn_owner_token(txn_id: str) -> str:
    """The writer token (``pid-start-boot``) inside a transaction id."""
    parts = txn_id.split("-")
    return "-".join(parts[1:4]) if len(parts) == 6 else ""


def writer_is_dead(txn_id: str) -> bool:
    """True only when the write's process certainly no longer runs: it ran on this host (its
    id says so) and its pid and start time are gone. Another host's writer is never judged."""
    parts = txn_id.split("-")
    return len(parts) == 6 and parts[4] == host_tag() and token_is_dead(txn_owner_token(txn_id))


def txn_prefix(txn_id: str) -> str:
    """The key prefix of one transaction's records."""
    return f"{TXN_DIR}/{txn_id}/"


def is_reserved_key(key: str) -> bool:
    """Keys of the protocol's own records, never part of a node."""
    return key == TXN_DIR or key.startswith(TXN_DIR + "/")


def is_txn_id(text: str) -> bool:
    """Whether ``text`` is a transaction id as ``new_txn_id`` makes them."""
    return _TXN_ID.fullmatch(text) is not None


def parse_doc(data: bytes, key: str) -> dict[str, Any]:
    """The JSON object stored at ``key`` (MetadataError when it is not one)."""
    doc = load_json(data, key)  # nesting bounded: a hostile document is a MetadataError
    if not isinstance(doc, dict):
        raise MetadataError(f"{key!r} is not a JSON object")
    return doc


def dump_doc(doc: Mapping[str, Any]) -> bytes:
    """A document's bytes as the protocol writes them back."""
    # a stored document the commit only marks or unmarks keeps its values as they were: a bare
    # NaN/Infinity another writer put there (zarr-python writes NaN attributes so) stays a
    # number, not a string; documents this package writes are strict JSON already
    return json.dumps(doc, indent=2).encode()


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_shape_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in v)
        for v in value.values()
    )


#: The manifest's fields: (check, default when missing; ``...``: required).
_MANIFEST_FIELDS: dict[str, tuple[Any, Any]] = {
    "id": (lambda v: isinstance(v, str), ...),
    "owner": (lambda v: isinstance(v, dict), ...),
    "documents": (lambda v: isinstance(v, dict) and all(isinstance(d, str) for d in v.values()), ...),
    "erase_prefixes": (_is_str_list, ...),
    "guard": (_is_str_list, ...),
    "consolidate": (lambda v: v is None or isinstance(v, str), None),
    "shape_from": (_is_shape_map, {}),
    "create": (_is_str_list, []),
    "add": (_is_str_list, []),
    "hold": (_is_str_list, []),
    "within": (_is_shape_map, {}),
    "planned": (lambda v: isinstance(v, dict) and all(isinstance(d, str) for d in v.values()), {}),
}


def parse_manifest(raw: bytes, txn_id: str) -> dict[str, Any]:
    """The manifest of write ``txn_id`` as stored (``raw``), every field checked (and the
    optional ones filled in): an unreadable or malformed one raises InterruptedWriteError naming
    its key and field, since the write it describes can then be neither finished nor dropped."""
    key = txn_prefix(txn_id) + MANIFEST

    def refuse(why: str) -> InterruptedWriteError:
        return InterruptedWriteError(
            f"write {txn_id!r}: its manifest {key!r} is unreadable ({why}): the write can be neither "
            f"finished nor rolled back; once no writer runs, look at what it changed and remove "
            f"{txn_prefix(txn_id)!r}"
        )

    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise refuse(str(e)) from e
    if not isinstance(doc, dict):
        raise refuse(f"a JSON object was expected, got {type(doc).__name__}")
    out = dict(doc)
    for name, (valid, default) in _MANIFEST_FIELDS.items():
        if name not in doc:
            if default is ...:
                raise refuse(f"field {name!r} is missing")
            out[name] = default
        elif not valid(doc[name]):
            raise refuse(f"field {name!r} has the wrong form: {doc[name]!r:.80}")
    if out["id"] != txn_id:
        raise refuse(f"field 'id' is {out['id']!r}, not the write's own id")
    # a group's prefix ends with "/": writes made before that rule named mode="w"'s group "g"
    # bare, which also erased its siblings "g2", "grid/..." (a repair of one now erases "g/")
    out["erase_prefixes"] = [p if not p or p.endswith("/") else p + "/" for p in out["erase_prefixes"]]
    return out


def markers(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The in-flight writes recorded in a parsed ``zarr.json`` (``{txn id: owner}``)."""
    field = doc.get(WRITE_IN_PROGRESS_FIELD)
    writes = field.get("writes") if isinstance(field, Mapping) else None
    return dict(writes) if isinstance(writes, Mapping) else {}


def with_markers(doc: Mapping[str, Any], writes: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with exactly ``writes`` as its in-flight writes (the field dropped when empty)."""
    out = {k: v for k, v in doc.items() if k != WRITE_IN_PROGRESS_FIELD}
    if writes:
        latest = max(writes)
        out[WRITE_IN_PROGRESS_FIELD] = {"must_understand": True, "id": latest, "writes": dict(writes)}
    return out


def unmarked_node(raw: bytes, doc_key: str, path: str) -> ArrayMetadata | GroupMetadata:
    """The node a stored ``zarr.json`` (``raw``, at ``doc_key``) describes, whatever writes are in
    flight on it (their marker dropped): what the protocol itself needs to know of a node a
    reader would be refused (MetadataError when it is not a document)."""
    return parse_node_json(with_markers(parse_doc(raw, doc_key), {}), path)
