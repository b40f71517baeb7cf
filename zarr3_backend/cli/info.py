"""``zarr3 info``: what zarr-python's ``.info`` shows, plus storage figures of arrays."""

from __future__ import annotations

import click

from ..core.array import Array
from ..core.info import storage_info
from ._common import emit_json, json_option, open_at, path_option, typed_errors


@click.command("info")
@click.argument("location")
@path_option
@click.option("--quick", is_flag=True, help="Metadata only: do not read the stored objects to measure them.")
@json_option
@typed_errors
def info(location: str, node_path: str, quick: bool, as_json: bool) -> None:
    """Describe the array or group at LOCATION (a path or URL).

    For an array: type, zarr format, data type, shape, chunk and shard shape, order,
    read-only, store type, filters, serializer, compressors and size, then (unless --quick)
    the stored objects and bytes, compression ratio, and shards and inner chunks present,
    measured by reading every stored object once.
    """
    node = open_at(location, node_path)
    description = node.info
    if isinstance(node, Array) and not quick:
        description = description.with_storage(storage_info(node))
    if as_json:
        emit_json(description.to_json())
    else:
        click.echo(description.to_text())
