"""The write commit protocol: stage every new value out of sight, then commit in one short window.

A write goes through four steps, so that after a crash at any instant every reader sees the old
state, the new state, or a typed refusal (:class:`~zarr3_backend.errors.InterruptedWriteError`):

1. **stage**: chunk and shard values are written under ``.z3-txn/<id>/data/<key>`` (and erases
   recorded under ``.z3-txn/<id>/erase/<key>``) through a :class:`StagingStore`; readers never look
   there. A crash here leaves the old state and a staging area the next write removes.
2. **manifest**: ``.z3-txn/<id>/manifest.json`` records the documents to write and the prefixes to
   erase. From here on the write can always be finished: the next write, or :func:`repair`, rolls
   it forward.
3. **mark**: every ``zarr.json`` the commit will change (and the hierarchy's root) gets the
   extension field ``zarr3_backend.write_in_progress`` with ``"must_understand": true``: our
   reader, zarr-python, tensorstore and xarray refuse the node until the commit is done.
4. **apply**: old prefixes are erased, staged values moved into place, then the new documents
   written (the root last; they carry no marker) and the staging area removed.

Zarr v2 nodes (``.zarray``/``.zgroup``/``.zattrs``) have no field a reader must understand, so
they are never marked: their values are staged and moved into place as for v3, then their
documents written last (``.zattrs`` before ``.zarray``), then the consolidated ``.zmetadata``.
A crash leaves each chunk whole (old or new value), but until the commit is finished (by the
next write or :func:`repair`) a v2 reader may see new chunks under the old ``.zarray`` (an
append's new values past the old shape are not yet visible; a region write may show some of
its chunks and not others) and a stale ``.zmetadata``.

A write that changes an array's shape (an append, a resize) builds on the shape it read, and a
``mode="w-"`` write creates a node that must still be missing: before step 3 the commit claims
those documents and checks them (``node_claims``). When one has changed, the write is dropped,
none of its values having moved, and made again from the new shape (``retry_shape_change``), or
refused (NodeExistsError); two appends never put their rows at one offset. A ``mode="a"`` write
claims the arrays it adds (planned again over one another writer added first) and those it
overwrites whole (by the shape it planned from, and the document it read: an array replaced
by another of the same shape is not the one it planned for), so one array never holds two
writers' chunks. A write that erases a group or an array (``mode="w"``, an overwrite) holds the
claims of the nodes stored under it, and one that adds a node holds the groups above it shared
(``node_claims.held_nodes``, ``hold_modes``), so an erase never takes values another commit moved
in before its documents, while commits adding different nodes never wait on each other. The
claims are given up once the new documents are written. With adds committing at once, the root's
consolidated metadata is made within the root's compare-and-swap, listing the members again when
another commit wrote the root since they were listed (``_with_members_table``).

Each step is kept only with the ones before it after a crash of the machine too, where the store
is asked to (the ``durable`` setting): ``Store.barrier()`` flushes it before the manifest, the
claims and markers, around the record of the erases, before a merged unit's staged copy goes,
before the new documents, and between the manifest's removal and the other records' (a re-run
trusts the erases' record: kept without the manifest's removal, it would erase moved values).

Markers of several writers share the field (one entry per write), and are added and removed
with conditional writes where the store offers them. A write whose process is gone is finished
by the next write; a live writer's records are never touched (see ``_owner``).
"""

from __future__ import annotations

import json
import re
import secrets
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .._owner import current_owner, host_tag, token_is_dead
from .._threads import thread_map
from ..errors import (
    ArrayNotFoundError,
    ConsolidationSkippedWarning,
    InterruptedWriteError,
    MetadataError,
    NodeExistsError,
    WriteConflictError,
)
from ..stores import Store
from .metadata import load_json
from .metadata_v2 import ARRAY_KEY, ATTRS_KEY, CONSOLIDATED_KEY, GROUP_KEY
from .metadata_v2_write import is_v2_document_key
from .node_claims import (
    CLAIMS_DIR,
    claim_nodes,
    held_nodes,
    hold_modes,
    moved,
    release_claims,
    release_shared,
    same_array,
    shape_only,
    stored_node_documents,
    sweep_claims,
)
from .paths import metadata_key
from .shape_cuts import keep_within, shrinks
from .staging_store import StagingStore
from .txn_records import (
    MANIFEST,
    TXN_DIR,
    dump_doc,
    is_reserved_key,
    markers,
    new_txn_id,
    parse_doc,
    parse_manifest,
    txn_prefix,
    with_markers,
    writer_is_dead,
)

_ERASED = "erased"  # written once the erases of the commit are done
_CLAIMS_CHECKED = "claims-checked"  # written once the commit's claims are taken and checked
_DOC_RETRIES = 64
#: A repairer's claim as ``_claim`` writes it: its process token, its host's tag (absent in
#: claims written before the tag was added) and a nonce.
_REPAIRER = re.compile(r"(?P<token>[0-9]+-[^:@]+)(?:@(?P<host>[0-9a-f]{8}))?:[0-9a-f]{8}")


