"""Translate a URL and fsspec-style ``storage_options`` into obstore's store configuration.

Users already pass s3fs / gcsfs / adlfs / fsspec-HTTP options (``key``, ``secret``, ``anon``,
``endpoint_url``, ``client_kwargs={"endpoint_url": ..., "region_name": ...}``,
``config_kwargs={"connect_timeout": ..., "retries": ...}``, ``token="anon"``, ...). Those with a
direct obstore equivalent are mapped; obstore's own configuration keys (``endpoint``,
``region``, ``skip_signature``, ``client_options``, ``retry_config``, ...) are accepted as they
are; anything else is refused with a StoreArgumentError naming the key. Pure: no I/O.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .base import StoreArgumentError
from .fsspec_options import DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, DEFAULT_RETRIES

#: URL schemes an ObstoreStore serves, by the kind of backend behind them.
SCHEME_KINDS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "azure": "azure",
    "adl": "azure",
    "http": "http",
    "https": "http",
}
#: Seconds a batch may spend retrying one request before giving up (obstore's retry_timeout).
RETRY_TIMEOUT = 60.0
#: Seconds one whole request may take (obstore's ``timeout``, 30 s by default, would cut off the
#: upload of a large shard on a slow link; stalls are caught sooner by the read timeout).
REQUEST_TIMEOUT = 600.0
#: Idle connections an obstore client keeps per host (obstore's ``pool_max_idle_per_host``;
#: reqwest keeps every one for 90 s). A kept connection spares the next call a connect and the
#: growth of a fresh read buffer (A, 512 objects: 0.13 s of CPU when none were kept), but holds
#: its buffer (up to ~400 KiB) while idle: 256 kept held ~100 MiB after a whole-array read.
POOL_MAX_IDLE_PER_HOST = 64

_CLIENT_KEY = "client_options"
_RETRY_KEY = "retry_config"


@dataclass(frozen=True)
class ObstoreTarget:
    """What an obstore store is built from: the backend kind, the URL it is built on, and the
    three configuration dicts obstore's constructors take."""

    kind: str
    url: str
    config: dict[str, Any] = field(default_factory=dict)
    client_options: dict[str, Any] = field(default_factory=dict)
    retry_config: dict[str, Any] = field(default_factory=dict)


def url_kind(url: str) -> str | None:
    """The backend kind (``"s3"``, ``"gcs"``, ``"azure"``, ``"http"``) of a plain URL; None for
    other schemes and chained fsspec URLs (``"simplecache::s3://..."``)."""
    if "::" in url or "://" not in url:
        return None
    return SCHEME_KINDS.get(url.split("://", 1)[0].lower())


