"""The remote group: the same stores read over HTTP from a server that adds latency per request.

Object storage is where climate data mostly lives, and there latency, not the CPU, sets the
pace. Each case starts its own ``latency_server`` over this size's stores (in the case's
interpreter, so it stops with the case) and every library reads them through its usual HTTP
path: zarr3_backend's fsspec store over ``http://``, zarr-python's FsspecStore (default and with
``async.concurrency`` 64) and its ObjectStore on obstore's HTTPStore, tensorstore's ``http``
kvstore (and xarray-tensorstore for the xarray workloads). Workloads:

- A ``remote_read`` of ``blosc``: the whole array, one blosc chunk per object (512 at ``full``).
- B ``remote_read`` of ``sharded``: the same data in shards of 2x2x2 inner chunks (64 objects).
- C ``remote_random_batch``: random whole inner chunks of ``sharded`` in one call.
- D ``remote_xr_mean``: ``open_dataset(chunks={})`` of ``blosc`` + a mean with dask threads.
- E ``remote_open``: ``open_dataset`` of a group with 6 1-D index coordinates (which xarray
  loads), with and without consolidated metadata.

Every timed repetition opens afresh (no handle or metadata kept from the one before). The
server's counters are reset before each repetition; the result carries the last repetition's
requests, bytes sent, peak requests in flight and round trips (maximal groups of overlapping
requests: the sequential phases a latency-bound reader pays for). Used as ``Runner`` methods.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import data, latency_server
from .config import MiB, Size

if TYPE_CHECKING:
    from .worker import Runner


@dataclass(frozen=True)
class RemoteSize(Size):
    """The remote group's array: shape (n, 2n, 2n) float32 in chunks (c, 2c, 2c), c = ``chunk``;
    shards of ``sharded`` are (2c, 4c, 4c). ``data.make_source`` fills it plane by plane."""

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.n, 2 * self.n, 2 * self.n)

    @property
    def nbytes(self) -> int:
        return self.n * (2 * self.n) ** 2 * 4

    @property
    def chunks(self) -> tuple[int, int, int]:
        return (self.chunk, 2 * self.chunk, 2 * self.chunk)

    @property
    def shards(self) -> tuple[int, int, int]:
        return tuple(2 * c for c in self.chunks)


#: ``full``: 256 MiB in 512 blosc chunks of 512 KiB (64 shards); 200 random inner chunks.
REMOTE_SIZES = {
    "full": RemoteSize("remote_full", 256, 32, 32, 200),
    "small": RemoteSize("remote_small", 128, 16, 16, 200),
    "tiny": RemoteSize("remote_tiny", 16, 4, 4, 20),
}

#: Workload E's coordinates beyond the array's own (time, y, x): name -> length.
EXTRA_DIMS = {"level": 8, "member": 10, "band": 3}
E_DIMS = ("time", "level", "member", "band", "y", "x")
TIME_UNITS = "days since 2000-01-01"


def _codecs(size: RemoteSize, fixture: str) -> tuple[tuple[int, ...], list[dict]]:
    """(chunk grid, codec chain) of ``blosc`` (blosc chunks) or ``sharded`` (blosc inner chunks)."""
    serializer = {"name": "bytes", "configuration": {"endian": "little"}}
    blosc = [serializer, {"name": "blosc", "configuration": dict(data.BLOSC)}]
    if fixture == "blosc":
        return size.chunks, blosc
    sharding = {
        "chunk_shape": list(size.chunks),
        "codecs": blosc,
        "index_codecs": [serializer, {"name": "crc32c"}],
        "index_location": "end",
    }
    return size.shards, [{"name": "sharding_indexed", "configuration": sharding}]


def coordinate_values(size: RemoteSize) -> dict[str, np.ndarray]:
    """Workload E's six index coordinates as stored (time as days since 2000-01-01)."""
    lengths = {"time": size.shape[0], **EXTRA_DIMS, "y": size.shape[1], "x": size.shape[2]}
    values = {
        "time": np.arange(lengths["time"], dtype="int64"),
        "level": np.linspace(1000.0, 100.0, lengths["level"]),
        "member": np.arange(lengths["member"], dtype="int32"),
        "band": np.arange(1, lengths["band"] + 1, dtype="int16"),
        "y": np.linspace(-90.0, 90.0, lengths["y"]),
        "x": np.linspace(0.0, 360.0, lengths["x"], endpoint=False),
    }
    return {d: values[d] for d in E_DIMS}


def _write_array_store(root: Path, workdir: str, size: RemoteSize, fixture: str) -> None:
    import zarr3_backend as z3

    grid, codecs = _codecs(size, fixture)
    g = z3.create_group(str(root))
    a = g.create_array(
        data.VAR,
        shape=size.shape,
        dtype="float32",
        chunks=grid,
        codecs=codecs,
        fill_value=0.0,
        dimension_names=data.DIMS,
    )
    a[...] = data.load_source(workdir, size, mmap=False)


