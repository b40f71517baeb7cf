"""Icechunk repositories through the zarr-python store adapter: reads of branches, tags and
snapshots, writes into a session committed afterwards, pickling under Icechunk's rules,
conflicts as WriteConflictError, and a distributed write with forked sessions. Every result is
checked against xarray's own zarr engine reading the same repository."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.dask import store as dask_store
from zarr3_backend.errors import ReadOnlyError, WriteConflictError
from zarr3_backend.stores import StoreArgumentError, ZarrPythonStore, make_store
from zarr3_backend.stores.zarr_python import commit

icechunk = pytest.importorskip("icechunk")

pytestmark = [
    pytest.mark.interop,
    # zarr-python's note when xarray's zarr engine writes the template in the tests
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
]


def climate(ntime: int = 8, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                (250 + 40 * rng.random((ntime, 4, 6))).astype("float32"),
                {"units": "K"},
            ),
            "tp": (("time", "lat", "lon"), rng.random((ntime, 4, 6)), {"units": "m"}),
        },
        coords={
            "time": pd.date_range("2000-01-01", periods=ntime, freq="D"),
            "lat": np.linspace(-60.0, 60.0, 4),
            "lon": np.arange(6) * 60.0,
        },
        attrs={"title": "icechunk test"},
    )


ENCODING = {"t2m": {"chunks": (2, 4, 6)}, "tp": {"chunks": (2, 2, 3)}}


def new_repo(path):
    return icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))


def write_template(session, ds: xr.Dataset) -> None:
    """The arrays of ``ds`` (metadata and coordinates, data variables unwritten), written with
    xarray's own zarr engine (the oracle: our reads and region writes meet its layout)."""
    ds.chunk({"time": 2}).to_zarr(
        session.store, mode="w", encoding=ENCODING, compute=False, consolidated=False
    )


def read_zarr_engine(store) -> xr.Dataset:
    return xr.open_dataset(store, engine="zarr", consolidated=False).load()


@pytest.fixture
def repo_with_history(tmp_path):
    """A repository with: snapshot 1 (values of seed 0, tagged "v1"), snapshot 2 on main
    (seed 1), and a branch "dev" from snapshot 1 with a third version (seed 2)."""
    repo = new_repo(tmp_path / "repo")
    first, second, third = climate(seed=0), climate(seed=1), climate(seed=2)
    session = repo.writable_session("main")
    write_template(session, first)
    z3.to_zarr(first, session.store, mode="r+")
    snap1 = commit(session, "first")
    repo.create_tag("v1", snap1)

    session = repo.writable_session("main")
    z3.to_zarr(second, session.store, mode="r+")
    snap2 = commit(session, "second")

    repo.create_branch("dev", snap1)
    session = repo.writable_session("dev")
    z3.to_zarr(third, session.store, mode="r+")
    commit(session, "third, on dev")
    return repo, {"v1": first, "main": second, "dev": third}, {"first": snap1, "second": snap2}


# ---- reading ---------------------------------------------------------------------------------
def test_reads_every_branch_tag_and_snapshot(repo_with_history):
    repo, versions, snaps = repo_with_history
    sessions = {
        "main": repo.readonly_session(branch="main"),
        "dev": repo.readonly_session(branch="dev"),
        "v1": repo.readonly_session(tag="v1"),
    }
    for name, session in sessions.items():
        ours = xr.open_dataset(session.store, engine="zarr3").load()
        xr.testing.assert_identical(ours, versions[name])
        xr.testing.assert_identical(ours, read_zarr_engine(session.store))
    for snap, name in ((snaps["first"], "v1"), (snaps["second"], "main")):
        session = repo.readonly_session(snapshot_id=snap)
        xr.testing.assert_identical(xr.open_dataset(session.store, engine="zarr3").load(), versions[name])


