"""Store.stream_partial_values: every store kind hands over every value exactly once, at its
position, with the ranges, missing keys and failures of get_partial_values; the object stores
keep at most ``in_flight`` requests outstanding (counted by the server), and a consumer that
stops early leaves no request behind. Servers: benchmarks/latency_server.py (a per-request
latency, request counters) and tests/servers.py (a server that ignores Range, a fault proxy,
moto's S3), all on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid

import fsspec.asyn
import pytest
from servers import Proxy, RangeHTTPServer, free_port, s3_options

from benchmarks import latency_server
from zarr3_backend import settings
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.errors import StoreError
from zarr3_backend.stores import FsspecStore, LocalStore, MemoryStore, ObstoreStore
from zarr3_backend.stores.base import RequestFeed, Store
from zarr3_backend.stores.fsspec_errors import StoreUnreachableError

#: Values the stores hold (key -> bytes); "gone" is asked for but never stored.
VALUES = {f"v/{i}": bytes((i + j) % 251 for j in range(100 + 37 * i)) for i in range(12)}
VALUES["empty"] = b""

#: Every kind of range get_partial_values takes, on present, empty and missing values.
KEY_RANGES: list[tuple[str, ByteRange | None]] = [
    ("v/0", None),
    ("v/1", ByteRange(3, 10)),
    ("v/2", ByteRange.suffix(7)),
    ("v/3", ByteRange(5)),
    ("v/4", ByteRange(0, 0)),
    ("gone", ByteRange(0, 0)),
    ("gone", None),
    ("v/5", ByteRange(200, 50)),  # runs past the end of a 285-byte value
    ("v/6", ByteRange(10_000, 5)),  # starts past the end
    ("empty", None),
    ("empty", ByteRange.suffix(4)),
    ("v/7", ByteRange.suffix(10_000)),  # longer than the value
    ("v/8", ByteRange(1, 3)),
    ("v/8", ByteRange(50, 3)),  # two ranges of one value
    ("gone", ByteRange.suffix(3)),
    ("v/9", None),
]


def expected(key: str, r: ByteRange | None) -> bytes | None:
    value = VALUES.get(key)
    if value is None:
        return None
    return value if r is None else value[r.slice(len(value))]


def streamed(store: Store, key_ranges, **kw) -> list[bytes | None]:
    """The stream's values put back in request order; each position must come exactly once."""
    got: dict[int, object] = {}
    for i, value in store.stream_partial_values(key_ranges, **kw):
        assert i not in got, f"position {i} handed over twice"
        got[i] = value
    assert sorted(got) == list(range(len(key_ranges)))
    return [None if got[i] is None else bytes(got[i]) for i in range(len(key_ranges))]


def fed(store: Store, key_ranges, start: int, per_value: int, **kw) -> list[bytes | None]:
    """Stream ``key_ranges`` through a RequestFeed holding the first ``start`` of them, the
    rest added ``per_value`` at a time after each value taken (as a consumer adds requests that
    depend on answers), closed once all are in; values put back in request order."""
    feed = RequestFeed(key_ranges[:start])
    got: dict[int, object] = {}
    for i, value in store.stream_partial_values(feed, **kw):
        assert i not in got, f"position {i} handed over twice"
        got[i] = value
        feed.extend(key_ranges[len(feed) : len(feed) + per_value])
        if len(feed) == len(key_ranges):
            feed.close()
    assert sorted(got) == list(range(len(key_ranges)))
    return [None if got[i] is None else bytes(got[i]) for i in range(len(key_ranges))]


def check_store(store: Store, in_flight: int = 3) -> None:
    want = [expected(k, r) for k, r in KEY_RANGES]
    assert streamed(store, KEY_RANGES, in_flight=in_flight) == want
    assert [None if v is None else bytes(v) for v in store.get_partial_values(KEY_RANGES)] == want
    assert streamed(store, KEY_RANGES, in_flight=1) == want
    assert streamed(store, KEY_RANGES) == want  # the store's requests_in_flight
    assert list(store.stream_partial_values([])) == []
    # requests added while streaming
    assert fed(store, KEY_RANGES, 2, 2, in_flight=in_flight) == want
    assert fed(store, KEY_RANGES, 1, 1, in_flight=1) == want
    assert fed(store, KEY_RANGES, 1, 3) == want
    # a feed left open with every request answered: nobody would add more
    with pytest.raises(RuntimeError, match="left open"):
        list(store.stream_partial_values(RequestFeed(KEY_RANGES[:2]), in_flight=in_flight))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """VALUES as files under ``root/``, for the HTTP servers."""
    top = tmp_path_factory.mktemp("stream")
    for key, value in VALUES.items():
        path = top / "root" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
    return top


