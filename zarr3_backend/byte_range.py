"""Byte ranges: the one value type stores and codecs both speak (neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ArgumentError


@dataclass(frozen=True, slots=True)
class ByteRange:
    """A range of bytes within one stored value.

    ``ByteRange(offset, length)``: ``length`` bytes from ``offset``;
    ``ByteRange(offset)``: from ``offset`` to the end;
    ``ByteRange.suffix(n)`` (stored as ``offset=-n``): the last ``n`` bytes.
    """

    offset: int
    length: int | None = None

    def __post_init__(self) -> None:
        if self.length is not None and (self.length < 0 or self.offset < 0):
            raise ArgumentError(f"invalid byte range offset={self.offset} length={self.length}")

    @classmethod
    def suffix(cls, n: int) -> ByteRange:
        """The last ``n`` bytes."""
        if n <= 0:
            raise ArgumentError(f"suffix length must be positive, got {n}")
        return cls(-n, None)

    @property
    def is_suffix(self) -> bool:
        return self.offset < 0

    def __str__(self) -> str:
        """How a message names the range: ``bytes [a, b)``, ``bytes [a, end)``, ``the last n bytes``."""
        if self.offset < 0:
            return f"the last {-self.offset} bytes"
        return f"bytes [{self.offset}, {'end' if self.length is None else self.offset + self.length})"

    def slice(self, size: int) -> slice:
        """The Python slice this range selects from a value of ``size`` bytes."""
        if self.offset < 0:
            return slice(max(size + self.offset, 0), size)
        if self.length is None:
            return slice(self.offset, size)
        return slice(self.offset, min(self.offset + self.length, size))

    def apply(self, value: bytes | memoryview) -> bytes:
        """Cut this range out of a whole value."""
        return bytes(value[self.slice(len(value))])
