"""Claims of a commit on the arrays whose shape it changes and the nodes it creates.

Two writes that change one array's shape (appends, resizes) must not both build on the shape
they read: the second would put its rows where the first one's went; two ``mode="w-"`` writes of
one group must not both create it. A commit holds a claim on each such document (a key under
``CLAIMS_DIR`` naming the write, created by a conditional write) from before its first value
moves until its documents are written, and checks under the claim that the stored shape is still
the one it started from (that the node is still missing); when it is not, the write is dropped
(nothing of it was visible) and made again from the new shape (refused: NodeExistsError). Used by
``commit``, which owns the rest of the protocol.

The same claims keep two ``to_zarr(mode="a")`` writes of one variable from interleaving their
chunks: one that adds a variable claims its document and, finding it added by another writer, is
dropped and planned again as an overwrite of it (NodeAddedError: the result is what running the
two one after the other gives, which is what a user of mode="a", "add or overwrite", expects);
one that overwrites a stored array whole claims it as a shape change from its stored shape to
the same (no new document), so two overwrites commit one after the other and the array ends
whole from one of them, and one planned before an append or a resize is planned again. The
check compares the array itself, not only its shape (``same_array``): one replaced by another
of the same shape (another data type, chunks, codecs) is planned for again too.

Claims held without a check (``held_nodes``) keep an erase from interleaving with writes into
what it erases: a commit that erases a group or an array holds the claims of every node stored
under it, and one that adds a node holds those of the groups above it. The latter are held
SHARED (``hold_modes``): a key per holding write under ``SHARED_DIR``, so any number of commits
adding different nodes below one group (or below sibling groups, sharing the root) hold it at
once. The exclusive side writes its claim first, then waits until no shared hold of that
document remains (``_drain``); a shared holder writes its hold first, then reads the exclusive
claim, and while one is held withdraws and waits (``_take_shared``): of an eraser and an adder
racing, at least one sees the other, and an eraser that announced itself is never overtaken by
a stream of adders. Shared holders of a dead writer are judged and finished as exclusive ones
are (``finish_dead``); holds are taken in key order after one all-at-once round, as claims are.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._threads import thread_map
from ..errors import (
    ArrayGoneError,
    MetadataError,
    NodeAddedError,
    NodeExistsError,
    ShapeMovedError,
    WriteConflictError,
    Zarr3Error,
)
from ..stores import Store
from .metadata import ArrayMetadata, parse_node_json
from .metadata_v2 import ARRAY_KEY, ATTRS_KEY, CONSOLIDATED_KEY, GROUP_KEY, array_document
from .txn_records import (
    MANIFEST,
    TXN_DIR,
    dump_doc,
    is_reserved_key,
    is_txn_id,
    parse_doc,
    txn_prefix,
    with_markers,
    writer_is_dead,
)

#: Where the claims are kept (one key per claimed document).
CLAIMS_DIR = f"{TXN_DIR}/shape-claims/"
_SHAPE_RETRIES = 64


#: Where shared holds are kept: ``<digest of the document>/<id of the holding write>``.
SHARED_DIR = f"{CLAIMS_DIR}shared/"


def _digest(doc_key: str) -> str:
    return hashlib.blake2b(doc_key.encode(), digest_size=12).hexdigest()


def claim_key(doc_key: str) -> str:
    """The key of the claim on document ``doc_key`` (a digest: one flat directory of claims)."""
    return CLAIMS_DIR + _digest(doc_key)


def shared_prefix(doc_key: str) -> str:
    """The prefix of the shared holds of document ``doc_key``: one key per holding write (its id)."""
    return f"{SHARED_DIR}{_digest(doc_key)}/"


def hold_modes(hold: Sequence[str], erase_prefixes: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(exclusive, shared)``: how a commit holds the documents ``hold`` (``held_nodes``) given
    the prefixes it erases. The nodes it erases are held exclusive; the groups above the nodes
    it adds, outside what it erases, shared: writers adding different nodes below one group hold
    it at once, and an erase of it waits for them all (and they for it)."""
    shared = sorted(k for k in set(hold) if not any(k.startswith(p) for p in erase_prefixes))
    return sorted(set(hold) - set(shared)), shared


def stored_shape(store: Store, doc_key: str) -> list[int] | None:
    """The ``shape`` of the array document at ``doc_key`` (v3 ``zarr.json`` or v2 ``.zarray``)."""
    return shape_of(store.get(doc_key), doc_key)


