"""Codecs of the Zarr v3 spec: base classes, registry, the codec chain and each codec."""

from .base import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, ChunkSpec, Codec, RangeReader
from .chain import CodecChain
from .registry import codec_from_json, get_codec_class, register_codec, registered_codecs

__all__ = [
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "BytesBytesCodec",
    "ChunkSpec",
    "Codec",
    "CodecChain",
    "RangeReader",
    "codec_from_json",
    "get_codec_class",
    "register_codec",
    "registered_codecs",
]
