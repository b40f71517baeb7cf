"""Store test doubles shared by several test modules (a plain module, imported by name)."""

from __future__ import annotations

import re
from collections.abc import Callable

from zarr3_backend.stores import MemoryStore


class RecordingStore(MemoryStore):
    """A MemoryStore that records the keys it was asked to write, in order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.writes: list[str] = []

    def set(self, key, value):
        self.writes.append(key)
        super().set(key, value)

    def set_many(self, items):
        self.writes.extend(items)
        super().set_many(items)

    def move(self, src, dst):
        self.writes.append(dst)
        super().move(src, dst)

    def set_if(self, key, value, expected):
        self.writes.append(key)
        return super().set_if(key, value, expected)


class ChunkWriteFailingStore(MemoryStore):
    """A MemoryStore whose ``fail_at``-th write of a chunk or shard (staged or in place; counted
    while ``armed``) raises ``error(key)``, as a full disk or a store outage would."""

    def __init__(
        self, fail_at: int, error: Callable[[str], BaseException], *args, armed: bool = True, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.fail_at, self.error, self.armed = fail_at, error, armed
        self.chunk_writes = 0

    def _count(self, keys):
        for key in keys:
            if self.armed and re.search(r"(^|/)c(/|$)", key):
                self.chunk_writes += 1
                if self.chunk_writes == self.fail_at:
                    raise self.error(key)

    def set(self, key, value):
        self._count([key])
        super().set(key, value)

    def set_many(self, items):
        self._count(list(items))
        super().set_many(items)


class CommitHookedStore(MemoryStore):
    """A MemoryStore that runs ``hook`` once, just before the first transaction manifest is
    written: another writer committing while this one's values are staged."""

    hook: Callable[[], object] | None = None

    def set(self, key, value):
        if key.endswith("manifest.json") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().set(key, value)


class SnapshotOnSetStore(MemoryStore):
    """Snapshots its keys and values right after the first ``set`` whose key ``when`` picks
    (what a writer killed then leaves behind)."""

    when: Callable[[str], bool] | None = None
    snapshot: dict | None = None

    def set(self, key, value):
        super().set(key, value)
        if self.when is not None and self.snapshot is None and self.when(key):
            self.snapshot = dict(self._data)
