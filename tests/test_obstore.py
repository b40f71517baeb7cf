"""ObstoreStore: the store contract on moto's S3 server, concurrency, conditional writes, URLs
and options, pickling, and full round trips over S3 and HTTP (servers on 127.0.0.1)."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
import uuid

import numpy as np
import pandas as pd
import pytest
import test_stores as contract
import xarray as xr
from servers import Proxy, RangeHTTPServer, s3_options

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.errors import ReadOnlyError, StoreError, WriteConflictError
from zarr3_backend.stores import FsspecStore, ObstoreStore, StoreArgumentError, make_store
from zarr3_backend.stores.fsspec_errors import (
    BucketNotFoundError,
    StoreAccessError,
    StoreTimeoutError,
    StoreUnreachableError,
)
from zarr3_backend.stores.fsspec_options import DEFAULT_RETRIES

VALUE = contract.VALUE


@pytest.fixture
def bucket(moto) -> str:
    return moto.create_bucket()


def _store(moto, bucket: str, **kw) -> ObstoreStore:
    return ObstoreStore(f"s3://{bucket}/root-{uuid.uuid4().hex[:6]}", s3_options(moto.endpoint), **kw)


@pytest.fixture
def store(moto, bucket):
    return _store(moto, bucket)


# ---- the contract every store passes (tests/test_stores.py), on S3 through obstore ----------
CONTRACT = [
    "test_set_get_roundtrip_and_overwrite",
    "test_value_is_copied_on_set",
    "test_get_many_keeps_order_and_reports_missing_as_none",
    "test_get_partial_values_mixed",
    "test_a_directory_is_not_a_key",
    "test_erase_and_erase_many",
    "test_erase_leaves_no_empty_directory_behind",
    "test_erase_prefix",
    "test_erase_prefix_without_slash_is_a_string_prefix",
    "test_listing",
    "test_empty_store_lists_nothing",
    "test_keys_with_glob_characters_are_literal",
    "test_read_only_refuses_every_write",
    "test_with_read_only_shares_the_data",
    "test_repr_and_equality",
    "test_pickle_round_trip_sees_the_same_data",
    "test_many_keys_concurrently",
    "test_concurrent_set_and_get_from_threads",
]


@pytest.mark.parametrize("name", CONTRACT)
def test_store_contract(store, name):
    getattr(contract, name)(store)


def _cases(test) -> list:
    """The parameter values of one contract test in tests/test_stores.py."""
    return next(m for m in test.pytestmark if m.name == "parametrize").args[1]


@pytest.mark.parametrize(("byte_range", "expected"), _cases(contract.test_get_byte_ranges), ids=repr)
def test_store_contract_byte_ranges(store, byte_range, expected):
    contract.test_get_byte_ranges(store, byte_range, expected)


@pytest.mark.parametrize("bad", _cases(contract.test_invalid_keys_are_refused_and_nothing_written))
def test_store_contract_invalid_keys(store, bad):
    contract.test_invalid_keys_are_refused_and_nothing_written(store, bad)


def test_escaped_looking_keys_stay_literal_and_inside_the_prefix(moto, bucket):
    store = ObstoreStore(f"s3://{bucket}/root/inner", s3_options(moto.endpoint))
    keys = ["a%2F..%2F..%2Fescaped", "%2e%2e/x", "sp ace/\u00fc", "q?x=1#frag"]
    store.set_many({k: k.encode() for k in keys})
    assert store.get_many(keys) == [k.encode() for k in keys]
    assert sorted(store.list()) == sorted(keys)
    whole_bucket = ObstoreStore(f"s3://{bucket}", s3_options(moto.endpoint))
    assert sorted(whole_bucket.list()) == sorted(f"root/inner/{k}" for k in keys)


def test_ranges_of_an_empty_value_and_past_the_end(store):
    store.set("empty", b"")
    store.set("v", VALUE)
    requests = [
        ("empty", ByteRange.suffix(4)),
        ("empty", ByteRange(0)),
        ("empty", ByteRange(0, 3)),
        ("empty", ByteRange(2, 0)),
        ("v", ByteRange(2000)),
        ("v", ByteRange(1020, 100)),
    ]
    assert store.get_partial_values(requests) == [b"", b"", b"", b"", b"", VALUE[1020:]]


# ---- concurrency: one event loop, many requests in flight, bounded ---------------------------
@pytest.fixture
def proxy(moto):
    p = Proxy(moto.endpoint)
    # servers.py listens with socketserver's backlog of 5: a burst of connections beyond it waits
    # for SYN retransmits (1 s, 3 s, ...), which would hide the concurrency under test
    p._server.socket.listen(256)
    yield p
    p.stop()


def test_batched_reads_overlap_on_the_server(moto, bucket, proxy):
    url = f"s3://{bucket}/many"
    data = {f"c/{i}": i.to_bytes(4, "little") * 8 for i in range(48)}
    ObstoreStore(url, s3_options(moto.endpoint)).set_many(data)
    store = ObstoreStore(url, s3_options(proxy.endpoint))
    proxy.delay = 0.3  # each request held a while: concurrency shows as overlap
    proxy.log.clear()
    keys = [*sorted(data), "c/missing"]
    assert store.get_many(keys) == [data.get(k) for k in keys]
    assert len(proxy.log.of("GET")) == len(keys)
    assert proxy.log.max_in_flight >= 16
    proxy.log.clear()
    assert store.exists_many(keys) == [k in data for k in keys]
    assert proxy.log.max_in_flight >= 16


def test_in_flight_requests_are_bounded_by_batch_size(moto, bucket, proxy):
    url = f"s3://{bucket}/bounded"
    data = {f"c/{i}": bytes([i]) * 3 for i in range(24)}
    ObstoreStore(url, s3_options(moto.endpoint)).set_many(data)
    store = ObstoreStore(url, s3_options(proxy.endpoint, zarr3={"batch_size": 3}))
    proxy.delay = 0.1
    proxy.log.clear()
    assert store.get_many(sorted(data)) == [data[k] for k in sorted(data)]
    # 3 in flight; the server counts a request done only after its answer is sent, so each slot's
    # next request may already have arrived: at most 6 seen at once, never the 24 of the batch
    assert 2 <= proxy.log.max_in_flight <= 6


def test_many_ranges_of_one_value_are_one_request_each(moto, bucket, proxy):
    """The store sends what it is asked for: merging neighbouring ranges is the caller's, by the
    store's ``coalesce_gap`` (a shard view does it), never a second time here."""
    url = f"s3://{bucket}/ranges"
    ObstoreStore(url, s3_options(moto.endpoint)).set("shard", VALUE)
    store = ObstoreStore(url, s3_options(proxy.endpoint))
    proxy.log.clear()
    ranges = [ByteRange(o, 16) for o in range(0, 512, 32)]
    assert store.get_partial_values([("shard", r) for r in ranges]) == [
        VALUE[r.offset : r.offset + 16] for r in ranges
    ]
    assert len(proxy.log.of("GET")) == len(ranges)
    # a range past the end among them: each range is clipped as ByteRange says
    mixed = [ByteRange(0, 4), ByteRange(1020, 50), ByteRange(4000, 5)]
    assert store.get_partial_values([("shard", r) for r in mixed]) == [VALUE[:4], VALUE[1020:], b""]
    # several ranges of a missing value: each reads as missing, the other key's ranges as bytes
    requests = [
        ("gone", ByteRange(0, 4)),
        ("shard", ByteRange(4, 4)),
        ("gone", ByteRange(8, 4)),
        ("shard", ByteRange(0, 2)),
    ]
    assert store.get_partial_values(requests) == [None, VALUE[4:8], None, VALUE[:2]]


