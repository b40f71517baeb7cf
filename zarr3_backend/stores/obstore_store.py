"""ObstoreStore: a store on obstore (Rust ``object_store``) for S3, GCS, Azure and HTTP(S).

Object-store latency, not CPU, sets the pace of remote reads, so every batched call sends its
requests concurrently from ONE asyncio event loop that this module owns (a daemon thread; calls
are submitted with ``asyncio.run_coroutine_threadsafe``), at most ``requests_in_flight`` (a
setting, default 256) in flight, never a thread per request; streamed reads hand each value
over as it lands. obstore's own retry layer (bounded: ``retries``,
default 3, within 60 s) is the only one; a batch stops sending once the endpoint is found down.

Missing keys read as ``None``; byte ranges follow ByteRange (suffix, open-ended, clipped at the
end of the value). On S3, ``get_versioned``/``set_if``/``erase_if`` are a real compare-and-swap
on the object's ETag (``If-Match`` / ``If-None-Match``). The store pickles by URL and options.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    NotModifiedError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from ..byte_range import ByteRange
from ..errors import StoreError, Zarr3Error
from ._aio import ByteGate, _bounded, stream_bounded
from .base import BytesLike, Store, StoreArgumentError, dir_prefix, validate_key, validate_prefix
from .fsspec_errors import (
    BucketNotFoundError,
    ResponseMismatchError,
    StoreAccessError,
    StoreTimeoutError,
    StoreUnreachableError,
    error_class,
    is_missing_container,
    is_unsatisfiable_range,
)
from .fsspec_options import OBJECT_STORE_COALESCE_GAP, SETTINGS_KEY, split_storage_options
from .obstore_options import ObstoreTarget, obstore_target
from .range_answers import undo_content_encoding

#: How long a presigned conditional DELETE URL stays valid (it is used at once).
_SIGN_FOR = timedelta(minutes=5)
_MISSING = (FileNotFoundError, NotFoundError)
# obstore reports transport failures as GenericError text (reqwest's): sorted by what it says
_CONNECT_FAILURES = (
    "connection refused",
    "tcp connect error",
    "dns error",
    "connection reset",
    "connection closed",
)
_TIMED_OUT = re.compile(r"timed ?out")
# object_store's HTTP store reads only answers that declare their length
_NO_LENGTH = "content-length header missing"
# object_store's check of a 206 answer's Content-Range against the range asked
_OTHER_RANGE = re.compile(r"requested (\d+)\.\.(\d+), got (\d+)\.\.(\d+)")


# ---- the one event loop -------------------------------------------------------------------------
class _LoopThread:
    """An asyncio loop running forever in a daemon thread, made anew in a forked process.

    obstore's Rust runtime is not fork-safe: in a process forked after it ran, its requests
    never complete. Such a process gets a StoreError at once instead of a hang.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._ran_in: int | None = None  # the process whose obstore runtime has started

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._ran_in is not None and self._ran_in != os.getpid():
                raise StoreError(
                    "ObstoreStore cannot run in a process forked after obstore was used in its parent "
                    "(obstore's runtime threads stayed behind): start worker processes with the "
                    "'spawn' or 'forkserver' method, or use the fsspec backend "
                    f"(storage_options={{{SETTINGS_KEY!r}: {{'backend': 'fsspec'}}}})"
                )
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="zarr3-obstore-loop", daemon=True)
                thread.start()
                self._loop, self._pid = loop, os.getpid()
            self._ran_in = os.getpid()
            return self._loop

    def run(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on the loop and wait for its result (from any thread but the loop's)."""
        try:
            loop = self.loop()
        except StoreError:
            coro.close()  # type: ignore[attr-defined]  # never started: no "never awaited" warning
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]


_LOOP = _LoopThread()


# ---- errors -------------------------------------------------------------------------------------
def _text(exc: BaseException) -> str:
    try:
        return str(exc).lower()
    except Exception:
        return ""


def _error_class(exc: BaseException) -> type[StoreError]:
    """The StoreError subclass for an obstore failure (its classes and messages), falling back
    to the rules for fsspec's clients."""
    text = _text(exc)
    if is_missing_container(exc):
        return BucketNotFoundError
    # this store sends no conditional GET: a 304 is a broken answer, as a range not asked for
    if _OTHER_RANGE.search(text) or isinstance(exc, NotModifiedError):
        return ResponseMismatchError
    if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or " 403 " in text or " 401 " in text:
        return StoreAccessError
    if any(s in text for s in _CONNECT_FAILURES):
        return StoreUnreachableError
    if _TIMED_OUT.search(text):
        return StoreTimeoutError
    return error_class(exc)


def _is_endpoint_down(exc: BaseException) -> bool:
    """Further requests would fail the same way now (obstore already retried this one)."""
    return _error_class(exc) in (StoreTimeoutError, StoreUnreachableError)


def _range_refused(exc: BaseException) -> bool:
    """The server would not serve the range as asked (answered the whole value: obstore's
    HTTPStore says "range request not supported", its other stores "non-partial response";
    or obstore refused the range itself, or could not parse the answer's Content-Range: a
    complete length of "*", MinIO's "bytes 0--1/0"): worth asking for the whole value."""
    text = _text(exc)
    return isinstance(exc, ValueError) or any(
        s in text.lower()
        for s in (
            "non-partial response",
            "range request not supported",
            "failed to parse value for content_range",
        )
    )


async def _body(got: Any, r: ByteRange | None = None) -> Any:
    """The value's bytes (or range ``r`` of them) in obstore's answer ``got``: its body, when
    it holds the bytes its range names (obstore checks that range against the one asked) in
    no Content-Encoding, or one undone for a whole value (``range_answers``); else
    ResponseMismatchError. Not copied unless decoded. (To a GET with no range, object_store
    reports any answer as the whole value: a 206 naming a part of it cannot be told here.)"""
    body = await got.bytes_async()
    start, stop = got.range
    if len(body) != stop - start:
        asked = "the value" if r is None else str(r)
        raise ResponseMismatchError(
            f"the answer to {asked} names bytes [{start}, {stop}) but its body holds {len(body)} bytes"
        )
    whole = start == 0 and stop == int(got.meta["size"])
    return undo_content_encoding(body, got.attributes.get("Content-Encoding"), whole)


def _typed(action: str, where: str, exc: BaseException, note: str = "") -> StoreError:
    other = _OTHER_RANGE.search(_text(exc))
    if other is not None:  # in range_answers' words, without obstore's debug dump
        a, b, c, d = other.groups()
        detail = f"ResponseMismatchError: 206 answer names bytes [{c}, {d}) for bytes [{a}, {b})"
        return ResponseMismatchError(f"{action} {where!r} failed{note}: {detail}")
    if _NO_LENGTH in _text(exc):
        note += (
            " (the server sent no Content-Length, as with chunked transfer encoding, which obstore's "
            "HTTP store cannot read: use the fsspec backend, "
            f"storage_options={{{SETTINGS_KEY!r}: {{'backend': 'fsspec'}}}})"
        )
    return _error_class(exc)(f"{action} {where!r} failed{note}: {type(exc).__name__}: {exc}")


def _pop_unguarded(
    storage_options: dict[str, Any] | None, explicit: bool | None
) -> tuple[bool | None, dict[str, Any] | None]:
    """``unguarded_partial_writes`` from the keyword or the ``"zarr3"`` section (they must agree),
    and the options without it."""
    section = (storage_options or {}).get(SETTINGS_KEY)
    given = explicit
    if isinstance(section, dict) and "unguarded_partial_writes" in section:
        given = section["unguarded_partial_writes"]
        if explicit is not None and explicit != given:
            raise StoreArgumentError(
                f"store setting unguarded_partial_writes given twice: {explicit!r} as a keyword and "
                f"{given!r} in storage_options[{SETTINGS_KEY!r}]"
            )
        rest = {k: v for k, v in section.items() if k != "unguarded_partial_writes"}
        storage_options = {k: v for k, v in storage_options.items() if k != SETTINGS_KEY}  # type: ignore[union-attr]
        if rest:
            storage_options[SETTINGS_KEY] = rest
    if given is not None and not isinstance(given, bool):
        raise StoreArgumentError(
            f"store setting unguarded_partial_writes must be a bool or None, got {given!r}"
        )
    return given, storage_options


def _version(key: str, expected: Any) -> tuple[str | None, str | None]:
    """An ``(ETag, version)`` token as ``get_versioned`` returns it; anything else is refused."""
    if not (isinstance(expected, tuple) and len(expected) == 2 and isinstance(expected[0], str)):
        raise StoreArgumentError(
            f"expected version for key {key!r} must be an (ETag, version) pair from get_versioned, got {expected!r}"
        )
    return expected


# ---- obstore store objects, shared ------------------------------------------------------------
#: obstore store objects by their configuration, shared by every ObstoreStore of this process
#: built the same way. Each holds its HTTP client's pool of open connections: a dataset opened
#: again (or a second store on the same root) reuses warm connections instead of connecting,
#: and loading TLS roots, afresh; for a whole-array read of 512 objects that was 40% of the
#: client's CPU. fsspec keeps its filesystem instances for the same reason. The least recently
#: used beyond ``_SHARED_MAX`` are let go (their idle connections close).
_SHARED: OrderedDict[str, Any] = OrderedDict()
_SHARED_LOCK = threading.Lock()
_SHARED_MAX = 32
#: obstore's constructors also read the environment variables with these prefixes (endpoints,
#: keys, session tokens): a change there must give a new client.
_ENV_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_", "OBJECT_STORE_")


def _forget_shared() -> None:
    """In a forked child: a parent's clients are no use, and its lock may be held."""
    global _SHARED_LOCK
    _SHARED.clear()
    _SHARED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_shared)


