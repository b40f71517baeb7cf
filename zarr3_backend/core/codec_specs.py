"""Assemble a codec chain from the zarr-python spelling: filters, serializer, compressors, shards.

Codecs may be given as this package's codec objects, ``{"name", "configuration"}`` dicts, plain
names, or numcodecs instances (mapped to the v3 codec of the same meaning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from numcodecs.abc import Codec as NumcodecsCodec

from ..codecs import Codec
from ..codecs.blosc import SHUFFLES
from ..codecs.bytes import endian_matters
from ..errors import CodecError, ShapeError
from .dtypes import DataType

DEFAULT_COMPRESSOR: dict = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
DEFAULT_INDEX_CODECS: list[dict] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
]
#: numcodecs blosc's integer shuffle -> the v3 blosc codec's name (-1, AUTOSHUFFLE: left out, so
#: the codec picks it from the data type when bound to the array, as numcodecs does)
#: numcodecs Blosc ``shuffle`` ids as v3 names (the blosc codec owns the table); -1: its default.
_BLOSC_SHUFFLE = {**{i: name for name, i in SHUFFLES.items()}, -1: None}


def v3_codec_from_numcodecs(config: Mapping[str, Any]) -> dict:
    """The v3 codec JSON of a numcodecs configuration (``{"id": ..., ...}``): the standard codec
    where it writes the same bytes, else ``numcodecs.<id>`` with the configuration unchanged.

    numcodecs blosc, gzip and zstd are byte-for-byte the v3 codecs of those names; crc32c only
    with its checksum at the end (its default), where the v3 crc32c codec appends it; zlib is
    not gzip, and the others have no v3 counterpart. Raises ``CodecError`` naming the setting
    a standard codec cannot take (a blosc shuffle v3 lacks).
    """
    conf = dict(config)
    codec_id = str(conf.pop("id", ""))
    if codec_id == "blosc":
        shuffle = conf.get("shuffle", 1)
        if shuffle not in _BLOSC_SHUFFLE:
            raise CodecError(f"numcodecs blosc: 'shuffle' {shuffle!r} has no v3 blosc equivalent")
        out: dict[str, Any] = {"cname": conf.get("cname", "lz4"), "clevel": conf.get("clevel", 5)}
        if _BLOSC_SHUFFLE[shuffle] is not None:
            out["shuffle"] = _BLOSC_SHUFFLE[shuffle]
        out["blocksize"] = conf.get("blocksize", 0)
        return {"name": "blosc", "configuration": out}
    if codec_id == "gzip" and set(conf) <= {"level"}:
        return {"name": "gzip", "configuration": {"level": conf.get("level", 1)}}
    if codec_id == "zstd" and set(conf) <= {"level", "checksum"}:
        return {
            "name": "zstd",
            "configuration": {"level": conf.get("level", 0), "checksum": bool(conf.get("checksum", False))},
        }
    if codec_id == "crc32c" and conf.get("location", "end") == "end":
        return {"name": "crc32c"}
    return {"name": f"numcodecs.{codec_id}", "configuration": conf}


def coerce_codec(obj: Any) -> Codec | dict | str:
    """A codec in a form ``codec_from_json`` takes; numcodecs instances are translated
    (``v3_codec_from_numcodecs``)."""
    if isinstance(obj, Codec | dict | str):
        return obj
    if not isinstance(obj, NumcodecsCodec):
        raise CodecError(f"not a codec: {obj!r}")
    return v3_codec_from_numcodecs(obj.get_config())


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
