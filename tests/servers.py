"""Real servers on 127.0.0.1 for the object-storage tests (a plain module, not a conftest).

- ``MotoS3``: moto's standalone S3 server in a thread of the test process.
- ``Proxy``: an HTTP proxy in front of any server that logs every request and injects faults
  (5xx answers, denied access, stalls, a server that goes away), so tests can count requests
  and break the network on purpose; ``rewrite`` makes it answer wrongly but plausibly (another
  range, a body cut short, an HTML page with status 200, ...), as a broken CDN would.
- ``RangeHTTPServer``: a static file server honouring ``Range: bytes=a-b``, ``bytes=a-`` and
  ``bytes=-n`` (like an object store's public HTTP endpoint), or ignoring it, with a request log.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import http.server
import json
import logging
import os
import socket
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass
class Request:
    """One request a server saw; logged when it arrives, ``status`` set before the answer is
    sent (so a client that has its answer always finds the request in the log)."""

    method: str
    path: str  # without the query
    query: str
    range: str | None
    status: int | None = None


@dataclass
class RequestLog:
    """A thread-safe list of requests, with in-flight accounting."""

    entries: list[Request] = field(default_factory=list)
    started: int = 0  # requests received, answered or not
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, request: Request) -> Request:
        with self.lock:
            self.entries.append(request)
            self.started += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return request

    def finish(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.started = self.max_in_flight = self.in_flight

    def snapshot(self) -> list[Request]:
        with self.lock:
            return list(self.entries)

    def of(self, method: str) -> list[Request]:
        return [r for r in self.snapshot() if r.method == method]


def _split(raw_path: str) -> tuple[str, str]:
    parsed = urllib.parse.urlsplit(raw_path)
    return urllib.parse.unquote(parsed.path), parsed.query


# ---- moto ---------------------------------------------------------------------------------------
class MotoS3:
    """moto's S3 server on 127.0.0.1 (a free port), in a daemon thread."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
        self.port = 0

    def start(self) -> MotoS3:
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def make_public(self, bucket: str) -> None:
        """Let anyone read and list ``bucket`` (a bucket policy; moto checks HeadObject apart)."""
        statement = {
            "Effect": "Allow",
            "Principal": "*",
            "Action": ["s3:GetObject", "s3:HeadObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
        }
        import botocore.session

        client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        policy = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
        client.put_bucket_policy(Bucket=bucket, Policy=policy)
        client.close()

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name by default) and return its name."""
        name = name or f"z3-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        return name


def s3_options(
    endpoint: str,
    *,
    attempts: int | None = 3,
    connect_timeout: float | None = 2,
    read_timeout: float | None = 10,
    zarr3: dict | None = None,
    anon: bool = False,
) -> dict:
    """s3fs storage_options for a server at ``endpoint`` with dummy credentials (or ``anon``)
    and small, bounded retries and timeouts (botocore's ``total_max_attempts`` counts the first
    try). None leaves a setting out, so the store's defaults apply; ``zarr3`` is the store's
    own settings section."""
    config: dict = {}
    if connect_timeout is not None:
        config["connect_timeout"] = connect_timeout
    if read_timeout is not None:
        config["read_timeout"] = read_timeout
    if attempts is not None:
        config["retries"] = {"total_max_attempts": attempts, "mode": "standard"}
    options: dict = {"anon": True} if anon else {"key": "testing", "secret": "testing"}
    options["client_kwargs"] = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    if config:
        options["config_kwargs"] = config
    if zarr3 is not None:
        options["zarr3"] = zarr3
    return options


# ---- a logging, fault-injecting proxy ----------------------------------------------------------
_S3_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
    "<Resource>{path}</Resource><RequestId>z3test</RequestId></Error>"
)
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
}


@dataclass
class Response:
    """An upstream answer the proxy is about to send, for ``Proxy.rewrite`` to change.

    ``headers`` are the end-to-end ones (no Content-Length, Transfer-Encoding or Connection:
    those follow from the fields below). The body is sent with ``Content-Length:
    content_length`` (None: its length), or with chunked transfer encoding (``chunked``; the
    closing empty chunk only with ``chunked_end``); ``close_after`` sends only that many bytes
    of the body, then closes the connection (a body cut short)."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    content_length: int | None = None
    close_after: int | None = None
    chunked: bool = False
    chunked_end: bool = True

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def set_header(self, name: str, value: str | None) -> None:
        """Replace header ``name`` (None: remove it)."""
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()]
        if value is not None:
            self.headers.append((name, value))


