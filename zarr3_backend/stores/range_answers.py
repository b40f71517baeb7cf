"""Is this HTTP answer the bytes that were asked for? The rule every remote store applies to a
GET before its body is handed on (pure: the stores do the I/O).

A server, proxy or CDN can answer wrongly but plausibly: a ``206`` naming another range than
the one asked (same length, other offset), a ``206`` shorter than the range inside the value,
a ``304`` to a request that had no condition. Bytes of the right length decode to wrong values
where no checksum guards them (uncompressed chunks, inner chunks of a shard), so such an answer
is refused here, naming the key, before anything is decoded from it. A ``200`` to a ranged
request is the whole value (a server that ignores ``Range``): right, and cut by the store.
A body sent with a ``Content-Encoding`` (a CDN's gzip) is the value once that is undone, which
only a whole value allows (``undo_content_encoding``).
"""

from __future__ import annotations

import gzip
import re
import zlib
from typing import Any

from ..byte_range import ByteRange
from .fsspec_errors import ResponseMismatchError

#: Statuses whose body is the whole value (203: the same, through a transforming proxy).
WHOLE_VALUE_STATUSES = frozenset({200, 203})
PARTIAL_CONTENT = 206

# RFC 9110 section 14.4: "bytes first-last/complete-length", the length may be "*"
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
#: A Content-Range of a value of no bytes, whatever it says of the range (MinIO: "bytes 0--1/0").
_EMPTY_VALUE = re.compile(r"^\s*bytes\s+\S*/0\s*$", re.IGNORECASE)
#: Content-Encoding tokens that leave the body as the value's bytes.
_NOT_ENCODINGS = frozenset({"", "identity", "aws-chunked"})


def parse_content_range(header: str | None) -> tuple[int, int, int | None] | None:
    """``(first, stop, complete_length)`` of a ``Content-Range: bytes first-last/length``
    header (``stop`` is ``last + 1``; the length None for ``*``); None when absent or not that
    form (an unsatisfied ``bytes */length`` or another unit)."""
    if header is None:
        return None
    m = _CONTENT_RANGE.match(header)
    if m is None:
        return None
    first, last = int(m.group(1)), int(m.group(2))
    if last < first:
        return None
    total = None if m.group(3) == "*" else int(m.group(3))
    if total is not None and last >= total:
        return None
    return first, last + 1, total


def _expected(start: int | None, end: int | None, total: int | None) -> tuple[int | None, int | None]:
    """The ``(first, stop)`` a correct 206 names for a request ``(start, end)`` (fsspec's form:
    ``start < 0`` with no end is the last ``-start`` bytes; ``end`` exclusive) from a value of
    ``total`` bytes; None where that depends on ``total`` and it is unknown."""
    if start is not None and start < 0:
        return (None, None) if total is None else (max(total + start, 0), total)
    first = start or 0
    if total is None:
        return first, None
    return first, total if end is None else min(end, total)


def range_answer_problem(
    start: int | None, end: int | None, status: int, content_range: str | None, nbytes: int
) -> str | None:
    """What is wrong with an answer of ``status`` (its ``Content-Range`` header and body of
    ``nbytes`` bytes) to a GET of ``(start, end)`` (both None: no ``Range`` header); None when
    it is the bytes asked for, or the whole value (a 200, cut by the caller)."""
    if status in WHOLE_VALUE_STATUSES:
        return None
    if status != PARTIAL_CONTENT:
        return f"HTTP {status} to a GET that had no condition: no body to read"
    parsed = parse_content_range(content_range)
    if parsed is None and nbytes == 0 and _EMPTY_VALUE.match(content_range or ""):
        return None  # MinIO's "bytes 0--1/0" to a suffix of an empty value: no bytes, rightly
    if parsed is None:
        return f"206 answer with Content-Range {content_range!r}: not one satisfied byte range"
    first, stop, total = parsed
    if nbytes != stop - first:
        return f"206 answer naming bytes [{first}, {stop}) has a body of {nbytes} bytes"
    want_first, want_stop = _expected(start, end, total)
    suffix = start is not None and start < 0
    wrong = (
        (want_first is not None and first != want_first)
        or (want_stop is not None and stop != want_stop)
        # a complete length of "*": no more than was asked
        or (not suffix and end is not None and stop > end)
        or (suffix and stop - first > -start)  # type: ignore[operator]
    )
    if wrong:
        return f"206 answer names bytes [{first}, {stop}) of {total or '?'} for {_describe(start, end)}"
    return None


