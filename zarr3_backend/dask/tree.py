"""A lazy tree that adds up the counts a grid of write tasks returns: the "done" node of a write.

One task depending on a million write tasks strains any scheduler, and listing a million keys
when the graph is built costs a million Python objects. :class:`CountTree` describes a tree of
partial sums by arithmetic alone (``FAN_IN`` children per node) and writes out its few tasks
only when a scheduler asks for them, so a Blockwise write layer stays lazy up to the end.
On a store that returns receipts (``Store.returns_receipts``) the counts are :class:`Tally`
objects, and each node of the tree also combines the receipts of the tasks below it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
from dask.highlevelgraph import Layer

from ..stores.base import Store

#: Children per node of the tree: small enough for any scheduler, few levels for 10^9 tasks.
FAN_IN = 256


@dataclass(frozen=True)
class Tally:
    """A count with the receipts of the write tasks it counts (stores that return receipts,
    see ``Store.returns_receipts``); ``store_type`` combines the receipts on the way up."""

    count: int
    receipts: tuple[Any, ...]
    store_type: type[Store]


def sum_counts(counts: list[Any]) -> int | Tally:
    """The total of a list of counts (ints, small integer arrays or Tallies, one per finished
    task); a Tally carrying all their receipts, combined by their store, when any is one."""
    tallies = [c for c in counts if isinstance(c, Tally)]
    total = sum(c.count if isinstance(c, Tally) else int(np.sum(c)) for c in counts)
    if not tallies:
        return total
    store_type = tallies[0].store_type
    receipts = tuple(r for t in tallies for r in t.receipts)
    return Tally(total, store_type.combine_receipts(receipts) if len(receipts) > 1 else receipts, store_type)


def receipts_of(results: Any) -> tuple[Any, ...]:
    """The receipts that the results of finished writes carry (counts, Tallies, or lists and
    tuples of them); none for plain counts."""
    if isinstance(results, Tally):
        return results.receipts
    if isinstance(results, list | tuple):
        return tuple(r for result in results for r in receipts_of(result))
    return ()


def _unravel(i: int, grid: tuple[int, ...]) -> tuple[int, ...]:
    """Block index of the ``i``-th block of ``grid`` in C order."""
    out = []
    for n in reversed(grid):
        i, r = divmod(i, n)
        out.append(r)
    return tuple(reversed(out))


class CountTree(Layer):
    """The tasks of a sum tree over the keys ``(source, *index)`` of a block grid.

    Level 0 is the source grid (flattened in C order); each node of level ``L`` sums up to
    ``fan_in`` (default ``FAN_IN``) consecutive nodes of level ``L - 1``; the single top node
    has the key ``name``.
    Nothing is generated when the layer is built: ``len`` and the key of the root are arithmetic.
    """

    def __init__(self, name: str, source: str, grid: tuple[int, ...], fan_in: int | None = None) -> None:
        super().__init__()
        fan_in = FAN_IN if fan_in is None else int(fan_in)
        if fan_in < 2:
            raise ValueError(f"fan_in must be at least 2, got {fan_in}")
        self.name = name
        self.source = source
        self.grid = tuple(int(n) for n in grid)
        self.fan_in = fan_in
        sizes = [prod(self.grid)]
        if sizes[0] < 1:
            raise ValueError(f"a count tree needs at least one source task, got grid {self.grid}")
        while True:  # at least one level above the sources, even for a single task
            sizes.append(-(-sizes[-1] // fan_in))
            if sizes[-1] == 1:
                break
        self._sizes = tuple(sizes)

    @property
    def root(self) -> str:
        """The key of the top node: computing it waits for every source task."""
        return self.name

    @property
    def depth(self) -> int:
        """Number of levels above the source grid."""
        return len(self._sizes) - 1

    def _key(self, level: int, i: int) -> Any:
        if level == 0:
            return (self.source, *_unravel(i, self.grid))
        if level == self.depth:
            return self.name
        return (self.name + "-partial", level, i)

    def _locate(self, key: Any) -> tuple[int, int]:
        if key == self.name:
            return self.depth, 0
        if (
            isinstance(key, tuple)
            and len(key) == 3
            and key[0] == self.name + "-partial"
            and isinstance(key[1], int)
            and isinstance(key[2], int)
            and 1 <= key[1] < self.depth
            and 0 <= key[2] < self._sizes[key[1]]
        ):
            return key[1], key[2]
        raise KeyError(key)

    def _children(self, level: int, i: int) -> list[Any]:
        lo = i * self.fan_in
        hi = min(lo + self.fan_in, self._sizes[level - 1])
        return [self._key(level - 1, j) for j in range(lo, hi)]

    def __getitem__(self, key: Any) -> tuple:
        level, i = self._locate(key)
        return (sum_counts, self._children(level, i))

    def __contains__(self, key: object) -> bool:
        try:
            self._locate(key)
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[Any]:
        for level in range(1, self.depth + 1):
            for i in range(self._sizes[level]):
                yield self._key(level, i)

    def __len__(self) -> int:
        return sum(self._sizes[1:])

    def is_materialized(self) -> bool:
        """Never: the tasks are produced on demand."""
        return False

    def get_output_keys(self) -> set:
        """The keys of the tree's own nodes (few: about one per ``fan_in`` source tasks)."""
        return set(self)

    def get_dependencies(self, key: Any, all_hlg_keys: Collection[Any]) -> set:
        """The children of a node, computed rather than searched for."""
        return set(self._children(*self._locate(key)))