def shape_of(raw: bytes | None, doc_key: str) -> list[int] | None:
    """The ``shape`` of the array document ``raw`` stored at ``doc_key`` (None: not one)."""
    if raw is None:
        return None
    try:
        shape = parse_doc(raw, doc_key).get("shape")
    except MetadataError:
        return None
    return list(shape) if isinstance(shape, list) else None


def held_nodes(store: Store, erase_prefixes: Sequence[str], add: Sequence[str]) -> list[str]:
    """The documents whose claims a commit holds, unchecked, besides those it checks: every
    node stored under a prefix it erases (a replaced group or array) and that node's own
    documents, stored or not, and every group above a node it writes (``add``: the documents
    of the nodes it adds, creates, writes anew where it erased them, or changes the shape of). A commit that erases a group and one that adds a node to it (or appends to,
    or overwrites, an array in it) then commit one after the other: interleaved, the erase
    took the other's values moved in before its documents were written (an added variable left
    all fill, an append's rows lost)."""
    held = set()
    for prefix in erase_prefixes:
        held.update(stored_node_documents(store, prefix))
        # the erased node's own documents, stored or not (both formats): a writer adding below a
        # group that does not exist yet holds them shared, so it takes turns with this erase
        held.update(prefix + name for name in sorted(_NODE_DOCUMENTS))  # (review16: .zarray too)
    for doc_key in add:  # (or creates, or rewrites after erasing it)
        path = doc_key.rpartition("/")[0].rpartition("/")[0]  # the group the node is added to
        name = GROUP_KEY if doc_key.endswith((ARRAY_KEY, GROUP_KEY)) else "zarr.json"
        while True:
            held.add(f"{path}/{name}" if path else name)
            if not path:
                break
            path = path.rpartition("/")[0]
    return sorted(held)


_NODE_DOCUMENTS = frozenset({"zarr.json", ARRAY_KEY, GROUP_KEY})
#: Names in a node's directory that are documents, never directories to walk into.
_DOCUMENT_NAMES = _NODE_DOCUMENTS | {ATTRS_KEY, CONSOLIDATED_KEY}


def stored_node_documents(store: Store, prefix: str) -> list[str]:
    """The node documents (``zarr.json``, ``.zarray``, ``.zgroup``) stored at and below the key
    prefix ``prefix`` ("" the root, else ending in "/"), found by walking the hierarchy one level
    at a time (a listing per group and one batched read of the candidates' documents per level):
    an array's directory, known from its document, is never listed, so the cost does not grow
    with the number of chunks. Written here rather than with ``Group.members``, which parses the
    nodes and follows the formats' membership rules: every document counts, readable or not."""
    found: list[str] = []
    level, probed = [prefix], set()
    while level:
        keys = [d + name for d in level for name in ("zarr.json", ARRAY_KEY, GROUP_KEY)]
        docs = dict(zip(keys, store.get_many(keys), strict=True))
        found += [k for k, raw in docs.items() if raw is not None]
        # a name that looks like a document (``.zattrs``, ...) may also be a node (an array can
        # be named so): its documents were read with this level's, and it is listed only if a
        # node is stored there
        groups = [
            d
            for d in level
            if not _is_array_dir(docs, d)
            and (d not in probed or any(docs[d + n] is not None for n in _NODE_DOCUMENTS))
        ]
        listed = thread_map(lambda d: (d, list(store.list_dir(d))), groups, kind="io")
        below = [(d, name) for d, names in listed for name in names if not is_reserved_key(d + name)]
        level = [f"{d}{name}/" for d, name in below]  # (a write's records are not walked)
        probed = {f"{d}{name}/" for d, name in below if name in _DOCUMENT_NAMES}
    return sorted(found)


def _is_array_dir(docs: Mapping[str, bytes | None], prefix: str) -> bool:
    """Whether the node documents read at ``prefix`` (``docs``, by key) say an array is stored
    there (a ``.zarray``, or a ``zarr.json`` of node type array): its directory holds chunks."""
    if docs[prefix + ARRAY_KEY] is not None:
        return True
    raw = docs[prefix + "zarr.json"]
    if raw is None:
        return False
    try:
        return parse_doc(raw, prefix + "zarr.json").get("node_type") == "array"
    except MetadataError:
        return False  # unreadable: walked into, so no node below it is missed


