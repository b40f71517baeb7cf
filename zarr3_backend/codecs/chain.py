"""A codec chain: zero or more array->array, one array->bytes, zero or more bytes->bytes codecs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import CodecError, CorruptionError
from .base import ArrayArrayCodec, ArrayBytesCodec, Buffer, BytesBytesCodec, ChunkSpec, Codec
from .registry import codec_from_json

CodecLike = str | Mapping[str, Any] | Codec


def split_by_kind(
    parsed: Sequence[Codec],
) -> tuple[list[ArrayArrayCodec], ArrayBytesCodec, list[BytesBytesCodec]]:
    """``(array->array, array->bytes, bytes->bytes)`` codecs of a chain, refusing (``CodecError``
    naming the codec) any out of that order, a second array->bytes codec or none: the one owner
    of the chain's order rule."""
    aa: list[ArrayArrayCodec] = []
    ab: ArrayBytesCodec | None = None
    bb: list[BytesBytesCodec] = []
    for c in parsed:
        if isinstance(c, ArrayArrayCodec):
            if ab is not None:
                raise CodecError(f"array->array codec {c.name!r} must come before the array->bytes codec")
            aa.append(c)
        elif isinstance(c, ArrayBytesCodec):
            if ab is not None:
                raise CodecError(f"codec chain has two array->bytes codecs: {ab.name!r} and {c.name!r}")
            ab = c
        elif isinstance(c, BytesBytesCodec):
            if ab is None:
                raise CodecError(f"bytes->bytes codec {c.name!r} must come after the array->bytes codec")
            bb.append(c)
        else:
            raise CodecError(f"codec {c!r} is none of array->array, array->bytes, bytes->bytes")
    if ab is None:
        raise CodecError("codec chain needs exactly one array->bytes codec (e.g. 'bytes'), found none")
    return aa, ab, bb