def test_lazy_read_one_task_per_chunk(repo_with_history):
    repo, versions, _ = repo_with_history
    with z3.settings.using(remote_task_bytes=0):  # one task per stored chunk, not blocks of them
        ds = xr.open_dataset(repo.readonly_session(branch="main").store, engine="zarr3", chunks={})
    assert ds.tp.chunks == ((2, 2, 2, 2), (2, 2), (3, 3))
    with dask.config.set(scheduler="threads"):
        xr.testing.assert_identical(ds.load(), versions["main"])


def test_arrays_groups_and_datatree(tmp_path):
    repo = new_repo(tmp_path / "repo")
    session = repo.writable_session("main")
    root = z3.open_group(session.store, mode="w", attributes={"kind": "tree"})
    a = root.create_group("surface").create_array(
        "t2m", shape=(6, 8), dtype="float64", chunks=(3, 4), dimension_names=("y", "x"), fill_value=np.nan
    )
    values = np.arange(48.0).reshape(6, 8)
    a[...] = values
    a[1, 2:5] = -1.0
    values[1, 2:5] = -1.0
    commit(session, "tree")

    store = repo.readonly_session(branch="main").store
    t2m = z3.open_array(store, path="surface/t2m")
    np.testing.assert_array_equal(t2m[...], values)
    np.testing.assert_array_equal(t2m.oindex[[0, 5], [1, 7]], values[np.ix_([0, 5], [1, 7])])
    assert dict(z3.open_group(store, mode="r").attrs) == {"kind": "tree"}
    tree = xr.open_datatree(store, engine="zarr3")
    np.testing.assert_array_equal(tree["surface"]["t2m"].values, values)
    theirs = xr.open_datatree(store, engine="zarr", consolidated=False)
    xr.testing.assert_identical(tree["surface"].to_dataset().load(), theirs["surface"].to_dataset().load())


# ---- writing ---------------------------------------------------------------------------------
def test_region_writes_numpy_and_dask_commit_and_read_back(tmp_path):
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=8)
    session = repo.writable_session("main")
    write_template(session, ds)
    commit(session, "template")

    session = repo.writable_session("main")
    z3.to_zarr(ds.isel(time=slice(0, 4)), session.store, region={"time": slice(0, 4)})
    with dask.config.set(scheduler="threads"):
        z3.to_zarr(ds.isel(time=slice(4, 8)).chunk({"time": 2}), session.store, region="auto")
    assert session.has_uncommitted_changes
    before = read_zarr_engine(repo.readonly_session(branch="main").store)
    assert np.isnan(before.t2m.values).all()  # nothing is visible before the commit
    commit(session, "data")

    store = repo.readonly_session(branch="main").store
    xr.testing.assert_identical(read_zarr_engine(store), ds)
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), ds)


def test_to_zarr_new_arrays_replacing_appends_and_regions_then_commit(tmp_path):
    """Everything to_zarr does, into a session's store: new arrays, mode="w" over them, appends
    along time and region writes, numpy and dask data; one commit; both engines read it alike."""
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=12, seed=4)
    session = repo.writable_session("main")
    z3.to_zarr(climate(ntime=2, seed=9), session.store, mode="w", encoding=ENCODING)  # replaced next
    z3.to_zarr(ds.isel(time=slice(0, 4)), session.store, mode="w", encoding=ENCODING)
    with dask.config.set(scheduler="threads"):
        z3.to_zarr(ds.isel(time=slice(4, 8)).chunk({"time": 2}), session.store, append_dim="time")
        z3.to_zarr(ds.isel(time=slice(8, 12)), session.store, append_dim="time")
        changed = ds.copy(deep=True)
        changed["t2m"][2:6] = 199.0
        z3.to_zarr(changed[["t2m"]].isel(time=slice(2, 6)).chunk({"time": 2}), session.store, region="auto")
    assert read_zarr_engine(session.store).sizes["time"] == 12  # the session reads its writes
    with pytest.raises(z3.errors.GroupNotFoundError):  # nothing on the branch before the commit
        z3.open_group(repo.readonly_session(branch="main").store, mode="r")
    commit(session, "written by z3.to_zarr")

    store = repo.readonly_session(branch="main").store
    ours = xr.open_dataset(store, engine="zarr3").load()
    xr.testing.assert_identical(read_zarr_engine(store), changed)
    xr.testing.assert_identical(ours, changed)
    assert z3.open_array(store, path="tp").chunks == (2, 2, 3)


