"""Codec base classes in the spec's vocabulary: array -> array, array -> bytes, bytes -> bytes.

Codecs are synchronous and storage-free: they turn numpy arrays and bytes into each other and
never touch a store. Regions of a stored shard are read by ``core.shard_view.ShardView``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecError, CorruptionError, ResourceLimitError

#: Reads several byte ranges of one stored value in one batched call; ``None`` when missing.

Buffer = bytes | bytearray | memoryview | np.ndarray


@dataclass(frozen=True)
class ChunkSpec:
    """The representation a codec sees: shape, numpy dtype and fill value of one chunk."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any  # numpy scalar of ``dtype`` (or object for variable-length types)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def empty_array(self) -> np.ndarray:
        """A new, uninitialised chunk; ``ResourceLimitError`` when it does not fit in memory."""
        try:
            return np.empty(self.shape, dtype=self.dtype)
        except MemoryError:  # numpy fails cleanly on one allocation too large to make
            raise ResourceLimitError(
                f"a chunk of shape {list(self.shape)} of {self.dtype} ({self.nbytes} bytes) does not fit in memory"
            ) from None

    def fill_array(self) -> np.ndarray:
        """A new chunk filled with the fill value; ``ResourceLimitError`` when a chunk of this
        shape does not fit in memory (a huge ``chunk_shape``)."""
        try:
            return np.full(self.shape, self.fill_value, dtype=self.dtype)
        except MemoryError:  # numpy fails cleanly on one allocation too large to make
            raise ResourceLimitError(
                f"a chunk of shape {list(self.shape)} of {self.dtype} ({self.nbytes} bytes) does not fit in memory"
            ) from None