# ---- conditional writes and moves on S3 ------------------------------------------------------
def test_conditional_writes_detect_conflicts(store):
    assert store.supports_conditional_writes
    assert store.get_versioned("k") == (None, None)
    assert store.set_if("k", b"first", None)  # create-only
    assert not store.set_if("k", b"again", None)  # exists now: If-None-Match refused
    value, version = store.get_versioned("k")
    assert value == b"first"
    _, other_version = store.get_versioned("k")
    assert store.set_if("k", b"second", version)  # still that version: written
    assert not store.set_if("k", b"lost", other_version)  # stale ETag: refused
    assert store.get("k") == b"second"
    _, current = store.get_versioned("k")
    assert current != version
    assert not store.erase_if("k", version)  # stale: kept
    assert store.get("k") == b"second"
    assert store.erase_if("k", current)
    assert store.get("k") is None
    assert not store.set_if("k", b"x", current)  # erased meanwhile
    assert store.get("k") is None
    assert pickle.loads(pickle.dumps(version)) == version


def test_a_version_from_elsewhere_is_refused_naming_the_key(store):
    store.set("k", b"v")
    for bad in (7, ("etag",), (None, None)):
        with pytest.raises(StoreArgumentError, match="'k'"):
            store.set_if("k", b"w", bad)
    assert store.get("k") == b"v"


