"""The ``numcodecs.*`` codec names zarr-python 3 writes into v3 metadata, run through numcodecs.

zarr-python stores a numcodecs codec as ``{"name": "numcodecs.<id>", "configuration": {...}}``
(the numcodecs config without its ``"id"``). Each name maps to one codec kind of the v3 spec:
filters such as ``delta`` are array -> array, compressors and checksums are bytes -> bytes, and
``pcodec``/``zfpy`` serialise arrays themselves (array -> bytes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numcodecs
import numpy as np

from ..errors import CodecError, CorruptionError
from .base import ArrayArrayCodec, ArrayBytesCodec, Buffer, BytesBytesCodec, ChunkSpec, Codec, as_bytes_view
from .blosc import BloscCodec
from .registry import register_codec
from .zstd import ZstdCodec

#: Readers of the frame headers numcodecs' blosc and zstd write (the v3 codecs own the format).
_FRAME_READERS: dict[str, BytesBytesCodec] = {"blosc": BloscCodec(), "zstd": ZstdCodec()}

PREFIX = "numcodecs."

#: numcodecs id -> codec kind in the v3 chain ("aa", "ab", "bb"), as zarr-python 3 classifies them.
NUMCODECS_KINDS: dict[str, str] = {
    # array -> array ("filters")
    "delta": "aa",
    "bitround": "aa",
    "fixedscaleoffset": "aa",
    "quantize": "aa",
    "packbits": "aa",
    "astype": "aa",
    # bytes -> bytes ("compressors" and checksums)
    "blosc": "bb",
    "lz4": "bb",
    "zstd": "bb",
    "zlib": "bb",
    "gzip": "bb",
    "bz2": "bb",
    "lzma": "bb",
    "shuffle": "bb",
    "crc32": "bb",
    "crc32c": "bb",
    "adler32": "bb",
    "fletcher32": "bb",
    "jenkins_lookup3": "bb",
    # array -> bytes (serialisers)
    "pcodec": "ab",
    "zfpy": "ab",
}

#: Settings taken from the chunk's data type when the configuration leaves them out (``evolve``).
_FROM_SPEC: dict[str, str] = {
    "delta": "dtype",
    "fixedscaleoffset": "dtype",
    "quantize": "dtype",
    "astype": "decode_dtype",
    "shuffle": "elementsize",
}

#: Checksum codecs append a fixed 4-byte digest, so their encoded size is known.
_CHECKSUMS = frozenset({"crc32", "crc32c", "adler32", "fletcher32", "jenkins_lookup3"})


class _NumcodecsMixin:
    """Shared state of every adapter: the numcodecs id, its config and the numcodecs object."""

    codec_id: ClassVar[str]
    name: ClassVar[str]

    def __init__(self, **config: Any) -> None:
        given_id = config.pop("id", None)
        if given_id not in (None, self.codec_id):
            raise CodecError(
                f"codec {self.name!r}: configuration 'id' is {given_id!r}, expected {self.codec_id!r}"
            )
        self._config = dict(config)
        self._numcodec: Any = None
        self._fill_cache: dict[tuple, Any] = {}  # encoded fill values (``resolve``), by input
        deferred = self.codec_id in _FROM_SPEC and self._config.get(_FROM_SPEC[self.codec_id]) is None
        if not deferred:
            self._numcodec = self._build()  # complete: check the configuration now

    def _build(self) -> Any:
        try:
            return numcodecs.get_codec({"id": self.codec_id, **self._config})
        except numcodecs.errors.UnknownCodecError as e:  # optional dependency missing (pcodec, zfpy)
            raise CodecError(f"codec {self.name!r}: numcodecs cannot provide it here ({e})") from e
        except (TypeError, ValueError) as e:
            raise CodecError(f"codec {self.name!r}: invalid configuration {self._config!r}: {e}") from e

    @property
    def _codec(self) -> Any:
        """The numcodecs object (built on first use when ``evolve`` had a setting to fill in)."""
        if self._numcodec is None:
            self._numcodec = self._build()
        return self._numcodec

    @classmethod
    def from_config(cls, configuration: Mapping[str, Any] | None) -> Codec:
        return cls(**dict(configuration or {}))

    def configuration(self) -> dict[str, Any]:
        return dict(self._config)

    def _with(self, **extra: Any) -> Any:
        """A copy with ``extra`` config keys filled in where they are missing."""
        missing = {k: v for k, v in extra.items() if self._config.get(k) is None}
        return type(self)(**{**self._config, **missing}) if missing else self

    def _fail(self, action: str, e: Exception) -> CodecError:
        kind = CorruptionError if action == "decode" else CodecError
        return kind(f"codec {self.name!r}: {action} failed: {e}")


def _as_type(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``out`` as ``dtype``: bits reinterpreted when the item sizes match (``bitround`` returns
    its rounded floats as integers of the same width), values converted otherwise."""
    if out.dtype == dtype:
        return out
    if out.dtype.kind == dtype.kind and out.dtype.itemsize == dtype.itemsize:  # byte order only
        return out.astype(dtype)
    if out.dtype.itemsize == dtype.itemsize:
        return np.ascontiguousarray(out).view(dtype)
    return out.astype(dtype)


