"""Process-wide thread pools: "io" for store requests, "cpu" for codec work, and "tasks" for work
that itself maps onto those two (several variables written at once), so that their io and cpu
work still runs on its own pools rather than inline.

Codecs in numcodecs release the GIL, so decoding in threads runs on all cores. A task already
running on a pool that maps more work onto the same pool runs it inline (no nested deadlock).
Pools are created lazily with the size ``settings.current()`` gives then (``io_threads``,
``cpu_threads``), made anew when that setting has changed since, and after ``fork`` (dask
workers, multiprocessing). Work runs in the caller's context, so ``settings.using`` blocks
reach it.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from .settings import value as setting_value

T = TypeVar("T")
R = TypeVar("R")


_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
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


def pool_size(kind: str) -> int:
    """The threads of the ``kind`` pool (``"io"``, ``"cpu"`` or ``"tasks"``) as the settings say
    now; ``"tasks"`` runs work that waits on the other two (one variable's whole write), so it
    has as many threads as ``"io"``."""
    return setting_value("cpu_threads" if kind == "cpu" else "io_threads")


def _pool(kind: str, size: int | None = None) -> ThreadPoolExecutor:
    """The ``kind`` pool with ``size`` threads (default: ``pool_size(kind)``); one of another
    size is replaced. The replaced pool is not shut down, only let go: a caller still holding
    it submits and finishes its work, and its idle threads exit once nothing refers to it
    (``ThreadPoolExecutor``'s workers hold it weakly)."""
    size = pool_size(kind) if size is None else size
    known = _pools.get(kind)
    if known is not None and known[0] == size:
        return known[1]
    with _lock:
        known = _pools.get(kind)
        if known is not None and known[0] == size:
            return known[1]

        def mark() -> None:
            _local.kind = kind

        pool = ThreadPoolExecutor(size, thread_name_prefix=f"zarr3-{kind}", initializer=mark)
        _pools[kind] = (size, pool)
    return pool


def _submit(kind: str, size: int, fn: Callable[[T], R], x: T) -> Future[R]:
    """``fn(x)`` on the ``kind`` pool of ``size`` threads, in a copy of the caller's context (so
    ``settings.using`` blocks reach it; one context cannot run in two threads at once)."""
    return _pool(kind, size).submit(contextvars.copy_context().run, fn, x)


def thread_map(fn: Callable[[T], R], items: Iterable[T], kind: str = "cpu") -> list[R]:
    """``[fn(x) for x in items]`` run concurrently on the ``kind`` pool, results in order.

    Runs inline for zero or one item, for a pool of one thread, and when called from a thread
    of the same pool. The first exception raised by any call is re-raised after all calls
    finished.
    """
    items = list(items)
    if len(items) <= 1 or getattr(_local, "kind", None) == kind:
        return [fn(x) for x in items]
    size = pool_size(kind)
    if size <= 1:
        return [fn(x) for x in items]
    futures = [_submit(kind, size, fn, x) for x in items]
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
    size = pool_size(kind)
    if getattr(_local, "kind", None) == kind or size <= 1:
        try:
            for item in items:
                fn(item)
        finally:
            if isinstance(items, Generator):
                items.close()  # a producer of landing values: its outstanding requests stop
        return
    # finished calls are queued by their done-callbacks: the intake settles exactly those, so
    # its bookkeeping per item does not grow with the number of calls running
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
    running: dict[Future, int] = {}
    held = 0
    error: BaseException | None = None

    def settle(f: Future) -> None:
        nonlocal held, error
        held -= running.pop(f)
        exc = f.exception()
        if exc is not None and error is None:
            error = exc

    iterator = iter(items)
    try:
        for item in iterator:
            w = weight(item)
            while running and held + w > limit:
                settle(finished.get())
            if error is not None:
                break
            f = _submit(kind, size, fn, item)
            running[f] = w
            held += w
            f.add_done_callback(finished.put)
            while error is None and not finished.empty():
                settle(finished.get())
            if error is not None:
                break
    finally:
        if error is not None and isinstance(iterator, Generator):
            iterator.close()  # a producer of landing values: its outstanding requests stop
        while running:
            settle(finished.get())
    if error is not None:
        raise error
