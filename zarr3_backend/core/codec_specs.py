"""Assemble a codec chain from the zarr-python spelling: filters, serializer, compressors, shards.

Codecs may be given as this package's codec objects, ``{"name", "configuration"}`` dicts, plain
names, or numcodecs instances (mapped to the v3 codec of the same meaning).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codecs import Codec
from ..codecs.bytes import endian_matters
from ..errors import CodecError, ShapeError
from .dtypes import DataType

DEFAULT_COMPRESSOR: dict = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
DEFAULT_INDEX_CODECS: list[dict] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
]
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def coerce_codec(obj: Any) -> Codec | dict | str:
    """A codec in a form ``codec_from_json`` takes; numcodecs instances are translated."""
    if isinstance(obj, Codec | dict | str):
        return obj
    get_config = getattr(obj, "get_config", None)
    if get_config is None or not hasattr(obj, "codec_id"):
        raise CodecError(f"not a codec: {obj!r}")
    config = dict(get_config())
    codec_id = config.pop("id")
    if codec_id == "blosc":
        shuffle = config.get("shuffle", 1)
        out = {"cname": config["cname"], "clevel": config["clevel"], "blocksize": config.get("blocksize", 0)}
        if shuffle != -1:  # AUTOSHUFFLE: let the codec pick from the data type
            out["shuffle"] = _BLOSC_SHUFFLE[shuffle]
        return {"name": "blosc", "configuration": out}
    if codec_id == "zstd":
        return {
            "name": "zstd",
            "configuration": {
                "level": config.get("level", 0),
                "checksum": bool(config.get("checksum", False)),
            },
        }
    if codec_id == "gzip":
        return {"name": "gzip", "configuration": {"level": config.get("level", 1)}}
    if codec_id == "crc32c":
        return {"name": "crc32c"}
    return {"name": f"numcodecs.{codec_id}", "configuration": config}


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, Sequence) and not isinstance(value, str | dict):
        return list(value)
    return [value]


def default_serializer(dt: DataType) -> dict:
    """The array->bytes codec for a data type: ``bytes``, or the vlen codec for text/bytes."""
    if dt.numpy.kind in "OT":
        return (
            {"name": "vlen-bytes"} if dt.name in ("bytes", "variable_length_bytes") else {"name": "vlen-utf8"}
        )
    # bare "bytes" where byte order means nothing (S, V, one-byte fields), as zarr-python writes it
    return (
        {"name": "bytes", "configuration": {"endian": "little"}}
        if endian_matters(dt.numpy)
        else {"name": "bytes"}
    )


def build_codecs(
    dt: DataType,
    chunks: tuple[int, ...],
    shards: tuple[int, ...] | None,
    *,
    compressors: Any = "auto",
    filters: Any = None,
    serializer: Any = "auto",
    shard_index: dict | None = None,
) -> tuple[tuple[int, ...], list]:
    """(chunk grid shape, codec list) for the zarr-python style arguments.

    ``shard_index`` may set ``index_location`` ("start"/"end") and ``index_codecs`` of the
    sharding codec (defaults: "end", bytes + crc32c).
    """
    filters_ = [coerce_codec(c) for c in _as_list(filters)]
    auto = serializer is None or (isinstance(serializer, str) and serializer == "auto")
    serializer_ = default_serializer(dt) if auto else coerce_codec(serializer)
    if isinstance(compressors, str) and compressors == "auto":
        compressors_ = [DEFAULT_COMPRESSOR]
    else:
        compressors_ = [coerce_codec(c) for c in _as_list(compressors)]
    inner = [*filters_, serializer_, *compressors_]
    if shards is None:
        return chunks, inner
    bad = [i for i, (s, c) in enumerate(zip(shards, chunks, strict=True)) if c <= 0 or s % c]
    if bad:
        raise ShapeError(
            f"shard shape {tuple(shards)} must be a multiple of the chunk shape {tuple(chunks)} "
            f"on every axis (axis {bad[0]} is not)"
        )
    index = dict(shard_index or {})
    unknown = set(index) - {"index_location", "index_codecs"}
    if unknown:
        raise CodecError(
            f"shard_index: unknown keys {sorted(unknown)} (allowed: index_location, index_codecs)"
        )
    sharding = {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": list(chunks),
            "codecs": inner,
            "index_codecs": [coerce_codec(c) for c in index.get("index_codecs") or DEFAULT_INDEX_CODECS],
            "index_location": index.get("index_location") or "end",
        },
    }
    return shards, [sharding]