def test_uncommitted_session_reads_its_own_writes(tmp_path):
    repo = new_repo(tmp_path / "repo")
    ds = climate()
    session = repo.writable_session("main")
    write_template(session, ds)
    z3.to_zarr(ds, session.store, mode="r+")
    xr.testing.assert_identical(xr.open_dataset(session.store, engine="zarr3").load(), ds)
    session.discard_changes()
    with pytest.raises(z3.errors.GroupNotFoundError):
        z3.open_group(session.store, mode="r")


def test_read_only_sessions_refuse_writes(repo_with_history):
    repo, _, _ = repo_with_history
    store = repo.readonly_session(branch="main").store
    with pytest.raises(ReadOnlyError):
        z3.to_zarr(climate(), store, mode="r+")
    with pytest.raises(ReadOnlyError):
        z3.open_group(store, mode="a")
    with pytest.raises(ReadOnlyError):
        make_store(store).set("t2m/zarr.json", b"{}")
    # mode "r" on a writable session gives a read-only view; the session stays writable
    writable = repo.writable_session("main").store
    view = make_store(writable, mode="r")
    assert view.read_only and not writable.read_only
    with pytest.raises(ReadOnlyError):
        view.erase("t2m/zarr.json")
    with pytest.raises(StoreArgumentError):
        make_store(writable, storage_options={"anon": True})


def test_conflicting_commits_raise_write_conflict(tmp_path):
    repo = new_repo(tmp_path / "repo")
    ds = climate()
    session = repo.writable_session("main")
    write_template(session, ds)
    commit(session, "template")

    one, two = repo.writable_session("main"), repo.writable_session("main")
    z3.to_zarr(ds.isel(time=slice(0, 2)), one.store, region={"time": slice(0, 2)})
    z3.to_zarr(climate(seed=5).isel(time=slice(0, 2)), two.store, region={"time": slice(0, 2)})
    commit(one, "one")
    with pytest.raises(WriteConflictError, match="main") as info:
        commit(two, "two")
    assert isinstance(info.value.__cause__, icechunk.ConflictError | icechunk.RebaseFailedError)
    got = read_zarr_engine(repo.readonly_session(branch="main").store)
    xr.testing.assert_identical(got.isel(time=slice(0, 2)), ds.isel(time=slice(0, 2)))


@pytest.mark.parametrize("kind", ["append", "w-"])
def test_concurrent_appends_or_creates_in_two_sessions_never_mix(tmp_path, kind):
    """Two sessions append rows to one dataset (or both create it with ``mode="w-"``) at the
    same time: claims are skipped inside a session, so Icechunk's commit is what must refuse the
    second; the branch then holds the first session's dataset alone, never a mix of both."""
    repo = new_repo(tmp_path / "repo")
    base = climate(ntime=4, seed=1)
    if kind == "append":
        session = repo.writable_session("main")
        z3.to_zarr(base, session.store, mode="w", encoding=ENCODING)
        commit(session, "base")
    one, two = repo.writable_session("main"), repo.writable_session("main")
    first, second = climate(ntime=4, seed=2), climate(ntime=4, seed=3)
    for s, ds in ((one, first), (two, second)):
        if kind == "append":
            ds = ds.assign_coords(time=pd.date_range("2000-01-05", periods=4, freq="D"))
            z3.to_zarr(ds, s.store, append_dim="time")
        else:
            z3.to_zarr(ds, s.store, mode="w-", encoding=ENCODING)
    commit(one, "one")
    with pytest.raises(WriteConflictError, match="main"):
        commit(two, "two")
    got = read_zarr_engine(repo.readonly_session(branch="main").store)
    if kind == "append":
        appended = first.assign_coords(time=pd.date_range("2000-01-05", periods=4, freq="D"))
        want = xr.concat([base, appended], dim="time")
    else:
        want = first
    xr.testing.assert_identical(got, want)


