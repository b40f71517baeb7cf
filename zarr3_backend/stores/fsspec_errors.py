"""Typed errors for remote stores, and the rules that sort an fsspec failure into one of them.

fsspec backends raise whatever their client raises (botocore, aiohttp, OSError with an S3 error
code as cause, ...). Stores must not import those clients, so the rules look at what every such
exception carries: builtin base classes, class names, an HTTP status or an S3 error code, along
the ``__cause__``/``__context__`` chain.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import StoreError


class StoreAccessError(StoreError):
    """The backend refused the credentials or denied access (HTTP 401/403, S3 AccessDenied), or
    no usable credentials were found (botocore's NoCredentialsError, PartialCredentialsError)."""


class BucketNotFoundError(StoreError):
    """The bucket (or container) named in the URL does not exist: not a missing key."""


class StoreTimeoutError(StoreError, TimeoutError):
    """The backend did not answer within the configured connect or read timeout."""


class StoreUnreachableError(StoreError, ConnectionError):
    """The endpoint could not be reached, or dropped the connection (refused, reset, DNS)."""


class ResponseMismatchError(StoreError):
    """A server, proxy, CDN or wrapped store answered a read with other bytes than asked for:
    a 206 naming another byte range, a body shorter or longer than its range, a 416 for a
    range inside the value, a 304 to a request that had no condition, an encoding that cannot
    be undone. Nothing was decoded from it; a transient failure (sent again while retries
    last)."""


_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "Forbidden",
        "Unauthorized",
    }
)
_MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})
_TRANSIENT_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling"}
)
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# a body cut short after the answer began: the request is worth sending again
_TRANSIENT_NAMES = ("IncompleteRead", "ClientPayloadError", "ResponseStreamingError")
# failures to open a connection at all (as opposed to one dropped mid-answer)
_CONNECT_FAILURE_NAMES = ("EndpointConnectionError", "Connector")
_RANGE_NOT_SATISFIABLE = 416


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _class_names(exc: BaseException) -> list[str]:
    return [cls.__name__ for cls in type(exc).__mro__]


def _status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp ``.status``, botocore ``.response``)."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return status
    return None


def _code(exc: BaseException) -> str | None:
    """The S3-style error code an exception carries (botocore ``ClientError.response``)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def _is_credentials_error(names: list[str]) -> bool:
    """No usable credentials: botocore's NoCredentialsError and PartialCredentialsError, google-auth's
    DefaultCredentialsError, ... (matched by class name: stores do not import the clients)."""
    return any(n.endswith("CredentialsError") for n in names)


def _says_bucket_missing(exc: BaseException) -> bool:
    try:
        return "bucket does not exist" in str(exc).lower()
    except Exception:  # a client exception whose __str__ needs what it was not given
        return False


def is_missing_container(exc: BaseException) -> bool:
    """True when a "not found" failure means the bucket is missing, not the key."""
    for e in _chain(exc):
        if _code(e) in _MISSING_BUCKET_CODES or _says_bucket_missing(e):
            return True
    return False


def error_class(exc: BaseException) -> type[StoreError]:
    """The StoreError subclass that describes ``exc`` (plain StoreError when none fits)."""
    for e in _chain(exc):
        if isinstance(e, ResponseMismatchError):
            return ResponseMismatchError
        code, status, names = _code(e), _status(e), _class_names(e)
        if code in _MISSING_BUCKET_CODES or _says_bucket_missing(e):
            return BucketNotFoundError
        if (
            code in _ACCESS_CODES
            or status in (401, 403)
            or isinstance(e, PermissionError)
            or _is_credentials_error(names)
        ):
            return StoreAccessError
        if isinstance(e, TimeoutError) or any("Timeout" in n for n in names):
            return StoreTimeoutError
        if isinstance(e, ConnectionError) or any("Connection" in n or "Disconnected" in n for n in names):
            return StoreUnreachableError
    return StoreError


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: timeouts, dropped connections, 5xx and throttling."""
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return False
    if error_class(exc) in (StoreTimeoutError, StoreUnreachableError, ResponseMismatchError):
        return True
    return any(
        _status(e) in _TRANSIENT_STATUS
        or _code(e) in _TRANSIENT_CODES
        or any(n in _TRANSIENT_NAMES for n in _class_names(e))
        for e in _chain(exc)
    )


def is_endpoint_down(exc: BaseException) -> bool:
    """True when further requests to the same endpoint are likely to fail the same way right now:
    a timeout, or a connection that could not be opened (refused, DNS). A connection dropped
    mid-answer (a stale kept-alive socket) is not: the next request may well succeed."""
    for e in _chain(exc):
        if isinstance(e, TimeoutError | ConnectionRefusedError):
            return True
        names = _class_names(e)
        if any("Timeout" in n or any(c in n for c in _CONNECT_FAILURE_NAMES) for n in names):
            return True
    return False


def is_unsatisfiable_range(exc: BaseException) -> bool:
    """True for an HTTP 416 / S3 InvalidRange answer: the range starts past the end (for a
    one-byte range from 0: the value exists but is empty)."""
    for e in _chain(exc):
        if _status(e) == _RANGE_NOT_SATISFIABLE or _code(e) == "InvalidRange":
            return True
        if getattr(e, "__dict__", {}).get("code") == _RANGE_NOT_SATISFIABLE:  # gcsfs' HttpError.code
            return True
        try:
            if "range not satisfiable" in str(e).lower():  # the reason phrase of a 416 answer
                return True
        except Exception:  # a client exception whose __str__ needs what it was not given
            pass
    return False


def is_range_refused(exc: BaseException) -> bool:
    """True when the backend refused a byte range it cannot serve (HTTP 416, S3 InvalidRange, a
    ValueError for a suffix or offset it does not support): worth asking again by the size."""
    return is_unsatisfiable_range(exc) or any(isinstance(e, ValueError) for e in _chain(exc))


_CONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})


def is_condition_failed(exc: BaseException) -> bool:
    """True when a conditional request lost: HTTP 412 (S3 PreconditionFailed: the ETag or the
    object's absence no longer holds) or 409 ConditionalRequestConflict (a concurrent
    conditional write to the same key is in progress)."""
    return any(_status(e) == 412 or _code(e) in _CONDITION_CODES for e in _chain(exc))


def store_error(action: str, where: str, exc: BaseException, note: str = "") -> StoreError:
    """A typed StoreError for ``exc`` saying what was done where (``where`` is a URL)."""
    return error_class(exc)(f"{action} {where!r} failed{note}: {type(exc).__name__}: {exc}")


__all__ = [
    "BucketNotFoundError",
    "ResponseMismatchError",
    "StoreAccessError",
    "StoreTimeoutError",
    "StoreUnreachableError",
    "error_class",
    "is_condition_failed",
    "is_endpoint_down",
    "is_missing_container",
    "is_range_refused",
    "is_transient",
    "store_error",
]