def _array_of(raw: bytes, doc_key: str) -> ArrayMetadata | None:
    """The array the document ``raw`` at ``doc_key`` (``zarr.json``, or a v2 ``.zarray`` alone)
    describes, without its attributes and in-flight markers (None: not a readable array)."""
    path, _, name = doc_key.rpartition("/")
    try:
        doc = with_markers(parse_doc(raw, doc_key), {})
        meta = parse_node_json(array_document(doc, {}, path) if name == ARRAY_KEY else doc, path)
    except Zarr3Error:
        return None
    return meta.evolve(attributes={}) if isinstance(meta, ArrayMetadata) else None


def same_array(stored: bytes | None, planned: bytes, doc_key: str) -> bool:
    """Whether the stored document ``stored`` describes the array of ``planned`` (the document
    a write read and planned from) with at most its shape and attributes changed since: the
    same data type, chunk grid, codecs, fill value, ... (an array replaced by another of the
    same shape is not: units encoded for the old one would be wrong under the new)."""
    if stored == planned:
        return True
    was = _array_of(planned, doc_key)
    if was is None:
        return True  # nothing to judge by: the shape alone is checked
    now = None if stored is None else _array_of(stored, doc_key)
    try:
        return now is not None and now.evolve(shape=was.shape) == was
    except Zarr3Error:
        return False  # another rank (a grid that cannot hold the old shape): another array


class _Patience:
    """How a claim waits for a live holder: growing, jittered pauses until the store's
    ``commit_wait`` runs out, then the refusal."""

    def __init__(self, store: Store) -> None:
        self.wait = store.settings.commit_wait
        self.deadline = time.monotonic() + self.wait
        self.delay = 0.002

    def pause(self, doc_key: str, holder_id: str, how: str) -> None:
        """Sleep a little, or raise WriteConflictError once ``commit_wait`` has run out."""
        if time.monotonic() > self.deadline:
            raise WriteConflictError(
                f"{doc_key!r}: another write ({holder_id}) holds this node's claim ({how}) and did "
                f"not finish within commit_wait ({self.wait} s); nothing of this write was written"
            )
        time.sleep(self.delay * (0.5 + secrets.randbelow(1000) / 1000))
        self.delay = min(self.delay * 2, 0.1)


def _take_claim(store: Store, doc_key: str, txn_id: str, finish_dead: Callable[[str], object]) -> bool:
    """Hold ``doc_key``'s claim for ``txn_id``: waits while a live write holds it (up to the
    store's ``commit_wait``), finishes a dead holder's write first (``finish_dead(holder id)``:
    the protocol's repair of that one write), takes over a stale one. False when ``txn_id`` held it
    already (an earlier, interrupted run of its commit)."""
    key = claim_key(doc_key)
    me = txn_id.encode()
    patience = _Patience(store)
    while True:
        if store.set_if(key, me, None):
            return True
        holder, version = store.get_versioned(key)
        if holder is None:
            continue  # released meanwhile
        holder_id = holder.decode(errors="replace")
        if not is_txn_id(holder_id):
            if store.set_if(key, me, version):  # not a write's id: nothing holds the claim
                return True
            continue
        if holder_id == txn_id:
            return False  # taken by an earlier run of this commit, which checked the shape
        if writer_is_dead(holder_id):
            finish_dead(holder_id)  # its write finished (or dropped): the claim is freed
            holder, version = store.get_versioned(key)
            if holder is None or holder.decode(errors="replace") != holder_id:
                continue
        if store.get(txn_prefix(holder_id) + MANIFEST) is None:
            # a holder keeps its manifest while it holds the claim (it gives the claim up
            # first): with the manifest gone the claim is left over; the version check makes
            # the take-over lose to any writer that took the claim since it was read
            if store.set_if(key, me, version):
                return True
            continue
        # a live holder, or a dead one's write another repairer is finishing: wait for it
        patience.pause(doc_key, holder_id, "it changes the array's shape, creates or erases the node")


