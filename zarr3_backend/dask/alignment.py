"""Pure chunk arithmetic that keeps parallel writers apart: every write task owns its shards.

Dask blocks map onto the target array's storage grid (shards, or chunks when unsharded). Two
blocks may share a storage unit only when a block boundary falls inside one; checking each
axis's boundaries is enough, because two distinct blocks differ along some axis and their
storage ranges along that axis are then disjoint. The checks are O(blocks per axis), never
O(total blocks), so they stay instant for millions of blocks.

A storage unit along an axis is given as an ``int`` (regular grid: every unit that long) or as
the tuple of unit boundaries along the axis (rectilinear grid: ``(0, 4, 12, ...)``, ending at or
past the array's extent); :func:`storage_units` gives them for an Array.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import accumulate, pairwise
from typing import Any

from ..errors import ChunkAlignmentError

Chunks = tuple[tuple[int, ...], ...]
#: One axis's storage units: their length (regular) or their boundaries (rectilinear).
Unit = int | tuple[int, ...]


def storage_units(array: Any) -> tuple[Unit, ...]:
    """Per axis the storage units (shards, or chunks when unsharded) of a zarr3_backend Array:
    the unit length for a regular grid, the unit boundaries for a rectilinear one."""
    grid = array.metadata.chunk_grid
    if grid.is_regular:
        return tuple(array.storage_chunks)
    return tuple(grid.axis_offsets(axis, size) for axis, size in enumerate(array.shape))


def _unit_index(p: int, unit: Unit) -> int:
    """Index of the storage unit holding position ``p``."""
    return p // unit if isinstance(unit, int) else bisect.bisect_right(unit, p) - 1


def _on_boundary(p: int, unit: Unit) -> bool:
    if isinstance(unit, int):
        return p % unit == 0
    i = bisect.bisect_left(unit, p)
    return i < len(unit) and unit[i] == p


def _unit_span(p: int, unit: Unit) -> tuple[int, int]:
    """``[lo, hi)`` of the storage unit holding position ``p``."""
    if isinstance(unit, int):
        lo = p // unit * unit
        return lo, lo + unit
    i = bisect.bisect_right(unit, p) - 1
    return unit[i], unit[i + 1] if i + 1 < len(unit) else unit[i]


def _unit_text(p: int, unit: Unit) -> str:
    """How a message names the unit size at ``p``."""
    lo, hi = _unit_span(p, unit)
    return str(hi - lo)


def _boundaries(sizes: Sequence[int], start: int) -> list[int]:
    """Absolute positions of the interior boundaries between consecutive blocks."""
    return [start + p for p in accumulate(sizes[:-1])]


def first_misaligned(sizes: Sequence[int], unit: Unit, start: int = 0) -> int | None:
    """Index of the first block whose end falls strictly inside a storage unit, else ``None``.

    ``sizes`` are block lengths along one axis, laid out from absolute position ``start``.
    """
    for i, b in enumerate(_boundaries(sizes, start)):
        if not _on_boundary(b, unit):
            return i
    return None


def unit_ranges(sizes: Sequence[int], unit: Unit, start: int = 0) -> list[range]:
    """For each block along one axis, the range of storage-unit indices it touches."""
    out = []
    pos = start
    for n in sizes:
        out.append(range(_unit_index(pos, unit), _unit_index(pos + n - 1, unit) + 1) if n else range(0))
        pos += n
    return out


def prove_disjoint(chunks: Chunks, units: Sequence[Unit], starts: Sequence[int]) -> None:
    """Raise ``ChunkAlignmentError`` unless no storage unit is touched by two blocks.

    Checked per axis (consecutive blocks' unit ranges must not overlap), which proves it for
    the whole grid. This is the guard run before any byte is written.
    """
    for axis, (sizes, unit, start) in enumerate(zip(chunks, units, starts, strict=True)):
        prev = -1
        for i, r in enumerate(unit_ranges(sizes, unit, start)):
            if not len(r):
                continue
            if r.start <= prev:
                raise ChunkAlignmentError(
                    f"blocks {i - 1} and {i} along axis {axis} both touch storage unit {r.start} "
                    f"(unit size {unit if isinstance(unit, int) else _unit_text(sum(sizes[:i]) + start, unit)}); "
                    "refusing to write"
                )
            prev = r.stop - 1


def aligned_sizes(sizes: Sequence[int], unit: Unit, start: int = 0) -> tuple[int, ...]:
    """Block lengths close to ``sizes`` whose interior boundaries all lie on unit boundaries.

    The block length becomes the multiple of ``unit`` nearest the largest dask block (at
    least one unit); the first block ends at the first unit boundary after ``start``, so a
    write starting inside a partly filled unit gives that unit a task of its own. With unit
    boundaries (rectilinear), blocks are whole runs of units at least as long as the largest
    dask block (or one unit each).
    """
    total = sum(sizes)
    if total == 0:
        return (0,)
    end = start + total
    if not isinstance(unit, int):
        inside = [b for b in unit if start < b < end]
        cuts: list[int] = []
        last = start
        for b in inside:
            if (not cuts and not _on_boundary(start, unit)) or b - last >= max(sizes):
                cuts.append(b)
                last = b
        return tuple(b - a for a, b in pairwise([start, *cuts, end]))
    step = max(1, round(max(sizes) / unit)) * unit
    first = -(-start // unit) * unit  # first unit boundary at or after start
    cuts = []
    if start < first < end:
        cuts.append(first)
    pos = first + step
    while pos < end:
        cuts.append(pos)
        pos += step
    edges = [start, *cuts, end]
    return tuple(b - a for a, b in pairwise(edges))


def split_sizes(length: int, unit: Unit, start: int = 0) -> tuple[int, ...]:
    """Lengths of the pieces of ``[start, start + length)`` cut at every unit boundary.

    One piece per storage unit touched: the block layout of one write task per shard.
    """
    if length == 0:
        return (0,)
    end = start + length
    if isinstance(unit, int):
        edges = [start]
        pos = (start // unit + 1) * unit
        while pos < end:
            edges.append(pos)
            pos += unit
        edges.append(end)
    else:
        edges = [start, *(b for b in unit if start < b < end), end]
    return tuple(b - a for a, b in pairwise(edges))


def _chunk_hint(sizes: tuple[int, ...]) -> str:
    """How a user spells ``sizes`` in ``.chunk({...})``: an int when regular, else a tuple."""
    if len(sizes) == 1 or (len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0]):
        return str(sizes[0])
    if len(sizes) > 8:
        head = ", ".join(map(str, sizes[:4]))
        return f"({head}, ..., {sizes[-1]})"
    return str(tuple(sizes))


def _sizes_text(sizes: Sequence[int]) -> str:
    if len(sizes) > 8:
        return "(" + ", ".join(map(str, sizes[:6])) + f", ... {len(sizes)} blocks)"
    return str(tuple(sizes))


def check_alignment(
    chunks: Chunks,
    units: Sequence[Unit],
    starts: Sequence[int] | None = None,
    *,
    name: str = "",
    dims: Sequence[str | None] | None = None,
    sharded: bool = True,
    unit_source: str = "",
) -> None:
    """Refuse dask chunks that let two write tasks touch one storage unit.

    The ``ChunkAlignmentError`` names the variable, the dimension, the dask and unit sizes (and,
    with ``unit_source``, where the unit shape came from) and the ``.chunk({...})`` call (or
    ``align_chunks=True``) that fixes it.
    """
    starts = tuple(starts) if starts is not None else (0,) * len(chunks)
    what = "shard" if sharded else "chunk"
    for axis, (sizes, unit, start) in enumerate(zip(chunks, units, starts, strict=True)):
        i = first_misaligned(sizes, unit, start)
        if i is None:
            continue
        dim = _dim(dims, axis)
        boundary = start + sum(sizes[: i + 1])
        lo, hi = _unit_span(boundary, unit)
        fix = _chunk_hint(aligned_sizes(sizes, unit, start))
        offset = f" (the write starts at index {start})" if start else ""
        source = f" ({what} shape {tuple(units)} {unit_source})" if unit_source else ""
        size = f"of size {unit}" if isinstance(unit, int) else f"with edges at {_sizes_text(unit)}"
        multiple = f"a multiple of {unit}" if isinstance(unit, int) else f"sizes that end on {what} edges"
        raise ChunkAlignmentError(
            f"variable {name or '<unnamed>'!r}: dask chunks {_sizes_text(sizes)} along dimension "
            f"{dim!r} do not line up with the {what}s {size}{source}{offset}: the boundary between "
            f"dask blocks {i} and {i + 1} at index {boundary} falls inside the {what} [{lo}, {hi}), "
            f"so two write tasks would rewrite the same {what} and one would lose its data. "
            f"Rechunk with `.chunk({{{dim!r}: {fix}}})` (or {multiple}), or pass align_chunks=True."
        )


def cut_units(
    region: Sequence[slice], shape: Sequence[int], units: Sequence[Unit]
) -> list[tuple[int, int, int, int]]:
    """Where the edges of ``region`` fall strictly inside a storage unit.

    One ``(axis, start, stop, index)`` per axis whose start or stop is not a multiple of the
    unit; the array's end counts as a unit edge (the last unit is as full as it can be). An
    empty region touches no unit and cuts none.
    """
    bounds = [(sl.start or 0, n if sl.stop is None else sl.stop) for sl, n in zip(region, shape, strict=True)]
    if any(start >= stop for start, stop in bounds):
        return []
    out = []
    for axis, ((start, stop), n, unit) in enumerate(zip(bounds, shape, units, strict=True)):
        bad = [p for p in (start, stop) if not _on_boundary(p, unit) and p != n]
        if bad:
            out.append((axis, start, stop, bad[0]))
    return out


def _dim(dims: Sequence[str | None] | None, axis: int) -> str:
    return dims[axis] if dims is not None and dims[axis] is not None else f"dim_{axis}"  # type: ignore[return-value]


def check_region_edges(
    region: Sequence[slice],
    shape: Sequence[int],
    units: Sequence[Unit],
    *,
    name: str = "",
    dims: Sequence[str | None] | None = None,
    sharded: bool = True,
) -> None:
    """Refuse a region whose edges cut a storage unit that another writer may also own.

    Used for ``region`` writes, where several independent jobs write disjoint regions of one
    array at once: each must own whole units (the array's end counts as a unit edge).
    """
    what = "shard" if sharded else "chunk"
    for axis, start, stop, index in cut_units(region, shape, units)[:1]:
        dim = _dim(dims, axis)
        unit = units[axis]
        lo, hi = _unit_span(index, unit)
        edges = f"multiples of {unit}" if isinstance(unit, int) else f"the {what} edges"
        raise ChunkAlignmentError(
            f"variable {name or '<unnamed>'!r}: region {dim}={start}:{stop} cuts the {what} of size "
            f"{hi - lo} at index {index}; a concurrent writer of the neighbouring region would "
            f"rewrite the same {what}. Align the region to {edges}, or pass "
            f"safe_chunks=False if no other job writes next to it."
        )


def check_deferred_edges(
    region: Sequence[slice],
    shape: Sequence[int],
    units: Sequence[Unit],
    *,
    name: str = "",
    dims: Sequence[str | None] | None = None,
    sharded: bool = True,
) -> None:
    """Refuse a deferred (``compute=False``) write whose edges cut a storage unit.

    Such a unit is read-modify-written when the Delayed runs; another pending write of the
    same array (e.g. the next ``compute=False`` append, starting where this one ends) would do
    the same to that unit, and computed together one of the two would lose its rows.
    """
    what = "shard" if sharded else "chunk"
    for axis, start, stop, index in cut_units(region, shape, units)[:1]:
        dim = _dim(dims, axis)
        unit = units[axis]
        lo, hi = _unit_span(index, unit)
        raise ChunkAlignmentError(
            f"variable {name or '<unnamed>'!r}: this compute=False write of {dim}={start}:{stop} "
            f"shares the {what} [{lo}, {hi}) (size {hi - lo}) with data outside it, so the "
            f"Delayed would read-modify-write that {what}; another pending write next to it (such "
            f"as the previous or next compute=False append) would rewrite the same {what} and one "
            f"of them would lose its rows. Compute the previous write first and write this one "
            f"with compute=True, or pass safe_chunks=False if no other write of this array is pending."
        )
