"""The Group: a node holding arrays and groups; members are read with batched, concurrent gets.

Listing a hierarchy fetches every ``zarr.json`` of one level in one batched store call, and uses
the inline consolidated metadata of the root instead when it is present (no listing at all).
Prefixes that hold nodes (a ``zarr.json`` somewhere below) but no ``zarr.json`` of their own are
implicit groups. Zarr v2 nodes (``.zarray``/``.zgroup``) are read as their v3 equivalents
(``metadata_v2``), and written back as v2, wherever they are found (in a listing, by name, or in a v2 group's
``.zmetadata``, whose entries are translated only when their node is opened).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np

from ..errors import (
    GroupNotFoundError,
    MetadataError,
    NodeExistsError,
    NodeNotFoundError,
    ReadOnlyError,
    Zarr3Error,
    ZarrV2Error,
)
from ..stores.base import Store
from .array import Array
from .attributes import Attributes
from .metadata import ArrayMetadata, GroupMetadata, load_json, parse_node, parse_node_json
from .metadata_v2 import (
    ARRAY_KEY,
    CONSOLIDATED_KEY,
    GROUP_KEY,
    NODE_KEYS,
    V2_MARKER,
    consolidated_documents,
    entry_document,
    is_pending,
    node_document,
    pending_entry,
)
from .paths import join_path, join_prefix, metadata_key, node_name, normalize_path
from .txn_records import is_reserved_key

Node = Array | Any  # Array | Group
V2_DOCUMENTS = frozenset((*NODE_KEYS, CONSOLIDATED_KEY))


def node_from_metadata(store: Store, path: str, meta: ArrayMetadata | GroupMetadata, **kwargs: Any) -> Node:
    """Wrap parsed metadata in an Array or Group object."""
    if isinstance(meta, ArrayMetadata):
        return Array(
            store,
            path,
            meta,
            read_only=kwargs.get("read_only", False),
            write_empty_chunks=kwargs.get("write_empty_chunks", False),
        )
    return Group(store, path, meta, read_only=kwargs.get("read_only", False))


def read_node_metadata(
    store: Store, path: str, *, use_consolidated: bool | None = None
) -> ArrayMetadata | GroupMetadata | None:
    """The parsed ``zarr.json`` at ``path``, else its Zarr v2 metadata translated to v3;
    ``None`` when there is neither. ``use_consolidated=False`` makes a v2 group list its
    hierarchy instead of reading its ``.zmetadata``."""
    data = store.get(metadata_key(path))
    if data is not None:
        return parse_node(data, path)
    return read_v2_node_metadata(store, path, use_consolidated=use_consolidated)


def _v2_docs(store: Store, paths: list[str], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """For each node path, its v2 documents among ``names`` that exist, parsed (one batched get)."""
    keys = [join_path(p, n) for p in paths for n in names]
    found = store.get_many(keys)
    out = []
    for i in range(len(paths)):
        docs = {}
        for j, name in enumerate(names):
            data = found[i * len(names) + j]
            if data is not None:
                docs[name] = load_json(data, keys[i * len(names) + j])
        out.append(docs)
    return out


def read_v2_node_metadata(
    store: Store, path: str, *, use_consolidated: bool | None = None
) -> ArrayMetadata | GroupMetadata | None:
    """The Zarr v2 node at ``path`` as v3 metadata, or ``None`` when there is none. A group with
    a ``.zmetadata`` (used unless ``use_consolidated=False``) carries its descendants' documents,
    each translated only when that node is opened; without one, its members are listed level by
    level as for v3 (``use_consolidated=True`` then raises ``MetadataError``)."""
    (docs,) = _v2_docs(store, [path], NODE_KEYS)
    doc = node_document(docs, path)
    if doc is None:
        return None
    if doc["node_type"] == "group" and use_consolidated is not False:
        (consolidated,) = _v2_docs(store, [path], (CONSOLIDATED_KEY,))
        if consolidated:
            tree = consolidated_documents(consolidated[CONSOLIDATED_KEY], path)
            tree.pop("", None)
            doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": tree}
        elif use_consolidated:
            raise MetadataError(f"group {path or '/'!r} has no .zmetadata (use_consolidated=True)")
    return _parse_v2(doc, path)


def _parse_v2(doc: Mapping[str, Any], path: str) -> ArrayMetadata | GroupMetadata:
    """Parse a document translated from v2; its errors name the v2 document they come from."""
    try:
        return parse_node_json(doc, path)
    except Zarr3Error as e:
        key = join_path(path, ARRAY_KEY if doc.get("node_type") == "array" else GROUP_KEY)
        raise type(e)(f"{key}: {e}") from e


def v2_ancestor(store: Store, ancestors: Collection[str]) -> str | None:
    """The ``.zarray``/``.zgroup`` key of the first of ``ancestors`` (node paths, nearest
    first) that is a Zarr v2 node, or ``None``: nothing may be created inside a v2 hierarchy
    (a ``zarr.json`` there would hide it from v2 readers)."""
    keys = [join_path(a, name) for a in ancestors for name in (ARRAY_KEY, GROUP_KEY)]
    for key, found in zip(keys, store.exists_many(keys) if keys else [], strict=True):
        if found:
            return key
    return None


def is_implicit_group(store: Store, path: str) -> bool:
    """True when ``path`` has no ``zarr.json`` but a node lies below it (an implicit group).

    Searched level by level (one listing per prefix, one batched get per level), stopping at the
    first ``zarr.json``; stray files (``._zarr.json``) and folders holding no v3 node do not
    make a group.
    """
    level = [path]
    while level:
        children = [
            join_path(p, name)
            for p in level
            for name in store.list_dir(join_prefix(p))
            if name != "zarr.json" and not is_reserved_key(join_path(p, name))
        ]
        if not children:
            return False
        keys = [
            k for c in children for k in (metadata_key(c), join_path(c, ARRAY_KEY), join_path(c, GROUP_KEY))
        ]
        found = store.exists_many(keys)
        if any(found[0::3]):
            return True
        # v2 nodes do not make a v3 group, and are never listed into (their chunks)
        level = [c for i, c in enumerate(children) if not (found[3 * i + 1] or found[3 * i + 2])]
    return False


@dataclass(frozen=True)
class UnreadableNode:
    """A member whose metadata cannot be read, listed by ``Group.members(errors="keep")`` and
    ``Group.tree()`` in its place so that one bad member does not hide the others.

    ``node_type`` is what its document claims ("array"/"group"), or ``None`` when even that is
    unreadable; ``error`` is the typed error opening it raises. Touching ``metadata`` raises it.
    """

    path: str
    node_type: str | None
    error: Zarr3Error

    @property
    def name(self) -> str:
        """The last part of the path."""
        return node_name(self.path)

    @property
    def reason(self) -> str:
        """Why it cannot be read: the error's type and message."""
        return f"{type(self.error).__name__}: {self.error}"

    @property
    def metadata(self) -> Any:
        """Raises the error that makes this node unreadable (it has no usable metadata)."""
        raise self.error


