"""The names of the commit protocol's records and the documents it reads and writes: transaction
ids (who wrote them, on which host, whether that writer is gone), where a write keeps its records
(``.z3-txn/<id>/``), and how a ``zarr.json`` is parsed and dumped when the protocol changes it."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any

from .._owner import current_owner, host_tag, token_is_dead
from ..errors import MetadataError
from .metadata import load_json

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