# ---- the adapter's store operations ------------------------------------------------------------
def test_store_operations(tmp_path):
    repo = new_repo(tmp_path / "repo")
    session = repo.writable_session("main")
    store = make_store(session.store, mode="a")
    assert isinstance(store, ZarrPythonStore) and not store.read_only
    group = z3.open_group(store, mode="w")
    a = group.create_array("v", shape=(4, 4), dtype="uint8", chunks=(2, 2), compressors=None)
    a[...] = np.arange(16, dtype="uint8").reshape(4, 4)

    chunk = store.get("v/c/0/1")
    assert chunk == bytes([2, 3, 6, 7])
    assert store.get("v/c/0/1", ByteRange(1, 2)) == bytes([3, 6])
    assert store.get("v/c/0/1", ByteRange(2)) == bytes([6, 7])
    assert store.get("v/c/0/1", ByteRange.suffix(1)) == bytes([7])
    assert store.get("v/c/0/1", ByteRange(3, 10)) == bytes([7])  # clipped to the value
    assert store.get_many(["v/c/1/1", "missing/zarr.json"]) == [bytes([10, 11, 14, 15]), None]
    assert store.get_partial_values([("v/c/1/0", ByteRange(0, 1)), ("v/zarr.json", ByteRange(0, 1))]) == [
        bytes([8]),
        b"{",
    ]
    assert store.exists_many(["v/zarr.json", "w/zarr.json"]) == [True, False]

    assert sorted(store.list()) == ["v/c/0/0", "v/c/0/1", "v/c/1/0", "v/c/1/1", "v/zarr.json", "zarr.json"]
    assert sorted(store.list_prefix("v/")) == ["v/c/0/0", "v/c/0/1", "v/c/1/0", "v/c/1/1", "v/zarr.json"]
    assert sorted(store.list_prefix("v/zarr")) == ["v/zarr.json"]  # a prefix cut inside a name
    assert sorted(store.list_dir("")) == ["v", "zarr.json"]
    assert sorted(store.list_dir("v/")) == ["c", "zarr.json"]

    store.erase_many(["v/c/0/0"])
    store.erase("v/c/0/0")  # already gone: no error
    store.set_many({"v/c/1/1": bytes([1, 1, 1, 1])})
    np.testing.assert_array_equal(a[...], [[0, 0, 2, 3], [0, 0, 6, 7], [8, 9, 1, 1], [12, 13, 1, 1]])
    store.erase_prefix("v/")
    assert sorted(store.list()) == ["zarr.json"]


# ---- pickling --------------------------------------------------------------------------------
def test_pickling_follows_icechunks_rules(repo_with_history):
    repo, versions, _ = repo_with_history
    readonly = make_store(repo.readonly_session(branch="dev").store)
    copy = pickle.loads(pickle.dumps(readonly))
    assert copy.read_only
    xr.testing.assert_identical(xr.open_dataset(copy, engine="zarr3").load(), versions["dev"])

    session = repo.writable_session("main")
    with pytest.raises(StoreArgumentError, match="pickle"):
        pickle.dumps(make_store(session.store, mode="a"))
    # a writable fork's store pickles; a copy hands its own fork back as its write receipt
    fork = session.fork()
    original = make_store(fork.store, mode="a")
    assert original.returns_receipts and original.write_receipt() is None
    copy = pickle.loads(pickle.dumps(original))
    assert copy.returns_receipts and not copy.read_only
    receipt = copy.write_receipt()
    assert isinstance(receipt, icechunk.ForkSession) and copy.write_receipt() is receipt
    view = pickle.loads(pickle.dumps(make_store(fork.store, mode="r")))
    assert not view.returns_receipts and view.write_receipt() is None
    xr.testing.assert_identical(xr.open_dataset(view, engine="zarr3").load(), versions["main"])