@pytest.fixture(scope="module")
def latency(files):
    """A Range-capable server with 50 ms per request that counts requests and peak in flight."""
    with latency_server.running(files, 50) as server:
        yield server


def http_store(kind: str, url: str, **kw) -> Store:
    if kind == "fsspec":
        return FsspecStore.from_url(url, **kw)
    return ObstoreStore(url, **kw)


HTTP_KINDS = ["fsspec", "obstore"]


# ---- every store kind: values, positions, ranges, missing keys ------------------------------
def test_memory_store():
    check_store(MemoryStore(dict(VALUES)))


def test_local_store(tmp_path):
    store = LocalStore(tmp_path)
    store.set_many(VALUES)
    check_store(store)


def test_fsspec_memory_store():
    store = FsspecStore.from_url(f"memory://stream-{uuid.uuid4().hex[:8]}")
    store.set_many(VALUES)
    check_store(store)


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_http_stores(latency, kind):
    check_store(http_store(kind, f"{latency.url}/root"))


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_http_server_that_ignores_range(files, kind):
    plain = RangeHTTPServer(files, ignore_range=True)
    try:
        check_store(http_store(kind, f"{plain.url}/root"))
        assert {r.status for r in plain.log.snapshot() if r.method == "GET"} <= {200, 404}
    finally:
        plain.stop()


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_s3_stores(moto, kind):
    url = f"s3://{moto.create_bucket()}/root"
    options = s3_options(moto.endpoint)
    store = FsspecStore.from_url(url, options) if kind == "fsspec" else ObstoreStore(url, options)
    store.set_many(VALUES)
    check_store(store)


# ---- requests in flight, counted by the server ------------------------------------------------
def _long_batch(n: int) -> list[tuple[str, ByteRange | None]]:
    keys = [k for k in VALUES if k.startswith("v/")]
    return [(keys[i % len(keys)], ByteRange(i % 50, 20)) for i in range(n)]


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_peak_in_flight_is_bounded_and_used(latency, kind):
    store = http_store(kind, f"{latency.url}/root")
    batch = _long_batch(80)
    latency.reset()
    got = streamed(store, batch, in_flight=8)
    stats = latency.stats()
    assert got == [expected(k, r) for k, r in batch]
    assert stats["requests"] == len(batch)  # one request per range, none repeated
    assert 8 / 2 < stats["peak_in_flight"] <= 8


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_a_growing_feed_keeps_its_requests_in_flight_bounded_and_used(latency, kind):
    store = http_store(kind, f"{latency.url}/root")
    batch = _long_batch(80)
    latency.reset()
    got = fed(store, batch, 4, 2, in_flight=8)
    stats = latency.stats()
    assert got == [expected(k, r) for k, r in batch]
    assert stats["requests"] == len(batch)
    assert 8 / 2 < stats["peak_in_flight"] <= 8


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_the_store_setting_bounds_a_stream_without_in_flight(latency, kind):
    store = http_store(kind, f"{latency.url}/root", storage_options={"zarr3": {"requests_in_flight": 5}})
    assert store.settings.requests_in_flight == 5 and store.batch_size == 5
    latency.reset()
    streamed(store, _long_batch(40))
    assert 5 / 2 < latency.stats()["peak_in_flight"] <= 5


def _settled_requests(server) -> int:
    """The server's request count once it has stopped growing."""
    count = server.stats()["requests"]
    while True:
        time.sleep(0.3)
        now = server.stats()["requests"]
        if now == count:
            return count
        count = now


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_a_slow_consumer_holds_back_new_requests(latency, kind):
    """Outstanding plus landed-but-not-taken stays within in_flight: a consumer that has taken
    3 values and waits has let at most in_flight + 3 requests go out."""
    store = http_store(kind, f"{latency.url}/root")
    latency.reset()
    stream = store.stream_partial_values(_long_batch(60), in_flight=6)
    for _ in range(3):
        next(stream)
    assert _settled_requests(latency) <= 6 + 3
    stream.close()


# ---- an early stop cancels; nothing is left behind --------------------------------------------
def _stream_tasks(loop: asyncio.AbstractEventLoop) -> int:
    """Requests of streams still pending on ``loop``."""

    async def count() -> int:
        return sum(1 for t in asyncio.all_tasks() if "_Stream._one" in t.get_coro().__qualname__)

    return asyncio.run_coroutine_threadsafe(count(), loop).result(10)


def _store_loop(store: Store) -> asyncio.AbstractEventLoop:
    if isinstance(store, FsspecStore):
        return store.fs.loop
    from zarr3_backend.stores.obstore_store import _LOOP

    return _LOOP.loop()


@pytest.fixture(scope="module")
def slow(files):
    """A server with 3 s per request: a stream stopped early has requests outstanding."""
    with latency_server.running(files, 3000) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("how", ["close", "collect"])
