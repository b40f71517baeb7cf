"""The ``blosc`` codec (bytes -> bytes): the c-blosc container via ``numcodecs.blosc``.

The metadata's ``typesize`` drives shuffling: the bytes reach blosc as a buffer whose item size
is ``typesize``. Decoding reads everything it needs (compressor, shuffle) from the frame header.
``encode_into`` compresses into a caller's buffer through the c-blosc that numcodecs ships
(its exported ``blosc_compress_ctx``): numcodecs' ``compress`` returns a fresh bytes object,
and first-touching that memory costs about as much CPU as compressing into it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, ClassVar

import numpy as np
from numcodecs import blosc as _blosc

from ..errors import CodecError, CorruptionError
from ._config import check_choice, check_int, check_keys
from .base import Buffer, BytesBytesCodec, ChunkSpec, as_bytes_view
from .registry import register_codec

CNAMES = ("lz4", "lz4hc", "blosclz", "zstd", "snappy", "zlib")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
#: Compressor codes of the frame header (flags >> 5) -> a cname that decodes them.
_HEADER_COMPRESSORS = {0: "blosclz", 1: "lz4", 2: "snappy", 3: "zlib", 4: "zstd"}
_HEADER_SIZE = 16
#: c-blosc never adds more than this to its input (BLOSC_MAX_OVERHEAD).
MAX_OVERHEAD = 16
#: c-blosc takes ``typesize`` and ``blocksize`` as C ints (and a frame is at most 2**31 bytes).
MAX_INT = 2**31 - 1


@cache
def _compress_ctx() -> Any:
    """numcodecs' c-blosc ``blosc_compress_ctx`` as a ctypes function (GIL released while it
    runs), or None when this build does not export it."""
    try:
        fn = ctypes.CDLL(_blosc.__file__).blosc_compress_ctx
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = [
        ctypes.c_int,  # clevel
        ctypes.c_int,  # doshuffle
        ctypes.c_size_t,  # typesize
        ctypes.c_size_t,  # nbytes
        ctypes.c_void_p,  # src
        ctypes.c_void_p,  # dest
        ctypes.c_size_t,  # destsize
        ctypes.c_char_p,  # compressor
        ctypes.c_size_t,  # blocksize
        ctypes.c_int,  # numinternalthreads
    ]
    fn.restype = ctypes.c_int
    return fn


@cache
def available_cnames() -> frozenset[str]:
    """The compressors this build of c-blosc was compiled with."""
    return frozenset(_blosc.list_compressors())


def _typed_view(view: memoryview, typesize: int) -> Any:
    """``view`` as a buffer of ``typesize``-byte items (how numcodecs reads the shuffle stride)."""
    if typesize <= 1 or len(view) % typesize:
        return view
    return np.frombuffer(view, dtype=np.dtype((np.void, typesize)))


@register_codec
@dataclass(frozen=True, eq=False)
class BloscCodec(BytesBytesCodec):
    """Blosc compression; ``shuffle``/``typesize`` left ``None`` are chosen by ``evolve``."""

    name: ClassVar[str] = "blosc"
    #: ``decode_into`` decompresses straight into the caller's buffer.
    decodes_into: ClassVar[bool] = True
    cname: str = "zstd"
    clevel: int = 5
    shuffle: str | None = None
    typesize: int | None = None
    blocksize: int = 0

    def __post_init__(self) -> None:
        check_choice(self.name, "cname", self.cname, CNAMES)
        object.__setattr__(self, "clevel", check_int(self.name, "clevel", self.clevel, 0, 9))
        if self.shuffle is not None:
            check_choice(self.name, "shuffle", self.shuffle, tuple(SHUFFLES))
        if self.typesize is not None:
            typesize = check_int(self.name, "typesize", self.typesize, 1, MAX_INT)
            object.__setattr__(self, "typesize", typesize)
        object.__setattr__(self, "blocksize", check_int(self.name, "blocksize", self.blocksize, 0, MAX_INT))

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> BloscCodec:
        """Build from ``{"cname", "clevel", "shuffle", "typesize", "blocksize"}``."""
        return cls(
            **check_keys(cls.name, configuration, ("cname", "clevel", "shuffle", "typesize", "blocksize"))
        )

    def configuration(self) -> dict[str, Any]:
        config = {
            "cname": self.cname,
            "clevel": self.clevel,
            "shuffle": self.shuffle,
            "typesize": self.typesize,
            "blocksize": self.blocksize,
        }
        return {k: v for k, v in config.items() if v is not None}

    def evolve(self, spec: ChunkSpec) -> BloscCodec:
        """Fill ``typesize`` from the element size and pick a ``shuffle`` for it if none was given:
        bit-shuffle for 1-byte elements, byte-shuffle otherwise."""
        itemsize = spec.dtype.itemsize
        shuffle = self.shuffle or ("bitshuffle" if itemsize == 1 else "shuffle")
        typesize = self.typesize or itemsize
        if (shuffle, typesize) == (self.shuffle, self.typesize):
            return self
        return replace(self, shuffle=shuffle, typesize=typesize)

    def validate(self, spec: ChunkSpec) -> None:
        """Refuse shuffling without a ``typesize`` (the spec requires it unless noshuffle)."""
        if self.shuffle != "noshuffle" and self.typesize is None:
            raise CodecError(f"codec 'blosc': 'typesize' is required when shuffle is {self.shuffle!r}")

    def _resolved(self, spec: ChunkSpec) -> BloscCodec:
        codec = self if self.shuffle is not None and self.typesize is not None else self.evolve(spec)
        if codec.cname not in available_cnames():
            raise CodecError(
                f"codec 'blosc': cname {codec.cname!r} is not available in this build of c-blosc "
                f"(available: {', '.join(sorted(available_cnames()))})"
            )
        return codec

    def encode_into(self, data: Buffer, spec: ChunkSpec, out: memoryview) -> Buffer:
        """A frame written into ``out`` (a writable byte buffer) and returned as a view of it;
        falls back to ``encode`` when ``out`` may be too small or c-blosc's entry point is not
        exported. The bytes are those of ``encode`` on a worker thread (single-threaded
        c-blosc); from the main thread numcodecs may split blocks over blosc's own threads,
        which changes the bytes but not what they decode to."""
        view = as_bytes_view(data)
        fn = _compress_ctx()
        if fn is None or len(out) < len(view) + MAX_OVERHEAD or not len(view):
            return self.encode(data, spec)
        codec = self._resolved(spec)
        typesize = codec.typesize or 1
        if len(view) % typesize:
            typesize = 1  # as numcodecs does for a buffer that is not whole items
        src = np.frombuffer(view, dtype=np.uint8)
        dest = np.frombuffer(out, dtype=np.uint8)
        n = fn(
            codec.clevel,
            SHUFFLES[codec.shuffle or "noshuffle"],
            typesize,
            len(view),
            src.ctypes.data,
            dest.ctypes.data,
            len(view) + MAX_OVERHEAD,  # as numcodecs: c-blosc stores incompressible data raw
            codec.cname.encode("ascii"),
            codec.blocksize,
            1,
        )
        if n <= 0:
            raise CodecError(f"codec 'blosc': compression of {len(view)} bytes failed (c-blosc returned {n})")
        return out[:n]

    def encode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        codec = self._resolved(spec)
        view = as_bytes_view(data)
        try:
            return _blosc.compress(
                _typed_view(view, codec.typesize or 1),
                codec.cname.encode("ascii"),
                codec.clevel,
                SHUFFLES[codec.shuffle or "noshuffle"],
                codec.blocksize,
            )
        except (ValueError, RuntimeError) as e:
            raise CodecError(f"codec 'blosc': compression of {len(view)} bytes failed: {e}") from e

    def decode(self, data: Buffer, spec: ChunkSpec) -> bytes:
        """Decompress a blosc frame written with any compressor, shuffle and typesize."""
        view = as_bytes_view(data)
        if _frame_nbytes(view) == 0:
            return b""  # c-blosc reports decompressing an empty frame as an error
        return self._decompress(view, None)

    def max_encoded_size(self, size: int) -> int:
        """c-blosc stores incompressible data raw: never more than ``MAX_OVERHEAD`` extra bytes."""
        return size + MAX_OVERHEAD

    def decoded_size(self, data: Buffer) -> int:
        """The decompressed size the frame header declares (at most 2**31 by the format)."""
        return _frame_nbytes(as_bytes_view(data))

    def decode_into(self, data: Buffer, spec: ChunkSpec, dest: memoryview) -> memoryview:
        """Decompress straight into ``dest`` (writable, exactly the decompressed size): no
        intermediate bytes object. Returns ``dest``."""
        view = as_bytes_view(data)
        nbytes = _frame_nbytes(view)
        if nbytes != len(dest):
            raise CorruptionError(
                f"codec 'blosc': frame decompresses to {nbytes} bytes, expected {len(dest)}"
            )
        if nbytes:
            self._decompress(view, dest)
        return dest

    def _decompress(self, view: memoryview, dest: memoryview | None) -> Any:
        try:
            return _blosc.decompress(view, dest)
        except (ValueError, RuntimeError, SystemError, MemoryError, OverflowError) as e:
            cname = _HEADER_COMPRESSORS.get(view[2] >> 5)
            if cname is not None and cname not in available_cnames():
                raise CodecError(
                    f"codec 'blosc': the frame was compressed with {cname!r}, "
                    "which this build of c-blosc cannot decompress"
                ) from e
            raise CorruptionError(f"codec 'blosc': invalid blosc frame: {e}") from e


def _frame_nbytes(view: memoryview) -> int:
    """The decompressed size a blosc frame header declares, after checking the frame is whole."""
    if len(view) < _HEADER_SIZE:
        raise CorruptionError(f"codec 'blosc': {len(view)} bytes is shorter than the 16-byte blosc header")
    stored_size = int.from_bytes(view[12:16], "little")
    if stored_size > len(view):
        raise CorruptionError(
            f"codec 'blosc': frame is truncated: header says {stored_size} bytes, got {len(view)}"
        )
    return int.from_bytes(view[4:8], "little")