def _take_shared(
    store: Store, doc_key: str, txn_id: str, finish_dead: Callable[[str], object], *, checked: bool
) -> None:
    """Hold ``doc_key`` shared for ``txn_id``: its key among the document's shared holds is
    written first, then the exclusive claim read (an eraser writes that claim first, then lists
    the shared holds: of two such writers at least one sees the other). While a write holds the
    exclusive claim the shared hold is withdrawn and that write waited for (so an eraser that
    announced itself is never overtaken by a stream of adders). ``checked``: an earlier run of
    this commit took and checked every claim: a shared hold it left is held still, whatever
    holds the exclusive claim now (an eraser that came later waits for it)."""
    mine = shared_prefix(doc_key) + txn_id
    me = txn_id.encode()
    key = claim_key(doc_key)
    patience = _Patience(store)
    if not store.set_if(mine, me, None) and checked:
        return
    while True:
        holder, version = store.get_versioned(key)
        if holder is None:
            return  # written before the exclusive claim was seen free: held
        holder_id = holder.decode(errors="replace")
        if holder_id == txn_id:
            return  # (a document is held one way by a write: not reached)
        store.erase(mine)  # withdrawn: the eraser waits for no withdrawn holder
        _outwait(store, doc_key, holder, version, finish_dead, patience)
        store.set(mine, me)


def _outwait(
    store: Store,
    doc_key: str,
    holder: bytes,
    version: object,
    finish_dead: Callable[[str], object],
    patience: _Patience,
) -> None:
    """Wait until the exclusive claim of ``doc_key`` no longer holds ``holder`` (read at
    ``version``): a claim naming no write, or a write whose manifest is gone, is removed; a dead
    holder's write is finished (or dropped) first."""
    key = claim_key(doc_key)
    holder_id = holder.decode(errors="replace")
    while True:
        if not is_txn_id(holder_id):
            store.erase_if(key, version)  # names no write: holds nothing
            return
        if writer_is_dead(holder_id):
            finish_dead(holder_id)  # its write finished (or dropped): the claim is freed
        if store.get_versioned(key)[1] != version:
            return  # released (or taken anew: looked at again)
        if store.get(txn_prefix(holder_id) + MANIFEST) is None:
            store.erase_if(key, version)  # left over (a holder keeps its manifest while it holds)
            return
        patience.pause(doc_key, holder_id, "it erases or creates the node")


def _drain(store: Store, doc_key: str, txn_id: str, finish_dead: Callable[[str], object]) -> None:
    """Wait, holding ``doc_key``'s exclusive claim, until no other write holds it shared (none
    takes it anew meanwhile: each sees the claim and withdraws): a dead holder's write is
    finished (or dropped) first, a hold naming no write or a write whose manifest is gone
    (given up after it) is removed."""
    prefix = shared_prefix(doc_key)
    patience = _Patience(store)
    while True:
        holders = [k[len(prefix) :] for k in store.list_prefix(prefix) if k != prefix + txn_id]
        if not holders:
            return
        live = ""
        for holder_id in holders:
            if is_txn_id(holder_id):
                if writer_is_dead(holder_id):
                    finish_dead(holder_id)  # frees its holds: finished, or dropped
                if store.exists(txn_prefix(holder_id) + MANIFEST):
                    live = holder_id  # running (or a dead one another repairer is finishing)
                    continue
            store.erase(prefix + holder_id)  # names no write, or left over
        if live:
            patience.pause(doc_key, live, "it adds a node below this group")


def _take_all_at_once(
    store: Store, exclusive: Sequence[str], shared: Sequence[str], drained: Sequence[str], txn_id: str
) -> bool:
    """Take every claim of ``exclusive`` and every shared hold of ``shared`` for ``txn_id`` in one
    round of conditional writes (all at once: one round trip for all on object storage, where
    one after another cost one each), then look in one round whether another write holds one of
    ``shared`` exclusive or one of ``drained`` (of ``exclusive``) shared; when one is held (by
    another write, or by an earlier run of this one) the ones just taken are given back and
    False returned, for ``_take_claim`` and ``_take_shared`` to take them in key order. Nothing
    waits while holding a claim, so two writers still never wait on each other."""
    if len(exclusive) + len(shared) < 2:
        return False
    me = txn_id.encode()
    keys = [claim_key(k) for k in exclusive] + [shared_prefix(k) + txn_id for k in shared]
    taken = thread_map(lambda key: store.set_if(key, me, None), keys, kind="io")
    if all(taken) and not _others_hold(store, shared, drained, txn_id):
        return True
    release_claims(store, [k for k, ok in zip(exclusive, taken[: len(exclusive)], strict=True) if ok], txn_id)
    release_shared(store, [k for k, ok in zip(shared, taken[len(exclusive) :], strict=True) if ok], txn_id)
    return False


