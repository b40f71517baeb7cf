"""Review of the transport-integrity checks (hunt12): answers that are right, or tolerable, and
that a read must still take (the right bytes), on fsspec and obstore, HTTP and S3 (moto behind
a rewriting proxy); and one wrong answer that used to be taken (a 200 to a range past the end,
read as the range's bytes). Each finding (F1-F7 in the test names' docstrings) failed on the
code as reviewed."""

from __future__ import annotations

import gzip
import http.server
import os
import re
import threading
import urllib.parse

import numpy as np
import pytest
from sample_data import UNGUARDED_SHARDS
from servers import MotoS3, Proxy, RangeHTTPServer, Request, Response, parse_range, s3_options

import zarr3_backend as z3
from zarr3_backend.byte_range import ByteRange
from zarr3_backend.stores import make_store

DATA = np.arange(256, dtype="i4")
BACKENDS = ("fsspec", "obstore")


def options(backend: str, retries: int = 0) -> dict:
    """No retries; shards read by their index first, then inner ranges (never whole)."""
    return {"zarr3": {"backend": backend, "retries": retries, "round_trip_bytes": 0}}


@pytest.fixture(scope="module")
def s3_site():
    """A sharded array and a plain one in moto, and a proxy in front of moto."""
    moto = MotoS3().start()
    bucket = moto.create_bucket()
    url = f"s3://{bucket}/d.zarr"
    opts = {**s3_options(moto.endpoint), "zarr3": {"backend": "fsspec"}}
    common = {"shape": (256,), "dtype": "i4", "storage_options": opts}
    z3.create_array(url, path="shn", chunks=(128,), codecs=UNGUARDED_SHARDS, **common)[...] = DATA
    z3.create_array(url, path="raw", chunks=(64,), compressors=None, **common)[...] = DATA
    proxy = Proxy(moto.endpoint)
    yield url, proxy
    proxy.stop()
    moto.stop()


@pytest.fixture(scope="module")
def http_root(tmp_path_factory):
    """A directory holding a plain array (consolidated: obstore cannot list a web server)."""
    root = tmp_path_factory.mktemp("www")
    g = z3.open_group(root / "d.zarr", mode="w")
    common = {"shape": (256,), "dtype": "i4", "dimension_names": ("x",)}
    g.create_array("raw", chunks=(64,), compressors=None, **common)[...] = DATA
    z3.create_array(g.store, path="shn", chunks=(128,), codecs=UNGUARDED_SHARDS, **common)[...] = DATA
    z3.consolidate_metadata(root / "d.zarr")
    return root


# ---- F1: S3-compatible stores echoing "Content-Encoding: aws-chunked" ---------------------------
def aws_chunked(req: Request, resp: Response) -> Response:
    """A GET answered with ``Content-Encoding: aws-chunked``: what Ceph RGW (before
    ceph/ceph#64440), NooBaa (noobaa-core#9138), LocalStack (before #12167) and moto (before
    getmoto/moto#9008) answer for an object uploaded by botocore >= 1.36 over HTTPS (a trailing
    checksum: the upload's framing, which S3 strips). The body is the stored value."""
    if req.method == "GET" and resp.status in (200, 206):
        resp.set_header("Content-Encoding", "aws-chunked")
    return resp


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, sel", [("raw", slice(None)), ("shn", slice(5, 20))])
def test_s3_objects_echoing_aws_chunked_read(s3_site, backend, name, sel):
    url, proxy = s3_site
    proxy.clear_rewrites()
    proxy.rewrite(aws_chunked)
    opts = {**s3_options(proxy.endpoint, attempts=1), **options(backend)}
    got = z3.open_array(url, name, mode="r", storage_options=opts)[sel]
    np.testing.assert_array_equal(got, DATA[sel])


@pytest.fixture(scope="module")
def http_proxy(http_root):
    server = RangeHTTPServer(http_root)
    proxy = Proxy(server.url)
    yield proxy
    proxy.stop()
    server.stop()


@pytest.mark.parametrize("backend", ["fsspec", "obstore"])
def test_http_objects_echoing_aws_chunked_read(http_proxy, backend):
    """The same bucket read over its public HTTPS endpoint: aiohttp leaves an encoding it does
    not know alone (fsspec reads); obstore's HTTP store refuses as on S3."""
    http_proxy.clear_rewrites()
    http_proxy.rewrite(aws_chunked)
    a = z3.open_array(f"{http_proxy.endpoint}/d.zarr", "shn", storage_options=options(backend))
    np.testing.assert_array_equal(a[5:20], DATA[5:20])


