"""Resharding copy of a ~1 GiB array: ``zarr3 copy`` (one dask task per destination shard)
against this package's own full read plus write of the same data.

Both read the same source (blosc chunks of the size's chunk edge) and write the same new layout
(shards of half the array's edge holding blosc inner chunks of the size's inner edge). The array
is 5/4 of the size's edge per axis: 640^3 float32 (1000 MiB) at ``full``, small at ``tiny``.
Used as ``Runner`` methods (``do_cli_copy``, ``do_read_write_copy``); the GB/s are of this
array's bytes.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any

from . import data
from .config import Size


def copy_size(size: Size) -> Size:
    """The array copied: 5/4 of ``size``'s edge (640^3 float32, 1000 MiB, at ``full``)."""
    return replace(size, name=f"{size.name}_copy", n=size.n * 5 // 4)


def _shards(size: Size) -> tuple[int, ...]:
    half = -(-size.n // 2)
    return (-(-half // size.inner) * size.inner,) * 3  # whole inner chunks per shard


def _prepare(runner: Any) -> tuple[str, str]:
    """Switch the runner to the copy size; make the blosc source store. Returns (source, dest)."""
    runner.size = copy_size(runner.size)
    runner.dir = data.size_dir(runner.case.workdir, runner.size)
    runner.scratch = runner.dir / "scratch"
    runner.scratch.mkdir(exist_ok=True)
    data.ensure_source(runner.case.workdir, runner.size)
    data.ensure_fixtures(runner.case.workdir, runner.size, {"blosc"})
    source = str(data.fixture_path(runner.case.workdir, runner.size, "blosc"))
    return source, str(runner.scratch / f"copy_{runner.case.workload}.zarr")


def _check_copy(runner: Any, dest: str) -> None:
    import numpy as np

    import zarr3_backend as z3

    a = z3.open_array(dest, path=data.VAR)
    src = data.load_source(runner.case.workdir, runner.size)
    if a.shards != _shards(runner.size) or a.chunks != (runner.size.inner,) * 3:
        raise AssertionError(f"{dest}: layout {a.shards}/{a.chunks} is not the one asked for")
    if not np.array_equal(a[...], src):
        raise AssertionError(f"{dest}: copy differs from source")


def _codecs() -> list[dict]:
    return [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": dict(data.BLOSC)},
    ]


def do_cli_copy(runner: Any) -> dict:
    """``zarr3 copy SRC DST --chunks ... --shards ... --codecs ...`` (threads), timed whole."""
    from zarr3_backend.cli.copy import copy_hierarchy

    source, dest = _prepare(runner)
    size = runner.size

    def before() -> None:
        shutil.rmtree(dest, ignore_errors=True)

    def body() -> Any:
        return copy_hierarchy(source, dest, chunks=(size.inner,) * 3, shards=_shards(size), codecs=_codecs())

    stats = runner.measure(before, body)
    _check_copy(runner, dest)
    shutil.rmtree(dest, ignore_errors=True)
    return stats


def do_read_write_copy(runner: Any) -> dict:
    """The same copy by hand: ``a[...]`` of the whole source, then one ``b[...] = values``."""
    import zarr3_backend as z3

    source, dest = _prepare(runner)
    size = runner.size

    def before() -> None:
        shutil.rmtree(dest, ignore_errors=True)

    def body() -> None:
        src = z3.open_array(source, path=data.VAR)
        values = src[...]
        b = z3.create_array(
            dest,
            path=data.VAR,
            shape=src.shape,
            dtype=src.dtype,
            chunks=(size.inner,) * 3,
            shards=_shards(size),
            compressors=[{"name": "blosc", "configuration": dict(data.BLOSC)}],
            fill_value=src.fill_value,
            dimension_names=src.dimension_names,
        )
        b[...] = values

    stats = runner.measure(before, body)
    _check_copy(runner, dest)
    shutil.rmtree(dest, ignore_errors=True)
    return stats
