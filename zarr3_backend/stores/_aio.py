"""Run many requests of an event loop from synchronous code, a bounded number at a time.

Two shapes: ``run_bounded`` (an async fsspec filesystem's batch: every result, in order) and
``stream_bounded`` (any loop running in another thread: each result as it lands, the caller's
pace bounding how many are outstanding). Unlike ``fsspec.asyn._run_coros_in_chunks``, both
give up early when the endpoint is down: once one request fails in a way that ``give_up`` says
will repeat (a timeout, a refused connection), the requests not yet started are not sent but
answered with that failure. N requests to a stalled server then cost one timeout, not N / limit
of them.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import fsspec.asyn

#: Seconds a closed stream waits for its cancelled requests to wind down on the loop.
CANCEL_WAIT = 10.0


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


class ByteGate:
    """At most ``budget`` bytes of response bodies being read or landed and not yet taken by the
    consumer (one body always passes). A request holds back its body until it gets through, so
    what the server sends waits in the server and the network, not in this process: a stream
    keeps hundreds of requests in flight with a bounded memory. Used on the loop's thread only."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self._by_call: dict[int, int] = {}
        self._waiting: deque[tuple[int, int, asyncio.Future[None]]] = deque()

    async def enter(self, call: int, nbytes: int) -> None:
        """Wait until call ``call`` may read its body of ``nbytes`` bytes, and count them."""
        if not self._waiting and (self.held == 0 or self.held + nbytes <= self.budget):
            self._take(call, nbytes)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((call, nbytes, future))
        await future  # cancelled with its request: the bytes were never counted

    def _take(self, call: int, nbytes: int) -> None:
        self.held += nbytes
        self._by_call[call] = self._by_call.get(call, 0) + nbytes

    def leave(self, call: int) -> None:
        """Call ``call``'s body was taken by the consumer, or failed: let others through."""
        self.held -= self._by_call.pop(call, 0)
        while self._waiting:
            waiting_call, nbytes, future = self._waiting[0]
            if future.cancelled():
                self._waiting.popleft()
                continue
            if self.held and self.held + nbytes > self.budget:
                return
            self._waiting.popleft()
            self._take(waiting_call, nbytes)
            future.set_result(None)


class _Stream:
    """The loop-side state of one ``stream_bounded`` call: which calls have started, the tasks
    still running, and the first give-up failure. Touched only on the loop's thread, except
    ``landed`` (a thread-safe queue) and what ``took`` hands over under its lock."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        calls: Sequence[Callable[[], Awaitable[Any]]],
        give_up: Callable[[BaseException], bool],
    ) -> None:
        self.loop = loop
        self.calls = calls
        self.give_up = give_up
        self.landed: queue.SimpleQueue[tuple[int, object]] = queue.SimpleQueue()
        self.next = 0
        self.closed = False
        self.fatal: BaseException | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # calls whose results the consumer took, for the loop to act on: one wake-up of the loop
        # carries all taken since the last one (a wake-up costs the consumer a GIL hand-off)
        self._taken: list[int] = []
        self._wake_pending = False
        self._taken_lock = threading.Lock()

    async def _one(self, i: int) -> None:
        try:
            result: object = await self.calls[i]()
        except Exception as e:  # a request's failure is its result; cancellation passes through
            if self.fatal is None and self.give_up(e):
                self.fatal = e
            result = e
        self.landed.put((i, result))

    def start(self, count: int) -> None:
        """Send up to ``count`` more requests (on the loop's thread); once the endpoint is
        found down, the rest land at once with that failure, unsent."""
        for _ in range(count):
            if self.closed or self.next >= len(self.calls):
                return
            i, self.next = self.next, self.next + 1
            if self.fatal is not None:
                self.landed.put((i, self.fatal))
                continue
            task = self.loop.create_task(self._one(i))
            self.tasks[i] = task
            task.add_done_callback(lambda _, i=i: self.tasks.pop(i, None))

    def took(self, i: int, gate: ByteGate | None) -> None:
        """The consumer took call ``i``'s result (on the consumer's thread): the loop is woken to
        let its body's bytes leave ``gate`` and start one more request, unless a wake-up is
        already on its way (it then handles this one too) or there is nothing left to do."""
        if gate is None and self.next >= len(self.calls):
            return  # every request has started and no bytes are held (``next`` only grows)
        with self._taken_lock:
            self._taken.append(i)
            if self._wake_pending:
                return
            self._wake_pending = True
        self.loop.call_soon_threadsafe(self._taken_by_consumer, gate)

    def _taken_by_consumer(self, gate: ByteGate | None) -> None:
        """On the loop's thread: the calls taken since the last wake-up leave ``gate``, and as
        many more requests may start."""
        with self._taken_lock:
            taken, self._taken = self._taken, []
            self._wake_pending = False
        if gate is not None:
            for i in taken:
                gate.leave(i)
        self.start(len(taken))

    def cancel(self) -> list[asyncio.Task[None]]:
        """Stop sending and cancel what is outstanding (on the loop's thread)."""
        self.closed = True
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        return tasks

    async def cancel_and_wait(self) -> None:
        """``cancel``, then wait until every cancelled request has wound down."""
        tasks = self.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def stream_bounded(
    loop: asyncio.AbstractEventLoop,
    calls: Sequence[Callable[[], Awaitable[Any]]],
    limit: int,
    give_up: Callable[[BaseException], bool],
    gate: ByteGate | None = None,
) -> Iterator[tuple[int, object]]:
    """Yield ``(i, result)`` for each of ``calls`` as it lands on ``loop`` (running in another
    thread), in completion order; a result is the value or the exception the call raised.
    Calls that read their bodies through ``gate`` (``ByteGate.enter`` with their index) have
    their bytes let go when the consumer takes them.

    At most ``limit`` calls are outstanding or landed but not yet taken: a new one starts when
    the consumer takes one. When the consumer stops early (the generator is closed or
    garbage-collected) the outstanding calls are cancelled and waited for (at most
    ``CANCEL_WAIT`` seconds)."""
    n = len(calls)
    if n == 0:
        return
    stream = _Stream(loop, calls, give_up)
    loop.call_soon_threadsafe(stream.start, max(1, limit))
    taken = 0
    try:
        while taken < n:
            i, result = stream.landed.get()
            taken += 1
            stream.took(i, gate)
            yield i, result
    finally:
        if taken < n:
            _close(stream)


def _close(stream: _Stream) -> None:
    """Cancel a stream's outstanding calls: waited for from any thread but the loop's own (a
    generator collected there cannot wait for the loop it runs on)."""
    loop = stream.loop
    if loop.is_closed() or sys.is_finalizing():  # at exit: the loop's thread may be gone
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        stream.cancel()
        return
    future = asyncio.run_coroutine_threadsafe(stream.cancel_and_wait(), loop)
    try:
        future.result(CANCEL_WAIT)
    except Exception:  # the loop stopped or is stuck: the requests end with it
        future.cancel()