def _shared_key(target: ObstoreTarget) -> str:
    """What makes two obstore clients the same: the whole configuration (credentials
    included) and a digest of the environment obstore reads, not only the URL."""
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))
    return repr(target) + hashlib.sha256(repr(env).encode()).hexdigest()


def _shared_client(target: ObstoreTarget, url: str) -> Any:
    """The obstore store object for ``target``: a shared one, or made now."""
    key = _shared_key(target)
    with _SHARED_LOCK:
        client = _SHARED.get(key)
        if client is not None:
            _SHARED.move_to_end(key)
            return client
    try:
        if target.kind == "http":
            client = obstore.store.HTTPStore.from_url(
                target.url, client_options=target.client_options, retry_config=target.retry_config
            )
        else:
            client = obstore.store.from_url(
                target.url,
                config=target.config,
                client_options=target.client_options,
                retry_config=target.retry_config,
            )
    except Exception as e:  # UnknownConfigurationKeyError, values of the wrong type, ...
        raise StoreArgumentError(f"cannot open an obstore store for {url!r}: {e}") from e
    with _SHARED_LOCK:
        client = _SHARED.setdefault(key, client)  # another thread may have made one meanwhile
        while len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
    return client


def _rebuild(url: str, storage_options: dict[str, Any], read_only: bool) -> ObstoreStore:
    """Pickle helper: the store anew from its URL and options (the client is made on first use)."""
    return ObstoreStore(url, storage_options, read_only=read_only)