# ---- conditional document updates ----------------------------------------------------------------
def _update(store: Store, key: str, change: Callable[[bytes | None], bytes | None]) -> None:
    """Replace the value of ``key`` by ``change(old)`` (``None``: leave it), as a compare-and-swap
    where the store offers one; otherwise read-then-write."""
    if not store.supports_conditional_writes:
        new = change(store.get(key))
        if new is not None:
            store.set(key, new)
        return
    for attempt in range(_DOC_RETRIES):
        old, version = store.get_versioned(key)
        new = change(old)
        if new is None or store.set_if(key, new, version):
            return
        time.sleep(min(0.001 * 2**attempt, 0.05) * secrets.randbelow(1000) / 1000)
    raise WriteConflictError(f"{key!r}: changed by other writers {_DOC_RETRIES} times in a row")


def _levels(keys: Sequence[str], *, deepest_first: bool) -> list[list[str]]:
    """``keys`` grouped by depth, in the order given. Documents of one depth are independent, so
    the commit changes each group of them at once (one round trip for all, not one each, on
    object storage); the depth order keeps what readers rely on: a group is marked before its
    members and unmarked after them."""
    by_depth: dict[int, list[str]] = {}
    for key in keys:
        by_depth.setdefault(key.count("/"), []).append(key)
    return [by_depth[d] for d in sorted(by_depth, reverse=deepest_first)]


def _mark(store: Store, key: str, txn_id: str, owner: Mapping[str, Any]) -> None:
    def add(old: bytes | None) -> bytes | None:
        if old is None:
            return None  # a node that does not exist yet: nothing to guard
        doc = parse_doc(old, key)
        writes = markers(doc)
        if txn_id in writes:
            return None
        writes[txn_id] = dict(owner)
        return dump_doc(with_markers(doc, writes))

    _update(store, key, add)


def _write_final(
    store: Store,
    key: str,
    new_doc: bytes | None,
    txn_id: str,
    rebase: Callable[[bytes], bytes] | None = None,
) -> None:
    """Write ``new_doc`` (or, when ``None``, the stored document) without ``txn_id``'s marker,
    keeping the markers of other writes still in flight. ``rebase(stored)``, when given and a
    document is stored, makes the document to write from the stored one (without markers)
    instead, within the compare-and-swap."""

    def finish(old: bytes | None) -> bytes | None:
        if rebase is not None and new_doc is not None:
            stored = _unmarked(old, key)  # None when not a document: ``new_doc`` replaces it
            if stored is not None:
                return finished(old, rebase(stored))
        return finished(old, new_doc)

    def finished(old: bytes | None, new_doc: bytes | None) -> bytes | None:
        others = {}
        if old is not None:
            try:
                others = markers(parse_doc(old, key))
            except MetadataError:
                others = {}
        others.pop(txn_id, None)
        if new_doc is None:
            if old is None:
                return None
            doc = parse_doc(old, key)
            if txn_id not in markers(doc):
                return None
            return dump_doc(with_markers(doc, others))
        if not others:
            return new_doc
        return dump_doc(with_markers(parse_doc(new_doc, key), others))

    _update(store, key, finish)


def _unmarked(raw: bytes | None, key: str) -> bytes | None:
    """The stored document ``raw`` at ``key`` without in-flight markers (None: missing, or not
    a document)."""
    if raw is None:
        return None
    try:
        return dump_doc(with_markers(parse_doc(raw, key), {}))
    except MetadataError:
        return None


def replace_document(store: Store, key: str, doc: bytes) -> None:
    """Write ``doc`` as ``key``, keeping the markers of writes in flight on it (conditionally
    where the store can), so that a document written outside a transaction never unmarks one."""
    _write_final(store, key, doc, "")
    store.barrier()


def update_document(store: Store, key: str, change: Callable[[bytes | None], bytes | None]) -> bytes | None:
    """Replace ``key`` by ``change(stored)`` as a compare-and-swap where the store offers one
    (``change`` runs again on the newer value when another writer got there first), keeping the
    markers of writes in flight on it; ``stored`` is the document without them (``None`` when
    missing), and ``change`` returning ``None`` leaves it. Returns the document written, without
    the markers. How a change to part of a document (its attributes, its shape, one node's
    entries in a ``.zmetadata``) keeps every other writer's change to the rest."""
    written: list[bytes | None] = []

    def apply(old: bytes | None) -> bytes | None:
        writes: dict[str, Any] = {}
        if old is not None:
            doc = parse_doc(old, key)
            writes = markers(doc)
            if writes:
                old = dump_doc(with_markers(doc, {}))
        new = change(old)
        written[:] = [new]
        return dump_doc(with_markers(parse_doc(new, key), writes)) if writes and new is not None else new

    _update(store, key, apply)
    store.barrier()
    return written[0]


