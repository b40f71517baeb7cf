"""``zarr3 tree``: the hierarchy with each array's shape, dtype, chunks, shards, codecs and
dimension names (``Group.tree()`` shows names, shapes and dtypes only)."""

from __future__ import annotations

from typing import Any

import click

from ..core.array import Array
from ..core.info import chunk_layout
from ..core.paths import join_path, node_name
from ._common import emit_json, json_option, open_at, path_option, typed_errors


def codec_summary(codecs: list[dict]) -> str:
    """A codec chain (``zarr.json`` form) in one short line: names, with the inner chain of a
    sharding codec in brackets."""
    parts = []
    for c in codecs:
        if c["name"] == "sharding_indexed":
            parts.append(f"sharding[{codec_summary(c['configuration']['codecs'])}]")
        else:
            parts.append(c["name"])
    return ", ".join(parts)


def array_row(array: Array) -> dict[str, Any]:
    """The facts ``tree`` shows for one array, JSON-ready."""
    chunks, shards = chunk_layout(array)  # a rectilinear grid's edges where units differ
    return {
        "type": "array",
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "chunks": list(chunks),
        "shards": None if shards is None else list(shards),
        "codecs": array.codecs,
        "dimension_names": None if array.dimension_names is None else list(array.dimension_names),
        "zarr_format": array.zarr_format,
    }


def tree_rows(node: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(relative path, facts)`` of the node and every descendant, in sorted order."""
    if isinstance(node, Array):
        return [("", array_row(node))]
    rows: list[tuple[str, dict[str, Any]]] = [("", {"type": "group", "zarr_format": node.zarr_format})]
    for rel, child in node.members(max_depth=None).items():
        facts = (
            array_row(child)
            if isinstance(child, Array)
            else {"type": "group", "zarr_format": child.zarr_format}
        )
        rows.append((rel, facts))
    return rows


def render(root_name: str, rows: list[tuple[str, dict[str, Any]]]) -> str:
    """Indented text: groups end in ``/``; arrays show shape, dtype, chunks, shards, codecs, dims."""
    lines = []
    for rel, facts in rows:
        depth = rel.count("/") + 1 if rel else 0
        name = node_name(rel) if rel else root_name
        pad = "  " * depth
        if facts["type"] == "group":
            lines.append(f"{pad}{name}/" if rel else name)
            continue
        text = f"{pad}{name} {tuple(facts['shape'])} {facts['dtype']} chunks={tuple(facts['chunks'])}"
        if facts["shards"] is not None:
            text += f" shards={tuple(facts['shards'])}"
        text += f" codecs=[{codec_summary(facts['codecs'])}]"
        if facts["dimension_names"] is not None:
            text += f" dims={tuple(facts['dimension_names'])}"
        if facts["zarr_format"] == 2:
            text += " (v2)"
        lines.append(text)
    return "\n".join(lines)


@click.command("tree")
@click.argument("location")
@path_option
@json_option
@typed_errors
def tree(location: str, node_path: str, as_json: bool) -> None:
    """Show the hierarchy at LOCATION: every group and array, with shapes, dtypes, chunks,
    shards, codecs and dimension names."""
    node = open_at(location, node_path)
    rows = tree_rows(node)
    if as_json:
        emit_json({join_path(node.path, rel) or "/": facts for rel, facts in rows})
        return
    click.echo(render(node.path or "/", rows))
