"""A store view that puts one transaction's writes in its staging area (``.z3-txn/<id>/data/``).

Step 1 of the commit protocol (``core/commit``): values written through it are out of readers'
sight until the commit moves them into place; reads see the staged values first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..byte_range import ByteRange
from ..stores import Store
from ..stores.base import BytesLike, PositionedReader
from .txn_records import txn_prefix


class StagingStore(Store):
    """A view of ``base`` whose writes land in one transaction's staging area.

    Reads see the staged values first, then the base; listings show the base only. Conditional
    reads record the version they saw, so the commit can re-check it (read-modify-writes of
    units other writers share)."""

    def __init__(self, base: Store, txn_id: str) -> None:
        super().__init__(read_only=base.read_only)
        self.base = base
        self.txn_id = txn_id
        self._data = txn_prefix(txn_id) + "data/"
        self._tomb = txn_prefix(txn_id) + "erase/"
        self.expected: dict[str, Any] = {}
        self.costly_requests = base.costly_requests
        self.setting_overrides = base.setting_overrides  # the base store's own settings hold
        self.default_coalesce_gap = base.default_coalesce_gap
        self.supports_conditional_writes = base.supports_conditional_writes
        self.refuses_unguarded_partial_writes = base.refuses_unguarded_partial_writes

    #: Writes through a staging store become visible at its transaction's commit: an Array on
    #: it writes straight through, with no transaction of its own.
    commits_externally = True

    def __reduce__(self) -> tuple:
        return (StagingStore, (self.base, self.txn_id))

    def __repr__(self) -> str:
        return f"StagingStore({self.base!r}, {self.txn_id!r})"

    # -- read-path capabilities: the base's, of the staged value when there is one
    @property
    def inline_io(self) -> bool:  # type: ignore[override]
        """As the base's: every call is one or two base calls."""
        return self.base.inline_io

    def get_into(
        self, key: str, alloc: Callable[[int], memoryview], byte_range: ByteRange | None = None
    ) -> memoryview | None:
        """The base's ``get_into`` of the staged value when there is one."""
        got = self.base.get_into(self._data + key, alloc, byte_range)
        if got is not None:
            return got
        if self.base.exists(self._tomb + key):
            return None
        return self.base.get_into(key, alloc, byte_range)

    def open_reader(self, key: str) -> PositionedReader | None:
        """The base's reader of the staged value when there is one."""
        reader = self.base.open_reader(self._data + key)
        if reader is not None:
            return reader
        if self.base.exists(self._tomb + key):
            return None
        return self.base.open_reader(key)

    def will_need(self, keys: Sequence[str]) -> None:
        """Passed on to the base, for the staged values and the committed ones."""
        self.base.will_need([self._data + k for k in keys] + list(keys))

    # -- reading
    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        got = self.base.get(self._data + key, byte_range)
        if got is not None:
            return got
        if self.base.exists(self._tomb + key):
            return None
        return self.base.get(key, byte_range)

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        staged = self.base.get_many([self._data + k for k in keys])
        missing = [i for i, v in enumerate(staged) if v is None]
        if missing:
            gone = self.base.exists_many([self._tomb + keys[i] for i in missing])
            rest = [i for i, g in zip(missing, gone, strict=True) if not g]
            for i, v in zip(rest, self.base.get_many([keys[i] for i in rest]), strict=True):
                staged[i] = v
        return staged

    def get_partial_values(self, key_ranges: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        return [self.get(k, r) for k, r in key_ranges]

    def get_versioned(self, key: str) -> tuple[bytes | None, Any]:
        """The value this transaction sees (its own staged value or erase first, else the
        base's) with the base's version, which the commit re-checks before replacing; the first
        version read of a key is the one checked."""
        value, version = self.base.get_versioned(key)
        self.expected.setdefault(key, version)
        staged = self.base.get(self._data + key)
        if staged is not None:
            return staged, version
        if self.base.exists(self._tomb + key):
            return None, version
        return value, version

    # -- writing
    def barrier(self) -> None:
        """The base's: values staged by other processes (dask tasks on other machines) are
        kept before the committing process writes the manifest that points at them."""
        self.base.barrier()

    def set(self, key: str, value: BytesLike) -> None:
        self.check_writable(key)
        self.base.set(self._data + key, value)

    def set_many(self, items: Mapping[str, BytesLike]) -> None:
        self.base.set_many({self._data + k: v for k, v in items.items()})

    def set_if(self, key: str, value: BytesLike, expected: Any) -> bool:
        """Staged now; the version check happens when the commit moves it into place."""
        self.expected.setdefault(key, expected)
        self.set(key, value)
        return True

    def erase(self, key: str) -> None:
        self.erase_many([key])

    def erase_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self.base.set_many({self._tomb + k: b"" for k in keys})
        self.base.erase_many([self._data + k for k in keys])

    def erase_if(self, key: str, expected: Any) -> bool:
        self.expected.setdefault(key, expected)
        self.erase(key)
        return True

    def erase_prefix(self, prefix: str) -> None:
        raise NotImplementedError("erasing a prefix inside a transaction: pass it to commit()")

    # -- listing
    def list(self) -> Iterator[str]:
        return self.base.list()

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return self.base.list_prefix(prefix)

    def list_dir(self, prefix: str) -> Iterator[str]:
        return self.base.list_dir(prefix)


__all__ = ["StagingStore"]