def test_a_forks_copy_never_changes_what_the_fork_had_changed(tmp_path):
    """Icechunk merges whole change sets, so a worker's fork would bring back what it inherited
    over another worker's rewrite: a copy refuses to change keys the fork had changed (a node
    erased and made anew starts empty), and a fork that took receipts pickles no more."""
    repo = new_repo(tmp_path / "repo")
    session = repo.writable_session("main")
    group = z3.open_group(session.store, mode="w")
    group.create_array("old", shape=(4,), dtype="uint8", chunks=(2,), compressors=None)[...] = 5
    commit(session, "old")

    fork = repo.writable_session("main").fork()
    store = make_store(fork.store, mode="a")
    group = z3.open_group(store, mode="a")
    a = group.create_array("a", shape=(4,), dtype="uint8", chunks=(2,), compressors=None)
    a[0:2] = 1  # chunk a/c/0 changed in the fork, in this process
    store.erase_prefix("old/")  # a node erased, not made anew
    group.create_array("new", shape=(4,), dtype="uint8", chunks=(2,), compressors=None)
    copy = pickle.loads(pickle.dumps(store))
    copy.set("a/c/1", bytes([2, 2]))  # a chunk the fork had not changed
    copy.set("new/c/0", bytes([7, 7]))
    with pytest.raises(WriteConflictError, match="'a/c/0'"):
        copy.set("a/c/0", bytes([3, 3]))
    with pytest.raises(WriteConflictError, match="'a/c/0'"):
        copy.erase_many(["a/c/0"])
    with pytest.raises(WriteConflictError, match="'old/c/0'"):
        copy.set_many({"old/c/0": bytes([4, 4])})

    store.merge_receipts([copy.write_receipt()])
    np.testing.assert_array_equal(a[...], [1, 1, 2, 2])
    np.testing.assert_array_equal(z3.open_array(store, path="new")[...], [7, 7, 0, 0])
    with pytest.raises(StoreArgumentError, match="fresh fork"):
        pickle.dumps(store)


# ---- dask.distributed --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def _write_part(fork, ds: xr.Dataset, start: int, stop: int):
    """Worker task: write one time slab through the fork's store; return the fork to be merged."""
    z3.to_zarr(ds.isel(time=slice(start, stop)), fork.store, region={"time": slice(start, stop)})
    return fork


@pytest.mark.distributed
@pytest.mark.slow
def test_distributed_write_with_forked_sessions(tmp_path, client):
    """Icechunk's pattern for distributed writes: fork the session, write on the workers, merge
    the forks, commit once; xarray's zarr engine reads the result."""
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=8, seed=3)
    session = repo.writable_session("main")
    write_template(session, ds)
    commit(session, "template")

    session = repo.writable_session("main")
    fork = session.fork()
    futures = [client.submit(_write_part, fork, ds, start, start + 2, pure=False) for start in range(0, 8, 2)]
    forks = client.gather(futures)
    session.merge(*forks)
    commit(session, "written on workers")

    store = repo.readonly_session(branch="main").store
    xr.testing.assert_identical(read_zarr_engine(store), ds)
    # and a distributed read of the committed snapshot (read-only sessions pickle)
    lazy = xr.open_dataset(store, engine="zarr3", chunks={})
    xr.testing.assert_identical(lazy.compute(), ds)


def _fork_write(repo, message: str, write) -> None:
    """Icechunk's pattern: fork a clean session, write through the fork (on the cluster),
    merge the fork back, commit."""
    session = repo.writable_session("main")
    fork = session.fork()
    write(fork.store)
    session.merge(fork)
    commit(session, message)