def test_sync_calls_inside_a_running_event_loop(store):
    import asyncio

    async def main() -> None:
        store.set_many({"a/b": b"0123", "c": b"c"})
        assert store.get("a/b", ByteRange.suffix(2)) == b"23"
        assert store.get_many(["a/b", "x"]) == [b"0123", None]
        assert sorted(store.list_dir("")) == ["a", "c"]
        store.erase_prefix("")

    asyncio.run(main())
    assert list(store.list()) == []


def test_conditional_writes_from_threads_lose_nothing(store):
    from concurrent.futures import ThreadPoolExecutor

    store.set("counter", b"0")

    def bump(_: int) -> int:
        tries = 0
        while True:
            tries += 1
            value, version = store.get_versioned("counter")
            if store.set_if("counter", str(int(value) + 1).encode(), version):
                return tries

    with ThreadPoolExecutor(4) as pool:
        tries = list(pool.map(bump, range(12)))
    assert store.get("counter") == b"12"
    assert sum(tries) >= 12


def test_move_is_a_server_side_copy_then_delete(store):
    store.set("txn/a", b"new")
    store.set("a", b"old")
    store.move("txn/a", "a")
    assert store.get("a") == b"new" and store.get("txn/a") is None
    store.move("txn/a", "a")  # re-run: nothing to move
    assert store.get("a") == b"new"


def test_http_store_has_no_conditional_writes(http_server):
    server, _ = http_server
    store = ObstoreStore(f"{server.url}/data.zarr")
    assert store.read_only and not store.supports_conditional_writes


def test_gcs_and_azure_declare_no_conditional_writes_and_guard_partial_writes():
    gcs = ObstoreStore("gs://bucket/x", {"token": "anon"})
    assert gcs.kind == "gcs" and not gcs.supports_conditional_writes
    assert gcs.refuses_unguarded_partial_writes
    with pytest.raises(WriteConflictError, match="'k'"):
        gcs.set_if("k", b"1", None)
    allowed = ObstoreStore(
        "az://container/x", {"account_name": "acct", "zarr3": {"unguarded_partial_writes": True}}
    )
    assert allowed.kind == "azure" and not allowed.refuses_unguarded_partial_writes
    copy = pickle.loads(pickle.dumps(allowed))
    assert copy == allowed and not copy.refuses_unguarded_partial_writes
    with pytest.raises(StoreArgumentError, match="given twice"):
        ObstoreStore(
            "gs://b/x", {"zarr3": {"unguarded_partial_writes": True}}, unguarded_partial_writes=False
        )


