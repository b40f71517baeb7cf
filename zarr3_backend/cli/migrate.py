"""``zarr3 migrate``: Zarr v2 to v3 in place, metadata only.

``core.metadata_v2`` translates each node's v2 documents; this module makes the result a plain
v3 document any reader understands (standard ``blosc``/``gzip``/``zstd``/``crc32c`` codecs where
the numcodecs one writes the same bytes, no package-private marker, ``_ARRAY_DIMENSIONS`` moved
to ``dimension_names``) and applies the plan crash-safely: every ``zarr.json`` is written (the
root last) before any v2 document is removed (``.zmetadata`` last of all), so a rerun after a
crash sees the remaining v2 documents and finishes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from ..core.api import consolidate_metadata
from ..core.codec_specs import v3_codec_from_numcodecs
from ..core.commit import repair, shapes_held
from ..core.group import v2_ancestor
from ..core.metadata import load_json, parse_node_json, to_bytes
from ..core.metadata_v2 import (
    ARRAY_KEY,
    ATTRS_KEY,
    CONSOLIDATED_KEY,
    DTYPE_KEYS,
    GROUP_KEY,
    V2_MARKER,
    node_document,
)
from ..core.paths import (
    ancestor_paths,
    join_path,
    join_prefix,
    metadata_key,
    normalize_path,
    parent_path,
    validate_new_node_path,
)
from ..core.txn_records import new_txn_id, txn_prefix
from ..errors import CodecError, InvalidKeyError, MetadataError, Zarr3Error
from ..numeric_json import non_finite_spelled
from ..stores.base import Store
from ._common import EXIT_ERROR, emit_json, json_option, store_for, typed_errors

V2_DOCS = (ARRAY_KEY, GROUP_KEY, ATTRS_KEY)
_NUMCODECS = "numcodecs."


class MigrationError(MetadataError):
    """A v2 node cannot be expressed in Zarr v3 (the whole migration is refused before writing)."""


def standard_codec(codec: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A translated v2 codec (``numcodecs.<id>``) as the standard v3 codec writing the same
    bytes where there is one (``codec_specs.v3_codec_from_numcodecs`` owns that rule), else
    unchanged; raises ``MigrationError`` naming ``where`` when a setting has no v3 form."""
    name = str(codec.get("name", ""))
    if not name.startswith(_NUMCODECS):
        return dict(codec)
    config = {**(codec.get("configuration") or {}), "id": name[len(_NUMCODECS) :]}
    try:
        out = v3_codec_from_numcodecs(config)
    except CodecError as e:
        raise MigrationError(f"{where}: {e}") from e
    return dict(codec) if out["name"] == name else out


