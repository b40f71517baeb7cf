"""Conditional writes (compare-and-swap on a stored value's version) and the read-modify-write
of partial chunk and shard writes built on them: element-disjoint concurrent writers lose
nothing, in threads, in processes and on a dask.distributed cluster."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest
from concurrent_writers import SHAPE, create, layout, lost, value, writer
from servers import s3_options

import zarr3_backend as z3
from zarr3_backend.core import unit_writes as array_module
from zarr3_backend.errors import WriteConflictError
from zarr3_backend.stores import FsspecStore, LocalStore, MemoryStore, StoreArgumentError
from zarr3_backend.stores.base import Store
from zarr3_backend.stores.fsspec_errors import BucketNotFoundError


@pytest.fixture(params=["memory", "local", "file-url", "s3", "obstore-s3"])
def store(request, tmp_path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "local":
        return LocalStore(tmp_path / "root")
    if request.param == "file-url":
        return FsspecStore.from_url("file://" + str(tmp_path / "root"))
    moto = request.getfixturevalue("moto")
    if request.param == "obstore-s3":
        from zarr3_backend.stores.obstore_store import ObstoreStore

        return ObstoreStore(f"s3://{moto.create_bucket()}/root", s3_options(moto.endpoint))
    return FsspecStore.from_url(
        f"s3://{moto.create_bucket()}/root", storage_options=s3_options(moto.endpoint)
    )


# ---- the store methods ------------------------------------------------------------------------
def test_get_versioned_of_a_missing_key_is_none_none(store):
    assert store.supports_conditional_writes
    assert store.get_versioned("a/b") == (None, None)


def test_set_if_none_creates_only_a_missing_key(store):
    assert store.set_if("a/b", b"one", None)
    assert store.get("a/b") == b"one"
    assert not store.set_if("a/b", b"two", None)  # it exists now: a conflict, nothing written
    assert store.get("a/b") == b"one"


def test_set_if_detects_a_write_in_between(store):
    store.set("k", b"v1")
    value1, version1 = store.get_versioned("k")
    assert value1 == b"v1"
    hash(version1)
    assert pickle.loads(pickle.dumps(version1)) == version1
    store.set("k", b"v2")  # another writer, same length
    assert not store.set_if("k", b"mine", version1)
    assert store.get("k") == b"v2"
    value2, version2 = store.get_versioned("k")
    assert value2 == b"v2" and version2 != version1
    assert store.set_if("k", b"mine", version2)
    assert store.get("k") == b"mine"
    assert store.get_versioned("k")[1] != version2


def test_set_if_with_a_version_of_a_key_since_erased_is_a_conflict(store):
    store.set("k", b"v1")
    _, version = store.get_versioned("k")
    store.erase("k")
    assert not store.set_if("k", b"mine", version)
    assert store.get("k") is None


def test_erase_if(store):
    store.set("d/k", b"v1")
    _, version = store.get_versioned("d/k")
    store.set("d/k", b"v2")
    assert not store.erase_if("d/k", version)
    assert store.get("d/k") == b"v2"
    _, version = store.get_versioned("d/k")
    assert store.erase_if("d/k", version)
    assert store.get("d/k") is None
    assert not store.erase_if("d/k", version)  # already gone
    assert list(store.list()) == []  # the emptied directory is pruned too (local)


def test_s3_conditional_calls_send_etag_conditions(moto):
    """The ETag is what S3 compares: a write of other bytes changes it, a lost condition is 412."""
    url = f"s3://{moto.create_bucket()}/x"
    store = FsspecStore.from_url(url, storage_options=s3_options(moto.endpoint))
    assert store.supports_conditional_writes and not store.refuses_unguarded_partial_writes
    store.set("k", b"one")
    _, etag = store.get_versioned("k")
    assert isinstance(etag, str) and etag.strip('"')
    other = FsspecStore.from_url(url, storage_options=s3_options(moto.endpoint))
    assert other.set_if("k", b"two", etag)
    assert not store.set_if("k", b"three", etag)
    assert store.get("k") == b"two"
    missing = FsspecStore.from_url("s3://no-such-bucket-z3/x", storage_options=s3_options(moto.endpoint))
    with pytest.raises(BucketNotFoundError):
        missing.get_versioned("k")


def test_conditional_writes_on_a_read_only_store_are_refused(store):
    store.set("k", b"v")
    _, version = store.get_versioned("k")
    ro = store.with_read_only(True)
    with pytest.raises(z3.errors.ReadOnlyError, match="'k'"):
        ro.set_if("k", b"x", version)
    with pytest.raises(z3.errors.ReadOnlyError, match="'k'"):
        ro.erase_if("k", version)


def test_local_set_if_leaves_no_temporary_file_on_conflict(tmp_path):
    store = LocalStore(tmp_path)
    store.set("c/0", b"old")
    assert not store.set_if("c/0", b"new", None)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["0"]


def test_local_version_tells_apart_a_file_with_the_same_inode_mtime_and_size(tmp_path):
    """As a freed inode reused within one coarse mtime tick for a value of the same size would
    look: only the bytes differ, and the swap must still lose."""
    store = LocalStore(tmp_path)
    store.set("c/0", b"aaaa")
    _, version = store.get_versioned("c/0")
    path = tmp_path / "c" / "0"
    info = os.stat(path)
    with open(path, "r+b") as f:
        f.write(b"bbbb")
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert os.stat(path).st_ino == info.st_ino and os.stat(path).st_mtime_ns == info.st_mtime_ns
    assert not store.set_if("c/0", b"mine", version)
    assert not store.erase_if("c/0", version)
    assert store.get("c/0") == b"bbbb"


def test_base_store_without_conditional_writes_refuses_them():
    class Plain(MemoryStore):
        supports_conditional_writes = False

        def get_versioned(self, key):
            return Store.get_versioned(self, key)

        def set_if(self, key, value, expected):
            return Store.set_if(self, key, value, expected)

    with pytest.raises(WriteConflictError, match="'k'"):
        Plain().get_versioned("k")
    with pytest.raises(WriteConflictError, match="'k'"):
        Plain().set_if("k", b"", None)


def test_fsspec_store_without_conditional_writes_refuses_partial_writes_unless_opted_out():
    root = f"memory://z3-cas-{id(object())}"
    store = FsspecStore.from_url(root)
    assert not store.supports_conditional_writes and store.refuses_unguarded_partial_writes
    a = z3.create_array(store, "x", shape=(10,), dtype="int32", chunks=(5,), fill_value=0)
    a[:] = np.arange(10)  # whole chunks: fine
    with pytest.raises(WriteConflictError, match=r"'x/c/0'.*unguarded partial writes"):
        a[1:3] = -1
    np.testing.assert_array_equal(a[...], np.arange(10))
    for opened in (
        FsspecStore.from_url(root, unguarded_partial_writes=True),
        FsspecStore.from_url(root, storage_options={"zarr3": {"unguarded_partial_writes": True}}),
    ):
        assert opened.unguarded_partial_writes and not opened.refuses_unguarded_partial_writes
        assert pickle.loads(pickle.dumps(opened)).unguarded_partial_writes
        z3.open_array(opened, "x", mode="r+")[1:3] = -1
    assert list(z3.open_array(root, "x")[:4]) == [0, -1, -1, 3]
    with pytest.raises(StoreArgumentError, match="unguarded_partial_writes"):
        FsspecStore.from_url(root, storage_options={"zarr3": {"unguarded_partial_writes": "yes"}})


# ---- Array writes on top of them ----------------------------------------------------------
class InterferingStore(MemoryStore):
    """Before each of the first ``times`` conditional writes, another "writer" writes columns
    ``1::2`` of the same unit (a plain read-merge-write), so the swap must fail and retry."""

    def __init__(self, times: int = 1) -> None:
        super().__init__()
        self.times = times
        self.calls = 0
        self.other = None  # an Array on this store with write-through set

    def set_if(self, key, value, expected):
        self.calls += 1
        if self.calls <= self.times and self.other is not None:
            other, self.other = self.other, None  # the other writer's own write is unconditional
            other[:, 1::2] = 7
            self.other = other
        return super().set_if(key, value, expected)


@pytest.mark.parametrize("kind", ["shards", "chunks"])
def test_partial_write_that_loses_the_swap_re_merges_and_keeps_both(kind):
    store = InterferingStore(times=2)
    a = z3.create_array(store, "x", shape=(4, 40), dtype="int32", fill_value=0, **layout(kind))
    other = z3.open_array(MemoryStore.with_read_only(store, False), "x", mode="r+")
    store.other = other
    a[:, 0::2] = 5
    got = a[...]
    assert (got[:, 0::2] == 5).all()
    assert (got[:, 1::2] == 7).all()
    assert store.calls >= 2  # the first swap lost, the re-merged one won


def test_a_swap_lost_every_time_raises_write_conflict_naming_the_key(monkeypatch):
    monkeypatch.setattr(array_module, "_CAS_PAUSE", 0.0)

    class AlwaysLosing(MemoryStore):
        def set_if(self, key, value, expected):
            if not key.startswith("x/c/"):  # the array's creation (its zarr.json) goes through
                return super().set_if(key, value, expected)
            return False  # somebody always writes the chunk first

    store = AlwaysLosing()
    a = z3.create_array(store, "x", shape=(10,), dtype="int32", chunks=(10,), fill_value=0)
    a[:] = 3
    with pytest.raises(WriteConflictError, match=r"'x/c/0'"):
        a[:5] = np.arange(5)


def test_partial_write_refused_by_a_store_that_cannot_guard_it():
    class Unguarded(MemoryStore):
        supports_conditional_writes = False
        refuses_unguarded_partial_writes = True

    store = Unguarded()
    a = z3.create_array(store, "x", shape=(10,), dtype="int32", chunks=(5,), fill_value=0)
    a[:] = 1  # whole chunks: no read-modify-write, allowed
    before = dict(store._data)
    with pytest.raises(WriteConflictError, match="'x/c/0'"):
        a[2:7] = 9  # chunk 0 partly: refused before anything is written
    assert store._data == before
    np.testing.assert_array_equal(a[...], np.ones(10))


def test_partial_write_to_fill_value_erases_conditionally(tmp_path):
    store = LocalStore(tmp_path)
    a = z3.create_array(store, "x", shape=(10,), dtype="int32", chunks=(10,), fill_value=0)
    a[:3] = 1
    assert store.exists("x/c/0")
    a[:3] = 0  # the merged chunk is all fill: erased, with erase_if
    assert not store.exists("x/c/0")
    a[5:] = 0  # missing and still all fill: nothing to do
    assert not store.exists("x/c/0")


@pytest.mark.parametrize("kind", ["shards", "chunks"])
def test_threads_writing_disjoint_columns_lose_nothing(tmp_path, kind):
    from concurrent.futures import ThreadPoolExecutor

    store = LocalStore(tmp_path)
    for r in range(3):
        create(str(tmp_path), None, kind, r)
        arrays = [z3.open_array(store, f"r{r}", mode="r+") for _ in range(4)]

        def write(w, arrays=arrays, r=r):
            cols = range(w, SHAPE[1], 4)
            arrays[w][:, w::4] = np.full((SHAPE[0], len(cols)), value(w, r), dtype="int32")

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(write, range(4)))
        assert lost(str(tmp_path), None, 4, r) == 0


def test_local_store_where_directories_cannot_be_locked_uses_one_lock_file(tmp_path, monkeypatch):
    """As on NFS, where flock on a read-only directory descriptor fails with EBADF."""
    import errno

    from zarr3_backend.stores import local as local_module

    def no_dir_locks(fd, op):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(local_module.fcntl, "flock", no_dir_locks)
    test_threads_writing_disjoint_columns_lose_nothing(tmp_path, "shards")
    assert (tmp_path / local_module.LOCK_NAME).is_file()
    store = LocalStore(tmp_path)
    assert local_module.LOCK_NAME not in list(store.list_dir(""))
    store.set("k", b"1")
    _, version = store.get_versioned("k")
    store.set("k", b"2")
    assert not store.set_if("k", b"3", version)


# ---- processes ----------------------------------------------------------------------------
def run_writers(url: str, storage_options: dict | None, kind: str, n: int = 4, rounds: int = 20) -> list[int]:
    """``rounds`` rounds of ``n`` spawned processes writing disjoint columns of shared units;
    the number of lost elements in each round."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n + 1)
    procs = [ctx.Process(target=writer, args=(url, storage_options, w, n, rounds, barrier)) for w in range(n)]
    for p in procs:
        p.start()
    losses = []
    try:
        for r in range(rounds):
            create(url, storage_options, kind, r)
            barrier.wait(timeout=120)  # go
            barrier.wait(timeout=120)  # all written
            losses.append(lost(url, storage_options, n, r))
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * n
    return losses


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["shards", "chunks"])
def test_processes_writing_disjoint_parts_of_shared_units_lose_nothing_local(tmp_path, kind):
    assert run_writers(str(tmp_path / "data.zarr"), None, kind) == [0] * 20


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["shards", "chunks"])
def test_processes_writing_disjoint_parts_of_shared_units_lose_nothing_s3(moto, kind):
    url = f"s3://{moto.create_bucket()}/data.zarr"
    assert run_writers(url, s3_options(moto.endpoint), kind) == [0] * 20


@pytest.mark.slow
@pytest.mark.distributed
def test_dask_distributed_tasks_writing_disjoint_parts_of_shared_shards_lose_nothing(tmp_path):
    import distributed

    url = str(tmp_path / "data.zarr")
    rounds, n = 5, 4
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=2, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        for r in range(rounds):
            create(url, None, "shards", r)

            def task(w, r=r):
                a = z3.open_array(url, f"r{r}", mode="r+")
                cols = range(w, SHAPE[1], n)
                a[:, w::n] = np.full((SHAPE[0], len(cols)), value(w, r), dtype="int32")
                return os.getpid()

            workers = sorted(client.scheduler_info()["workers"])
            futures = [client.submit(task, w, workers=[workers[w % 2]], pure=False) for w in range(n)]
            assert len(set(client.gather(futures))) == 2  # both worker processes wrote, 2 tasks each
            assert lost(url, None, n, r) == 0