@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_stopping_early_cancels_outstanding_requests(slow, kind, how):
    store = http_store(kind, f"{slow.url}/root")
    slow.reset()
    stream = store.stream_partial_values(_long_batch(40), in_flight=4)
    _, value = next(stream)
    assert value is not None
    loop = _store_loop(store)
    assert _stream_tasks(loop) > 0  # the rest of the first four are outstanding
    if how == "close":
        stream.close()
    else:
        del stream
        gc.collect()
    assert _stream_tasks(loop) == 0
    assert _settled_requests(slow) <= 4 + 1  # nothing was sent after the stop


# ---- failures -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_a_failed_request_raises_when_reached_naming_the_key(files, kind):
    upstream = RangeHTTPServer(files)
    proxy = Proxy(upstream.url)
    proxy.deny(lambda r: r.path.endswith("/root/v/3"))  # 403: not transient, not missing
    try:
        store = http_store(kind, f"{proxy.endpoint}/root")
        batch = [(f"v/{i}", None) for i in range(8)]
        seen = {}
        with pytest.raises(StoreError, match="v/3"):
            for i, value in store.stream_partial_values(batch, in_flight=3):
                seen[i] = bytes(value)
        assert 3 not in seen
        assert all(seen[i] == VALUES[f"v/{i}"] for i in seen)
        with pytest.raises(StoreError, match="v/3"):  # get_partial_values' own error
            store.get_partial_values(batch)
    finally:
        proxy.stop()
        upstream.stop()


def test_transient_failures_are_retried_as_in_get_partial_values(files):
    upstream = RangeHTTPServer(files)
    try:
        store = FsspecStore.from_url(f"{upstream.url}/root")
        upstream.fail(2)  # two 503s: the store sends those requests again
        assert streamed(store, [(f"v/{i}", None) for i in range(6)], in_flight=2) == [
            VALUES[f"v/{i}"] for i in range(6)
        ]
    finally:
        upstream.stop()


# ---- zero copies ------------------------------------------------------------------------------
def test_obstore_values_are_views_that_outlive_the_stream(latency):
    store = ObstoreStore(f"{latency.url}/root")
    values = dict(store.stream_partial_values([("v/3", None), ("v/4", ByteRange(2, 5))]))
    many = store.get_many(["v/5", "gone"])
    del store
    gc.collect()
    assert all(isinstance(v, memoryview) and v.readonly for v in values.values())
    assert (bytes(values[0]), bytes(values[1])) == (VALUES["v/3"], VALUES["v/4"][2:7])
    # get_many gives bytes: documents are parsed from it (json.loads takes no memoryview)
    assert many == [VALUES["v/5"], None]


def test_fsspec_http_connections_follow_requests_in_flight(latency):
    store = FsspecStore.from_url(
        f"{latency.url}/root", storage_options={"zarr3": {"requests_in_flight": 300}}
    )
    store.get("v/0")  # opens the session
    session = fsspec.asyn.sync(store.fs.loop, store.fs.set_session)
    assert session.connector.limit == 300


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_a_server_that_is_gone_raises_unreachable_for_the_stream(kind):
    store = http_store(
        kind, f"http://127.0.0.1:{free_port()}/root", storage_options={"zarr3": {"retries": 0}}
    )
    with pytest.raises(StoreUnreachableError, match=r"127\.0\.0\.1"):
        streamed(store, [(f"v/{i}", None) for i in range(20)], in_flight=4)


def test_obstore_stream_reads_bodies_only_as_the_consumer_makes_room(latency, monkeypatch):
    """Every request goes out at once, but a body is read only while the bodies landed and not
    yet taken stay within ``window_bytes``: memory holds a window, not the whole batch."""
    from zarr3_backend.stores import _aio, obstore_store

    peaks: list[int] = []

    class Watched(_aio.ByteGate):
        def _take(self, call, nbytes):
            super()._take(call, nbytes)
            peaks.append(self.held)

    monkeypatch.setattr(obstore_store, "ByteGate", Watched)
    store = ObstoreStore(f"{latency.url}/root")
    keys = [f"v/{i}" for i in range(12)]
    budget = 1000  # about two values (each is 100-507 bytes): half the window
    got = {}
    latency.reset()
    with settings.using(window_bytes=2 * budget):
        for i, value in store.stream_partial_values([(k, None) for k in keys]):
            time.sleep(0.02)  # a slow consumer: bodies must wait for it
            got[i] = bytes(value)
    assert got == {i: VALUES[k] for i, k in enumerate(keys)}
    assert latency.stats()["peak_in_flight"] >= 6  # the requests still went out together
    biggest = max(len(v) for v in VALUES.values())
    assert len(peaks) == 12 and max(peaks) <= budget + biggest
