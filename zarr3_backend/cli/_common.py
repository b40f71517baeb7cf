"""What every subcommand shares: opening stores and nodes from the command line, reporting
typed errors as one line and an exit code, and ``--json`` output."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from ..core.api import open_node
from ..errors import Zarr3Error
from ..numeric_json import non_finite_spelled
from ..stores.base import Store
from ..stores.resolve import make_store

#: Exit codes: 0 all good; 1 ``check`` found problems (or a copy/migrate step failed);
#: 2 bad usage or input (a typed ``Zarr3Error``: no store, bad metadata, refused migration).
EXIT_PROBLEMS = 1
EXIT_ERROR = 2


def store_for(location: str, mode: str) -> Store:
    """The store at a path or URL given on the command line."""
    return make_store(location, mode=mode)


def open_at(location: str, path: str, mode: str = "r") -> Any:
    """The array or group at ``path`` inside the store at ``location``."""
    return open_node(store_for(location, mode), path, mode=mode)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented, strictly valid JSON on stdout (no bare NaN tokens)."""
    click.echo(json.dumps(non_finite_spelled(obj), indent=2, default=str, allow_nan=False))


def typed_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a ``Zarr3Error`` (or a missing local file) into ``error: <message>`` on stderr and
    exit code 2, instead of a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (Zarr3Error, FileNotFoundError) as e:
            click.echo(f"error: {type(e).__name__}: {e}", err=True)
            raise SystemExit(EXIT_ERROR) from e

    return wrapper


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (for scripts) instead of text."
)
path_option = click.option(
    "--path", "node_path", default="", help="Node path inside the store (default: root)."
)