class NumcodecsArrayArrayCodec(_NumcodecsMixin, ArrayArrayCodec):
    """A numcodecs filter (``delta``, ``fixedscaleoffset``, ...) used as an array -> array codec."""

    def evolve(self, spec: ChunkSpec) -> Codec:
        key = _FROM_SPEC.get(self.codec_id)
        return self._with(**{key: spec.dtype.str}) if key else self

    def validate(self, spec: ChunkSpec) -> None:
        if self.codec_id == "packbits" and spec.dtype != np.bool_:
            raise CodecError(f"codec {self.name!r} needs a bool array, got {spec.dtype}")
        if self.codec_id == "astype" and self._config.get("encode_dtype") is None:
            raise CodecError(f"codec {self.name!r} needs 'encode_dtype' in its configuration")

    def _out_dtype(self, spec: ChunkSpec) -> np.dtype:
        if self.codec_id == "packbits":
            return np.dtype("uint8")
        if self.codec_id == "astype":
            return np.dtype(self._config["encode_dtype"])
        if self.codec_id in ("delta", "fixedscaleoffset", "quantize") and self._config.get("astype"):
            return np.dtype(self._config["astype"])
        return spec.dtype

    def _out_shape(self, spec: ChunkSpec) -> tuple[int, ...]:
        if self.codec_id == "packbits":
            return (1 + math.ceil(math.prod(spec.shape) / 8),)
        return tuple(spec.shape)

    def resolve(self, spec: ChunkSpec) -> ChunkSpec:
        if self.codec_id == "packbits":
            return ChunkSpec(self._out_shape(spec), np.dtype("uint8"), np.uint8(0))
        dtype = self._out_dtype(spec)
        if dtype == spec.dtype:
            return spec
        return ChunkSpec(spec.shape, dtype, self._encoded_fill(spec, dtype))

    def _encoded_fill(self, spec: ChunkSpec, dtype: np.dtype) -> Any:
        """The fill value as the filter stores it, computed once per (data type, fill value)."""
        source = np.full(1, spec.fill_value, dtype=spec.dtype)
        key = (spec.dtype.str, source.tobytes(), dtype.str)
        if key not in self._fill_cache:
            try:
                fill = dtype.type(self._codec.encode(source).reshape(-1)[0])
            except Exception:  # a fill the filter cannot express: zero of the stored type
                fill = dtype.type(0)
            self._fill_cache[key] = fill
        return self._fill_cache[key]

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        try:
            out = np.asarray(self._codec.encode(np.ascontiguousarray(chunk)))
            return _as_type(out, self._out_dtype(spec)).reshape(self._out_shape(spec))
        except Exception as e:
            raise self._fail("encode", e) from e

    def decode(self, chunk: np.ndarray, spec: ChunkSpec) -> np.ndarray:
        try:
            out = np.asarray(self._codec.decode(np.ascontiguousarray(chunk)))
            if self.codec_id == "packbits":
                out = out[: math.prod(spec.shape)]
            return _as_type(out, spec.dtype).reshape(spec.shape)
        except Exception as e:
            raise self._fail("decode", e) from e


