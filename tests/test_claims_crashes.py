"""The claims of shape-changing and creating commits (core/node_claims.py) at the instants a
writer can die or fail: what the store holds then is snapshotted (a process killed at that
instant leaves exactly that), the writer is declared dead, and the next writer or ``repair``
must neither roll it forward over another writer's change nor leave a claim blocking the array.
"""

from __future__ import annotations

import numpy as np
import pytest
from store_doubles import CommitHookedStore, judge_dead

import zarr3_backend as z3
from zarr3_backend.cli.check import scan
from zarr3_backend.core import commit
from zarr3_backend.core.node_claims import CLAIMS_DIR, claim_key

COLS = 3


class _Snapshotting(CommitHookedStore):
    """Snapshots its keys and values right after the first store call ``when(name, key)`` picks
    (what a writer killed then leaves behind)."""

    when = None
    snapshot: dict | None = None

    def _after(self, name: str, key: str) -> None:
        if self.when is not None and self.snapshot is None and self.when(name, key):
            self.snapshot = dict(self._data)

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        self._after("set_if", key) if ok else None
        return ok

    def erase(self, key):
        super().erase(key)
        self._after("erase", key)

    def erase_if(self, key, expected):
        ok = super().erase_if(key, expected)
        self._after("erase_if", key) if ok else None
        return ok


def _array(store, rows: int = 3):
    a = z3.create_array(store, "a", shape=(rows, COLS), dtype="i4", chunks=(2, COLS), fill_value=0)
    a[...] = 1
    return a


def test_a_writer_killed_after_claiming_is_checked_again_not_rolled_forward(monkeypatch):
    """Killed right after taking its claim, before checking the shape another writer had changed
    since it read it: repair checks (the claim is its own, but not yet checked) and drops it;
    it used to roll the write forward over the other writer's row."""
    store = _Snapshotting()
    _array(store)
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    armed = []

    def other_appends() -> None:
        other.append(np.full((1, COLS), 5, "i4"))
        armed.append(True)  # from now on, the claims taken are mine

    store.hook = other_appends
    store.when = lambda name, key: bool(armed) and name == "set_if" and key.startswith(CLAIMS_DIR)
    mine.append(np.full((2, COLS), 9, "i4"))  # goes on in the live store (retried after the row)
    left = z3.MemoryStore(store.snapshot)
    judge_dead(monkeypatch, left)
    commit.repair(left)
    got = z3.open_array(left, "a")
    assert got.shape == (4, COLS)
    np.testing.assert_array_equal(got[:, 0], [1, 1, 1, 5])
    assert not list(left.list_prefix(".z3-txn/"))


def test_a_writer_killed_while_ending_its_records_is_not_rolled_forward_over_a_later_shrink(monkeypatch):
    """Stopped as its records end (its documents written), on another host or hung, so not yet
    judged dead: another writer then shrinks the array back to the shape the first started
    from; a later repair must not run the finished write again (it gave up its claim before
    erasing its manifest, so the re-run passed the check and brought the larger shape back)."""
    store = _Snapshotting()
    _array(store)
    store.when = lambda name, key: (
        (name, key.startswith(CLAIMS_DIR)) == ("erase_if", True)
        or (name == "erase" and key.endswith("manifest.json"))
    )
    z3.open_array(store, "a", mode="r+").append(np.full((2, COLS), 9, "i4"))
    left = z3.MemoryStore(store.snapshot)
    z3.open_array(left, "a", mode="r+").resize((3, COLS))
    judge_dead(monkeypatch, left)
    commit.repair(left)
    got = z3.open_array(left, "a")
    assert got.shape == (3, COLS)
    np.testing.assert_array_equal(got[:, 0], [1, 1, 1])


class _FailingOnce(z3.MemoryStore):
    """The first claim taken succeeds in the store, but its answer is lost (ConnectionError)."""

    spent = False

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if ok and key.startswith(CLAIMS_DIR) and not self.spent:
            self.spent = True
            raise ConnectionError("transient")
        return ok


