"""Attributes: the ``attributes`` of a node as a mutable mapping that writes through."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any


class Attributes(MutableMapping):
    """The ``attributes`` of a node; every change is written to its ``zarr.json`` at once."""

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

    def __delitem__(self, key: str) -> None:
        attrs = dict(self._get())
        del attrs[key]
        self._node._set_attributes(attrs)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # one write for many keys
        attrs = dict(self._get())
        attrs.update(other, **kwargs)
        self._node._set_attributes(attrs)

    def put(self, attrs: dict) -> None:
        """Replace all attributes with ``attrs`` (one write)."""
        self._node._set_attributes(dict(attrs))

    def asdict(self) -> dict:
        return dict(self._get())

    def __repr__(self) -> str:
        return repr(self._get())
