"""Smoke tests of the benchmark suite (``python -m benchmarks``) on a tiny size, for our library.

No timing assertions: only that the runner produces a well-formed table and JSON, that every
result it reports was checked against the source, and that a wrong result is caught.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from benchmarks import adapters, data, envs, latency_server, remote_workloads, run
from benchmarks.config import SIZES, WORKLOADS, WORKLOADS_BY_ID, Case
from benchmarks.report import add_ratios, markdown_table, text_table
from benchmarks.worker import run_case

TINY = SIZES["tiny"]
# the remote group and the remote-write group: own tests
FAST = [w.id for w in WORKLOADS if not w.distributed and w.remote is None and w.latency_ms is None]


def _run(tmp_path, *extra):
    out = tmp_path / "results"
    md = tmp_path / "table.md"
    argv = [
        "--size",
        "tiny",
        "--libs",
        "z3",
        "--repeat",
        "1",
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(out),
        "--markdown",
        str(md),
        "--python",
        "current",
        *extra,
    ]
    report = run.main(argv)
    files = list(out.glob("tiny-*.json"))
    assert len(files) == 1
    return report, json.loads(files[0].read_text()), md.read_text()


def test_suite_runs_every_workload_for_z3(tmp_path, capsys):
    report, on_disk, md = _run(tmp_path, "--inprocess", "--workloads", ",".join(FAST))
    assert on_disk["results"] == json.loads(json.dumps(report["results"]))
    rows = on_disk["results"]
    expected = {
        (w.id, lib) for w in WORKLOADS if w.id in FAST for lib in w.libs if lib in ("z3", "numpy", "file")
    }
    assert {(r["workload"], r["lib"]) for r in rows} == expected
    for r in rows:
        assert r["ok"], r
        assert r["value"] > 0 and len(r["wall_s"]) == 1 and r["cpu_cores"] >= 0
        assert r["best"] >= r["value"] and r["cpu_per_unit"] >= 0
        assert len(r["minor_faults"]) == 1 and r["faults_per_unit"] >= 0
        assert r["unit"] == ("reads/s" if r["workload"].startswith("e_") else "GB/s")
        assert "server_cpu_s" not in r  # no latency server outside the remote group
    meta = on_disk["meta"]
    assert meta["size"] == "tiny" and meta["versions"]["zarr3_backend"] != "not installed"
    assert meta["eviction_check"]["cold_s"] > 0
    printed = capsys.readouterr().out
    for w in FAST:
        assert w in printed and w in md
    assert md.count("\n") == len(rows) + 2  # header, rule, one line per case


def test_subprocess_worker_reports_memory(tmp_path):
    _, on_disk, _ = _run(tmp_path, "--workloads", "c_read_raw_cold", "--no-reference")
    (row,) = on_disk["results"]
    assert row["ok"], row
    assert row["lib"] == "z3" and row["peak_rss_mib"] >= row["baseline_rss_mib"] > 0
    assert row["mem_ratio"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_distributed_to_zarr(tmp_path):
    _, on_disk, _ = _run(tmp_path, "--workloads", "h_to_zarr_distributed", "--no-reference")
    (row,) = on_disk["results"]
    assert row["ok"], row


def test_wrong_read_result_is_caught(tmp_path, monkeypatch):
    workdir = tmp_path / "work"
    data.ensure_source(workdir, TINY)
    data.ensure_fixtures(workdir, TINY, {"raw"})
    real_read = adapters.Z3Adapter.read

    def corrupt(self, path, name=""):
        out = real_read(self, path, name)
        out[1, 2, 3] += 1
        return out

    monkeypatch.setattr(adapters.Z3Adapter, "read", corrupt)
    row = run_case(Case("c_read_raw_warm", "z3", "tiny", str(workdir), 1))
    assert not row["ok"] and "WRONG RESULT" in row["error"] and "fixture_raw.zarr" in row["error"]
    assert "FAILED" in text_table([row])


def test_missing_library_is_skipped_not_failed(tmp_path, monkeypatch):
    def missing(lib):
        raise ImportError(f"No module named {lib!r}")

    monkeypatch.setattr(adapters, "get_adapter", missing)
    data.ensure_source(tmp_path, TINY)
    row = run_case(Case("a_write_raw", "tensorstore", "tiny", str(tmp_path), 1))
    assert row == {**row, "ok": False, "skipped": True}
    assert "tensorstore" in row["error"]
    assert "skipped" in markdown_table([row])


def test_ratios_are_to_the_fastest_anchor():
    rows = [
        {"workload": "a_write_raw", "lib": "zarr", "unit": "GB/s", "ok": True, "value": 2.0},
        {"workload": "a_write_raw", "lib": "tensorstore", "unit": "GB/s", "ok": True, "value": 4.0},
        {"workload": "a_write_raw", "lib": "zarrs", "unit": "GB/s", "ok": False, "error": "x"},
        {"workload": "a_write_raw", "lib": "z3", "unit": "GB/s", "ok": True, "value": 3.0},
    ]
    best = add_ratios(rows)
    assert best == {"a_write_raw": {"best_anchor": "tensorstore", "best_value": 4.0}}
    assert [r["ratio"] for r in rows] == [0.5, 1.0, None, 0.75]


def test_source_is_deterministic_and_compressible():
    a, b = data.make_source(TINY), data.make_source(TINY)
    assert a.dtype == np.float32 and a.shape == TINY.shape and np.array_equal(a, b)
    assert len(np.unique(a)) > 500  # not trivially compressible
    assert np.all(a * 16 == np.round(a * 16))  # quantised: blosc's byte shuffle has work to do


def test_evict_and_warm_touch_every_file(tmp_path):
    root = tmp_path / "store"
    (root / "c" / "0").mkdir(parents=True)
    for name in ("zarr.json", "c/0/0", "c/0/1"):
        (root / name).write_bytes(os.urandom(1000))
    assert data.evict(root) == 3
    data.warm(root)
    assert data.evict(root / "zarr.json") == 1


def test_env_python_choice(tmp_path):
    import sys

    assert envs.resolve_python("current") == sys.executable
    assert envs.python_version(sys.executable) == sys.version_info[:2]
    assert envs.python_version(str(tmp_path / "no-such-python")) is None
    with pytest.raises(SystemExit, match="does not run"):
        envs.resolve_python(str(tmp_path / "no-such-python"))
    found = envs.find_python(minimum=sys.version_info[:2])
    assert found is not None and found[1] >= sys.version_info[:2]
    versions = envs.versions_in(sys.executable, ("numpy", "no-such-package-here"))
    assert versions["numpy"] == np.__version__ and versions["no-such-package-here"] == "not installed"


def test_library_order_rotates_between_workloads_and_the_table_does_not(tmp_path):
    args = run.parse_args(["--libs", "z3,zarr,tensorstore", "--no-reference"])
    cases = run.select(args)
    firsts = {}
    for wid, lib in cases:
        firsts.setdefault(wid, lib)
    assert len(set(firsts.values())) > 1  # not always the same library first
    per_workload = {}
    for wid, lib in cases:
        per_workload.setdefault(wid, []).append(lib)
    for wid, libs in per_workload.items():  # every chosen library still runs exactly once
        expected = [x for x in WORKLOADS_BY_ID[wid].libs if x in ("z3", "zarr", "tensorstore")]
        assert sorted(libs) == sorted(expected)


# ---- the remote-write group (benchmarks/write_workloads.py) --------------------------------------
def test_remote_write_group_runs_and_checks_what_was_written(tmp_path):
    _, on_disk, _ = _run(
        tmp_path, "--inprocess", "--workloads", "w_", "--latency", "5", "--no-reference", "--libs", "z3,zarr"
    )
    rows = on_disk["results"]
    want = {
        (w.id, lib) for w in WORKLOADS if w.kind == "latency_write" and w.latency_ms == 5 for lib in w.libs
    }
    assert {(r["workload"], r["lib"]) for r in rows} == want and len(want) == 6
    for r in rows:
        assert r["ok"], r
        assert r["unit"] == "writes/s" and r["value"] > 0


def test_remote_write_stores_charge_one_latency_per_request(monkeypatch):
    """The z3 latency store sleeps once per request (a batch is one), never for the calls a
    request makes inside itself."""
    from benchmarks import write_workloads

    slept: list[float] = []
    monkeypatch.setattr(write_workloads.time, "sleep", slept.append)
    store = write_workloads.z3_latency_store(0.02)
    store.set_many({"a": b"1", "b": b"2"})
    assert store.get_many(["a", "b"]) == [b"1", b"2"]
    store.move("a", "c")  # the base class's move reads, writes and erases: one request here
    assert slept == [0.02, 0.02, 0.02] and store.costly_requests


# ---- the remote group (benchmarks/remote_workloads.py, benchmarks/latency_server.py) -----------
REMOTE_5MS = [w.id for w in WORKLOADS if w.latency_ms == 5 and w.remote]


def test_remote_group_runs_for_z3(tmp_path, capsys):
    _, on_disk, md = _run(tmp_path, "--inprocess", "--workloads", "r_", "--latency", "5", "--no-reference")
    rows = on_disk["results"]
    assert [r["workload"] for r in rows] == REMOTE_5MS and {r["lib"] for r in rows} == {"z3"}
    for r in rows:
        assert r["ok"], r
        assert r["latency_ms"] == 5 and r["value"] > 0
        assert r["requests"] >= r["round_trips"] >= 1 and r["peak_in_flight"] >= 1
        assert r["requests"] == sum(r["requests_by_method"].values()) and r["peak_hwm_delta_mib"] >= 0
        assert len(r["server_cpu_s"]) == 1 and r["median_server_cpu_s"] >= 0  # the server's CPU
    by_id = {r["workload"]: r for r in rows}
    size = remote_workloads.REMOTE_SIZES["tiny"]
    chunks = np.prod([s // c for s, c in zip(size.shape, size.chunks, strict=True)])
    # A reads every chunk object; A and B send the whole (compressed) array
    assert by_id["r_a_read_blosc_5ms"]["requests"] >= chunks
    assert by_id["r_a_read_blosc_5ms"]["bytes_sent"] > size.nbytes / 4
    assert by_id["r_b_read_sharded_5ms"]["bytes_sent"] > size.nbytes / 4  # blosc: about 2x
    # z3 reads A's chunks concurrently, not one at a time
    assert by_id["r_a_read_blosc_5ms"]["peak_in_flight"] > 1
    # consolidated metadata saves the per-array zarr.json requests
    assert by_id["r_e_open_consolidated_5ms"]["requests"] < by_id["r_e_open_5ms"]["requests"]
    assert by_id["r_e_open_5ms"]["unit"] == "opens/s"
    printed = capsys.readouterr().out
    assert "remote group" in printed and "round trips" in printed and "round trips" in md
    assert "server CPU s" in md
    for w in REMOTE_5MS:
        assert md.count(w) == 2  # the main table and the remote table


def test_remote_wrong_result_is_caught(tmp_path, monkeypatch):
    real_read = adapters.Z3Adapter.read

    def corrupt(self, path, name=""):
        out = real_read(self, path, name)
        out[0, 1, 2] += 1
        return out

    monkeypatch.setattr(adapters.Z3Adapter, "read", corrupt)
    row = run_case(Case("r_a_read_blosc_5ms", "z3", "tiny", str(tmp_path), 1))
    assert not row["ok"] and "WRONG RESULT" in row["error"] and "blosc" in row["error"]


def test_remote_case_measures_the_servers_cpu(tmp_path, monkeypatch):
    """The worker counts the latency server's CPU in each timed repetition: a read that also
    sends the server 800 requests shows it (each costs the server well over 12.5 us)."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    real_read = adapters.Z3Adapter.read

    def many_gets(url):
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
        for _ in range(100):
            conn.request("GET", "/zarr.json")
            assert conn.getresponse().read().startswith(b"{")
        conn.close()

    def busy(self, path, name=""):
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(many_gets, [path] * 8))
        return real_read(self, path, name)

    monkeypatch.setattr(adapters.Z3Adapter, "read", busy)
    row = run_case(Case("r_a_read_blosc_5ms", "z3", "tiny", str(tmp_path), 2))
    assert row["ok"], row
    assert row["requests"] >= 800 and len(row["server_cpu_s"]) == 2
    assert min(row["server_cpu_s"]) > 0 and row["median_server_cpu_s"] > 0
    assert f"{row['median_server_cpu_s']:.3f} [" in text_table([row])