def _seconds(value: Any, name: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    raise StoreArgumentError(f"storage option {name} must be a positive number of seconds, got {value!r}")


class _Builder:
    """Collects obstore settings, refusing one setting given two different ways."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.client: dict[str, Any] = {}
        self.retry: dict[str, Any] = {}

    @staticmethod
    def _put(target: dict[str, Any], key: str, value: Any, source: str) -> None:
        if key in target and target[key] != value:
            raise StoreArgumentError(
                f"storage option {source} sets obstore's {key!r} to {value!r}, but it is already {target[key]!r}"
            )
        target[key] = value

    def config_(self, key: str, value: Any, source: str) -> None:
        self._put(self.config, key, value, source)

    def client_(self, key: str, value: Any, source: str) -> None:
        self._put(self.client, key, value, source)

    def retry_(self, key: str, value: Any, source: str) -> None:
        self._put(self.retry, key, value, source)


def _section(options: dict[str, Any], name: str) -> dict[str, Any]:
    value = options.pop(name, None) or {}
    if not isinstance(value, dict):
        raise StoreArgumentError(f"storage option {name} must be a dict, got {type(value).__name__}")
    return dict(value)


def _unknown(kind: str, where: str, keys: Any) -> None:
    keys = sorted(keys)
    if keys:
        raise StoreArgumentError(
            f"storage option(s) {', '.join(map(repr, keys))}{where} have no obstore equivalent for "
            f"{kind} URLs; pass obstore's own configuration keys, or use the fsspec backend "
            '(storage_options={"zarr3": {"backend": "fsspec"}})'
        )


def _s3(options: dict[str, Any], b: _Builder) -> None:
    """s3fs' options: credentials, anon, endpoint, region, timeouts, botocore retries."""
    renames = {"key": "access_key_id", "secret": "secret_access_key", "token": "session_token"}
    for ours, theirs in renames.items():
        if ours in options:
            b.config_(theirs, options.pop(ours), ours)
    if "anon" in options:
        b.config_("skip_signature", bool(options.pop("anon")), "anon")
    if "endpoint_url" in options:
        b.config_("endpoint", options.pop("endpoint_url"), "endpoint_url")
    if "requester_pays" in options:
        b.config_("request_payer", bool(options.pop("requester_pays")), "requester_pays")
    client = _section(options, "client_kwargs")
    if "endpoint_url" in client:
        b.config_("endpoint", client.pop("endpoint_url"), "client_kwargs.endpoint_url")
    if "region_name" in client:
        b.config_("region", client.pop("region_name"), "client_kwargs.region_name")
    if "verify" in client:
        b.client_("allow_invalid_certificates", client.pop("verify") is False, "client_kwargs.verify")
    _unknown("s3", " (in client_kwargs)", client)
    config = _section(options, "config_kwargs")
    for name in ("connect_timeout", "read_timeout"):
        if name in config:
            b.client_(name, _seconds(config.pop(name), f"config_kwargs.{name}"), f"config_kwargs.{name}")
    if "region_name" in config:
        b.config_("region", config.pop("region_name"), "config_kwargs.region_name")
    if "retries" in config:
        retries = dict(config.pop("retries") or {})
        retries.pop("mode", None)  # botocore's retry strategy: obstore has one (exponential backoff)
        if "total_max_attempts" in retries:
            b.retry_(
                "max_retries", max(int(retries.pop("total_max_attempts")) - 1, 0), "config_kwargs.retries"
            )
        if "max_attempts" in retries:
            b.retry_("max_retries", int(retries.pop("max_attempts")), "config_kwargs.retries")
        _unknown("s3", " (in config_kwargs.retries)", retries)
    addressing = dict(config.pop("s3", None) or {})
    if "addressing_style" in addressing:
        style = addressing.pop("addressing_style")
        b.config_("virtual_hosted_style_request", style == "virtual", "config_kwargs.s3.addressing_style")
    _unknown("s3", " (in config_kwargs.s3)", addressing)
    _unknown("s3", " (in config_kwargs)", config)


def _gcs(options: dict[str, Any], b: _Builder) -> None:
    """gcsfs' options: ``token`` ("anon", a service-account file, or its JSON as a dict)."""
    if "token" in options:
        token = options.pop("token")
        if token == "anon" or token is False:
            b.config_("skip_signature", True, "token")
        elif isinstance(token, dict):
            import json

            b.config_("service_account_key", json.dumps(token), "token")
        elif isinstance(token, str) and token not in ("google_default", "cloud", "cache", "browser"):
            b.config_("service_account", token, "token")
        elif token not in ("google_default", None):
            raise StoreArgumentError(f"storage option token={token!r} has no obstore equivalent for gcs URLs")
    if "anon" in options:
        b.config_("skip_signature", bool(options.pop("anon")), "anon")
    if "endpoint_url" in options:
        b.config_("base_url", options.pop("endpoint_url"), "endpoint_url")


def _azure(options: dict[str, Any], b: _Builder) -> None:
    """adlfs' options: account name and key, SAS token, service principal, anon."""
    for ours, theirs in {"sas_token": "sas_key"}.items():
        if ours in options:
            b.config_(theirs, options.pop(ours), ours)
    if "anon" in options:
        b.config_("skip_signature", bool(options.pop("anon")), "anon")


def _http(options: dict[str, Any], b: _Builder) -> None:
    """fsspec HTTP's options: request headers (top level or in client_kwargs)."""
    client = _section(options, "client_kwargs")
    for source, headers in (
        ("headers", options.pop("headers", None)),
        ("client_kwargs.headers", client.pop("headers", None)),
    ):
        if headers:
            b.client_("default_headers", dict(headers), source)
    _unknown("http", " (in client_kwargs)", client)
    _unknown("http", "", options)  # HTTPStore takes no configuration keys


_TRANSLATORS = {"s3": _s3, "gcs": _gcs, "azure": _azure, "http": _http}


def obstore_target(url: str, options: dict[str, Any], retries: int | None) -> ObstoreTarget:
    """The obstore configuration for ``url`` and fsspec-style ``options`` (without the store's
    own ``"zarr3"`` section); ``retries`` is the store setting (None: the user's botocore
    retries if given, else ``DEFAULT_RETRIES``). Bounded defaults: connect 5 s, read 12 s, a
    whole request 600 s (``REQUEST_TIMEOUT``)."""
    kind = url_kind(url)
    if kind is None:
        raise StoreArgumentError(
            f"obstore cannot open {url!r}: expected one of {', '.join(sorted(SCHEME_KINDS))}://"
        )
    if not urllib.parse.urlsplit(url).netloc:
        raise StoreArgumentError(f"URL {url!r} names no bucket, container or host")
    options = dict(options)
    b = _Builder()
    for key, value in _section(options, _CLIENT_KEY).items():
        b.client_(key, value, f"{_CLIENT_KEY}.{key}")
    for key, value in _section(options, _RETRY_KEY).items():
        b.retry_(key, value, f"{_RETRY_KEY}.{key}")
    _TRANSLATORS[kind](options, b)
    for key, value in options.items():  # obstore's own keys; obstore refuses unknown ones
        b.config_(key, value, key)
    endpoint = str(b.config.get("endpoint") or b.config.get("base_url") or "")
    if endpoint.startswith("http://") or url.lower().startswith("http://"):
        b.client.setdefault("allow_http", True)
    b.client.setdefault("connect_timeout", timedelta(seconds=DEFAULT_CONNECT_TIMEOUT))
    b.client.setdefault("read_timeout", timedelta(seconds=DEFAULT_READ_TIMEOUT))
    b.client.setdefault("timeout", timedelta(seconds=REQUEST_TIMEOUT))
    b.client.setdefault("pool_max_idle_per_host", str(POOL_MAX_IDLE_PER_HOST))
    if retries is not None:
        b.retry["max_retries"] = retries
    b.retry.setdefault("max_retries", DEFAULT_RETRIES)
    b.retry.setdefault("retry_timeout", timedelta(seconds=RETRY_TIMEOUT))
    return ObstoreTarget(kind, url, b.config, b.client, b.retry)
