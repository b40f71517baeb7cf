"""Compute dask collections with an optional progress display on whichever scheduler is active.

With a ``distributed.Client`` as the default scheduler the display is distributed's
``progress`` bar; otherwise dask's local ``ProgressBar``.
"""

from __future__ import annotations

from typing import Any

import dask
from dask.base import get_scheduler
from dask.diagnostics import ProgressBar


def active_client(scheduler: Any = None) -> Any | None:
    """The ``distributed.Client`` dask would compute on, or ``None`` for a local scheduler."""
    try:
        get = get_scheduler(scheduler=scheduler)
    except Exception:  # an unknown scheduler name: let dask.compute report it
        return None
    client = getattr(get, "__self__", None)
    try:
        from distributed import Client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    return client if isinstance(client, Client) else None


def compute_with_progress(*collections: Any, progress: bool = False, **kwargs: Any) -> tuple:
    """``dask.compute(*collections, **kwargs)``, showing progress when ``progress`` is true."""
    if not progress:
        return dask.compute(*collections, **kwargs)
    client = active_client(kwargs.get("scheduler"))
    if client is None:
        with ProgressBar():
            return dask.compute(*collections, **kwargs)
    from distributed import progress as distributed_progress

    futures = client.compute(list(collections), **{k: v for k, v in kwargs.items() if k != "scheduler"})
    # in Jupyter distributed draws a widget when ipywidgets is there, else the text bar
    distributed_progress(futures, notebook=None if _has_widgets() else False)
    return tuple(client.gather(futures))


def _has_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True
