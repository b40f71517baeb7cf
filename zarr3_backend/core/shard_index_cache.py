"""A bounded LRU of decoded shard indexes, one per opened Array on an object store.

Where a request is costly (stores with ``costly_requests = True``), reading a second inner
chunk of a shard read before costs one ranged request instead of two. The cache lives and dies
with its Array object: reopening an array starts afresh, so writes by other processes become
visible on reopen (or after ``Array.invalidate_cache()``), and a stale index that fails its
checks is re-read once. A generation counter keeps an index fetched before a write of this
Array from being cached after it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

import numpy as np


class ShardIndexCache:
    """LRU of shard key -> decoded index array, bounded in bytes."""

    def __init__(self, max_bytes: int = 16 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._generation = 0
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple:  # a pickled Array (dask task) starts with an empty cache
        return (type(self), (self.max_bytes,))

    @property
    def generation(self) -> int:
        """Bumped by every invalidation: read it before fetching an index, pass it to put()."""
        return self._generation

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            index = self._items.get(key)
            if index is not None:
                self._items.move_to_end(key)
            return index

    def put(self, key: str, index: np.ndarray, generation: int) -> None:
        """Cache ``index`` unless an invalidation happened since ``generation`` was read."""
        if index.nbytes > self.max_bytes:
            return
        with self._lock:
            if generation != self._generation:
                return  # fetched before a write that may have changed it
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = index
            self._bytes += index.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes

    def invalidate(self, keys: Iterable[str] | None = None) -> None:
        """Forget ``keys`` (all when ``None``) and start a new generation."""
        with self._lock:
            self._generation += 1
            if keys is None:
                self._items.clear()
                self._bytes = 0
                return
            for key in keys:
                old = self._items.pop(key, None)
                if old is not None:
                    self._bytes -= old.nbytes

    def __len__(self) -> int:
        return len(self._items)
