"""MemoryStore: keys and values in a Python dict, for tests, scratch arrays and small data."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from ..byte_range import ByteRange
from .base import (
    BytesLike,
    PositionedReader,
    Store,
    ValueReader,
    Version,
    rebuild_store,
    validate_key,
    validate_prefix,
)


class MemoryStore(Store):
    """A store over a dict of ``bytes``; pickles with its contents.

    The dict passed in is used (not copied), so stores made by ``with_read_only`` share it.
    A lock guards writes and listings, so threads may set and get concurrently. Every write
    takes a new number from a counter: ``(value, number)`` is what ``get_versioned`` returns and
    ``set_if``/``erase_if`` compare under the lock (values put in the dict directly, not through
    the store, carry version 0).
    """

    supports_conditional_writes = True

    def __init__(
        self,
        data: MutableMapping[str, bytes] | None = None,
        *,
        read_only: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(read_only=read_only, settings=settings)
        self._data: MutableMapping[str, bytes] = {} if data is None else data
        for key in self._data:
            validate_key(key)
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}  # key -> number of the write that stored it
        self._clock = itertools.count(1)

    # ---- reading ---------------------------------------------------------------------------
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        """The value of ``key`` (or the part ``byte_range`` selects, clipped to the value)."""
        value = self._data.get(validate_key(key))
        if value is None:
            return None
        if byte_range is None:
            return bytes(value)
        return byte_range.apply(value)

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        return validate_key(key) in self._data

    def get_into(
        self, key: str, alloc: Callable[[int], memoryview], byte_range: ByteRange | None = None
    ) -> memoryview | None:
        """``Store.get_into`` copying once, from the stored value straight into ``alloc(size)``."""
        value = self._data.get(validate_key(key))
        if value is None:
            return None
        view = memoryview(value).cast("B")
        if byte_range is not None:
            view = view[byte_range.slice(len(view))]
        buf = alloc(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        return buf[:n]

    def open_reader(self, key: str) -> PositionedReader | None:
        """``Store.open_reader`` over the stored value itself (values are immutable: no copy)."""
        value = self._data.get(validate_key(key))
        return None if value is None else ValueReader(value)

    # ---- writing ---------------------------------------------------------------------------
    def set(self, key: str, value: BytesLike) -> None:
        """Store a copy of ``value`` under ``key``."""
        self.check_writable(key)
        validate_key(key)
        data = bytes(value)
        with self._lock:
            self._put(key, data)

    def _put(self, key: str, data: bytes) -> None:  # under the lock
        self._data[key] = data
        self._versions[key] = next(self._clock)

    def _pop(self, key: str) -> None:  # under the lock
        self._data.pop(key, None)
        self._versions.pop(key, None)

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        """Store many values; every key is checked before anything is written."""
        for key in items:
            self.check_writable(key)
            validate_key(key)
        copies = {k: bytes(v) for k, v in items.items()}
        with self._lock:
            for key, data in copies.items():
                self._put(key, data)

    def move(self, src: str, dst: str) -> None:
        """Put ``src``'s value under ``dst`` and remove ``src``, in one step."""
        self.check_writable(dst)
        validate_key(src)
        validate_key(dst)
        with self._lock:
            if src in self._data:
                value = self._data[src]
                self._pop(src)
                self._put(dst, value)  # a new version: a compare-and-swap read before it loses

    def erase(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        self.check_writable(key)
        validate_key(key)
        with self._lock:
            self._pop(key)

    def erase_many(self, keys: Iterable[str]) -> None:
        """Remove many keys; every key is checked before anything is removed."""
        keys = list(keys)
        for key in keys:
            self.check_writable(key)
            validate_key(key)
        with self._lock:
            for key in keys:
                self._pop(key)

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key that starts with ``prefix``."""
        self.check_writable(prefix)
        validate_prefix(prefix)
        with self._lock:
            for key in [k for k in self._data if k.startswith(prefix)]:
                self._pop(key)

    # ---- conditional writes ----------------------------------------------------------------
    def _version(self, key: str) -> int | None:  # under the lock
        return self._versions.get(key, 0) if key in self._data else None

    def get_versioned(self, key: str) -> tuple[bytes | None, Version | None]:
        """``(value, write number)`` of ``key``; ``(None, None)`` when missing."""
        validate_key(key)
        with self._lock:
            value = self._data.get(key)
            return (None, None) if value is None else (bytes(value), self._version(key))

    def set_if(self, key: str, value: BytesLike, expected: Version | None) -> bool:
        """Store ``value`` only if ``key``'s write number is still ``expected`` (None: missing)."""
        self.check_writable(key)
        validate_key(key)
        data = bytes(value)
        with self._lock:
            if self._version(key) != expected:
                return False
            self._put(key, data)
            return True

    def erase_if(self, key: str, expected: Version) -> bool:
        """Remove ``key`` only if its write number is still ``expected``."""
        self.check_writable(key)
        validate_key(key)
        with self._lock:
            if expected is None or self._version(key) != expected:
                return False
            self._pop(key)
            return True

    # ---- listing ---------------------------------------------------------------------------
    def list(self) -> Iterator[str]:
        """Every key (a snapshot taken when called)."""
        with self._lock:
            keys = list(self._data)
        return iter(keys)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix`` (a snapshot taken when called)."""
        validate_prefix(prefix)
        with self._lock:
            keys = [k for k in self._data if k.startswith(prefix)]
        return iter(keys)

    # ---- identity --------------------------------------------------------------------------
    def with_read_only(self, read_only: bool = True) -> MemoryStore:
        """A store on the same dict (and the same lock and write numbers) with another flag."""
        other = object.__new__(type(self))  # not copy.copy: __reduce__ pickles a snapshot
        other.__dict__.update(self.__dict__)
        other.read_only = read_only
        return other

    @property
    def data_identity(self) -> Hashable:
        """The dict of values: stores on the same dict hold the same data."""
        return (MemoryStore, id(self._data))

    def __eq__(self, other: object) -> bool:
        """Equal when both are MemoryStores on the same dict with the same flag."""
        if not isinstance(other, MemoryStore):
            return NotImplemented
        return self._data is other._data and self.read_only == other.read_only

    def __hash__(self) -> int:
        return hash((MemoryStore, id(self._data), self.read_only))

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._data)} keys at {id(self._data):#x}>, read_only={self.read_only})"

    def __reduce__(self):
        """Pickle the contents (a snapshot), not the lock."""
        with self._lock:
            snapshot = dict(self._data)
        kwargs = {"read_only": self.read_only, "settings": dict(self.setting_overrides)}
        return rebuild_store, (MemoryStore, (snapshot,), kwargs)
