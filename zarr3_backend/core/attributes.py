"""Attributes: the ``attributes`` of a node as a mutable mapping that writes through."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any


class Attributes(MutableMapping):
    """The ``attributes`` of a node; every change is written to its ``zarr.json`` at once, to
    the keys it names only (another writer's changes to other keys are kept)."""

    def __init__(self, node: Any) -> None:
        self._node = node

    def _get(self) -> dict:
        return self._node.metadata.attributes

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    # Each change is applied to the attributes as stored when it is written (not to this copy,
    # which another writer may have changed since): it changes only the keys it names.
    def __delitem__(self, key: str) -> None:
        if key not in self._get():
            raise KeyError(key)
        self._node._change_attributes(lambda attrs: {k: v for k, v in attrs.items() if k != key})

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # one write for many keys
        changes = dict(other, **kwargs)
        self._node._change_attributes(lambda attrs: {**attrs, **changes})

    def put(self, attrs: dict) -> None:
        """Replace all attributes with ``attrs`` (one write)."""
        new = dict(attrs)
        self._node._change_attributes(lambda _stored: dict(new))

    def asdict(self) -> dict:
        return dict(self._get())

    def __repr__(self) -> str:
        return repr(self._get())
