"""The README's main job: a synthetic climate record written sharded on a local cluster,
reopened with ``engine="zarr3"``, reduced to a climatology.

Run ``python -m zarr3_backend.demo`` (``--help`` for sizes). Three years of daily global
2-metre temperature and precipitation are generated lazily on the workers, written with one
task per shard and a progress bar, reopened, and averaged by calendar month; the script prints
what it wrote, how long each step took, and checks the climatology against the seasonal cycle
the data was built with.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

from .dask.progress import compute_with_progress

#: Seasonal amplitude (K) of the synthetic temperature at the poles; zero at the equator.
POLAR_AMPLITUDE = 15.0


def _t2m_block(
    block_id: tuple[int, ...],
    *,
    day0: int,
    tchunk: int,
    ntime: int,
    lat: np.ndarray,
    lon: np.ndarray,
    seed: int,
) -> np.ndarray:
    """One block of synthetic 2-metre temperature: a warm equator, a seasonal cycle of opposite
    sign in each hemisphere, a weak land/sea wave in longitude and day-to-day noise."""
    start = block_id[0] * tchunk
    days = np.arange(start, min(start + tchunk, ntime)) + day0
    phase = np.cos(2 * np.pi * (days - 15) / 365.25)[:, None, None]
    coslat = np.cos(np.deg2rad(lat))[None, :, None]
    sinlat = np.sin(np.deg2rad(lat))[None, :, None]
    base = 300.0 - 50.0 * sinlat**2 + 3.0 * np.cos(np.deg2rad(2 * lon))[None, None, :] * coslat
    seasonal = POLAR_AMPLITUDE * sinlat * phase  # phase is +1 in mid-January, -1 in mid-July
    rng = np.random.default_rng(seed + block_id[0])
    noise = rng.normal(0.0, 1.5, (len(days), len(lat), len(lon)))
    return (base - seasonal + noise).astype("float32")


def _tp_block(
    block_id: tuple[int, ...], *, tchunk: int, ntime: int, nlat: int, nlon: int, seed: int
) -> np.ndarray:
    start = block_id[0] * tchunk
    n = min(tchunk, ntime - start)
    rng = np.random.default_rng(10_000 + seed + block_id[0])
    return (rng.gamma(0.6, 2.0, (n, nlat, nlon)) * (rng.random((n, nlat, nlon)) > 0.4)).astype("float32")


def synthetic_climate(
    years: int = 3, resolution: float = 2.0, days_per_shard: int = 32, seed: int = 42
) -> xr.Dataset:
    """A lazy (time, lat, lon) dataset of daily fields, one dask block per future shard."""
    time_index = pd.date_range("2001-01-01", periods=round(365.25 * years), freq="D")
    lat = np.linspace(-90.0, 90.0, round(180 / resolution) + 1)
    lon = np.arange(0.0, 360.0, resolution)
    ntime, nlat, nlon = len(time_index), len(lat), len(lon)
    chunks = (da.core.normalize_chunks(days_per_shard, (ntime,))[0], (nlat,), (nlon,))
    t2m = da.map_blocks(
        _t2m_block,
        dtype="float32",
        chunks=chunks,
        day0=int(time_index[0].day_of_year) - 1,
        tchunk=days_per_shard,
        ntime=ntime,
        lat=lat,
        lon=lon,
        seed=seed,
    )
    tp = da.map_blocks(
        _tp_block,
        dtype="float32",
        chunks=chunks,
        tchunk=days_per_shard,
        ntime=ntime,
        nlat=nlat,
        nlon=nlon,
        seed=seed,
    )
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 metre temperature"}),
            "tp": (("time", "lat", "lon"), tp, {"units": "mm day-1", "long_name": "total precipitation"}),
        },
        coords={
            "time": time_index,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
        },
        attrs={"title": "zarr3_backend demo: synthetic daily climate", "source": "zarr3_backend.demo"},
    )


def encoding_for(ds: xr.Dataset, days_per_shard: int = 32) -> dict:
    """Shards of ``days_per_shard`` whole global fields; inner chunks of 8 days by quarter globe."""
    nlat, nlon = ds.sizes["lat"], ds.sizes["lon"]
    inner = (8, -(-nlat // 2), -(-nlon // 2))
    shard = (days_per_shard, 2 * inner[1], 2 * inner[2])
    return {
        "t2m": {"chunks": inner, "shards": shard},
        "tp": {"chunks": inner, "shards": shard, "dtype": "int16", "scale_factor": 0.01, "_FillValue": -1},
        "time": {"units": "days since 2001-01-01", "dtype": "int32"},
    }


def climatology(ds: xr.Dataset) -> xr.Dataset:
    """Mean of each calendar month over all years."""
    return ds.groupby("time.month").mean("time")


def _dir_size(path: str) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(root, n))
            files += 1
    return total, files


def run(
    out: str, *, years: int, resolution: float, workers: int, days_per_shard: int = 32, log=print
) -> xr.Dataset:
    """Write, reopen and reduce; returns the climatology. ``log`` receives each report line."""
    import distributed

    from . import to_zarr

    ds = synthetic_climate(years, resolution, days_per_shard)
    nshards = sum(-(-ds.sizes["time"] // days_per_shard) for _ in ("t2m", "tp"))
    log(f"dataset: {dict(ds.sizes)}, {ds.nbytes / 2**20:.1f} MiB of daily fields over {years} year(s)")
    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
        ) as cluster,
        distributed.Client(cluster),
    ):
        log(f"cluster: {workers} worker processes; writing {nshards} shards (one task each) to {out}")
        t0 = time.perf_counter()
        to_zarr(ds, out, mode="w", encoding=encoding_for(ds, days_per_shard), progress=True)
        t_write = time.perf_counter() - t0
        size, files = _dir_size(out)
        log(f"\nwrote {files} files, {size / 2**20:.1f} MiB on disk in {t_write:.1f} s")

        t0 = time.perf_counter()
        back = xr.open_dataset(out, engine="zarr3", chunks={})
        log(
            f"reopened with engine='zarr3' in {1e3 * (time.perf_counter() - t0):.0f} ms: "
            f"{back.t2m.data.npartitions} read tasks for t2m (one per shard)"
        )
        t0 = time.perf_counter()
        (clim,) = compute_with_progress(climatology(back), progress=True)
        log(f"\nclimatology computed in {time.perf_counter() - t0:.1f} s")
    _report(clim, log)
    return clim


def _report(clim: xr.Dataset, log=print) -> None:
    t = clim.t2m
    north, south = (
        t.sel(lat=slice(45, 90)).mean(("lat", "lon")),
        t.sel(lat=slice(-90, -45)).mean(("lat", "lon")),
    )
    log("monthly mean 2 m temperature (K), north / south of 45 degrees:")
    for m in range(1, 13):
        log(
            f"  {pd.Timestamp(2001, m, 1):%b}  {float(north.sel(month=m)):7.2f}  {float(south.sel(month=m)):7.2f}"
        )
    warm_n = int(north.idxmax()) in (6, 7, 8)
    warm_s = int(south.idxmax()) in (12, 1, 2)
    log(
        f"northern summer peaks in month {int(north.idxmax())}, southern in month {int(south.idxmax())}: "
        f"{'as built' if warm_n and warm_s else 'UNEXPECTED'}"
    )
    log(f"global mean precipitation: {float(clim.tp.mean()):.2f} mm/day")
    if not (warm_n and warm_s):  # the data read back is not what was written: fail the demo
        raise RuntimeError("the seasonal cycle read back differs from the one written")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``python -m zarr3_backend.demo [--years N] [--out PATH]``."""
    p = argparse.ArgumentParser(prog="python -m zarr3_backend.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--years", type=int, default=3, help="years of daily data (default 3)")
    p.add_argument("--resolution", type=float, default=2.0, help="grid spacing in degrees (default 2)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--out", default=None, help="where to write the store (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the store written to the temporary directory")
    args = p.parse_args(argv)
    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.mkdtemp(prefix="zarr3-demo-")
        out = os.path.join(tmp, "climate.zarr")
    try:
        run(out, years=args.years, resolution=args.resolution, workers=args.workers)
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            print(f"kept {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
