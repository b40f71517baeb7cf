"""A static HTTP server on 127.0.0.1 that adds a fixed latency to every request and counts them.

It stands in for object storage, where latency rather than the CPU sets the pace. Each request
waits ``latency`` seconds before it is answered, in an ``asyncio.sleep`` that holds no lock, so
requests overlap as they would against a real store. It serves a directory: HEAD, GET (with
``Range: bytes=a-b``, ``bytes=a-`` and ``bytes=-n``; 206 with ``Content-Range``, 416 past the
end), an HTML listing of a directory's links (what fsspec's HTTP filesystem parses) and a
WebDAV ``PROPFIND`` listing (what obstore's HTTPStore sends).

The server is a test instrument on the same cores as the clients it measures, so it is written
to cost little: a plain ``asyncio.Protocol`` with hand-written HTTP/1.1 parsing of just what
those clients send (a request line, headers, keep-alive; no request bodies beyond a
``Content-Length`` that is read and dropped), and file bodies sent with ``loop.sendfile``
(``os.sendfile``: no copy through Python). Serving workload A (513 requests, 140 MB) took the
aiohttp server this replaced 0.20-0.27 s of CPU and takes this one 0.09-0.12 s, on the same 2
cores as the client (whose own CPU for A is 0.4-0.6 s).

The traffic since the last reset (requests, bytes sent, peak requests in flight, round trips,
the server's own CPU seconds) is read and reset over ``/_admin/stats`` and ``/_admin/reset``;
those two are neither delayed nor counted. Run it as ``python -m benchmarks.latency_server ROOT
--latency-ms 20``: it prints ``LISTENING <port>`` and stops itself when the process that
started it is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import email.utils
import functools
import html
import io
import json
import os
import posixpath
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
ADMIN = "/_admin/"
READY = "LISTENING "
#: Bodies up to this size are read and written with their headers in one send; larger ones go
#: by ``loop.sendfile``, whose set-up costs more than a small copy.
SMALL_BODY = 64 * 1024
#: A request head larger than this is refused (431) and its connection closed.
MAX_HEAD = 64 * 1024
REASONS = {
    200: "OK",
    206: "Partial Content",
    207: "Multi-Status",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    416: "Range Not Satisfiable",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
}


def round_trips(intervals: Sequence[tuple[float, float]]) -> int:
    """Sequential phases in a request log: the number of maximal groups of overlapping
    ``(start, end)`` intervals (a request that starts after every earlier one ended opens a new
    round trip)."""
    count, end = 0, float("-inf")
    for start, stop in sorted(intervals):
        if start > end:
            count += 1
            end = stop
        else:
            end = max(end, stop)
    return count


@dataclass
class Traffic:
    """What the server sent since the last reset; one event loop updates it (no lock needed)."""

    requests: int = 0
    bytes_sent: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    cpu_start: float = field(default_factory=time.process_time)  # this process's user+sys CPU s
    log: list[tuple[float, float, str, str, int, int]] = field(default_factory=list)

    def summary(self) -> dict:
        """Counts, round trips, the server's CPU seconds and the log (start, end, method, path,
        status, bytes)."""
        return {
            "requests": self.requests,
            "cpu_s": time.process_time() - self.cpu_start,
            "bytes_sent": self.bytes_sent,
            "peak_in_flight": self.peak_in_flight,
            "round_trips": round_trips([(e[0], e[1]) for e in self.log]),
            "by_method": {m: sum(1 for e in self.log if e[2] == m) for m in sorted({e[2] for e in self.log})},
            "log": self.log,
        }


def _listing(directory: Path, url_path: str) -> str:
    """An HTML page linking every entry of ``directory`` (directories end in ``/``)."""
    base = url_path if url_path.endswith("/") else url_path + "/"
    links = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name + ("/" if entry.is_dir() else "")
        href = html.escape(base + urllib.parse.quote(name))
        links.append(f'<a href="{href}">{html.escape(name)}</a><br>')
    return "<html><body>\n" + "\n".join(links) + "\n</body></html>\n"


def _dav_entry(path: Path, href: str) -> str:
    st = path.stat()
    modified = _http_date(st.st_mtime)
    if stat.S_ISDIR(st.st_mode):
        kind, size = "<resourcetype><collection/></resourcetype>", ""
    else:
        kind, size = "<resourcetype/>", f"<getcontentlength>{st.st_size}</getcontentlength>"
    return (
        f"<response><href>{html.escape(href)}</href><propstat><prop>"
        f"<getlastmodified>{modified}</getlastmodified>{size}{kind}"
        "</prop><status>HTTP/1.1 200 OK</status></propstat></response>"
    )


def _propfind(target: Path, url_path: str, depth: str) -> str:
    """A WebDAV multistatus document for ``target`` and (``Depth: 1``) its entries."""
    entries = [_dav_entry(target, url_path)]
    if target.is_dir() and depth != "0":
        base = url_path if url_path.endswith("/") else url_path + "/"
        for entry in sorted(os.scandir(target), key=lambda e: e.name):
            suffix = "/" if entry.is_dir() else ""
            entries.append(_dav_entry(Path(entry.path), base + urllib.parse.quote(entry.name) + suffix))
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<multistatus xmlns="DAV:">'
        + "".join(entries)
        + "</multistatus>"
    )


@functools.lru_cache(maxsize=4096)
def _http_date(timestamp: float) -> str:
    """``timestamp`` as an HTTP date (cached: a store's files share few modification times)."""
    return email.utils.formatdate(timestamp, usegmt=True)


class Unsatisfiable(ValueError):
    """A Range header this server cannot answer with one part (past the end, reversed, several
    ranges, not ``bytes=``): answered 416."""


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, stop)`` of the one range ``header`` asks for in a ``size``-byte file (``bytes=a-b``,
    ``bytes=a-``, ``bytes=-n``; ``stop`` clipped to ``size``), or None with no header."""
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    first, dash, last = spec.strip().partition("-")
    if unit.strip().lower() != "bytes" or not dash or "," in spec:
        raise Unsatisfiable(header)
    try:
        if not first:  # a suffix: the last n bytes
            n = int(last)
            start, stop = max(size - n, 0), size
            if n <= 0:
                raise Unsatisfiable(header)
        else:
            start = int(first)
            stop = size if not last else min(int(last) + 1, size)
    except ValueError as e:
        raise Unsatisfiable(header) from e
    if start < 0 or start >= size or stop <= start:
        raise Unsatisfiable(header)
    return start, stop


@dataclass(frozen=True)
class Request:
    """One parsed request head: method, decoded path, lower-cased headers, keep-alive, arrival."""

    method: str
    path: str
    headers: dict[str, str]
    keep_alive: bool
    arrived: float


def parse_head(head: bytes, arrived: float) -> Request:
    """A request line and its headers (``head`` without the blank line that ends it).

    By hand: a test instrument parses only what its clients send; aiohttp's per-request cost is
    what this module exists to measure away. Raises ValueError on a malformed request line."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
    path = urllib.parse.unquote(urllib.parse.urlsplit(target).path)
    return Request(method, path, headers, keep, arrived)