def test_latency_option_selects_remote_workloads():
    default = {wid for wid, _ in run.select(run.parse_args(["--libs", "z3", "--workloads", "r_"]))}
    assert default == {w.id for w in WORKLOADS if w.latency_ms in (20, 100) and w.remote}
    five = run.select(run.parse_args(["--libs", "z3", "--workloads", "r_", "--latency", "5"]))
    assert [wid for wid, _ in five] == REMOTE_5MS
    everything = run.select(run.parse_args(["--libs", "zarrobs,zarr64", "--no-reference"]))
    assert everything and all(WORKLOADS_BY_ID[wid].remote for wid, _ in everything)
    with pytest.raises(SystemExit, match="choose from"):
        run.select(run.parse_args(["--latency", "7"]))


def test_round_trips_count_groups_of_overlapping_requests():
    assert latency_server.round_trips([]) == 0
    assert latency_server.round_trips([(0, 1), (2, 3), (4, 5)]) == 3  # one after another
    assert latency_server.round_trips([(0, 3), (1, 2), (2.5, 4), (5, 6)]) == 2  # chained overlaps
    assert latency_server.round_trips([(5, 6), (0, 1), (0.5, 5.5)]) == 1  # in any order


def _http(url, method="GET", headers=None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_latency_server_ranges_listings_and_counts(tmp_path):
    body = os.urandom(1000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.bin").write_bytes(body)
    with latency_server.running(tmp_path, 1) as server:
        f = server.url + "/d/f.bin"
        assert _http(f)[::2] == (200, body)
        status, headers, got = _http(f, headers={"Range": "bytes=10-19"})
        assert (status, got, headers["Content-Range"]) == (206, body[10:20], "bytes 10-19/1000")
        assert _http(f, headers={"Range": "bytes=990-"})[::2] == (206, body[990:])
        assert _http(f, headers={"Range": "bytes=-5"})[::2] == (206, body[-5:])
        assert _http(f, headers={"Range": "bytes=1000-"})[0] == 416
        status, headers, got = _http(f, method="HEAD")
        assert (status, headers["Content-Length"], got) == (200, "1000", b"")
        assert _http(server.url + "/d/missing")[0] == 404
        assert _http(server.url + "/../etc/passwd")[0] == 404
        assert b'href="/d/f.bin"' in _http(server.url + "/d/")[2]  # what fsspec's ls parses
        status, _, dav = _http(server.url + "/d", method="PROPFIND", headers={"Depth": "1"})
        assert status == 207 and b"<href>/d/f.bin</href>" in dav and b"<getcontentlength>1000<" in dav
        stats = server.stats()
        assert stats["requests"] == 10 and stats["round_trips"] == 10 and stats["peak_in_flight"] == 1
        file_bytes = sum(e[5] for e in stats["log"] if e[3] == "/d/f.bin")
        assert file_bytes == 1000 + 10 + 10 + 5 and stats["bytes_sent"] == sum(e[5] for e in stats["log"])
        assert stats["by_method"] == {"GET": 8, "HEAD": 1, "PROPFIND": 1}
        server.reset()
        assert server.stats()["requests"] == 0  # the admin requests are not counted


def test_latency_server_keeps_connections_alive_and_sends_large_files(tmp_path):
    """Several requests on one connection (what every HTTP client here does), bodies above the
    small-body size (sent by sendfile) whole and in ranges, and the server's own CPU counted."""
    import http.client

    big = os.urandom(3 * latency_server.SMALL_BODY + 123)
    (tmp_path / "big.bin").write_bytes(big)
    (tmp_path / "d").mkdir()
    with latency_server.running(tmp_path, 1) as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=30)
        answers = []
        for method, headers in [
            ("GET", {}),
            ("GET", {"Range": "bytes=100-"}),
            ("HEAD", {}),
            ("GET", {"Range": "bytes=-70000"}),
            ("GET", {"Range": f"bytes={len(big)}-"}),
            ("PROPFIND", {"Depth": "1"}),
        ]:
            conn.request(method, "/big.bin" if method != "PROPFIND" else "/d", headers=headers)
            r = conn.getresponse()
            answers.append((r.status, r.getheader("Content-Length"), r.getheader("Content-Range"), r.read()))
        sock = conn.sock
        conn.request("GET", "/d/")  # the listing, still on the same socket
        listing = conn.getresponse()
        assert listing.status == 200 and listing.read().startswith(b"<html>") and conn.sock is sock
        conn.close()
        stats = server.stats()
    n = len(big)
    assert answers[0] == (200, str(n), None, big)
    assert answers[1] == (206, str(n - 100), f"bytes 100-{n - 1}/{n}", big[100:])
    assert answers[2] == (200, str(n), None, b"")
    assert answers[3] == (206, "70000", f"bytes {n - 70000}-{n - 1}/{n}", big[-70000:])
    assert answers[4][0] == 416 and answers[4][2] == f"bytes */{n}"
    assert answers[5][0] == 207 and b"<multistatus" in answers[5][3]
    assert stats["requests"] == 7 and stats["round_trips"] == 7
    assert stats["bytes_sent"] == n + (n - 100) + 70000 + len(answers[5][3]) + sum(
        e[5] for e in stats["log"] if e[3] == "/d/"
    )
    assert stats["cpu_s"] > 0  # the server's own CPU since its start (no reset yet)


def test_byte_range_forms():
    br = latency_server.byte_range
    assert br(None, 10) is None
    assert br("bytes=2-4", 10) == (2, 5) and br("bytes=2-", 10) == (2, 10) and br("bytes=-3", 10) == (7, 10)
    assert br("bytes=5-100", 10) == (5, 10) and br("bytes=-100", 10) == (0, 10)
    for bad in ("bytes=10-", "bytes=4-2", "bytes=0-1,3-4", "items=0-1", "bytes=-0", "bytes=x-"):
        with pytest.raises(latency_server.Unsatisfiable):
            br(bad, 10)


def test_latency_server_overlaps_requests(tmp_path):
    """Requests sent together wait out their latency together: none holds another back."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    (tmp_path / "f").write_bytes(b"x" * 100)
    n = 8
    barrier = threading.Barrier(n)

    def get(_):
        barrier.wait()
        return _http(server.url + "/f", headers={"Range": "bytes=0-9"})[0]

    with latency_server.running(tmp_path, 300) as server, ThreadPoolExecutor(n) as pool:
        assert list(pool.map(get, range(n))) == [206] * n
        stats = server.stats()
    assert stats["requests"] == n and stats["peak_in_flight"] == n and stats["round_trips"] == 1


def test_latency_server_stops_when_its_parent_is_gone(tmp_path):
    import subprocess
    import sys
    import time

    code = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'benchmarks.latency_server', sys.argv[1], "
        "'--parent-pid', str(os.getpid())], stdout=subprocess.PIPE, text=True)\n"
        "print(p.stdout.readline().strip(), p.pid, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(run.REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env, check=True
    )
    ready, port, pid = out.stdout.split()
    assert ready == latency_server.READY.strip() and int(port) > 0
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


@pytest.mark.parametrize("lib", ["zarr", "zarrobs", "zarr64", "tensorstore"])
def test_remote_anchors_read_over_http(tmp_path, lib):
    """The anchors' HTTP paths (fsspec, obstore with its PROPFIND listing, tensorstore's http
    kvstore) keep working; a library missing here is reported as skipped, never as a result."""
    for wid in ("r_a_read_blosc_5ms", "r_e_open_5ms"):
        row = run_case(Case(wid, lib, "tiny", str(tmp_path), 1))
        if row.get("skipped"):
            assert "not installed" in row["error"], row
            continue
        assert row["ok"], row
        assert row["requests"] >= row["round_trips"] >= 1