def _refusal(info: pytest.ExceptionInfo) -> StoreArgumentError | None:
    """The StoreArgumentError in an exception's chain (distributed wraps pickling errors)."""
    chain = [info.value]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    return next((e for e in chain if isinstance(e, StoreArgumentError)), None)


@pytest.mark.distributed
@pytest.mark.slow
def test_distributed_to_zarr_into_forks_merge_commit(tmp_path, client):
    """z3.to_zarr of dask data into a fork's store on a cluster: new arrays, an append and a
    region write, each from a fresh fork. Each write task hands its worker's fork back and
    to_zarr merges them into the client's fork; then session.merge(fork) and one commit per
    write. xarray's zarr engine reads the result."""
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=12, seed=6)
    changed = ds.copy(deep=True)
    changed["tp"][4:8] = -1.0

    def first(store):
        z3.to_zarr(ds.isel(time=slice(0, 8)).chunk({"time": 2}), store, mode="w", encoding=ENCODING)
        # the workers' writes are in the client's fork already (merged from their receipts)
        np.testing.assert_array_equal(z3.open_array(store, path="t2m", mode="r")[...], ds.t2m.values[:8])

    _fork_write(repo, "new arrays", first)
    _fork_write(
        repo,
        "append",
        lambda store: z3.to_zarr(ds.isel(time=slice(8, 12)).chunk({"time": 2}), store, append_dim="time"),
    )
    region = changed[["tp"]].isel(time=slice(4, 8)).chunk({"time": 2})
    _fork_write(repo, "region", lambda store: z3.to_zarr(region, store, region="auto"))

    store = repo.readonly_session(branch="main").store
    xr.testing.assert_identical(read_zarr_engine(store), changed)
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3", chunks={}).compute(), changed)


@pytest.mark.distributed
@pytest.mark.slow
def test_distributed_dask_store_and_datatree_into_forks(tmp_path, client):
    """The receipts come back through every write path on a cluster: dask.store (computed
    at once, and a deferred write's own compute) and a DataTree's to_zarr."""
    repo = new_repo(tmp_path / "repo")
    data = np.arange(8 * 6, dtype="int32").reshape(8, 6)

    def arrays(store):
        group = z3.open_group(store, mode="w")
        a = group.create_array("a", shape=(8, 6), dtype="int32", chunks=(2, 3), shards=(4, 6))
        group.create_array("b", shape=(8, 6), dtype="int32", chunks=(2, 6))
        dask_store(da.from_array(data, chunks=(4, 6)), a)
        # one distributed write per fork: its store now holds what the workers wrote
        with pytest.raises(StoreArgumentError, match="fresh fork"):
            pickle.dumps(a.store)

    def deferred(store):
        b = z3.open_array(store, path="b", mode="r+")
        assert dask_store(da.from_array(-data, chunks=(2, 6)), b, compute=False).compute().count == 4

    _fork_write(repo, "arrays", arrays)
    _fork_write(repo, "deferred", deferred)
    group = z3.open_group(repo.readonly_session(branch="main").store, mode="r")
    np.testing.assert_array_equal(group["a"][...], data)
    np.testing.assert_array_equal(group["b"][...], -data)

    tree = xr.DataTree.from_dict(
        {
            "/": climate(ntime=4, seed=1).chunk({"time": 2}),
            "/sub": climate(ntime=4, seed=2).drop_vars(["time", "lat", "lon"]).chunk({"time": 2}),
        }
    )
    _fork_write(repo, "tree", lambda store: z3.to_zarr(tree, store, mode="w"))
    back = xr.open_datatree(repo.readonly_session(branch="main").store, engine="zarr", consolidated=False)
    for path in ("/", "/sub"):
        xr.testing.assert_identical(back[path].to_dataset().load(), tree[path].to_dataset().compute())