def _end_records(
    store: Store, base: str, claimed: Iterable[str], txn_id: str, shared: Iterable[str] = ()
) -> None:
    """Remove a finished or dropped write's records: the manifest first (a run that starts after
    this one finds nothing to roll forward, and a claim whose holder has no manifest is free to
    take over), then its claims and shared holds, then the rest of its records."""
    store.erase(base + MANIFEST)
    store.barrier()  # gone for good before the records a re-run would trust (the erases' one)
    # without the manifest, none of the rest is followed (a claim whose holder has no manifest
    # is free, records without one are dropped): removed at once, one round trip, not three. On
    # the "tasks" pool: each step maps its own requests onto "io" (run there, the claims of a
    # many-array write were released one after another)
    steps = [
        lambda: release_claims(store, claimed, txn_id),
        lambda: release_shared(store, shared, txn_id),
        lambda: store.erase_prefix(base),
    ]
    thread_map(lambda step: step(), steps, kind="tasks")


@contextmanager
def _claims_held(store: Store, **claims: Any) -> Iterator[str]:
    """Hold ``claims`` (manifest fields: ``shape_from``, ``within``, ``hold``) for a write that
    stages no values and writes no documents through the commit, while the body runs (given the
    write's id). A manifest without documents stands for the write, so a crash leaves what
    ``repair`` ends (once the claims are checked, a roll-forward of what is left: ``within``'s
    sweep); a stored shape not the one in ``shape_from`` raises ShapeMovedError (ArrayGoneError),
    nothing held."""
    txn_id = new_txn_id()
    base = txn_prefix(txn_id)
    manifest = {
        "id": txn_id,
        "owner": current_owner().to_json(),
        "documents": {},
        "erase_prefixes": [],
        "guard": [],
        "consolidate": None,
        **claims,
    }
    shape_from = manifest.get("shape_from") or {}
    shared = _shared(manifest)
    store.set(base + MANIFEST, json.dumps(manifest).encode())
    try:
        refusal = claim_nodes(store, txn_id, shape_from, (), _repairer(store), share=shared)
        if refusal is not None:
            raise refusal
        # from here a repair rolls it forward rather than check the shapes, which the body may
        # change: dropped, it would leave what a racing write stored past a new end
        store.set(base + _CLAIMS_CHECKED, b"")
        yield txn_id
    finally:
        _end_records(store, base, sorted(shape_from), txn_id, shared)


def claimed_shape_change(
    store: Store, doc_key: str, shape_from: Sequence[int], write: Callable[[], Any]
) -> Any:
    """``write()``, a change of the shape of the array whose document is ``doc_key`` made in that
    document alone (atomic by itself: no values staged, nothing marked), run under the array's
    shape claim once the stored shape is checked to be ``shape_from`` (else ShapeMovedError,
    nothing written), the groups above it held shared as a Transaction's shape change holds
    them (an erase of one takes turns with it). A crash leaves what ``repair`` finishes: once
    the claim is checked, clearing what a write planned at the old shape stored past a smaller
    new one (``within``)."""
    if store.commits_externally:
        return write()
    shape = [int(n) for n in shape_from]
    within = {doc_key: shape}
    hold = held_nodes(store, [], [doc_key])
    with _claims_held(store, shape_from=within, within=within, hold=hold) as txn_id:
        result = write()
        keep_within(store, txn_id, within, {doc_key}, _repairer(store))
        return result


@contextmanager
def holding_groups_above(store: Store, doc_keys: Sequence[str]) -> Iterator[None]:
    """Hold the groups above the nodes whose documents are ``doc_keys`` shared while the body
    runs (writes straight to their final keys, such as a copy's units, and then the nodes'
    documents): an erase of one of those groups waits for it, or it for the erase."""
    if store.commits_externally or not store.supports_conditional_writes or not doc_keys:
        yield
        return
    with _claims_held(store, hold=held_nodes(store, [], list(doc_keys))):
        yield


@contextmanager
def shapes_held(store: Store, shape_from: Mapping[str, Sequence[int]]) -> Iterator[None]:
    """Hold the claims of the arrays whose documents are ``shape_from``'s keys, checked to have
    the shapes given (else ShapeMovedError or ArrayGoneError, nothing held), while the body
    runs: a write that rewrites those documents outside a transaction (a migration) then takes
    turns with appends and resizes of them."""
    if store.commits_externally or not shape_from:
        yield
        return
    with _claims_held(store, shape_from={k: [int(n) for n in v] for k, v in shape_from.items()}):
        yield


