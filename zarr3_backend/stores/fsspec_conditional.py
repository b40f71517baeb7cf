"""Conditional writes on object stores reached through fsspec, one small class per backend.

S3 (s3fs): the version of a value is its ETag; a write sends ``If-Match: <etag>`` (or
``If-None-Match: *`` to create only), a delete ``If-Match``; the server answers 412 when the
condition no longer holds. Other backends (GCS, Azure, ``memory://``, ...) have none here: an
``FsspecStore`` on them refuses partial chunk writes unless the caller opts out
(``unguarded_partial_writes``). Each operation is a coroutine run on the filesystem's loop.
"""

from __future__ import annotations

from typing import Any

from .fsspec_errors import is_condition_failed, is_missing_container
from .fsspec_options import S3_PROTOCOLS


class S3Conditional:
    """ETag compare-and-swap through s3fs' own client (``fs._call_s3``)."""

    @staticmethod
    async def get(fs: Any, path: str) -> tuple[bytes | None, str | None]:
        """``(value, ETag)``; ``(None, None)`` when the key is missing (a missing bucket raises)."""
        bucket, key, _ = fs.split_path(path)
        try:
            response = await fs._call_s3("get_object", Bucket=bucket, Key=key)
        except FileNotFoundError as e:
            if is_missing_container(e):
                raise
            return None, None
        body = response["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        return data, response["ETag"]

    @staticmethod
    async def put(fs: Any, path: str, data: bytes, expected: str | None) -> bool:
        """PutObject only while the ETag is ``expected`` (None: while the key is missing)."""
        bucket, key, _ = fs.split_path(path)
        condition = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected}
        try:
            await fs._call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
        except Exception as e:
            if is_condition_failed(e) or isinstance(e, FileExistsError):
                return False
            if isinstance(e, FileNotFoundError) and expected is not None and not is_missing_container(e):
                return False  # If-Match on a key erased meanwhile
            raise
        finally:
            fs.invalidate_cache(path)
        return True

    @staticmethod
    async def delete(fs: Any, path: str, expected: str) -> bool:
        """DeleteObject only while the ETag is ``expected``."""
        bucket, key, _ = fs.split_path(path)
        try:
            await fs._call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=expected)
        except Exception as e:
            if is_condition_failed(e) or (isinstance(e, FileNotFoundError) and not is_missing_container(e)):
                return False
            raise
        finally:
            fs.invalidate_cache(path)
        return True


def conditional_backend(protocol: str) -> type[S3Conditional] | None:
    """The conditional-write operations for a filesystem protocol, None when there are none."""
    return S3Conditional if protocol in S3_PROTOCOLS else None
