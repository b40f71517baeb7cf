"""The benchmark runner: ``python -m benchmarks [--size full|small|tiny] [--libs ...] ...``.

Prepares the source and fixture stores once, runs every (workload, library) case in a fresh
worker process, prints a table as results arrive and writes everything to
``benchmarks/results/<size>-<timestamp>.json`` (optionally a Markdown table too).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import data, envs
from .config import (
    ALL_LIBS,
    DEFAULT_LATENCIES_MS,
    REFERENCE_LIBS,
    REMOTE_LATENCIES_MS,
    SIZES,
    WORKLOADS,
    WORKLOADS_BY_ID,
    Case,
)
from .remote_workloads import remote_description, remote_table
from .report import add_ratios, markdown_table, text_table
from .worker import RESULT_PREFIX, run_case

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PACKAGES = (
    "zarr3_backend",
    "numpy",
    "numcodecs",
    "crc32c",
    "dask",
    "distributed",
    "xarray",
    "zarr",
    "zarrs",
    "tensorstore",
    "xarray-tensorstore",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--size", choices=sorted(SIZES), default="full", help="data size (default: full, 512 MiB)")
    p.add_argument(
        "--libs", default=",".join(ALL_LIBS), help=f"comma-separated subset of {','.join(ALL_LIBS)}"
    )
    p.add_argument(
        "--latency",
        default=",".join(map(str, DEFAULT_LATENCIES_MS)),
        help="remote group: comma-separated ms added to each HTTP request, of "
        f"{','.join(map(str, REMOTE_LATENCIES_MS))} (default: {','.join(map(str, DEFAULT_LATENCIES_MS))})",
    )
    p.add_argument("--workloads", default="", help="comma-separated workload ids or prefixes (default: all)")
    p.add_argument("--no-reference", action="store_true", help="skip the numpy/file reference points")
    p.add_argument("--repeat", type=int, default=5, help="timed repetitions per case (median reported)")
    p.add_argument("--workdir", default=str(HERE / "_data"), help="where source, fixtures, scratch live")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the JSON results")
    p.add_argument("--markdown", default=None, help="also write the table as Markdown to this file")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed per case")
    p.add_argument(
        "--python",
        default="auto",
        help="interpreter for the cases: auto (default; a Python 3.12+ environment the suite "
        "builds in benchmarks/_env, so the newest zarr-python installs), current, or a path",
    )
    p.add_argument(
        "--inprocess",
        action="store_true",
        help="run cases in this process (fast smoke runs; peak memory is then meaningless)",
    )
    return p.parse_args(argv)


def select(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (workload id, lib) cases to run, in table order."""
    libs = [x for x in args.libs.split(",") if x]
    unknown = set(libs) - set(ALL_LIBS)
    if unknown:
        raise SystemExit(f"unknown libs {sorted(unknown)}; choose from {ALL_LIBS}")
    latencies = {float(x) for x in args.latency.split(",") if x}
    if latencies - set(REMOTE_LATENCIES_MS):
        raise SystemExit(f"--latency {args.latency}: choose from {REMOTE_LATENCIES_MS} ms")
    wanted = [x for x in args.workloads.split(",") if x]
    cases = []
    for k, w in enumerate(WORKLOADS):
        if wanted and not any(w.id == x or w.id.startswith(x) for x in wanted):
            continue
        if w.latency_ms is not None and w.latency_ms not in latencies:
            continue
        chosen = [lib for lib in w.libs if (lib in REFERENCE_LIBS and not args.no_reference) or lib in libs]
        # the library that runs first after another workload varies: no library always pays
        # for what the previous workload left behind (dirty pages, freed memory to reclaim)
        shift = k % len(chosen) if chosen else 0
        cases.extend((w.id, lib) for lib in chosen[shift:] + chosen[:shift])
    return cases


def machine_info() -> dict:
    """CPU model, core count, memory, OS and load: the context of the numbers."""
    info = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def versions(python: str) -> dict[str, str]:
    """Package versions in the interpreter the cases ran in."""
    if python == sys.executable:
        out = {"python": platform.python_version()}
        for name in PACKAGES:
            try:
                out[name] = version(name)
            except PackageNotFoundError:
                out[name] = "not installed"
        return out
    return envs.versions_in(python, PACKAGES)