MemberErrors = Literal["raise", "keep"]


class Group:
    """A Zarr v3 group: attributes plus named children (arrays and groups).

    ``implicit`` is True for a prefix with no ``zarr.json`` of its own that holds nodes below.
    """

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: GroupMetadata,
        *,
        read_only: bool = False,
        implicit: bool = False,
        use_consolidated: bool | None = None,
    ) -> None:
        self.store = store
        self.path = path
        self.metadata = metadata
        self.read_only = read_only or store.read_only
        self.implicit = implicit
        self.use_consolidated = use_consolidated

    @property
    def name(self) -> str:
        """The last segment of the group's path ("" for the root)."""
        return node_name(self.path)

    @property
    def attrs(self) -> Attributes:
        """The attributes, as a mutable mapping whose changes are written at once."""
        return Attributes(self)

    def __repr__(self) -> str:
        return f"<zarr3_backend.Group {self.path or '/'!r}>"

    @property
    def zarr_format(self) -> int:
        """2 for a group stored as Zarr v2 (``.zgroup``), else 3."""
        return 2 if V2_MARKER in self.metadata.extra_fields else 3

    @property
    def info(self) -> Any:
        """The group and its member counts, as a ``core.info.GroupInfo`` (print it)."""
        from .info import group_info

        return group_info(self)

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"group {self.path or '/'!r} is read-only")

    def _change_attributes(self, change: Callable[[dict], dict]) -> None:
        """Replace the stored attributes ``a`` by ``change(a)``, keeping every other part of the
        stored document (another writer's attributes, the consolidated metadata as stored)."""
        from .metadata_v2_store import update_node_metadata  # it reaches the commit protocol

        self._check_writable()

        def changed(stored: Any) -> GroupMetadata:
            return GroupMetadata(
                attributes=change(dict(stored.attributes)),
                consolidated_metadata=stored.consolidated_metadata,
                extra_fields=stored.extra_fields,
            )

        seen = update_node_metadata(self.store, self.path, changed, self.metadata)  # keeps in-flight marks
        self.metadata = GroupMetadata(
            attributes=seen.attributes,
            # a v2 group's .zmetadata is no part of its documents: this handle's copy stays
            consolidated_metadata=self.metadata.consolidated_metadata
            if self.zarr_format == 2
            else seen.consolidated_metadata,
            extra_fields=seen.extra_fields,
        )

    # ---- consolidated metadata -------------------------------------------------------------
    @property
    def consolidated(self) -> dict[str, dict] | None:
        """Relative path -> ``zarr.json`` document of every descendant, when consolidated and
        used: always with ``use_consolidated=True``; by default only for read-only groups (a
        writable group reads the live documents, so it never writes back a stale snapshot)."""
        cm = self.metadata.consolidated_metadata
        if not cm or self.use_consolidated is False or (self.use_consolidated is None and not self.read_only):
            return None
        return cm.get("metadata") or {}

    def _child_from_consolidated(self, rel: str) -> Node | None:
        docs = self.consolidated
        if docs is None or rel not in docs:
            return None
        path = join_path(self.path, rel)
        entry = docs[rel]
        if is_pending(entry):  # a v2 node's documents are translated when it is opened
            try:
                meta = _parse_v2(entry_document(entry, path), path)
            except Zarr3Error as e:  # the documents came from a .zmetadata, not from their files
                raise type(e)(f"in a consolidated {CONSOLIDATED_KEY}: {e}") from e
        elif entry.get("node_type") == "array":
            meta = ArrayMetadata.from_json(entry, path)
        else:
            meta = GroupMetadata.from_json(entry, path)
        if isinstance(meta, GroupMetadata):
            # descendants of a child group are in our table too: hand them down
            prefix = rel + "/"
            sub = {k[len(prefix) :]: v for k, v in docs.items() if k.startswith(prefix)}
            meta = GroupMetadata(
                attributes=meta.attributes,
                consolidated_metadata={"kind": "inline", "must_understand": False, "metadata": sub},
                extra_fields=meta.extra_fields,
            )
        return node_from_metadata(self.store, path, meta, read_only=self.read_only)

    # ---- children --------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Node:
        rel = normalize_path(name)
        if not rel:
            return self
        node = self._child_from_consolidated(rel)
        if node is not None:
            return node
        path = join_path(self.path, rel)
        meta = read_node_metadata(self.store, path)
        if meta is not None:
            return node_from_metadata(self.store, path, meta, read_only=self.read_only)
        if self.consolidated is None and is_implicit_group(self.store, path):
            return Group(
                self.store, path, GroupMetadata(attributes={}), read_only=self.read_only, implicit=True
            )
        raise NodeNotFoundError(f"no array or group named {rel!r} in group {self.path or '/'!r}")

    def __contains__(self, name: str) -> bool:
        try:
            self[name]
        except NodeNotFoundError:
            return False
        except Zarr3Error:
            return True  # a member whose metadata cannot be read is still a member
        return True

    def get(self, name: str, default: Any = None) -> Node | None:
        """The child ``name``, or ``default`` when there is none."""
        try:
            return self[name]
        except NodeNotFoundError:
            return default

    def __iter__(self) -> Iterator[str]:
        return iter(self.members(max_depth=1, errors="keep"))

    def __len__(self) -> int:
        return len(self.members(max_depth=1, errors="keep"))

    def members(
        self,
        max_depth: int | None = 1,
        *,
        skip_arrays: Collection[str] = (),
        errors: MemberErrors = "raise",
    ) -> dict[str, Node]:
        """Descendants by relative path, to ``max_depth`` levels (``None``: all), sorted.

        With consolidated metadata no store call is made; otherwise each level costs one
        listing per group plus one batched get of all ``zarr.json`` documents. Arrays whose
        name (last path part) is in ``skip_arrays`` are left out before their metadata is parsed,
        so a dropped array with metadata this package cannot read does not fail the listing.
        A member whose metadata cannot be read raises its typed error naming the member
        (``errors="raise"``), or is listed as an :class:`UnreadableNode` (``errors="keep"``;
        nothing below an unreadable group is listed).
        """
        if errors not in ("raise", "keep"):
            raise ValueError(f"errors must be 'raise' or 'keep', got {errors!r}")
        skip = frozenset(skip_arrays)
        if self.consolidated is not None:
            docs = self.consolidated
            out = {}
            unreadable: list[str] = []  # nothing below an unreadable group is listed
            for rel in sorted(docs):
                if max_depth is None or rel.count("/") < max_depth:
                    if skip and _is_skipped_array(docs[rel], rel, skip):
                        continue
                    if any(rel.startswith(u + "/") for u in unreadable):
                        continue
                    out[rel] = self._member(
                        rel, docs[rel], errors, partial(self._child_from_consolidated, rel)
                    )
                    if isinstance(out[rel], UnreadableNode):
                        unreadable.append(rel)
            return out
        out: dict[str, Node] = {}
        level = [("", self.path)]  # (relative path, absolute path) of groups to list
        depth = 0
        while level and (max_depth is None or depth < max_depth):
            children: list[tuple[str, str]] = []
            for rel, path in level:
                for child in self.store.list_dir(join_prefix(path)):
                    if child == "zarr.json" or child in V2_DOCUMENTS:
                        continue  # the group's own documents; stray files have no zarr.json below
                    if is_reserved_key(join_path(path, child)):
                        continue  # the write protocol's records (values staged by a write)
                    children.append((join_path(rel, child), join_path(path, child)))
            docs = self.store.get_many([metadata_key(p) for _, p in children])
            missing = [c for c, d in zip(children, docs, strict=True) if d is None]
            # v2 nodes are members of v2 groups; in a v3 group they are left out, as zarr-python
            # lists them (reachable by name, never listed into)
            v2 = self._v2_children(missing) if self.zarr_format == 2 else {}
            not_members = self._v2_nodes(missing) if self.zarr_format == 3 else set()
            level = []
            maybe_implicit = []
            for (rel, path), data in zip(children, docs, strict=True):
                if data is None and rel in v2:
                    doc: Any = v2[rel]
                    if skip and _is_skipped_array(doc, rel, skip):
                        continue
                    build = partial(self._v2_member, doc, path)
                elif data is None:
                    if self.zarr_format == 3 and rel not in not_members:  # v2 has no implicit groups
                        maybe_implicit.append((rel, path))
                    continue
                else:
                    doc = _json_or_none(data)
                    if skip and doc is not None and _is_skipped_array(doc, rel, skip):
                        continue
                    build = partial(self._v3_member, data, doc, path)
                node = self._member(rel, doc, errors, build)
                out[rel] = node
                if isinstance(node, Group):
                    level.append((rel, path))
            for rel, path in maybe_implicit:
                # a prefix with no zarr.json: an implicit group if anything is below it
                # (a stray file is not a prefix, so list_dir below it finds nothing)
                if is_implicit_group(self.store, path):
                    out[rel] = Group(
                        self.store,
                        path,
                        GroupMetadata(attributes={}),
                        read_only=self.read_only,
                        implicit=True,
                    )
                    level.append((rel, path))
            depth += 1
        return dict(sorted(out.items()))

    def _v3_member(self, data: Any, doc: Any, path: str) -> Node:
        meta = parse_node(data, path) if doc is None else parse_node_json(doc, path)
        return node_from_metadata(self.store, path, meta, read_only=self.read_only)

    def _v2_member(self, entry: dict, path: str) -> Node:
        meta = _parse_v2(entry_document(entry, path), path)
        return node_from_metadata(self.store, path, meta, read_only=self.read_only)

    def _member(self, rel: str, doc: Any, errors: MemberErrors, build: Callable[[], Node]) -> Node:
        """``build()``, the member at ``rel``; when its metadata cannot be read, its error naming
        the member (``errors="raise"``) or an :class:`UnreadableNode` (``errors="keep"``)."""
        try:
            return build()
        except Zarr3Error as e:
            path = join_path(self.path, rel)
            if errors == "raise":
                if repr(path) in str(e):  # already names the member
                    raise
                raise type(e)(f"member {rel!r} of group {self.path or '/'!r}: {e}") from e
            node_type = doc.get("node_type") if isinstance(doc, Mapping) else None
            return UnreadableNode(path, node_type if node_type in ("array", "group") else None, e)

    def _v2_children(self, children: list[tuple[str, str]]) -> dict[str, dict]:
        """Pending v2 entries (``metadata_v2.pending_entry``) of the children that have Zarr v2
        documents instead of a ``zarr.json``: one batched get for all of them."""
        if not children:
            return {}
        found = _v2_docs(self.store, [p for _, p in children], NODE_KEYS)
        entries = {rel: pending_entry(docs) for (rel, _), docs in zip(children, found, strict=True)}
        return {rel: e for rel, e in entries.items() if e is not None}

    def _v2_nodes(self, children: list[tuple[str, str]]) -> set[str]:
        """The children that are Zarr v2 nodes (``.zarray`` or ``.zgroup``), by existence only."""
        if not children:
            return set()
        keys = [join_path(p, name) for _, p in children for name in (ARRAY_KEY, GROUP_KEY)]
        found = self.store.exists_many(keys)
        return {rel for i, (rel, _) in enumerate(children) if found[2 * i] or found[2 * i + 1]}

    def arrays(self) -> Iterator[tuple[str, Array]]:
        """Direct child arrays as (name, Array)."""
        return ((k, v) for k, v in self.members().items() if isinstance(v, Array))

    def groups(self) -> Iterator[tuple[str, Group]]:
        """Direct child groups as (name, Group)."""
        return ((k, v) for k, v in self.members().items() if isinstance(v, Group))

    def array_keys(self) -> list[str]:
        """Names of the direct child arrays."""
        return [k for k, _ in self.arrays()]

    def group_keys(self) -> list[str]:
        """Names of the direct child groups."""
        return [k for k, _ in self.groups()]

    # ---- creating children -----------------------------------------------------------------
    def create_array(self, name: str, **kwargs: Any) -> Array:
        """Create an array below this group; same keywords as ``zarr3_backend.create_array``
        (``zarr_format`` defaults to the group's)."""
        from .api import create_array

        self._check_writable()
        kwargs.setdefault("zarr_format", self.zarr_format)
        return create_array(self.store, join_path(self.path, normalize_path(name)), **kwargs)

    def create_group(self, name: str, attributes: dict | None = None, overwrite: bool = False) -> Group:
        """Create a group below this group."""
        from .api import create_group

        self._check_writable()
        return create_group(
            self.store,
            join_path(self.path, normalize_path(name)),
            attributes=attributes,
            overwrite=overwrite,
            zarr_format=self.zarr_format,
        )

    def require_group(self, name: str) -> Group:
        """The group ``name``, created if missing; an array there is an error."""
        try:
            node = self[name]
        except NodeNotFoundError:
            return self.create_group(name)
        if not isinstance(node, Group):
            raise NodeExistsError(f"{join_path(self.path, name)!r} is an array, not a group")
        return node

    def require_array(self, name: str, **kwargs: Any) -> Array:
        """The array ``name`` if it exists, else a new one created with ``kwargs``."""
        try:
            node = self[name]
        except NodeNotFoundError:
            return self.create_array(name, **kwargs)
        if not isinstance(node, Array):
            raise NodeExistsError(f"{join_path(self.path, name)!r} is a group, not an array")
        for key, have in (("shape", node.shape), ("dtype", node.dtype)):
            if key in kwargs:
                want = tuple(kwargs[key]) if key == "shape" else np.dtype(kwargs[key])
                if want != have:
                    raise NodeExistsError(
                        f"array {node.path!r} exists with {key} {have}, not the requested {want}"
                    )
        return node

    def __delitem__(self, name: str) -> None:
        self._check_writable()
        path = join_path(self.path, normalize_path(name))
        if any(self.store.exists_many([join_path(path, ARRAY_KEY), join_path(path, GROUP_KEY)])):
            raise ZarrV2Error(
                f"{path!r} in group {self.path or '/'!r} is a Zarr v2 node: zarr3_backend writes v2 "
                "nodes but does not delete them"
            )
        if not self.store.exists(metadata_key(path)) and not is_implicit_group(self.store, path):
            raise NodeNotFoundError(f"no array or group named {name!r} in group {self.path or '/'!r}")
        from .commit import Transaction, root_is_consolidated  # commit reaches the stores' records

        # an erase in a transaction: it holds the node's claims (node_claims.held_nodes), so a
        # write into the node (an append, a resize) takes turns with it, and no crash leaves it
        # half gone; a consolidated root is rebuilt without the node (as zarr-python does), else
        # a consolidated open still lists it and reads it as all fill
        consolidate = root_is_consolidated(self.store)
        with Transaction(self.store, guard=(path,), erase_prefixes=[join_prefix(path)]) as txn:
            txn.commit(consolidate=consolidate)

    # ---- display ---------------------------------------------------------------------------
    def tree(self) -> str:
        """A readable outline of the hierarchy: groups with '/', arrays with shape and dtype, and
        members that cannot be read with the reason."""
        lines = [self.path or "/"]
        members = self.members(max_depth=None, errors="keep")
        for rel, node in members.items():
            indent = "  " * (rel.count("/") + 1)
            if isinstance(node, Array):
                lines.append(f"{indent}{node_name(rel)} {node.shape} {node.dtype}")
            elif isinstance(node, UnreadableNode):
                slash = "/" if node.node_type == "group" else ""
                lines.append(f"{indent}{node_name(rel)}{slash} (unreadable: {node.reason})")
            else:
                lines.append(f"{indent}{node_name(rel)}/")
        return "\n".join(lines)


