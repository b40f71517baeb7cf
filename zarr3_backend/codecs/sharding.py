"""The ``sharding_indexed`` codec: many inner chunks stored in one value, located through an index.

A shard is the inner chunks' encoded bytes laid out one after another (C order of the inner chunk
grid here; any order is valid to read) plus an index of ``(offset, nbytes)`` uint64 pairs, one per
inner chunk, encoded with a fixed-size codec chain and placed at the start or end of the value.
Inner chunks equal to the fill value are not stored: their index entry is ``(2^64-1, 2^64-1)``.

The index format lives in pure functions (``encode_index``, ``decode_index``, ``check_index``,
``merge_ranges``, ``is_fill``); ``ShardingCodec`` ties them to the codec chain and to partial reads.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._threads import thread_map
from ..byte_range import ByteRange
from ..errors import CodecError, CorruptionError, SelectionError, Zarr3Error
from .base import ArrayBytesCodec, Buffer, ChunkSpec, Codec, RangeReader, as_bytes_view
from .bytes import BytesCodec
from .chain import CodecChain, CodecLike
from .crc32c import Crc32cCodec
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

IndexLocation = Literal["start", "end"]


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


def check_index(index: np.ndarray, lo: int, hi: int) -> None:
    """Refuse an index whose stored inner chunks do not all lie within bytes ``[lo, hi)``.

    ``lo``/``hi`` bound the chunk data (the shard without its index); pass ``hi=EMPTY`` when the
    shard's size is unknown (partial reads: a short read is caught when the chunk is fetched).
    """
    off = index[..., 0]
    nb = index[..., 1]
    present = off != EMPTY
    lo_, hi_ = np.uint64(lo), np.uint64(hi)
    with np.errstate(over="ignore"):
        bad = present & ((off < lo_) | (off > hi_) | (nb > hi_ - off))
    if bad.any():
        coords = tuple(int(i) for i in np.argwhere(bad)[0])
        o, n = int(off[coords]), int(nb[coords])
        where = f"[{lo}, {hi})" if hi != EMPTY else f"[{lo}, ...)"
        raise CorruptionError(
            f"shard index entry of inner chunk {coords} (offset={o}, nbytes={n}, end={o + n}) "
            f"points outside the shard's chunk data {where}"
            + (" (past the end of the shard)" if o + n > hi else " (into the shard index)")
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
        np.broadcast_to(np.arange(n, dtype=np.intp).reshape([-1 if d == axis else 1 for d in range(len(sel))]),
                        tuple(shard_shape))[sel]
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
        raise CodecError(f"codec 'sharding_indexed': {field!r} must be a list of codecs, got {codecs!r}")
    return tuple(codec_from_json(c) for c in codecs)


@register_codec
class ShardingCodec(ArrayBytesCodec):
    """``sharding_indexed``: stores a shard's inner chunks and their index in one value.

    Supports index at ``"start"`` or ``"end"``, any fixed-size index chain, any inner chain
    (nested sharding included), and ``decode_partial`` reading only the inner chunks a region needs.
    """

    name = "sharding_indexed"

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
        key = _spec_key(spec)
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        layout = self._build_layout(spec)
        self._cached = (key, layout)
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
        inner = CodecChain.build(self.codecs, ChunkSpec(self.chunk_shape, spec.dtype, spec.fill_value))
        index = CodecChain.build(self.index_codecs, index_spec(grid))
        size = index.encoded_size()
        if size is None:
            raise CodecError(
                f"codec 'sharding_indexed': index_codecs {index.to_json()} have no fixed encoded size; "
                "compressing codecs are not allowed in index_codecs (use bytes + crc32c)"
            )
        return ShardLayout(shard_shape, self.chunk_shape, grid, inner, index, size, self.index_location)

    # ---- encoding ------------------------------------------------------------------------------
    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> bytes | None:
        """The shard's bytes: non-fill inner chunks in C order plus the index; ``None`` when every
        inner chunk equals the fill value (nothing to store)."""
        layout = self.layout(spec)
        shard = np.asarray(chunk)
        if shard.shape != layout.shard_shape:
            raise CodecError(
                f"codec 'sharding_indexed': got an array of shape {shard.shape} for shard shape {layout.shard_shape}"
            )
        coords = list(np.ndindex(*layout.grid))

        def encode_one(c: tuple[int, ...]) -> memoryview | None:
            inner = shard[layout.chunk_slices(c)]
            if is_fill(inner, spec.fill_value):
                return None
            data = layout.inner.encode(inner)
            return None if data is None else as_bytes_view(data)

        if layout.use_threads(len(coords)):
            parts = thread_map(encode_one, coords, kind="cpu")
        else:
            parts = [encode_one(c) for c in coords]
        if all(p is None for p in parts):
            return None
        index = np.full((*layout.grid, 2), EMPTY, dtype=np.uint64)
        offset = layout.index_size if layout.index_location == "start" else 0
        body: list[memoryview] = []
        for c, part in zip(coords, parts, strict=True):
            if part is not None:
                index[c] = (offset, len(part))
                body.append(part)
                offset += len(part)
        encoded_index = encode_index(index, layout.index)
        if layout.index_location == "start":
            return b"".join([encoded_index, *body])
        return b"".join([*body, encoded_index])

    # ---- decoding ------------------------------------------------------------------------------
    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        """The whole shard that ``data`` encodes (fill value where inner chunks are empty)."""
        layout = self.layout(spec)
        view = as_bytes_view(data)
        n, isz = len(view), layout.index_size
        if n < isz:
            raise CorruptionError(f"shard is {n} bytes, shorter than its {isz}-byte index (truncated)")
        if layout.index_location == "start":
            index, lo, hi = decode_index(view[:isz], layout.index), isz, n
        else:
            index, lo, hi = decode_index(view[n - isz :], layout.index), 0, n - isz
        check_index(index, lo, hi)
        coords = np.argwhere(index[..., 0] != EMPTY)  # C order
        entries = index[tuple(coords.T)].tolist() if len(coords) else []
        present = [(tuple(c), off, nb) for c, (off, nb) in zip(coords.tolist(), entries, strict=True)]
        if len(present) < int(np.prod(layout.grid)):
            out = np.full(layout.shard_shape, spec.fill_value, dtype=spec.dtype)
        else:
            out = np.empty(layout.shard_shape, dtype=spec.dtype)

        def decode_one(item: tuple[tuple[int, ...], int, int]) -> None:
            c, off, nb = item
            out[layout.chunk_slices(c)] = _decode_inner(layout, view[off : off + nb], c, off, nb)

        if layout.use_threads(len(present)):
            thread_map(decode_one, present, kind="cpu")
        else:
            for item in present:
                decode_one(item)
        return out

    def read_index(self, read: RangeReader, spec: ChunkSpec) -> np.ndarray | None:
        """Fetch and decode the index of one stored shard with one ranged read; ``None`` when the
        shard is missing. The seam for a future shard-index cache (pass the result to
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
        check_index(index, layout.index_size if layout.index_location == "start" else 0, EMPTY)
        return index

    def decode_partial(
        self,
        read: RangeReader,
        region: Sequence[slice],
        spec: ChunkSpec,
        *,
        index: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """The part ``region`` (step-1 slices, shard coordinates) of one stored shard.

        Reads the index once (unless ``index`` is given), then every touched inner chunk with one
        ``read`` call whose ranges are merged (see ``MERGE_GAP``). Inner chunks that are themselves
        shards and only partly covered are read through their own index instead. Returns ``None``
        when the shard is missing.
        """
        layout = self.layout(spec)
        bounds = normalize_region(region, layout.shard_shape)
        out_shape = tuple(stop - start for start, stop in bounds)
        if 0 in out_shape:
            return np.empty(out_shape, dtype=spec.dtype)
        if index is None:
            index = self.read_index(read, spec)
            if index is None:
                return None
        out = np.empty(out_shape, dtype=spec.dtype)
        nested = layout.inner.is_partial_decodable
        whole: list[tuple[TouchedChunk, int, int]] = []
        partial: list[tuple[TouchedChunk, int, int]] = []
        for t in touched_chunks(bounds, layout.chunk_shape):
            off, nb = int(index[t.coords][0]), int(index[t.coords][1])
            if off == EMPTY:
                out[t.out_selection] = spec.fill_value
            elif nested and not t.is_complete:
                partial.append((t, off, nb))
            else:
                whole.append((t, off, nb))
        if whole:
            self._read_whole_chunks(layout, read, whole, out)
        if partial:

            def read_nested(item: tuple[TouchedChunk, int, int]) -> None:
                t, off, nb = item
                sub = layout.inner.array_bytes.decode_partial(  # type: ignore[attr-defined]
                    _offset_reader(read, off, nb), t.chunk_selection, layout.inner.specs[-1]
                )
                if sub is None:
                    raise CorruptionError(
                        f"inner shard {t.coords} (offset={off}, nbytes={nb}) vanished while being read"
                    )
                out[t.out_selection] = sub

            thread_map(read_nested, partial, kind="io")
        return out

    def _read_whole_chunks(
        self,
        layout: ShardLayout,
        read: RangeReader,
        items: list[tuple[TouchedChunk, int, int]],
        out: np.ndarray,
    ) -> None:
        spans, placement = merge_ranges([(off, nb) for _, off, nb in items])
        results = read([ByteRange(o, n) for o, n in spans])
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

        def decode_one(i: int) -> None:
            t, off, nb = items[i]
            span, start = placement[i]
            chunk = _decode_inner(layout, views[span][start : start + nb], t.coords, off, nb)
            out[t.out_selection] = chunk[t.chunk_selection]

        if layout.use_threads(len(items)):
            thread_map(decode_one, range(len(items)), kind="cpu")
        else:
            for i in range(len(items)):
                decode_one(i)


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


def _offset_reader(read: RangeReader, base: int, size: int) -> RangeReader:
    """A reader over bytes ``[base, base + size)`` of the value ``read`` reads (nested shards)."""

    def absolute(r: ByteRange | None) -> ByteRange:
        if r is None:
            return ByteRange(base, size)
        if r.is_suffix:
            n = min(-r.offset, size)
            return ByteRange(base + size - n, n)
        start = min(r.offset, size)
        length = size - start if r.length is None else min(r.length, size - start)
        return ByteRange(base + start, length)

    def sub_read(ranges: Sequence[ByteRange | None]) -> list[bytes | None]:
        return read([absolute(r) for r in ranges])

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
