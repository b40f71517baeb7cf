"""The ``gzip`` codec (bytes -> bytes): RFC 1952 gzip members via the standard zlib module.

zlib is used directly rather than through ``numcodecs.GZip``: it writes a zero mtime (the same
chunk always gives the same bytes) and inflates in one call without copying the input.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import CorruptionError
from ._config import check_int, check_keys
from .base import Buffer, BytesBytesCodec, ChunkSpec, as_bytes_view
from .registry import register_codec

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer, largest window


@register_codec
@dataclass(frozen=True, eq=False)
class GzipCodec(BytesBytesCodec):
    """Gzip compression at ``level`` 0 (stored) to 9 (smallest)."""

    name: ClassVar[str] = "gzip"
    level: int = 5

    def __post_init__(self) -> None:
        object.__setattr__(self, "level", check_int(self.name, "level", self.level, 0, 9))

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> GzipCodec:
        """Build from ``{"level": 0..9}``."""
        return cls(**check_keys(cls.name, configuration, ("level",)))

    def configuration(self) -> dict[str, Any]:
        return {"level": self.level}

    def encode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        return zlib.compress(as_bytes_view(data), self.level, wbits=_GZIP_WBITS)

    def decode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        """Inflate every gzip member in ``data`` (concatenated members are one stream)."""
        rest: Buffer = as_bytes_view(data)
        parts: list[bytes] = []
        while True:
            inflater = zlib.decompressobj(_GZIP_WBITS)
            try:
                parts.append(inflater.decompress(rest))
            except zlib.error as e:
                raise CorruptionError(f"codec 'gzip': invalid gzip data: {e}") from e
            if not inflater.eof:
                raise CorruptionError("codec 'gzip': gzip data is truncated")
            rest = inflater.unused_data
            if not rest.strip(b"\x00"):  # trailing zero padding is allowed, as in the gzip tool
                break
        return parts[0] if len(parts) == 1 else b"".join(parts)