def open_existing_group(store: Store, path: str, *, read_only: bool, use_consolidated: bool | None) -> Group:
    """The group at ``path``; an implicit group when it has no ``zarr.json`` but nodes below it.

    A Zarr v2 group is read as v3 (and written as v2). Raises ``GroupNotFoundError`` when neither it
    nor anything below it is a node.
    """
    meta = read_node_metadata(store, path, use_consolidated=use_consolidated)
    if meta is None:
        if is_implicit_group(store, path):
            return Group(store, path, GroupMetadata(attributes={}), read_only=read_only, implicit=True)
        raise GroupNotFoundError(
            f"no group at {path or '/'!r} in {store!r} (no zarr.json or .zgroup at it, no node below it)"
        )
    if isinstance(meta, ArrayMetadata):
        raise GroupNotFoundError(f"{path or '/'!r} is an array, not a group")
    if V2_MARKER in meta.extra_fields:  # .zmetadata already honoured or ignored
        return Group(store, path, meta, read_only=read_only, use_consolidated=use_consolidated)
    if use_consolidated is False and meta.consolidated_metadata is not None:
        meta = GroupMetadata(
            attributes=meta.attributes, consolidated_metadata=None, extra_fields=meta.extra_fields
        )
    elif use_consolidated is True and meta.consolidated_metadata is None:
        raise MetadataError(f"group {path or '/'!r} has no consolidated metadata (use_consolidated=True)")
    return Group(store, path, meta, read_only=read_only, use_consolidated=use_consolidated)


def _json_or_none(data: Any) -> Any:
    """The parsed JSON of a document, or ``None`` when it is not JSON (``parse_node`` says why)."""
    try:
        return load_json(data, "")
    except MetadataError:
        return None


def _is_skipped_array(doc: Any, rel: str, skip: frozenset[str]) -> bool:
    """Whether a ``zarr.json`` document is an array whose name is in ``skip``."""
    return isinstance(doc, dict) and doc.get("node_type") == "array" and node_name(rel) in skip
