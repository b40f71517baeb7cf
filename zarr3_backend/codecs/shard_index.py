"""The shard index of the ``sharding_indexed`` codec, as the spec lays it out: pure functions, no I/O.

A shard is its inner chunks' encoded bytes plus an index of ``(offset, nbytes)`` uint64 pairs, one
per inner chunk, encoded with a fixed-size codec chain at the start or end of the value. Inner
chunks equal to the fill value are not stored: their entry is ``(2^64-1, 2^64-1)`` (``EMPTY``).
``ShardLayout`` binds the inner and index chains to one shard shape; the functions here encode,
decode and check an index against the bytes it may point into, and merge the byte ranges a read
of inner chunks needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from .._threads import scratch_buffer
from ..byte_range import ByteRange
from ..errors import CodecError, CorruptionError, Zarr3Error
from ..indexing import ChunkProjection, whole_chunk_target
from .base import Buffer, ChunkSpec, as_bytes_view
from .chain import CodecChain

#: Index entry (offset and nbytes) of an inner chunk that is not stored (reads as the fill value).
EMPTY = 2**64 - 1

#: Byte ranges of inner chunks separated by at most this many unused bytes are fetched as one
#: range: a few wasted bytes cost less than one more request to an object store, and adjacent
#: chunks (gap 0, the common case for shards written in C order) always merge.
MERGE_GAP = 4096

#: Largest byte offset a shard index entry may reach when the shard's size is unknown: byte
#: ranges past it cannot be asked of any store (file offsets and lengths are int64).
MAX_OFFSET = 2**63 - 1

#: Largest shard index accepted, in bytes (2**27 inner chunks per shard): a bigger one would be
#: allocated and fetched whole for every read of the shard.
MAX_INDEX_BYTES = 2**31

#: Below this many decoded bytes per shard, inner chunks of a plain ``bytes`` chain are encoded
#: and decoded inline: a thread hop costs more than the copy.
_THREADS_MIN_BYTES = 1 << 20

#: The ``_threads.scratch_buffer`` slot inner chunks decode into (slots 0-2 hold a unit's
#: bytes or a whole chunk on the read and write paths, possibly in the same thread).
INNER_SCRATCH_SLOT = 3

IndexLocation = Literal["start", "end"]


@dataclass(frozen=True)
class ShardLayout:
    """Everything a shard of one shape needs: the inner and index chains bound to their specs."""

    shard_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    grid: tuple[int, ...]
    inner: CodecChain
    index: CodecChain
    index_size: int
    index_location: IndexLocation
    #: Upper bound on an inner chunk's stored size (``None``: the inner codecs declare none).
    max_inner_nbytes: int | None = None
    #: The layout of the inner chunks when they are themselves shards read and written in parts
    #: (the inner chain is one ``sharding_indexed`` codec), else ``None``.
    nested: ShardLayout | None = None

    def chunk_slices(self, coords: Sequence[int]) -> tuple[slice, ...]:
        """Where inner chunk ``coords`` lies within the shard."""
        return tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, self.chunk_shape, strict=True))

    def index_range(self) -> ByteRange:
        """The byte range holding the encoded index (a suffix range for ``"end"``)."""
        if self.index_location == "start":
            return ByteRange(0, self.index_size)
        return ByteRange.suffix(self.index_size)

    @property
    def data_start(self) -> int:
        """The first byte inner chunks may occupy (after an index at the start)."""
        return self.index_size if self.index_location == "start" else 0

    @property
    def end_guard(self) -> int:
        """The index size when the index sits at the end, else 0: a read of the highest inner
        chunk extended by this many bytes must get them all, or that chunk overlaps the index."""
        return self.index_size if self.index_location == "end" else 0

    @property
    def max_shard_nbytes(self) -> int | None:
        """The most bytes a shard written compactly takes (as this library writes them): every
        inner chunk at its largest, plus the index (``None`` when the inner codecs declare no
        bound). The format allows unused bytes between inner chunks: other writers' may be larger."""
        if self.max_inner_nbytes is None:
            return None
        return math.prod(self.grid) * self.max_inner_nbytes + self.index_size

    @cached_property  # asked for on every small read; the layout is immutable
    def raw_inner_dtype(self) -> np.dtype | None:
        """The stored element type when inner chunks are plain C-order elements (inner chain
        ``bytes`` alone), else ``None``: such chunks can be read straight into an output array."""
        return None if self.inner.spec.dtype.hasobject else self.inner.raw_dtype

    def use_threads(self, n_chunks: int) -> bool:
        """Whether encoding/decoding ``n_chunks`` inner chunks is worth the CPU pool."""
        if n_chunks <= 1:
            return False
        heavy = bool(self.inner.bytes_bytes) or bool(self.inner.array_array)
        heavy = heavy or self.inner.array_bytes.name != "bytes"
        return heavy or n_chunks * self.inner.spec.nbytes >= _THREADS_MIN_BYTES

    def decode_inner(
        self,
        data: Buffer,
        coords: tuple[int, ...],
        off: int,
        nb: int,
        *,
        scratch: bool = False,
        into: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """Decode one inner chunk, naming it (coordinates, offset, size) in any error: a new
        array, unless ``scratch`` and the inner chain decompresses into a buffer: then a view of
        this thread's scratch memory (valid until its next inner chunk), or, given ``into`` (the
        whole chunk's C-contiguous place), nothing: the chunk is decoded there."""
        where = f"inner chunk {coords} (offset={off}, nbytes={nb})"
        inner = self.inner
        try:
            if scratch and inner.decodes_into_target:
                chunk = inner.decode_to(data, into, _inner_scratch)
            else:
                chunk = inner.decode(data)
        except Zarr3Error as e:
            raise type(e)(f"{where}: {e}") from e
        except Exception as e:  # a codec library's own error on malformed bytes
            raise CorruptionError(f"{where} cannot be decoded: {e}") from e
        if chunk is None:  # decoded in place
            return None
        chunk = np.asarray(chunk)
        if chunk.shape != self.chunk_shape:
            raise CorruptionError(f"{where} decoded to shape {chunk.shape}, expected {self.chunk_shape}")
        return chunk

    def place_inner(self, data: Buffer, q: ChunkProjection, off: int, nb: int, out: np.ndarray) -> None:
        """``out[q.out_selection] = decode(data)[q.chunk_selection]`` for inner chunk ``q``: straight
        into its place when the chunk fills one contiguous block of ``out`` and the inner chain
        decompresses into a buffer, else through reused per-thread scratch memory, so no chunk
        gets fresh memory (a page fault per 4 KiB) only to be copied once and freed."""
        into = whole_chunk_target(q, out, self.chunk_shape)
        chunk = self.decode_inner(data, q.chunk_coords, off, nb, scratch=True, into=into)
        if chunk is not None:
            out[q.out_selection] = chunk[q.chunk_selection]


def _inner_scratch(nbytes: int) -> memoryview:
    """Scratch memory of the calling thread for one inner chunk (its own slot: the shard's
    bytes may sit in another slot of the same thread)."""
    return scratch_buffer(nbytes, INNER_SCRATCH_SLOT)


def index_spec(grid: Sequence[int]) -> ChunkSpec:
    """The representation the index codecs encode: shape ``grid + (2,)``, uint64, fill 2^64-1."""
    return ChunkSpec((*(int(g) for g in grid), 2), np.dtype("uint64"), np.uint64(EMPTY))


def encode_index(index: np.ndarray, chain: CodecChain) -> bytes:
    """Encode the ``(grid..., 2)`` uint64 offset/nbytes array with the index codec chain."""
    index = np.asarray(index, dtype=np.uint64)
    if index.shape != chain.spec.shape:
        raise CodecError(f"shard index has shape {index.shape}, the index codecs expect {chain.spec.shape}")
    data = chain.encode(index)
    if data is None:
        raise CodecError(f"index codecs {chain.to_json()} produced no bytes for the shard index")
    return bytes(as_bytes_view(data))


def decode_index(data: Buffer, chain: CodecChain) -> np.ndarray:
    """The ``(grid..., 2)`` uint64 index that ``data`` encodes.

    Raises ``ChecksumError`` (from crc32c) or ``CorruptionError`` when the bytes cannot be an index,
    including an entry where only one of offset and nbytes is the empty marker 2^64-1.
    """
    view = as_bytes_view(data)
    expected = chain.encoded_size()
    if expected is not None and len(view) != expected:
        raise CorruptionError(f"shard index is {len(view)} bytes, expected {expected} bytes")
    try:
        index = chain.decode(view)
    except Zarr3Error as e:
        raise type(e)(f"shard index: {e}") from e
    except Exception as e:  # a codec library's own error on malformed bytes
        raise CorruptionError(f"shard index cannot be decoded: {e}") from e
    index = np.asarray(index)
    if index.shape != chain.spec.shape or index.dtype != np.uint64:
        raise CorruptionError(
            f"shard index decoded to {index.dtype}{index.shape}, expected uint64{chain.spec.shape}"
        )
    half = (index[..., 0] == EMPTY) != (index[..., 1] == EMPTY)
    if half.any():
        coords = tuple(int(i) for i in np.argwhere(half)[0])
        raise CorruptionError(
            f"shard index entry of inner chunk {coords} is half empty: "
            f"offset={int(index[coords][0])} nbytes={int(index[coords][1])}"
        )
    return index


def check_index(
    index: np.ndarray, lo: int, hi: int, size: int | None = None, max_nbytes: int | None = None
) -> None:
    """Refuse an index whose stored inner chunks do not all lie within bytes ``[lo, hi)``, or
    whose entries claim more than ``max_nbytes`` (what an inner chunk can encode to, when known).

    ``lo``/``hi`` bound the chunk data (the shard without its index); pass ``hi=EMPTY`` when the
    shard's size is unknown (partial reads: entries must then end below ``MAX_OFFSET``, and a
    short read is caught when the chunk is fetched). ``size``, the whole shard's length when
    known, tells an entry reaching into an index at the end from one running past the end.
    Every entry is checked here, before any read or allocation it would size.
    """
    off = index[..., 0]
    nb = index[..., 1]
    present = off != EMPTY
    lo_, hi_ = np.uint64(lo), np.uint64(MAX_OFFSET if hi == EMPTY else hi)
    with np.errstate(over="ignore"):
        bad = present & ((off < lo_) | (off > hi_) | (nb > hi_ - off))
    if bad.any():
        coords = tuple(int(i) for i in np.argwhere(bad)[0])
        o, n = int(off[coords]), int(nb[coords])
        where = f"[{lo}, {hi})" if hi != EMPTY else f"[{lo}, ...)"
        into_index = o < lo or (size is not None and o + n <= size)
        raise CorruptionError(
            f"shard index entry of inner chunk {coords} (offset={o}, nbytes={n}, end={o + n}) "
            f"points outside the shard's chunk data {where}"
            + (" (into the shard index)" if into_index else " (past the end of the shard)")
        )
    if max_nbytes is not None:
        big = present & (nb > np.uint64(max_nbytes))
        if big.any():
            coords = tuple(int(i) for i in np.argwhere(big)[0])
            raise CorruptionError(
                f"shard index entry of inner chunk {coords} (offset={int(off[coords])}, "
                f"nbytes={int(nb[coords])}) points past the end of the inner chunk: an inner chunk "
                f"encodes to at most {max_nbytes} bytes"
            )


def whole_shard_index(layout: ShardLayout, view: memoryview) -> np.ndarray:
    """The index of a shard held whole in memory, every entry checked against its real size."""
    n, isz = len(view), layout.index_size
    if n < isz:
        raise CorruptionError(f"shard is {n} bytes, shorter than its {isz}-byte index (truncated)")
    if layout.index_location == "start":
        index, lo, hi = decode_index(view[:isz], layout.index), isz, n
    else:
        index, lo, hi = decode_index(view[n - isz :], layout.index), 0, n - isz
    check_index(index, lo, hi, n, layout.max_inner_nbytes)
    return index


def fetched_index(layout: ShardLayout, raw: Buffer) -> np.ndarray:
    """The index from its own bytes (``layout.index_range()`` of a shard whose size is not
    known), every entry checked as far as it can be without the shard's size."""
    if len(raw) < layout.index_size:
        raise CorruptionError(
            f"shard is shorter than its {layout.index_size}-byte index: read {len(raw)} bytes (truncated)"
        )
    if len(raw) > layout.index_size:  # a store answered its range with more bytes than asked
        raise CorruptionError(f"shard index read as {len(raw)} bytes, not its {layout.index_size}")
    index = decode_index(raw, layout.index)
    check_index(index, layout.data_start, EMPTY, max_nbytes=layout.max_inner_nbytes)
    return index


def outside_error(coords: tuple[int, ...], off: int, nb: int, available: int, guard: int) -> CorruptionError:
    """The error for an inner chunk whose bytes do not all lie in the shard's chunk data:
    ``available`` bytes were there from ``off``, of the ``nb + guard`` asked for."""
    if available >= nb:  # the chunk exists but overlaps the index at the end
        data_end = off + available - guard
        return CorruptionError(
            f"shard index entry of inner chunk {coords} (offset={off}, nbytes={nb}, end={off + nb}) "
            f"points outside the shard's chunk data [0, {data_end}) (into the shard index)"
        )
    return CorruptionError(
        f"shard index points past the end of the shard: inner chunk {coords} needs bytes "
        f"[{off}, {off + nb}), only {available} available from offset {off}"
    )


def merge_ranges(
    ranges: Sequence[tuple[int, int]], max_gap: int = MERGE_GAP
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Coalesce ``(offset, length)`` ranges separated by at most ``max_gap`` bytes.

    Returns ``(spans, placement)``: the merged ``(offset, length)`` spans sorted by offset, and for
    each input range ``(span index, offset of the range within that span)``.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    spans: list[list[int]] = []  # [start, end]
    placement: list[tuple[int, int]] = [(0, 0)] * len(ranges)
    for i in order:
        off, length = ranges[i]
        if spans and off <= spans[-1][1] + max_gap:
            spans[-1][1] = max(spans[-1][1], off + length)
        else:
            spans.append([off, off + length])
        placement[i] = (len(spans) - 1, off - spans[-1][0])
    return [(s, e - s) for s, e in spans], placement