def _others_hold(store: Store, shared: Sequence[str], drained: Sequence[str], txn_id: str) -> bool:
    """Whether a write holds one of ``shared`` exclusive (one batched read) or another one of
    ``drained`` shared (one listing of every shared hold)."""
    if shared and any(v is not None for v in store.get_many([claim_key(k) for k in shared])):
        return True
    if not drained:
        return False
    digests = {_digest(k) for k in drained}
    for key in store.list_prefix(SHARED_DIR):
        digest, _, holder = key[len(SHARED_DIR) :].partition("/")
        if digest in digests and holder != txn_id:
            return True
    return False


def sweep_claims(store: Store, *, only_dead: bool = True) -> None:
    """Remove claims nothing holds any more: those naming no write, and those of a write whose
    manifest is gone and whose writer is dead (any writer, with ``only_dead=False``). The next
    claim of those documents would take them over anyway; this keeps the store tidy."""
    for key in list(store.list_prefix(CLAIMS_DIR)):
        holder, version = store.get_versioned(key)
        if holder is None:
            continue
        holder_id = holder.decode(errors="replace")
        if is_txn_id(holder_id):
            if only_dead and not writer_is_dead(holder_id):
                continue
            if store.get(txn_prefix(holder_id) + MANIFEST) is not None:
                continue  # its write is still to be finished (by repair, which frees it)
        if store.supports_conditional_writes:
            store.erase_if(key, version)
        else:
            store.erase(key)


def release_claims(store: Store, doc_keys: Iterable[str], txn_id: str) -> None:
    """Give up ``txn_id``'s shape claims on ``doc_keys`` (those another write holds stay)."""
    if not store.supports_conditional_writes:
        return  # none was taken

    def release(doc_key: str) -> None:
        key = claim_key(doc_key)
        holder, version = store.get_versioned(key)
        if holder is not None and holder.decode(errors="replace") == txn_id:
            store.erase_if(key, version)

    thread_map(release, list(doc_keys), kind="io")  # independent: all at once


def release_shared(store: Store, doc_keys: Iterable[str], txn_id: str) -> None:
    """Give up ``txn_id``'s shared holds on ``doc_keys`` (each key is its own: no check)."""
    keys = [shared_prefix(k) + txn_id for k in doc_keys]
    if keys and store.supports_conditional_writes:  # else none was taken
        store.erase_many(keys)


