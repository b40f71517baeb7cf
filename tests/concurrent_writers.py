"""Writer processes for the lost-update tests (a plain module: spawned children import it).

Each round the parent creates a fresh array; every writer ``w`` of ``n`` then writes the columns
``w::n`` of the whole array (element-disjoint, but every chunk or shard is shared by all
writers), all released at once by a barrier; the parent checks that no writer's values are lost.
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np

import zarr3_backend as z3

SHAPE = (8, 160)


def value(writer: int, round_: int) -> int:
    """What ``writer`` writes in ``round_`` (never the fill value 0)."""
    return 1 + writer + 10 * round_


def layout(kind: str) -> dict:
    """``create_array`` arguments: 4 shards of 4x4 inner chunks, or 4 plain chunks."""
    if kind == "shards":
        return {"chunks": (4, 10), "shards": (8, 40)}
    return {"chunks": (8, 40)}


def create(url: str, storage_options: dict | None, kind: str, round_: int) -> None:
    """The array of ``round_`` (empty: every element is the fill value)."""
    z3.create_array(
        url,
        f"r{round_}",
        shape=SHAPE,
        dtype="int32",
        fill_value=0,
        storage_options=storage_options,
        **layout(kind),
    )


def writer(url: str, storage_options: dict | None, w: int, n: int, rounds: int, barrier) -> None:
    """Process body: for each round wait for the others, then write columns ``w::n``."""
    for r in range(rounds):
        barrier.wait(timeout=120)
        a = z3.open_array(url, f"r{r}", mode="r+", storage_options=storage_options)
        a[:, w::n] = np.full((SHAPE[0], len(range(w, SHAPE[1], n))), value(w, r), dtype="int32")
        barrier.wait(timeout=120)


def lost(url: str, storage_options: dict | None, n: int, round_: int) -> int:
    """How many elements of ``round_``'s array lack the value their writer wrote."""
    got = z3.open_array(url, f"r{round_}", storage_options=storage_options)[...]
    expected = np.empty(SHAPE, dtype="int32")
    for w in range(n):
        expected[:, w::n] = value(w, round_)
    return int((got != expected).sum())


def run_at_once(targets: list[tuple]) -> None:
    """Run each ``(fn, args)`` of ``targets`` in a spawned process as ``fn(*args, barrier)``, the
    barrier releasing them together; every process must exit cleanly."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(targets))
    procs = [ctx.Process(target=fn, args=(*args, barrier)) for fn, args in targets]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * len(procs)
