"""GETs on fsspec's HTTP filesystem whose answers are checked to be the bytes asked for.

fsspec's ``HTTPFileSystem._cat_file`` returns the body of any 2xx or 3xx answer and drops its
headers, so a 206 naming another range than asked, or a 304 with no body, would be read as the
value. ``cat_checked`` sends the same request (fsspec's session, options and ``Range`` header)
and holds the answer to ``range_answers``' rule before its body is handed on.
"""

from __future__ import annotations

from typing import Any

from fsspec.implementations.http import HTTPFileSystem

from .fsspec_errors import ResponseMismatchError
from .range_answers import range_answer_problem


def checks_answers(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's HTTP filesystem, whose GETs ``cat_checked`` sends."""
    return isinstance(fs, HTTPFileSystem)


async def cat_checked(
    fs: HTTPFileSystem, url: str, start: int | None = None, end: int | None = None
) -> bytes:
    """The bytes ``[start, end)`` of ``url`` (fsspec's ``_cat_file`` arguments); raises
    FileNotFoundError for a 404, aiohttp's error for other failed statuses, and
    ResponseMismatchError for an answer that is not the bytes asked for."""
    kw = fs.kwargs.copy()
    headers = kw.pop("headers", {}).copy()
    if start is not None or end is not None:
        if start == end:
            return b""
        headers["Range"] = await fs._process_limits(url, start, end)
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        out = await r.read()
        fs._raise_not_found_for_status(r, url)
        ranged = "Range" in headers
        problem = range_answer_problem(
            start if ranged else None,
            end if ranged else None,
            r.status,
            r.headers.get("Content-Range"),
            len(out),
        )
    if problem is not None:
        raise ResponseMismatchError(problem)
    return out