# ---- errors --------------------------------------------------------------------------------
def test_missing_bucket_is_typed(moto):
    store = ObstoreStore("s3://no-such-bucket-z3/x", s3_options(moto.endpoint))
    for call in (lambda: store.get("k"), lambda: list(store.list()), lambda: store.exists("k")):
        with pytest.raises(BucketNotFoundError, match="no-such-bucket-z3"):
            call()


def test_denied_access_is_typed_and_keeps_the_old_object(moto, bucket, proxy):
    url = f"s3://{bucket}/denied"
    store = ObstoreStore(url, s3_options(proxy.endpoint))
    store.set("k", b"old")
    proxy.deny(lambda r: r.method == "PUT")
    with pytest.raises(StoreAccessError, match=re.escape(f"{url}/k")):
        store.set("k", b"new")
    proxy.deny(lambda r: r.method == "GET")
    with pytest.raises(StoreAccessError, match=re.escape(f"{url}/k")):
        store.get("k")
    proxy.deny(lambda r: False)
    assert store.get("k") == b"old"


def test_transient_500s_are_retried_and_persistent_ones_give_up_bounded(moto, bucket, proxy):
    url = f"s3://{bucket}/flaky"
    store = ObstoreStore(url, s3_options(proxy.endpoint, attempts=None))  # the default retries
    proxy.fail(2, match=lambda r: r.method == "PUT")
    store.set("k", b"v")
    proxy.fail(2, status=503, code="SlowDown", match=lambda r: r.method == "GET")
    proxy.log.clear()
    assert store.get("k") == b"v"
    assert [r.status for r in proxy.log.snapshot()] == [503, 503, 200]
    proxy.log.clear()
    proxy.fail(100, match=lambda r: r.path.endswith("/k"))
    with pytest.raises(StoreError, match=re.escape(f"{url}/k")):
        store.get("k")
    assert len(proxy.log.of("GET")) == DEFAULT_RETRIES + 1  # one retry layer: obstore's, bounded


def test_a_stalled_server_times_out_and_a_batch_stops_sending(moto, bucket, proxy):
    url = f"s3://{bucket}/stalled"
    keys = [f"k/{i}" for i in range(12)]
    ObstoreStore(url, s3_options(moto.endpoint)).set_many(dict.fromkeys(keys, b"v"))
    proxy.stall(30, match=lambda r: r.method == "GET")
    opts = s3_options(proxy.endpoint, attempts=None, read_timeout=1.0, zarr3={"retries": 1, "batch_size": 3})
    store = ObstoreStore(url, opts)
    with pytest.raises(StoreTimeoutError, match=re.escape(f"{url}/k/0")) as info:
        store.get("k/0")
    assert isinstance(info.value, TimeoutError)
    assert len(proxy.log.snapshot()) == 2  # one try, one retry
    proxy.log.clear()
    with pytest.raises(StoreTimeoutError, match=re.escape(url)):
        store.get_many(keys)
    assert len(proxy.log.snapshot()) <= 6  # the first window of 3 (and its retries), not all 12


def test_anonymous_reads_of_a_public_bucket(moto, bucket):
    url = f"s3://{bucket}/public"
    ObstoreStore(url, s3_options(moto.endpoint)).set("k", b"v")
    anon = ObstoreStore(url, s3_options(moto.endpoint, anon=True))
    with pytest.raises(StoreAccessError):
        anon.get("k")
    moto.make_public(bucket)
    assert anon.get("k") == b"v" and list(anon.list()) == ["k"]


def test_unreachable_endpoint_is_typed_and_named():
    store = ObstoreStore(
        "s3://b/x", s3_options("http://127.0.0.1:9", connect_timeout=1, zarr3={"retries": 0})
    )
    with pytest.raises(StoreUnreachableError, match="s3://b/x/k"):
        store.get("k")
    with pytest.raises(StoreUnreachableError):
        store.get_many([f"k{i}" for i in range(20)])


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"default_block_size": 5}, "default_block_size"),
        ({"config_kwargs": {"max_pool_connections": 3}}, "max_pool_connections"),
        ({"client_kwargs": {"aws_session_token": "x"}}, "aws_session_token"),
        ({"endpoint_url": "http://a", "client_kwargs": {"endpoint_url": "http://b"}}, "endpoint"),
        ({"zarr3": {"retries": -1}}, "retries"),
    ],
)
def test_options_without_an_obstore_equivalent_are_refused(options, named):
    with pytest.raises(StoreArgumentError, match=named):
        ObstoreStore("s3://bucket/x", options)