# ---- the transaction ------------------------------------------------------------------------------
class Transaction:
    """One write: values go through :attr:`staging`; :meth:`commit` makes them visible at once.

    ``documents`` (``{zarr.json key: bytes}``) and ``erase_prefixes`` say what the write changes
    besides its staged values; ``guard`` names further nodes (paths) whose ``zarr.json`` must
    refuse readers while the commit runs; ``shape_from`` (array document key -> the shape the
    write started from) names the arrays whose shape it changes, and ``create`` the documents of
    nodes it creates that must not be stored (a ``mode="w-"`` write): the commit claims them,
    and raises ShapeMovedError (NodeExistsError), having written nothing, when another writer
    changed one first (created one first). ``add`` names the documents of nodes it adds to a
    group (``mode="a"``: NodeAddedError when another writer added one first, to plan the write
    again over it). A write that overwrites an array whole names it in ``shape_from`` with its
    stored shape and no new document: two such commits then never interleave their values, and
    one planned before another writer changed the shape is planned again. ``within`` (array
    document key -> the shape the staged values were planned for) names the arrays whose units
    left outside a smaller stored shape are erased once the values are in place (a shrink that
    committed meanwhile; ``shape_cuts.keep_within``). ``planned`` (array document key -> the
    document as the write read it) names what ``shape_from``'s arrays (and ``within``'s, checked
    before the manifest) were planned from besides their shape: one replaced meanwhile by
    another of the same shape (another data type, chunks, codecs) is refused as a changed shape
    is (``node_claims.same_array``). On a store that commits by itself (an Icechunk session: ``Store.commits_externally``) nothing is staged or marked: the erases and documents
    are written at once, the values straight to their keys, and the store's own commit makes
    them visible together."""

    def __init__(
        self,
        store: Store,
        guard: Iterable[str] = (),
        documents: Mapping[str, bytes] | None = None,
        erase_prefixes: Sequence[str] = (),
        shape_from: Mapping[str, Sequence[int]] | None = None,
        create: Iterable[str] = (),
        add: Iterable[str] = (),
        within: Mapping[str, Sequence[int]] | None = None,
        planned: Mapping[str, bytes] | None = None,
    ) -> None:
        store.check_writable()
        self.store = store
        self.id = new_txn_id()
        self.guard = [metadata_key(p) for p in guard]
        self.documents = dict(documents or {})
        self.erase_prefixes = list(erase_prefixes)
        self.shape_from = {k: [int(n) for n in v] for k, v in (shape_from or {}).items()}
        self.create = sorted(create)
        self.add = sorted(add)
        self.within = {k: [int(n) for n in v] for k, v in (within or {}).items()}
        claimed_or_within = {*self.shape_from, *self.within}
        self.planned = {k: bytes(v).decode() for k, v in (planned or {}).items() if k in claimed_or_within}
        self._done = False
        self.staging: Store
        if store.commits_externally:
            self.staging = store
            for prefix in self.erase_prefixes:
                store.erase_prefix(prefix)
            if self.documents:
                store.set_many(self.documents)
            return
        repair(store, only_dead=True)
        self.staging = StagingStore(store, self.id)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and not self._done:
            self.abort()

    def abort(self, manifest_sent: bool = False) -> None:
        """Forget everything staged (nothing was visible). A manifest that may have landed
        (``manifest_sent``: its write raised) goes first, for good, before the staged values it
        names: kept without them, a repair would roll the write forward with its values missing."""
        self._done = True
        if not self.store.commits_externally:
            prefix = txn_prefix(self.id)
            if manifest_sent:
                self.store.erase(prefix + MANIFEST)
                self.store.barrier()
            self.store.erase_prefix(prefix)

    def commit(
        self,
        documents: Mapping[str, bytes] | None = None,
        *,
        redo: Callable[[str], None] | None = None,
        consolidate: bool = False,
    ) -> None:
        """Make the staged values and the documents (those given here are added to those given
        at the start) visible, after erasing ``erase_prefixes``. ``redo(key)`` rewrites a
        read-modify-written unit whose stored version changed since it was read (a concurrent
        writer); without it the commit raises WriteConflictError. ``consolidate`` rebuilds the
        root's consolidated metadata from the documents as they are once all else is in place.
        The ``zarr.json`` of an array whose shape the write changes (``shape_from``) is written
        as the document stored then with the new shape (compare-and-swap, here and in a
        roll-forward by ``repair``): other writers' changes to the rest are kept."""
        if self._done:
            raise RuntimeError(f"transaction {self.id} is already finished")
        if not self.store.commits_externally:
            self._refuse_replaced()  # still not done: leaving the ``with`` block aborts it
        self._done = True
        if self.store.commits_externally:
            if documents:
                self.store.set_many(dict(documents))
            if consolidate:
                from .consolidate import consolidated_root_document

                root = consolidated_root_document(self.store, None)
                if root is not None:
                    self.store.set(metadata_key(""), root)
            return
        sent = False
        try:
            docs = {**self.documents, **dict(documents or {})}
            manifest = {
                "id": self.id,
                "owner": current_owner().to_json(),
                "documents": {k: v.decode() for k, v in docs.items()},
                "erase_prefixes": self.erase_prefixes,
                "guard": self.guard,
                "consolidate": "" if consolidate else None,
                "shape_from": self.shape_from,
                "create": self.create,
                "add": self.add,
                "within": self.within,
                "planned": self.planned,
                # writers below a group (adding, creating, rewriting, or changing an array's
                # shape) hold it shared; an erase of it holds it exclusive (review15 F3: an
                # append to an array added after the eraser listed its nodes came back with holes)
                "hold": held_nodes(
                    self.store,
                    self.erase_prefixes,
                    [*self.add, *self.create, *self._rewritten(docs), *self.shape_from],
                ),
            }
            self.store.barrier()  # the staged values kept before the manifest that points at them
            sent = True
            self.store.set(txn_prefix(self.id) + MANIFEST, json.dumps(manifest).encode())
        except BaseException:
            self.abort(sent)  # nothing refers to the staged values yet (nor to a manifest half-sent)
            raise
        _apply(self.store, manifest, self.staging.expected, redo, fresh=True)

    def _rewritten(self, docs: Mapping[str, bytes]) -> list[str]:
        """The documents of the nodes this write erases and writes anew (``mode="w"`` of a group
        below the root): their enclosing groups are held too, as for an added node."""
        tops = {p for p in self.erase_prefixes if p}
        return [k for k in docs if k.rpartition("/")[0] + "/" in tops]

    def _refuse_replaced(self) -> None:
        """Refuse (ShapeMovedError, nothing written) a write into arrays it does not claim
        (``within``: a region) when one was replaced since it was planned by another array (of
        another data type, chunks, codecs): its units, encoded for the old one, would be read
        wrong under the new document. Checked before the manifest, so never in a repair; a
        replacement committing at the same time as this commit is not seen."""
        keys = [k for k in self.within if k in self.planned and k not in self.shape_from]
        if not keys:
            return
        for key, stored in zip(keys, self.store.get_many(keys), strict=True):
            if not same_array(stored, self.planned[key].encode(), key):
                raise moved({k: self.within[k] for k in keys})


