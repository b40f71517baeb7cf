"""Chunk key encodings: chunk grid coordinates <-> store keys ("default" and "v2" of the spec)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InvalidKeyError, MetadataError
from ._extension import check_config_keys, parse_extension

__all__ = [
    "ChunkKeyEncoding",
    "DefaultChunkKeyEncoding",
    "V2ChunkKeyEncoding",
    "parse_chunk_key_encoding",
]

_SEPARATORS = ("/", ".")


def _decode_index(part: str, key: str) -> int:
    # ASCII decimal without sign or leading zeros, so every chunk has exactly one key
    if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
        raise InvalidKeyError(f"chunk key {key!r}: {part!r} is not a chunk index")
    return int(part)


def _encode_coords(coords: Sequence[int], sep: str) -> str:
    out = []
    for c in coords:
        c = int(c)
        if c < 0:
            raise InvalidKeyError(f"chunk coordinates {tuple(coords)} must be non-negative")
        out.append(str(c))
    return sep.join(out)


def _check_ndim(coords: tuple[int, ...], key: str, ndim: int | None) -> tuple[int, ...]:
    if ndim is not None and len(coords) != ndim:
        raise InvalidKeyError(f"chunk key {key!r} has {len(coords)} indices, the array has {ndim} dimensions")
    return coords


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """Base of the chunk key encodings: a ``separator`` ("/" or ".") and a ``name``."""

    separator: str
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if self.separator not in _SEPARATORS:
            raise MetadataError(
                f"chunk_key_encoding {self.name!r}: separator must be '/' or '.', got {self.separator!r}"
            )

    def to_json(self) -> dict[str, Any]:
        """The ``chunk_key_encoding`` value written to ``zarr.json``."""
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def encode_chunk_key(self, coords: Sequence[int]) -> str:
        """The store key (relative to the array) of the chunk at grid ``coords``."""
        raise NotImplementedError

    def decode_chunk_key(self, key: str, ndim: int | None = None) -> tuple[int, ...]:
        """The grid coordinates of ``key``; ``InvalidKeyError`` when it is no chunk key."""
        raise NotImplementedError


@dataclass(frozen=True)
class DefaultChunkKeyEncoding(ChunkKeyEncoding):
    """Keys ``c/1/2`` (or ``c.1.2``): prefix "c" keeps chunks apart from metadata; 0-d is "c"."""

    separator: str = "/"
    name: ClassVar[str] = "default"

    def encode_chunk_key(self, coords: Sequence[int]) -> str:
        if len(coords) == 0:
            return "c"
        return "c" + self.separator + _encode_coords(coords, self.separator)

    def decode_chunk_key(self, key: str, ndim: int | None = None) -> tuple[int, ...]:
        if key == "c":
            return _check_ndim((), key, ndim)
        head = "c" + self.separator
        if not key.startswith(head):
            raise InvalidKeyError(f"chunk key {key!r} does not start with {head!r}")
        parts = key[len(head) :].split(self.separator)
        return _check_ndim(tuple(_decode_index(p, key) for p in parts), key, ndim)


@dataclass(frozen=True)
class V2ChunkKeyEncoding(ChunkKeyEncoding):
    """Zarr v2 style keys ``1.2`` (or ``1/2``); the single chunk of a 0-d array is "0"."""

    separator: str = "."
    name: ClassVar[str] = "v2"

    def encode_chunk_key(self, coords: Sequence[int]) -> str:
        if len(coords) == 0:
            return "0"
        return _encode_coords(coords, self.separator)

    def decode_chunk_key(self, key: str, ndim: int | None = None) -> tuple[int, ...]:
        """As the base method; pass ``ndim=0`` to read "0" as the 0-d chunk rather than (0,)."""
        if ndim == 0 and key == "0":
            return ()
        return _check_ndim(tuple(_decode_index(p, key) for p in key.split(self.separator)), key, ndim)


_ENCODINGS: dict[str, type[ChunkKeyEncoding]] = {
    DefaultChunkKeyEncoding.name: DefaultChunkKeyEncoding,
    V2ChunkKeyEncoding.name: V2ChunkKeyEncoding,
}


def parse_chunk_key_encoding(obj: Any) -> ChunkKeyEncoding:
    """The encoding for a ``chunk_key_encoding`` value: a name or ``{name, configuration}``."""
    if isinstance(obj, ChunkKeyEncoding):
        return obj
    ext = parse_extension(obj, "chunk_key_encoding")
    cls = _ENCODINGS.get(ext.name)
    if cls is None:
        raise MetadataError(
            f"chunk_key_encoding: unknown encoding {ext.name!r} (supported: {', '.join(map(repr, _ENCODINGS))})"
        )
    config = check_config_keys(ext.configuration, {"separator"}, f"chunk_key_encoding {ext.name!r}")
    return cls(**config)
