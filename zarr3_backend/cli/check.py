"""``zarr3 check``: decode every stored chunk and shard, verify checksums and shard indexes, and
find orphan objects, leftover temporary files and in-flight write records.

The scan is an I/O edge over pure checks: each array's prefix is listed once, its stored units
are read in batches (``core.info.read_batches``) and decoded concurrently, and every other key
under the hierarchy is sorted into metadata, orphan, or write record.
"""

from __future__ import annotations

import bisect
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click
import numpy as np

from .._threads import thread_map
from ..codecs.sharding import ShardingCodec
from ..core.api import open_group, open_node, repair
from ..core.array import Array
from ..core.commit import TXN_DIR
from ..core.group import open_existing_group, read_node_metadata
from ..core.info import classify_keys, read_batches, shard_index, unit_chain
from ..core.metadata import GroupMetadata
from ..core.metadata_v2 import CONSOLIDATED_KEY, V2_MARKER, v2_fill_value_is_null
from ..core.node_claims import CLAIMS_DIR
from ..core.paths import join_path, join_prefix, metadata_key
from ..core.txn_records import MANIFEST, is_txn_id, parse_manifest, txn_prefix
from ..errors import Zarr3Error
from ..stores.base import Store
from ..stores.local import TEMP_PREFIX, LocalStore, dead_writers_temp, temp_file_writer
from ._common import EXIT_PROBLEMS, emit_json, json_option, path_option, store_for, typed_errors

#: Metadata documents a node may hold (v3 and v2).
NODE_DOCUMENTS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})


@dataclass(frozen=True)
class TempFile:
    """A leftover temporary file: its key (relative to the store root) and its writer's state."""

    key: str

    @property
    def owner(self) -> str | None:
        """The writer's owner token, ``None`` for names that carry none."""
        writer = temp_file_writer(self.key.rpartition("/")[2])
        return None if writer is None else writer[1]

    @property
    def writer_dead(self) -> bool:
        """True only when the name carries a writer of this host that certainly no longer runs
        (the LocalStore's own rule)."""
        return dead_writers_temp(self.key.rpartition("/")[2])


@dataclass
class Report:
    """What a check found; ``ok`` when nothing at all."""

    arrays: int = 0
    units: int = 0
    bad: dict[str, str] = field(default_factory=dict)
    orphans: list[str] = field(default_factory=list)
    temporary: list[TempFile] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the store is clean."""
        return not (self.bad or self.orphans or self.temporary or self.in_flight)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (what ``--json`` prints)."""
        return {
            "ok": self.ok,
            "arrays_checked": self.arrays,
            "units_checked": self.units,
            "bad": [{"key": k, "error": v} for k, v in sorted(self.bad.items())],
            "orphans": sorted(self.orphans),
            "temporary": [{"key": t.key, "writer_dead": t.writer_dead} for t in self.temporary],
            "in_flight": self.in_flight,
            "repaired": self.repaired,
        }


def find_temp_files(store: Store, prefix: str, listed: list[str]) -> list[TempFile]:
    """Leftover temporary files under ``prefix``: found on disk for a LocalStore (which hides
    them from listings), else among the ``listed`` keys."""
    if isinstance(store, LocalStore):
        base = os.path.join(store.root, *[p for p in prefix.split("/") if p])
        found = []
        for directory, _, files in os.walk(base):
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    key = os.path.relpath(os.path.join(directory, name), store.root).replace(os.sep, "/")
                    found.append(TempFile(key))
        return sorted(found, key=lambda t: t.key)
    return [TempFile(k) for k in listed if any(part.startswith(TEMP_PREFIX) for part in k.split("/"))]


def check_unit(array: Array, coords: tuple[int, ...], data: Any) -> str | None:
    """Why the stored unit at grid ``coords`` is bad (its shard index, a checksum, a decode
    error), or ``None``."""
    try:
        chain = unit_chain(array, coords)  # once per unit: rectilinear units bind their own
        if isinstance(chain.array_bytes, ShardingCodec):
            shard_index(array, data, chain=chain)
        chain.decode(data)
    except Exception as e:  # a codec library's own error is as much a finding as ours
        return f"{type(e).__name__}: {e}"
    return None