def _write_coords_store(root: Path, size: RemoteSize, consolidated: bool) -> None:
    """A group: ``v`` over six dimensions (metadata only, no chunk written) and one 1-D index
    coordinate per dimension."""
    import zarr3_backend as z3

    g = z3.create_group(str(root))
    for name, values in coordinate_values(size).items():
        attrs = {"units": TIME_UNITS, "calendar": "proleptic_gregorian"} if name == "time" else {}
        a = g.create_array(
            name,
            shape=values.shape,
            dtype=values.dtype,
            chunks=values.shape,
            dimension_names=(name,),
            attributes=attrs,
        )
        a[...] = values
    shape = tuple(len(v) for v in coordinate_values(size).values())
    chunks = (size.chunk, 1, 1, 1, *size.chunks[1:])
    g.create_array(
        data.VAR, shape=shape, dtype="float32", chunks=chunks, fill_value=float("nan"), dimension_names=E_DIMS
    )
    if consolidated:
        z3.consolidate_metadata(str(root))


def served_root(workdir: str, size: RemoteSize) -> Path:
    """The directory holding one store per fixture (each served at a server's root)."""
    return data.size_dir(workdir, size) / "served"


def ensure_store(workdir: str, size: RemoteSize, fixture: str) -> Path:
    """Write the store ``fixture`` (blosc, sharded, coords, coords_consolidated) unless it is
    complete (its marker sits beside it, outside what a listing of the store shows)."""
    root = served_root(workdir, size) / f"{fixture}.zarr"
    done = root.with_suffix(".complete")
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    if fixture in ("blosc", "sharded"):
        data.ensure_source(workdir, size)
        _write_array_store(root, workdir, size, fixture)
    else:
        _write_coords_store(root, size, consolidated=fixture == "coords_consolidated")
    done.write_text("ok\n")
    return root


# ---- the cases ---------------------------------------------------------------------------------
def _prepare(runner: Runner) -> tuple[RemoteSize, Path]:
    """Switch the runner to the remote size; make the workload's store. Returns (size, root)."""
    size = REMOTE_SIZES[runner.case.size]
    runner.size = size
    runner.dir = data.size_dir(runner.case.workdir, size)
    ensure_store(runner.case.workdir, size, runner.w.remote)
    return size, served_root(runner.case.workdir, size)


def _measure(runner: Runner, root: Path, body: Any) -> dict:
    """Serve ``root`` with the workload's latency; time ``body(url)``; add the last
    repetition's traffic to the stats."""
    from .worker import CheckFailed

    # the store is the server's root: obstore's HTTPStore lists paths relative to the server's
    # root, not to its base URL, so a store below the root would list wrong keys
    with latency_server.running(root / f"{runner.w.remote}.zarr", runner.w.latency_ms) as server:
        url = server.url
        _reset_hwm()  # what making the store took is not the read's
        stats = runner.measure(server.reset, lambda: body(url))
        traffic = server.stats()
    # ru_maxrss (the suite's peak) survives exec: a case inherits its runner's peak; the high
    # water mark of this process's own memory does not
    stats["peak_hwm_delta_mib"] = max(_vm_hwm() - stats["baseline_rss_mib"] * MiB, 0) / MiB
    if traffic["requests"] == 0:
        raise CheckFailed(f"{url}: the library sent no request to the server")
    log = traffic.pop("log")
    stats.update(
        latency_ms=runner.w.latency_ms,
        requests=traffic["requests"],
        bytes_sent=traffic["bytes_sent"],
        peak_in_flight=traffic["peak_in_flight"],
        round_trips=traffic["round_trips"],
        requests_by_method=traffic["by_method"],
        server_busy_s=max(e[1] for e in log) - min(e[0] for e in log),
    )
    return stats


def _vm_hwm() -> int:
    """This process's peak resident set size in bytes (``VmHWM``: reset by exec and by
    ``_reset_hwm``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


def _reset_hwm() -> None:
    """Set ``VmHWM`` to the current RSS (``/proc/self/clear_refs``, Linux 4.0+)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _check(ok: bool, what: str) -> None:
    from .worker import CheckFailed

    if not ok:
        raise CheckFailed(what)


def do_remote_read(runner: Runner) -> dict:
    """A and B: open the array over HTTP and read all of it."""
    ad = runner._adapter()
    size, root = _prepare(runner)
    runner.out_bytes = size.nbytes
    stats = _measure(runner, root, lambda url: ad.read(url, data.VAR))
    src = data.load_source(runner.case.workdir, size)
    _check(np.array_equal(runner.last, src), f"{runner.w.remote}: remote read differs from source")
    return stats