def root_is_consolidated(store: Store) -> bool:
    """Whether the store's root group document holds consolidated metadata, or a Zarr v2 root
    has a ``.zmetadata`` (one batched read)."""
    raw, zmetadata = store.get_many([metadata_key(""), CONSOLIDATED_KEY])
    if raw is None:
        return zmetadata is not None
    try:
        doc = load_json(raw, metadata_key(""))
    except MetadataError:
        return False  # not a document at all: the commit's own parse of it names the fault
    return isinstance(doc, dict) and isinstance(doc.get("consolidated_metadata"), dict)


def _guarded_keys(store: Store, manifest: Mapping[str, Any]) -> list[str]:
    """Every existing ``zarr.json`` the commit changes or guards, the deepest first."""
    # only zarr.json documents take the marker: v2 documents have no must-understand field
    keys = {k for k in (*manifest["documents"], *manifest["guard"]) if k.rpartition("/")[2] == "zarr.json"}
    if manifest.get("consolidate") is not None or root_is_consolidated(store):
        keys.add(metadata_key(""))
    for prefix in manifest["erase_prefixes"]:
        keys.update(k for k in stored_node_documents(store, prefix) if k.rsplit("/", 1)[-1] == "zarr.json")
    keys = {k for k in keys if not is_reserved_key(k)}
    return sorted(keys, key=lambda k: (-k.count("/"), k))


def _write_v2_documents(store: Store, docs: Mapping[str, bytes]) -> None:
    """Write v2 documents (unmarked) in concurrent batches, each flushed before the next: every
    ``.zattrs``, then every ``.zarray``/``.zgroup`` (a v2 reader finds a node by these and must
    then find its attributes), then a ``.zmetadata`` if one is among them. On an object store a
    batch costs one round trip, where a document at a time cost one each."""

    def named(*names: str) -> dict[str, bytes]:
        return {k: v for k, v in docs.items() if k.rpartition("/")[2] in names}

    for batch in (named(ATTRS_KEY), named(ARRAY_KEY, GROUP_KEY), named(CONSOLIDATED_KEY)):
        if batch:
            store.set_many(batch)
            store.barrier()


def _claimed(manifest: Mapping[str, Any]) -> list[str]:
    """The documents whose claims the write of ``manifest`` takes (exclusive), in key order."""
    fields = ("shape_from", "create", "add")
    exclusive, _ = _holds(manifest)
    return sorted({key for name in fields for key in (manifest.get(name) or ())} | set(exclusive))


def _shared(manifest: Mapping[str, Any]) -> list[str]:
    """The documents the write of ``manifest`` holds shared (and does not claim), in key order."""
    fields = ("shape_from", "create", "add")
    checked = {key for name in fields for key in (manifest.get(name) or ())}
    return [k for k in _holds(manifest)[1] if k not in checked]


