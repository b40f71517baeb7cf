"""Run one case (workload x library) and print its measurements as one JSON line.

Run as ``python -m benchmarks.worker '<case json>'`` in a fresh process per case, so the peak
resident set size (``ru_maxrss``) belongs to that case alone. Timed: wall clock
(``perf_counter``) and process CPU time (all threads; plus child processes for distributed).
Untimed: setup, one warm-up repetition, page-cache eviction or warming, removing the previous
repetition's output, and checking every result against the source. Peak memory is measured
from before the warm-up, so memory a library keeps between calls is counted.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import copy_workloads, data, remote_workloads, write_workloads
from .config import GB, SIZES, WORKLOADS_BY_ID, Case, MiB, Size, Workload

RESULT_PREFIX = "BENCH-RESULT "


class CheckFailed(AssertionError):
    """A result differs from the source."""


def _rss() -> int:
    """Current resident set size in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _minor_faults() -> int:
    """Page faults this process took so far (first touches of fresh memory, mostly)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _children_cpu() -> float:
    """CPU seconds of live child processes (distributed workers, the remote group's latency
    server), via psutil; 0 without psutil."""
    try:
        import psutil
    except ImportError:
        return 0.0
    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def _regions(size: Size, count: int) -> list[tuple[slice, ...]]:
    """``count`` random whole inner chunks (seeded, with repeats)."""
    rng = np.random.default_rng(7)
    grid = size.n // size.inner
    coords = rng.integers(0, grid, (count, 3))
    return [tuple(slice(int(c) * size.inner, (int(c) + 1) * size.inner) for c in row) for row in coords]


def _source_block(path: str, block_info: Any = None) -> np.ndarray:
    """One block of the source ``.npy`` (dask ``map_blocks``; picklable for distributed)."""
    loc = block_info[None]["array-location"]
    src = np.load(path, mmap_mode="r")
    return np.array(src[tuple(slice(a, b) for a, b in loc)])


def source_dataset(path: str, size: Size) -> Any:
    """An xarray Dataset whose variable ``v`` is a dask array computed from the source file."""
    import dask.array as da
    import xarray as xr

    nb = size.n // size.chunk
    arr = da.map_blocks(
        functools.partial(_source_block, path),
        dtype=np.float32,
        chunks=((size.chunk,) * nb,) * 3,
        meta=np.empty((0, 0, 0), np.float32),
    )
    return xr.Dataset({data.VAR: (data.DIMS, arr)})


class Runner:
    """Holds a case's state; ``run()`` returns the result dict."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.w: Workload = WORKLOADS_BY_ID[case.workload]
        self.size: Size = SIZES[case.size]
        self.dir = data.size_dir(case.workdir, self.size)
        self.scratch = self.dir / "scratch"
        self.scratch.mkdir(exist_ok=True)
        self.note = ""
        self.out_bytes = 0  # size of one read's output (memory ratio)
        self.child_cpu = False

    # ---- measurement loop --------------------------------------------------------------------
    def measure(self, before: Callable[[], None], body: Callable[[], Any]) -> dict:
        walls, cpus, faults, server_cpus = [], [], [], []
        # the remote group's latency server is this process's only child: its CPU per repetition
        serving = self.w.remote is not None
        baseline = _rss()  # before the warm-up: memory a library keeps between calls counts
        before()  # one untimed warm-up: imports, thread pools, first-touch costs of a new process
        body()
        result = None
        for _ in range(self.case.repeat):
            result = None
            before()
            k0 = _children_cpu() if self.child_cpu or serving else 0.0
            c0 = time.process_time() + (k0 if self.child_cpu else 0.0)
            f0 = _minor_faults()
            t0 = time.perf_counter()
            result = body()
            t1 = time.perf_counter()
            k1 = _children_cpu() if self.child_cpu or serving else 0.0
            c1 = time.process_time() + (k1 if self.child_cpu else 0.0)
            if serving:
                server_cpus.append(k1 - k0)
            faults.append(_minor_faults() - f0)
            walls.append(t1 - t0)
            cpus.append(c1 - c0)
        peak = _peak_rss()
        self.last = result
        wall = statistics.median(walls)
        served = (
            {"server_cpu_s": server_cpus, "median_server_cpu_s": statistics.median(server_cpus)}
            if serving
            else {}
        )
        return {
            **served,
            "wall_s": walls,
            "cpu_s": cpus,
            "median_wall_s": wall,
            "minor_faults": faults,
            "cpu_cores": statistics.median(c / w for c, w in zip(cpus, walls, strict=True) if w > 0),
            "baseline_rss_mib": baseline / MiB,
            "peak_rss_mib": peak / MiB,
            "peak_delta_mib": max(peak - baseline, 0) / MiB,
        }

    # ---- workloads ---------------------------------------------------------------------------
    do_cli_copy = copy_workloads.do_cli_copy
    do_read_write_copy = copy_workloads.do_read_write_copy
    do_remote_read = remote_workloads.do_remote_read
    do_remote_random_batch = remote_workloads.do_remote_random_batch
    do_remote_xr_mean = remote_workloads.do_remote_xr_mean
    do_remote_open = remote_workloads.do_remote_open
    do_latency_write = write_workloads.do_latency_write

    def run(self) -> dict:
        kind = self.w.kind
        fn = getattr(self, f"do_{kind}")
        stats = fn()
        cpu = statistics.median(stats["cpu_s"])
        if self.w.unit == "GB/s":
            values = [self.size.nbytes / GB / w for w in stats["wall_s"]]
            stats["cpu_per_unit"] = cpu / (self.size.nbytes / GB)  # CPU seconds per GB
            stats["faults_per_unit"] = statistics.median(stats["minor_faults"]) / (self.size.nbytes / MiB)
        else:
            n = 1 if self.w.unit == "writes/s" else self.nreads  # a write is one call
            values = [n / w for w in stats["wall_s"]]
            stats["cpu_per_unit"] = cpu / n * 1e3  # CPU milliseconds per read (write)
            stats["faults_per_unit"] = statistics.median(stats["minor_faults"]) / n
        stats["value"] = statistics.median(values)
        stats["best"] = max(values)
        stats["values"] = values
        if self.out_bytes:
            stats["mem_ratio"] = stats["peak_delta_mib"] * MiB / self.out_bytes
        return stats

    def _adapter(self):
        from .adapters import get_adapter

        return get_adapter(self.case.lib)

    def do_copy(self) -> dict:
        src = data.load_source(self.case.workdir, self.size, mmap=False)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        stats = self.measure(lambda: None, lambda: np.copyto(dst, src))
        _check(np.array_equal(dst, src), "copy differs from source")
        return stats

    def _ref_file(self) -> Path:
        return self.dir / "reference.bin"

    def do_file_write(self) -> dict:
        src = data.load_source(self.case.workdir, self.size, mmap=False)
        path = self.scratch / "reference_write.bin"

        def before() -> None:
            if path.exists():
                path.unlink()
            os.sync()

        def body() -> None:
            with open(path, "wb", buffering=0) as f:
                f.write(memoryview(src).cast("B"))

        stats = self.measure(before, body)
        _check(path.stat().st_size == src.nbytes, "reference file has the wrong size")
        path.unlink()
        return stats

    def do_file_read(self) -> dict:
        path = self._ref_file()
        src = data.load_source(self.case.workdir, self.size)
        if not path.exists() or path.stat().st_size != src.nbytes:
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(memoryview(np.ascontiguousarray(src)).cast("B"))
                os.fsync(f.fileno())
            os.replace(tmp, path)
        if self.w.cold:
            before = functools.partial(data.evict, path)
        else:
            data.warm(path)
            before = lambda: None  # noqa: E731

        def body() -> np.ndarray:
            out = np.empty(self.size.shape, dtype=np.float32)
            with open(path, "rb", buffering=0) as f:
                f.readinto(memoryview(out).cast("B"))
            return out

        self.out_bytes = src.nbytes
        stats = self.measure(before, body)
        _check(np.array_equal(self.last, src), "file read differs from source")
        return stats

    def do_write(self) -> dict:
        ad = self._adapter()
        src = data.load_source(self.case.workdir, self.size, mmap=False)
        dest = str(self.scratch / f"{self.case.lib}_{self.w.fixture}.zarr")

        def before() -> None:
            shutil.rmtree(dest, ignore_errors=True)
            os.sync()

        stats = self.measure(before, lambda: ad.write(dest, src, self.size, self.w.fixture))
        _check(np.array_equal(ad.read(dest), src), f"{dest}: array read back differs from source")
        shutil.rmtree(dest, ignore_errors=True)
        return stats

    def _fixture(self) -> str:
        return str(data.fixture_path(self.case.workdir, self.size, self.w.fixture))

    def do_read(self) -> dict:
        ad = self._adapter()
        root = self._fixture()
        if self.w.cold:
            before = functools.partial(data.evict, root)
        else:
            data.warm(root)
            before = lambda: None  # noqa: E731
        self.out_bytes = self.size.nbytes + (self.size.chunk**3 * 4 if self.w.fixture == "sharded" else 0)
        stats = self.measure(before, lambda: ad.read(root, data.VAR))
        src = data.load_source(self.case.workdir, self.size)
        _check(np.array_equal(self.last, src), f"{root}: full read differs from source")
        return stats

    @property
    def nreads(self) -> int:
        return int(self.case.extra.get("random_reads", self.size.random_reads))

    def do_random_one(self) -> dict:
        ad = self._adapter()
        root = self._fixture()
        data.warm(root)
        handle = ad.open(root, data.VAR)
        regions = _regions(self.size, self.nreads)

        def body() -> None:
            for r in regions:
                ad.read_one(handle, r)

        stats = self.measure(lambda: None, body)
        src = data.load_source(self.case.workdir, self.size)
        for r in regions:  # the same calls again, each result checked
            _check(np.array_equal(ad.read_one(handle, r), src[r]), f"{root}: region {r} differs")
        return stats

    def do_random_batch(self) -> dict:
        ad = self._adapter()
        root = self._fixture()
        data.warm(root)
        handle = ad.open(root, data.VAR)
        regions = _regions(self.size, self.nreads)
        stats = self.measure(lambda: None, lambda: ad.read_batch(handle, regions))
        src = data.load_source(self.case.workdir, self.size)
        _check(len(self.last) == len(regions), "batch returned the wrong number of results")
        for r, got in zip(regions, self.last, strict=True):
            _check(np.array_equal(got, src[r]), f"{root}: region {r} differs")
        return stats

    def do_xr_mean(self) -> dict:
        ad = self._adapter()
        root = self._fixture()
        data.warm(root)

        def body() -> np.ndarray:
            ds = ad.xr_open(root)
            return ds[data.VAR].mean("time").compute(scheduler="threads").values

        stats = self.measure(lambda: None, body)
        self._check_mean()
        return stats

    def do_xr_mean_in_memory(self) -> dict:
        """Workload f's reduction with no storage engine at all: the same xarray mean over the
        same dask chunks, each already in memory as its own C-contiguous array and placed in
        the graph as it is (no task to fetch it). The ceiling any engine's f can reach."""
        import itertools

        import dask.array as da
        import xarray as xr

        src = data.load_source(self.case.workdir, self.size, mmap=False)
        c, n = data.layout(self.size, "raw")["chunks"][0], self.size.n
        starts = range(0, n, c)
        blocks = {
            (i, j, k): np.ascontiguousarray(src[a : a + c, b : b + c, d : d + c])
            for (i, a), (j, b), (k, d) in itertools.product(enumerate(starts), repeat=3)
        }
        edges = tuple(min(c, n - a) for a in starts)
        del src
        calls = itertools.count()

        def body() -> np.ndarray:
            name = f"in-memory-{next(calls)}"  # a new graph each time: nothing is cached
            arr = da.Array({(name, *ijk): b for ijk, b in blocks.items()}, name, (edges,) * 3, np.float32)
            return xr.DataArray(arr, dims=data.DIMS).mean("time").compute(scheduler="threads").values

        stats = self.measure(lambda: None, body)
        self._check_mean()
        return stats

    def _check_mean(self) -> None:
        src = data.load_source(self.case.workdir, self.size)
        expected = src.mean(axis=0, dtype=np.float64)
        _check(np.allclose(self.last, expected, rtol=1e-5, atol=1e-4), "xarray mean differs from source")

    def do_to_zarr(self) -> dict:
        import dask

        ad = self._adapter()
        dest = str(self.scratch / f"{self.case.lib}_to_zarr.zarr")
        src_path = str(data.source_path(self.case.workdir, self.size))
        ds = source_dataset(src_path, self.size)
        data.warm(src_path)

        def before() -> None:
            shutil.rmtree(dest, ignore_errors=True)
            os.sync()

        if self.w.distributed:
            from distributed import Client, LocalCluster

            self.child_cpu = True
            with (
                LocalCluster(
                    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cluster,
                Client(cluster),
            ):
                stats = self.measure(before, lambda: ad.to_zarr(ds, dest, self.size))
        else:
            with dask.config.set(scheduler="threads"):
                stats = self.measure(before, lambda: ad.to_zarr(ds, dest, self.size))
        src = data.load_source(self.case.workdir, self.size)
        _check(np.array_equal(ad.read(dest, data.VAR), src), f"{dest}: written dataset differs from source")
        shutil.rmtree(dest, ignore_errors=True)
        return stats

    def do_icechunk_read(self) -> dict:
        from .icechunk_repo import measure_read

        return measure_read(self)


def run_case(case: Case) -> dict:
    """Measure one case; failures become ``{"ok": False, "error": ...}`` rather than exceptions."""
    base = {"workload": case.workload, "lib": case.lib, "unit": WORKLOADS_BY_ID[case.workload].unit}
    base["loadavg_1min"] = os.getloadavg()[0]  # other work on the machine skews medians
    try:
        stats = Runner(case).run()
    except ImportError as e:
        return {**base, "ok": False, "skipped": True, "error": f"not installed: {e}"}
    except NotImplementedError as e:
        return {**base, "ok": False, "skipped": True, "error": f"not available: {e}"}
    except CheckFailed as e:
        return {**base, "ok": False, "error": f"WRONG RESULT: {e}"}
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        return {**base, "ok": False, "error": f"{type(e).__name__}: {e}"}
    return {**base, "ok": True, **stats}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    case = Case.from_json(json.loads(argv[0]))
    result = run_case(case)
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