def missing_without_fill(array: Array, units: Mapping[str, tuple[int, ...]]) -> list[str]:
    """The keys of the chunks a Zarr v2 array with ``fill_value: null`` does not store: it has
    no fill value (every chunk written is stored), so such a chunk is lost or never written."""
    if not v2_fill_value_is_null(array.metadata):
        return []
    present = set(units.values())
    grid = array.metadata.chunk_grid.grid_shape(array.shape)
    encode = array.metadata.chunk_key_encoding.encode_chunk_key
    return [join_path(array.path, encode(c)) for c in np.ndindex(*grid) if c not in present]


def check_array(
    array: Array, units: Mapping[str, tuple[int, ...]], report: Report, progress: Any
) -> set[str]:
    """Decode every stored unit of ``array`` (unit key -> grid coordinates, as ``classify_keys``
    found them); returns the keys it accounts for."""
    batch: list[tuple[str, Any]] = []

    def flush() -> None:
        problems = thread_map(lambda item: check_unit(array, units[item[0]], item[1]), batch, kind="cpu")
        for (key, _), problem in zip(batch, problems, strict=True):
            if problem is not None:
                report.bad[key] = problem
        progress.update(len(batch))
        batch.clear()

    for key, data in read_batches(array, list(units)):
        if data is not None:
            batch.append((key, data))
        if len(batch) >= 64:
            flush()
    flush()
    for key in missing_without_fill(array, units):
        report.bad[key] = (
            "missing: a Zarr v2 array whose fill_value is null has no fill value, so this "
            "chunk has no defined values (zarr-python reads uninitialised memory)"
        )
    report.arrays += 1
    report.units += len(units)
    return set(units)


def _facts(node: Any) -> str:
    """What a reader learns of a node from its metadata (an array's whole document, a group's
    attributes), comparable across the live documents and a consolidated copy."""
    doc = node.metadata.to_json() if isinstance(node, Array) else node.metadata.attributes
    return json.dumps(doc, sort_keys=True, default=str)


def stale_copy(store: Store, path: str, live: Mapping[str, Any]) -> tuple[str, str] | None:
    """The key of the consolidated copy of the group at ``path`` (its ``zarr.json``, or a v2
    group's ``.zmetadata``) and how that copy differs from its members' live documents
    (``live``: every node below ``path`` by its full path), or ``None`` when it agrees or there
    is none. Readers of a consolidated group (xarray's default) see only the copy."""
    meta = read_node_metadata(store, path)
    if not isinstance(meta, GroupMetadata) or meta.consolidated_metadata is None:
        return None
    key = join_path(path, CONSOLIDATED_KEY) if V2_MARKER in meta.extra_fields else metadata_key(path)
    try:
        group = open_existing_group(store, path, read_only=True, use_consolidated=True)
        copy = {join_path(path, rel): n for rel, n in group.members(max_depth=None).items()}
    except Zarr3Error as e:
        return key, f"{type(e).__name__}: {e}"
    below = {p: n for p, n in live.items() if not path or p.startswith(path + "/")}
    differ = sorted(p for p in copy.keys() & below.keys() if _facts(copy[p]) != _facts(below[p]))
    problems = [f"{p!r} differs from its stored metadata" for p in differ]
    problems += [f"{p!r} is not in it" for p in sorted(below.keys() - copy.keys())]
    problems += [f"{p!r} is in it but not stored" for p in sorted(copy.keys() - below.keys())]
    if not problems:
        return None
    return key, "stale consolidated metadata (consolidate it again): " + "; ".join(problems)


def _under(sorted_keys: list[str], prefix: str) -> list[str]:
    """The keys starting with ``prefix``, from a sorted list (one listing serves every array)."""
    start = bisect.bisect_left(sorted_keys, prefix)
    end = start
    while end < len(sorted_keys) and sorted_keys[end].startswith(prefix):
        end += 1
    return sorted_keys[start:end]


