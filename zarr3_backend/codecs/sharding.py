"""The ``sharding_indexed`` codec: many inner chunks stored in one value, located through an index.

A shard is the inner chunks' encoded bytes laid out one after another (C order of the inner chunk
grid here; any order is valid to read) plus an index of ``(offset, nbytes)`` uint64 pairs, one per
inner chunk, encoded with a fixed-size codec chain and placed at the start or end of the value.
Inner chunks equal to the fill value are not stored: their index entry is ``(2^64-1, 2^64-1)``.

The index format lives in pure functions (``encode_index``, ``decode_index``, ``check_index``,
``merge_ranges``) and ``inner_indexer`` maps a selection of a shard onto its inner chunks;
``ShardingCodec`` ties them to the codec chain, to partial reads and to partial writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

from .. import indexing
from .._threads import scratch_buffer, thread_map
from ..byte_range import ByteRange
from ..errors import CodecError, CorruptionError, Zarr3Error
from .base import ArrayBytesCodec, Buffer, ChunkSpec, Codec, RangeReader, as_bytes_view
from .bytes import BytesCodec
from .chain import CodecChain, CodecLike
from .crc32c import Crc32cCodec
from .fill import is_fill
from .registry import codec_from_json, register_codec

#: Index entry (offset and nbytes) of an inner chunk that is not stored (reads as the fill value).
EMPTY = 2**64 - 1

#: Byte ranges of inner chunks separated by at most this many unused bytes are fetched as one
#: range by ``decode_partial``: a few wasted bytes cost less than one more request to an object
#: store, and adjacent chunks (gap 0, the common case for shards written in C order) always merge.
MERGE_GAP = 4096

#: Below this many decoded bytes per shard, inner chunks of a plain ``bytes`` chain are encoded
#: and decoded inline: a thread hop costs more than the copy.
_THREADS_MIN_BYTES = 1 << 20

#: Largest byte offset a shard index entry may reach when the shard's size is unknown: byte
#: ranges past it cannot be asked of any store (file offsets and lengths are int64).
MAX_OFFSET = 2**63 - 1

#: Largest shard index accepted, in bytes (2**27 inner chunks per shard): a bigger one would be
#: allocated and fetched whole for every read of the shard.
MAX_INDEX_BYTES = 2**31

IndexLocation = Literal["start", "end"]


class PositionedReader(Protocol):
    """One open shard: its ``size`` and positioned reads into caller buffers (a local file)."""

    size: int

    def read_into(self, offset: int, buffers: Sequence[memoryview]) -> int: ...


# --- the index format: pure functions -----------------------------------------------------------
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


def inner_indexer(selection: Any, shard_shape: Sequence[int], chunk_shape: Sequence[int]) -> indexing.Indexer:
    """Project a numpy-ready selection of one shard onto its inner chunk grid.

    Takes what the Array's indexers put in ``ChunkProjection.chunk_selection``: ints and slices of
    any step (basic), 1-d or ``np.ix_``-shaped int arrays (orthogonal), or int arrays that
    broadcast together (vectorized points); the projections' shape is ``shard[selection].shape``.
    """
    sel = indexing.normalize_selection(selection, shard_shape)
    if not any(isinstance(s, np.ndarray) for s in sel):
        return indexing.basic_indexer(sel, shard_shape, chunk_shape)
    orthogonal = _as_orthogonal(sel)
    if orthogonal is not None:
        return indexing.orthogonal_indexer(orthogonal, shard_shape, chunk_shape)
    if not any(isinstance(s, slice) for s in sel):
        return indexing.vectorized_indexer(sel, shard_shape, chunk_shape)
    # arrays mixed with slices in neither form: spell out every selected coordinate, numpy's way
    coords = tuple(
        np.broadcast_to(
            np.arange(n, dtype=np.intp).reshape([-1 if d == axis else 1 for d in range(len(sel))]),
            tuple(shard_shape),
        )[sel]
        for axis, n in enumerate(shard_shape)
    )
    return indexing.vectorized_indexer(coords, shard_shape, chunk_shape)


def _as_orthogonal(sel: tuple) -> tuple | None:
    """``sel`` as per-axis ints, slices and 1-d arrays when numpy gives it outer-product meaning:
    one 1-d array whose fellow ints sit next to it, or ``np.ix_``-shaped arrays (no slices)."""
    arrays = [s for s in sel if isinstance(s, np.ndarray)]
    if len(arrays) == 1 and arrays[0].ndim == 1:
        advanced = [i for i, s in enumerate(sel) if not isinstance(s, slice)]
        return sel if advanced[-1] - advanced[0] + 1 == len(advanced) else None
    if any(isinstance(s, slice) for s in sel):
        return None
    m = len(arrays)  # every non-int entry is an array here
    if m < 2:
        return None
    for k, a in enumerate(arrays):
        if a.ndim != m or any(d != 1 for j, d in enumerate(a.shape) if j != k):
            return None
    return tuple(s.reshape(-1) if isinstance(s, np.ndarray) else s for s in sel)


# --- the codec ----------------------------------------------------------------------------------
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

    def chunk_slices(self, coords: Sequence[int]) -> tuple[slice, ...]:
        """Where inner chunk ``coords`` lies within the shard."""
        return tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, self.chunk_shape, strict=True))

    def index_range(self) -> ByteRange:
        """The byte range holding the encoded index (a suffix range for ``"end"``)."""
        if self.index_location == "start":
            return ByteRange(0, self.index_size)
        return ByteRange.suffix(self.index_size)

    def use_threads(self, n_chunks: int) -> bool:
        """Whether encoding/decoding ``n_chunks`` inner chunks is worth the CPU pool."""
        if n_chunks <= 1:
            return False
        heavy = bool(self.inner.bytes_bytes) or bool(self.inner.array_array)
        heavy = heavy or self.inner.array_bytes.name != "bytes"
        return heavy or n_chunks * self.inner.spec.nbytes >= _THREADS_MIN_BYTES


def _default_inner_codecs() -> list[Codec]:
    return [BytesCodec(endian="little")]


def _default_index_codecs() -> list[Codec]:
    return [BytesCodec(endian="little"), Crc32cCodec()]


def _parse_codecs(field: str, codecs: Sequence[CodecLike]) -> tuple[Codec, ...]:
    if isinstance(codecs, (str, Mapping, Codec)) or not isinstance(codecs, Sequence):
        raise CodecError(f"sharding_indexed {field}: must be a list of codecs, got {codecs!r}")
    try:
        return tuple(codec_from_json(c) for c in codecs)
    except CodecError as e:
        raise type(e)(f"sharding_indexed {field}: {e}") from e


def _build_chain(field: str, codecs: Sequence[CodecLike], spec: ChunkSpec) -> CodecChain:
    """``CodecChain.build`` whose errors say which list of the sharding codec is at fault."""
    try:
        return CodecChain.build(codecs, spec)
    except CodecError as e:
        raise type(e)(f"sharding_indexed {field}: {e}") from e


@register_codec
class ShardingCodec(ArrayBytesCodec):
    """``sharding_indexed``: stores a shard's inner chunks and their index in one value.

    Supports index at ``"start"`` or ``"end"``, any fixed-size index chain, any inner chain
    (nested sharding included), ``decode_partial`` reading only the inner chunks a selection
    needs and ``encode_partial`` re-encoding only the inner chunks a write touches.
    """

    name = "sharding_indexed"
    #: ``encode``/``encode_into`` take the chain's ``write_empty_chunks`` flag.
    takes_write_empty_chunks: ClassVar[bool] = True
    #: ``decode_partial``/``encode_partial`` read and rewrite only the inner chunks a region touches.
    partial_decodable: ClassVar[bool] = True

    def __init__(
        self,
        chunk_shape: Sequence[int],
        codecs: Sequence[CodecLike] | None = None,
        index_codecs: Sequence[CodecLike] | None = None,
        index_location: IndexLocation = "end",
    ) -> None:
        if (
            isinstance(chunk_shape, (str, bytes))
            or not isinstance(chunk_shape, Sequence)
            or not chunk_shape
            or not all(
                isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c > 0 for c in chunk_shape
            )
        ):
            raise CodecError(
                f"codec 'sharding_indexed': 'chunk_shape' must be a non-empty list of positive integers, "
                f"got {chunk_shape!r}"
            )
        if index_location not in ("start", "end"):
            raise CodecError(
                f"codec 'sharding_indexed': 'index_location' must be 'start' or 'end', got {index_location!r}"
            )
        self.chunk_shape = tuple(int(c) for c in chunk_shape)
        self.codecs = (
            _parse_codecs("codecs", codecs) if codecs is not None else tuple(_default_inner_codecs())
        )
        self.index_codecs = (
            _parse_codecs("index_codecs", index_codecs)
            if index_codecs is not None
            else tuple(_default_index_codecs())
        )
        self.index_location: IndexLocation = index_location
        self._cached: tuple[tuple, ShardLayout] | None = None  # (spec key, layout), swapped atomically
        self._last: tuple[ChunkSpec, ShardLayout] | None = None  # (spec object, layout), the same

    # ---- metadata ------------------------------------------------------------------------------
    def configuration(self) -> dict[str, Any]:
        return {
            "chunk_shape": list(self.chunk_shape),
            "codecs": [c.to_json() for c in self.codecs],
            "index_codecs": [c.to_json() for c in self.index_codecs],
            "index_location": self.index_location,
        }

    def evolve(self, spec: ChunkSpec) -> ShardingCodec:
        """A copy whose inner and index chains are evolved for shards of ``spec``."""
        layout = self.layout(spec)
        new = ShardingCodec(self.chunk_shape, layout.inner.codecs, layout.index.codecs, self.index_location)
        new._cached = (_spec_key(spec), layout)
        return new

    def validate(self, spec: ChunkSpec) -> None:
        """Refuse a shard shape that is not a multiple of the inner chunk shape, an inner chain
        that cannot encode the inner chunks, or an index chain without a fixed encoded size."""
        self.layout(spec)

    def layout(self, spec: ChunkSpec) -> ShardLayout:
        """The validated ``ShardLayout`` for shards of ``spec`` (cached for the last spec)."""
        last = self._last
        if last is not None and last[0] is spec:  # the same spec object: no key to compute
            return last[1]
        key = _spec_key(spec)
        cached = self._cached
        if cached is not None and cached[0] == key:
            layout = cached[1]
        else:
            layout = self._build_layout(spec)
            self._cached = (key, layout)
        self._last = (spec, layout)
        return layout

    def _build_layout(self, spec: ChunkSpec) -> ShardLayout:
        shard_shape = tuple(int(s) for s in spec.shape)
        if len(shard_shape) != len(self.chunk_shape):
            raise CodecError(
                f"codec 'sharding_indexed': inner chunk_shape {list(self.chunk_shape)} has "
                f"{len(self.chunk_shape)} dimensions but the shard shape {list(shard_shape)} has {len(shard_shape)}"
            )
        if any(s % c for s, c in zip(shard_shape, self.chunk_shape, strict=True)):
            raise CodecError(
                f"codec 'sharding_indexed': shard shape {list(shard_shape)} is not a multiple of the "
                f"inner chunk_shape {list(self.chunk_shape)} along every axis"
            )
        grid = tuple(s // c for s, c in zip(shard_shape, self.chunk_shape, strict=True))
        if math.prod(grid) * 16 > MAX_INDEX_BYTES:
            raise CodecError(
                f"codec 'sharding_indexed': shard shape {list(shard_shape)} over inner chunk_shape "
                f"{list(self.chunk_shape)} makes {math.prod(grid)} inner chunks, an index of more than "
                f"{MAX_INDEX_BYTES} bytes"
            )
        inner = _build_chain("codecs", self.codecs, ChunkSpec(self.chunk_shape, spec.dtype, spec.fill_value))
        index = _build_chain("index_codecs", self.index_codecs, index_spec(grid))
        size = index.encoded_size()
        if size is None:
            raise CodecError(
                f"sharding_indexed index_codecs: {index.to_json()} have no fixed encoded size; "
                "compressing codecs are not allowed in index_codecs (use bytes + crc32c)"
            )
        return ShardLayout(
            shard_shape,
            self.chunk_shape,
            grid,
            inner,
            index,
            size,
            self.index_location,
            inner.max_encoded_size(),
        )

    # ---- encoding ------------------------------------------------------------------------------
    def encode(self, chunk: np.ndarray, spec: ChunkSpec, *, write_empty_chunks: bool = False) -> bytes | None:
        """The shard's bytes: inner chunks in C order plus the index. Inner chunks equal to the fill
        value are left out, and an all-fill shard is ``None`` (nothing to store), unless
        ``write_empty_chunks``: then every inner chunk is stored."""
        layout = self.layout(spec)
        shard = np.asarray(chunk)
        if shard.shape != layout.shard_shape:
            raise CodecError(
                f"codec 'sharding_indexed': got an array of shape {shard.shape} for shard shape {layout.shard_shape}"
            )
        coords = list(np.ndindex(*layout.grid))

        def encode_one(c: tuple[int, ...]) -> memoryview | None:
            return _encode_inner(layout, shard[layout.chunk_slices(c)], write_empty_chunks)

        if layout.use_threads(len(coords)):
            parts = thread_map(encode_one, coords, kind="cpu")
        else:
            parts = [encode_one(c) for c in coords]
        return _assemble(layout, parts)

    def encode_into(
        self, chunk: np.ndarray, spec: ChunkSpec, out: memoryview | None, *, write_empty_chunks: bool = False
    ) -> Buffer | None:
        """``encode``'s bytes written into ``out`` (writable) and returned as a view of it, for
        inner chunks of raw elements: each inner chunk is copied once, from ``chunk`` straight
        to its place in the shard (no per-chunk buffers, no joining). Otherwise, or when ``out``
        is too small, ``encode``."""
        layout = self.layout(spec)
        wire = self.raw_inner_dtype(spec)
        shard = np.asarray(chunk)
        nb = layout.inner.spec.nbytes
        isz = layout.index_size
        if (
            out is None
            or wire is None
            or shard.shape != layout.shard_shape
            or len(out) < nb * math.prod(layout.grid) + isz
        ):
            return self.encode(chunk, spec, write_empty_chunks=write_empty_chunks)
        dest = np.frombuffer(out, dtype=np.uint8)
        index = np.full((*layout.grid, 2), EMPTY, dtype=np.uint64)
        flat = index.reshape(-1, 2)
        fill = layout.inner.spec.fill_value
        body = offset = isz if layout.index_location == "start" else 0
        for i, c in enumerate(np.ndindex(*layout.grid)):
            src = shard[layout.chunk_slices(c)]
            if not write_empty_chunks and is_fill(src, fill):
                continue
            np.copyto(dest[offset : offset + nb].view(wire).reshape(layout.chunk_shape), src)
            flat[i] = (offset, nb)
            offset += nb
        if offset == body:
            return None
        encoded_index = np.frombuffer(encode_index(index, layout.index), dtype=np.uint8)
        if layout.index_location == "start":
            dest[:isz] = encoded_index
            return out[:offset]
        dest[offset : offset + isz] = encoded_index
        return out[: offset + isz]

    def encode_partial(
        self,
        old: Buffer | None,
        selection: Any,
        value: Any,
        spec: ChunkSpec,
        *,
        write_empty_chunks: bool = False,
    ) -> bytes | None:
        """The shard ``old`` (``None``: missing, all fill) with ``shard[selection] = value`` applied.

        Only the inner chunks ``selection`` touches are decoded and re-encoded (nested shards
        recursively); the stored bytes of the others are copied as they are. ``selection`` takes
        the forms ``decode_partial`` takes. Returns ``None`` when nothing is left to store.
        """
        layout = self.layout(spec)
        view = as_bytes_view(old) if old is not None else None
        index = _whole_shard_index(layout, view) if view is not None else None
        indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
        try:
            value = np.broadcast_to(np.asarray(value, dtype=spec.dtype), indexer.shape)
        except ValueError as e:
            raise CodecError(
                f"codec 'sharding_indexed': value of shape {np.shape(value)} cannot be written to a "
                f"selection of shape {indexer.shape}"
            ) from e
        nested = _nested_sharding(layout)
        inner_spec = layout.inner.spec

        def stored(c: tuple[int, ...]) -> memoryview | None:
            if index is None or view is None or int(index[c][0]) == EMPTY:
                return None
            off, nb = int(index[c][0]), int(index[c][1])
            return view[off : off + nb]

        def update_one(q: indexing.ChunkProjection) -> memoryview | None:
            c, old_bytes = q.chunk_coords, stored(q.chunk_coords)
            if nested is not None and not q.is_complete:
                try:
                    data = nested.encode_partial(
                        old_bytes,
                        q.chunk_selection,
                        value[q.out_selection],
                        layout.inner.specs[-1],
                        write_empty_chunks=write_empty_chunks,
                    )
                except CorruptionError as e:
                    raise type(e)(f"inner chunk {c}: {e}") from e
                return None if data is None else as_bytes_view(data)
            if q.is_complete:
                chunk = np.empty(layout.chunk_shape, dtype=inner_spec.dtype)
            elif old_bytes is None:
                chunk = inner_spec.fill_array()
            else:
                off = int(index[c][0])  # type: ignore[index]
                chunk = _decode_inner(layout, old_bytes, c, off, len(old_bytes))
                if not chunk.flags.writeable:
                    chunk = chunk.copy()
            chunk[q.chunk_selection] = value[q.out_selection]
            return _encode_inner(layout, chunk, write_empty_chunks)

        touched = list(indexer)
        if layout.use_threads(len(touched)):
            new = thread_map(update_one, touched, kind="cpu")
        else:
            new = [update_one(q) for q in touched]
        updated = {q.chunk_coords: part for q, part in zip(touched, new, strict=True)}
        empty: list[memoryview | None] = []  # the encoded fill chunk, made once when needed

        def part_of(c: tuple[int, ...]) -> memoryview | None:
            if c in updated:
                return updated[c]
            part = stored(c)
            if part is None and write_empty_chunks:
                if not empty:
                    empty.append(_encode_inner(layout, inner_spec.fill_array(), True))
                part = empty[0]
            return part

        return _assemble(layout, [part_of(c) for c in np.ndindex(*layout.grid)])

    # ---- decoding ------------------------------------------------------------------------------
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        """The whole shard that ``data`` encodes (fill value where inner chunks are empty)."""
        layout = self.layout(spec)
        out = spec.empty_array()
        self.decode_into(data, (slice(None),) * len(layout.shard_shape), spec, out)
        return out

    def decode_into(self, data: Buffer, selection: Any, spec: ChunkSpec, out: np.ndarray) -> None:
        """Write ``decode(data)[selection]`` into ``out`` without building the whole shard first.

        ``data`` is the whole stored shard (its index is checked in full, as ``decode`` does);
        ``selection`` takes the forms ``decode_partial`` takes; ``out`` has its result's shape.
        """
        layout = self.layout(spec)
        view = as_bytes_view(data)
        index = _whole_shard_index(layout, view)
        indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
        if out.shape != indexer.shape:
            raise CodecError(
                f"codec 'sharding_indexed': output of shape {out.shape} for a selection of shape {indexer.shape}"
            )
        present: list[tuple[indexing.ChunkProjection, int, int]] = []
        for q in indexer:
            off, nb = int(index[q.chunk_coords][0]), int(index[q.chunk_coords][1])
            if off == EMPTY:
                out[q.out_selection] = spec.fill_value
            else:
                present.append((q, off, nb))

        def decode_one(item: tuple[indexing.ChunkProjection, int, int]) -> None:
            q, off, nb = item
            chunk = _decode_inner(layout, view[off : off + nb], q.chunk_coords, off, nb)
            out[q.out_selection] = chunk[q.chunk_selection]

        if layout.use_threads(len(present)):
            thread_map(decode_one, present, kind="cpu")
        else:
            for item in present:
                decode_one(item)

    def read_index(self, read: RangeReader, spec: ChunkSpec) -> np.ndarray | None:
        """Fetch and decode the index of one stored shard with one ranged read; ``None`` when the
        shard is missing. The seam for the shard-index cache (pass the result to
        ``decode_partial(..., index=)``)."""
        layout = self.layout(spec)
        results = read([layout.index_range()])
        if len(results) != 1:
            raise CorruptionError(f"shard index read returned {len(results)} values for 1 byte range")
        raw = results[0]
        if raw is None:
            return None
        if len(raw) != layout.index_size:
            raise CorruptionError(
                f"shard is shorter than its {layout.index_size}-byte index: read {len(raw)} bytes (truncated)"
            )
        index = decode_index(raw, layout.index)
        lo = layout.index_size if layout.index_location == "start" else 0
        check_index(index, lo, EMPTY, max_nbytes=layout.max_inner_nbytes)
        return index

    def decode_partial(
        self,
        read: RangeReader,
        selection: Any,
        spec: ChunkSpec,
        *,
        index: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """``decode(shard)[selection]`` for one stored shard, reading only the inner chunks touched.

        ``selection`` is numpy-ready, in shard coordinates: ints and slices of any step, 1-d or
        ``np.ix_``-shaped int arrays (orthogonal), or int arrays broadcast together (points).
        Reads the index once (unless ``index`` is given), then every touched inner chunk with one
        ``read`` call whose ranges are merged (see ``MERGE_GAP``); with the index at the end, the
        highest range is extended over the index's length so a short read exposes an entry that
        points into the index. Partly covered nested shards are read through their own index.
        Returns ``None`` when the shard is missing.
        """
        layout = self.layout(spec)
        indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
        if math.prod(indexer.shape) == 0:
            return np.empty(indexer.shape, dtype=spec.dtype)
        if index is None:
            index = self.read_index(read, spec)
            if index is None:
                return None
        out = np.empty(indexer.shape, dtype=spec.dtype)
        nested = _nested_sharding(layout)
        whole: list[tuple[indexing.ChunkProjection, int, int]] = []
        partial: list[tuple[indexing.ChunkProjection, int, int]] = []
        for q in indexer:
            off, nb = int(index[q.chunk_coords][0]), int(index[q.chunk_coords][1])
            if off == EMPTY:
                out[q.out_selection] = spec.fill_value
            elif nested is not None and not q.is_complete:
                partial.append((q, off, nb))
            else:
                whole.append((q, off, nb))
        guard = layout.index_size if layout.index_location == "end" else 0
        if whole:
            _read_whole_chunks(layout, read, whole, out, guard)
        if partial:

            def read_nested(item: tuple[indexing.ChunkProjection, int, int]) -> None:
                q, off, nb = item
                where = f"inner shard {q.chunk_coords} (offset={off}, nbytes={nb})"
                sub = nested.decode_partial(  # type: ignore[union-attr]
                    _offset_reader(read, off, nb, guard=guard, where=where),
                    q.chunk_selection,
                    layout.inner.specs[-1],
                )
                if sub is None:
                    raise CorruptionError(f"{where} vanished while being read")
                out[q.out_selection] = sub

            thread_map(read_nested, partial, kind="io")
        return out

    def partial_ranges(self, selection: Any, spec: ChunkSpec, index: np.ndarray) -> list[ByteRange] | None:
        """The byte ranges ``decode_partial(read, selection, spec, index=index)`` reads, in its one
        ``read`` call: a caller may fetch them for many shards at once and hand each shard's
        results back through ``read``. ``None`` when the read takes more than one step (nested
        shards covered partly); ``[]`` when it reads nothing."""
        layout = self.layout(spec)
        indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
        if math.prod(indexer.shape) == 0:
            return []
        nested = _nested_sharding(layout)
        items = []
        for q in indexer:
            off, nb = int(index[q.chunk_coords][0]), int(index[q.chunk_coords][1])
            if off == EMPTY:
                continue
            if nested is not None and not q.is_complete:
                return None
            items.append((q, off, nb))
        if not items:
            return []
        guard = layout.index_size if layout.index_location == "end" else 0
        return _span_ranges(items, guard)[2]

    def max_encoded_size(self, spec: ChunkSpec) -> int | None:
        """Every inner chunk at its largest, plus the index (``None`` when the inner codecs
        declare no bound): what an outer shard index may claim for a nested shard."""
        layout = self.layout(spec)
        if layout.max_inner_nbytes is None:
            return None
        return math.prod(layout.grid) * layout.max_inner_nbytes + layout.index_size

    def raw_inner_dtype(self, spec: ChunkSpec) -> np.dtype | None:
        """The stored element type when inner chunks are plain C-order elements (inner chain
        ``bytes`` alone), else ``None``: such chunks can be read straight into an output array."""
        return None if spec.dtype.hasobject else self.layout(spec).inner.raw_dtype

    def read_many_into(
        self,
        reader: PositionedReader,
        jobs: Sequence[tuple[Any, np.ndarray]],
        spec: ChunkSpec,
        *,
        index: np.ndarray,
    ) -> None:
        """``out[...] = decode(shard)[selection]`` for every ``(selection, out)`` of one shard
        whose inner chunks are raw elements (``raw_inner_dtype`` is not None), through one open
        file. Whole inner chunks whose place in ``out`` is one contiguous block of the same dtype
        are read straight into it, neighbours in the file with one vectored read; the others
        into reused scratch memory, then copied. Errors are those of ``decode_partial``."""
        layout = self.layout(spec)
        wire = self.raw_inner_dtype(spec)
        if wire is None:
            raise CodecError("codec 'sharding_indexed': read_many_into needs inner codecs [bytes]")
        nbytes = layout.inner.spec.nbytes
        guard = layout.index_size if layout.index_location == "end" else 0
        direct: list[tuple[int, tuple[int, ...], memoryview]] = []
        staged: list[tuple[int, indexing.ChunkProjection, np.ndarray]] = []
        for selection, out in jobs:
            indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
            if out.shape != indexer.shape:
                raise CodecError(
                    f"codec 'sharding_indexed': output of shape {out.shape} for a selection of "
                    f"shape {indexer.shape}"
                )
            same_dtype = wire == out.dtype
            for q in indexer:
                off, nb = (int(x) for x in index[q.chunk_coords])
                if off == EMPTY:
                    out[q.out_selection] = spec.fill_value
                    continue
                if nb != nbytes:
                    raise CorruptionError(
                        f"inner chunk {q.chunk_coords} (offset={off}, nbytes={nb}): codec 'bytes': chunk "
                        f"holds {nb} bytes, expected {nbytes} for shape {layout.chunk_shape} of {spec.dtype}"
                    )
                available = max(0, min(nb + guard, reader.size - off))
                if available < nb + guard:  # runs past the end of the shard or into its index
                    raise _outside_error(q.chunk_coords, off, nb, available, guard)
                target = _contiguous_target(out, q, nb) if same_dtype else None
                if target is None:
                    staged.append((off, q, out))
                else:
                    direct.append((off, q.chunk_coords, memoryview(target.reshape(-1).view(np.uint8))))

        def read_run(run: list[tuple[int, tuple[int, ...], memoryview]]) -> None:
            got = reader.read_into(run[0][0], [buf for _, _, buf in run])
            for off, coords, buf in run:  # the shard shrank between the index read and now
                if off - run[0][0] + len(buf) > got:
                    raise _outside_error(coords, off, len(buf), max(0, got - (off - run[0][0])), 0)

        def read_staged(item: tuple[int, indexing.ChunkProjection, np.ndarray]) -> None:
            off, q, out = item
            buf = scratch_buffer(nbytes, 1)
            got = reader.read_into(off, [buf])
            if got < nbytes:
                raise _outside_error(q.chunk_coords, off, nbytes, got, 0)
            chunk = np.frombuffer(buf, dtype=wire).reshape(layout.chunk_shape)
            out[q.out_selection] = chunk[q.chunk_selection]

        runs = _contiguous_runs(sorted(direct, key=lambda d: d[0]))
        tasks: list[Callable[[], None]] = [lambda r=r: read_run(r) for r in runs]
        tasks += [lambda s=s: read_staged(s) for s in staged]
        if layout.use_threads(len(direct) + len(staged)) and len(tasks) > 1:
            thread_map(lambda task: task(), tasks, kind="cpu")
        else:
            for task in tasks:
                task()


# --- helpers of the codec -----------------------------------------------------------------------
#: At most this many buffers in one vectored read (IOV_MAX is 1024 on Linux) and this many bytes
#: (a run is one task: long runs still spread over the CPU pool).
_RUN_BUFFERS = 256
_RUN_BYTES = 16 * 2**20


def _contiguous_runs(
    reads: list[tuple[int, tuple[int, ...], memoryview]],
) -> list[list[tuple[int, tuple[int, ...], memoryview]]]:
    """``reads`` (sorted by offset) grouped into runs of back-to-back byte ranges."""
    runs: list[list[tuple[int, tuple[int, ...], memoryview]]] = []
    end = -1
    size = 0
    for item in reads:
        off, _, buf = item
        if runs and off == end and len(runs[-1]) < _RUN_BUFFERS and size + len(buf) <= _RUN_BYTES:
            runs[-1].append(item)
            size += len(buf)
        else:
            runs.append([item])
            size = len(buf)
        end = off + len(buf)
    return runs


def _contiguous_target(out: np.ndarray, q: indexing.ChunkProjection, nb: int) -> np.ndarray | None:
    """The region of ``out`` a whole inner chunk fills, when it is one C-contiguous block of
    ``nb`` bytes (the chunk's bytes can then be read straight into it), else ``None``."""
    if not q.is_complete or not all(isinstance(s, slice) and s.step in (None, 1) for s in q.out_selection):
        return None
    if not all(isinstance(s, slice) and s.step in (None, 1) for s in q.chunk_selection):
        return None
    region = out[q.out_selection]
    if region.nbytes != nb or not region.flags.c_contiguous:
        return None
    return region


def _outside_error(coords: tuple[int, ...], off: int, nb: int, available: int, guard: int) -> CorruptionError:
    """The error for an inner chunk whose bytes do not all lie in the shard's chunk data."""
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


def _nested_sharding(layout: ShardLayout) -> Any:
    """The inner chain's sharding codec when inner chunks are shards read and written in parts."""
    inner = layout.inner
    ok = inner.is_partial_decodable and isinstance(inner.array_bytes, ShardingCodec)
    return inner.array_bytes if ok else None


def _whole_shard_index(layout: ShardLayout, view: memoryview) -> np.ndarray:
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


def _encode_inner(layout: ShardLayout, chunk: np.ndarray, write_empty_chunks: bool) -> memoryview | None:
    """One inner chunk's bytes; ``None`` when it is all fill and empty chunks are not written."""
    if not write_empty_chunks and is_fill(chunk, layout.inner.spec.fill_value):
        return None
    data = layout.inner.encode(chunk, write_empty_chunks=write_empty_chunks)
    return None if data is None else as_bytes_view(data)


def _assemble(layout: ShardLayout, parts: Sequence[memoryview | None]) -> bytes | None:
    """The shard value: ``parts`` (C order of the inner grid, ``None`` = not stored) back to back,
    plus their index; ``None`` when no part is stored."""
    if all(p is None for p in parts):
        return None
    index = np.full((*layout.grid, 2), EMPTY, dtype=np.uint64)
    flat = index.reshape(-1, 2)
    offset = layout.index_size if layout.index_location == "start" else 0
    body: list[memoryview] = []
    for i, part in enumerate(parts):
        if part is not None:
            flat[i] = (offset, len(part))
            body.append(part)
            offset += len(part)
    encoded_index = encode_index(index, layout.index)
    if layout.index_location == "start":
        return b"".join([encoded_index, *body])
    return b"".join([*body, encoded_index])


def _read_whole_chunks(
    layout: ShardLayout,
    read: RangeReader,
    items: list[tuple[indexing.ChunkProjection, int, int]],
    out: np.ndarray,
    guard: int,
) -> None:
    """Fetch ``items``' inner chunks with one merged ``read`` call and scatter them into ``out``.

    ``guard`` (the index size when it sits at the end) extends the highest range: fewer bytes
    back than asked means that range reaches into the index, so the index entry is corrupt.
    """
    spans, placement, ranges = _span_ranges(items, guard)
    results = read(ranges)
    if len(results) != len(spans):
        raise CorruptionError(f"read returned {len(results)} values for {len(spans)} byte ranges")
    views: list[memoryview] = []
    for (o, n), r in zip(spans, results, strict=True):
        if r is None:
            raise CorruptionError(f"shard vanished while reading bytes [{o}, {o + n})")
        if len(r) < n:
            raise CorruptionError(
                f"shard index points past the end of the shard: bytes [{o}, {o + n}) requested, "
                f"only {len(r)} available from offset {o}"
            )
        views.append(as_bytes_view(r))
    if guard and len(views[-1]) < spans[-1][1] + guard:
        data_end = spans[-1][0] + len(views[-1]) - guard  # the shard's size minus its index
        q, off, nb = max(items, key=lambda item: item[1] + item[2])
        raise CorruptionError(
            f"shard index entry of inner chunk {q.chunk_coords} (offset={off}, nbytes={nb}, end={off + nb}) "
            f"points outside the shard's chunk data [0, {data_end}) (into the shard index)"
        )

    def decode_one(i: int) -> None:
        q, off, nb = items[i]
        span, start = placement[i]
        chunk = _decode_inner(layout, views[span][start : start + nb], q.chunk_coords, off, nb)
        out[q.out_selection] = chunk[q.chunk_selection]

    if layout.use_threads(len(items)):
        thread_map(decode_one, range(len(items)), kind="cpu")
    else:
        for i in range(len(items)):
            decode_one(i)


def _span_ranges(
    items: Sequence[tuple[indexing.ChunkProjection, int, int]], guard: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[ByteRange]]:
    """The merged spans of ``items``' inner chunks, where each item lies in them, and the byte
    ranges to read: the spans, the highest one extended by ``guard`` (see _read_whole_chunks)."""
    spans, placement = merge_ranges([(off, nb) for _, off, nb in items], MERGE_GAP)
    ranges = [ByteRange(o, n) for o, n in spans]
    if guard:
        last_off, last_len = spans[-1]  # spans are sorted and disjoint: the last one ends highest
        ranges[-1] = ByteRange(last_off, last_len + guard)
    return spans, placement, ranges


def _decode_inner(
    layout: ShardLayout, data: memoryview, coords: tuple[int, ...], off: int, nb: int
) -> np.ndarray:
    """Decode one inner chunk, naming it (coordinates, offset, size) in any error."""
    where = f"inner chunk {coords} (offset={off}, nbytes={nb})"
    try:
        chunk = layout.inner.decode(data)
    except Zarr3Error as e:
        raise type(e)(f"{where}: {e}") from e
    except Exception as e:  # a codec library's own error on malformed bytes
        raise CorruptionError(f"{where} cannot be decoded: {e}") from e
    chunk = np.asarray(chunk)
    if chunk.shape != layout.chunk_shape:
        raise CorruptionError(f"{where} decoded to shape {chunk.shape}, expected {layout.chunk_shape}")
    return chunk


def _offset_reader(
    read: RangeReader, base: int, size: int, *, guard: int = 0, where: str = ""
) -> RangeReader:
    """A reader over bytes ``[base, base + size)`` of the value ``read`` reads (nested shards).

    With ``guard`` (the outer index size when it sits at the end), a range reaching the end of the
    region is extended by ``guard`` bytes: getting fewer back means the region overlaps the
    outer index, which is reported as corruption of the entry ``where`` names.
    """

    def relative(r: ByteRange | None) -> tuple[int, int]:
        if r is None:
            return 0, size
        if r.is_suffix:
            n = min(-r.offset, size)
            return size - n, n
        start = min(r.offset, size)
        return start, size - start if r.length is None else min(r.length, size - start)

    def sub_read(ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        plan = [relative(r) for r in ranges]
        extra = [guard if guard and start + n == size else 0 for start, n in plan]
        results = read([ByteRange(base + s, n + e) for (s, n), e in zip(plan, extra, strict=True)])
        checked: list[bytes | None] = []
        for (s, n), e, r in zip(plan, extra, results, strict=True):
            if r is not None and e and len(r) >= n:
                if len(r) < n + e:
                    raise CorruptionError(
                        f"{where} ends at byte {base + size}, inside the shard index "
                        f"(the shard's chunk data ends at byte {base + s + len(r) - e})"
                    )
                r = r[:n]
            checked.append(r)  # a short read stays short: the nested decoder reports it
        return checked

    return sub_read


def _spec_key(spec: ChunkSpec) -> tuple:
    fill = spec.fill_value
    try:
        fill_key: Any = (
            np.asarray(fill, dtype=spec.dtype).tobytes() if not spec.dtype.hasobject else repr(fill)
        )
    except (TypeError, ValueError):
        fill_key = repr(fill)
    return (tuple(spec.shape), spec.dtype.str, fill_key)
