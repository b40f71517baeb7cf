"""A server, proxy or CDN that answers wrongly but plausibly: another byte range than asked, a
body cut short, an HTML page with status 200, a gzip Content-Encoding, a 304 to a plain GET.
A read returns the stored values or a typed error naming the key, on every remote store kind
(fsspec HTTP, obstore HTTP; fsspec and obstore S3 where it applies), through ``open_array``,
``xr.open_dataset`` and a dask read. The wrong answers come from ``servers.Proxy.rewrite``."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest
import xarray as xr
from sample_data import UNGUARDED_SHARDS
from servers import MotoS3, Proxy, RangeHTTPServer, Request, Response, s3_options

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.errors import MetadataError, StoreError
from zarr3_backend.stores import make_store
from zarr3_backend.stores.fsspec_errors import ResponseMismatchError
from zarr3_backend.stores.range_answers import range_answer_problem, undo_content_encoding

DATA = np.arange(256, dtype="i4")
BACKENDS = ("fsspec", "obstore")


def suffix(r: Request) -> bool:
    return bool(r.range) and r.range.startswith("bytes=-")


def bounded(r: Request) -> bool:
    return bool(r.range) and re.fullmatch(r"bytes=\d+-\d+", r.range) is not None


def ranged(r: Request) -> bool:
    return bool(r.range)


def chunks(r: Request) -> bool:
    return "/c/" in r.path


def documents(r: Request) -> bool:
    return r.path.endswith("zarr.json")


RANGES = {"suffix": suffix, "bounded": bounded}


def _window(resp: Response) -> tuple[int, int, int]:
    first, last, total = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", resp.header("Content-Range")).groups()
    return int(first), int(last) + 1, int(total)


def shifted(whole_of, by: int = 16):
    """206 answers moved ``by`` bytes (the same length, another offset), Content-Range honest."""

    def rewrite(req: Request, resp: Response) -> Response:
        if resp.status != 206:
            return resp
        first, stop, total = _window(resp)
        k = by if first >= by else -by
        resp.body = whole_of(req)[first - k : stop - k]
        resp.set_header("Content-Range", f"bytes {first - k}-{stop - k - 1}/{total}")
        return resp

    return rewrite


def cut_short(req: Request, resp: Response) -> Response:
    """206 answers 4 bytes shorter than asked, inside the value (Content-Range says so)."""
    if resp.status == 206:
        first, stop, total = _window(resp)
        resp.body = resp.body[:-4]
        resp.set_header("Content-Range", f"bytes {first}-{stop - 5}/{total}")
    return resp


def whole_value(whole_of):
    """200 with the whole value, as from a server that ignores Range."""

    def rewrite(req: Request, resp: Response) -> Response:
        if resp.status == 206:
            resp.status, resp.reason, resp.body = 200, "OK", whole_of(req)
            resp.set_header("Content-Range", None)
        return resp

    return rewrite


def refused(req: Request, resp: Response) -> Response:
    """416 to every range, however valid."""
    resp.status, resp.reason, resp.body = 416, "Range Not Satisfiable", b""
    resp.set_header("Content-Range", "bytes */1")
    return resp


def closed_early(chunked: bool):
    """The body stops half way and the connection closes (declared length, or chunked)."""

    def rewrite(req: Request, resp: Response) -> Response:
        resp.chunked = chunked
        resp.close_after = max(len(resp.body) // 2, 1)
        return resp

    return rewrite


def status_200(body: bytes, content_type: str):
    def rewrite(req: Request, resp: Response) -> Response:
        resp.status, resp.reason, resp.body = 200, "OK", body
        resp.set_header("Content-Range", None)
        resp.set_header("Content-Type", content_type)
        return resp

    return rewrite


def gzipped(whole_of):
    """The whole value, gzip-compressed with ``Content-Encoding: gzip`` (a CDN compressing)."""

    whole = whole_value(whole_of)

    def rewrite(req: Request, resp: Response) -> Response:
        resp = whole(req, resp)
        resp.body = gzip.compress(resp.body, mtime=0)
        resp.set_header("Content-Encoding", "gzip")
        return resp

    return rewrite


def not_modified(req: Request, resp: Response) -> Response:
    resp.status, resp.reason, resp.body = 304, "Not Modified", b""
    resp.set_header("Content-Range", None)
    return resp


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Arrays without checksums on their chunks, served over HTTP behind a rewriting proxy."""
    root = tmp_path_factory.mktemp("www")
    g = z3.open_group(root / "d.zarr", mode="w")
    common = {"shape": (256,), "dtype": "i4", "dimension_names": ("x",)}
    g.create_array("raw", chunks=(64,), compressors=None, **common)[...] = DATA
    g.create_array("sh", chunks=(16,), shards=(128,), compressors=None, **common)[...] = DATA
    z3.create_array(g.store, path="shn", chunks=(128,), codecs=UNGUARDED_SHARDS, **common)[...] = DATA
    z3.consolidate_metadata(root / "d.zarr")  # obstore cannot list a plain web server
    server = RangeHTTPServer(root)
    proxy = Proxy(server.url)
    yield root, proxy
    proxy.stop()
    server.stop()


