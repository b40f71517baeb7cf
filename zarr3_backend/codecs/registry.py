"""Codec registry: name -> codec class; other packages add codecs through an entry-point group.

A third-party package registers a codec with, in its pyproject.toml::

    [project.entry-points."zarr3_backend.codecs"]
    mycodec = "mypkg.codecs:MyCodec"
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from ..errors import CodecError, UnknownCodecError
from .base import Codec

ENTRY_POINT_GROUP = "zarr3_backend.codecs"

_registry: dict[str, type[Codec]] = {}
_entry_points_loaded = False


def register_codec(cls: type[Codec], name: str | None = None) -> type[Codec]:
    """Register ``cls`` under ``name`` (default ``cls.name``); usable as a class decorator."""
    _registry[name or cls.name] = cls
    return cls


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _registry:
            try:
                _registry[ep.name] = ep.load()
            except Exception as e:  # a broken plugin must not break opening unrelated data
                raise CodecError(f"codec plugin {ep.name!r} ({ep.value}) failed to load: {e}") from e


def get_codec_class(name: str) -> type[Codec]:
    """The class registered for ``name``; ``UnknownCodecError`` naming it otherwise."""
    cls = _registry.get(name)
    if cls is None:
        _load_entry_points()
        cls = _registry.get(name)
    if cls is None:
        raise UnknownCodecError(f"unknown codec {name!r} (known: {', '.join(sorted(_registry))})")
    return cls


def registered_codecs() -> dict[str, type[Codec]]:
    """A copy of the registry, entry points included."""
    _load_entry_points()
    return dict(_registry)


def codec_from_json(obj: str | Mapping[str, Any] | Codec) -> Codec:
    """A codec from its metadata form: ``"name"``, ``{"name", "configuration"}`` or a Codec."""
    if isinstance(obj, Codec):
        return obj
    if isinstance(obj, str):
        return get_codec_class(obj).from_config(None)
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str):
        raise CodecError(f"codec must be a name or an object with a 'name' string, got {obj!r}")
    extra = set(obj) - {"name", "configuration", "must_understand"}
    if extra:
        raise CodecError(f"codec {obj['name']!r}: unknown keys {sorted(extra)}")
    config = obj.get("configuration")
    if config is not None and not isinstance(config, Mapping):
        raise CodecError(f"codec {obj['name']!r}: 'configuration' must be an object, got {config!r}")
    return get_codec_class(obj["name"]).from_config(config)