# ---- F2: GCS serving objects stored gzip-encoded, over fsspec HTTP -------------------------------
class _GcsLikeHandler(http.server.BaseHTTPRequestHandler):
    """Serves files as GCS serves objects stored with ``Content-Encoding: gzip``
    (cloud.google.com/storage/docs/transcoding): to a request accepting gzip, the stored
    (compressed) bytes as they are, with ``Content-Encoding: gzip``, a Range applying to them;
    to any other, decompressive transcoding: the value itself, Range ignored (200), without
    Content-Length (chunked)."""

    protocol_version = "HTTP/1.1"
    directory = ""

    def log_message(self, format, *args):  # quiet
        pass

    def do_GET(self):
        self.close_connection = True
        name = urllib.parse.unquote(self.path.split("?")[0]).lstrip("/")
        local = os.path.join(self.directory, name)
        if not os.path.isfile(local):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(local, "rb") as f:
            value = f.read()
        if "gzip" not in (self.headers.get("Accept-Encoding") or ""):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(value), value))
            return
        stored = gzip.compress(value, mtime=0)
        window = parse_range(self.headers["Range"], len(stored)) if self.headers.get("Range") else None
        self.send_response(200 if window is None else 206)
        self.send_header("Content-Encoding", "gzip")
        if window is not None:
            self.send_header("Content-Range", f"bytes {window[0]}-{window[1] - 1}/{len(stored)}")
            stored = stored[window[0] : window[1]]
        self.send_header("Content-Length", str(len(stored)))
        self.end_headers()
        self.wfile.write(stored)