@pytest.fixture
def proxy(site) -> Proxy:
    _, proxy = site
    proxy.clear_rewrites()
    proxy.log.clear()
    return proxy


@pytest.fixture
def whole_of(site):
    root, _ = site
    return lambda req: (root / req.path.lstrip("/")).read_bytes()


def options(backend: str, retries: int = 0) -> dict:
    """No retries (by default), and shards read by their index first, then ranges (never whole)."""
    return {"zarr3": {"backend": backend, "retries": retries, "round_trip_bytes": 0}}


def read(proxy: Proxy, backend: str, name: str, how: str = "array", sel=slice(5, 20)) -> np.ndarray:
    url = f"{proxy.endpoint}/d.zarr"
    if how == "array":
        return z3.open_array(url, name, storage_options=options(backend))[sel]
    chunks = {} if how == "dask" else None
    ds = xr.open_dataset(url, engine="zarr3", chunks=chunks, storage_options=options(backend))
    return ds[name][sel].compute().values


def rewritten(proxy: Proxy) -> int:
    """Requests the proxy answered with a status of its rewrite (not the server's own)."""
    return sum(1 for r in proxy.log.snapshot() if r.status is not None)


# ---- 1. range answers that do not match the request --------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", ["suffix", "bounded"])
@pytest.mark.parametrize("name", ["sh", "shn"])
def test_a_206_naming_another_range_is_refused_naming_the_shard(proxy, whole_of, backend, target, name):
    """Bytes of the right length from another offset decode to wrong values when nothing guards
    them (inner chunks; an index without crc32c): the store refuses the answer by its
    Content-Range. Over fsspec HTTP this read wrong values silently."""
    proxy.rewrite(shifted(whole_of), match=RANGES[target])
    with pytest.raises(ResponseMismatchError, match=rf"{name}/c/0.*206 answer names bytes"):
        read(proxy, backend, name)
    proxy.clear_rewrites()
    np.testing.assert_array_equal(read(proxy, backend, name), DATA[5:20])  # nothing left wedged


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["xarray", "dask"])
def test_xarray_and_dask_reads_refuse_another_range_too(proxy, whole_of, backend, how):
    proxy.rewrite(shifted(whole_of), match=bounded)
    with pytest.raises(ResponseMismatchError, match="sh/c/0"):
        read(proxy, backend, "sh", how)
    proxy.clear_rewrites()
    np.testing.assert_array_equal(read(proxy, backend, "sh", how), DATA[5:20])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", ["suffix", "bounded"])