def test_fsspec_options_are_mapped_to_obstore():
    from zarr3_backend.stores.obstore_options import obstore_target

    t = obstore_target("s3://b/p", s3_options("http://127.0.0.1:1234", attempts=4, connect_timeout=2), None)
    assert t.kind == "s3"
    assert t.config == {
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "endpoint": "http://127.0.0.1:1234",
        "region": "us-east-1",
    }
    assert t.client_options["allow_http"] is True
    assert t.client_options["connect_timeout"].total_seconds() == 2
    assert t.client_options["timeout"].total_seconds() == 600  # not obstore's 30 s: big shards
    assert t.client_options["pool_max_idle_per_host"] == "64"  # not reqwest's every one: memory
    own = obstore_target("s3://b/p", {"client_options": {"pool_max_idle_per_host": "8"}}, None)
    assert own.client_options["pool_max_idle_per_host"] == "8"
    assert t.retry_config["max_retries"] == 3  # 4 attempts: the first and 3 retries
    anon = obstore_target("s3://b/p", {"anon": True, "region": "eu-west-1"}, 0)
    assert anon.config == {"skip_signature": True, "region": "eu-west-1"}
    assert anon.retry_config["max_retries"] == 0 and "allow_http" not in anon.client_options
    assert obstore_target("gs://b/p", {"token": "anon"}, None).config == {"skip_signature": True}
    assert obstore_target("az://c/p", {"account_name": "a", "sas_token": "s"}, None).config == {
        "account_name": "a",
        "sas_key": "s",
    }
    h = obstore_target("http://127.0.0.1:1/x", {"headers": {"X-A": "1"}}, None)
    assert h.kind == "http" and h.client_options["default_headers"] == {"X-A": "1"}


# ---- choosing the store for a URL ------------------------------------------------------------
def test_make_store_uses_obstore_for_remote_urls_unless_told_otherwise(moto, bucket, monkeypatch):
    monkeypatch.delenv("ZARR3_STORE_BACKEND", raising=False)
    url, opts = f"s3://{bucket}/d.zarr", s3_options(moto.endpoint)
    assert isinstance(make_store(url, mode="a", storage_options=opts), ObstoreStore)
    tuned = make_store(url, mode="r", storage_options={**opts, "zarr3": {"batch_size": 5, "retries": 1}})
    assert isinstance(tuned, ObstoreStore) and tuned.batch_size == 5 and tuned.read_only
    assert tuned.storage_options["zarr3"] == {"batch_size": 5, "retries": 1}
    pinned = {**opts, "zarr3": {"backend": "fsspec", "batch_size": 5}}
    fs_store = make_store(url, mode="a", storage_options=pinned)
    assert isinstance(fs_store, FsspecStore) and fs_store.batch_size == 5
    monkeypatch.setenv("ZARR3_STORE_BACKEND", "fsspec")
    assert isinstance(make_store(url, mode="a", storage_options=opts), FsspecStore)
    forced = {**opts, "zarr3": {"backend": "obstore"}}
    assert isinstance(make_store(url, mode="a", storage_options=forced), ObstoreStore)  # the call wins
    monkeypatch.setenv("ZARR3_STORE_BACKEND", "auto")
    fsspec_only = {**opts, "default_block_size": 2**20}  # s3fs only: auto falls back to fsspec
    assert isinstance(make_store(url, mode="a", storage_options=fsspec_only), FsspecStore)
    with pytest.raises(StoreArgumentError, match="default_block_size"):
        make_store(url, mode="a", storage_options={**fsspec_only, "zarr3": {"backend": "obstore"}})
    assert isinstance(make_store("memory://x", mode="a"), FsspecStore)  # not an obstore scheme
    with pytest.raises(StoreArgumentError, match="memory"):
        make_store("memory://x", mode="a", storage_options={"zarr3": {"backend": "obstore"}})
    monkeypatch.setenv("ZARR3_STORE_BACKEND", "rust")
    with pytest.raises(StoreArgumentError, match="ZARR3_STORE_BACKEND"):
        make_store(url, mode="a", storage_options=opts)