def claim_nodes(
    store: Store,
    txn_id: str,
    shape_from: Mapping[str, Sequence[int]],
    create: Sequence[str],
    finish_dead: Callable[[str], object],
    *,
    add: Sequence[str] = (),
    hold: Sequence[str] = (),
    share: Sequence[str] = (),
    planned: Mapping[str, bytes] | None = None,
    checked: bool = False,
) -> Zarr3Error | None:
    """Take the claims of a commit that changes the shapes of ``shape_from``'s arrays (document
    key -> the shape the write started from) and creates the nodes whose documents are
    ``create``, in key order (two writers never wait on each other). Returns the refusal, every
    claim given up, when a stored shape is no longer the one the write started from
    (ShapeMovedError) or a node it creates is stored now (NodeExistsError: another writer
    created it first); None when the write may go on. ``add``: documents of nodes the write
    adds to a group other writers may add them to (``mode="a"``): one stored now refuses the
    write with NodeAddedError, and it is planned again over the stored node. ``finish_dead(txn
    id)`` repairs a dead writer's write (that one only: the waiter holds claims meanwhile, and
    the other writes in the store are ``repair``'s business). ``hold``: documents claimed and
    not checked (``held_nodes``); ``share``: documents held shared, not checked (``hold_modes``:
    one also claimed is held exclusive). ``planned``: documents of ``shape_from``'s arrays as the
    write read them; one replaced since by another array of the same shape (``same_array``)
    refuses the write as a changed shape does.
    ``checked``: an earlier run of this commit took and checked the claims (its record says so):
    claims it still holds are not checked again (values may have moved since)."""
    planned = planned or {}
    keys = sorted({*shape_from, *create, *add, *hold})
    shared = sorted(set(share) - set(keys))
    # the claims other writers may hold shared (groups): taken, they wait for those to finish
    drained = {*create, *hold}
    # else no claim can be taken: the check alone
    if store.supports_conditional_writes and not _take_all_at_once(
        store, keys, shared, sorted(drained), txn_id
    ):
        for doc_key in sorted({*keys, *shared}):  # one after the other, in key order
            if doc_key in shared:
                _take_shared(store, doc_key, txn_id, finish_dead, checked=checked)
                continue
            _take_claim(store, doc_key, txn_id, finish_dead)  # or still held by an earlier run
            if doc_key in drained and not checked:  # checked: drained by the earlier run
                _drain(store, doc_key, txn_id, finish_dead)
    if checked:
        return None  # checked by an earlier run of this commit (on any store: values may have moved)
    # every document checked under every claim, read in one batch (the held ones are not checked)
    checked_keys = sorted({*shape_from, *create, *add})
    # a node created or added must be missing in both formats: a v2 array's .zarray next to a
    # group's .zgroup (or zarr.json) stored meanwhile makes one directory two nodes (review16)
    same_node = {k: _node_documents_at(k) for k in {*create, *add}}
    read = sorted({*checked_keys, *(k for keys in same_node.values() for k in keys)})
    stored_docs = dict(zip(read, store.get_many(read), strict=True)) if read else {}
    for doc_key in checked_keys:
        refusal: Zarr3Error | None = None
        if doc_key in shape_from:
            stored = shape_of(stored_docs[doc_key], doc_key)
            if stored is None:  # the write would bring back an array erased meanwhile, with holes
                refusal = ArrayGoneError(
                    f"{doc_key!r}: the array this write changes the shape of is gone, no longer an "
                    "array, or unreadable (another writer erased or replaced it); nothing of this "
                    "write was written"
                )
            elif stored != list(shape_from[doc_key]) or (
                doc_key in planned and not same_array(stored_docs[doc_key], planned[doc_key], doc_key)
            ):
                refusal = moved(shape_from)  # made again from the new shape (the new array)
        elif doc_key in add:
            if any(stored_docs[k] is not None for k in same_node[doc_key]):
                refusal = NodeAddedError(
                    f"{doc_key!r}: another writer added this node while this write was prepared "
                    "as its creation; nothing of this write was written"
                )
        elif doc_key in create and any(stored_docs[k] is not None for k in same_node[doc_key]):
            refusal = NodeExistsError(
                f"{doc_key!r}: another writer created this node while this write was prepared "
                "(mode='w-'); nothing of this write was written"
            )
        if refusal is not None:
            release_claims(store, keys, txn_id)
            release_shared(store, shared, txn_id)
            return refusal
    return None


def _node_documents_at(doc_key: str) -> list[str]:
    """The keys of every node document (both formats) of the node ``doc_key`` is a document of."""
    path = doc_key.rpartition("/")[0]
    return [f"{path}/{name}" if path else name for name in sorted(_NODE_DOCUMENTS)]


def shape_only(key: str, new_doc: bytes) -> Callable[[bytes], bytes]:
    """How a shape change writes the array document ``key``: the stored document with
    ``new_doc``'s shape (attributes another writer set meanwhile are kept); ``new_doc`` itself
    when what is stored is no longer an array document."""
    shape = parse_doc(new_doc, key).get("shape")

    def rebase(stored: bytes) -> bytes:
        try:
            doc = parse_doc(stored, key)
        except MetadataError:
            return new_doc
        if doc.get("node_type") != "array" or not isinstance(doc.get("shape"), list):
            return new_doc
        return dump_doc({**doc, "shape": shape})

    return rebase


def moved(shape_from: Mapping[str, Sequence[int]]) -> ShapeMovedError:
    """The refusal of a write whose arrays' shapes (``shape_from``) another writer changed first."""
    return ShapeMovedError(
        f"{sorted(shape_from)}: another writer changed the array's shape (or replaced the array) "
        "while this write was prepared; nothing of it was written"
    )


def retry_shape_change(write: Callable[[], Any], *, replans_gone: bool = False) -> Any:
    """``write()``, made again (it reads the stored shapes and nodes afresh) while another
    writer's shape change, or its addition of a node this write adds, gets in first; raises
    ShapeMovedError (NodeAddedError) when that happens ``_SHAPE_RETRIES`` times.
    ``replans_gone``: also when an array it writes into was erased first (ArrayGoneError), for
    a write planned from what is stored (``to_zarr``), not from a handle of that array."""
    again: tuple[type[Zarr3Error], ...] = (ShapeMovedError, NodeAddedError)
    if replans_gone:
        again = (*again, ArrayGoneError)
    for _ in range(_SHAPE_RETRIES - 1):
        try:
            return write()
        except again:
            continue
    return write()
