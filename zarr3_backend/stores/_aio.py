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

from .base import refuse_open_feed

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

    def holds(self, call: int) -> bool:
        """Whether call ``call``'s body bytes are counted (it read its body through the gate).
        Safe from the consumer's thread for a call whose result it took: the call entered (or
        never will) before its result landed, and only ``leave`` (after the take) removes it."""
        return call in self._by_call

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
    """The state of one ``stream_bounded`` call: which requests have started, the tasks still
    running, and the first give-up failure; touched on the loop's thread, except ``landed`` (a
    thread-safe queue), ``taken`` (written by the consumer only) and what ``took`` hands over
    under its lock."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        requests: Sequence[Any],
        call: Callable[[int], Awaitable[Any]],
        limit: int,
        give_up: Callable[[BaseException], bool],
        gate: ByteGate | None,
    ) -> None:
        self.loop = loop
        self.requests = requests
        self.call = call
        self.limit = limit
        self.give_up = give_up
        self.gate = gate
        self.landed: queue.SimpleQueue[tuple[int, object]] = queue.SimpleQueue()
        self.next = 0  # requests started (only grows; read by the consumer too)
        self.taken = 0  # results the consumer took (only grows; read by the loop too)
        self.closed = False
        self.fatal: BaseException | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # one wake-up of the loop carries everything the consumer did since the last one (a
        # wake-up costs the consumer a GIL hand-off): the gated bodies it took, and room for
        # more requests (taken results, requests added to a RequestFeed)
        self._gated: list[int] = []
        self._wake_pending = False
        self._lock = threading.Lock()

    async def _one(self, i: int) -> None:
        try:
            result: object = await self.call(i)
        except Exception as e:  # a request's failure is its result; cancellation passes through
            if self.fatal is None and self.give_up(e):
                self.fatal = e
            result = e
        self.landed.put((i, result))

    def fill(self) -> None:
        """Start requests while fewer than ``limit`` are outstanding or landed and not taken (on
        the loop's thread); once the endpoint is found down, the rest land at once with that
        failure, unsent."""
        while not self.closed and self.next < len(self.requests) and self.next - self.taken < self.limit:
            i, self.next = self.next, self.next + 1
            if self.fatal is not None:
                self.landed.put((i, self.fatal))
                continue
            task = self.loop.create_task(self._one(i))
            self.tasks[i] = task
            task.add_done_callback(lambda _, i=i: self.tasks.pop(i, None))

    def took(self, i: int) -> None:
        """The consumer took request ``i``'s result (on the consumer's thread): its gated bytes
        are let go and one more request may start, by a wake-up of the loop unless one is
        already on its way or there is nothing to do."""
        self.taken += 1
        if self.gate is not None and self.gate.holds(i):
            with self._lock:
                self._gated.append(i)
        elif self.next >= len(self.requests):
            return  # every request known so far has started, and no bytes are to let go
        self.wake()

    def wake(self) -> None:
        """Have the loop act on what the consumer did (from the consumer's thread)."""
        with self._lock:
            if self._wake_pending:
                return
            self._wake_pending = True
        self.loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        with self._lock:
            gated, self._gated = self._gated, []
            self._wake_pending = False
        if self.gate is not None:
            for i in gated:
                self.gate.leave(i)
        self.fill()

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
    requests: Sequence[Any],
    call: Callable[[int], Awaitable[Any]],
    limit: int,
    give_up: Callable[[BaseException], bool],
    gate: ByteGate | None = None,
) -> Iterator[tuple[int, object]]:
    """Yield ``(i, result)`` for each of ``requests`` as it lands on ``loop`` (running in
    another thread), in completion order: ``call(i)`` sends request ``i``; a result is its value
    or the exception it raised. Calls that read their bodies through ``gate``
    (``ByteGate.enter`` with their index) have their bytes let go when the consumer takes them.

    At most ``limit`` requests are outstanding or landed but not yet taken: a new one starts
    when the consumer takes one. ``requests`` may be a ``RequestFeed`` the consumer extends
    between the results it takes: the stream then ends once it is closed and all answered.
    When the consumer stops early (the generator is closed or garbage-collected) the
    outstanding requests are cancelled and waited for (at most ``CANCEL_WAIT`` seconds)."""
    stream = _Stream(loop, requests, call, max(1, limit), give_up, gate)
    try:
        while True:
            if stream.taken == len(requests):
                refuse_open_feed(requests)
                return
            if stream.next < len(requests) and stream.next - stream.taken < stream.limit:
                stream.wake()  # the first requests, or ones the consumer added
            i, result = stream.landed.get()
            stream.took(i)
            yield i, result
    finally:
        if stream.taken < len(requests):
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