def test_without_obstore_remote_urls_use_fsspec(moto, bucket, monkeypatch):
    from zarr3_backend.stores import resolve

    monkeypatch.delenv("ZARR3_STORE_BACKEND", raising=False)
    monkeypatch.setattr(resolve, "obstore_installed", lambda: False)
    url, opts = f"s3://{bucket}/d.zarr", s3_options(moto.endpoint)
    assert isinstance(make_store(url, mode="a", storage_options=opts), FsspecStore)
    with pytest.raises(StoreArgumentError, match="pip install obstore"):
        make_store(url, mode="a", storage_options={**opts, "zarr3": {"backend": "obstore"}})


# ---- pickling ----------------------------------------------------------------------------------
def test_pickled_store_reads_in_another_process(store):
    store.set("a/b", b"from the parent")
    store.with_read_only(True).get("a/b")  # the client and loop are in use here
    # The child leaves by os._exit once its answer is out: a process that used obstore's async
    # API aborts at interpreter exit now and then (7 of 100 runs of a plain obstore 0.12.1
    # `asyncio.run(get_async(...))` under load, none with its sync API): its runtime threads race
    # the interpreter's finalisation (PyO3/pyo3-async-runtimes#40). What this test checks is the
    # pickled store, not obstore's exit.
    code = (
        "import os, pickle, sys\n"
        "s = pickle.loads(sys.stdin.buffer.read())\n"
        "sys.stdout.write(repr((type(s).__name__, s.read_only, s.get('a/b'), sorted(s.list()))))\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(store.with_read_only(True)),
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout.decode()
    assert out == repr(("ObstoreStore", True, b"from the parent", ["a/b"]))


@pytest.mark.slow
@pytest.mark.distributed
def test_dask_distributed_workers_write_and_read_through_obstore(moto, bucket, monkeypatch):
    import dask.array as da
    import distributed

    from zarr3_backend.dask import from_array
    from zarr3_backend.dask import store as dask_store

    monkeypatch.delenv("ZARR3_STORE_BACKEND", raising=False)
    url, opts = f"s3://{bucket}/dist.zarr", s3_options(moto.endpoint)
    old, data = np.random.default_rng(4).random((2, 24, 16))
    a = z3.create_array(
        url, "t", shape=data.shape, dtype="f8", chunks=(4, 8), shards=(8, 16), storage_options=opts
    )
    assert isinstance(a.store, ObstoreStore)
    a[...] = old  # obstore has run in this process before the workers start (they are spawned)
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster),
    ):
        dask_store(da.from_array(data, chunks=(8, 16)), a)
        np.testing.assert_array_equal(z3.open_array(url, "t", storage_options=opts)[...], data)
        lazy = from_array(z3.open_array(url, "t", storage_options=opts))
        np.testing.assert_array_equal(lazy.compute(), data)
        ds = _dataset().chunk({"time": 3})
        z3.to_zarr(ds, f"s3://{bucket}/dist-ds.zarr", mode="w", storage_options=opts)
        back = xr.open_dataset(f"s3://{bucket}/dist-ds.zarr", engine="zarr3", storage_options=opts, chunks={})
        xr.testing.assert_identical(back.compute(), _dataset())


def _read_in_child(store: ObstoreStore, queue) -> None:
    try:
        queue.put(("value", store.get("a/b")))
    except StoreError as e:
        queue.put(("error", str(e)))