def _describe(start: int | None, end: int | None) -> str:
    """The request ``(start, end)`` as a message names it (``ByteRange``'s words)."""
    if start is not None and start < 0:
        return str(ByteRange.suffix(-start))
    first = start or 0
    return str(ByteRange(first, None if end is None else end - first))


def is_whole_answer(status: int, content_range: str | None) -> bool:
    """Whether an answer's body is the whole value: a 200, or a 206 naming all of it."""
    if status in WHOLE_VALUE_STATUSES:
        return True
    parsed = parse_content_range(content_range)
    return parsed is not None and parsed[0] == 0 and parsed[1] == parsed[2]


def undo_content_encoding(body: Any, encoding: str | None, whole: bool) -> Any:
    """The value's bytes of a ``body`` (a bytes-like buffer) sent with ``Content-Encoding:
    encoding`` (None, ``identity`` or ``aws-chunked``: the body itself, not copied); gzip and
    deflate are undone (stdlib), for a ``whole`` value only: a range of an encoded value is a
    range of its encoded form, not of the value. ResponseMismatchError for those and for
    encodings this rule cannot undo."""
    # "aws-chunked" names an upload's framing, not an encoding of the stored bytes: S3 drops
    # it, but S3-compatible stores (Ceph RGW, NooBaa, older moto and LocalStack) echo it back
    codings = [c.strip().lower() for c in (encoding or "").split(",")]
    codings = [c for c in codings if c not in _NOT_ENCODINGS]
    if not codings:
        return body
    name = ", ".join(codings)
    if not whole:
        raise ResponseMismatchError(
            f"a byte range of a value sent with Content-Encoding {name!r}: a range of its encoded form"
        )
    try:
        if name in ("gzip", "x-gzip"):
            return gzip.decompress(body)
        if name == "deflate":  # zlib-wrapped as the RFC says; raw deflate from some servers
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except (OSError, EOFError, zlib.error) as e:
        raise ResponseMismatchError(f"a body sent with Content-Encoding {name!r} does not decode: {e}") from e
    raise ResponseMismatchError(f"a body sent with Content-Encoding {name!r}, which this store cannot undo")


def range_length_problem(r: ByteRange, nbytes: int, size: int | None = None) -> str | None:
    """What is wrong with ``nbytes`` bytes given for range ``r`` of a value of ``size`` bytes
    (None: not known; then only more bytes than ``r`` spans is wrong); None when right. For
    stores whose answers carry no Content-Range (zarr-python store objects)."""
    if r.is_suffix:
        most = -r.offset
        expected = None if size is None else min(most, size)
    elif r.length is None:
        most = None
        expected = None if size is None else max(size - r.offset, 0)
    else:
        most = r.length
        expected = None if size is None else max(min(r.offset + r.length, size) - r.offset, 0)
    if most is not None and nbytes > most:
        return f"{nbytes} bytes given for {r}"
    if expected is not None and nbytes != expected:
        return f"{nbytes} bytes given for {r} of a value of {size} bytes"
    return None


def may_be_short(r: ByteRange, nbytes: int) -> bool:
    """Whether ``nbytes`` for range ``r`` is fewer than it spans: right only at the value's end,
    which its size tells (``range_length_problem``)."""
    most = -r.offset if r.is_suffix else r.length
    return most is not None and nbytes < most
