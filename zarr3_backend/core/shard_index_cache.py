"""A bounded, process-wide LRU of decoded shard indexes, for stores where a request is costly.

Only stores that set ``cache_shard_index = True`` (object stores) use it: there, reading one
inner chunk of a shard read before costs one ranged request instead of two. Every write or
erase through this package invalidates the shards it touches; writes by other processes are not
seen (call ``clear_shard_index_cache()`` after them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable

import numpy as np

from ..stores.base import Store


def store_token(store: Store) -> Hashable:
    """Identity of the data behind a store: equal for two store objects on the same data."""
    url = getattr(store, "url", None)
    if url:
        return ("url", url)
    root = getattr(store, "root", None)
    if root is not None:
        return ("root", str(root))
    return ("id", id(getattr(store, "_data", store)))


class ShardIndexCache:
    """LRU of (store token, shard key) -> decoded index array, bounded in bytes."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[Hashable, str], np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, token: Hashable, key: str) -> np.ndarray | None:
        with self._lock:
            index = self._items.get((token, key))
            if index is None:
                self.misses += 1
                return None
            self._items.move_to_end((token, key))
            self.hits += 1
            return index

    def put(self, token: Hashable, key: str, index: np.ndarray) -> None:
        if index.nbytes > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop((token, key), None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[(token, key)] = index
            self._bytes += index.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes

    def invalidate(self, token: Hashable, keys: Iterable[str]) -> None:
        with self._lock:
            for key in keys:
                old = self._items.pop((token, key), None)
                if old is not None:
                    self._bytes -= old.nbytes

    def invalidate_prefix(self, token: Hashable, prefix: str) -> None:
        with self._lock:
            for tk in [tk for tk in self._items if tk[0] == token and tk[1].startswith(prefix)]:
                self._bytes -= self._items.pop(tk).nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)


#: The process-wide cache used by Array reads.
SHARD_INDEX_CACHE = ShardIndexCache()


def clear_shard_index_cache() -> None:
    """Forget every cached shard index (e.g. after another process rewrote shards)."""
    SHARD_INDEX_CACHE.clear()
