"""The ``zstd`` codec (bytes -> bytes), configured as zarr-python and tensorstore write it.

``{"level": int, "checksum": bool}``; compression and decompression by ``numcodecs.zstd``,
which also decodes frames written without a content size (streaming compressors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from numcodecs import zstd as _zstd

from ..errors import CodecError, CorruptionError
from ._config import check_bool, check_int, check_keys
from .base import Buffer, BytesBytesCodec, ChunkSpec, as_bytes_view
from .registry import register_codec

MIN_LEVEL, MAX_LEVEL = -131072, 22
_MAGIC = b"\x28\xb5\x2f\xfd"
#: zstd's densest encoding is a run-length block: 4 bytes (3-byte header, 1 byte) for up to
#: ``_MAX_BLOCK`` bytes of content, so a frame of n bytes holds at most about n * 2**15 bytes.
_MAX_BLOCK = 128 * 1024
MAX_RATIO = _MAX_BLOCK // 4


@register_codec
@dataclass(frozen=True, eq=False)
class ZstdCodec(BytesBytesCodec):
    """Zstandard compression at ``level`` (0 = zstd's default), with an optional frame checksum."""

    name: ClassVar[str] = "zstd"
    #: ``decode_into`` decompresses straight into the caller's buffer.
    decodes_into: ClassVar[bool] = True
    level: int = 0
    checksum: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", check_int(self.name, "level", self.level, MIN_LEVEL, MAX_LEVEL))
        object.__setattr__(self, "checksum", check_bool(self.name, "checksum", self.checksum))

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> ZstdCodec:
        """Build from ``{"level": int, "checksum": bool}``."""
        return cls(**check_keys(cls.name, configuration, ("level", "checksum")))

    def configuration(self) -> dict[str, Any]:
        return {"level": self.level, "checksum": self.checksum}

    def encode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        view = as_bytes_view(data)
        try:
            return _zstd.compress(view, self.level, self.checksum)
        except (ValueError, RuntimeError) as e:
            raise CodecError(f"codec 'zstd': compression of {len(view)} bytes failed: {e}") from e

    def decode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        """Decompress one zstd frame, with or without a content size in its header."""
        view = as_bytes_view(data)
        self.decoded_size(view)  # refuses a header declaring more than the frame can hold
        try:
            return _zstd.decompress(view)
        except (ValueError, RuntimeError) as e:
            if declared_content_size(view) == 0:
                return b""  # numcodecs refuses frames of empty content, which zstd itself writes
            raise CorruptionError(f"codec 'zstd': invalid zstd frame: {e}") from e

    def max_encoded_size(self, size: int) -> int:
        """``ZSTD_COMPRESSBOUND`` (zstd.h) plus the optional 4-byte checksum and a margin."""
        small = (_MAX_BLOCK - size) >> 11 if size < _MAX_BLOCK else 0
        return size + (size >> 8) + small + 4 + 64

    def decoded_size(self, data: Buffer) -> int | None:
        """The Frame_Content_Size the frame declares, if any; ``CorruptionError`` when it is more
        than the frame's bytes can hold (``MAX_RATIO``): a bad header allocates nothing."""
        view = as_bytes_view(data)
        declared = declared_content_size(view)
        if declared is not None and declared > len(view) * MAX_RATIO + _MAX_BLOCK:
            raise CorruptionError(
                f"codec 'zstd': frame of {len(view)} bytes declares {declared} bytes of content, "
                f"more than zstd can encode in it"
            )
        return declared

    def decode_into(self, data: Buffer, spec: ChunkSpec, dest: memoryview) -> memoryview:
        """Decompress straight into ``dest`` (writable, exactly the decompressed size) when the
        frame declares its content size; otherwise decompress and copy. Returns ``dest``."""
        view = as_bytes_view(data)
        declared = self.decoded_size(view)
        if declared is None:
            out = as_bytes_view(self.decode(view, spec))
            if len(out) != len(dest):
                raise CorruptionError(
                    f"codec 'zstd': frame decompresses to {len(out)} bytes, expected {len(dest)}"
                )
            dest[:] = out
            return dest
        if declared != len(dest):
            raise CorruptionError(f"codec 'zstd': frame declares {declared} bytes, expected {len(dest)}")
        if declared:
            try:
                _zstd.decompress(view, dest)
            except (ValueError, RuntimeError) as e:
                raise CorruptionError(f"codec 'zstd': invalid zstd frame: {e}") from e
        return dest


def declared_content_size(frame: memoryview) -> int | None:
    """The Frame_Content_Size a zstd frame header declares (RFC 8878), ``None`` if absent."""
    if len(frame) < 6 or frame[:4] != _MAGIC:
        return None
    descriptor = frame[4]
    single_segment = (descriptor >> 5) & 1
    size_len = (single_segment, 2, 4, 8)[descriptor >> 6]
    if size_len == 0:
        return None
    start = 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 0x3]  # window and dictionary ids
    if len(frame) < start + size_len:
        return None
    size = int.from_bytes(frame[start : start + size_len], "little")
    return size + 256 if size_len == 2 else size
