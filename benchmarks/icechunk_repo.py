"""Workload i: read an Icechunk repository through xarray, ``engine="zarr3"`` against
``engine="zarr"``, both given the same read-only session's store.

The repository holds the source array as the ``raw`` fixture lays it out (uncompressed chunks,
one Icechunk chunk object each). It is made in the case's own process, with the icechunk
installed there (the benchmark environment may hold another icechunk than the project's
Python), once per size and icechunk version, untimed.
"""

from __future__ import annotations

import shutil
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import data

if TYPE_CHECKING:
    from .worker import Runner

#: The xarray engine each library of this workload reads with.
ENGINES = {"z3": "zarr3", "zarr": "zarr"}


def repo_path(runner: Runner) -> Path:
    """Where this size's repository lives, per icechunk version (formats differ between majors)."""
    return runner.dir / f"icechunk-{version('icechunk')}"


def ensure_repo(runner: Runner) -> Path:
    """Write the repository (one commit on ``main`` holding the array) unless it is complete."""
    import icechunk

    import zarr3_backend as z3

    path = repo_path(runner)
    done = path.with_suffix(".complete")
    if done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    grid, codecs = data.v3_codecs(runner.size, "raw")
    group = z3.open_group(session.store, mode="w")
    array = group.create_array(
        data.VAR,
        shape=runner.size.shape,
        dtype="float32",
        chunks=tuple(grid),
        codecs=codecs,
        fill_value=0.0,
        dimension_names=data.DIMS,
    )
    array[...] = data.load_source(runner.case.workdir, runner.size, mmap=False)
    session.commit("benchmark source")
    done.write_text("ok\n")
    return path


def measure_read(runner: Runner) -> dict:
    """Time ``xr.open_dataset(session.store, engine=...)[v].values`` on a warm repository."""
    import icechunk
    import xarray as xr

    engine = ENGINES.get(runner.case.lib)
    if engine is None:
        raise NotImplementedError(f"workload {runner.w.id} compares engines zarr3 and zarr only")
    path = ensure_repo(runner)
    data.warm(path)
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    options: dict[str, Any] = {} if engine == "zarr3" else {"consolidated": False, "zarr_format": 3}

    def body() -> np.ndarray:
        store = repo.readonly_session(branch="main").store
        return xr.open_dataset(store, engine=engine, **options)[data.VAR].values

    runner.out_bytes = runner.size.nbytes
    stats = runner.measure(lambda: None, body)
    src = data.load_source(runner.case.workdir, runner.size)
    if not np.array_equal(runner.last, src):
        from .worker import CheckFailed

        raise CheckFailed(f"{path}: Icechunk read differs from source")
    return stats