def scan(store: Store, path: str, *, show_progress: bool) -> Report:
    """Check the node at ``path`` and everything below it."""
    report = Report()
    node = open_node(store, path, mode="r")
    if not isinstance(node, Array):
        node = open_group(store, path, mode="r", use_consolidated=False)  # the live documents
    prefix = join_prefix(path)
    all_keys = sorted(store.list_prefix(prefix))
    report.in_flight = sorted(
        {k.split("/")[1] for k in all_keys if k.startswith(TXN_DIR + "/") and not k.startswith(CLAIMS_DIR)}
    )
    check_manifests(store, report)
    arrays = [node] if isinstance(node, Array) else []
    if not isinstance(node, Array):
        listed = True
        try:
            members = node.members(max_depth=None)
        except Zarr3Error as e:
            report.bad[path or "/"] = f"{type(e).__name__}: {e}"
            members, listed = {}, False
        arrays += [m for m in members.values() if isinstance(m, Array)]
        group_paths = {path} | {m.path for m in members.values() if not isinstance(m, Array)}
        live = {m.path: m for m in members.values()}
        for gp in sorted(group_paths) if listed else ():  # each consolidated copy against them
            stale = stale_copy(store, gp, live)
            if stale is not None:
                report.bad[stale[0]] = stale[1]
    else:
        group_paths = set()
    accounted: set[str] = set()
    units = {a.path: classify_keys(a, _under(all_keys, join_prefix(a.path))).units for a in arrays}
    total = sum(len(u) for u in units.values())
    with click.progressbar(length=total, label="checking", file=sys.stderr, hidden=not show_progress) as bar:
        for a in arrays:
            accounted |= check_array(a, units[a.path], report, bar)
    node_paths = group_paths | {a.path for a in arrays}
    for key in all_keys:
        if key in accounted or key.startswith(TXN_DIR + "/"):
            continue
        parent, _, name = key.rpartition("/")
        if name in NODE_DOCUMENTS and parent in node_paths:
            continue
        report.orphans.append(key)
    report.temporary = find_temp_files(store, prefix, all_keys)
    return report


def check_manifests(store: Store, report: Report) -> None:
    """Report as bad each in-flight write whose manifest is unreadable (neither ``repair`` nor
    the next write can finish or drop that write); records under a name that is no write's id
    are only listed (the protocol never runs them)."""
    txns = [t for t in report.in_flight if is_txn_id(t)]
    keys = [txn_prefix(t) + MANIFEST for t in txns]
    for txn, key, raw in zip(txns, keys, store.get_many(keys), strict=True):
        if raw is None:
            continue  # not yet written (a write still staging): nothing to read
        try:
            parse_manifest(raw, txn)
        except Zarr3Error as e:
            report.bad[key] = f"{type(e).__name__}: {e}"


def repair_store(store: Store, report: Report) -> list[str]:
    """Finish or roll back dead writers' writes (``zarr3_backend.repair``) and remove dead
    writers' temporary files. Returns what was repaired."""
    done = [f"write {t}" for t in repair(store)]  # also removes dead writers' temporary files
    return done + [t.key for t in report.temporary if t.writer_dead]


def _print(report: Report) -> None:
    for key, problem in sorted(report.bad.items()):
        click.echo(f"BAD      {key}: {problem}")
    for key in sorted(report.orphans):
        click.echo(f"ORPHAN   {key}")
    for t in report.temporary:
        state = "writer dead" if t.writer_dead else ("writer alive" if t.owner else "writer unknown")
        click.echo(f"TEMP     {t.key} ({state})")
    for txn in report.in_flight:
        click.echo(f"IN-FLIGHT {join_path(TXN_DIR, txn)}")
    for key in report.repaired:
        click.echo(f"REPAIRED {key}")
    verdict = "ok" if report.ok else "problems found"
    click.echo(f"{report.arrays} array(s), {report.units} stored unit(s) checked: {verdict}")


@click.command("check")
@click.argument("location")
@path_option
@click.option("--repair", "do_repair", is_flag=True, help="Repair what is safe to repair (see below).")
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar on stderr (default: when a terminal)."
)
@json_option
@typed_errors
def check(location: str, node_path: str, do_repair: bool, progress: bool | None, as_json: bool) -> None:
    """Verify the hierarchy at LOCATION: decode every chunk and shard (checksums and shard
    indexes included), and report orphan objects (keys belonging to no array's grid and no
    node), leftover temporary files (.z3tmp-*) and in-flight write records (.z3-txn/).

    Exits 1 naming each bad key, 0 when all is well. --repair finishes or rolls back the
    writes of dead writers (zarr3_backend.repair, where available) and removes temporary
    files whose writer is certainly dead; it never touches a live writer's files, chunks or
    orphans (those are listed for you to judge).
    """
    store = store_for(location, "r+" if do_repair else "r")
    show = sys.stderr.isatty() if progress is None else progress
    report = scan(store, node_path, show_progress=show and not as_json)
    if do_repair:
        report.repaired = repair_store(store, report)
        after = scan(store, node_path, show_progress=False)
        after.repaired = report.repaired
        report = after
    if as_json:
        emit_json(report.to_json())
    else:
        _print(report)
    if not report.ok:
        raise SystemExit(EXIT_PROBLEMS)