def _holds(manifest: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(exclusive, shared)``: the documents the write of ``manifest`` holds unchecked."""
    return hold_modes(manifest.get("hold") or (), manifest["erase_prefixes"])


def _erased_documents(store: Store, base: str) -> list[str] | None:
    """The documents an earlier run of this commit erased, or None when the erases have not run."""
    raw = store.get(base + _ERASED)
    if raw is None:
        return None
    try:
        docs = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        docs = None
    if not isinstance(docs, list) or not all(isinstance(k, str) for k in docs):
        raise InterruptedWriteError(
            f"{base + _ERASED!r}: the record of the documents this interrupted write erased is "
            f"unreadable: it can be neither finished nor rolled back; once no writer runs, look at "
            f"what it changed and remove {base!r}"
        )
    return docs


def _conflict(key: str, redo: Callable[[str], None] | None) -> None:
    if redo is None:
        raise WriteConflictError(f"{key!r}: changed by another writer during the write")
    redo(key)


def _apply(
    store: Store,
    manifest: Mapping[str, Any],
    expected: Mapping[str, Any],
    redo: Callable[[str], None] | None,
    *,
    fresh: bool = False,
) -> None:
    """Steps 3 and 4 of the protocol; idempotent, so a dead writer's commit can be run again.
    ``fresh``: the first run, by the writer that has just written the manifest: no record of an
    earlier run can exist, so none is read (a round trip each on an object store)."""
    txn_id = manifest["id"]
    base = txn_prefix(txn_id)
    shape_from = manifest.get("shape_from") or {}
    create = manifest.get("create", ())
    add = manifest.get("add", ())
    hold, share = _holds(manifest)
    claimed, shared = _claimed(manifest), _shared(manifest)
    store.barrier()  # the manifest kept before any claim or marker that a repair must follow
    if claimed or shared:
        # a run that finds the claims checked (an earlier run of this commit, which may have
        # moved values since) does not check again; otherwise nothing of this write has moved
        checked = not fresh and store.get(base + _CLAIMS_CHECKED) is not None
        try:
            planned = {k: v.encode() for k, v in (manifest.get("planned") or {}).items()}
            refusal = claim_nodes(
                store,
                txn_id,
                shape_from,
                create,
                _repairer(store),
                add=add,
                hold=hold,
                share=share,
                planned=planned,
                checked=checked,
            )
        except WriteConflictError as e:
            refusal = e  # another write held a claim too long
        except BaseException:
            if not checked:  # a store error while claiming: dropped, no claim left held
                _end_records(store, base, claimed, txn_id, shared)
            raise
        if refusal is not None:
            if not checked:  # nothing of this write moved yet: dropped
                _end_records(store, base, claimed, txn_id, shared)
            raise refusal
        if not checked:
            store.set(base + _CLAIMS_CHECKED, b"")
    guarded = _guarded_keys(store, manifest)
    owner = manifest["owner"]
    for level in _levels(guarded, deepest_first=False):  # the root first: a consolidated reader
        thread_map(lambda key: _mark(store, key, txn_id, owner), level, kind="io")  # refuses at once

    # The erases run once, and record which documents go with them: a re-run (repair) must not
    # erase values or documents an earlier run already put in place.
    docs_gone = None if fresh else _erased_documents(store, base)
    if docs_gone is None and not fresh and store.get(base + MANIFEST) is None:
        return  # finished by another run (its manifest goes first): nothing may be erased again
    if docs_gone is None:
        keep, prefixes = set(guarded), manifest["erase_prefixes"]
        docs_gone = [
            k
            for k in guarded
            if k not in manifest["documents"]
            and k != metadata_key("")
            and any(k.startswith(p) for p in prefixes)
        ]
        if prefixes:  # nothing to erase (an append, a region write): a re-run erases nothing either
            for prefix in prefixes:
                store.erase_many(
                    [k for k in store.list_prefix(prefix) if k not in keep and not is_reserved_key(k)]
                )
            store.barrier()  # the erases kept before the record that says they are done
            store.set(base + _ERASED, json.dumps(docs_gone).encode())
            store.barrier()  # kept before any value moves in: a re-run without it erases them again

    data, tomb = base + "data/", base + "erase/"
    staged = [k[len(data) :] for k in store.list_prefix(data)]
    staged_set = set(staged)

    lost: list[str] = []  # units another writer changed that could not be merged again

    def place(key: str) -> None:  # a read-modify-written unit: put in place if unchanged
        value = store.get(data + key)
        if value is None:  # moved by an earlier, interrupted run of this commit
            return
        if not store.set_if(key, value, expected[key]):
            try:
                _conflict(key, redo)
            except WriteConflictError:
                lost.append(key)  # the other writer's value stays; the commit goes on without it

    checked = [k for k in staged if k in expected]
    if checked:
        thread_map(place, checked, kind="io")
        store.barrier()  # the placed values kept before their staged copies go
        store.erase_many([data + k for k in checked])
    if len(checked) < len(staged):
        store.move_prefix(data, "")  # the rest at once (whole new directories in one rename)
    erased = [k[len(tomb) :] for k in store.list_prefix(tomb)]
    erased = [k for k in erased if k not in staged_set]
    store.erase_many([k for k in erased if k not in expected])
    for key in (k for k in erased if k in expected):
        version = expected[key]
        ok = not store.exists(key) if version is None else store.erase_if(key, version)
        if not ok:
            try:
                _conflict(key, redo)
            except WriteConflictError:
                lost.append(key)  # as in place(): the other writer's value stays, the commit goes on

    store.barrier()  # the values kept in place before the documents that show them
    docs = {k: v.encode() for k, v in manifest["documents"].items()}
    rebase = {k: shape_only(k, docs[k]) for k in shape_from if k in docs and not is_v2_document_key(k)}
    root = metadata_key("")
    store.erase_many([k for k in docs_gone if k not in staged_set])  # nodes the write removes
    finals = {
        key: (docs.pop(key, None), rebase.get(key)) for key in guarded if key != root and key not in docs_gone
    }

    def write_final(key: str) -> None:
        doc, rebased = finals[key]
        _write_final(store, key, doc, txn_id, rebased)

    for level in _levels(list(finals), deepest_first=True):  # a group after its members
        thread_map(write_final, level, kind="io")
    v2_docs = {k: v for k, v in docs.items() if is_v2_document_key(k)}
    new = [k for k in docs if k != root and k not in v2_docs]  # nodes that did not exist yet
    for level in _levels(new, deepest_first=False):  # a group before its members
        thread_map(lambda key: _write_final(store, key, docs[key], txn_id), level, kind="io")
    _write_v2_documents(store, v2_docs)
    if v2_docs:
        from .consolidate import refresh_v2_consolidated

        refresh_v2_consolidated(store, v2_docs, rebuild=manifest.get("consolidate") is not None)
    if manifest.get("consolidate") is not None or docs_gone:
        # as the root's, in a consolidating commit; and in any commit that erases nodes (a
        # ``del``): a copy still listing an erased node reads it back as all fill
        from .consolidate import refresh_nested_consolidated

        documents = {k: v.encode() for k, v in manifest["documents"].items()}
        refresh_nested_consolidated(store, documents, docs_gone)  # groups below the root with copies
    root_doc = docs.get(root)
    root_replaced = root_doc is None and "" in manifest["erase_prefixes"]  # e.g. by a v2 root
    root_rebase = rebase.get(root)
    if manifest.get("consolidate") is not None and not root_replaced:
        if root_rebase is None:
            root_doc, root_rebase = _with_members_table(store, root_doc, txn_id)
        else:  # a root array whose shape changes: as it is
            root_doc = _consolidated_root(store, root_doc, txn_id)
    if root_doc is None and root in guarded and "" in manifest["erase_prefixes"]:
        store.erase(root)
    else:
        _write_final(store, root, root_doc, txn_id, root_rebase)
    shrunk = {k: v for k, v in shape_from.items() if shrinks(manifest["documents"].get(k), k, v)}
    keep_within(store, txn_id, {**shrunk, **(manifest.get("within") or {})}, set(claimed), _repairer(store))
    store.barrier()  # the documents kept before the records a repair would finish them from
    _end_records(store, base, claimed, txn_id, shared)  # the new shapes and nodes are stored
    if lost:
        raise WriteConflictError(
            f"{sorted(lost)} were changed by other writers while this write merged into them and could "
            "not be merged again: those units keep the other writers' values, the rest is committed"
        )


def _with_members_table(
    store: Store, root_doc: bytes | None, txn_id: str
) -> tuple[bytes | None, Callable[[bytes], bytes] | None]:
    """The root document with fresh consolidated metadata (``root_doc`` given by the write, else
    the stored root), and how ``_write_final`` makes the document it writes from the stored root
    (none when there is no root group): that document, or with the stored root only the members'
    table put in (a root attribute set meanwhile is kept). Writers adding nodes share the root's
    hold, so another one's consolidation can land between this listing and the write: when the
    stored root is no longer the one read before the listing, the members are listed again within
    the compare-and-swap (the last writer then lists after every other one wrote its nodes)."""
    from .consolidate import members_table_into

    key = metadata_key("")
    before = _unmarked(store.get(key), key)
    fresh = _consolidated_root(store, root_doc, txn_id)
    if fresh is None:
        return None, None

    def change(stored: bytes) -> bytes:
        doc = fresh if stored == before else _consolidated_root(store, root_doc, txn_id)
        if doc is None:
            return stored
        return doc if root_doc is not None else members_table_into(doc)(stored)

    return fresh, change


def _consolidated_root(store: Store, root_doc: bytes | None, txn_id: str) -> bytes | None:
    """The root document with fresh consolidated metadata, once no member carries another
    write's marker (this write's own are gone by now). When a member stays marked past
    ``commit_wait`` (a slow or dead writer), the commit still finishes, with the root's
    consolidated copy dropped (readers list the members; the next write consolidates again),
    rather than leave the root marked while this process lives. So too when a member's stored
    document holds text this package cannot write (a lone surrogate another implementation
    stored as a JSON escape): failing here, after the values moved, would leave the root marked
    for good (a repair fails the same way)."""
    from .consolidate import consolidated_root_document, unconsolidated_root_document

    try:
        return wait_for_commits(store, lambda: consolidated_root_document(store, root_doc), ignore=txn_id)
    except (InterruptedWriteError, MetadataError) as e:
        warnings.warn(
            f"write {txn_id!r} committed without refreshing the consolidated metadata, which it "
            f"dropped from the root document: {e}",
            ConsolidationSkippedWarning,
            stacklevel=2,
        )
        return unconsolidated_root_document(store, root_doc)


# ---- recovery ------------------------------------------------------------------------------------
def _repairer(store: Store) -> Callable[[str], object]:
    """What a claim waiting on a dead writer's claim runs: that writer's write alone finished
    (or dropped), which frees its claims; the rest of the store is left to ``repair`` (a full
    repair of a large store would stall the waiter, which holds claims of its own). A write
    that checked no claim yet is dropped: finishing it would take its other claims, one of
    which the waiter may hold (killed inside its one round of claims, it holds some of them in
    no order), and wait on the waiter until ``commit_wait`` ran out."""
    return lambda txn_id: _repair_write(store, txn_id, drop_unchecked=True)


def pending_writes(store: Store) -> list[str]:
    """Ids of the transactions with records in ``store`` (running, or left by dead writers)."""
    return sorted(t for t in store.list_dir(TXN_DIR + "/") if t != CLAIMS_DIR[len(TXN_DIR) + 1 : -1])


def wait_for_commits(store: Store, call: Callable[[], Any], ignore: str | None = None) -> Any:
    """``call()``, retried while it meets the marker of a write whose writer is alive (its commit
    window is short); a dead writer's marker, or one that outlasts the wait (the store's
    ``commit_wait`` setting, ``ZARR3_COMMIT_WAIT``), is raised. ``ignore``: a write not waited
    for (the caller's own, in its commit)."""
    deadline = time.monotonic() + store.settings.commit_wait
    delay = 0.002
    read_again = True
    while True:
        try:
            return call()
        except InterruptedWriteError:
            live = [t for t in pending_writes(store) if t != ignore and not writer_is_dead(t)]
            if not live:
                # The marker's write may have finished between ``call()`` reading the document and
                # the listing (a finished commit leaves no records): read once more before raising.
                if not read_again:
                    raise
                read_again = False
                continue
            read_again = True
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def _claim(store: Store, base: str, *, all_hosts: bool = False) -> bool:
    """Take a dead writer's transaction over, so that two repairers (processes or threads) never
    run it at once, where the store has conditional writes; False when a live one holds it.
    ``all_hosts``: the caller knows nothing else writes, so another host's repairer is gone."""
    if not store.supports_conditional_writes:
        return True
    token = current_owner().token()
    me = f"{token}@{host_tag()}:{secrets.token_hex(4)}".encode()
    if store.set_if(base + "claim", me, None):
        return True
    holder, version = store.get_versioned(base + "claim")
    if holder is None:
        return store.set_if(base + "claim", me, None)
    if _repairer_is_live(holder.decode(errors="replace"), all_hosts=all_hosts):
        return False  # a live repairer (perhaps another thread of this process, or another host) has it
    return store.set_if(base + "claim", me, version)  # a dead repairer's, or not one at all


def _repairer_is_live(claim: str, *, all_hosts: bool = False) -> bool:
    """Whether the repair claim ``claim`` names a repairer that may still run: one on another
    host is never judged (its process token means nothing here, as for writers) unless
    ``all_hosts`` (the caller knows nothing else writes: it is gone); one of this host runs
    while its process does; text that names no repairer holds nothing."""
    found = _REPAIRER.fullmatch(claim)
    if found is None:
        return False
    if found["host"] is not None and found["host"] != host_tag():
        return not all_hosts
    return not token_is_dead(found["token"])


def _repair_write(
    store: Store, txn_id: str, *, all_hosts: bool = False, drop_unchecked: bool = False
) -> bool:
    """Finish (roll forward) or drop the write ``txn_id``, judged dead by the caller; False when
    another live repairer has it (``all_hosts``: one of another host is taken as gone).
    ``drop_unchecked``: a write with claims none of whose values moved (its claims not yet
    checked) is dropped rather than finished."""
    base = txn_prefix(txn_id)
    if not _claim(store, base, all_hosts=all_hosts):
        return False  # another live repairer is finishing it
    raw = store.get(base + MANIFEST)
    if raw is None:
        store.erase_prefix(base)
        return True
    try:
        manifest = parse_manifest(raw, txn_id)
        claimed, shared = _claimed(manifest), _shared(manifest)
        if drop_unchecked and (claimed or shared) and store.get(base + _CLAIMS_CHECKED) is None:
            _end_records(store, base, claimed, txn_id, shared)  # nothing of it moved: the old state stays
            return True
        try:
            _apply(store, manifest, {}, None)
        except (WriteConflictError, NodeExistsError, ArrayNotFoundError):
            if store.get(base + MANIFEST) is not None:
                raise
            # dropped before any of its values moved: another writer changed the shape it grew
            # from first, created the node it created, or held that claim past commit_wait
    except BaseException:
        # given up: the next repair (of any process) meets the write again, and raises again
        # when its records are unreadable, rather than skip it while this process lives
        store.erase(base + "claim")
        raise
    return True


def repair(store: Store, *, only_dead: bool = True) -> list[str]:
    """Finish or roll back the writes whose writer is gone: a committed manifest is rolled forward
    (its staged values moved, documents written, markers removed), a write that never reached
    its manifest is dropped. With ``only_dead=False`` every pending write is treated as dead
    (the caller knows no writer runs), and so is another host's repairer of one. Returns the
    ids it finished or dropped."""
    done = []
    entries = set(store.list_dir(TXN_DIR + "/"))
    claims_dir = CLAIMS_DIR[len(TXN_DIR) + 1 : -1]
    for txn_id in sorted(entries - {claims_dir}):
        if only_dead and not writer_is_dead(txn_id):
            continue
        if _repair_write(store, txn_id, all_hosts=not only_dead):  # repairers are writers too
            done.append(txn_id)
    if claims_dir in entries:
        sweep_claims(store, only_dead=only_dead)
    return done


__all__ = [
    "TXN_DIR",
    "claimed_shape_change",
    "Transaction",
    "is_reserved_key",
    "pending_writes",
    "repair",
    "replace_document",
    "root_is_consolidated",
    "update_document",
    "wait_for_commits",
]
