"""Unit tests of the commit protocol's rules (core/commit.py) found by review: who may take a
write over, which hosts are judged, links at the root, marks kept by document writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import zarr3_backend as z3
from zarr3_backend._owner import current_owner, host_tag
from zarr3_backend.core.commit import _claim, repair, txn_prefix, wait_for_commits, writer_is_dead
from zarr3_backend.core.metadata import WRITE_IN_PROGRESS_FIELD
from zarr3_backend.core.txn_records import markers
from zarr3_backend.errors import InterruptedWriteError
from zarr3_backend.stores import LocalStore, MemoryStore


def _gone_pid() -> int:
    return int(
        subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout
    )


def test_only_writers_of_this_host_are_judged_dead():
    pid = _gone_pid()
    assert writer_is_dead(f"1-{pid}-1-x-{host_tag()}-abcd")
    assert not writer_is_dead(f"1-{pid}-1-x-{host_tag('elsewhere')}-abcd")  # maybe alive there
    assert not writer_is_dead(f"1-{pid}-1-x-abcd")  # no host named: never judged
    me = current_owner()
    assert not writer_is_dead(f"1-{me.token()}-{host_tag()}-abcd")


def test_repair_leaves_another_hosts_write_alone():
    store = MemoryStore()
    txn = f"1-{_gone_pid()}-1-x-{host_tag('elsewhere')}-abcd"
    store.set(txn_prefix(txn) + "data/k", b"v")
    assert repair(store) == []
    assert store.get(txn_prefix(txn) + "data/k") == b"v"
    assert repair(store, only_dead=False) == [txn]


def test_one_repairer_at_a_time_and_a_dead_ones_claim_is_taken_over():
    store = MemoryStore()
    base = txn_prefix("t")
    assert _claim(store, base)
    assert not _claim(store, base)  # held by a live repairer (another thread of this process too)
    store.set(base + "claim", f"{_gone_pid()}-1-x:beef".encode())
    assert _claim(store, base)


def test_a_repairer_on_another_host_is_never_judged_dead():
    """A repair claim names its host: one of another host holds the write whatever its process
    token says here (that token's boot id and pid mean nothing on this host, and judging it
    dead let two hosts repair one write at once); one of this host is judged by its process."""
    store = MemoryStore()
    base = txn_prefix("t")
    gone = f"{_gone_pid()}-1-x"
    store.set(base + "claim", f"{gone}@{host_tag('elsewhere')}:0123abcd".encode())
    assert not _claim(store, base)
    store.set(base + "claim", f"{gone}@{host_tag()}:0123abcd".encode())
    assert _claim(store, base)  # this host's, and its process is gone
    assert f"@{host_tag()}:" in store.get(base + "claim").decode()
    assert not _claim(store, base)  # now held by this live process
    store.set(base + "claim", f"{gone}:0123abcd".encode())  # written before hosts were named
    assert _claim(store, base)


def test_a_store_whose_root_is_a_link_commits(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    a = z3.create_array(str(tmp_path / "link"), path="x", shape=(8,), dtype="i4", chunks=(2,))
    a[...] = np.arange(8)
    np.testing.assert_array_equal(z3.open_array(str(tmp_path / "link"), path="x")[...], np.arange(8))
    assert not list(LocalStore(tmp_path / "link").list_prefix(".z3-txn/"))


@pytest.mark.parametrize("what", ["array-attrs", "group-attrs", "resize-grow"])
def test_document_writes_keep_other_writers_marks(what):
    store = MemoryStore()
    g = z3.open_group(store, mode="w")
    a = g.create_array("x", shape=(4,), dtype="i4", chunks=(2,))
    key = "zarr.json" if what == "group-attrs" else "x/zarr.json"
    doc = json.loads(store.get(key))
    doc[WRITE_IN_PROGRESS_FIELD] = {"must_understand": True, "id": "w", "writes": {"w": {}}}
    store.set(key, json.dumps(doc).encode())
    if what == "array-attrs":
        a.attrs["note"] = 1
    elif what == "group-attrs":
        g.attrs["note"] = 1
    else:
        a.resize((6,))
    assert "w" in markers(json.loads(store.get(key)))
    with pytest.raises(InterruptedWriteError):
        z3.open_node(store, path="" if what == "group-attrs" else "x")


def test_shrinking_is_one_transaction():
    store = MemoryStore()
    a = z3.create_array(store, path="x", shape=(8,), dtype="i4", chunks=(2,), fill_value=0)
    a[...] = 7
    a.resize((4,))
    assert sorted(store.list_prefix("x/c/")) == ["x/c/0", "x/c/1"]
    a.resize((8,))
    np.testing.assert_array_equal(z3.open_array(store, path="x")[...], [7, 7, 7, 7, 0, 0, 0, 0])
    assert not list(store.list_prefix(".z3-txn/"))


def test_two_read_modify_writes_of_one_unit_in_one_transaction_keep_both():
    from zarr3_backend.core.array import Array
    from zarr3_backend.core.commit import Transaction

    store = MemoryStore()
    a = z3.create_array(store, path="x", shape=(8,), dtype="i4", chunks=(8,), fill_value=0)
    with Transaction(store, guard=("x",)) as txn:
        staged = Array(txn.staging, "x", a.metadata)
        staged[0:4] = 1
        staged[4:8] = 2  # reads the unit again: must see the first write, not the stored one
        txn.commit()
    np.testing.assert_array_equal(z3.open_array(store, path="x")[...], [1, 1, 1, 1, 2, 2, 2, 2])


def test_the_staging_view_keeps_the_stores_own_settings():
    """Writes staged in a transaction run with the settings the user gave the store."""
    from zarr3_backend.core.staging_store import StagingStore
    from zarr3_backend.stores import MemoryStore

    base = MemoryStore(settings={"requests_in_flight": 7, "coalesce_gap": 123})
    staging = StagingStore(base, "t1")
    assert staging.settings.requests_in_flight == 7
    assert staging.coalesce_gap == 123 == base.coalesce_gap


def test_a_marker_whose_write_finished_since_the_read_is_read_again():
    """The CI race: a reader meets the marker, the writer commits (its records gone) before the
    reader lists the pending writes; the reader must read again, not report an interrupted write."""
    store = MemoryStore()
    calls = []

    def read():
        calls.append(1)
        if len(calls) == 1:
            raise InterruptedWriteError("write 'w' has not committed")
        return "new state"

    assert wait_for_commits(store, read) == "new state"
    assert len(calls) == 2


def test_a_dead_writers_marker_is_reported_after_one_read_again():
    store = MemoryStore()
    txn = f"1-{_gone_pid()}-1-x-{host_tag()}-abcd"
    store.set(txn_prefix(txn) + "manifest.json", b"{}")
    calls = []

    def read():
        calls.append(1)
        raise InterruptedWriteError(f"write {txn!r} has not committed")

    with pytest.raises(InterruptedWriteError):
        wait_for_commits(store, read)
    assert len(calls) == 2


def test_a_consolidating_commit_that_cannot_wait_out_another_writer_still_finishes():
    """A member marked by another live write past ``commit_wait``: the consolidating commit
    finishes (its own marks gone, its change in place) with the root's consolidated copy
    dropped and a warning, instead of leaving the root marked while its process lives."""
    from zarr3_backend.core.commit import Transaction, new_txn_id
    from zarr3_backend.core.txn_records import with_markers
    from zarr3_backend.errors import ConsolidationSkippedWarning

    store = MemoryStore(settings={"commit_wait": 0.2})
    g = z3.open_group(store, mode="w")
    for name in ("x", "y"):
        g.create_array(name, shape=(4,), dtype="i4", chunks=(2,))
    z3.consolidate_metadata(store)
    other = new_txn_id()  # a live writer (this process) in the middle of its commit on y
    store.set(txn_prefix(other) + "manifest.json", b"{}")
    y_doc = json.loads(store.get("y/zarr.json"))
    store.set("y/zarr.json", json.dumps(with_markers(y_doc, {other: current_owner().to_json()})).encode())

    x_doc = json.loads(store.get("x/zarr.json"))
    x_doc["attributes"] = {"a": 1}
    with pytest.warns(ConsolidationSkippedWarning, match="'y'"):
        with Transaction(store, guard=["x"], documents={"x/zarr.json": json.dumps(x_doc).encode()}) as txn:
            txn.commit(consolidate=True)
    root = json.loads(store.get("zarr.json"))
    assert WRITE_IN_PROGRESS_FIELD not in root and "consolidated_metadata" not in root
    assert z3.open_array(store, "x").attrs["a"] == 1  # committed
    store.set("y/zarr.json", json.dumps(y_doc).encode())  # the other write finishes
    store.erase_prefix(txn_prefix(other))
    assert sorted(z3.open_group(store).array_keys()) == ["x", "y"]  # listed, not consolidated


def test_writes_under_a_consolidated_root_holding_bare_nan_or_deep_nesting():
    """A root whose consolidated copy holds a bare NaN (zarr-python writes NaN attributes so)
    still takes writes, and keeps the NaN a number; a root nested absurdly deep is a
    MetadataError, not a RecursionError."""
    from zarr3_backend.errors import MetadataError

    store = MemoryStore()
    g = z3.open_group(store, mode="w")
    g.create_array("a", shape=(4,), dtype="f8", chunks=(2,), attributes={"missing": 1.0})
    z3.consolidate_metadata(store)
    store.set("zarr.json", store.get("zarr.json").replace(b'"missing": 1.0', b'"missing": NaN'))
    z3.open_array(store, path="a", mode="r+")[...] = 1.0  # was: ValueError, out of range float
    np.testing.assert_array_equal(z3.open_array(store, path="a")[...], 1.0)
    consolidated = json.loads(store.get("zarr.json"))["consolidated_metadata"]["metadata"]
    assert np.isnan(consolidated["a"]["attributes"]["missing"])  # still a number, as stored
    store.set("zarr.json", b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(MetadataError):
        z3.open_array(store, path="a", mode="r+")[...] = 2.0