def test_a_206_shorter_than_asked_inside_the_value_is_refused(proxy, backend, target):
    """Not the end of the value (the Content-Range's length says so): a transport failure,
    not a shard that is truncated."""
    proxy.rewrite(cut_short, match=RANGES[target])
    with pytest.raises(ResponseMismatchError, match=r"sh/c/0.*206 answer names bytes"):
        read(proxy, backend, "sh")


def test_a_206_to_a_get_of_the_whole_value_is_refused(proxy, whole_of):
    """A whole chunk asked for (fsspec: ``bytes=0-``) and answered with another part of it.
    Not obstore: to a GET with no Range object_store reports any answer as the whole value
    (its status and Content-Range are not exposed), and a 206 there breaks HTTP itself."""
    backend = "fsspec"

    def partial(req: Request, resp: Response) -> Response:
        whole = whole_of(req) + b"\0" * 16
        resp.status, resp.reason, resp.body = 206, "Partial Content", whole[16:]
        resp.set_header("Content-Range", f"bytes 16-{len(whole) - 1}/{len(whole)}")
        return resp

    proxy.rewrite(partial, match=lambda r: chunks(r) and r.range in (None, "bytes=0-"))
    with pytest.raises(ResponseMismatchError, match=r"raw/c/\d.*names bytes \[16, "):
        read(proxy, backend, "raw", sel=slice(None))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", ["suffix", "bounded"])
def test_a_200_with_the_whole_value_gives_the_range_asked_for(proxy, whole_of, backend, target):
    proxy.rewrite(whole_value(whole_of), match=RANGES[target])
    np.testing.assert_array_equal(read(proxy, backend, "shn"), DATA[5:20])
    assert any(r.status == 200 and RANGES[target](r) for r in proxy.log.snapshot())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_416_for_a_range_inside_the_value_is_refused_and_a_real_one_reads_empty(proxy, backend):
    """obstore read a 416 as "the range starts past the end": an empty value, then a truncated
    shard. The value's size now tells a broken answer from a range past the end."""
    proxy.rewrite(refused, match=lambda r: ranged(r) and chunks(r))
    with pytest.raises(ResponseMismatchError, match=r"sh/c/0.*HTTP 416 for .* of a value of \d+ bytes"):
        read(proxy, backend, "sh")
    proxy.clear_rewrites()
    store = make_store(f"{proxy.endpoint}/d.zarr", storage_options=options(backend))
    assert store.get("sh/c/0", ByteRange(10_000, 4)) == b""  # past the end: empty, as ByteRange says
    assert store.get("sh/c/0", ByteRange(4, 8)) == DATA[1:3].tobytes()


# ---- 2. bodies cut short --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("name", ["raw", "sh"], ids=["whole-chunks", "ranges"])
def test_a_body_cut_short_is_a_store_error_naming_the_key(proxy, backend, chunked, name):
    proxy.rewrite(closed_early(chunked), match=chunks)
    with pytest.raises(StoreError, match=rf"{name}/c/\d"):
        read(proxy, backend, name, sel=slice(None))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_whole_chunked_answer_reads_or_says_which_backend_can(proxy, backend):
    """obstore's HTTP store reads no answer without a Content-Length (chunked transfer
    encoding): a typed error that names the key and the way out."""

    def chunked(req: Request, resp: Response) -> Response:
        resp.chunked = True
        return resp

    proxy.rewrite(chunked, match=chunks)
    if backend == "fsspec":
        np.testing.assert_array_equal(read(proxy, backend, "raw", sel=slice(None)), DATA)
        return
    with pytest.raises(StoreError, match=r"raw/c/\d.*no Content-Length.*'backend': 'fsspec'"):
        read(proxy, backend, "raw", sel=slice(None))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_body_longer_than_its_content_length_reads_right_or_fails_typed(proxy, backend):
    def longer(req: Request, resp: Response) -> Response:
        resp.content_length, resp.body = len(resp.body), resp.body + b"\0" * 8
        return resp

    proxy.rewrite(longer, match=chunks)
    try:
        got = read(proxy, backend, "raw", sel=slice(None))
    except StoreError as e:  # aiohttp: "Data after Connection: close"
        assert re.search(r"raw/c/\d", str(e))
    else:  # obstore reads the declared length
        np.testing.assert_array_equal(got, DATA)


