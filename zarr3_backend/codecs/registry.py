"""Codec registry: name -> codec class; other packages add codecs through an entry-point group.

A third-party package registers a codec with, in its pyproject.toml::

    [project.entry-points."zarr3_backend.codecs"]
    mycodec = "mypkg.codecs:MyCodec"
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

from ..errors import CodecError, UnknownCodecError
from .base import Codec

ENTRY_POINT_GROUP = "zarr3_backend.codecs"

_registry: dict[str, type[Codec]] = {}

#: Built-in codecs in modules of their own, imported (and so registered) on first use.
_BUILTIN_MODULES = {"cast_value": ".cast_value", "scale_offset": ".scale_offset"}


def register_codec(cls: type[Codec], name: str | None = None) -> type[Codec]:
    """Register ``cls`` under ``name`` (default ``cls.name``); usable as a class decorator."""
    _registry[name or cls.name] = cls
    return cls


def _load_entry_point(ep: Any) -> type[Codec]:
    """Import one plugin's codec class; ``CodecError`` naming the plugin if that fails."""
    try:
        cls = ep.load()
    except Exception as e:
        raise CodecError(f"codec plugin {ep.name!r} ({ep.value}) failed to load: {e}") from e
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise CodecError(f"codec plugin {ep.name!r} ({ep.value}) is not a Codec subclass: {cls!r}")
    return cls


def get_codec_class(name: str) -> type[Codec]:
    """The class registered for ``name``; ``UnknownCodecError`` naming it otherwise.

    Plugins are imported lazily and only the one named, so a broken plugin cannot break
    opening data that does not use it.
    """
    cls = _registry.get(name)
    if cls is None and name in _BUILTIN_MODULES:
        import_module(_BUILTIN_MODULES[name], __package__)
        cls = _registry.get(name)
    if cls is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            cls = _registry[name] = _load_entry_point(ep)
            break
    if cls is None:
        raise UnknownCodecError(f"unknown codec {name!r} (known: {', '.join(sorted(_registry))})")
    return cls


def registered_codecs() -> dict[str, type[Codec]]:
    """A copy of the registry, entry points included (a plugin that fails to load is left out)."""
    for module in _BUILTIN_MODULES.values():
        import_module(module, __package__)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _registry:
            try:
                _registry[ep.name] = _load_entry_point(ep)
            except CodecError as e:
                warnings.warn(str(e), RuntimeWarning, stacklevel=2)
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
