"""zarr3_backend.settings: defaults, environment variables read when used, per-store overrides,
``using()`` blocks, their precedence, and the places that follow them (thread pools, the buffer
pool, the stores' requests in flight and coalescing gap, pickled stores)."""

from __future__ import annotations

import dataclasses
import gc
import pickle
import threading
import time
import warnings

import pytest

from zarr3_backend import _slabs, _threads, settings
from zarr3_backend.errors import ArgumentError
from zarr3_backend.settings import ENVIRONMENT, Settings, current, using
from zarr3_backend.stores import FsspecStore, LocalStore, MemoryStore, ObstoreStore, StoreArgumentError
from zarr3_backend.stores.fsspec_options import OBJECT_STORE_COALESCE_GAP

MiB = 2**20


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for var in ENVIRONMENT.values():
        monkeypatch.delenv(var, raising=False)


def obstore_s3(**kw) -> ObstoreStore:
    """An ObstoreStore on a bucket nothing serves: building it sends no request."""
    options = {"anon": True, "endpoint_url": "http://127.0.0.1:9", **kw.pop("options", {})}
    return ObstoreStore("s3://bucket/root", options, **kw)


# ---- precedence ---------------------------------------------------------------------------------
def test_defaults_without_environment():
    assert current() == Settings()
    assert current().requests_in_flight == 256 and current().coalesce_gap is None


def test_default_then_environment_then_store_then_using(monkeypatch):
    store = MemoryStore(settings={"requests_in_flight": 20, "window_bytes": 7})
    assert store.settings.requests_in_flight == 20
    monkeypatch.setenv("ZARR3_REQUESTS_IN_FLIGHT", "10")
    monkeypatch.setenv("ZARR3_CHUNK_CACHE_BYTES", "1000")
    assert current().requests_in_flight == 10  # environment over the default
    assert store.settings.requests_in_flight == 20  # the store's own over the environment
    assert store.settings.chunk_cache_bytes == 1000  # what the store does not set comes through
    with using(requests_in_flight=30) as inside:
        assert inside.requests_in_flight == 30
        assert current().requests_in_flight == store.settings.requests_in_flight == 30
        assert store.settings.window_bytes == 7
        with using(requests_in_flight=40, window_bytes=9):
            assert store.settings.requests_in_flight == 40 and store.settings.window_bytes == 9
        assert store.settings.requests_in_flight == 30 and store.settings.window_bytes == 7
    assert store.settings.requests_in_flight == 20 and current().requests_in_flight == 10


def test_environment_is_read_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("ZARR3_COMMIT_WAIT", "2.5")
    assert current().commit_wait == 2.5
    monkeypatch.setenv("ZARR3_COMMIT_WAIT", "4")
    assert current().commit_wait == 4.0
    monkeypatch.setenv("ZARR3_COALESCE_GAP", "65536")
    assert current().coalesce_gap == 65536 and LocalStore("/nonexistent").coalesce_gap == 65536
    monkeypatch.setenv("ZARR3_BUFFER_POOL_MB", "0.5")  # counted in MiB
    assert current().buffer_pool_bytes == MiB // 2
    monkeypatch.setenv("ZARR3_IO_THREADS", "")  # blank: not set
    assert current().io_threads == Settings().io_threads


@pytest.mark.parametrize(
    ("var", "raw", "why"),
    [
        ("ZARR3_IO_THREADS", "lots", "not a number"),
        ("ZARR3_IO_THREADS", "0", "at least 1"),
        ("ZARR3_IO_THREADS", "2.5", "whole"),
        ("ZARR3_REQUESTS_IN_FLIGHT", "-3", "at least 1"),
        ("ZARR3_WINDOW_BYTES", "nan", "not a number"),
        ("ZARR3_COMMIT_WAIT", "inf", "finite"),
        ("ZARR3_CHUNK_CACHE_BYTES", "1e400", "not a number"),
        ("ZARR3_BUFFER_POOL_MB", "-1", "at least 0"),
    ],
)
def test_bad_environment_values_warn_and_fall_back(monkeypatch, var, raw, why):
    monkeypatch.setenv(var, raw)
    with pytest.warns(UserWarning, match=rf"{var}=.*{why}.*default"):
        got = current()
    assert got == Settings()