@pytest.mark.distributed
@pytest.mark.slow
def test_a_fork_holding_changes_is_refused_for_a_distributed_write(tmp_path, client):
    """Forks of a fork that already holds chunk writes would undo each other's chunks when
    merged (Icechunk merges whole change sets): a second distributed write into the same fork
    is refused before any task runs; the data the fork holds is intact."""
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=8, seed=8)
    session = repo.writable_session("main")
    fork = session.fork()
    z3.to_zarr(ds.chunk({"time": 2}), fork.store, mode="w", encoding=ENCODING)
    with pytest.raises(Exception) as info:
        z3.to_zarr(climate(ntime=8, seed=9).chunk({"time": 2}), fork.store, mode="r+")
    refusal = _refusal(info)
    assert refusal is not None and "fresh fork" in str(refusal)
    session.merge(fork)
    commit(session, "first write only")
    xr.testing.assert_identical(read_zarr_engine(repo.readonly_session(branch="main").store), ds)

    # chunks written in this process, then rewritten by workers through the same store: the
    # workers' tasks refuse (their forks would undo each other's rewrites when merged)
    fork = repo.writable_session("main").fork()
    t2m = z3.open_array(fork.store, path="t2m", mode="r+")
    t2m[0:2] = 0.0
    with pytest.raises(WriteConflictError, match="t2m/c/0/0/0"):
        dask_store(da.zeros(t2m.shape, chunks=(2, 4, 6), dtype="float32") + 1, t2m)


@pytest.mark.distributed
@pytest.mark.slow
def test_distributed_deferred_write_returns_the_forks_to_merge(tmp_path, client):
    """compute=False: the Delayed computes to the workers' forks; until they are merged the
    client's fork holds none of the data (dropping them loses the write)."""
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=8, seed=7)
    session = repo.writable_session("main")
    write_template(session, ds)
    commit(session, "template")

    session = repo.writable_session("main")
    fork = session.fork()
    delayed_write = z3.to_zarr(ds.chunk({"time": 2}), fork.store, mode="r+", compute=False)
    forks = delayed_write.compute()
    assert forks and all(isinstance(f, icechunk.ForkSession) for f in forks)
    assert np.isnan(z3.open_array(fork.store, path="t2m", mode="r")[...]).all()  # not merged yet
    fork.merge(*forks)
    session.merge(fork)
    commit(session, "deferred write")
    xr.testing.assert_identical(read_zarr_engine(repo.readonly_session(branch="main").store), ds)


@pytest.mark.distributed
@pytest.mark.slow
def test_distributed_writes_of_two_sessions_conflict_at_commit(tmp_path, client):
    """Two sessions write the same chunks on the cluster (through forks); the second commit is
    a WriteConflictError and the branch keeps the first one's data."""
    repo = new_repo(tmp_path / "repo")
    ds = climate(ntime=4, seed=1)
    session = repo.writable_session("main")
    write_template(session, ds)
    commit(session, "template")

    sessions = [repo.writable_session("main") for _ in range(2)]
    for s, seed in zip(sessions, (2, 3), strict=True):
        fork = s.fork()
        z3.to_zarr(climate(ntime=4, seed=seed).chunk({"time": 2}), fork.store, mode="r+")
        s.merge(fork)
    commit(sessions[0], "first")
    with pytest.raises(WriteConflictError, match="main"):
        commit(sessions[1], "second")
    got = read_zarr_engine(repo.readonly_session(branch="main").store)
    xr.testing.assert_identical(got, climate(ntime=4, seed=2))