class LatencyServer:
    """Files under ``root``, each request answered ``latency`` s after it arrived, and counted."""

    def __init__(self, root: str | os.PathLike, latency: float) -> None:
        self.root = str(Path(root).resolve())
        self.latency = latency
        self.traffic = Traffic()
        self._date = (0, "")

    def protocol(self) -> _Connection:
        """A protocol instance for one new connection (``loop.create_server``'s factory)."""
        return _Connection(self)

    def target(self, url_path: str) -> str | None:
        """The file system path a decoded URL path names, or None outside the root."""
        if "\x00" in url_path or "\\" in url_path:
            return None
        if any(part == ".." for part in url_path.split("/")):
            return None
        rel = posixpath.normpath("/" + url_path).lstrip("/")
        return self.root if rel in ("", ".") else posixpath.join(self.root, rel)

    def date(self) -> str:
        """Now as an HTTP date, made once a second."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, email.utils.formatdate(now, usegmt=True))
        return self._date[1]

    def head(self, status: int, headers: list[tuple[str, str]], keep_alive: bool) -> bytes:
        """A response's status line and headers."""
        lines = [f"HTTP/1.1 {status} {REASONS[status]}", *(f"{k}: {v}" for k, v in headers)]
        lines += [f"Date: {self.date()}", "Server: benchmarks.latency_server"]
        if not keep_alive:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def admin(self, request: Request) -> tuple[int, bytes] | None:
        """The answer to an admin request (status, JSON body), or None when it is not one."""
        if request.method == "GET" and request.path == ADMIN + "stats":
            return 200, json.dumps(self.traffic.summary()).encode()
        if request.method == "POST" and request.path == ADMIN + "reset":
            # requests still in flight finish on the old counters: the new ones start at zero
            self.traffic = Traffic()
            return 200, b'{"ok": true}'
        return None

    async def answer(self, request: Request, transport: asyncio.Transport) -> None:
        """Wait out the latency, then answer; logs start, end, status and body bytes."""
        traffic = self.traffic  # a reset during this request starts a new count
        traffic.requests += 1
        traffic.in_flight += 1
        traffic.peak_in_flight = max(traffic.peak_in_flight, traffic.in_flight)
        status, nbytes = 499, 0  # 499: the client went away before its answer
        try:
            delay = request.arrived + self.latency - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if not transport.is_closing():
                status, nbytes = await self._respond(request, transport)
        except (OSError, RuntimeError):  # the client closed the socket while we sent, or the
            transport.close()  # file went away: the connection ends, the log keeps the request
        finally:
            traffic.in_flight -= 1
            traffic.bytes_sent += nbytes
            traffic.log.append(
                (request.arrived, time.monotonic(), request.method, request.path, status, nbytes)
            )

    def send(
        self,
        transport: asyncio.Transport,
        request: Request,
        status: int,
        body: bytes,
        content_type: str,
        extra: list[tuple[str, str]] | None = None,
    ) -> tuple[int, int]:
        """Write a whole answer held in memory (no body for HEAD); (status, body bytes sent)."""
        headers = [*(extra or []), ("Content-Type", content_type), ("Content-Length", str(len(body)))]
        head = self.head(status, headers, request.keep_alive)
        sent = b"" if request.method == "HEAD" else body
        transport.write(head + sent)
        return status, len(sent)

    async def _respond(self, request: Request, transport: asyncio.Transport) -> tuple[int, int]:
        """Send the answer; (status, body bytes sent)."""
        target = self.target(request.path)
        text = "text/plain; charset=utf-8"
        if target is None:
            return self.send(transport, request, 404, b"not found", text)
        if request.method == "PROPFIND":
            if not os.path.exists(target):
                return self.send(transport, request, 404, b"not found", text)
            body = _propfind(Path(target), request.path, request.headers.get("depth", "1")).encode()
            return self.send(transport, request, 207, body, "application/xml; charset=utf-8")
        if request.method not in ("GET", "HEAD"):
            status = 405 if os.path.exists(target) else 404
            return self.send(
                transport, request, status, b"read-only" if status == 405 else b"not found", text
            )
        try:
            f = open(target, "rb", buffering=0)  # closed by the with below, after sendfile
        except IsADirectoryError:
            body = _listing(Path(target), request.path).encode()
            return self.send(transport, request, 200, body, "text/html; charset=utf-8")
        except OSError:  # missing, a path through a file, unreadable
            return self.send(transport, request, 404, b"not found", text)
        with f:
            return await self._send_file(transport, request, f, os.fstat(f.fileno()))

    async def _send_file(
        self, transport: asyncio.Transport, request: Request, f: io.FileIO, st: os.stat_result
    ) -> tuple[int, int]:
        """The file, or the one byte range asked for (206; 416 past the end); small bodies are
        written with their headers, larger ones by ``loop.sendfile``."""
        size = st.st_size
        headers = [("Accept-Ranges", "bytes"), ("Last-Modified", _http_date(st.st_mtime))]
        try:
            rng = byte_range(request.headers.get("range"), size)
        except Unsatisfiable:
            extra = [("Content-Range", f"bytes */{size}")]
            return self.send(transport, request, 416, b"", "text/plain; charset=utf-8", extra)
        status, (start, stop) = (200, (0, size)) if rng is None else (206, rng)
        if status == 206:
            headers.append(("Content-Range", f"bytes {start}-{stop - 1}/{size}"))
        count = stop - start
        headers += [("Content-Type", "application/octet-stream"), ("Content-Length", str(count))]
        head = self.head(status, headers, request.keep_alive)
        if request.method == "HEAD":
            transport.write(head)
            return status, 0
        if count <= SMALL_BODY:
            transport.write(head + os.pread(f.fileno(), count, start))
            return status, count
        transport.write(head)
        sent = await asyncio.get_running_loop().sendfile(transport, f, start, count)
        return status, sent