def v3_document(doc: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A translated v2 document (``metadata_v2.node_document``) as a plain v3 one: standard
    codecs, no marker, ``_ARRAY_DIMENSIONS`` dropped when it became ``dimension_names``.

    Validated by parsing it and binding its codec chain; raises ``MigrationError`` naming the
    node when v3 cannot express it.
    """
    out = {k: v for k, v in doc.items() if k != V2_MARKER}
    where = join_path(path, ARRAY_KEY if out.get("node_type") == "array" else GROUP_KEY)
    if out.get("node_type") != "array":
        return out
    attrs = dict(out.get("attributes") or {})
    if "dimension_names" in out and attrs.get("_ARRAY_DIMENSIONS") == out["dimension_names"]:
        attrs.pop("_ARRAY_DIMENSIONS")
    out["attributes"] = attrs
    out["codecs"] = [standard_codec(c, where) for c in out["codecs"]]
    _refuse_ambiguous_byte_order(out["codecs"], where)
    try:
        meta = parse_node_json(out, path)
        chain = meta.codec_chain()
    except Zarr3Error as e:
        raise MigrationError(f"{where}: cannot be expressed in Zarr v3: {e}") from e
    # blosc's shuffle and typesize as bound to the array (what a v3 writer would store)
    bound = [c.to_json() for c in chain.codecs]
    out["codecs"] = [b if c["name"] == "blosc" else c for c, b in zip(out["codecs"], bound, strict=True)]
    return out


def _refuse_ambiguous_byte_order(codecs: list[dict[str, Any]], where: str) -> None:
    """Refuse a ``numcodecs.*`` array filter with a dtype setting ahead of big-endian bytes:
    zarr-python reads such a setting in the stored byte order, this package in native order,
    so no v3 document reads the same in both."""
    serializer = next((c for c in codecs if c["name"] == "bytes"), None)
    endian = ((serializer or {}).get("configuration") or {}).get("endian", "little")
    if endian == "little":
        return
    for c in codecs:
        if c is serializer:
            return
        conf = c.get("configuration") or {}
        if c["name"].startswith("numcodecs.") and any(k in conf for k in DTYPE_KEYS):
            raise MigrationError(
                f"{where}: filter {c['name']!r} on big-endian data: Zarr v3 readers disagree on the "
                "byte order of its dtype setting (zarr-python: stored order, zarr3_backend: native), "
                "so no v3 document reads the same everywhere; rewrite it with `zarr3 copy` instead"
            )


@dataclass(frozen=True)
class NodePlan:
    """One node to migrate: its path, its new ``zarr.json`` and the v2 documents to remove."""

    path: str
    document: dict[str, Any]
    remove: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The whole migration: nodes (root last), and whether the root gets consolidated metadata."""

    nodes: tuple[NodePlan, ...]
    consolidated: bool
    done: tuple[str, ...] = field(default=())  # nodes already v3 (a rerun after a crash)
    leftovers: tuple[str, ...] = field(default=())  # v2 documents of nodes already v3

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (what ``--dry-run --json`` prints): each node's document
        exactly as it will be written."""
        return {
            "consolidated": self.consolidated,
            "nodes": {n.path or "/": json.loads(document_bytes(n)) for n in self.nodes},
            "remove": [k for n in self.nodes for k in n.remove] + list(self.leftovers),
            "already_v3": [p or "/" for p in self.done],
        }


def _check_node_name(path: str, doc_key: str) -> None:
    """Refuse a v2 node whose name Zarr v3 reserves (``__*``, periods only): spec-following v3
    readers would not list it as a child."""
    try:
        validate_new_node_path(path)
    except InvalidKeyError as e:
        raise MigrationError(f"{doc_key}: cannot be expressed in Zarr v3: {e}; rename the node first") from e


def _check_no_metadata_child(path: str, children: list[str]) -> None:
    """Refuse a v2 group with a child node named ``zarr.json``: the group's own v3 document
    would have to be written at that key."""
    if "zarr.json" in children:
        raise MigrationError(
            f"{join_path(path, 'zarr.json')}: a child of the Zarr v2 group {path or '/'!r} has this name, "
            "which Zarr v3 keeps for the group's metadata document; rename the child first"
        )


def plan_migration(store: Store, root: str = "") -> Plan:
    """Walk the hierarchy at ``root`` level by level (one listing per group, one batched get
    per level; arrays are never listed into) and translate every v2 node. Raises
    ``MigrationError`` (or the translator's typed error) naming the first node v3 cannot hold."""
    inside = v2_ancestor(store, ancestor_paths(root)) if root else None
    if inside is not None:  # a v3 node inside a v2 hierarchy would hide it from v2 readers
        raise MigrationError(
            f"{root!r} lies inside the Zarr v2 hierarchy of {inside!r}: migrate that hierarchy "
            f"from its root ({parent_path(inside) or '/'!r}) instead"
        )
    nodes: list[NodePlan] = []
    done: list[str] = []
    leftovers: list[str] = []
    level = [root]
    consolidated = False
    first = True
    new_groups: set[str] = set()  # v2 groups without a zarr.json yet: it will be written
    while level:
        names = (*V2_DOCS, "zarr.json")
        keys = [join_path(p, n) for p in level for n in names]
        found = store.get_many(keys)
        next_level: list[str] = []
        for i, path in enumerate(level):
            raw = dict(zip(names, found[i * len(names) : (i + 1) * len(names)], strict=True))
            if raw["zarr.json"] is not None:
                # already v3: an earlier run wrote it from the complete v2 documents before it
                # removed any, so what v2 documents are left (perhaps a .zarray without its
                # .zattrs, the crash having come part-way through their removal) are leftovers,
                # never translated again (v3 wins, as zarr-python reads a node holding both)
                v3 = load_json(raw["zarr.json"], metadata_key(path))
                done.append(path)
                leftovers.extend(join_path(path, n) for n in V2_DOCS if raw[n] is not None)
                if first:
                    consolidated = isinstance(v3, Mapping) and v3.get("consolidated_metadata") is not None
                if isinstance(v3, Mapping) and v3.get("node_type") == "group":
                    next_level.append(path)
                continue
            docs = {n: load_json(raw[n], join_path(path, n)) for n in V2_DOCS if raw[n] is not None}
            doc = node_document(docs, path)
            if doc is None:
                if first:
                    raise MigrationError(f"no Zarr v2 node at {root or '/'!r} (no .zarray or .zgroup)")
                continue  # a folder that is no node (v2 has no implicit groups)
            remove = tuple(join_path(path, n) for n in V2_DOCS if n in docs)
            if path != root:
                _check_node_name(path, remove[0])
            nodes.append(NodePlan(path, v3_document(doc, path), remove))
            if doc["node_type"] == "group":
                next_level.append(path)
                new_groups.add(path)
        if first:
            consolidated = consolidated or store.exists(join_path(root, CONSOLIDATED_KEY))
            first = False
        level = []
        for p in next_level:
            children = list(store.list_dir(join_prefix(p)))
            if p in new_groups:
                _check_no_metadata_child(p, children)
            level.extend(
                join_path(p, child)
                for child in children
                if child not in (*V2_DOCS, CONSOLIDATED_KEY, "zarr.json")
            )
    # the root's zarr.json goes last: until it is written, the store still opens as v2
    nodes.sort(key=lambda n: (n.path == root, n.path))
    return Plan(tuple(nodes), consolidated, tuple(done), tuple(leftovers))


def apply_migration(store: Store, plan: Plan, root: str = "") -> None:
    """Put every new ``zarr.json`` in place (root last, consolidated if the v2 root was), then
    remove the v2 documents (``.zmetadata`` last).

    The documents are written aside first (a write's staging area, which ``repair`` drops) and
    renamed into place once on disk, and each step is flushed before the next (``Store.barrier``,
    the ``durable`` setting): a crash of the machine never leaves an empty ``zarr.json``, nor a
    node whose v2 documents are gone while its v3 one did not reach the disk."""
    repair(store)  # what a killed earlier run left aside (no manifest: dropped), as any write does
    # the arrays' claims held, their shapes checked to be the planned ones: an append or resize
    # committing meanwhile is not hidden by the planned zarr.json (ShapeMovedError: run it again)
    arrays = {
        join_path(n.path, ARRAY_KEY): n.document["shape"]
        for n in plan.nodes
        if n.document["node_type"] == "array"
    }
    with shapes_held(store, arrays):
        # the documents go aside under an id of their own, with no manifest: a repair after a
        # crash drops them (the claims' manifest, rolled forward, would move them into place
        # without the steps after: the consolidation, the v2 documents' removal)
        _apply_migration(store, plan, root, new_txn_id())


def _apply_migration(store: Store, plan: Plan, root: str, txn_id: str) -> None:
    """``apply_migration``'s steps, the documents set aside in write ``txn_id``'s staging area."""
    aside = txn_prefix(txn_id) + "data/"
    keys = [metadata_key(node.path) for node in plan.nodes]  # the root's last (plan_migration)
    store.set_many({aside + k: document_bytes(node) for k, node in zip(keys, plan.nodes, strict=True)})
    store.barrier()
    for key in keys:
        if key == keys[-1] and len(keys) > 1:
            store.barrier()  # every member's document before the root's
        store.move(aside + key, key)
    if plan.consolidated:
        consolidate_metadata(store, root)
    store.barrier()  # the v3 documents kept before the v2 ones go
    for node in plan.nodes:
        store.erase_many(list(node.remove))
    store.erase_many(list(plan.leftovers))
    store.erase(join_path(root, CONSOLIDATED_KEY))
    store.erase_prefix(txn_prefix(txn_id))


def document_bytes(node: NodePlan) -> bytes:
    """A node's new ``zarr.json`` as this package writes a new v3 document: strict JSON, a
    non-finite number in the v2 attributes spelled as a string, as v3 fill values are (a
    rewrite keeps another writer's bare tokens; a migration writes a new document, which
    tensorstore must be able to open)."""
    doc = dict(node.document)
    if "attributes" in doc:
        doc["attributes"] = non_finite_spelled(doc["attributes"])
    return to_bytes(parse_node_json(doc, node.path))


def _check_documents(plan: Plan) -> None:
    """Every new document serialises as this package writes v3 (raises before any write)."""
    for node in plan.nodes:
        document_bytes(node)


@click.command("migrate")
@click.argument("location")
@click.option("--path", "node_path", default="", help="Migrate only the hierarchy below this node path.")
@click.option("--dry-run", is_flag=True, help="Show what would be written and removed; change nothing.")
@json_option
@typed_errors
def migrate(location: str, node_path: str, dry_run: bool, as_json: bool) -> None:
    """Migrate the Zarr v2 hierarchy at LOCATION to Zarr v3 in place (metadata only).

    Chunk bytes are not touched: arrays keep their keys through the "v2" chunk key encoding.
    blosc, gzip, zstd and crc32c become the standard v3 codecs, other numcodecs codecs their
    registered "numcodecs.*" names; _ARRAY_DIMENSIONS becomes dimension_names; a .zmetadata
    becomes consolidated v3 metadata. Every node is translated and checked before anything
    is written; a node v3 cannot express stops the migration with its name (exit code 2).
    All zarr.json documents are written before any v2 document is removed, so rerunning
    after an interruption finishes the job.
    """
    store = store_for(location, "r" if dry_run else "r+")
    root = normalize_path(node_path)
    plan = plan_migration(store, root)
    _check_documents(plan)
    if as_json:
        emit_json({"dry_run": dry_run, **plan.to_json()})
    else:
        verb = "would migrate" if dry_run else "migrating"
        for node in plan.nodes:
            click.echo(f"{verb} {node.document['node_type']} {node.path or '/'}")
        if not plan.nodes:
            click.echo("nothing to migrate: no Zarr v2 documents left")
    if dry_run:
        return
    repair(store)  # a killed run's records (its claims held past its last step) end here too
    if not plan.nodes and not plan.leftovers and not store.exists(join_path(root, CONSOLIDATED_KEY)):
        return
    try:
        apply_migration(store, plan, root)
    except Zarr3Error as e:  # a store failure mid-way: the rerun finishes it
        click.echo(f"error: migration interrupted ({e}); run it again to finish", err=True)
        raise SystemExit(EXIT_ERROR) from e
    if not as_json:
        click.echo(
            f"migrated {len(plan.nodes)} node(s) to Zarr v3"
            + (" (consolidated)" if plan.consolidated else "")
        )
