"""``repair(all_writers=True)`` over a write another host's repairer began and left: the caller
vouches that nothing else writes, so that repairer's claim (which names its host and is never
judged here otherwise) must not keep the write from being finished."""

from __future__ import annotations

import numpy as np
from store_doubles import SnapshotOnSetStore

import zarr3_backend as z3
from zarr3_backend._owner import host_tag
from zarr3_backend.core import commit
from zarr3_backend.core.txn_records import txn_prefix
from zarr3_backend.errors import InterruptedWriteError

COLS = 3


class _SnapshotOnMark(SnapshotOnSetStore):
    """Snapshots also right after the first conditional write ``when`` picks (a mark)."""

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if ok and self.when is not None and self.snapshot is None and self.when(key):
            self.snapshot = dict(self._data)
        return ok


def _interrupted_append() -> tuple[z3.MemoryStore, str]:
    """A store holding an append killed right after it marked the array (every reader refuses
    it) and the write's id."""
    store = _SnapshotOnMark()
    z3.create_array(store, "a", shape=(2, COLS), dtype="i4", chunks=(2, COLS), fill_value=0)[...] = 1
    store.when = lambda key: key == "a/zarr.json"
    z3.open_array(store, "a", mode="r+").append(np.full((1, COLS), 7, "i4"))
    left = z3.MemoryStore(store.snapshot)
    (txn_id,) = commit.pending_writes(left)
    return left, txn_id


def _other_hosts_repairer_claims(store: z3.MemoryStore, txn_id: str) -> None:
    """A repairer of another host began ``txn_id``'s repair and was lost with that host."""
    store.set(txn_prefix(txn_id) + "claim", f"12345-1-x@{host_tag('elsewhere')}:0123abcd".encode())


def test_repair_of_all_writers_takes_over_another_hosts_repair_claim():
    """The append is finished (its row stored, no records left) although another host's
    repairer claimed it; it used to be skipped forever, the array refused by every reader."""
    store, txn_id = _interrupted_append()
    _other_hosts_repairer_claims(store, txn_id)
    assert z3.repair(store, all_writers=True) == [txn_id]
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 7])
    assert not list(store.list_prefix(".z3-txn/"))


def test_repair_of_dead_writers_leaves_another_hosts_repair_claim(monkeypatch):
    """Without ``all_writers`` another host's repairer is never judged: its claim holds (it may
    still be finishing the write, here of a writer judged dead) and the array stays refused."""
    store, txn_id = _interrupted_append()
    real = commit.writer_is_dead
    monkeypatch.setattr(commit, "writer_is_dead", lambda t: t == txn_id or real(t))
    _other_hosts_repairer_claims(store, txn_id)
    assert z3.repair(store) == []
    assert commit.pending_writes(store) == [txn_id]
    try:
        z3.open_array(store, "a")[...]
    except InterruptedWriteError:
        pass
    else:
        raise AssertionError("the interrupted append was not refused")
