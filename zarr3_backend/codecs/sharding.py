"""The ``sharding_indexed`` codec: many inner chunks stored in one value, located through an index.

The thin codec of the spec: its configuration, the layout of shards of one shape (inner and
index chains bound to their specs), encoding a whole shard, decoding a shard held whole in
memory, and merging new values into old shard bytes (``encode_partial``). The index format is
in ``shard_index``, the projection of a selection onto the inner grid in ``shard_selection``;
reading parts of a stored shard is the core's ``ShardView`` (codecs never touch a store).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from .. import indexing
from .._threads import thread_map
from ..errors import CodecError, CorruptionError
from .base import ArrayBytesCodec, Buffer, ChunkSpec, Codec, as_bytes_view
from .bytes import BytesCodec
from .chain import CodecChain, CodecLike
from .crc32c import Crc32cCodec
from .fill import is_fill
from .registry import codec_from_json, register_codec
from .shard_index import (
    EMPTY,
    MAX_INDEX_BYTES,
    IndexLocation,
    ShardLayout,
    encode_index,
    index_spec,
    whole_shard_index,
)
from .shard_selection import inner_indexer, output_indexer


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
    (nested sharding included), and ``encode_partial`` re-encoding only the inner chunks a write
    touches. Stored shards are read in parts through ``core.shard_view.ShardView``.
    """

    name = "sharding_indexed"
    #: ``encode``/``encode_into`` take the chain's ``write_empty_chunks`` flag.
    takes_write_empty_chunks: ClassVar[bool] = True
    #: Regions of a shard are read (``ShardView``) and rewritten (``encode_partial``) by inner chunk.
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
            or not all(
                isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c > 0 for c in chunk_shape
            )
        ):
            raise CodecError(
                f"codec 'sharding_indexed': 'chunk_shape' must be a list of positive integers, "
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
        ab = inner.array_bytes  # nested sharding, when its inner chunks are read and written in parts
        nested = (
            ab.layout(inner.specs[-1])
            if inner.is_partial_decodable and isinstance(ab, ShardingCodec)
            else None
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
            nested,
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
        body = offset = layout.data_start
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
        the forms ``inner_indexer`` takes. Returns ``None`` when nothing is left to store.
        """
        return _merge(self.layout(spec), old, selection, value, write_empty_chunks)

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
        ``selection`` takes the forms ``inner_indexer`` takes; ``out`` has its result's shape.
        """
        layout = self.layout(spec)
        view = as_bytes_view(data)
        index = whole_shard_index(layout, view)
        indexer = output_indexer(selection, layout.shard_shape, layout.chunk_shape, out)
        present: list[tuple[indexing.ChunkProjection, int, int]] = []
        for q in indexer:
            off, nb = int(index[q.chunk_coords][0]), int(index[q.chunk_coords][1])
            if off == EMPTY:
                out[q.out_selection] = spec.fill_value
            else:
                present.append((q, off, nb))

        def decode_one(item: tuple[indexing.ChunkProjection, int, int]) -> None:
            q, off, nb = item
            layout.place_inner(view[off : off + nb], q, off, nb, out)

        if layout.use_threads(len(present)):
            thread_map(decode_one, present, kind="cpu")
        else:
            for item in present:
                decode_one(item)

    # ---- sizes ---------------------------------------------------------------------------------
    def max_encoded_size(self, spec: ChunkSpec) -> int | None:
        """Every inner chunk at its largest, plus the index (``None`` when the inner codecs
        declare no bound): what an outer shard index may claim for a nested shard."""
        return self.layout(spec).max_shard_nbytes

    def raw_inner_dtype(self, spec: ChunkSpec) -> np.dtype | None:
        """The stored element type when inner chunks are plain C-order elements (inner chain
        ``bytes`` alone), else ``None``: such chunks can be read straight into an output array."""
        return self.layout(spec).raw_inner_dtype


# --- helpers of the codec -----------------------------------------------------------------------
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
    offset = layout.data_start
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


def _merge(
    layout: ShardLayout, old: Buffer | None, selection: Any, value: Any, write_empty_chunks: bool
) -> bytes | None:
    """``encode_partial`` for shards of ``layout``: nested shards partly written recurse here."""
    inner_spec = layout.inner.spec
    view = as_bytes_view(old) if old is not None else None
    index = whole_shard_index(layout, view) if view is not None else None
    indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
    try:
        value = np.broadcast_to(np.asarray(value, dtype=inner_spec.dtype), indexer.shape)
    except ValueError as e:
        raise CodecError(
            f"codec 'sharding_indexed': value of shape {np.shape(value)} cannot be written to a "
            f"selection of shape {indexer.shape}"
        ) from e
    nested = layout.nested

    def stored(c: tuple[int, ...]) -> memoryview | None:
        if index is None or view is None or int(index[c][0]) == EMPTY:
            return None
        off, nb = int(index[c][0]), int(index[c][1])
        return view[off : off + nb]

    def update_one(q: indexing.ChunkProjection) -> memoryview | None:
        c, old_bytes = q.chunk_coords, stored(q.chunk_coords)
        if nested is not None and not q.is_complete:
            try:
                data = _merge(
                    nested, old_bytes, q.chunk_selection, value[q.out_selection], write_empty_chunks
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
            chunk = layout.decode_inner(old_bytes, c, off, len(old_bytes))
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


def _spec_key(spec: ChunkSpec) -> tuple:
    fill = spec.fill_value
    try:
        fill_key: Any = (
            np.asarray(fill, dtype=spec.dtype).tobytes() if not spec.dtype.hasobject else repr(fill)
        )
    except (TypeError, ValueError):
        fill_key = repr(fill)
    return (tuple(spec.shape), spec.dtype.str, fill_key)