def test_a_process_forked_after_use_gets_a_typed_error_not_a_hang(store):
    import multiprocessing

    store.set("a/b", b"1")  # obstore's runtime has run in this process
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(store, queue))
    child.start()
    try:
        kind, what = queue.get(timeout=60)
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert kind == "error" and "spawn" in what and "fsspec" in what


def test_non_contiguous_buffers_are_written_whole(store):
    data = np.arange(64, dtype="u1").reshape(8, 8)
    store.set("nc", memoryview(data[:, ::2]))
    store.set_many({"c": memoryview(data), "ba": bytearray(b"xyz")})
    assert store.get_many(["nc", "c", "ba"]) == [data[:, ::2].tobytes(), data.tobytes(), b"xyz"]


# ---- full round trips --------------------------------------------------------------------------
def _dataset() -> xr.Dataset:
    rng = np.random.default_rng(5)
    return xr.Dataset(
        {"t2m": (("time", "lat"), rng.random((6, 4)).astype("f4"), {"units": "K"})},
        coords={"time": pd.date_range("2001-01-01", periods=6), "lat": [-45.0, -15.0, 15.0, 45.0]},
        attrs={"title": "through obstore"},
    )


def test_group_array_and_xarray_round_trip_on_s3(moto, bucket, monkeypatch):
    monkeypatch.delenv("ZARR3_STORE_BACKEND", raising=False)
    url, opts = f"s3://{bucket}/rt.zarr", s3_options(moto.endpoint)
    g = z3.open_group(url, mode="w", storage_options=opts, attributes={"via": "obstore"})
    assert isinstance(g.store, ObstoreStore)
    a = g.create_array("s", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8), fill_value=-1)
    data = np.arange(256, dtype="i4").reshape(16, 16)
    a[...] = data
    a[3:5, 2:11] = 7  # partial shard writes: read, merge, compare-and-swap
    data[3:5, 2:11] = 7
    back = z3.open_group(url, mode="r", storage_options=opts)
    assert back.attrs["via"] == "obstore" and sorted(back.members()) == ["s"]
    np.testing.assert_array_equal(back["s"][...], data)
    np.testing.assert_array_equal(back["s"][1:9, 7], data[1:9, 7])
    ds = _dataset()
    z3.to_zarr(ds, f"s3://{bucket}/ds.zarr", mode="w", storage_options=opts)
    got = xr.open_dataset(f"s3://{bucket}/ds.zarr", engine="zarr3", storage_options=opts, chunks={})
    xr.testing.assert_identical(got.compute(), ds)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    g = z3.open_group(root / "data.zarr", mode="w")
    g.create_array("s", shape=(16, 16), dtype="i4", chunks=(4, 4), shards=(8, 8))[...] = np.arange(
        256
    ).reshape(16, 16)
    z3.to_zarr(_dataset(), root / "ds.zarr", mode="w", consolidated=True)
    server = RangeHTTPServer(root)
    yield server, root
    server.stop()


def test_reads_over_http(http_server, monkeypatch):
    monkeypatch.delenv("ZARR3_STORE_BACKEND", raising=False)
    server, root = http_server
    a = z3.open_array(f"{server.url}/data.zarr", "s")
    assert isinstance(a.store, ObstoreStore) and a.store.read_only
    np.testing.assert_array_equal(a[...], np.arange(256).reshape(16, 16))
    server.log.clear()
    with z3.settings.using(round_trip_bytes=0):
        assert a[9, 9] == 9 * 16 + 9  # shard index by a suffix range, then one inner chunk
    assert len(server.log.of("GET")) == 2 and all(r.range for r in server.log.of("GET"))
    server.log.clear()
    assert a[0, 15] == 15  # a small shard whose index is not cached: read whole
    assert [r.range for r in server.log.of("GET")] == [None]
    store = ObstoreStore(f"{server.url}/data.zarr")
    whole = (root / "data.zarr" / "s" / "c" / "1" / "0").read_bytes()
    assert store.get_partial_values(
        [("s/c/1/0", ByteRange.suffix(7)), ("s/c/1/0", ByteRange(3, 10)), ("s/c/9/9", None)]
    ) == [whole[-7:], whole[3:13], None]
    assert store.exists("s/c/1/0") and not store.exists("s/c/9/9")
    with pytest.raises(ReadOnlyError, match="read-only"):
        z3.open_group(f"{server.url}/data.zarr", mode="r+")
    ds = xr.open_dataset(f"{server.url}/ds.zarr", engine="zarr3")  # consolidated: no listing
    xr.testing.assert_identical(ds, _dataset())


