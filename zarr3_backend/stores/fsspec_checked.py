"""GETs on fsspec's HTTP and S3 filesystems whose answers are checked to be the bytes asked for.

fsspec's ``HTTPFileSystem._cat_file`` returns the body of any 2xx or 3xx answer and drops its
headers; s3fs' drops ``ContentRange``. A 206 naming another range than asked, or one shorter
than asked inside the value, would then be read as the value (and bytes of the right length
decode to wrong values where no checksum guards them). ``checked_cat`` sends the same request
(the filesystem's own session, options, retries and ``Range`` header) and holds the answer to
``range_answers``' rule before its body is handed on; other filesystems keep their own GET.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .fsspec_errors import ResponseMismatchError
from .fsspec_options import HTTP_PROTOCOLS, S3_PROTOCOLS

if TYPE_CHECKING:  # importing it needs aiohttp, an extra: filesystems are told by protocol
    from fsspec.implementations.http import HTTPFileSystem
from .range_answers import WHOLE_VALUE_STATUSES, is_whole_answer, range_answer_problem, undo_content_encoding

Cat = Callable[..., Awaitable[bytes]]


def checked_cat(fs: Any) -> Cat:
    """The GET of ``(path, start=None, end=None)`` (fsspec's ``_cat_file`` arguments) to use on
    async filesystem ``fs``: a checked one on HTTP and S3, else the filesystem's own."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in HTTP_PROTOCOLS:
        return lambda path, start=None, end=None: _http_cat(fs, path, start, end)
    if protocol in S3_PROTOCOLS:  # s3fs
        return lambda path, start=None, end=None: _s3_cat(fs, path, start, end)
    return fs._cat_file


def _cut_whole(start: int | None, end: int | None, status: int, body: bytes) -> bytes:
    """``body``, or for a 200 to a ranged GET (the whole value, from a server that ignores
    ``Range``) the range asked for, cut from it here where the status is known rather than
    guessed later from lengths (``start``/``end`` as fsspec gives them: a Python slice's)."""
    ranged = start is not None or end is not None
    return body[start:end] if ranged and status in WHOLE_VALUE_STATUSES else body


def _check(start: int | None, end: int | None, status: int, content_range: str | None, body: bytes) -> bytes:
    problem = range_answer_problem(start, end, status, content_range, len(body))
    if problem is not None:
        raise ResponseMismatchError(problem)
    return body


async def _http_cat(fs: HTTPFileSystem, url: str, start: int | None, end: int | None) -> bytes:
    """fsspec HTTP's ``_cat_file``, its answer checked; 404 raises FileNotFoundError, other
    failed statuses aiohttp's error."""
    kw = fs.kwargs.copy()
    headers = kw.pop("headers", {}).copy()
    ranged = start is not None or end is not None
    if ranged:
        if start == end:
            return b""
        headers["Range"] = await fs._process_limits(url, start, end)
    # the value's own bytes: a range of a content-coded answer would be one of the coded form
    # (GCS serving an object stored gzip-encoded to a client that accepts gzip), which aiohttp
    # would then decode; asked for identity, GCS decodes and answers the whole value (cut below)
    headers.setdefault("Accept-Encoding", "identity")
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        out = await r.read()
        fs._raise_not_found_for_status(r, url)
        status, content_range = r.status, r.headers.get("Content-Range")
    start, end = (start, end) if ranged else (None, None)
    return _cut_whole(start, end, status, _check(start, end, status, content_range, out))


async def _s3_cat(fs: Any, path: str, start: int | None, end: int | None) -> bytes:
    """s3fs' ``_cat_file``: one GetObject and its body read, retried together as s3fs does
    (``fs.retries``; errors translated by s3fs: a missing key raises FileNotFoundError), the
    answer checked."""
    from s3fs.core import _error_wrapper  # s3fs is there: this filesystem is its

    bucket, key, version = fs.split_path(path)
    kwargs: dict[str, Any] = {"VersionId": version} if version else {}
    ranged = start is not None or end is not None
    if ranged:
        if start == end:
            return b""
        kwargs["Range"] = await fs._process_limits(path, start, end)

    async def call_and_read() -> tuple[bytes, dict[str, Any]]:
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **kwargs)
        body = response["Body"]
        try:
            return await body.read(), response
        finally:
            body.close()

    out, response = await _error_wrapper(call_and_read, retries=fs.retries)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 200)
    content_range = response.get("ContentRange")
    start, end = (start, end) if ranged else (None, None)
    out = _check(start, end, status, content_range, out)
    # botocore leaves a Content-Encoding (an object uploaded gzipped) to its caller; aiohttp
    # undoes it itself
    out = undo_content_encoding(out, response.get("ContentEncoding"), is_whole_answer(status, content_range))
    return _cut_whole(start, end, status, out)
