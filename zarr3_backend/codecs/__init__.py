"""Codecs of the Zarr v3 spec: base classes, registry, the codec chain and each codec.

Importing this package registers the built-in codecs by name.
"""

from .base import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec, ChunkSpec, Codec
from .blosc import BloscCodec
from .bytes import BytesCodec
from .chain import CodecChain
from .crc32c import Crc32cCodec
from .gzip import GzipCodec
from .registry import codec_from_json, get_codec_class, register_codec, registered_codecs
from .sharding import ShardingCodec
from .transpose import TransposeCodec
from .zstd import ZstdCodec

__all__ = [
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "BloscCodec",
    "BytesBytesCodec",
    "BytesCodec",
    "ChunkSpec",
    "Codec",
    "CodecChain",
    "Crc32cCodec",
    "GzipCodec",
    "ShardingCodec",
    "TransposeCodec",
    "ZstdCodec",
    "codec_from_json",
    "get_codec_class",
    "register_codec",
    "registered_codecs",
]

from . import numcodecs_adapter, vlen  # noqa: F401  (registers vlen-utf8, vlen-bytes, numcodecs.*)
