"""The Array: numpy-style reads and writes of one Zarr v3 array, one batched store call per call.

A read resolves the selection to the storage units (chunks, or shards when sharded) it touches,
fetches them in one batched store call, decodes them concurrently and scatters into one output
array. Regions inside a shard are read through the sharding codec's partial decoder (index
first, then only the inner chunks needed). Writes encode concurrently and store in one call;
units equal to the fill value are erased instead of written unless ``write_empty_chunks``.
"""

from __future__ import annotations

import operator
import random
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from .. import _slabs, indexing
from .._threads import scratch_buffer, thread_map
from ..byte_range import ByteRange
from ..codecs import CodecChain
from ..codecs.fill import is_fill
from ..codecs.sharding import ShardingCodec
from ..codecs.transpose import TransposeCodec
from ..errors import CorruptionError, ReadOnlyError, ResourceLimitError, ShapeError, WriteConflictError
from ..stores.base import Store
from . import rectilinear
from .attributes import Attributes
from .commit import Transaction
from .metadata import ArrayMetadata
from .metadata_v2 import V2_MARKER, v2_fill_value_is_null
from .metadata_v2_store import store_node_metadata
from .metadata_v2_write import node_documents
from .paths import join_path, join_prefix, node_name
from .selection import OIndex, VIndex, fancy_kind, flatten_nd
from .shard_index_cache import ShardIndexCache


def _whole_chunk_target(p: Any, out: np.ndarray, chunk_shape: tuple[int, ...]) -> np.ndarray | None:
    """The region of ``out`` that chunk projection ``p`` fills, when it takes the whole chunk in
    C order and is one contiguous block of memory (then a chunk can be decoded straight into it)."""
    if not p.is_complete:
        return None
    for s, n in zip(p.chunk_selection, chunk_shape, strict=True):
        if isinstance(s, slice):
            if s.start != 0 or s.stop != n or s.step not in (None, 1):
                return None
        elif not isinstance(s, int | np.integer) or s != 0 or n != 1:
            return None
    region = out[p.out_selection]
    if not isinstance(region, np.ndarray) or not np.may_share_memory(region, out):
        return None  # a 0-d selection gives a numpy scalar: a copy, not a view
    if region.size != int(np.prod(chunk_shape)) or not region.flags.c_contiguous or region.size == 0:
        return None
    return region


#: Inline reads of chunks at least this big ask the store to read ahead ``_AHEAD`` chunks.
_HINT_MIN_BYTES = 1 << 20
_AHEAD = 4


#: At most this many decoded shard indexes are memoised per Array (see ``Array._index_memo``).
_INDEX_MEMO_MAX = 4096
#: A partial unit write that loses its compare-and-swap this often raises WriteConflictError.
_CAS_ATTEMPTS = 64
_CAS_PAUSE = 0.002  # seconds; doubled per lost attempt (capped at 64x), with random jitter

#: ``get_regions`` carves results of at most a quarter of a slab out of shared 32 MiB slabs:
#: one large allocation faults its memory in huge pages, several times cheaper per byte than
#: many ~1 MiB arrays, and a slab whose results are all gone is reused (``_slabs``). A result
#: keeps its slab alive, so slabs stay small.


