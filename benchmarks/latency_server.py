"""A static HTTP server on 127.0.0.1 that adds a fixed latency to every request and counts them.

It stands in for object storage, where latency rather than the CPU sets the pace. Each request
waits ``latency`` seconds before it is answered, in an ``asyncio.sleep`` that holds no lock, so
requests overlap as they would against a real store. It serves a directory: HEAD, GET (with
``Range: bytes=a-b``, ``bytes=a-`` and ``bytes=-n``, answered by aiohttp's ``FileResponse``),
an HTML listing of a directory's links (what fsspec's HTTP filesystem parses) and a WebDAV
``PROPFIND`` listing (what obstore's HTTPStore sends).

The traffic since the last reset (requests, bytes sent, peak requests in flight, round trips)
is read and reset over ``/_admin/stats`` and ``/_admin/reset``; those two are neither delayed
nor counted. Run it as ``python -m benchmarks.latency_server ROOT --latency-ms 20``: it prints
``LISTENING <port>`` and stops itself when the process that started it is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import html
import json
import os
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
    stat = path.stat()
    modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
    if path.is_dir():
        kind, size = "<resourcetype><collection/></resourcetype>", ""
    else:
        kind, size = "<resourcetype/>", f"<getcontentlength>{stat.st_size}</getcontentlength>"
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


def _file_response(path: Path, request):  # -> aiohttp.web.Response
    """The file, or the byte range the request asks for (206; 416 when it starts past the end).

    By hand rather than aiohttp's ``FileResponse``, which sends only when the handler has
    returned, too late for the log to hold when the answer was complete."""
    from aiohttp import web

    size = path.stat().st_size
    headers = {
        "Accept-Ranges": "bytes",
        "Last-Modified": email.utils.formatdate(path.stat().st_mtime, usegmt=True),
    }
    rng = request.http_range  # parses bytes=a-b, a- and -n into a slice
    status, start, stop = 200, 0, size
    if rng.start is not None or rng.stop is not None:
        start, stop, _ = rng.indices(size)
        if start >= size or stop <= start:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
        status = 206
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
    if request.method == "HEAD":
        return web.Response(status=status, headers={**headers, "Content-Length": str(stop - start)})
    with open(path, "rb") as f:
        f.seek(start)
        body = f.read(stop - start)
    return web.Response(status=status, body=body, headers=headers, content_type="application/octet-stream")


class LatencyServer:
    """The aiohttp application: files under ``root``, each request delayed by ``latency`` s."""

    def __init__(self, root: str | os.PathLike, latency: float) -> None:
        self.root = Path(root).resolve()
        self.latency = latency
        self.traffic = Traffic()

    def app(self):  # -> aiohttp.web.Application (aiohttp is imported only where it runs)
        """The application with the admin and file routes."""
        from aiohttp import web

        app = web.Application()
        app.router.add_get(ADMIN + "stats", self.stats)
        app.router.add_post(ADMIN + "reset", self.reset)
        app.router.add_route("*", "/{tail:.*}", self.serve)
        return app

    async def stats(self, request):
        from aiohttp import web

        return web.json_response(self.traffic.summary())

    async def reset(self, request):
        from aiohttp import web

        self.traffic = Traffic(in_flight=self.traffic.in_flight)
        return web.json_response({"ok": True})

    def _target(self, url_path: str) -> Path | None:
        """The file or directory a URL path names, or None outside the root."""
        rel = urllib.parse.unquote(url_path).lstrip("/")
        target = (self.root / rel).resolve()
        return target if target == self.root or self.root in target.parents else None

    async def serve(self, request):
        """Wait out the latency, then answer; logs start, end, status and body bytes."""
        from aiohttp import web

        traffic = self.traffic  # a reset during this request starts a new count
        traffic.requests += 1
        traffic.in_flight += 1
        traffic.peak_in_flight = max(traffic.peak_in_flight, traffic.in_flight)
        start = time.monotonic()
        status, nbytes = 500, 0
        try:
            await asyncio.sleep(self.latency)
            target = self._target(request.path)
            if target is None or not target.exists():
                resp: web.StreamResponse = web.Response(status=404, text="not found")
            elif request.method == "PROPFIND":
                body = _propfind(target, request.path, request.headers.get("Depth", "1"))
                resp = web.Response(status=207, text=body, content_type="application/xml")
            elif request.method not in ("GET", "HEAD"):
                resp = web.Response(status=405, text="read-only")
            elif target.is_dir():
                resp = web.Response(text=_listing(target, request.path), content_type="text/html")
            else:
                resp = _file_response(target, request)
            await resp.prepare(request)  # sent here, so the log's end time is the answer's
            await resp.write_eof()
            status = resp.status
            nbytes = 0 if request.method == "HEAD" else len(resp.body or b"")
            return resp
        finally:
            traffic.in_flight -= 1
            traffic.bytes_sent += nbytes
            traffic.log.append((start, time.monotonic(), request.method, request.path, status, nbytes))


async def _watch_parent(parent: int) -> None:
    """Exit once the process that started the server is gone."""
    while True:
        await asyncio.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


async def serve_forever(root: str, latency: float, port: int, parent: int | None) -> None:
    """Run the server; announce the port on stdout."""
    from aiohttp import web

    runner = web.AppRunner(LatencyServer(root, latency).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, backlog=1024)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # aiohttp has no public accessor for port 0
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