def test_listing_a_plain_web_server_says_what_to_do(http_server):
    server, _ = http_server
    store = ObstoreStore(f"{server.url}/data.zarr", {"zarr3": {"retries": 0}})
    with pytest.raises(StoreError, match="consolidated metadata") as info:
        list(store.list_dir(""))
    assert server.url in str(info.value) and "'backend': 'fsspec'" in str(info.value)
    with pytest.raises(StoreError, match="PROPFIND"):
        list(store.list())


def test_sharded_reads_merge_inner_chunks_by_the_stores_coalesce_gap(moto, bucket, proxy):
    """Inner chunks of one shard closer than ``coalesce_gap`` are one request; with a small gap
    each is its own (and no byte between them is fetched)."""
    import numpy as np

    import zarr3_backend as z3

    url = f"s3://{bucket}/gap"
    data = np.arange(64 * 64, dtype="f8").reshape(64, 64)
    a = z3.create_array(
        ObstoreStore(url, s3_options(moto.endpoint)),
        shape=data.shape,
        dtype=data.dtype,
        chunks=(8, 8),
        shards=(64, 64),
    )
    a[...] = data
    for gap, requests in ((1 << 20, 1), (16, 4)):
        store = ObstoreStore(url, {**s3_options(proxy.endpoint), "zarr3": {"coalesce_gap": gap}})
        b = z3.open_array(store, mode="r")
        b[0:1, 0:1]  # the shard index is now cached
        proxy.log.clear()
        # one region of one shard touching inner chunks (0, 0), (0, 2), (0, 4), (0, 6)
        assert (b[0:8, ::16] == data[0:8, ::16]).all()
        assert len(proxy.log.of("GET")) == requests, gap


def test_stores_built_the_same_way_share_one_obstore_client(http_server):
    """A dataset opened again reuses the first store's obstore object, and with it its warm HTTP
    connections; other options (or another root) get their own."""
    server, _ = http_server
    first = ObstoreStore(f"{server.url}/data.zarr")
    again = ObstoreStore(f"{server.url}/data.zarr/")
    other_options = ObstoreStore(f"{server.url}/data.zarr", {"zarr3": {"retries": 0}})
    other_root = ObstoreStore(f"{server.url}/ds.zarr")
    assert first._open() is again._open()
    assert other_options._open() is not first._open() and other_root._open() is not first._open()
    assert pickle.loads(pickle.dumps(first))._open() is first._open()  # same process: shared too
    a = z3.open_array(again, "s")  # and both read as before
    np.testing.assert_array_equal(a[...], np.arange(256).reshape(16, 16))


def test_a_changed_environment_gets_its_own_obstore_client(http_server, monkeypatch):
    """obstore reads endpoints and credentials from the environment too: a store opened after
    they changed must not reuse a client built with the old ones."""
    server, _ = http_server
    monkeypatch.setenv("AWS_SESSION_TOKEN", "first")
    first = ObstoreStore(f"{server.url}/data.zarr")
    assert ObstoreStore(f"{server.url}/data.zarr")._open() is first._open()
    monkeypatch.setenv("AWS_SESSION_TOKEN", "rotated")
    assert ObstoreStore(f"{server.url}/data.zarr")._open() is not first._open()