#: ``Proxy.rewrite``'s function: the request and its upstream answer -> the answer to send.
Rewrite = Callable[[Request, Response], Response]


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.1 (so "Expect: 100-continue" is answered) but one request per connection, so a
    # stopped proxy leaves no kept-alive connection behind
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        path, query = _split(self.path)
        body = self._body()
        self.close_connection = True
        request = proxy.log.start(Request(self.command, path, query, self.headers.get("Range")))
        try:
            action = proxy.decide(request)
            if action == "drop":
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if action == "stall":
                proxy.released.wait(proxy.stall_seconds)
                self.close_connection = True
                return
            if isinstance(action, tuple):
                request.status, code = action
                self._send_error(request.status, code, path)
                return
            if proxy.delay:
                proxy.released.wait(proxy.delay)
            self._forward(proxy, body, request)
        finally:
            proxy.log.finish()

    def _send_error(self, status: int, code: str, path: str) -> None:
        payload = _S3_ERROR.format(
            code=code, message=f"injected by the test proxy ({status})", path=path
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _forward(self, proxy: Proxy, body: bytes, request: Request) -> None:
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"expect"}}
            conn.request(self.command, self.path, body=body if body else None, headers=headers)
            upstream = conn.getresponse()
            payload = upstream.read()
            kept = [
                (k, v)
                for k, v in upstream.getheaders()
                if k.lower() not in _HOP_BY_HOP | {"content-length", "date", "server"}
            ]
            length = upstream.getheader("Content-Length") if self.command == "HEAD" else None
            response = Response(
                upstream.status, upstream.reason, kept, payload, None if length is None else int(length)
            )
        finally:
            conn.close()
        response = proxy.rewritten(request, response)
        request.status = response.status
        self._send(response)

    def _send(self, response: Response) -> None:
        self.send_response(response.status, response.reason)
        for k, v in response.headers:
            self.send_header(k, v)
        if response.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            length = len(response.body) if response.content_length is None else response.content_length
            self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        body = response.body if response.close_after is None else response.body[: response.close_after]
        with contextlib.suppress(OSError):  # a client that gave up on a broken answer
            if response.chunked:
                step = 1 << 12
                for start in range(0, len(body), step):
                    part = body[start : start + step]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                if response.chunked_end and response.close_after is None:
                    self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(body)
            self.wfile.flush()
            if response.close_after is not None or not response.chunked_end:
                self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of concurrent clients must not wait on TCP retransmits
    proxy: Proxy


class Proxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` that logs and breaks requests.

    Faults (each applies to requests that ``match`` accepts, default: all):
    ``fail(n, status, code)`` answers the next n with an S3-style error; ``reset(n)`` closes the
    connection of the next n without an answer (a connection reset); ``deny(match)`` answers
    403 AccessDenied; ``stall`` holds requests without answering; ``cut_after(n)`` forwards n
    more requests, then the proxy goes away (connections dropped, new ones refused);
    ``delay`` holds each forwarded request that long first (to make concurrency visible);
    ``rewrite(fn, match, times)`` changes the upstream answers to requests ``match`` accepts.
    """

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self.log = RequestLog()
        self.delay = 0.0
        self.stall_seconds = 0.0
        self.released = threading.Event()  # set on stop: frees stalled and delayed requests
        self._lock = threading.Lock()
        self._fail: list[tuple[Callable[[Request], bool], int, str]] = []
        self._resets: list[Callable[[Request], bool]] = []
        self._deny: Callable[[Request], bool] | None = None
        self._stall: Callable[[Request], bool] | None = None
        self._cut_after: int | None = None
        self._rewrites: list[list] = []  # [match, fn, times left (None: for ever)]
        self._server = _ProxyServer((HOST, 0), _ProxyHandler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._stopped = False

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    # ---- faults --------------------------------------------------------------------------------
    def fail(self, n: int, status: int = 500, code: str = "InternalError", match=None) -> None:
        with self._lock:
            self._fail.extend([(match or (lambda r: True), status, code)] * n)

    def reset(self, n: int, match=None) -> None:
        """Close the connections of the next ``n`` requests ``match`` accepts, unanswered."""
        with self._lock:
            self._resets.extend([match or (lambda r: True)] * n)

    def clear_faults(self) -> None:
        """Drop the ``fail`` and ``reset`` faults not yet used (a read that stopped early)."""
        with self._lock:
            self._fail.clear()
            self._resets.clear()

    def deny(self, match: Callable[[Request], bool]) -> None:
        self._deny = match

    def stall(self, seconds: float, match=None) -> None:
        self.stall_seconds = seconds
        self._stall = match or (lambda r: True)

    def cut_after(self, n: int) -> None:
        with self._lock:
            self._cut_after = n

    def rewrite(
        self, fn: Rewrite, match: Callable[[Request], bool] | None = None, times: int | None = None
    ) -> None:
        """Send ``fn(request, response)`` instead of the upstream answer to the requests that
        ``match`` accepts (default: all), the next ``times`` of them (None: all); the first
        matching rewrite applies."""
        with self._lock:
            self._rewrites.append([match or (lambda r: True), fn, times])

    def clear_rewrites(self) -> None:
        """Forward upstream answers unchanged again."""
        with self._lock:
            self._rewrites.clear()

    def rewritten(self, request: Request, response: Response) -> Response:
        """The answer to send for ``request``: ``response`` through the first matching rewrite."""
        with self._lock:
            for rule in self._rewrites:
                match, fn, times = rule
                if (times is None or times > 0) and match(request):
                    if times is not None:
                        rule[2] = times - 1
                    break
            else:
                return response
        return fn(request, response)

    def decide(self, request: Request) -> str | tuple[int, str] | None:
        """What to do with one request: None (forward), "drop", "stall" or (status, code)."""
        with self._lock:
            if self._stopped:
                return "drop"
            if self._cut_after is not None:
                if self._cut_after <= 0:
                    self._stopped = True
                    threading.Thread(target=self.stop, daemon=True).start()
                    return "drop"
                self._cut_after -= 1
            for i, (match, status, code) in enumerate(self._fail):
                if match(request):
                    del self._fail[i]
                    return (status, code)
            for i, match in enumerate(self._resets):
                if match(request):
                    del self._resets[i]
                    return "drop"
        if self._deny is not None and self._deny(request):
            return (403, "AccessDenied")
        if self._stall is not None and self._stall(request):
            return "stall"
        return None

    def stop(self) -> None:
        """Stop listening (new connections are refused) and release held requests."""
        with self._lock:
            self._stopped = True
        self.released.set()
        with contextlib.suppress(OSError):
            self._server.shutdown()
            self._server.server_close()


# ---- a static HTTP server with Range support ---------------------------------------------------
def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``(start, stop)`` for a single ``bytes=`` range of a ``size``-byte body; None when it
    cannot be satisfied. Raises ValueError for a header this server does not understand."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        raise ValueError(header)
    first, _, last = spec.strip().partition("-")
    if first == "":  # suffix: the last n bytes
        n = int(last)
        return (max(size - n, 0), size) if n > 0 and size > 0 else None
    start = int(first)
    stop = size if last == "" else min(int(last) + 1, size)
    return (start, stop) if start < size and start < stop else None


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    server: _RangeServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _serve(self, send_body: bool) -> None:
        owner = self.server.owner
        path, query = _split(self.path)
        request = owner.log.start(Request(self.command, path, query, self.headers.get("Range")))
        try:
            self._respond(owner, send_body, request)
        finally:
            owner.log.finish()

    def _respond(self, owner: RangeHTTPServer, send_body: bool, request: Request) -> None:
        if owner.take_failure():
            request.status = 503
            self.send_error(503, "injected by the test server")
            return
        local = self.translate_path(self.path)
        if os.path.isdir(local):
            request.status = 200
            (super().do_GET if send_body else super().do_HEAD)()
            return
        if not os.path.isfile(local):
            request.status = 404
            self.send_error(404)
            return
        with open(local, "rb") as f:
            data = f.read()
        status, headers = 200, {}
        header = None if owner.ignore_range else self.headers.get("Range")
        if header:
            try:
                window = parse_range(header, len(data))
            except ValueError:
                window = (0, len(data))  # not understood: ignore the header, like many servers
            else:
                if window is None:
                    request.status = 416
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
                headers["Content-Range"] = f"bytes {window[0]}-{window[1] - 1}/{len(data)}"
            data = data[window[0] : window[1]]
        request.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if send_body:
            self.wfile.write(data)


class _RangeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    owner: RangeHTTPServer


class RangeHTTPServer:
    """Serves ``directory`` read-only on 127.0.0.1 with byte-range support and a request log;
    ``fail(n)`` answers the next n requests with 503. With ``ignore_range`` it behaves like a
    server without range support: every GET is answered 200 with the whole file."""

    def __init__(self, directory: str | os.PathLike[str], *, ignore_range: bool = False) -> None:
        self.ignore_range = ignore_range
        self.log = RequestLog()
        self._failures = 0
        self._lock = threading.Lock()
        handler = functools.partial(_RangeHandler, directory=os.fspath(directory))
        self._server = _RangeServer((HOST, 0), handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def fail(self, n: int) -> None:
        with self._lock:
            self._failures += n

    def clear_faults(self) -> None:
        with self._lock:
            self._failures = 0

    def take_failure(self) -> bool:
        with self._lock:
            if self._failures > 0:
                self._failures -= 1
                return True
            return False

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown()
            self._server.server_close()
