"""A view of ONE stored shard's inner chunks: its index, the byte ranges a selection needs, and
the region read and decoded, over the store (or over an enclosing shard: nested sharding).

The codec (``codecs.sharding``) knows the format and never touches a store; this module does the
reading. A view reads through a ``RangeReader`` (several byte ranges of the shard in one call):
``ShardView.in_store`` makes one over a store key, ``ShardView.nested`` one over an inner chunk
that is itself a shard, so reading a nested shard is the same code one level down. Indexes of
many shards come in one batched request (``read_indexes``), through the caller's index cache
and memo.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import indexing
from .._threads import scratch_buffer, thread_map
from ..byte_range import ByteRange
from ..codecs.base import as_bytes_view
from ..codecs.shard_index import (
    EMPTY,
    MERGE_GAP,
    ShardLayout,
    fetched_index,
    merge_ranges,
    outside_error,
)
from ..codecs.shard_selection import inner_indexer, output_indexer
from ..errors import CodecError, CorruptionError
from ..indexing import whole_chunk_target
from ..stores.base import PositionedReader, Store
from .shard_index_cache import ShardIndexCache

#: At most this many decoded shard indexes are memoised per memo (``ChunkPipeline.index_memo``).
INDEX_MEMO_MAX = 4096

#: At most this many buffers in one vectored read (IOV_MAX is 1024 on Linux) and this many bytes
#: (a run is one task: long runs still spread over the CPU pool).
_RUN_BUFFERS = 256
_RUN_BYTES = 16 * 2**20

Item = tuple[indexing.ChunkProjection, int, int]  # (projection, offset, nbytes) of a stored inner chunk
Run = list[tuple[int, tuple[int, ...], memoryview]]  # back-to-back (offset, coords, buffer) reads


def read_indexes(
    store: Store,
    keys: Sequence[str],
    layout: ShardLayout,
    *,
    cache: ShardIndexCache | None,
    memo: dict[bytes, np.ndarray],
    refresh: bool = False,
) -> dict[str, np.ndarray | None]:
    """The checked index of each shard in ``keys`` (``None`` when missing): from ``cache``
    unless ``refresh``, the others fetched with one batched ranged store call and decoded once
    per distinct encoding (``memo``, read-only arrays). Errors name the shard."""
    generation = cache.generation if cache is not None else 0
    found: dict[str, np.ndarray | None] = {}
    missing = []
    for key in dict.fromkeys(keys):
        index = cache.get(key) if cache is not None and not refresh else None
        if index is None:
            missing.append(key)
        else:
            found[key] = index
    if not missing:
        return found
    index_range = layout.index_range()
    raws = store.get_partial_values([(k, index_range) for k in missing])
    for key, raw in zip(missing, raws, strict=True):
        found[key] = settle_index(key, raw, layout, cache=cache, memo=memo, generation=generation)
    return found


def settle_index(
    key: str,
    raw: Any,
    layout: ShardLayout,
    *,
    cache: ShardIndexCache | None,
    memo: dict[bytes, np.ndarray],
    generation: int,
) -> np.ndarray | None:
    """The checked index of shard ``key`` from its fetched bytes ``raw`` (``None``: missing),
    decoded once per distinct encoding (``memo``, read-only arrays) and kept in ``cache`` as of
    ``generation`` (``ShardIndexCache.generation`` when the fetch began). Errors name the shard."""
    if raw is None:
        return None
    encoded = bytes(raw)
    index = memo.get(encoded)
    if index is None:
        try:
            index = fetched_index(layout, raw)
        except CorruptionError as e:
            raise type(e)(f"shard {key!r}: {e}") from e
        if len(memo) >= INDEX_MEMO_MAX:
            memo.clear()
        index.flags.writeable = False
        memo[encoded] = index
    if cache is not None:
        cache.put(key, index, generation)
    return index


#: Several byte ranges of one value read in one call (``None`` where the value is missing).
RangeReader = Callable[[Sequence[ByteRange | None]], list[bytes | None]]


class ShardView:
    """The inner chunks of one stored shard of ``layout``, read through ``read``; byte ranges
    closer than ``gap`` are fetched as one (the store's ``coalesce_gap``)."""

    def __init__(
        self, layout: ShardLayout, read: RangeReader, gap: int | Callable[[], int] = MERGE_GAP
    ) -> None:
        self.layout = layout
        self._read = read
        self._gap = gap

    @property
    def gap(self) -> int:
        """Byte ranges closer than this are fetched as one (asked for only when ranges are
        merged: raw reads through an open file never need it)."""
        if callable(self._gap):
            self._gap = self._gap()
        return self._gap

    @classmethod
    def in_store(
        cls, store: Store, key: str, layout: ShardLayout, gap: int | Callable[[], int] | None = None
    ) -> ShardView:
        """The shard stored under ``key``: each read is one batched ``get_partial_values``;
        ranges closer than ``gap`` (default: the store's ``coalesce_gap``, asked for when
        first needed) are merged."""
        return cls(
            layout,
            lambda ranges: store.get_partial_values([(key, r) for r in ranges]),
            (lambda: store.coalesce_gap) if gap is None else gap,
        )

    def nested(self, off: int, nb: int, where: str) -> ShardView:
        """The inner shard stored at bytes ``[off, off + nb)`` of this one (``where`` names it in
        errors); its reads go through this view's reader, offset."""
        nested = self.layout.nested
        if nested is None:
            raise CodecError(f"{where}: the inner chunks of this shard are not shards read in parts")
        return ShardView(
            nested,
            _offset_reader(self._read, off, nb, guard=self.layout.end_guard, where=where),
            lambda: self.gap,
        )

    # ---- the index ------------------------------------------------------------------------
    def read_index(self) -> np.ndarray | None:
        """Fetch and check the shard's index with one ranged read; ``None`` when it is missing."""
        results = self._read([self.layout.index_range()])
        if len(results) != 1:
            raise CorruptionError(f"shard index read returned {len(results)} values for 1 byte range")
        raw = results[0]
        return None if raw is None else fetched_index(self.layout, raw)

    # ---- regions --------------------------------------------------------------------------
    def plan(self, selection: Any, index: np.ndarray) -> list[ByteRange] | None:
        """The byte ranges ``read(selection, index)`` fetches in its one read call: a caller may
        fetch them for many shards at once and pass each shard's values to ``read(fetched=)``.
        ``None`` when the read takes more than one step (nested shards covered partly); ``[]``
        when it reads nothing."""
        layout = self.layout
        indexer = inner_indexer(selection, layout.shard_shape, layout.chunk_shape)
        if math.prod(indexer.shape) == 0:
            return []
        items = []
        for q in indexer:
            off, nb = int(index[q.chunk_coords][0]), int(index[q.chunk_coords][1])
            if off == EMPTY:
                continue
            if layout.nested is not None and not q.is_complete:
                return None
            items.append((q, off, nb))
        if not items:
            return []
        return _span_ranges(items, layout.end_guard, self.gap)[2]

    def read(
        self,
        selection: Any,
        index: np.ndarray | None = None,
        fetched: list[Any] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """``decode(shard)[selection]``, reading only the inner chunks the selection touches.

        ``selection`` is numpy-ready, in shard coordinates (the forms ``inner_indexer`` takes).
        Reads the index once (unless ``index`` is given), then every touched inner chunk with one
        read call whose ranges are merged (``gap``), or takes their values from ``fetched``
        (what the ranges of ``plan`` returned); with the index at the end, the highest range is
        extended over the index's length so a short read exposes an entry that points into the
        index. Partly covered nested shards are read through their own view. The result is
        written into ``out`` (an array of the selection's shape, e.g. its place in the caller's
        output: inner chunks then decode straight into it) or a new array, and returned;
        ``None`` when the shard is missing (``out`` untouched).
        """
        layout = self.layout
        spec = layout.inner.spec
        indexer = output_indexer(selection, layout.shard_shape, layout.chunk_shape, out)
        if math.prod(indexer.shape) == 0:
            return np.empty(indexer.shape, dtype=spec.dtype) if out is None else out
        if index is None:
            index = self.read_index()
            if index is None:
                return None
        if out is None:
            out = np.empty(indexer.shape, dtype=spec.dtype)
        whole: list[Item] = []
        partial: list[Item] = []
        for q in indexer:
            off, nb = int(index[q.chunk_coords][0]), int(index[q.chunk_coords][1])
            if off == EMPTY:
                out[q.out_selection] = spec.fill_value
            elif layout.nested is not None and not q.is_complete:
                partial.append((q, off, nb))
            else:
                whole.append((q, off, nb))
        if whole:
            self._read_whole_chunks(whole, out, fetched)
        if partial:

            def read_nested(item: Item) -> None:
                q, off, nb = item
                where = f"inner shard {q.chunk_coords} (offset={off}, nbytes={nb})"
                sub = self.nested(off, nb, where).read(q.chunk_selection)
                if sub is None:
                    raise CorruptionError(f"{where} vanished while being read")
                out[q.out_selection] = sub

            thread_map(read_nested, partial, kind="io")
        return out

    def _read_whole_chunks(self, items: list[Item], out: np.ndarray, fetched: list[Any] | None) -> None:
        """Fetch ``items``' inner chunks with one merged read call (or take them from
        ``fetched``) and scatter them into ``out``.

        With the index at the end the highest range is extended by its size: fewer bytes back
        than asked means that range reaches into the index, so the index entry is corrupt.
        """
        layout = self.layout
        guard = layout.end_guard
        spans, placement, ranges = _span_ranges(items, guard, self.gap)
        results = self._read(ranges) if fetched is None else fetched
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
            layout.place_inner(views[span][start : start + nb], q, off, nb, out)

        if layout.use_threads(len(items)):
            thread_map(decode_one, range(len(items)), kind="cpu")
        else:
            for i in range(len(items)):
                decode_one(i)

    # ---- raw inner chunks through an open file ---------------------------------------------
    def read_raw_into(
        self, reader: PositionedReader, jobs: Sequence[tuple[Any, np.ndarray]], index: np.ndarray
    ) -> None:
        """``out[...] = decode(shard)[selection]`` for every ``(selection, out)``, when inner
        chunks are raw elements (``layout.raw_inner_dtype`` is not None), through ``reader``, the
        shard open for positioned reads. Whole inner chunks whose place in ``out`` is one
        contiguous block of the same dtype are read straight into it, neighbours in the file with
        one vectored read; the others into reused scratch memory, then copied. Errors are those
        of ``read``."""
        layout = self.layout
        wire = layout.raw_inner_dtype
        if wire is None:
            raise CodecError("codec 'sharding_indexed': raw inner chunk reads need inner codecs [bytes]")
        spec = layout.inner.spec
        nbytes = spec.nbytes
        guard = layout.end_guard
        direct: Run = []
        staged: list[tuple[int, indexing.ChunkProjection, np.ndarray]] = []
        for selection, out in jobs:
            indexer = output_indexer(selection, layout.shard_shape, layout.chunk_shape, out)
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
                    raise outside_error(q.chunk_coords, off, nb, available, guard)
                target = whole_chunk_target(q, out, layout.chunk_shape) if same_dtype else None
                if target is None:
                    staged.append((off, q, out))
                else:
                    direct.append((off, q.chunk_coords, memoryview(target.reshape(-1).view(np.uint8))))

        def read_run(run: Run) -> None:
            got = reader.read_into(run[0][0], [buf for _, _, buf in run])
            for off, coords, buf in run:  # the shard shrank between the index read and now
                if off - run[0][0] + len(buf) > got:
                    raise outside_error(coords, off, len(buf), max(0, got - (off - run[0][0])), 0)

        def read_staged(item: tuple[int, indexing.ChunkProjection, np.ndarray]) -> None:
            off, q, out = item
            buf = scratch_buffer(nbytes, 1)
            got = reader.read_into(off, [buf])
            if got < nbytes:
                raise outside_error(q.chunk_coords, off, nbytes, got, 0)
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


# --- helpers ------------------------------------------------------------------------------------
def _span_ranges(
    items: Sequence[Item], guard: int, gap: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[ByteRange]]:
    """The merged spans of ``items``' inner chunks, where each item lies in them, and the byte
    ranges to read: the spans, the highest one extended by ``guard`` (see _read_whole_chunks)."""
    spans, placement = merge_ranges([(off, nb) for _, off, nb in items], gap)
    ranges = [ByteRange(o, n) for o, n in spans]
    if guard:
        last_off, last_len = spans[-1]  # spans are sorted and disjoint: the last one ends highest
        ranges[-1] = ByteRange(last_off, last_len + guard)
    return spans, placement, ranges


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


def _contiguous_runs(reads: Run) -> list[Run]:
    """``reads`` (sorted by offset) grouped into runs of back-to-back byte ranges."""
    runs: list[Run] = []
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