def test_unknown_names_and_bad_values_are_refused():
    with pytest.raises(ArgumentError, match="'bogus'"), using(bogus=1):
        pass
    for bad in ({"io_threads": 0}, {"io_threads": 2.5}, {"requests_in_flight": True}, {"window_bytes": -1}):
        with pytest.raises(ArgumentError, match=next(iter(bad))), using(**bad):
            pass
    with pytest.raises(ArgumentError, match="commit_wait"), using(commit_wait=float("nan")):
        pass
    with using(coalesce_gap=None, buffer_pool_bytes=None, commit_wait=0.5) as s:  # None: the rule
        assert s.coalesce_gap is None and s.commit_wait == 0.5
    with pytest.raises(StoreArgumentError, match="'bogus'"):
        MemoryStore(settings={"bogus": 1})
    with pytest.raises(StoreArgumentError, match="'bogus'"):
        LocalStore("/nonexistent", settings={"bogus": 1})


def test_settings_is_a_frozen_picklable_value():
    s = current()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.io_threads = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(s)) == s
    assert set(ENVIRONMENT) == settings.NAMES


# ---- thread pools -----------------------------------------------------------------------------
def _concurrency(kind: str, parties: int, tasks: int = 12) -> tuple[int, set[str]]:
    """Run ``tasks`` calls on the ``kind`` pool that meet in groups of ``parties`` (so at least
    that many run at once); the most that ran at once and the threads they ran on."""
    barrier = threading.Barrier(parties, timeout=20)
    lock = threading.Lock()
    running = [0, 0]
    names: set[str] = set()

    def task(_: int) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
            names.add(threading.current_thread().name)
        try:
            barrier.wait()
        finally:
            with lock:
                running[0] -= 1

    _threads.thread_map(task, range(tasks), kind=kind)
    return running[1], names


