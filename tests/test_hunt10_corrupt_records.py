"""The write protocol's own records (``.z3-txn/<id>/manifest.json``, ``erased``,
``claims-checked``, the node claims) corrupted: truncated, bit-flipped, of the wrong type or
missing a field. A malformed manifest made the next write and ``repair`` fail with a bare
KeyError/TypeError/AttributeError; now they refuse with InterruptedWriteError naming the record
(the interrupted write can be neither finished nor dropped), ``zarr3 check`` reports it bad, and
readers keep seeing the old state. Records whose content the protocol never reads are treated as
designed (the write is finished)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from store_doubles import SnapshotOnSetStore

import zarr3_backend as z3
from zarr3_backend.cli.check import scan
from zarr3_backend.core import commit, node_claims
from zarr3_backend.core.node_claims import CLAIMS_DIR, SHARED_DIR
from zarr3_backend.errors import InterruptedWriteError

COLS = 2


def _interrupted(record: str) -> tuple[dict, str]:
    """The contents of a store whose append (of two rows of 9 to three rows of 1) was killed
    right after writing ``record``, and the write's id."""
    store = SnapshotOnSetStore()
    z3.create_array(store, "a", shape=(3, COLS), dtype="i4", chunks=(2, COLS), fill_value=0)[...] = 1
    store.when = lambda key: key.endswith("/" + record)
    z3.open_array(store, "a", mode="r+").append(np.full((2, COLS), 9, "i4"))
    (txn,) = commit.pending_writes(z3.MemoryStore(store.snapshot))
    return dict(store.snapshot), txn


def _dead(monkeypatch, txn: str) -> None:
    real = commit.writer_is_dead
    fake = lambda t: t == txn or real(t)  # noqa: E731
    monkeypatch.setattr(commit, "writer_is_dead", fake)
    monkeypatch.setattr(node_claims, "writer_is_dead", fake)


def _manifest_variants() -> dict[str, object]:
    """How a manifest is corrupted: a function of its bytes and parsed form to new bytes."""

    def field(name, value):
        return lambda raw, doc: json.dumps({**doc, name: value}).encode()

    def without(name):
        return lambda raw, doc: json.dumps({k: v for k, v in doc.items() if k != name}).encode()

    return {
        "truncated": lambda raw, doc: raw[: len(raw) // 2],
        "bit-flipped": lambda raw, doc: bytes([raw[0] ^ 0x40]) + raw[1:],
        "not-utf8": lambda raw, doc: b"\xff\xfe" + raw,
        "a-list": lambda raw, doc: b"[]",
        "no-id": without("id"),
        "no-documents": without("documents"),
        "no-guard": without("guard"),
        "documents-number": field("documents", 5),
        "document-not-text": field("documents", {"a/zarr.json": 5}),
        "prefixes-not-keys": field("erase_prefixes", [5]),
        "shape-from-list": field("shape_from", [1]),
        "shape-from-text": field("shape_from", {"a/zarr.json": "x"}),
        "create-number": field("create", 5),
        "within-null-shape": field("within", {"a/zarr.json": None}),
        "id-of-another": field("id", "1-2-3-4-5-6"),
    }


@pytest.mark.parametrize("variant", sorted(_manifest_variants()))
def test_a_corrupt_manifest_is_refused_by_name_and_the_old_state_stays_readable(monkeypatch, variant):
    contents, txn = _interrupted("manifest.json")
    key = f".z3-txn/{txn}/manifest.json"
    raw = contents[key]
    contents[key] = _manifest_variants()[variant](raw, json.loads(raw))
    store = z3.MemoryStore(contents)
    _dead(monkeypatch, txn)
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1])  # not yet marked
    match = f"manifest {key!r} is unreadable"
    with pytest.raises(InterruptedWriteError, match=match):
        commit.repair(store)
    with pytest.raises(InterruptedWriteError, match=match):
        z3.open_array(store, "a", mode="r+").append(np.full((1, COLS), 7, "i4"))
    with pytest.raises(InterruptedWriteError, match=match):
        z3.open_array(store, "a", mode="r+")[0:3] = 5
    report = scan(store, "", show_progress=False)
    assert list(report.bad) == [key] and report.in_flight == [txn] and not report.ok
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1])  # nothing written


@pytest.mark.parametrize("value", [b"{not json", b"5", b'["a/zarr.json", 3]'])
def test_a_corrupt_erased_record_is_refused_by_name(monkeypatch, value):
    """The record of the documents a commit erased (read on a re-run) is not a list of keys."""
    contents, txn = _interrupted("claims-checked")
    contents[f".z3-txn/{txn}/erased"] = value
    store = z3.MemoryStore(contents)
    _dead(monkeypatch, txn)
    with pytest.raises(InterruptedWriteError, match=f"'.z3-txn/{txn}/erased'"):
        commit.repair(store)


@pytest.mark.parametrize("record", ["claims-checked", "claim"])
@pytest.mark.parametrize("value", [b"\xff\x00garbage", b""])
def test_records_whose_content_is_never_read_leave_the_write_finishable(monkeypatch, record, value):
    """``claims-checked`` (its presence is the record) and a repairer's ``claim`` (not a live
    repairer's token: taken over) with any content: repair finishes the write."""
    contents, txn = _interrupted("claims-checked")
    contents[f".z3-txn/{txn}/{record}"] = value
    store = z3.MemoryStore(contents)
    _dead(monkeypatch, txn)
    assert commit.repair(store) == [txn]
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 9, 9])
    assert not list(store.list_prefix(".z3-txn/"))


@pytest.mark.parametrize("value", [b"\xff\xfe garbage", b"", b"../../etc"])
def test_a_corrupt_node_claim_is_taken_over(monkeypatch, value):
    """A node claim naming no write (garbage): the next shape change takes it over."""
    contents, txn = _interrupted("claims-checked")
    (claim,) = [k for k in contents if k.startswith(CLAIMS_DIR) and not k.startswith(SHARED_DIR)]
    contents[claim] = value
    store = z3.MemoryStore(contents)
    _dead(monkeypatch, txn)
    z3.open_array(store, "a", mode="r+").append(np.full((1, COLS), 7, "i4"))
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 9, 9, 7])
    assert not list(store.list_prefix(".z3-txn/"))


@pytest.mark.parametrize("value", [b"\xff\xfe garbage", b"", b"../../etc"])
def test_a_corrupt_shared_hold_does_not_block_an_erase(monkeypatch, value):
    """The killed append also held its group shared: that hold's value corrupted, a mode="w"
    of the group (which waits for shared holders) still goes on, and leaves no record."""
    contents, txn = _interrupted("claims-checked")
    shared = [k for k in contents if k.startswith(SHARED_DIR)]
    assert shared, sorted(contents)  # an append holds the groups above its array shared
    for key in shared:
        contents[key] = value
    store = z3.MemoryStore(contents, settings={"commit_wait": 2.0})
    _dead(monkeypatch, txn)
    z3.create_array(store, "a", shape=(2, COLS), dtype="i4", chunks=(2, COLS), fill_value=0, overwrite=True)[
        ...
    ] = 5
    z3.create_group(store, overwrite=True)
    assert not list(store.list_prefix(".z3-txn/"))