# ---- other zarr-python stores, and the lazy import ---------------------------------------------
def test_zarr_python_local_store_round_trip(tmp_path):
    """Any zarr-python store is accepted: zarr's own LocalStore, written by us, read by both."""
    import zarr.storage

    ds = climate(seed=4)
    store = zarr.storage.LocalStore(str(tmp_path / "data.zarr"))
    z3.to_zarr(ds, store, mode="w", encoding=ENCODING)
    xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), ds)
    xr.testing.assert_identical(xr.open_dataset(str(tmp_path / "data.zarr"), engine="zarr").load(), ds)
    # a zarr-python store opened read-only refuses our writes before anything is sent
    readonly = zarr.storage.LocalStore(str(tmp_path / "data.zarr"), read_only=True)
    with pytest.raises(ReadOnlyError):
        z3.to_zarr(ds, readonly, mode="a")
    copy = pickle.loads(pickle.dumps(make_store(readonly)))
    xr.testing.assert_identical(xr.open_dataset(copy, engine="zarr3").load(), ds)


def test_zarr_python_stores_take_settings_and_keep_them_when_copied(tmp_path):
    """The adapter takes ``settings=`` like every store (``concurrency=`` is the older name of
    ``requests_in_flight``); read-only views and pickled copies keep them."""
    import zarr.storage

    inner = zarr.storage.LocalStore(str(tmp_path / "data.zarr"))
    store = ZarrPythonStore(inner, settings={"requests_in_flight": 5, "coalesce_gap": 0})
    assert store.concurrency == 5 and store.settings.coalesce_gap == 0
    assert ZarrPythonStore(inner, concurrency=7).settings.requests_in_flight == 7
    for copy in (store.with_read_only(True), pickle.loads(pickle.dumps(store))):
        assert copy.settings.requests_in_flight == 5 and copy.settings.coalesce_gap == 0
    with pytest.raises(StoreArgumentError, match="requests_in_flight"):
        ZarrPythonStore(inner, concurrency=0)
    with pytest.raises(StoreArgumentError, match="disagrees"):
        ZarrPythonStore(inner, concurrency=4, settings={"requests_in_flight": 5})
    store.set_many({f"k{i}": b"v" for i in range(20)})
    assert store.get_many([f"k{i}" for i in range(20)]) == [b"v"] * 20


def test_resolving_stores_never_imports_zarr_python(tmp_path):
    """Telling a zarr-python store from other arguments does not import zarr: only such an
    object passed in brings it (the adapter imports zarr lazily). Checked in a fresh process;
    reading data is left out, since numcodecs' codec plugins of other packages (kerchunk)
    import zarr themselves."""
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from zarr3_backend.stores import make_store\n"
        "from zarr3_backend.stores.zarr_python import is_zarr_python_store\n"
        f"make_store({str(tmp_path / 'a.zarr')!r}, mode='w')\n"
        "make_store({}, mode='w'); make_store('memory://x', mode='w')\n"
        "assert not is_zarr_python_store(object())\n"
        "assert not any(m == 'zarr' or m.startswith('zarr.') for m in sys.modules), 'zarr imported'\n"
        "import zarr.storage\n"
        "assert is_zarr_python_store(zarr.storage.MemoryStore())\n"
    )
    path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_zarr_python_s3_store_shared_with_zarr_python(tmp_path):
    """A zarr-python FsspecStore on S3 (moto's server on 127.0.0.1) used by zarr-python first
    and by us next, and back: s3fs's session is bound to the event loop that first used it, so
    the adapter must drive the store on zarr-python's loop (a loop of its own fails here)."""
    pytest.importorskip("s3fs")
    import zarr.storage
    from servers import MotoS3, s3_options

    server = MotoS3().start()
    try:
        bucket = server.create_bucket()
        store = zarr.storage.FsspecStore.from_url(
            f"s3://{bucket}/data.zarr", storage_options=s3_options(server.endpoint)
        )
        ds = climate(seed=6)
        ds.to_zarr(store, mode="w", consolidated=False, encoding=ENCODING)
        xr.testing.assert_identical(xr.open_dataset(store, engine="zarr3").load(), ds)
        doubled = ds.assign(t2m=ds.t2m * 2)
        z3.to_zarr(doubled, store, mode="w", encoding=ENCODING)
        xr.testing.assert_identical(read_zarr_engine(store), doubled)
    finally:
        server.stop()