@dataclass(frozen=True)
class CodecChain:
    """A validated chain bound to the chunk representation it encodes.

    ``specs[i]`` is the representation entering array->array codec ``i``;
    ``specs[-1]`` is what enters the array->bytes codec.
    """

    array_array: tuple[ArrayArrayCodec, ...]
    array_bytes: ArrayBytesCodec
    bytes_bytes: tuple[BytesBytesCodec, ...]
    specs: tuple[ChunkSpec, ...]

    @classmethod
    def build(cls, codecs: Iterable[CodecLike], spec: ChunkSpec) -> CodecChain:
        """Parse, order-check, evolve and validate ``codecs`` for chunks of ``spec``."""
        aa, ab, bb = split_by_kind([codec_from_json(c) for c in codecs])
        specs = [spec]
        evolved_aa = []
        for c in aa:
            c = c.evolve(specs[-1])
            c.validate(specs[-1])
            evolved_aa.append(c)
            specs.append(c.resolve(specs[-1]))
        ab = ab.evolve(specs[-1])
        ab.validate(specs[-1])
        evolved_bb = []
        for c in bb:
            c = c.evolve(specs[-1])
            c.validate(specs[-1])
            evolved_bb.append(c)
        return cls(tuple(evolved_aa), ab, tuple(evolved_bb), tuple(specs))

    @property
    def spec(self) -> ChunkSpec:
        return self.specs[0]

    @property
    def codecs(self) -> tuple[Codec, ...]:
        return (*self.array_array, self.array_bytes, *self.bytes_bytes)

    def to_json(self) -> list[dict[str, Any]]:
        return [c.to_json() for c in self.codecs]

    def encode(
        self, chunk: np.ndarray, *, write_empty_chunks: bool = False, out: memoryview | None = None
    ) -> Buffer | None:
        """Encoded bytes of one chunk; ``None`` when the array->bytes codec stores nothing.

        ``write_empty_chunks`` reaches array->bytes codecs that drop fill parts themselves
        (sharding: ``takes_write_empty_chunks``); with it they store everything. ``out``, a
        writable scratch buffer, lets the codec that produces the final bytes write into it (its
        ``encode_into``): the result may then be a view of ``out``, valid until it is reused.
        """
        for c, s in zip(self.array_array, self.specs, strict=False):
            chunk = c.encode(chunk, s)
        # only the codec that produces the final bytes may write into ``out``
        ab_out = out if not self.bytes_bytes else None
        data = self.array_bytes.encode_into(
            chunk, self.specs[-1], ab_out, write_empty_chunks=write_empty_chunks
        )
        if data is None or not self.bytes_bytes:
            return data
        last = len(self.bytes_bytes) - 1
        for k, c in enumerate(self.bytes_bytes):
            if out is not None and k == last:
                data = c.encode_into(data, self.specs[-1], out)
            else:
                data = c.encode(data, self.specs[-1])
        return data

    def decode(self, data: Buffer) -> np.ndarray:
        """The chunk (of ``self.spec``) that ``data`` encodes."""
        data = self.decode_bytes(data)
        chunk = self.array_bytes.decode(data, self.specs[-1])
        return self.decode_array(chunk)

    @cached_property
    def decodes_into_target(self) -> bool:
        """Whether ``decode_to`` can put a chunk's elements straight into a caller's array: the
        chunk is plain C-order elements (``bytes``) under bytes->bytes codecs whose innermost
        one decompresses into a given buffer (blosc, zstd), or under none."""
        if self.array_array or self.array_bytes.raw_dtype(self.specs[-1]) is None:
            return False
        return not self.bytes_bytes or self.bytes_bytes[0].decodes_into

    def decode_to(
        self,
        data: Buffer,
        target: np.ndarray | None = None,
        scratch: Callable[[int], memoryview] | None = None,
    ) -> np.ndarray | None:
        """Decode one chunk without intermediate copies where the chain allows it.

        With ``decodes_into_target`` and ``target`` (a C-contiguous array of the chunk's shape
        and native dtype) the innermost codec decompresses into ``target`` and ``None`` is
        returned. Otherwise the decoded chunk is returned, possibly a view of ``scratch(n)``
        (writable bytes the caller lends, asked for only once the frame's size is checked)."""
        if not self.decodes_into_target:
            return self.decode(data)
        spec = self.specs[-1]
        wire = self.array_bytes.raw_dtype(spec)
        nbytes = spec.nbytes
        inner = self.bytes_bytes[0] if self.bytes_bytes else None
        for c in reversed(self.bytes_bytes[1:]):
            data = c.decode(data, spec)
        if inner is not None:
            declared = inner.decoded_size(data)  # checked before any chunk-sized allocation
            if declared is None:  # not declared: the bytes present bound what decodes
                data = inner.decode(data, spec)
            elif declared != nbytes:
                raise CorruptionError(
                    f"codec {inner.name!r}: frame decompresses to {declared} bytes, expected {nbytes}"
                )
            elif target is not None and target.dtype == wire:
                inner.decode_into(data, spec, memoryview(target.reshape(-1).view(np.uint8)))
                return None
            else:
                dest = scratch(nbytes) if scratch is not None else memoryview(bytearray(nbytes))
                data = inner.decode_into(data, spec, dest[:nbytes])
        if len(data) != nbytes:
            raise CorruptionError(
                f"codec 'bytes': chunk holds {len(data)} bytes, expected {nbytes} for shape {spec.shape} of {spec.dtype}"
            )
        return np.frombuffer(data, dtype=wire).reshape(spec.shape)

    def decode_bytes(self, data: Buffer) -> Buffer:
        """Undo the bytes->bytes codecs only. A size a frame declares (``decoded_size``) is
        checked against the largest its stage can hold before the codec allocates for it."""
        bounds = self._decoded_bounds
        for k in range(len(self.bytes_bytes) - 1, -1, -1):
            c = self.bytes_bytes[k]
            if bounds[k] is not None:
                declared = c.decoded_size(data)
                if declared is not None and declared > bounds[k]:
                    raise CorruptionError(
                        f"codec {c.name!r}: frame declares {declared} bytes, more than the "
                        f"{bounds[k]} it can hold here"
                    )
            data = c.decode(data, self.specs[-1])
        return data

    @cached_property
    def _decoded_bounds(self) -> tuple[int | None, ...]:
        """For each bytes->bytes codec, the most bytes its decoding may produce (``None``: no bound)."""
        bounds: list[int | None] = []
        size = self.array_bytes.max_encoded_size(self.specs[-1])
        for c in self.bytes_bytes:
            bounds.append(size)
            size = None if size is None else c.max_encoded_size(size)
        return tuple(bounds)

    def decode_array(self, chunk: np.ndarray) -> np.ndarray:
        """Undo the array->array codecs only (input: what the array->bytes codec decoded)."""
        for c, s in zip(reversed(self.array_array), reversed(self.specs[:-1]), strict=True):
            chunk = c.decode(chunk, s)
        return chunk

    def encoded_size(self) -> int | None:
        """Exact size of every encoded chunk when fixed (bytes + crc32c), else ``None``."""
        size = self.array_bytes.encoded_size(self.specs[-1])
        for c in self.bytes_bytes:
            if size is None:
                return None
            size = c.encoded_size(size)
        return size

    def max_encoded_size(self) -> int | None:
        """Upper bound on the size of every encoded chunk when the codecs declare one, else ``None``."""
        size = self.array_bytes.max_encoded_size(self.specs[-1])
        for c in self.bytes_bytes:
            if size is None:
                return None
            size = c.max_encoded_size(size)
        return size

    @property
    def is_partial_decodable(self) -> bool:
        """True when the array->bytes codec can read sub-regions (sharding) directly."""
        return not self.array_array and not self.bytes_bytes and self.array_bytes.partial_decodable

    @cached_property  # asked for on every small read; the chain is immutable
    def raw_dtype(self) -> np.dtype | None:
        """The stored element type when encoded chunks are plain C-order elements (the chain is
        ``bytes`` alone), else ``None``: such chunks can be read straight into an output array."""
        if self.array_array or self.bytes_bytes:
            return None
        return self.array_bytes.raw_dtype(self.specs[-1])