class ObstoreStore(Store):
    """A store on obstore for ``s3://``, ``gs://``, ``az://`` (``abfs://``) and ``http(s)://``
    URLs (``http(s)``: read-only by default).

    ``storage_options`` are fsspec-style (s3fs' ``key``, ``secret``, ``anon``, ``endpoint_url``,
    ``client_kwargs``, ``config_kwargs``; gcsfs' ``token``; adlfs' ``account_name``, ...) or
    obstore's own configuration keys (see ``obstore_options``), plus the store's section
    ``"zarr3": {"retries": ..., "unguarded_partial_writes": ..., <setting>: ...}``
    (``retries``: obstore's retries of a transient failure, default 3;
    ``unguarded_partial_writes``: where there are no conditional writes (GCS, Azure here),
    allow partial chunk/shard writes that a concurrent writer could undo; refused by default;
    any ``zarr3_backend.settings`` name, e.g. ``requests_in_flight``: requests in flight per
    batched or streamed call, whose older name ``batch_size`` is accepted too). The same can
    be given as keywords (``settings=`` for the package's settings).
    """

    costly_requests = True
    holds_half_window = True  # stream_partial_values' ByteGate
    default_coalesce_gap = OBJECT_STORE_COALESCE_GAP

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        *,
        read_only: bool | None = None,
        batch_size: int | None = None,
        retries: int | None = None,
        unguarded_partial_writes: bool | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise StoreArgumentError(f"ObstoreStore needs a URL string, got {type(url).__name__}")
        unguarded, storage_options = _pop_unguarded(storage_options, unguarded_partial_writes)
        options, own = split_storage_options(storage_options)
        own = own.merged(settings, retries=retries, batch_size=batch_size)
        self.url = url.rstrip("/")
        self._target: ObstoreTarget = obstore_target(self.url, options, own.retries)
        super().__init__(
            read_only=self._target.kind == "http" if read_only is None else read_only, settings=own.overrides
        )
        self._user_options = dict(storage_options or {})
        zarr3 = dict(self._user_options.get(SETTINGS_KEY) or {})
        explicit = (("retries", retries), ("batch_size", batch_size), ("unguarded_partial_writes", unguarded))
        zarr3.update({k: v for k, v in explicit if v is not None})
        zarr3.update(settings or {})
        if zarr3:
            self._user_options[SETTINGS_KEY] = zarr3
        self.unguarded_partial_writes = bool(unguarded)
        self._client: Any = None
        self._pid = 0
        self._client_lock = threading.Lock()
        self._open()  # configuration errors surface now, as typed errors; no request is sent

    @classmethod
    def from_url(
        cls,
        url: str,
        storage_options: dict[str, Any] | None = None,
        read_only: bool | None = None,
        *,
        batch_size: int | None = None,
        retries: int | None = None,
        unguarded_partial_writes: bool | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> ObstoreStore:
        """The store for ``url`` (the same as the constructor; named like FsspecStore's)."""
        return cls(
            url,
            storage_options,
            read_only=read_only,
            batch_size=batch_size,
            retries=retries,
            unguarded_partial_writes=unguarded_partial_writes,
            settings=settings,
        )

    # ---- configuration ---------------------------------------------------------------------
    def _open(self) -> Any:
        """The obstore store object, made in this process (anew after a fork): shared with
        every ObstoreStore built the same way (``_shared_client``)."""
        with self._client_lock:
            if self._client is None or self._pid != os.getpid():
                self._client, self._pid = _shared_client(self._target, self.url), os.getpid()
            return self._client

    @property
    def batch_size(self) -> int:
        """Requests one batched or streamed call keeps in flight: the ``requests_in_flight``
        setting in force for this store (``batch_size`` is its older name)."""
        return self.settings.requests_in_flight

    @property
    def kind(self) -> str:
        """The backend behind the URL: ``"s3"``, ``"gcs"``, ``"azure"`` or ``"http"``."""
        return self._target.kind

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options as the user gave them (the store's settings in their ``"zarr3"`` section)."""
        return dict(self._user_options)

    @property
    def supports_conditional_writes(self) -> bool:  # type: ignore[override]
        """S3 only: ETag ``If-Match``/``If-None-Match`` puts and deletes (obstore's puts, and a
        presigned DELETE for ``erase_if``). GCS and Azure are not yet tested here."""
        return self._target.kind == "s3"

    @property
    def refuses_unguarded_partial_writes(self) -> bool:  # type: ignore[override]
        """Without conditional writes a partial chunk/shard write is refused unless allowed."""
        return not self.supports_conditional_writes and not self.unguarded_partial_writes

    def _key_url(self, key: str) -> str:
        return f"{self.url}/{key}"

    # ---- running requests ------------------------------------------------------------------
    def _batch(self, action: str, calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[object]:
        """Await ``calls`` on the loop, at most ``requests_in_flight`` at a time; each result is
        the value or the exception it raised. Once the endpoint is found down the rest are not sent."""
        if not calls:
            return []
        try:
            return _LOOP.run(_bounded(calls, self.settings.requests_in_flight, _is_endpoint_down))
        except Zarr3Error:
            raise
        except Exception as e:  # the loop itself failed (never a request's failure)
            raise _typed(action, self.url, e) from e

    def _one(self, action: str, key: str, call: Callable[[], Awaitable[Any]]) -> Any:
        result = self._batch(action, [call])[0]
        if isinstance(result, BaseException):
            raise _typed(action, self._key_url(key), result) from result
        return result

    def _missing(self, key: str, error: BaseException, action: str) -> None:
        """A "not found" for ``key``: fine, unless it is the bucket that is missing."""
        if is_missing_container(error):
            raise BucketNotFoundError(
                f"{action} {self._key_url(key)!r} failed: the bucket of {self.url!r} does not exist: {error}"
            ) from error

    def _value(self, key: str, result: object, *, copy: bool = True) -> BytesLike | None:
        """One fetched result: None for a missing key, a typed StoreError for a failure, else
        the value: as ``bytes`` (``copy``), or a read-only view of the buffer obstore filled
        (no copy; the view keeps that buffer alive)."""
        if isinstance(result, _MISSING):
            self._missing(key, result, "reading")
            return None
        if isinstance(result, BaseException):
            raise _typed("reading", self._key_url(key), result) from result
        view = memoryview(result)  # type: ignore[arg-type]
        return bytes(view) if copy else view

    # ---- reading ---------------------------------------------------------------------------
    async def _read(self, key: str, r: ByteRange | None) -> BytesLike | obstore.Bytes:
        """One value or range, clipped to the value as ByteRange says, in the buffer obstore
        filled (not copied); raises when missing."""
        client = self._client
        if r is None or (r.offset == 0 and r.length is None):
            return await _body(await obstore.get_async(client, key))
        if r.length == 0:  # no request can say "0 bytes": ask whether it exists
            await self._exists(key)
            return b""
        if r.is_suffix:
            asked: Any = {"suffix": -r.offset}
        else:
            asked = {"offset": r.offset} if r.length is None else (r.offset, r.offset + r.length)
        try:
            return await _body(await obstore.get_async(client, key, options={"range": asked}), r)
        except _MISSING:
            raise
        except Exception as e:
            if is_unsatisfiable_range(e):  # 416: starts past the end of a value that exists?
                await self._check_past_end(key, r)
                return b""
            if not _range_refused(e):
                raise
        whole = await _body(await obstore.get_async(client, key))  # e.g. an empty value
        return r.apply(memoryview(whole))

    async def _check_past_end(self, key: str, r: ByteRange) -> None:
        """A 416 answered range ``r`` of ``key``: right only when it starts past the end of the
        value (a suffix: of an empty value), which its size (a HEAD, only on this rare path)
        tells; a 416 for a range inside the value raises ResponseMismatchError."""
        size = int((await obstore.head_async(self._client, key))["size"])
        if (size > 0) if r.is_suffix else (r.offset < size):
            raise ResponseMismatchError(f"HTTP 416 for {r} of a value of {size} bytes")

    async def _exists(self, key: str) -> bool:
        """True when ``key`` holds a value: a GET of its first byte (not HEAD: a HEAD answer has
        no body to tell a missing bucket from a missing key); raises when it is missing."""
        try:
            await obstore.get_range_async(self._client, key, start=0, length=1)
        except _MISSING:
            raise
        except Exception as e:
            if not (is_unsatisfiable_range(e) or _range_refused(e)):  # 416: an empty value
                raise
        return True

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the value)."""
        return self.get_partial_values([(key, byte_range)])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of many keys, concurrently on the store's event loop, as ``bytes`` (callers
        parse documents from them; the chunk pipeline reads through ``stream_partial_values``,
        which hands over views without a copy)."""
        results = self._fetch([(k, None) for k in keys])
        return [self._value(k, res) for k, res in zip(keys, results, strict=True)]

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        """Byte ranges of many keys, concurrently, one request per range (the caller merges
        neighbouring ranges by ``coalesce_gap``). Values are ``bytes``."""
        out = self._fetch(key_ranges)
        return [self._value(k, res) for (k, _), res in zip(key_ranges, out, strict=True)]  # type: ignore[misc]

    def stream_partial_values(
        self, key_ranges: Sequence[tuple[str, ByteRange | None]], *, in_flight: int | None = None
    ) -> Iterator[tuple[int, BytesLike | None]]:
        """``(position, value)`` for each of ``key_ranges`` as it lands (see ``Store``): one
        request per range on the store's event loop, at most ``in_flight`` (default:
        ``requests_in_flight``) outstanding or landed but not taken; each value a read-only
        view of the buffer obstore filled (no copy). Closing the iterator early cancels the
        outstanding requests."""
        for key, _ in key_ranges:
            validate_key(key)
        self._open()
        settings = self.settings
        limit = max(1, in_flight or settings.requests_in_flight)
        # whole values: a body is read only as memory allows (half the window: the consumer
        # keeps the other half for what it was handed and has not decoded yet)
        gate = ByteGate(max(1, settings.window_bytes // 2))
        checked = len(key_ranges)

        def call(i: int) -> Awaitable[Any]:
            key, r = key_ranges[i]
            if i >= checked:  # added to a RequestFeed since
                validate_key(key)
            if r is None or (r.offset == 0 and r.length is None):
                return self._read_whole(key, gate, i)
            return self._read(key, r)

        landed = stream_bounded(_LOOP.loop(), key_ranges, call, limit, _is_endpoint_down, gate)
        return self._settle_stream(landed, key_ranges)

    async def _read_whole(self, key: str, gate: ByteGate, call: int) -> Any:
        """One whole value whose body is read only once ``gate`` lets its size through (the
        request, and the server's answer, are in flight meanwhile); raises when missing."""
        got = await obstore.get_async(self._client, key)
        await gate.enter(call, int(got.meta["size"]))
        try:
            return await _body(got)
        except BaseException:
            gate.leave(call)
            raise

    def _settle_stream(
        self, landed: Iterator[tuple[int, object]], key_ranges: Sequence[tuple[str, ByteRange | None]]
    ) -> Iterator[tuple[int, BytesLike | None]]:
        with contextlib.closing(landed):  # an early stop cancels what is still outstanding
            for i, result in landed:
                yield i, self._value(key_ranges[i][0], result, copy=False)

    def _fetch(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[object]:
        """Each range's result (obstore's buffer, or the exception), concurrently."""
        for key, _ in key_ranges:
            validate_key(key)
        self._open()
        # one request per range: callers merge neighbouring ranges by this store's
        # ``coalesce_gap`` first (obstore's get_ranges would merge again, by its own 1 MiB)
        calls = [lambda key=key, r=r: self._read(key, r) for key, r in key_ranges]
        return self._batch("reading", calls)

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value: one request for its first byte."""
        return self.exists_many([key])[0]

    def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key holds a value: a one-byte GET per key, concurrently."""
        for key in keys:
            validate_key(key)
        self._open()
        results = self._batch("checking", [lambda k=k: self._exists(k) for k in keys])
        found = []
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, _MISSING):
                self._missing(key, result, "checking")
                found.append(False)
            elif isinstance(result, BaseException):
                raise _typed("checking", self._key_url(key), result) from result
            else:
                found.append(True)
        return found

    # ---- writing ---------------------------------------------------------------------------
    @staticmethod
    def _payload(value: BytesLike) -> bytes | memoryview:
        """``value`` as obstore takes it (a flat byte buffer), copied only when it is not
        contiguous: the call returns only once the PUT is done, so no copy is needed."""
        if isinstance(value, bytes):
            return value
        view = memoryview(value)
        return view.cast("B") if view.c_contiguous else view.tobytes()

    def set(self, key: str, value: BytesLike) -> None:
        """Write ``value`` under ``key`` (one PUT; atomic for readers)."""
        self.set_many({key: value})

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Write many values (every key checked first), one PUT each, concurrently; a failed
        key is named in the error, the others are written."""
        for key in items:
            self.check_writable(key)
            validate_key(key)
        client = self._open()
        pairs = [(k, self._payload(v)) for k, v in items.items()]
        calls = [lambda k=k, v=v: obstore.put_async(client, k, v, use_multipart=False) for k, v in pairs]
        results = self._batch("writing", calls)
        failed = [(k, r) for (k, _), r in zip(pairs, results, strict=True) if isinstance(r, BaseException)]
        if failed:
            (key, error), others = failed[0], len(failed) - 1
            note = f" (and {others} more keys)" if others else ""
            raise _typed("writing", self._key_url(key), error, note) from error

    def erase(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        self.erase_many([key])

    def erase_many(self, keys: Iterable[str]) -> None:
        """Remove many keys (every key checked first) in bulk deletes; missing keys are ignored."""
        keys = list(keys)
        for key in keys:
            self.check_writable(key)
            validate_key(key)
        if not keys:
            return
        client = self._open()
        step = 1000  # S3's DeleteObjects takes at most 1000 keys
        chunks = [keys[i : i + step] for i in range(0, len(keys), step)]
        results = self._batch("erasing", [lambda c=c: obstore.delete_async(client, c) for c in chunks])
        for chunk, result in zip(chunks, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, _MISSING):
                raise _typed(
                    "erasing", f"{self.url} ({len(chunk)} keys from {chunk[0]!r})", result
                ) from result

    def move(self, src: str, dst: str) -> None:
        """Server-side copy of ``src`` to ``dst`` (atomic for readers of ``dst``), then delete
        ``src``; a missing ``src`` does nothing (a re-run move)."""
        self.check_writable(dst)
        validate_key(src)
        validate_key(dst)
        client = self._open()
        result = self._batch("moving", [lambda: obstore.copy_async(client, src, dst)])[0]
        if isinstance(result, _MISSING):
            self._missing(src, result, "moving")
            return
        if isinstance(result, BaseException):
            raise _typed("moving", f"{self._key_url(src)} -> {dst}", result) from result
        self.erase(src)

    def move_prefix(self, src: str, dst: str) -> None:
        """Every key under ``src`` copied server-side to its name under ``dst`` (each copy atomic
        for readers of its destination), all in one batch, then the sources erased in bulk
        requests (S3's DeleteObjects takes 1,000 keys). ``move`` per key cost a delete request
        each: a commit's staged values took three requests per chunk on S3, now two. A source
        already gone (moved by an earlier run of the same commit) is skipped."""
        self.check_writable(dst or None)
        keys = list(self.list_prefix(src))
        if not keys:
            return
        client = self._open()
        targets = [dst + k[len(src) :] for k in keys]
        for target in targets:
            validate_key(target)
        calls = [
            lambda k=k, t=t: obstore.copy_async(client, k, t) for k, t in zip(keys, targets, strict=True)
        ]
        results = self._batch("moving", calls)
        for key, target, result in zip(keys, targets, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, _MISSING):
                raise _typed("moving", f"{self._key_url(key)} -> {target}", result) from result
        self.erase_many(keys)  # only once every copy is in place: a re-run copies them again

    # ---- conditional writes ----------------------------------------------------------------
    def _check_conditional(self, key: str) -> None:
        if not self.supports_conditional_writes:
            from ..errors import WriteConflictError

            raise WriteConflictError(
                f"store {self!r} has no tested conditional writes for {self.kind} URLs; "
                f"cannot compare-and-swap key {key!r}"
            )

    def get_versioned(self, key: str) -> tuple[bytes | None, Hashable | None]:
        """``(value, (ETag, version))`` read in one GET; ``(None, None)`` when missing."""
        validate_key(key)
        self._check_conditional(key)
        client = self._open()

        async def read() -> tuple[bytes, Hashable]:
            got = await obstore.get_async(client, key)
            meta = got.meta
            return bytes(await _body(got)), (meta["e_tag"], meta["version"])

        result = self._batch("reading", [read])[0]
        if isinstance(result, _MISSING):
            self._missing(key, result, "reading")
            return None, None
        if isinstance(result, BaseException):
            raise _typed("reading", self._key_url(key), result) from result
        return result  # type: ignore[return-value]

    def set_if(self, key: str, value: BytesLike, expected: Hashable | None) -> bool:
        """PUT ``value`` only while the stored version is ``expected`` (None: while the key is
        missing: ``If-None-Match: *``; else ``If-Match: <ETag>``); False when another writer won."""
        self.check_writable(key)
        validate_key(key)
        self._check_conditional(key)
        client = self._open()
        if expected is None:
            mode: Any = "create"
        else:
            e_tag, version = _version(key, expected)
            mode = {k: v for k, v in (("e_tag", e_tag), ("version", version)) if v is not None}
        data = self._payload(value)
        result = self._batch("writing", [lambda: obstore.put_async(client, key, data, mode=mode)])[0]
        if isinstance(result, PreconditionError | AlreadyExistsError):
            return False
        if isinstance(result, _MISSING) and expected is not None:
            self._missing(key, result, "writing")
            return False  # If-Match on a key erased meanwhile
        if isinstance(result, BaseException):
            raise _typed("writing", self._key_url(key), result) from result
        return True

    def erase_if(self, key: str, expected: Hashable) -> bool:
        """DELETE ``key`` only while its ETag is ``expected``: obstore sends no conditional
        DELETE, so the request is presigned by obstore and sent with ``If-Match`` (stdlib
        urllib, in the loop's executor: one rare request needs no HTTP client of its own)."""
        self.check_writable(key)
        validate_key(key)
        self._check_conditional(key)
        if expected is None:
            return False
        e_tag, _ = _version(key, expected)
        client = self._open()

        async def delete() -> int:
            url = await obstore.sign_async(client, "DELETE", key, _SIGN_FOR)
            request = urllib.request.Request(url, method="DELETE", headers={"If-Match": e_tag})

            def send() -> int:
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        return response.status
                except urllib.error.HTTPError as e:
                    return e.code

            return await asyncio.get_running_loop().run_in_executor(None, send)

        status = self._one("erasing", key, delete)
        if status in (412, 404):  # replaced or erased meanwhile
            return False
        if status >= 300:
            raise StoreError(f"erasing {self._key_url(key)!r} failed: HTTP {status}")
        return True

    # ---- listing ---------------------------------------------------------------------------
    def _list(self, prefix: str | None) -> list[str]:
        client = self._open()

        async def collect() -> list[str]:
            paths: list[str] = []
            async for batch in obstore.list(client, prefix, chunk_size=1000):
                paths.extend(m["path"] for m in batch)
            return paths

        where = self._key_url(prefix) if prefix else self.url
        result = self._batch("listing", [collect])[0]
        if isinstance(result, _MISSING) and not is_missing_container(result):
            return []
        if isinstance(result, BaseException):
            raise _typed("listing", where, result, self._listing_note()) from result
        return result  # type: ignore[return-value]

    def _listing_note(self) -> str:
        if self.kind != "http":
            return ""
        return (
            " (obstore lists HTTP servers with WebDAV's PROPFIND; for a plain web server open a store "
            "with consolidated metadata, or use the fsspec backend, which reads HTML index pages: "
            f"storage_options={{{SETTINGS_KEY!r}: {{'backend': 'fsspec'}}}})"
        )

    def list(self) -> Iterator[str]:
        """Every key under the URL."""
        return iter(self._list(None))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix``; lists only the directory that can match."""
        validate_prefix(prefix)
        parent = prefix[:-1] if prefix.endswith("/") else prefix.rpartition("/")[0]
        return iter([k for k in self._list(parent or None) if k.startswith(prefix)])

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (one delimited LIST)."""
        prefix = dir_prefix(prefix)
        client = self._open()
        where = self._key_url(prefix) if prefix else self.url
        result = self._batch(
            "listing", [lambda: obstore.list_with_delimiter_async(client, prefix[:-1] or None)]
        )[0]
        if isinstance(result, _MISSING) and not is_missing_container(result):
            return iter([])
        if isinstance(result, BaseException):
            raise _typed("listing", where, result, self._listing_note()) from result
        names = [p.rstrip("/") for p in result["common_prefixes"]] + [m["path"] for m in result["objects"]]
        return iter(
            sorted({n[len(prefix) :] for n in names if n.startswith(prefix) and len(n) > len(prefix)})
        )

    # ---- identity --------------------------------------------------------------------------
    def with_read_only(self, read_only: bool = True) -> ObstoreStore:
        """A store on the same URL and options (and client) with another read-only flag."""
        other = object.__new__(ObstoreStore)
        other.__dict__.update(self.__dict__)
        other._client_lock = threading.Lock()
        other.read_only = read_only
        return other

    @property
    def data_identity(self) -> Hashable:
        """The root URL."""
        return (ObstoreStore, self.url)

    def __eq__(self, other: object) -> bool:
        """Equal when URL, options and flag are equal."""
        if not isinstance(other, ObstoreStore):
            return NotImplemented
        return (self.url, self._user_options, self.read_only) == (
            other.url,
            other._user_options,
            other.read_only,
        )

    def __hash__(self) -> int:
        return hash((ObstoreStore, self.url, self.read_only))

    def __repr__(self) -> str:
        return f"ObstoreStore({self.url!r}, read_only={self.read_only})"

    def __reduce__(self):
        """Pickle by configuration (URL, options, flag); the client is made anew on the other side."""
        return _rebuild, (self.url, dict(self._user_options), self.read_only)