def run_subprocess(case: Case, timeout: float, python: str = sys.executable) -> dict:
    """Run one case in a fresh interpreter; its last stdout line holds the result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    cmd = [python, "-m", "benchmarks.worker", json.dumps(case.to_json())]
    base = {"workload": case.workload, "lib": case.lib, "unit": "GB/s", "ok": False}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    except subprocess.TimeoutExpired:
        return {**base, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
            if not result.get("ok") and not result.get("skipped"):
                sys.stderr.write(proc.stderr[-3000:])
            return result
    tail = (proc.stderr or proc.stdout)[-2000:]
    sys.stderr.write(tail)
    return {**base, "error": f"worker exited {proc.returncode} without a result: {tail.strip()[-200:]}"}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    size = SIZES[args.size]
    started = time.time()
    load_start = os.getloadavg()
    pairs = select(args)
    python = sys.executable if args.inprocess else envs.resolve_python(args.python)
    workdir = Path(args.workdir)
    data.ensure_source(workdir, size)
    fixtures = {
        w.fixture
        for w in WORKLOADS
        for wid, _ in pairs
        if w.id == wid and w.fixture and w.kind not in ("write", "to_zarr")
    }
    data.ensure_fixtures(workdir, size, fixtures)
    eviction = data.eviction_check(data.source_path(workdir, size))
    print(f"cases run in {python} (Python {'.'.join(map(str, envs.python_version(python) or ()))})")
    print(
        f"size {size.name}: shape {size.shape} float32 ({size.nbytes / 2**20:.0f} MiB), "
        f"chunks {size.chunk}^3, shards {size.chunk}^3 of {size.inner}^3; {args.repeat} repetitions"
    )
    if any(WORKLOADS_BY_ID[wid].remote for wid, _ in pairs):
        print(remote_description(args.size, args.latency))
    print(
        f"page-cache eviction check: warm {eviction['warm_s']:.3f} s, evicted {eviction['cold_s']:.3f} s "
        f"-> {'evicts' if eviction['evicts'] else 'DOES NOT EVICT'}",
        flush=True,
    )

    results = []
    for wid, lib in pairs:
        case = Case(wid, lib, size.name, str(workdir), args.repeat)
        t = time.perf_counter()
        r = run_case(case) if args.inprocess else run_subprocess(case, args.timeout, python)
        r["case_s"] = time.perf_counter() - t
        results.append(r)
        shown = f"{r['value']:.2f} {r['unit']}" if r.get("ok") else r.get("error", "failed")
        print(f"  {wid:24s} {lib:12s} {shown}  ({r['case_s']:.1f} s)", flush=True)

    for i, r in enumerate(results):
        r["run_order"] = i
    workload_pos = {w.id: i for i, w in enumerate(WORKLOADS)}
    lib_pos = {lib: i for i, lib in enumerate((*REFERENCE_LIBS, *ALL_LIBS))}
    results.sort(key=lambda r: (workload_pos[r["workload"]], lib_pos[r["lib"]]))  # table order
    best = add_ratios(results)
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "size": size.name,
        "shape": size.shape,
        "nbytes": size.nbytes,
        "repeat": args.repeat,
        "inprocess": args.inprocess,
        "python_executable": python,
        "versions": versions(python),
        "machine": {**machine_info(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "eviction_check": eviction,
        "elapsed_s": time.time() - started,
    }
    report = {"meta": meta, "best_anchor": best, "results": results}
    print()
    print(text_table(results))
    remote = remote_table(results)
    if remote:
        print("\nremote group: traffic of the last repetition\n" + remote)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out / f"{size.name}-{stamp}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {path} ({meta['elapsed_s']:.0f} s)")
    if args.markdown:
        remote = remote_table(results, markdown=True)
        Path(args.markdown).write_text(markdown_table(results) + "\n" + (f"\n{remote}\n" if remote else ""))
    return report


if __name__ == "__main__":
    main()
