"""Run many requests of an async fsspec filesystem from synchronous code, a bounded number at a time.

Unlike ``fsspec.asyn._run_coros_in_chunks``, a batch gives up early when the endpoint is down:
once one request fails in a way that ``give_up`` says will repeat (a timeout, a refused
connection), the requests not yet started are not sent but answered with that failure. A batch
of N requests to a stalled server then costs one timeout, not N / limit of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import fsspec.asyn


async def _bounded(
    calls: Sequence[Callable[[], Awaitable[Any]]],
    limit: int,
    give_up: Callable[[BaseException], bool],
) -> list[object]:
    semaphore = asyncio.Semaphore(limit)
    fatal: list[BaseException] = []

    async def one(call: Callable[[], Awaitable[Any]]) -> object:
        async with semaphore:
            if fatal:
                return fatal[0]
            try:
                return await call()
            except Exception as e:
                if give_up(e) and not fatal:
                    fatal.append(e)
                return e

    return list(await asyncio.gather(*(one(c) for c in calls)))


def run_bounded(
    fs: Any,
    calls: Sequence[Callable[[], Awaitable[Any]]],
    limit: int,
    give_up: Callable[[BaseException], bool],
) -> list[object]:
    """Await each of ``calls`` on ``fs``'s event loop, at most ``limit`` at a time; each result
    is the value or the exception it raised (in order)."""
    if not calls:
        return []
    return fsspec.asyn.sync(fs.loop, _bounded, calls, limit, give_up)
