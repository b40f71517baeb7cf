"""The ``crc32c`` codec (bytes -> bytes): appends the CRC32C of the data, little endian."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from crc32c import crc32c

from ..errors import ChecksumError, CorruptionError
from ._config import check_keys
from .base import Buffer, BytesBytesCodec, ChunkSpec, as_bytes_view
from .registry import register_codec

CHECKSUM_SIZE = 4


@register_codec
@dataclass(frozen=True, eq=False)
class Crc32cCodec(BytesBytesCodec):
    """Guard bytes with a 4-byte CRC32C (RFC 3720) checksum; decoding verifies it."""

    name: ClassVar[str] = "crc32c"

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> Crc32cCodec:
        """Build from no configuration (an empty object is accepted too)."""
        check_keys(cls.name, configuration, ())
        return cls()

    def configuration(self) -> None:
        return None

    def encode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        view = as_bytes_view(data)
        return b"".join((view, crc32c(view).to_bytes(CHECKSUM_SIZE, "little")))

    def decode(self, data: Buffer, spec: ChunkSpec) -> memoryview:
        """The data without its checksum (a view, no copy) once the checksum matched."""
        view = as_bytes_view(data)
        size = len(view) - CHECKSUM_SIZE
        if size < 0:
            raise CorruptionError(
                f"codec 'crc32c': {len(view)} bytes cannot hold the {CHECKSUM_SIZE}-byte checksum"
            )
        payload = view[:size]
        expected = int.from_bytes(view[size:], "little")
        actual = crc32c(payload)
        if actual != expected:
            raise ChecksumError(
                f"codec 'crc32c': checksum mismatch over {size} bytes: "
                f"stored {expected:#010x}, computed {actual:#010x}"
            )
        return payload

    def encoded_size(self, size: int) -> int:
        """Always ``size + 4``."""
        return size + CHECKSUM_SIZE
