"""The chunk pipeline: the one place between an Array and its store and codecs.

An Array resolves a selection to projections (which storage unit, which part of it, where in
the output); the pipeline turns them into store requests, decodes and scatters what lands, and
does the reverse for writes. It owns what that needs and nothing else: the codec chain bound to
the array's chunks, the shard-index caches, the optional decoded-chunk cache of the store, and
the settings in force when a call starts (threads, requests in flight, the window of compressed
bytes). How whole units are read lives in ``unit_reads``, regions inside shards in
``shard_reads``, writes in ``unit_writes``; this module routes between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._threads import thread_map
from ..codecs import CodecChain
from ..codecs.sharding import ShardingCodec
from ..codecs.transpose import TransposeCodec, undo_transposes
from ..errors import CorruptionError
from ..settings import Settings
from ..stores.base import Store
from . import shard_reads, unit_reads, unit_writes
from .chunk_cache import ChunkCache, chunk_cache_of
from .metadata import ArrayMetadata
from .paths import join_prefix
from .read_outputs import outputs
from .shard_index_cache import ShardIndexCache


class ChunkPipeline:
    """Reads and writes the storage units of one array (``metadata`` at ``path`` in ``store``)."""

    def __init__(self, store: Store, path: str, metadata: ArrayMetadata) -> None:
        self.store = store
        self.path = path
        self.metadata = metadata
        self.chain: CodecChain = metadata.codec_chain()
        ab = self.chain.array_bytes
        #: The sharding codec when it is the chain's array->bytes codec.
        self.sharding: ShardingCodec | None = ab if isinstance(ab, ShardingCodec) else None
        #: The sharding codec when it is the whole chain: it then reads and writes regions itself.
        self.shard_codec = self.sharding if self.chain.is_partial_decodable else None
        self._key_prefix = join_prefix(path)  # a chunk key is never empty: no join_path per key
        self._key_encoding = metadata.chunk_key_encoding
        #: What one stored object is called in error messages.
        self.unit_name = "shard" if self.sharding is not None else "chunk"
        settings = store.settings
        #: Stores with costly requests keep decoded shard indexes (see shard_index_cache).
        self.index_cache = (
            ShardIndexCache(settings.shard_index_cache_bytes)
            if store.costly_requests and self.sharding
            else None
        )
        #: Decoded, checked shard indexes by their encoded bytes (a pure memo, never stale).
        self.index_memo: dict[bytes, np.ndarray] = {}

    # ---- what every step needs -----------------------------------------------------------
    def key(self, coords: tuple[int, ...]) -> str:
        """The store key of the storage unit at grid ``coords``."""
        return self._key_prefix + self._key_encoding.encode_chunk_key(coords)

    @property
    def inner_chunk_shape(self) -> tuple[int, ...] | None:
        """The sharding codec's inner chunk shape in the array's axis order (transposes before
        it undone); ``None`` when not sharded, or when another array->array codec comes first
        (inner chunks then have no shape in array coordinates)."""
        if self.sharding is None:
            return None
        before = self.chain.array_array
        if not all(isinstance(c, TransposeCodec) for c in before):
            return None
        return undo_transposes([c.order for c in before], self.sharding.chunk_shape)  # type: ignore[attr-defined]

    @property
    def read_chunk_shape(self) -> tuple[int, ...]:
        """The read chunk: the inner chunk shape when sharded (``inner_chunk_shape``), else the
        chunk grid's shape."""
        inner = self.inner_chunk_shape
        return self.metadata.chunk_grid.chunk_shape if inner is None else inner

    @property
    def settings(self) -> Settings:
        """The settings in force for this array's store now (read once per call)."""
        return self.store.settings

    @property
    def chunk_cache(self) -> ChunkCache | None:
        """The store's decoded-chunk cache, or None when ``chunk_cache_bytes`` is 0."""
        return chunk_cache_of(self.store)

    def decode_window(self, settings: Settings | None = None) -> int:
        """Bytes of landed values a streamed read hands to its decoders at most: the
        ``window_bytes`` setting, or half of it where the store holds back answers it has not
        handed over within the other half (``Store.holds_half_window``)."""
        window = (settings or self.settings).window_bytes
        return max(1, window // 2 if self.store.holds_half_window else window)

    def decode(self, key: str, data: Any) -> np.ndarray:
        """The decoded unit stored under ``key`` (errors name the key)."""
        try:
            return self.chain.decode(data)
        except CorruptionError as e:
            raise type(e)(f"{self.unit_name} {key!r}: {e}") from e

    # ---- reads ---------------------------------------------------------------------------
    def read(self, items: Sequence[tuple[np.ndarray, Any]]) -> None:
        """Fill ``out[p.out_selection]`` for every ``(out, projection)``: whole storage units
        inline or streamed, regions inside shards through the shards' indexes."""
        if self.shard_codec is None:  # only shards are read in parts (by their inner chunks)
            whole, parts = list(items), []
        else:
            whole = [(o, p) for o, p in items if p.is_complete]
            parts = [(o, p) for o, p in items if not p.is_complete]
        if whole:
            unit_reads.read_whole(self, whole)
        if parts:
            shard_reads.read_regions(self, parts)

    def read_boxes(self, indexers: Sequence[Any], keys: Sequence[Any]) -> list[np.ndarray]:
        """The values of many selections in one ``read``: every storage unit and shard index
        they touch is fetched once; a selection whose ``keys`` entry repeats is read once, then
        copied. Small results are carved from shared slabs (``read_outputs.outputs``)."""
        first: dict[Any, int] = {}
        source = [first.setdefault(k, i) for i, k in enumerate(keys)]
        outs = outputs(
            [ix.shape for ix in indexers], self.metadata.data_type.numpy, f"array {self.path or '/'!r}"
        )
        items = [
            (out, p)
            for i, (ix, out) in enumerate(zip(indexers, outs, strict=True))
            if source[i] == i
            for p in ix
        ]
        self.read(items)
        copies = [i for i, j in enumerate(source) if j != i]

        def copy(i: int) -> None:
            np.copyto(outs[i], outs[source[i]])

        if copies:
            thread_map(copy, copies, kind="cpu")
        return outs

    # ---- writes --------------------------------------------------------------------------
    def write(self, indexer: Any, value: np.ndarray, *, write_empty_chunks: bool = False) -> None:
        """Encode and store each unit ``indexer`` touches (read-modify-write for partial ones)."""
        unit_writes.write_units(self, indexer, value, write_empty_chunks=write_empty_chunks)

    def stored_units_outside(self, grid_shape: Sequence[int]) -> list[str]:
        """Keys of the stored units whose grid coordinates fall outside ``grid_shape`` (what a
        shrinking resize must erase); found by listing the array's prefix."""
        prefix = join_prefix(self.path)
        encoding = self.metadata.chunk_key_encoding
        ndim = len(grid_shape)
        doomed = []
        for key in self.store.list_prefix(prefix):
            rel = key[len(prefix) :]
            if rel == "zarr.json" or "/zarr.json" in rel:
                continue
            try:
                coords = encoding.decode_chunk_key(rel)
            except Exception:  # not a chunk key of this array (e.g. stray file)
                continue
            if len(coords) == ndim and any(c >= n for c, n in zip(coords, grid_shape, strict=True)):
                doomed.append(key)
        return doomed

    def forget(self, keys: Sequence[str] | None = None) -> None:
        """Drop what the caches hold of ``keys`` (all when None): they were written."""
        if self.index_cache is not None:
            self.index_cache.invalidate(keys)
        cache = self.chunk_cache
        if cache is not None:
            cache.invalidate(keys if keys is not None else None, prefix=join_prefix(self.path))
