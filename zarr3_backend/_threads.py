"""Two process-wide thread pools: "io" for store requests, "cpu" for codec work.

Codecs in numcodecs release the GIL, so decoding in threads runs on all cores. A task already
running on a pool that maps more work onto the same pool runs it inline (no nested deadlock).
Pools are created lazily and re-created after ``fork`` (dask workers, multiprocessing).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")

_SIZES = {
    "io": int(os.environ.get("ZARR3_IO_THREADS", "32")),
    "cpu": int(os.environ.get("ZARR3_CPU_THREADS", str(os.cpu_count() or 1))),
}
_pools: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()
_local = threading.local()
_scratch = threading.local()

#: Scratch buffers larger than this are not kept between calls (bounded memory per thread).
SCRATCH_KEEP_MAX = 64 * 2**20


def _reset_after_fork() -> None:
    global _lock
    _pools.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _pool(kind: str) -> ThreadPoolExecutor:
    pool = _pools.get(kind)
    if pool is None:
        with _lock:
            pool = _pools.get(kind)
            if pool is None:

                def mark() -> None:
                    _local.kind = kind

                pool = ThreadPoolExecutor(_SIZES[kind], thread_name_prefix=f"zarr3-{kind}", initializer=mark)
                _pools[kind] = pool
    return pool


def thread_map(fn: Callable[[T], R], items: Iterable[T], kind: str = "cpu") -> list[R]:
    """``[fn(x) for x in items]`` run concurrently on the ``kind`` pool, results in order.

    Runs inline for zero or one item, and when called from a thread of the same pool.
    The first exception raised by any call is re-raised after all calls finished.
    """
    items = list(items)
    if len(items) <= 1 or getattr(_local, "kind", None) == kind or _SIZES[kind] <= 1:
        return [fn(x) for x in items]
    futures = [_pool(kind).submit(fn, x) for x in items]
    results: list[R] = []
    error: BaseException | None = None
    for f in futures:
        try:
            results.append(f.result())
        except BaseException as e:  # collect, then re-raise the first
            if error is None:
                error = e
    if error is not None:
        raise error
    return results


def scratch_buffer(nbytes: int, slot: int = 0) -> memoryview:
    """A writable ``nbytes``-byte buffer owned by the calling thread, reused by its next call with
    the same ``slot``: chunk I/O without allocating (and page-faulting) fresh memory per chunk.

    The caller must be done with the buffer before the same thread asks for ``slot`` again.
    """
    buffers = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    buf = buffers.get(slot)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(max(nbytes, 1), dtype=np.uint8)
        if nbytes <= SCRATCH_KEEP_MAX:
            buffers[slot] = buf
    return memoryview(buf)[:nbytes]


def map_bounded(
    fn: Callable[[T], None],
    items: Iterable[T],
    weight: Callable[[T], int],
    limit: int,
    kind: str = "cpu",
) -> None:
    """Run ``fn`` on each of ``items`` on the ``kind`` pool as they come, while the ``weight``
    of the items handed out but not finished stays within ``limit`` (one item always goes):
    a producer that yields as data lands is consumed at the pace of the workers, with bounded
    memory. The first error stops the intake (the iterator is closed) and is raised once the
    running calls finished. Runs inline when called from a thread of the same pool."""
    if getattr(_local, "kind", None) == kind or _SIZES[kind] <= 1:
        for item in items:
            fn(item)
        return
    pool = _pool(kind)
    running: dict[Future, int] = {}
    held = 0
    error: BaseException | None = None

    def settle(done: Iterable[Future]) -> None:
        nonlocal held, error
        for f in done:
            held -= running.pop(f)
            exc = f.exception()
            if exc is not None and error is None:
                error = exc

    iterator = iter(items)
    try:
        for item in iterator:
            w = weight(item)
            while running and held + w > limit:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                settle(done)
            if error is not None:
                break
            running[pool.submit(fn, item)] = w
            held += w
            if error is None:
                settle([f for f in running if f.done()])
            if error is not None:
                break
    finally:
        if error is not None and isinstance(iterator, Generator):
            iterator.close()  # a producer of landing values: its outstanding requests stop
        done, _ = wait(list(running))
        settle(done)
    if error is not None:
        raise error