def regions(size: RemoteSize, count: int) -> list[tuple[slice, ...]]:
    """``count`` random whole inner chunks (seeded, with repeats)."""
    rng = np.random.default_rng(7)
    grid = [s // c for s, c in zip(size.shape, size.chunks, strict=True)]
    coords = rng.integers(0, grid, (count, 3))
    return [
        tuple(slice(int(i) * c, (int(i) + 1) * c) for i, c in zip(row, size.chunks, strict=True))
        for row in coords
    ]


def do_remote_random_batch(runner: Runner) -> dict:
    """C: open the sharded array, then read ``random_reads`` inner chunks in one call."""
    ad = runner._adapter()
    size, root = _prepare(runner)
    wanted = regions(size, runner.nreads)
    stats = _measure(runner, root, lambda url: ad.read_batch(ad.open(url, data.VAR), wanted))
    src = data.load_source(runner.case.workdir, size)
    _check(len(runner.last) == len(wanted), "batch returned the wrong number of results")
    for r, got in zip(wanted, runner.last, strict=True):
        _check(np.array_equal(got, src[r]), f"{runner.w.remote}: region {r} differs")
    return stats


def do_remote_xr_mean(runner: Runner) -> dict:
    """D: ``open_dataset(chunks={})`` over HTTP, then the mean over time with dask threads."""
    ad = runner._adapter()
    size, root = _prepare(runner)

    def body(url: str) -> np.ndarray:
        ds = ad.xr_open(url)
        return ds[data.VAR].mean("time").compute(scheduler="threads").values

    stats = _measure(runner, root, body)
    expected = data.load_source(runner.case.workdir, size).mean(axis=0, dtype=np.float64)
    _check(np.allclose(runner.last, expected, rtol=1e-5, atol=1e-4), "remote xarray mean differs from source")
    return stats


def do_remote_open(runner: Runner) -> dict:
    """E: ``open_dataset`` of the coordinates group (xarray loads the six index coordinates)."""
    import pandas as pd

    ad = runner._adapter()
    size, root = _prepare(runner)
    runner.size = replace(size, random_reads=1)  # the rate is opens per second
    consolidated = runner.w.remote == "coords_consolidated"

    def body(url: str) -> dict[str, np.ndarray]:
        ds = ad.xr_open_coords(url, consolidated)
        return {name: ds.indexes[name].values for name in E_DIMS} | {"_dims": ds[data.VAR].dims}

    stats = _measure(runner, root, body)
    got = runner.last
    _check(tuple(got.pop("_dims")) == E_DIMS, f"{runner.w.remote}: {data.VAR} has the wrong dimensions")
    for name, values in coordinate_values(size).items():
        if name == "time":
            values = (pd.Timestamp("2000-01-01") + pd.to_timedelta(values, unit="D")).values
        _check(np.array_equal(got[name], values), f"{runner.w.remote}: coordinate {name} differs")
    return stats


def remote_description(size_name: str, latencies: str) -> str:
    """One line on the remote group's array and latencies, for the runner's header."""
    size = REMOTE_SIZES[size_name]
    return (
        f"remote group: shape {size.shape} float32 ({size.nbytes / MiB:.0f} MiB), blosc chunks "
        f"{size.chunks}, shards {size.shards}, {size.random_reads} random reads; {latencies} ms per request"
    )


# ---- the remote table ----------------------------------------------------------------------------
REMOTE_COLUMNS = (
    "workload",
    "lib",
    "latency",
    "median s",
    "rate",
    "vs best anchor",
    "requests",
    "MB sent",
    "peak in flight",
    "round trips",
    "server CPU s",
    "peak mem Δ MiB (VmHWM)",
)


def _remote_row(r: dict) -> list[str]:
    if not r.get("ok"):
        status = "skipped" if r.get("skipped") else "FAILED"
        return [
            r["workload"],
            r["lib"],
            "",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            "-",
            f"{status}: {r.get('error', '')}"[:60],
        ]
    ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
    return [
        r["workload"],
        r["lib"],
        f"{r['latency_ms']:g} ms",
        f"{r['median_wall_s']:.3f}",
        f"{r['value']:.3g} {r['unit']}",
        ratio,
        str(r["requests"]),
        f"{r['bytes_sent'] / 1e6:.1f}",
        str(r["peak_in_flight"]),
        str(r["round_trips"]),
        "-" if r.get("median_server_cpu_s") is None else f"{r['median_server_cpu_s']:.3f}",
        f"{r['peak_hwm_delta_mib']:.0f}",
    ]


def remote_table(results: list[dict], *, markdown: bool = False) -> str:
    """The remote rows with their traffic columns (plain text, or Markdown); "" if none."""
    rows = [_remote_row(r) for r in results if r["workload"].startswith("r_")]
    if not rows:
        return ""
    if markdown:
        lines = ["| " + " | ".join(REMOTE_COLUMNS) + " |", "|" + "---|" * len(REMOTE_COLUMNS)]
        return "\n".join(lines + ["| " + " | ".join(rows_) + " |" for rows_ in rows])
    table = [list(REMOTE_COLUMNS), *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(REMOTE_COLUMNS))]
    out = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
