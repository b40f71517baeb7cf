"""A write waiting on a node claim whose holder turns out dead finishes that holder's write
alone (core/node_claims.py ``finish_dead``): it ran a full ``repair`` of the store while holding
claims of its own, which on a large store with other interrupted writes could stall it."""

from __future__ import annotations

import numpy as np
import pytest
from store_doubles import SnapshotOnSetStore

import zarr3_backend as z3
from zarr3_backend.core import commit, node_claims
from zarr3_backend.core.node_claims import CLAIMS_DIR

COLS = 3


class _ClaimTaken(z3.MemoryStore):
    """Calls ``on_taken()`` when a writer finds a node claim taken by another write. Its moves
    give the destination a new version (MemoryStore's keep the old one: a compare-and-swap read
    before a move then wins over the moved value)."""

    on_taken = staticmethod(lambda: None)

    def move(self, src, dst):
        value = self.get(src)
        if value is not None:
            self.set(dst, value)
            self.erase(src)

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if not ok and key.startswith(CLAIMS_DIR):
            self.on_taken()
        return ok


def _killed_writes() -> tuple[dict, str, str]:
    """A store's contents with two killed writes: an append to ``b`` killed right after its
    manifest (an interrupted write elsewhere), then a ``to_zarr(mode="a")`` overwriting ``a``
    with 9 killed holding ``a``'s checked claim. Returns the contents and the two writes' ids
    (of ``a``'s, of ``b``'s)."""
    store = SnapshotOnSetStore()
    for name, dims in (("a", ("t", "x")), ("b", ("u", "x"))):
        z3.create_array(
            store, name, shape=(3, COLS), dtype="i4", chunks=(2, COLS), fill_value=0, dimension_names=dims
        )[...] = 1
    store.when = lambda key: key.endswith("/manifest.json")
    z3.open_array(store, "b", mode="r+").append(np.full((1, COLS), 5, "i4"))
    b_write = commit.pending_writes(z3.MemoryStore(store.snapshot))
    left = SnapshotOnSetStore(store.snapshot)
    left.when = lambda key: key.endswith("/claims-checked")
    xr = pytest.importorskip("xarray")
    nines = xr.Dataset({"a": (("t", "x"), np.full((3, COLS), 9, "i4"))})
    z3.to_zarr(nines, left, mode="a", consolidated=False)  # b's write is not judged dead
    ids = commit.pending_writes(z3.MemoryStore(left.snapshot))
    assert len(b_write) == 1 and len(ids) == 2
    (a_write,) = set(ids) - set(b_write)
    return left.snapshot, a_write, b_write[0]


def test_a_waiter_finishes_the_dead_claim_holders_write_and_leaves_the_rest_to_repair(monkeypatch):
    """An append to ``a`` waits on ``a``'s claim; its holder is then judged dead: the waiter
    rolls that write forward (``a`` holds its 9s, the appended row after them) and leaves the
    interrupted write to ``b`` for ``repair``, which finishes it (the waiter used to repair the
    whole store while holding claims of its own)."""
    xr = pytest.importorskip("xarray")
    contents, a_write, b_write = _killed_writes()
    store = _ClaimTaken(contents)
    dead: list[bool] = []  # the killed writes are judged dead once the waiter meets the claim
    real = commit.writer_is_dead
    fake = lambda txn_id: (bool(dead) and txn_id in (a_write, b_write)) or real(txn_id)  # noqa: E731
    monkeypatch.setattr(commit, "writer_is_dead", fake)
    monkeypatch.setattr(node_claims, "writer_is_dead", fake)
    store.on_taken = lambda: dead.append(True)

    row = xr.Dataset({"a": (("t", "x"), np.full((1, COLS), 7, "i4"))})
    z3.to_zarr(row, store, append_dim="t", consolidated=False)

    assert dead  # the waiter met the dead holder's claim
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [9, 9, 9, 7])
    assert commit.pending_writes(store) == [b_write]  # not the waiter's business
    assert z3.open_array(store, "b").shape == (3, COLS)  # b's write never marked it
    assert commit.repair(store) == [b_write]
    np.testing.assert_array_equal(z3.open_array(store, "b")[:, 0], [1, 1, 1, 5])
    assert not list(store.list_prefix(".z3-txn/"))


def test_a_waiter_whose_dead_holder_never_reached_its_manifest_takes_the_claim_over(monkeypatch):
    """The dead holder's records hold no manifest (as when it is killed ending its records: the
    manifest goes first), so nothing is rolled forward: the waiter drops what is left of them,
    takes the claim over and appends; the write to ``b`` is still left to ``repair``."""
    contents, a_write, b_write = _killed_writes()
    del contents[f".z3-txn/{a_write}/manifest.json"]
    store = _ClaimTaken(contents)
    dead: list[bool] = []
    real = commit.writer_is_dead
    fake = lambda txn_id: (bool(dead) and txn_id in (a_write, b_write)) or real(txn_id)  # noqa: E731
    monkeypatch.setattr(commit, "writer_is_dead", fake)
    monkeypatch.setattr(node_claims, "writer_is_dead", fake)
    store.on_taken = lambda: dead.append(True)
    z3.open_array(store, "a", mode="r+").append(np.full((1, COLS), 7, "i4"))
    assert dead
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 7])
    assert commit.pending_writes(store) == [b_write]
    assert commit.repair(store) == [b_write]