class NumcodecsBytesBytesCodec(_NumcodecsMixin, BytesBytesCodec):
    """A numcodecs compressor or checksum used as a bytes -> bytes codec."""

    def evolve(self, spec: ChunkSpec) -> Codec:
        return self._with(elementsize=spec.dtype.itemsize) if self.codec_id == "shuffle" else self

    def encode(self, data: Buffer, spec: ChunkSpec) -> Buffer:
        try:
            out = self._codec.encode(as_bytes_view(data))
        except Exception as e:
            raise self._fail("encode", e) from e
        return out.tobytes() if isinstance(out, np.ndarray) else out

    def decode(self, data: Buffer, spec: ChunkSpec) -> Buffer:
        try:
            out = self._codec.decode(as_bytes_view(data))
        except Exception as e:
            raise self._fail("decode", e) from e
        return out.tobytes() if isinstance(out, np.ndarray) else out

    def encoded_size(self, size: int) -> int | None:
        return size + 4 if self.codec_id in _CHECKSUMS else None

    def decoded_size(self, data: Buffer) -> int | None:
        """The size a blosc or zstd frame header declares (the same frames as the ``blosc`` and
        ``zstd`` codecs read, checked by their one reader), else ``None``."""
        reader = _FRAME_READERS.get(self.codec_id)
        return None if reader is None else reader.decoded_size(data)


class NumcodecsArrayBytesCodec(_NumcodecsMixin, ArrayBytesCodec):
    """A numcodecs serialiser (``pcodec``, ``zfpy``) used as the array -> bytes codec."""

    def encode(self, chunk: np.ndarray, spec: ChunkSpec) -> Buffer:
        try:
            return self._codec.encode(np.ascontiguousarray(chunk))
        except Exception as e:
            raise self._fail("encode", e) from e

    def decode(self, data: Buffer, spec: ChunkSpec) -> np.ndarray:
        try:
            out = np.asarray(self._codec.decode(bytes(as_bytes_view(data))))
            return out.astype(spec.dtype, copy=False).reshape(spec.shape)
        except Exception as e:
            raise self._fail("decode", e) from e


_BASES: dict[str, type[Codec]] = {
    "aa": NumcodecsArrayArrayCodec,
    "bb": NumcodecsBytesBytesCodec,
    "ab": NumcodecsArrayBytesCodec,
}


def _make_class(codec_id: str, kind: str) -> type[Codec]:
    """One registered class per numcodecs id, named after it (``NumcodecsDelta``, ...)."""
    base = _BASES[kind]
    cls_name = "Numcodecs" + "".join(part.capitalize() for part in codec_id.split("_"))
    cls = type(cls_name, (base,), {"codec_id": codec_id, "name": PREFIX + codec_id, "__module__": __name__})
    cls.__doc__ = f"``{PREFIX}{codec_id}``: numcodecs' {codec_id!r} codec in a v3 codec chain."
    globals()[cls_name] = cls  # a module attribute, so pickle finds it by name (dask, xarray)
    return register_codec(cls)


#: name in zarr.json ("numcodecs.delta", ...) -> registered codec class.
NUMCODECS_CODECS: dict[str, type[Codec]] = {
    PREFIX + codec_id: _make_class(codec_id, kind) for codec_id, kind in NUMCODECS_KINDS.items()
}
