"""The ``bytes`` codec (array -> bytes): fixed-size elements in C order, little or big endian."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecError, CorruptionError
from ._config import check_choice, check_keys
from .base import ArrayBytesCodec, Buffer, ChunkSpec, as_bytes_view
from .registry import register_codec

ENDIANS = ("little", "big")


def endian_matters(dtype: np.dtype) -> bool:
    """True when ``dtype``'s bytes depend on byte order (multi-byte numbers, also inside records)."""
    if dtype.fields is not None:
        return any(endian_matters(field[0]) for field in dtype.fields.values())
    if dtype.subdtype is not None:
        return endian_matters(dtype.subdtype[0])
    return dtype.byteorder != "|"


@register_codec
@dataclass(frozen=True, eq=False)
class BytesCodec(ArrayBytesCodec):
    """Serialise a chunk as its elements in C order; ``endian`` is ``None`` only for 1-byte types."""

    name: ClassVar[str] = "bytes"
    endian: str | None = None

    def __post_init__(self) -> None:
        if self.endian is not None:
            check_choice(self.name, "endian", self.endian, ENDIANS)

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> BytesCodec:
        """Build from ``{"endian": "little" | "big"}`` (or no configuration)."""
        return cls(**check_keys(cls.name, configuration, ("endian",)))

    def configuration(self) -> dict[str, Any] | None:
        return None if self.endian is None else {"endian": self.endian}

    def evolve(self, spec: ChunkSpec) -> BytesCodec:
        """Make a missing ``endian`` explicit ("little") for multi-byte types."""
        if self.endian is None and endian_matters(spec.dtype):
            return replace(self, endian="little")
        return self

    def validate(self, spec: ChunkSpec) -> None:
        """Refuse variable-length types and a missing ``endian`` for multi-byte types."""
        if spec.dtype.hasobject:
            raise CodecError(f"codec 'bytes' cannot encode the variable-length data type {spec.dtype}")
        if self.endian is None and endian_matters(spec.dtype):
            raise CodecError(
                f"codec 'bytes': configuration key 'endian' is required for data type {spec.dtype}"
            )

    def wire_dtype(self, dtype: np.dtype) -> np.dtype:
        """The numpy dtype of the stored elements: ``dtype`` in the configured byte order."""
        if not endian_matters(dtype):
            return dtype
        if self.endian is None:
            raise CodecError(f"codec 'bytes': configuration key 'endian' is required for data type {dtype}")
        return dtype.newbyteorder("<" if self.endian == "little" else ">")

    def raw_dtype(self, spec: ChunkSpec) -> np.dtype:
        """Encoded bytes are the elements in C order: their stored type (``wire_dtype``)."""
        return self.wire_dtype(spec.dtype)

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> memoryview:
        """The chunk's bytes; a view of ``chunk`` itself (no copy) when it is already C-contiguous
        in the stored byte order, so the caller must not modify ``chunk`` while the bytes live."""
        chunk = np.asarray(chunk)
        if chunk.shape != spec.shape:
            raise CodecError(
                f"codec 'bytes': chunk of shape {chunk.shape} does not match the chunk shape {spec.shape}"
            )
        if chunk.dtype.newbyteorder("=") != spec.dtype.newbyteorder("="):
            raise CodecError(
                f"codec 'bytes': chunk of data type {chunk.dtype} given for data type {spec.dtype}"
            )
        wire = self.wire_dtype(spec.dtype)
        flat = np.asarray(chunk, dtype=wire, order="C").reshape(-1)  # copies only to swap or compact
        return memoryview(flat.view(np.uint8))

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        """The chunk ``data`` holds, in native byte order; a read-only view of ``data`` when no
        byte swap is needed."""
        view = as_bytes_view(data)
        nbytes = _nbytes(spec)
        if view.nbytes != nbytes:
            raise CorruptionError(
                f"codec 'bytes': chunk holds {view.nbytes} bytes, expected {nbytes} "
                f"for shape {spec.shape} of {spec.dtype}"
            )
        wire = self.wire_dtype(spec.dtype)
        chunk = np.frombuffer(view, dtype=wire).reshape(spec.shape)
        native = spec.dtype.newbyteorder("=") if endian_matters(spec.dtype) else spec.dtype
        return chunk if wire == native else chunk.astype(native)

    def encoded_size(self, spec: ChunkSpec) -> int:
        """Always ``spec.nbytes``: the codec neither pads nor compresses."""
        return _nbytes(spec)


def _nbytes(spec: ChunkSpec) -> int:
    """``spec.nbytes`` without numpy's per-call overhead (hot: once per chunk decoded)."""
    return math.prod(spec.shape) * spec.dtype.itemsize