def _outputs(shapes: Sequence[tuple[int, ...]], dtype: np.dtype) -> list[np.ndarray]:
    """Fresh uninitialised arrays of ``shapes``; small ones are views of shared slabs."""
    itemsize = dtype.itemsize
    sizes = [int(np.prod(s, dtype=np.int64)) * itemsize for s in shapes]
    slab_bytes = _slabs.SLAB_BYTES
    small = slab_bytes // 4
    if dtype.hasobject or sum(n for n in sizes if 0 < n <= small) < 2 * small:
        return [_slabs.empty(s, dtype) for s in shapes]
    outs: list[np.ndarray] = []
    slab, used = None, 0
    for shape, n in zip(shapes, sizes, strict=True):
        if not 0 < n <= small:
            outs.append(_slabs.empty(shape, dtype))
            continue
        step = -(-n // 64) * 64  # 64-byte aligned starts (slabs start aligned)
        if slab is None or used + n > len(slab):
            slab, used = _slabs.POOL.take(slab_bytes), 0
        outs.append(slab[used : used + n].view(dtype).reshape(shape))
        used += step
    return outs


def _part(value: np.ndarray, selection: Any) -> np.ndarray:
    """``value[selection]`` always as an array: a 0-d object array indexed by ``()`` would give its
    element (a ``str``), which the encoders cannot take."""
    return value[_whole_index(selection)]


def _whole_index(selection: Any) -> tuple:
    """``selection`` ending in ``...``: indexing or assigning through it never unwraps a 0-d
    object array into (or out of) its element."""
    sel = selection if isinstance(selection, tuple) else (selection,)
    return (*sel, Ellipsis)


def _spans_units(indexer: Any) -> bool:
    """Whether a selection touches more than one storage unit (chunk or shard)."""
    units = iter(indexer)
    return next(units, None) is not None and next(units, None) is not None


class _OneUnit:
    """The part of ``indexer`` that falls in the unit stored under ``key`` (same output shape)."""

    def __init__(self, indexer: Any, key: str, chunk_key: Callable[[tuple[int, ...]], str]) -> None:
        self.shape = indexer.shape
        self._parts = [p for p in indexer if chunk_key(p.chunk_coords) == key]

    def __iter__(self) -> Any:
        return iter(self._parts)


def _region_key(region: Any, shape: tuple[int, ...]) -> tuple:
    """A hashable form of a normalized basic selection: equal keys select the same elements."""
    return tuple(
        (s.start, s.stop, s.step) if isinstance(s, slice) else s
        for s in indexing.normalize_selection(tuple(region), shape)
    )


def _in_order(selection: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``selection`` is the whole of an array of ``shape``, in order (step-1 slices)."""
    return (
        isinstance(selection, tuple)
        and len(selection) == len(shape)
        and all(
            isinstance(s, slice) and s.indices(n) == (0, n, 1) for s, n in zip(selection, shape, strict=True)
        )
    )


class Array:
    """One Zarr v3 array in a store, addressed numpy-style.

    ``store`` and ``path`` locate it; ``metadata`` is its parsed ``zarr.json``
    (``ArrayMetadata``). Made by ``open_array``/``create_array`` or a Group, not directly.
    """

    def __init__(
        self,
        store: Store,
        path: str,
        metadata: ArrayMetadata,
        *,
        read_only: bool = False,
        write_empty_chunks: bool = False,
    ) -> None:
        self.store = store
        self.path = path
        self.metadata = metadata
        self.read_only = read_only or store.read_only
        # v2 without a fill value: every chunk is stored (none equals "no value"), as zarr-python does
        self.write_empty_chunks = write_empty_chunks or v2_fill_value_is_null(metadata)
        # object stores: shard indexes read through this Array object are kept (see shard_index_cache)
        self._index_cache = ShardIndexCache() if store.costly_requests else None

    # ---- description -----------------------------------------------------------------------
    @property
    def zarr_format(self) -> int:
        """2 for an array stored as Zarr v2 (``.zarray``), else 3."""
        return 2 if V2_MARKER in self.metadata.extra_fields else 3

    @property
    def name(self) -> str:
        """The last segment of the array's path ("" for a root array)."""
        return node_name(self.path)

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self.metadata.shape

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        """The numpy data type of the values (native byte order)."""
        return self.metadata.data_type.numpy

    @property
    def nbytes(self) -> int:
        """Size of the whole array in bytes, uncompressed."""
        return self.size * self.dtype.itemsize

    @property
    def fill_value(self) -> Any:
        """The value of never-written elements (a numpy scalar of ``dtype``)."""
        return self.metadata.fill_value

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The ``dimension_names`` of ``zarr.json``, or ``None``."""
        return self.metadata.dimension_names

    @property
    def storage_chunks(self) -> tuple[int, ...]:
        """The shape of one stored object (shard or chunk): the unit a writer must own."""
        return self.metadata.chunk_grid.chunk_shape

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape, or ``None`` when the array is not sharded."""
        return self.storage_chunks if self._sharding is not None else None

    @property
    def chunks(self) -> tuple[int, ...]:
        """The read chunk: the inner chunk shape when sharded (in the array's axis order, also
        when transposes come before the sharding codec), else the chunk grid's shape."""
        codec = self._sharding
        if codec is None:
            return self.storage_chunks
        inner = tuple(codec.chunk_shape)
        for c in reversed(self._chain.array_array):
            if not isinstance(c, TransposeCodec):  # no inner chunk in array coordinates
                return self.storage_chunks
            back = [0] * len(inner)
            for axis, size in zip(c.order, inner, strict=True):
                back[axis] = size
            inner = tuple(back)
        return inner

    @property
    def codecs(self) -> list[dict]:
        """The codec chain as written in ``zarr.json``."""
        return [c.to_json() for c in self.metadata.codecs]

    @property
    def attrs(self) -> Attributes:
        """The attributes, as a mutable mapping whose changes are written at once."""
        return Attributes(self)

    @property
    def nchunks(self) -> int:
        """Number of storage units (chunks or shards) in the grid."""
        return int(np.prod(self.metadata.chunk_grid.grid_shape(self.shape), dtype=np.int64))

    @property
    def info(self) -> Any:
        """What zarr-python's ``.info`` shows, as a ``core.info.ArrayInfo`` (print it)."""
        from .info import array_info

        return array_info(self)

    def __repr__(self) -> str:
        return f"<zarr3_backend.Array {self.path or '/'!r} shape={self.shape} dtype={self.dtype}>"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)

    # ---- codec plumbing --------------------------------------------------------------------
    @cached_property
    def _chain(self) -> CodecChain:
        return self.metadata.codec_chain()

    @cached_property
    def _sharding(self) -> ShardingCodec | None:
        """The sharding codec when it is the chain's array->bytes codec."""
        ab = self._chain.array_bytes
        return ab if isinstance(ab, ShardingCodec) else None

    def _chunk_key(self, coords: tuple[int, ...]) -> str:
        return join_path(self.path, self.metadata.chunk_key_encoding.encode_chunk_key(coords))

    def _decode(self, key: str, data: Any) -> np.ndarray:
        try:
            return self._chain.decode(data)
        except CorruptionError as e:
            raise type(e)(f"{self._unit_name} {key!r}: {e}") from e

    @cached_property
    def _unit_name(self) -> str:
        """What one stored object is called in error messages: "shard" or "chunk"."""
        return "shard" if self._sharding is not None else "chunk"

    @cached_property
    def _shard_codec(self) -> ShardingCodec | None:
        """The sharding codec when it is the whole chain (it then reads and writes parts itself)."""
        return self._sharding if self._chain.is_partial_decodable else None

    def _fill_chunk(self) -> np.ndarray:
        return self._chain.spec.fill_array()

    @cached_property
    def _direct(self) -> tuple[np.dtype, tuple, Any] | None:
        """``(stored dtype, outer bytes->bytes codecs, innermost compressor or None)`` when a chunk
        is plain C-order elements under bytes->bytes codecs whose innermost one can decode into a
        given buffer (blosc, zstd), else ``None``: such chunks skip the generic codec chain."""
        chain = self._chain
        wire = None if chain.array_array else chain.array_bytes.raw_dtype(chain.specs[-1])
        if wire is None:
            return None
        bb = chain.bytes_bytes
        inner = bb[0] if bb else None
        if inner is not None and not inner.decodes_into:
            return None
        return wire, bb[1:], inner

    @cached_property
    def _chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk (storage unit)."""
        return self._chain.spec.nbytes

    def _scatter(self, key: str, data: Any, p: Any, out: np.ndarray, target: np.ndarray | None) -> None:
        """Decode chunk bytes ``data`` into ``out`` for projection ``p``. With ``_direct``, the
        innermost compressor decodes into ``target`` (the whole-chunk region of ``out``, or None)
        or into per-thread scratch memory: no intermediate chunk allocation."""
        direct = self._direct
        if direct is None:
            codec = self._shard_codec
            if codec is not None and all(isinstance(s, slice) for s in p.out_selection):
                try:  # inner chunks decode straight into their place in ``out``
                    codec.decode_into(data, p.chunk_selection, self._chain.spec, out[(*p.out_selection, ...)])
                except CorruptionError as e:
                    raise type(e)(f"shard {key!r}: {e}") from e
                return
            out[p.out_selection] = self._decode(key, data)[p.chunk_selection]
            return
        wire, outer, inner = direct
        spec = self._chain.spec
        nbytes = self._chunk_nbytes
        try:
            for c in reversed(outer):
                data = c.decode(data, spec)
            if inner is not None:
                declared = inner.decoded_size(data)  # checked before any chunk-sized allocation
                if declared is None:  # not declared: the bytes present bound what decodes
                    data = inner.decode(data, spec)
                elif declared != nbytes:
                    raise CorruptionError(
                        f"codec {inner.name!r}: frame decompresses to {declared} bytes, expected {nbytes}"
                    )
                elif target is not None and wire == out.dtype:
                    inner.decode_into(data, spec, memoryview(target.reshape(-1).view(np.uint8)))
                    return
                else:
                    data = inner.decode_into(data, spec, scratch_buffer(nbytes, 1))
            if len(data) != nbytes:
                raise CorruptionError(
                    f"codec 'bytes': chunk holds {len(data)} bytes, expected {nbytes} "
                    f"for shape {spec.shape} of {spec.dtype}"
                )
        except CorruptionError as e:
            raise type(e)(f"chunk {key!r}: {e}") from e
        chunk = np.frombuffer(data, dtype=wire).reshape(spec.shape)
        out[p.out_selection] = chunk[p.chunk_selection]

    def _read_inline(self, whole: list[tuple[np.ndarray, Any]], keys: list[str]) -> None:
        """Stores with cheap synchronous reads (local files, memory): each CPU worker reads one
        chunk into reused scratch memory (or, for an uncompressed whole chunk whose output
        region is contiguous, straight into ``out``), decodes and scatters it."""
        get_into = self.store.get_into
        fill = self.fill_value
        direct = self._direct
        raw = direct is not None and direct[2] is None and not direct[1] and direct[0] == self.dtype
        shape = self._chain.spec.shape
        # read-ahead: while chunk i is decoded, the kernel already fetches chunk i + AHEAD
        hint = self.store.will_need if self._chunk_nbytes >= _HINT_MIN_BYTES else None
        if hint is not None and len(keys) > 1:
            hint(keys[:_AHEAD])

        def read_one(i: int) -> None:
            if hint is not None and i + _AHEAD < len(keys):
                hint([keys[i + _AHEAD]])
            out, p = whole[i]
            target = _whole_chunk_target(p, out, shape) if direct is not None else None
            placed = False

            def alloc(n: int) -> memoryview:
                nonlocal placed
                if raw and target is not None and n == target.nbytes:
                    placed = True
                    return memoryview(target.reshape(-1).view(np.uint8))
                return scratch_buffer(n, 0)

            data = get_into(keys[i], alloc)
            if data is None:
                out[p.out_selection] = fill
            elif placed and len(data) == target.nbytes:
                return  # the file's bytes are the chunk's elements, already in place
            else:
                self._scatter(keys[i], data, p, out, target)

        thread_map(read_one, range(len(whole)), kind="cpu")

    # ---- reading ---------------------------------------------------------------------------
    def _read(self, indexer: Any) -> np.ndarray:
        try:
            out = _slabs.empty(indexer.shape, self.dtype)  # recycled memory for chunk-sized results
        except MemoryError:  # numpy fails cleanly on one allocation too large to make
            raise ResourceLimitError(
                f"array {self.path or '/'!r}: a selection of shape {indexer.shape} of {self.dtype} "
                "does not fit in memory"
            ) from None
        items = [(out, p) for p in indexer]
        adopted = self._read_items(items, adopt=len(items) == 1)
        return adopted.get(id(out), out)  # one shard region: its decoded array is the result

    def _read_items(self, items: list[tuple[np.ndarray, Any]], adopt: Any = False) -> dict[int, np.ndarray]:
        """Fill ``out[p.out_selection]`` for every ``(out, projection)``: whole storage units with
        one batched fetch (or inline reads), shard regions through the shards' indexes.

        ``adopt`` (True, or a set of ``id(out)``) names outputs filled by exactly one shard region;
        for those the decoded array itself is returned in ``{id(out): array}`` instead of copied."""
        partial_ok = self._shard_codec is not None  # the codec reads regions of a unit itself
        whole = [(o, p) for o, p in items if p.is_complete or not partial_ok]
        parts = [(o, p) for o, p in items if not (p.is_complete or not partial_ok)]
        fill = self.fill_value

        if whole and self.store.inline_io:
            self._read_inline(whole, [self._chunk_key(p.chunk_coords) for _, p in whole])
        elif whole:
            keys = [self._chunk_key(p.chunk_coords) for _, p in whole]
            values = self.store.get_many(keys)
            shape = self._chain.spec.shape

            def decode_into(i: int) -> None:
                (out, p), data = whole[i], values[i]
                if data is None:
                    out[p.out_selection] = fill
                else:
                    target = _whole_chunk_target(p, out, shape) if self._direct is not None else None
                    self._scatter(keys[i], data, p, out, target)

            thread_map(decode_into, range(len(whole)), kind="cpu")

        return self._read_parts(parts, adopt) if parts else {}

    def _shard_indexes(self, keys: list[str], refresh: bool = False) -> dict[str, np.ndarray | None]:
        """The decoded index of each shard in ``keys`` (``None`` when missing), the uncached ones
        (all with ``refresh``) fetched with one batched ranged store call."""
        codec, spec = self._chain.array_bytes, self._chain.specs[-1]
        cache = self._index_cache
        generation = cache.generation if cache is not None else 0
        found: dict[str, np.ndarray | None] = {}
        missing = []
        for key in dict.fromkeys(keys):
            index = cache.get(key) if cache is not None and not refresh else None
            if index is None:
                missing.append(key)
            else:
                found[key] = index
        if missing:
            index_range = codec.layout(spec).index_range()
            raws = self.store.get_partial_values([(k, index_range) for k in missing])
            memo = self._index_memo
            for key, raw in zip(missing, raws, strict=True):
                index = memo.get(raw) if raw is not None else None
                if index is None:
                    try:
                        index = codec.read_index(lambda ranges, raw=raw: [raw for _ in ranges], spec)
                    except CorruptionError as e:
                        raise type(e)(f"shard {key!r}: {e}") from e
                    if index is not None:
                        if len(memo) >= _INDEX_MEMO_MAX:
                            memo.clear()
                        index.flags.writeable = False
                        memo[bytes(raw)] = index
                found[key] = index
                if cache is not None and index is not None:
                    cache.put(key, index, generation)
        return found

    @cached_property
    def _raw_shard_reads(self) -> bool:
        """Whether regions inside shards are read with ``ShardingCodec.read_many_into``: a
        store with cheap per-key calls (``inline_io``, its ``open_reader``), no shard-index cache, inner chunks stored as raw elements."""
        codec = self._shard_codec
        return (
            codec is not None
            and self.store.inline_io
            and self._index_cache is None
            and codec.raw_inner_dtype(self._chain.specs[-1]) is not None
        )

    @cached_property
    def _index_memo(self) -> dict[bytes, np.ndarray]:
        """Decoded, checked shard indexes by their encoded bytes: an index read again with the
        same bytes (re-reading a shard) skips decoding and checking. A pure memo, never stale."""
        return {}

    def _read_parts(self, parts: list[tuple[np.ndarray, Any]], adopt: Any = False) -> dict[int, np.ndarray]:
        """Read regions inside shards: every shard index first (one batched request), then the
        inner chunks of each region concurrently (``adopt``: see ``_read_items``)."""
        codec, spec = self._chain.array_bytes, self._chain.specs[-1]
        keys = [self._chunk_key(p.chunk_coords) for _, p in parts]
        indexes = self._shard_indexes(keys)
        fill = self.fill_value
        adopted: dict[int, np.ndarray] = {}

        raw = self._raw_shard_reads
        by_shard: dict[str, list[tuple[Any, np.ndarray]]] = {}
        if raw:  # raw inner chunks: one task per shard reads them all through one open file
            rest = []
            for i, (out, p) in enumerate(parts):
                if indexes[keys[i]] is not None and all(isinstance(s, slice) for s in p.out_selection):
                    by_shard.setdefault(keys[i], []).append((p.chunk_selection, out[(*p.out_selection, ...)]))
                else:
                    rest.append(i)
        else:
            rest = list(range(len(parts)))

        def read_shard(key: str) -> None:
            reader = self.store.open_reader(key)
            if reader is None:
                raise CorruptionError(f"shard {key!r} vanished while being read")
            try:
                with reader:
                    codec.read_many_into(reader, by_shard[key], spec, index=indexes[key])
            except CorruptionError as e:
                raise type(e)(f"shard {key!r}: {e}") from e

        def read_part(i: int) -> None:
            (out, p), key = parts[i], keys[i]
            index = indexes[key]
            if index is None:
                out[p.out_selection] = fill
                return

            def reader(ranges: list[ByteRange | None]) -> list[bytes | None]:
                return self.store.get_partial_values([(key, r) for r in ranges])

            try:
                try:
                    sub = codec.decode_partial(reader, p.chunk_selection, spec, index=index)
                except CorruptionError:
                    if self._index_cache is None:
                        raise
                    # the cached index may predate a rewrite by another process: read it afresh
                    self._index_cache.invalidate([key])
                    index = self._shard_indexes([key], refresh=True)[key]
                    sub = (
                        None
                        if index is None
                        else codec.decode_partial(reader, p.chunk_selection, spec, index=index)
                    )
            except CorruptionError as e:
                raise type(e)(f"shard {key!r}: {e}") from e
            if sub is None:
                out[p.out_selection] = fill
            elif (
                (adopt is True or (adopt and id(out) in adopt))
                and sub.shape == out.shape
                and _in_order(p.out_selection, out.shape)
            ):
                adopted[id(out)] = sub
            else:
                out[p.out_selection] = sub

        # local files: reads are cheap system calls, so CPU-many threads beat a GIL convoy of 32
        kind = "cpu" if self.store.inline_io else "io"
        tasks: list[Callable[[], None]] = [lambda k=k: read_shard(k) for k in by_shard]
        tasks += [lambda i=i: read_part(i) for i in rest]
        thread_map(lambda task: task(), tasks, kind=kind)
        return adopted

    def __getitem__(self, selection: Any) -> Any:
        if not self.metadata.chunk_grid.is_regular:
            result = rectilinear.read(self, selection)
            return result[()] if result.ndim == 0 else result
        kind = fancy_kind(selection, self.shape)
        if kind == "nd-array":
            flat, pos, index_shape = flatten_nd(selection)
            result = self.oindex[flat]
            return result.reshape(result.shape[:pos] + index_shape + result.shape[pos + 1 :])
        if kind is not None:
            return self.vindex[selection] if kind == "vectorized" else self.oindex[selection]
        result = self._read(indexing.basic_indexer(selection, self.shape, self.storage_chunks))
        return result[()] if result.ndim == 0 else result

    def get_region(self, region: tuple[slice, ...]) -> np.ndarray:
        """The values of a box of step-1 slices (what a dask task reads), in one batched call."""
        return self._read(indexing.basic_indexer(tuple(region), self.shape, self.storage_chunks))

    def get_regions(self, regions: Sequence[tuple[slice, ...]]) -> list[np.ndarray]:
        """The values of many boxes of step-1 slices in one call: every storage unit and shard
        index they touch is fetched once, in batched store calls, and decoded concurrently."""
        indexers = [indexing.basic_indexer(tuple(r), self.shape, self.storage_chunks) for r in regions]
        first: dict[tuple, int] = {}  # a region asked for again is read once, then copied
        source = [first.setdefault(_region_key(r, self.shape), i) for i, r in enumerate(regions)]
        outs, items, single = _outputs([ix.shape for ix in indexers], self.dtype), [], set()
        for i, (indexer, out) in enumerate(zip(indexers, outs, strict=True)):
            if source[i] != i:
                continue
            projections = list(indexer)
            if len(projections) == 1:
                single.add(id(out))
            items.extend((out, p) for p in projections)
        adopted = self._read_items(items, adopt=single)
        results = [adopted.get(id(out), out) for out in outs]
        copies = [i for i, j in enumerate(source) if j != i]

        def copy(i: int) -> None:
            np.copyto(outs[i], results[source[i]])

        if copies:
            thread_map(copy, copies, kind="cpu")
        return [outs[i] if source[i] != i else r for i, r in enumerate(results)]

    @property
    def oindex(self) -> OIndex:
        """Orthogonal indexing: integer arrays and boolean masks apply per axis."""
        return OIndex(self)

    @property
    def vindex(self) -> VIndex:
        """Vectorized (numpy fancy) indexing: coordinate arrays broadcast together."""
        return VIndex(self)

    # ---- writing ---------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"array {self.path or '/'!r} is read-only")

    def _coerce_value(self, value: Any, shape: tuple[int, ...]) -> np.ndarray:
        try:
            if self.dtype.kind in "OT":
                arr = np.asarray(value, dtype=object)
            else:
                arr = np.asarray(value)
                if arr.dtype != self.dtype:
                    arr = arr.astype(
                        self.dtype, casting="unsafe" if arr.dtype.kind in "biufc" else "same_kind"
                    )
            return np.broadcast_to(arr, shape)
        except ValueError as e:
            raise ShapeError(
                f"array {self.path or '/'!r}: value of shape {np.shape(value)} cannot be written "
                f"to a selection of shape {shape}"
            ) from e
        except TypeError as e:
            raise ShapeError(
                f"array {self.path or '/'!r}: cannot store value of type {type(value).__name__}: {e}"
            ) from e

    def _write(self, indexer: Any, value: Any) -> None:
        if _spans_units(indexer) and not self.store.commits_externally:
            self._write_atomically(indexer, value)
        else:
            self._write_units(indexer, value)

    def _write_units(self, indexer: Any, value: Any) -> None:
        """Encode and store each unit ``indexer`` touches (read-modify-write for partial ones)."""
        self._check_writable()
        value = self._coerce_value(value, indexer.shape)
        projections = list(indexer)
        if not projections:
            return
        grid = self.metadata.chunk_grid
        unit = self.storage_chunks
        keys = [self._chunk_key(p.chunk_coords) for p in projections]
        stale = [i for i, p in enumerate(projections) if not p.is_complete]
        old, versions = self._read_stale([keys[i] for i in stale])
        old, versions = dict(zip(stale, old, strict=True)), dict(zip(stale, versions, strict=True))
        fill = self.fill_value
        # Stores with cheap synchronous writes: each CPU worker encodes one unit into reused
        # scratch memory and writes it at once (bounded memory, encoding overlaps writing).
        # Only when no old unit must be decoded: a corrupt old unit must fail the call before
        # anything is written, so read-modify-writes encode everything first.
        inline = self.store.inline_io and not stale
        nbytes = int(np.prod(unit)) * self.dtype.itemsize
        out_bytes = nbytes + 64  # room for a compressor's worst-case overhead, or a shard index
        if self._shard_codec is not None:
            out_bytes += self._shard_codec.layout(self._chain.specs[-1]).index_size

        def new_chunk() -> np.ndarray:
            if inline and not self.dtype.hasobject:
                return np.frombuffer(scratch_buffer(nbytes, 0), dtype=self.dtype).reshape(unit)
            return np.empty(unit, dtype=self.dtype)

        shard_codec, wec = self._shard_codec, self.write_empty_chunks

        def encode_unit(unit_value: np.ndarray) -> Any:
            # inline: each unit is written before its thread encodes the next, so the encoded
            # bytes may live in that thread's scratch memory
            out = scratch_buffer(out_bytes, 2) if inline else None
            return self._chain.encode(unit_value, write_empty_chunks=wec, out=out)

        def encode(i: int) -> Any:
            p = projections[i]
            if shard_codec is not None and not p.is_complete:
                try:  # only the inner chunks the write touches are decoded and re-encoded
                    return shard_codec.encode_partial(
                        old[i],
                        p.chunk_selection,
                        _part(value, p.out_selection),
                        self._chain.spec,
                        write_empty_chunks=wec,
                    )
                except CorruptionError as e:
                    raise type(e)(f"shard {keys[i]!r}: {e}") from e
            if p.is_complete:
                region = grid.chunk_region(p.chunk_coords, self.shape)
                edge = any(r.stop - r.start != c for r, c in zip(region, unit, strict=True))
                whole = _part(value, p.out_selection) if not edge else None
                # encoded straight from the caller's values, no staging copy, when the codec
                # copies each inner chunk out itself (sharding) or they are one C-ordered block
                direct = whole is not None and (
                    shard_codec is not None or (whole.flags.c_contiguous and not self.dtype.hasobject)
                )
                if direct and whole.shape == tuple(unit):
                    if not wec and is_fill(whole, fill):
                        return None
                    return encode_unit(whole)
                chunk = self._fill_chunk() if edge else new_chunk()
            elif old[i] is None:
                chunk = self._fill_chunk()
            else:
                chunk = self._decode(keys[i], old[i])
                if not chunk.flags.writeable:
                    chunk = chunk.copy()
            chunk[_whole_index(p.chunk_selection)] = _part(value, p.out_selection)
            if not wec and is_fill(chunk, fill):
                return None
            return encode_unit(chunk)

        cache = self._index_cache
        if cache is not None:  # before and after: no reader may cache an index from in between
            cache.invalidate(keys)
        if inline:

            def encode_and_store(i: int) -> None:
                data = encode(i)
                if data is None:
                    self.store.erase(keys[i])
                else:
                    self.store.set(keys[i], data)

            thread_map(encode_and_store, range(len(projections)), kind="cpu")
            if cache is not None:
                cache.invalidate(keys)
            return
        encoded = thread_map(encode, range(len(projections)), kind="cpu")
        # partial units of conditional stores are compare-and-swapped below, the rest written
        cas = set(stale) if self.store.supports_conditional_writes else set()
        writes = {keys[i]: v for i, v in enumerate(encoded) if v is not None and i not in cas}
        erases = [keys[i] for i, v in enumerate(encoded) if v is None and i not in cas]
        if writes:
            self.store.set_many(writes)
        if erases:
            self.store.erase_many(erases)
        if cas:

            def swap(i: int) -> None:
                def again() -> tuple[Any, Any]:
                    old[i], versions[i] = self.store.get_versioned(keys[i])
                    return encode(i), versions[i]

                self._compare_and_swap(keys[i], encoded[i], versions[i], again)

            thread_map(swap, stale, kind="io")
        if cache is not None:
            cache.invalidate(keys)

    def write_unit_of(self, region: tuple[slice, ...], value: Any, key: str) -> None:
        """Write the part of ``value`` (the values of ``region``) that falls in the storage unit
        ``key``, as a conditional read-modify-write: how a commit redoes a unit that another
        writer changed while this one was staged."""
        indexer = indexing.basic_indexer(tuple(region), self.shape, self.storage_chunks)
        self._write_units(_OneUnit(indexer, key, self._chunk_key), self._coerce_value(value, indexer.shape))

    def _write_atomically(self, indexer: Any, value: Any) -> None:
        """A write of several storage units, staged and committed as one (see core/commit.py):
        readers see all of it or none of it, also after a crash."""
        self._check_writable()
        self._commit_write(self.metadata, indexer, self._coerce_value(value, indexer.shape))

    def _commit_write(self, meta: ArrayMetadata, indexer: Any, value: np.ndarray) -> None:
        """Write ``value`` into ``indexer``'s units of the array described by ``meta`` in one
        transaction; ``meta`` becomes the stored document if it differs from today's."""
        documents = {} if meta == self.metadata else node_documents(self.path, meta)
        target = Array(self.store, self.path, meta, write_empty_chunks=self.write_empty_chunks)
        with Transaction(self.store, guard=(self.path,), documents=documents) as txn:
            target._with_store(txn.staging)._write_units(indexer, value)

            def redo(key: str) -> None:  # another writer changed a shared unit meanwhile
                target._write_units(_OneUnit(indexer, key, target._chunk_key), value)

            txn.commit(redo=redo)
        self.metadata = meta
        if self._index_cache is not None:
            self._index_cache.invalidate()

    def _with_store(self, store: Store) -> Array:
        """This array (same metadata and options) seen through another store."""
        return Array(store, self.path, self.metadata, write_empty_chunks=self.write_empty_chunks)

    def _read_stale(self, keys: list[str]) -> tuple[list[Any], list[Any]]:
        """Old values of the units a write covers partly, with their versions when the store
        has conditional writes; a store without them that refuses unguarded partial writes
        (concurrent writers could lose updates) raises WriteConflictError before any write."""
        if not keys:
            return [], []
        store = self.store
        if store.supports_conditional_writes:
            pairs = thread_map(store.get_versioned, keys, kind="io")
            return [v for v, _ in pairs], [g for _, g in pairs]
        if store.refuses_unguarded_partial_writes:
            raise WriteConflictError(
                f"array {self.path or '/'!r}: writing part of {self._unit_name} {keys[0]!r} needs "
                f"a read-modify-write, and {store!r} has no conditional writes to keep concurrent "
                "writers from losing updates; write whole units, or open the store with "
                "unguarded partial writes allowed (see the store's documentation)"
            )
        return store.get_many(keys), [None] * len(keys)

    def _compare_and_swap(
        self, key: str, data: Any, version: Any, again: Callable[[], tuple[Any, Any]]
    ) -> None:
        """Store ``data`` (None: erase) under ``key`` only if it is still at ``version``; when
        another writer got there first, ``again()`` re-reads and re-merges this unit (returning
        the new encoding and version), and the swap is retried with a growing, jittered pause."""
        store = self.store
        for attempt in range(_CAS_ATTEMPTS):
            if data is None:
                done = version is None or store.erase_if(key, version)  # missing already: done
            else:
                done = store.set_if(key, data, version)
            if done:
                return
            time.sleep(random.uniform(0.5, 1.5) * _CAS_PAUSE * 2 ** min(attempt, 6))
            data, version = again()
        raise WriteConflictError(
            f"array {self.path or '/'!r}: {self._unit_name} {key!r} was changed by concurrent "
            f"writers {_CAS_ATTEMPTS} times while this write merged into it; nothing of it was written"
        )

    def __setitem__(self, selection: Any, value: Any) -> None:
        if not self.metadata.chunk_grid.is_regular:  # chunk by chunk, committed as one write
            self._check_writable()
            with Transaction(self.store, guard=(self.path,)) as txn:
                rectilinear.write(self._with_store(txn.staging), selection, value)
                txn.commit()
            return
        kind = fancy_kind(selection, self.shape)
        if kind == "nd-array":
            flat, pos, index_shape = flatten_nd(selection)
            indexer = indexing.orthogonal_indexer(flat, self.shape, self.storage_chunks)
            nd_shape = (*indexer.shape[:pos], *index_shape, *indexer.shape[pos + 1 :])
            self._write(indexer, self._coerce_value(value, nd_shape).reshape(indexer.shape))
            return
        if kind == "vectorized":
            self.vindex[selection] = value
            return
        if kind == "orthogonal":
            self.oindex[selection] = value
            return
        self._write(indexing.basic_indexer(selection, self.shape, self.storage_chunks), value)

    def set_region(self, region: tuple[slice, ...], value: Any) -> None:
        """Write a box of step-1 slices; only storage units it covers partly are read first."""
        if not self.metadata.chunk_grid.is_regular:
            self[tuple(region)] = value
            return
        self._write(indexing.basic_indexer(tuple(region), self.shape, self.storage_chunks), value)

    # ---- metadata changes ------------------------------------------------------------------
    def _write_metadata(self, metadata: ArrayMetadata) -> None:
        self.metadata = store_node_metadata(self.store, self.path, metadata)  # keeps others' marks

    def _set_attributes(self, attrs: dict) -> None:
        self._check_writable()
        # validated (e.g. NaN in attributes) before anything is written; kept in memory exactly
        # as a reader of the stored documents will see it
        self.metadata = store_node_metadata(self.store, self.path, self.metadata.evolve(attributes=attrs))

    def invalidate_cache(self) -> None:
        """Forget cached shard indexes (object stores), e.g. after other processes rewrote shards."""
        if self._index_cache is not None:
            self._index_cache.invalidate()

    def resize(self, *shape: Any) -> None:
        """Change the shape; stored units wholly outside the new shape are deleted."""
        self._check_writable()
        raw = shape[0] if len(shape) == 1 and not isinstance(shape[0], int | np.integer) else shape
        try:
            new_shape = tuple(operator.index(s) for s in raw)
        except TypeError as e:
            raise ShapeError(f"array {self.path or '/'!r}: new shape must be integers, got {raw!r}") from e
        if len(new_shape) != self.ndim or any(s < 0 for s in new_shape):
            raise ShapeError(f"array {self.path or '/'!r}: cannot resize shape {self.shape} to {new_shape}")
        grid = self.metadata.chunk_grid
        new_grid = grid.grid_shape(new_shape)
        old_grid = grid.grid_shape(self.shape)
        new_meta = self.metadata.evolve(shape=new_shape)
        doomed = []
        if any(n < o for n, o in zip(new_grid, old_grid, strict=True)):
            prefix = join_prefix(self.path)
            encoding = self.metadata.chunk_key_encoding
            for key in self.store.list_prefix(prefix):
                rel = key[len(prefix) :]
                if rel == "zarr.json" or "/zarr.json" in rel:
                    continue
                try:
                    coords = encoding.decode_chunk_key(rel)
                except Exception:  # not a chunk key of this array (e.g. stray file)
                    continue
                if len(coords) == self.ndim and any(c >= n for c, n in zip(coords, new_grid, strict=True)):
                    doomed.append(key)
        if not doomed:  # one document: already atomic
            self._write_metadata(new_meta)
            return
        # the new shape and the erases in one transaction: a crash never shows the new shape
        # over chunks it should have dropped (a later growth would bring them back)
        documents = node_documents(self.path, new_meta)
        with Transaction(self.store, guard=(self.path,), documents=documents) as txn:
            txn.staging.erase_many(doomed)
            txn.commit()
        self.metadata = new_meta
        if self._index_cache is not None:
            self._index_cache.invalidate(doomed)

    def append(self, data: Any, axis: int = 0) -> None:
        """Grow along ``axis`` and write ``data`` into the new part: validated first, then the
        data, then ``zarr.json``."""
        data = np.asarray(data)
        other = [n for i, n in enumerate(self.shape) if i != axis]
        if data.ndim != self.ndim or [n for i, n in enumerate(data.shape) if i != axis] != other:
            raise ShapeError(
                f"array {self.path or '/'!r}: cannot append data of shape {data.shape} along axis {axis} "
                f"to shape {self.shape}"
            )
        self._check_writable()
        new_shape = list(self.shape)
        start = new_shape[axis]
        new_shape[axis] += data.shape[axis]
        region = [slice(None)] * self.ndim
        region[axis] = slice(start, new_shape[axis])
        # data and the new zarr.json in one transaction: a reader sees the old shape with the old
        # data or the new shape with all of the new data
        new_meta = self.metadata.evolve(shape=tuple(new_shape))
        indexer = indexing.basic_indexer(tuple(region), tuple(new_shape), self.storage_chunks)
        grown = Array(self.store, self.path, new_meta, write_empty_chunks=self.write_empty_chunks)
        self._commit_write(new_meta, indexer, grown._coerce_value(data, indexer.shape))