def test_a_store_error_while_claiming_leaves_no_claim_behind():
    """A transient error while the commit takes its claim: the write is dropped with its claim
    (the claim stayed held by a live process, and every later shape change of the array waited
    commit_wait, then failed)."""
    store = _FailingOnce(settings={"commit_wait": 1})
    _array(store)
    a = z3.open_array(store, "a", mode="r+")
    with pytest.raises(ConnectionError):
        a.append(np.full((1, COLS), 9, "i4"))
    assert store.spent and not list(store.list_prefix(".z3-txn/"))
    a.append(np.full((1, COLS), 9, "i4"))
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 9])


def test_repair_sweeps_a_dead_writers_leftover_claim_and_check_does_not_count_it(monkeypatch):
    store = z3.MemoryStore()
    _array(store)
    store.set(claim_key("a/zarr.json"), b"1-1-x-x-dead-0")  # a write id, no manifest
    store.set(claim_key("b/zarr.json"), b"../not-a-write")
    assert scan(store, "", show_progress=False).in_flight == []  # claims are not writes
    judge_dead(monkeypatch, store)
    commit.repair(store)
    assert not list(store.list_prefix(CLAIMS_DIR))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_to_zarr_append_keeps_an_attribute_set_while_it_was_staged(zarr_format):
    """The append writes only the shape (v2: its .zarray; it rewrote the .zattrs it planned from)."""
    xr = pytest.importorskip("xarray")
    store = CommitHookedStore()
    ds = xr.Dataset({"v": (("t", "x"), np.ones((3, COLS), "i4"))})
    z3.to_zarr(ds, store, mode="w", zarr_format=zarr_format, consolidated=False)
    other = z3.open_array(store, "v", mode="r+")
    store.hook = lambda: other.attrs.update(late=1)
    z3.to_zarr(ds, store, append_dim="t", consolidated=False)
    a = z3.open_array(store, "v")
    assert a.shape == (6, COLS) and a.attrs["late"] == 1


class _NoConditionalWrites(_Snapshotting):
    """A store without conditional writes (no claims: the check alone) that also snapshots after
    plain writes."""

    supports_conditional_writes = False

    def set(self, key, value):
        super().set(key, value)
        self._after("set", key)


def test_without_conditional_writes_a_killed_writer_whose_shape_is_written_is_finished(monkeypatch):
    """Killed after writing its new shape (its check made, its values moved), on a store without
    conditional writes: repair finishes the write; it checked the shape again, found the new one,
    and refused, leaving the write unrepairable."""
    store = _NoConditionalWrites()
    _array(store)
    mine = z3.open_array(store, "a", mode="r+")
    writes = []  # of a/zarr.json: the marker, then the new document

    def second_document_write(name: str, key: str) -> bool:
        if name == "set" and key == "a/zarr.json":
            writes.append(key)
        return len(writes) == 2

    store.when = second_document_write
    mine.append(np.full((2, COLS), 9, "i4"))
    assert b'"shape": [\n    5' in store.snapshot["a/zarr.json"].replace(
        b" ", b" "
    )  # the new shape is written
    left = z3.MemoryStore(store.snapshot)
    assert commit.pending_writes(left)  # the killed write's records
    judge_dead(monkeypatch, left)
    commit.repair(left)
    got = z3.open_array(left, "a")
    assert got.shape == (5, COLS)
    np.testing.assert_array_equal(got[:, 0], [1, 1, 1, 9, 9])
    assert not commit.pending_writes(left)


def test_an_append_to_an_array_erased_meanwhile_is_refused_not_brought_back():
    """Another writer erases the array while an append's rows are staged: the append is refused
    with ArrayNotFoundError and writes nothing (it wrote the array's document again: the array
    came back, its old rows read as fill)."""
    store = CommitHookedStore()
    _array(store)
    mine = z3.open_array(store, "a", mode="r+")
    store.hook = lambda: store.erase_prefix("a/")
    with pytest.raises(z3.errors.ArrayNotFoundError, match=r"a/zarr\.json"):
        mine.append(np.full((2, COLS), 9, "i4"))
    assert not list(store.list_prefix("a/")) and not list(store.list_prefix(".z3-txn/"))