class _Connection(asyncio.Protocol):
    """One client connection: parses request heads as they arrive and answers them in order
    (each ``latency`` after its own arrival, so pipelined requests wait together)."""

    def __init__(self, server: LatencyServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.pending: collections.deque[Request] = collections.deque()
        self.worker: asyncio.Task | None = None
        self.transport: asyncio.Transport | None = None
        self.discard = 0  # request body bytes still to drop
        self.closing = False  # no further requests are read (Connection: close, a bad head)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.buffer += data
        self._take_requests(time.monotonic())
        if self.pending and self.worker is None:
            self.worker = asyncio.get_running_loop().create_task(self._work())
        elif self.closing and self.worker is None:
            self.transport.close()

    def _take_requests(self, arrived: float) -> None:
        """Parse every complete request head in the buffer; queue it (an admin request with
        nothing before it is answered at once: neither delayed nor counted)."""
        while not self.closing:
            if self.discard:
                dropped = min(self.discard, len(self.buffer))
                del self.buffer[:dropped]
                self.discard -= dropped
                if self.discard:
                    return
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self._refuse(431)
                return
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            try:
                request = parse_head(head, arrived)
                self.discard = int(request.headers.get("content-length", "0"))
                if self.discard < 0:
                    raise ValueError("negative Content-Length")
            except ValueError:
                self._refuse(400)
                return
            if "transfer-encoding" in request.headers:  # no client of this server sends a body
                self._refuse(501)
                return
            answer = self.server.admin(request)
            if answer is not None and not self.pending and self.worker is None:
                self.server.send(self.transport, request, answer[0], answer[1], "application/json")
            else:
                self.pending.append(request)
            if not request.keep_alive:
                self.closing = True

    def _refuse(self, status: int) -> None:
        request = Request("GET", "", {}, False, time.monotonic())
        self.closing = True
        if not self.pending and self.worker is None:
            self.server.send(self.transport, request, status, REASONS[status].encode(), "text/plain")
            self.transport.close()

    async def _work(self) -> None:
        while self.pending:
            request = self.pending.popleft()
            answer = self.server.admin(request)
            if answer is not None:
                self.server.send(self.transport, request, answer[0], answer[1], "application/json")
            else:
                await self.server.answer(request, self.transport)
        self.worker = None
        if self.closing:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True  # a sleeping request still counts; its answer is skipped


async def _watch_parent(parent: int) -> None:
    """Exit once the process that started the server is gone."""
    while True:
        await asyncio.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


async def serve_forever(root: str, latency: float, port: int, parent: int | None) -> None:
    """Run the server; announce the port on stdout."""
    server = LatencyServer(root, latency)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(server.protocol, HOST, port, backlog=1024)
    bound = listener.sockets[0].getsockname()[1]
    print(READY + str(bound), flush=True)
    if parent is not None:
        await _watch_parent(parent)
    else:
        await asyncio.Event().wait()


class ServerProcess:
    """A latency server in a child process: its URL and its traffic counters."""

    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc = proc
        self.url = f"http://{HOST}:{port}"

    def _admin(self, name: str, method: str) -> dict:
        req = urllib.request.Request(
            self.url + ADMIN + name, method=method, data=b"" if method == "POST" else None
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def reset(self) -> None:
        """Start counting afresh."""
        self._admin("reset", "POST")

    def stats(self) -> dict:
        """Traffic since the last reset (see ``Traffic.summary``)."""
        return self._admin("stats", "GET")


@contextmanager
def running(
    root: str | os.PathLike, latency_ms: float, python: str = sys.executable
) -> Iterator[ServerProcess]:
    """Start a latency server over ``root`` in its own process; stop it on exit."""
    repo = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH", "")]))
    cmd = [python, "-m", "benchmarks.latency_server", str(root), "--latency-ms", str(latency_ms)]
    cmd += ["--parent-pid", str(os.getpid())]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=repo)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith(READY):
            raise RuntimeError(f"latency server did not start (exit {proc.poll()}): {line!r}")
        yield ServerProcess(proc, int(line[len(READY) :]))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency_server", description=__doc__)
    p.add_argument("root", help="directory to serve")
    p.add_argument("--latency-ms", type=float, default=20.0, help="delay added to every request")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    args = p.parse_args(argv)
    asyncio.run(serve_forever(args.root, args.latency_ms / 1000, args.port, args.parent_pid))


if __name__ == "__main__":
    main()
