"""The spec's extension-definition form shared by every extension point in ``zarr.json``.

An extension is a plain name (``"bytes"``) or an object ``{"name", "configuration"?,
"must_understand"?}``; this module turns either into ``(name, configuration, must_understand)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import MetadataError

_OBJECT_KEYS = frozenset({"name", "configuration", "must_understand"})


@dataclass(frozen=True)
class Extension:
    """One parsed extension: its name, configuration (``None`` when absent) and must_understand."""

    name: str
    configuration: Mapping[str, Any] | None
    must_understand: bool = True


def parse_extension(obj: Any, field: str, error: type[MetadataError] = MetadataError) -> Extension:
    """Parse the short-hand or object form of extension ``field``; ``error`` names the field."""
    if isinstance(obj, str):
        if not obj:
            raise error(f"{field}: extension name must be a non-empty string")
        return Extension(obj, None)
    if not isinstance(obj, Mapping):
        raise error(f"{field}: expected a name string or a {{name, configuration}} object, got {obj!r}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise error(f"{field}: extension object needs a non-empty 'name' string, got {obj!r}")
    extra = sorted(set(obj) - _OBJECT_KEYS)
    if extra:
        raise error(f"{field} {name!r}: unknown keys {extra} (allowed: name, configuration, must_understand)")
    config = obj.get("configuration")
    if config is not None and not isinstance(config, Mapping):
        raise error(f"{field} {name!r}: 'configuration' must be an object, got {config!r}")
    must = obj.get("must_understand", True)
    if not isinstance(must, bool):
        raise error(f"{field} {name!r}: 'must_understand' must be true or false, got {must!r}")
    return Extension(name, config, must)


def check_config_keys(
    config: Mapping[str, Any] | None,
    allowed: frozenset[str] | set[str],
    field: str,
    error: type[MetadataError] = MetadataError,
) -> dict[str, Any]:
    """``config`` as a dict, refusing keys outside ``allowed`` with an error naming them."""
    config = dict(config or {})
    extra = sorted(set(config) - set(allowed))
    if extra:
        raise error(f"{field}: unknown configuration keys {extra} (allowed: {sorted(allowed)})")
    return config
