"""An opt-in cache of decoded storage units, one per store, bounded in bytes (LRU).

Sliding-window and repeated reads (a notebook re-plotting a slice, overlapping dask windows)
re-fetch and re-decode the same chunks; with ``chunk_cache_bytes`` set (see
``zarr3_backend.settings``) the pipeline keeps decoded units here and serves them again. One
cache is shared by every Array of the same stored data (``Store.data_identity``), and every write
this process makes through the pipeline drops what it replaced. Writes by other processes are
not seen until the entries age out or ``Array.invalidate_cache()`` is called: the cache is off by
default for that reason.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable

import numpy as np

from ..stores.base import Store

#: One cache per stored data (``Store.data_identity``): Arrays opened read-only and read-write on
#: the same data share it, so a write through one drops what the other cached.
_caches: dict[Hashable, ChunkCache] = {}
_registry_lock = threading.Lock()


class ChunkCache:
    """LRU of store key -> decoded unit (read-only arrays), at most ``max_bytes`` in all."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: Bumped by every invalidation: a value decoded before a write is not cached after it.
        self.generation = 0

    def get(self, key: str) -> np.ndarray | None:
        """The cached unit of ``key`` (most recently used now), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: np.ndarray, generation: int) -> None:
        """Keep ``value`` for ``key`` unless it is larger than the cache or an invalidation
        happened since ``generation`` (the value may then predate a write)."""
        if value.nbytes > self.max_bytes or value.dtype.hasobject:
            return
        value.flags.writeable = False
        with self._lock:
            if generation != self.generation:
                return
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = value
            self._bytes += value.nbytes
            while self._bytes > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes

    def invalidate(self, keys: Iterable[str] | None = None, prefix: str = "") -> None:
        """Drop ``keys`` (all keys under ``prefix`` when None)."""
        with self._lock:
            self.generation += 1
            doomed = list(keys) if keys is not None else [k for k in self._items if k.startswith(prefix)]
            for key in doomed:
                value = self._items.pop(key, None)
                if value is not None:
                    self._bytes -= value.nbytes

    @property
    def nbytes(self) -> int:
        """Bytes of decoded values held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)


def chunk_cache_of(store: Store) -> ChunkCache | None:
    """The decoded-chunk cache of ``store`` (shared with equal stores), sized by the store's
    ``chunk_cache_bytes`` setting; None when that is 0 or the store stages its own writes."""
    size = store.settings.chunk_cache_bytes
    if size <= 0 or store.commits_externally:
        return None
    with _registry_lock:
        key = store.data_identity
        cache = _caches.get(key)
        if cache is None:
            cache = _caches[key] = ChunkCache(size)
    cache.max_bytes = size
    return cache