def _live_threads(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def test_thread_pools_follow_io_threads_and_cpu_threads(monkeypatch):
    with using(cpu_threads=3):
        peak, names = _concurrency("cpu", 3)
        assert peak == 3 and len(names) == 3 and all(n.startswith("zarr3-cpu") for n in names)
    with using(cpu_threads=5):  # the pool is made anew with the new size
        peak, names = _concurrency("cpu", 5, tasks=15)
        assert peak == 5 and len(names) == 5
    with using(cpu_threads=2):
        _concurrency("cpu", 2)
    gc.collect()  # the replaced pools' idle threads exit once nothing refers to the pools
    for _ in range(100):
        if _live_threads("zarr3-cpu") <= 2:
            break
        time.sleep(0.1)
    assert _live_threads("zarr3-cpu") <= 2
    monkeypatch.setenv("ZARR3_IO_THREADS", "4")
    assert _threads.pool_size("io") == 4
    peak, names = _concurrency("io", 4)
    assert peak == 4 and all(n.startswith("zarr3-io") for n in names)
    with using(io_threads=1):  # one thread: inline, in the caller's thread
        seen = _threads.thread_map(lambda _: threading.current_thread().name, range(4), kind="io")
        assert set(seen) == {threading.current_thread().name}


def test_using_reaches_work_on_the_pools():
    with using(window_bytes=12345, cpu_threads=2):
        seen = _threads.thread_map(lambda _: current().window_bytes, range(6), kind="cpu")
    assert seen == [12345] * 6
    assert (
        _threads.thread_map(lambda _: current().window_bytes, range(4), kind="cpu")
        == [Settings().window_bytes] * 4
    )


def test_threads_with_different_pool_sizes_at_once_all_finish():
    """Two threads asking for different pool sizes replace each other's pool: every call still
    runs, and runs once."""
    errors: list[BaseException] = []

    def worker(size: int) -> None:
        try:
            with using(cpu_threads=size):
                for n in range(40):
                    assert _threads.thread_map(lambda x: x * 2, range(n % 7 + 2), kind="cpu") == [
                        x * 2 for x in range(n % 7 + 2)
                    ]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(size,)) for size in (2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors


# ---- the buffer pool ----------------------------------------------------------------------------
def test_buffer_pool_cap_is_a_setting(monkeypatch):
    pool = _slabs.BufferPool()  # follows the settings
    monkeypatch.setenv("ZARR3_BUFFER_POOL_MB", "3")
    assert pool.cap_bytes == 3 * MiB
    with using(buffer_pool_bytes=0):
        assert pool.cap_bytes == 0
        pool.take(MiB)
        assert pool.pooled_bytes == 0  # reuse off
    pool.take(MiB)
    assert pool.pooled_bytes > 0
    monkeypatch.delenv("ZARR3_BUFFER_POOL_MB")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    assert pool.cap_bytes == 64 * MiB  # today's rule when the setting is not given
    assert _slabs.BufferPool(5).cap_bytes == 5  # a pool given its own cap keeps it


# ---- stores -------------------------------------------------------------------------------------
def test_a_stores_zarr3_options_reach_its_settings():
    options = {"zarr3": {"requests_in_flight": 9, "coalesce_gap": 100, "retries": 1}}
    fs_store = FsspecStore.from_url("memory://settings-a", options)
    ob_store = obstore_s3(options=options)
    for store in (fs_store, ob_store):
        assert store.settings.requests_in_flight == 9 == store.batch_size
        assert store.coalesce_gap == 100
        with using(requests_in_flight=11):
            assert store.batch_size == 11
    assert fs_store.retries == 1
    for store in (
        FsspecStore.from_url("memory://settings-b", {"zarr3": {"batch_size": 4}}),  # the older name
        FsspecStore.from_url("memory://settings-b", batch_size=4),
        FsspecStore.from_url("memory://settings-b", settings={"requests_in_flight": 4}),
        obstore_s3(options={"zarr3": {"batch_size": 4}}),
        obstore_s3(settings={"requests_in_flight": 4}),
    ):
        assert store.settings.requests_in_flight == 4


def test_store_options_refuse_unknown_names_and_disagreements():
    with pytest.raises(StoreArgumentError, match=r"'bogus'.*zarr3"):
        FsspecStore.from_url("memory://x", {"zarr3": {"bogus": 1}})
    with pytest.raises(StoreArgumentError, match="'bogus'"):
        obstore_s3(options={"zarr3": {"bogus": 1}})
    with pytest.raises(StoreArgumentError, match="batch_size"):
        FsspecStore.from_url("memory://x", {"zarr3": {"batch_size": 4, "requests_in_flight": 5}})
    with pytest.raises(StoreArgumentError, match="requests_in_flight"):
        FsspecStore.from_url(
            "memory://x", {"zarr3": {"requests_in_flight": 5}}, settings={"requests_in_flight": 6}
        )
    with pytest.raises(StoreArgumentError, match="io_threads"):
        obstore_s3(options={"zarr3": {"io_threads": 0}})


def test_coalesce_gap_is_the_stores_own_unless_set(tmp_path):
    assert LocalStore(tmp_path).coalesce_gap == 4096
    assert MemoryStore().coalesce_gap == 4096
    assert FsspecStore.from_url("memory://gap").coalesce_gap == 4096
    assert FsspecStore.from_url("http://127.0.0.1:9/x").coalesce_gap == OBJECT_STORE_COALESCE_GAP
    assert obstore_s3().coalesce_gap == OBJECT_STORE_COALESCE_GAP == MiB
    with using(coalesce_gap=0):
        assert obstore_s3().coalesce_gap == 0 and LocalStore(tmp_path).coalesce_gap == 0


def test_settings_survive_pickling_a_store(tmp_path):
    own = {"requests_in_flight": 7, "coalesce_gap": 123}
    stores = [
        MemoryStore(settings=own),
        LocalStore(tmp_path, settings=own),
        FsspecStore.from_url("memory://pickled", {"zarr3": own}),
        FsspecStore.from_url("http://127.0.0.1:9/x", {"zarr3": {"batch_size": 7, "coalesce_gap": 123}}),
        obstore_s3(options={"zarr3": own}),
    ]
    for store in stores:
        for copy in (pickle.loads(pickle.dumps(store)), store.with_read_only(True)):
            assert (copy.settings.requests_in_flight, copy.coalesce_gap) == (7, 123), store


def test_no_warning_when_the_environment_is_clean():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        current()
        assert MemoryStore().settings == Settings()


def test_one_setting_resolves_as_all_of_them_do(monkeypatch):
    """``settings.value`` (the hot paths' single lookup) agrees with ``current()``."""
    from zarr3_backend import settings

    assert settings.value("io_threads") == settings.current().io_threads
    monkeypatch.setenv("ZARR3_BUFFER_POOL_MB", "3")
    assert settings.value("buffer_pool_bytes") == 3 * 2**20 == settings.current().buffer_pool_bytes
    with settings.using(cpu_threads=3):
        assert settings.value("cpu_threads") == 3 == settings.current().cpu_threads
    monkeypatch.setenv("ZARR3_IO_THREADS", "0")  # invalid: warns, the default stands
    with pytest.warns(UserWarning, match="ZARR3_IO_THREADS"):
        assert settings.value("io_threads") == settings.Settings().io_threads