# ---- 3. metadata answers that are wrong but parse -------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "body, content_type",
    [(b"<!DOCTYPE html><html><body>Service unavailable</body></html>", "text/html"), (b"", "text/plain")],
    ids=["html-page", "empty"],
)
def test_zarr_json_answered_200_with_a_page_is_a_metadata_error(proxy, backend, body, content_type):
    proxy.rewrite(status_200(body, content_type), match=documents)
    with pytest.raises(MetadataError, match=r"raw/zarr\.json: invalid JSON"):
        read(proxy, backend, "raw")
    with pytest.raises(MetadataError, match=r"zarr\.json: invalid JSON"):
        read(proxy, backend, "raw", "xarray")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["array", "xarray", "dask"])
def test_a_gzip_content_encoding_is_undone(proxy, whole_of, backend, how):
    """obstore handed the compressed body on: zarr.json failed to parse, chunks to decode."""
    proxy.rewrite(gzipped(whole_of))
    np.testing.assert_array_equal(read(proxy, backend, "raw", how, sel=slice(None)), DATA)
    np.testing.assert_array_equal(read(proxy, backend, "shn", how), DATA[5:20])
    assert all(r.status == 200 for r in proxy.log.snapshot())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("match", [documents, chunks], ids=["zarr.json", "chunks"])
def test_a_304_to_a_get_without_a_condition_is_refused(proxy, backend, match):
    """fsspec HTTP read a 304's empty body as the value."""
    proxy.rewrite(not_modified, match=match)
    with pytest.raises(ResponseMismatchError, match=r"raw/(zarr\.json|c/\d)"):
        read(proxy, backend, "raw", sel=slice(None))


# ---- S3 (moto) --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_site():
    moto = MotoS3().start()
    bucket = moto.create_bucket()
    url = f"s3://{bucket}/d.zarr"
    opts = {**s3_options(moto.endpoint), "zarr3": {"backend": "fsspec"}}
    z3.create_array(
        url,
        path="shn",
        shape=(256,),
        dtype="i4",
        chunks=(128,),
        codecs=UNGUARDED_SHARDS,
        storage_options=opts,
    )[...] = DATA
    clean = make_store(url, storage_options=opts)
    proxy = Proxy(moto.endpoint)
    yield url, proxy, lambda req: clean.get(req.path.split("/d.zarr/", 1)[1])
    proxy.stop()
    moto.stop()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rewrite", ["shifted", "cut_short", "refused"])
def test_s3_range_answers_that_do_not_match_are_refused(s3_site, backend, rewrite):
    """s3fs drops GetObject's ContentRange: another range read wrong values silently."""
    url, proxy, whole_of = s3_site
    proxy.clear_rewrites()
    fn = {"shifted": shifted(whole_of), "cut_short": cut_short, "refused": refused}[rewrite]
    proxy.rewrite(fn, match=bounded)
    opts = {**s3_options(proxy.endpoint, attempts=1), **options(backend)}
    a = z3.open_array(url, "shn", mode="r", storage_options=opts)
    with pytest.raises(ResponseMismatchError, match="shn/c/0"):
        a[5:20]
    proxy.clear_rewrites()
    np.testing.assert_array_equal(a[5:20], DATA[5:20])