@pytest.fixture(scope="module")
def gcs_like(http_root):
    handler = type("Handler", (_GcsLikeHandler,), {"directory": str(http_root)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name, sel", [("raw", slice(None)), ("shn", slice(5, 20))])
def test_gcs_gzip_stored_objects_read_over_fsspec_http(gcs_like, name, sel):
    """A whole value is asked as ``bytes=0-`` with aiohttp's ``Accept-Encoding: gzip,
    deflate``: the 206 names all the compressed bytes, aiohttp decodes the body, and the
    decoded length is refused as not the Content-Range's. A range of the compressed form
    cannot be read at all; asked with ``Accept-Encoding: identity`` (as fsspec's own size
    requests are), the server sends the value itself, whole, which the store cuts."""
    a = z3.open_array(f"{gcs_like}/d.zarr", name, storage_options=options("fsspec"))
    np.testing.assert_array_equal(a[sel], DATA[sel])


def test_fsspec_own_cat_file_reads_the_gcs_gzip_whole_value(gcs_like):
    """The contrast: fsspec's HTTP ``_cat_file`` (zarr-python's read; no check) gives the value."""
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)
    assert fs.cat_file(f"{gcs_like}/d.zarr/raw/c/0", start=0) == DATA[:64].tobytes()


# ---- F3: ZarrPythonStore over a server that ignores Range ----------------------------------------
@pytest.fixture(scope="module")
def ignoring_server(http_root):
    server = RangeHTTPServer(http_root, ignore_range=True)
    yield server
    server.stop()


def test_zarr_python_store_over_a_server_ignoring_range_reads(ignoring_server):
    """zarr-python's FsspecStore hands on the whole value a plain static server sends for a
    ranged GET (200). Its size proves it the whole value, and the range cut from it is the
    bytes asked for: FsspecStore and ObstoreStore cut it so; ZarrPythonStore refuses it."""
    zarr_storage = pytest.importorskip("zarr.storage")
    from zarr3_backend.stores import ZarrPythonStore

    store = zarr_storage.FsspecStore.from_url(f"{ignoring_server.url}/d.zarr", read_only=True)
    wrapped = ZarrPythonStore(store, settings={"round_trip_bytes": 0})  # index first, then ranges
    np.testing.assert_array_equal(z3.open_array(wrapped, "shn", mode="r")[5:20], DATA[5:20])
    assert any(r.range and r.status == 200 for r in ignoring_server.log.snapshot())


# ---- F4: a 200 to a range that runs past the end, taken as the range's bytes ---------------------
VALUES = {"empty": b"", "one": b"x", "hundred": bytes(range(100))}
FORMS = [
    None,
    ByteRange(0),
    ByteRange(0, 100),
    ByteRange(0, 1000),
    ByteRange(10, 80),
    ByteRange(90, 20),
    ByteRange(99, 1),
    ByteRange(1, 1),
    ByteRange(10, 100),
    ByteRange(100, 5),
    ByteRange(200, 5),
    ByteRange(50),
    ByteRange(100),
    ByteRange(1000),
    ByteRange(5, 0),
    ByteRange.suffix(1),
    ByteRange.suffix(100),
    ByteRange.suffix(1000),
]


def _check_all_forms(store) -> None:
    """Every form of range of every value, batched and streamed, is what ByteRange says."""
    asked = [(name, r) for name in VALUES for r in FORMS]
    got = store.get_partial_values(asked)
    streamed = dict(store.stream_partial_values(asked))
    wrong = []
    for i, ((name, r), value) in enumerate(zip(asked, got, strict=True)):
        want = VALUES[name] if r is None else r.apply(VALUES[name])
        if value != want or bytes(streamed[i]) != want:
            wrong.append((name, str(r), len(value), len(streamed[i]), len(want)))
    assert not wrong, wrong


@pytest.fixture(scope="module")
def values_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("values")
    for name, value in VALUES.items():
        (root / name).write_bytes(value)
    return root


@pytest.mark.parametrize(
    "backend, ignore_range",
    [
        ("fsspec", False),
        ("obstore", False),
        ("fsspec", True),
        ("obstore", True),
    ],
    ids=["fsspec-ranges", "obstore-ranges", "fsspec-whole-200", "obstore-whole-200"],
)
def test_every_range_form_reads_as_byte_range_says_over_http(values_dir, backend, ignore_range):
    """With a server that ignores Range (``python -m http.server`` does), a bounded range from
    byte ``a > 0`` as long as the value or longer (it runs past the end) gets the whole value,
    which FsspecStore takes as the range's bytes: ``bytes [99, 100)`` of ``b"x"`` reads
    ``b"x"``, ``bytes [10, 110)`` of 100 bytes reads all 100 from byte 0."""
    server = RangeHTTPServer(values_dir, ignore_range=ignore_range)
    try:
        _check_all_forms(make_store(server.url, storage_options=options(backend)))
    finally:
        server.stop()


def test_a_range_past_the_end_from_a_server_ignoring_range_without_sizes_is_cut(http_root):
    """The same with no size to be had (chunked answers, HEAD without Content-Length): the
    value's size is asked, in vain, and the whole value handed on as ``bytes [10, ...)``."""
    server = RangeHTTPServer(http_root, ignore_range=True)
    proxy = Proxy(server.url)
    try:

        def no_sizes(req: Request, resp: Response) -> Response:
            resp.chunked = True
            return resp

        proxy.rewrite(no_sizes)
        store = make_store(f"{proxy.endpoint}/d.zarr", storage_options=options("fsspec"))
        value = (http_root / "d.zarr" / "raw" / "c" / "0").read_bytes()
        assert store.get("raw/c/0", ByteRange(10, 10_000)) == value[10:]
    finally:
        proxy.stop()
        server.stop()


def whole_200(req: Request, resp: Response) -> Response:
    """A ranged GET answered 200 with the whole value, as by an S3-compatible store that
    ignores Range."""
    if req.method == "GET" and req.range and resp.status == 206:
        resp.status, resp.reason, resp.body = 200, "OK", VALUES[req.path.rsplit("/", 1)[1]]
        resp.set_header("Content-Range", None)
    return resp


@pytest.mark.parametrize(
    "backend, ignore_range",
    [
        ("fsspec", False),
        ("obstore", False),
        ("fsspec", True),
        ("obstore", True),
    ],
    ids=["fsspec-ranges", "obstore-ranges", "fsspec-whole-200", "obstore-whole-200"],
)
def test_every_range_form_reads_as_byte_range_says_over_s3(s3_site, backend, ignore_range):
    url, proxy = s3_site
    proxy.clear_rewrites()
    root = url.rsplit("/", 1)[0] + "/forms"
    writer_options = {**s3_options(proxy.endpoint), "zarr3": {"backend": "fsspec"}}
    make_store(root, mode="a", storage_options=writer_options).set_many(VALUES)
    if ignore_range:
        proxy.rewrite(whole_200, match=lambda r: "/forms/" in r.path)
    opts = {**s3_options(proxy.endpoint, attempts=1), **options(backend)}
    _check_all_forms(make_store(root, storage_options=opts))


# ---- F5: a one-off wrong answer on S3 is not sent again --------------------------------------------
def shifted(req: Request, resp: Response) -> Response:
    """A 206 naming another range of the same length: a broken proxy."""
    if resp.status != 206:
        return resp
    cr = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", resp.header("Content-Range") or "")
    first, last, total = (int(x) for x in cr.groups())
    k = 16 if first >= 16 else -16
    resp.set_header("Content-Range", f"bytes {first - k}-{last - k}/{total}")
    return resp


def test_s3_one_off_wrong_answer_is_sent_again_when_botocore_retries(s3_site):
    """ResponseMismatchError is transient ("sent again while retries last"), and one wrong
    answer is sent again on fsspec HTTP. On S3 with botocore's retries configured
    (``config_kwargs["retries"]``, as ``s3_options`` does) the store leaves retrying to
    botocore (``filesystem_retries_itself``), which never sees the check: one wrong answer
    fails the read, where a 503 would have been retried."""
    url, proxy = s3_site
    proxy.clear_rewrites()
    proxy.rewrite(shifted, match=lambda r: bool(r.range) and "/c/" in r.path, times=1)
    opts = {**s3_options(proxy.endpoint, attempts=3), "zarr3": {"backend": "fsspec", "round_trip_bytes": 0}}
    got = z3.open_array(url, "shn", mode="r", storage_options=opts)[5:20]
    np.testing.assert_array_equal(got, DATA[5:20])


# ---- F6: obstore and a Content-Range whose complete length is "*" --------------------------------
@pytest.fixture(scope="module")
def star_proxy(http_root):
    server = RangeHTTPServer(http_root)
    proxy = Proxy(server.url)

    def star(req: Request, resp: Response) -> Response:
        cr = resp.header("Content-Range")
        if resp.status == 206 and cr:
            resp.set_header("Content-Range", re.sub(r"/\d+$", "/*", cr))
        return resp

    proxy.rewrite(star)
    yield proxy
    proxy.stop()
    server.stop()


@pytest.mark.parametrize("backend", ["fsspec", "obstore"])
def test_a_content_range_of_unknown_length_reads(star_proxy, backend):
    """RFC 9110 14.4 allows ``bytes a-b/*``; object_store cannot parse it (a GenericError),
    which ObstoreStore neither reads nor takes as a range it should ask for whole."""
    a = z3.open_array(f"{star_proxy.endpoint}/d.zarr", "shn", storage_options=options(backend))
    np.testing.assert_array_equal(a[5:20], DATA[5:20])


# ---- F7: MinIO's answer to a suffix range of an empty object -------------------------------------
def minio_empty_suffix(req: Request, resp: Response) -> Response:
    """MinIO answers ``bytes=-n`` on an empty object with a 206, an empty body and
    ``Content-Range: bytes 0--1/0`` (minio/minio#20844, closed "working as intended")."""
    if req.method == "GET" and (req.range or "").startswith("bytes=-") and req.path.endswith("/empty"):
        resp.status, resp.reason, resp.body = 206, "Partial Content", b""
        resp.set_header("Content-Range", "bytes 0--1/0")
    return resp


@pytest.mark.parametrize("backend", BACKENDS)
def test_minio_suffix_of_an_empty_object_reads_empty(s3_site, backend):
    url, proxy = s3_site
    proxy.clear_rewrites()
    root = url.rsplit("/", 1)[0] + "/forms"
    writer_options = {**s3_options(proxy.endpoint), "zarr3": {"backend": "fsspec"}}
    make_store(root, mode="a", storage_options=writer_options).set_many(VALUES)
    proxy.rewrite(minio_empty_suffix)
    opts = {**s3_options(proxy.endpoint, attempts=1), **options(backend)}
    assert make_store(root, storage_options=opts).get("empty", ByteRange.suffix(8)) == b""
    assert any(r.status == 206 and r.path.endswith("/empty") for r in proxy.log.snapshot())