class Codec(ABC):
    """A codec named in ``zarr.json``; subclasses set ``name`` and implement the transform."""

    name: ClassVar[str]

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> Codec:
        """Build from the ``configuration`` object of the metadata (may be ``None``)."""
        try:
            return cls(**dict(configuration or {}))
        except TypeError as e:
            raise CodecError(f"codec {cls.name!r}: invalid configuration {configuration!r}: {e}") from e

    @abstractmethod
    def configuration(self) -> dict[str, Any] | None:
        """The ``configuration`` object written to ``zarr.json`` (``None`` for none)."""

    def to_json(self) -> dict[str, Any]:
        config = self.configuration()
        return {"name": self.name} if config is None else {"name": self.name, "configuration": config}

    def evolve(self, spec: ChunkSpec) -> Codec:
        """Fill in settings that depend on the chunk representation (e.g. blosc typesize)."""
        return self

    def validate(self, spec: ChunkSpec) -> None:  # noqa: B027 - an optional hook
        """Raise ``CodecError`` if this codec cannot handle ``spec``."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_json() == other.to_json()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((self.name, repr(self.to_json())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.configuration() or ''})"


class ArrayArrayCodec(Codec):
    """array -> array: changes the array (and maybe its spec), e.g. ``transpose``."""

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        """The spec of the array this codec outputs for an input of ``spec``."""
        return spec

    @abstractmethod
    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray: ...

    @abstractmethod
    def decode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        """Invert ``encode``; ``spec`` is the *input* spec (the decoded array's)."""


class ArrayBytesCodec(Codec):
    """array -> bytes: serialises the array, e.g. ``bytes`` or ``sharding_indexed``."""

    # ---- capabilities the chain and the core ask for (defaults built on encode/decode) -----
    #: True when ``encode`` takes a ``write_empty_chunks`` keyword (codecs that drop fill parts
    #: of a chunk themselves: sharding); ``encode_into`` passes the flag on to those.
    takes_write_empty_chunks: ClassVar[bool] = False

    #: True when regions of one stored value can be read and rewritten by inner chunk, touching
    #: only the parts a selection needs (sharding: ``core.shard_view`` reads, ``encode_partial``
    #: rewrites).
    partial_decodable: ClassVar[bool] = False

    def encode_into(
        self, chunk: np.ndarray, spec: ChunkSpec, out: memoryview | None, *, write_empty_chunks: bool = False
    ) -> Buffer | None:
        """``encode``'s bytes, written into ``out`` (writable scratch, may be ``None``) and returned
        as a view of it where the codec can. Default: ``encode``, ``out`` unused."""
        if self.takes_write_empty_chunks:
            return self.encode(chunk, spec, write_empty_chunks=write_empty_chunks)  # type: ignore[call-arg]
        return self.encode(chunk, spec)

    def raw_dtype(self, spec: ChunkSpec) -> np.dtype | None:
        """The stored element type when the encoded bytes are the chunk's elements in C order
        (``bytes``): such bytes can be read straight into an output array. Default: ``None``."""
        return None

    @abstractmethod
    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> Buffer | None:
        """Bytes for ``chunk``; ``None`` means "store nothing" (sharding: all inner chunks empty)."""

    @abstractmethod
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray: ...

    def encoded_size(self, spec: ChunkSpec) -> int | None:
        """Exact encoded size for ``spec`` when it is fixed (needed for the shard index)."""
        return None

    def max_encoded_size(self, spec: ChunkSpec) -> int | None:
        """An upper bound on the encoded size of a chunk of ``spec``, ``None`` when there is none
        (variable-length items): what a shard index entry may claim for such a chunk."""
        return self.encoded_size(spec)


class BytesBytesCodec(Codec):
    """bytes -> bytes: compressors and checksums."""

    # ---- capabilities the chain and the core ask for (defaults built on encode/decode) -----
    #: True when ``decode_into`` decompresses straight into the caller's buffer (blosc, zstd):
    #: the core then decodes plain chunks into their place in the output, with no chunk copy.
    decodes_into: ClassVar[bool] = False

    def encode_into(self, data: Buffer, spec: ChunkSpec, out: memoryview) -> Buffer:
        """``encode``'s bytes, written into ``out`` (writable scratch) and returned as a view of
        it where the codec can. Default: ``encode``, ``out`` unused."""
        return self.encode(data, spec)

    def decode_into(self, data: Buffer, spec: ChunkSpec, dest: memoryview) -> memoryview:
        """``decode(data)`` written into ``dest`` (writable, exactly the decoded size); returns
        ``dest``. Default: ``decode``, then one copy (``CorruptionError`` on another size)."""
        decoded = as_bytes_view(self.decode(data, spec))
        if len(decoded) != len(dest):
            raise CorruptionError(
                f"codec {self.name!r}: decodes to {len(decoded)} bytes, expected {len(dest)}"
            )
        dest[:] = decoded
        return dest

    @abstractmethod
    def encode(self, data: Buffer, spec: ChunkSpec) -> Buffer: ...

    @abstractmethod
    def decode(self, data: Buffer, spec: ChunkSpec) -> Buffer: ...

    def encoded_size(self, size: int) -> int | None:
        """Encoded size for an input of ``size`` bytes when it is fixed, else ``None``."""
        return None

    def max_encoded_size(self, size: int) -> int | None:
        """An upper bound on the encoded size of ``size`` input bytes (a compressor's worst
        case), ``None`` when the codec has none."""
        return self.encoded_size(size)

    def decoded_size(self, data: Buffer) -> int | None:
        """The size ``data`` decodes to when its own header declares it (compressor frames),
        checked against what ``len(data)`` bytes can hold; ``None`` when nothing declares it.
        Callers compare it with the size they expect before allocating for the output."""
        return None


def as_bytes_view(data: Buffer) -> memoryview:
    """A flat, read-only, byte-typed view of any buffer without copying."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    view = memoryview(data)
    if not view.c_contiguous:  # e.g. a strided slice of a memoryview: cast() refuses those
        view = memoryview(view.tobytes())
    return view.cast("B")
