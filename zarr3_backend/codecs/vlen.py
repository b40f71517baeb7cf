"""``vlen-utf8`` and ``vlen-bytes``: the array -> bytes codecs of variable-length strings and bytes.

The layout is numcodecs' (which zarr-python 3 uses): a little-endian uint32 item count, then
per item, in C order, a uint32 byte length and the bytes. numcodecs does the work.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numcodecs
import numpy as np

from ..errors import CodecError, CorruptionError
from .base import ArrayBytesCodec, Buffer, ChunkSpec, as_bytes_view
from .registry import register_codec

#: Bytes of the little-endian uint32 item count (and of each item's length) in the layout.
_HEADER = 4


class _VLenCodec(ArrayBytesCodec):
    """Shared logic: object items in, one length-prefixed buffer out, and back."""

    item_type: ClassVar[type]
    _numcodec: ClassVar[Any]

    def __init__(self) -> None:
        pass

    def configuration(self) -> dict[str, Any]:
        return {}  # zarr-python writes an empty configuration object

    def validate(self, spec: ChunkSpec) -> None:
        if spec.dtype.kind not in "OT":
            raise CodecError(f"codec {self.name!r} needs a variable-length data type, got numpy {spec.dtype}")

    def _items(self, chunk: np.ndarray) -> np.ndarray:
        """The chunk as a flat C-order object array of ``item_type`` values."""
        flat = np.asarray(chunk).reshape(-1)
        return flat if flat.dtype == object else flat.astype(object)

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> Buffer:
        try:
            return bytes(self._numcodec.encode(self._items(chunk)))
        except TypeError as e:
            raise CodecError(f"codec {self.name!r}: every item must be {self.item_type.__name__}: {e}") from e

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        """The chunk's items; the item count in the header is checked against the chunk's shape
        and the bytes present before anything is allocated (numcodecs checks each item length
        against the bytes left)."""
        view = as_bytes_view(data)
        n = math.prod(spec.shape)
        if len(view) < _HEADER:
            raise CorruptionError(
                f"codec {self.name!r}: {len(view)} bytes cannot hold the {_HEADER}-byte item count"
            )
        count = int.from_bytes(view[:_HEADER], "little")
        if count != n or count * _HEADER > len(view) - _HEADER:
            raise CorruptionError(
                f"codec {self.name!r}: header says {count} items, the chunk {spec.shape} holds {n} "
                f"and {len(view)} bytes hold at most {(len(view) - _HEADER) // _HEADER}"
            )
        try:
            items = self._numcodec.decode(view)
        except (ValueError, TypeError) as e:
            raise CorruptionError(
                f"codec {self.name!r}: cannot decode {len(as_bytes_view(data))} bytes: {e}"
            ) from e
        if items.size != n:
            raise CorruptionError(
                f"codec {self.name!r}: decoded {items.size} items, the chunk {spec.shape} holds {n}"
            )
        items = items.reshape(spec.shape)
        return items if spec.dtype == object else items.astype(spec.dtype)


@register_codec
class VLenUTF8Codec(_VLenCodec):
    """``vlen-utf8``: variable-length UTF-8 strings (the ``string`` data type)."""

    name = "vlen-utf8"
    item_type = str
    _numcodec = numcodecs.VLenUTF8()


@register_codec
class VLenBytesCodec(_VLenCodec):
    """``vlen-bytes``: variable-length byte strings (the ``variable_length_bytes`` data type)."""

    name = "vlen-bytes"
    item_type = bytes
    _numcodec = numcodecs.VLenBytes()
