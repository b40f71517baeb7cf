"""Store test doubles shared by several test modules (a plain module, imported by name)."""

from __future__ import annotations

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