@pytest.mark.parametrize("backend", BACKENDS)
def test_s3_gzip_content_encoding_is_undone(s3_site, backend):
    """An object answered with ``Content-Encoding: gzip`` (uploaded gzipped, or a proxy
    compressing): botocore leaves it to its caller, as obstore does."""
    url, proxy, whole_of = s3_site
    proxy.clear_rewrites()
    gzip_it = gzipped(whole_of)

    def rewrite(req: Request, resp: Response) -> Response:
        resp = gzip_it(req, resp)  # an upload's checksum would be of the gzipped bytes: none here
        resp.headers = [(k, v) for k, v in resp.headers if not k.lower().startswith("x-amz-checksum")]
        return resp

    proxy.rewrite(rewrite, match=lambda r: r.method == "GET" and chunks(r))
    opts = {**s3_options(proxy.endpoint, attempts=1), **options(backend)}
    np.testing.assert_array_equal(z3.open_array(url, "shn", mode="r", storage_options=opts)[...], DATA)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_one_off_wrong_answer_is_sent_again_while_retries_last(proxy, whole_of, backend):
    """ResponseMismatchError is transient on fsspec's stores (their retry layer sends the
    request again); obstore's retry layer is obstore's own, which does not: typed at once."""
    proxy.rewrite(shifted(whole_of), match=bounded, times=1)
    a = z3.open_array(f"{proxy.endpoint}/d.zarr", "sh", storage_options=options(backend, retries=2))
    if backend == "fsspec":
        np.testing.assert_array_equal(a[5:20], DATA[5:20])
    else:
        with pytest.raises(ResponseMismatchError, match="sh/c/0"):
            a[5:20]
    assert sum(1 for r in proxy.log.snapshot() if bounded(r)) == (2 if backend == "fsspec" else 1)


# ---- the rule itself ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "start, end, status, content_range, nbytes, wrong",
    [
        (0, 10, 206, "bytes 0-9/100", 10, None),
        (90, 110, 206, "bytes 90-99/100", 10, None),  # clipped at the end: right
        (-10, None, 206, "bytes 90-99/100", 10, None),
        (-200, None, 206, "bytes 0-99/100", 100, None),  # a suffix longer than the value
        (10, None, 206, "bytes 10-99/*", 90, None),
        (10, 20, 206, "bytes 10-14/*", 5, None),  # the length unknown: maybe the value's end
        (10, 20, 206, "bytes 12-21/*", 10, "names bytes"),
        (10, 20, 206, "bytes 10-29/*", 20, "names bytes"),
        (0, 10, 200, None, 100, None),  # the whole value: cut by the store
        (0, 10, 206, "bytes 16-25/100", 10, "names bytes"),
        (0, 10, 206, "bytes 0-5/100", 6, "names bytes"),
        (-10, None, 206, "bytes 80-89/100", 10, "names bytes"),
        (0, 10, 206, "bytes 0-9/100", 8, "body of 8 bytes"),
        (0, 10, 206, None, 10, "not one satisfied byte range"),
        (0, 10, 206, "bytes */100", 0, "not one satisfied byte range"),
        (None, None, 304, None, 0, "HTTP 304"),
        (None, None, 204, None, 0, "HTTP 204"),
    ],
)
def test_range_answer_rule(start, end, status, content_range, nbytes, wrong):
    problem = range_answer_problem(start, end, status, content_range, nbytes)
    assert problem is None if wrong is None else wrong in problem


def test_content_encodings_are_undone_for_whole_values_only():
    value = bytes(range(256)) * 4
    assert undo_content_encoding(gzip.compress(value), "gzip", whole=True) == value
    assert undo_content_encoding(value, None, whole=False) == value
    assert undo_content_encoding(value, "identity", whole=False) == value
    with pytest.raises(ResponseMismatchError, match="range of its encoded form"):
        undo_content_encoding(gzip.compress(value), "gzip", whole=False)
    with pytest.raises(ResponseMismatchError, match="cannot undo"):
        undo_content_encoding(value, "br", whole=True)
    with pytest.raises(ResponseMismatchError, match="does not decode"):
        undo_content_encoding(value, "gzip", whole=True)
