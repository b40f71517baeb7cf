"""``zarr3 migrate`` interrupted between its steps: the rerun finishes the job and loses nothing.

The migration writes every ``zarr.json`` before it removes any v2 document, and removes each
node's ``.zarray``/``.zgroup``/``.zattrs`` in one concurrent batch; a crash part-way through
that batch can leave ``.zarray`` (or ``.zgroup``) without its ``.zattrs``. The rerun must then
keep the node's ``zarr.json`` (already complete) rather than translate the v2 remains again and
drop the attributes and dimension names.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numcodecs
import numpy as np
import pytest
from click.testing import CliRunner
from dying_child import KILL_AFTER_STEP

import zarr3_backend as z3
from zarr3_backend.cli import main
from zarr3_backend.cli.migrate import document_bytes, plan_migration
from zarr3_backend.stores import LocalStore

zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

REPO = Path(__file__).resolve().parents[1]
V2_DOCS = {".zarray", ".zgroup", ".zattrs", ".zmetadata"}


def write_v2(root: str, consolidated: bool) -> None:
    """A v2 hierarchy with attributes on every node (zarr-python writes it)."""
    g = zarr.open_group(root, mode="w", zarr_format=2, attributes={"title": "top"})
    a = g.create_array(
        "a", shape=(7, 11), chunks=(3, 4), dtype="<f8", compressors=numcodecs.Zstd(1), fill_value=0
    )
    a[:] = np.arange(77.0).reshape(7, 11)
    a.attrs.update({"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"})
    sub = g.create_group("sub", attributes={"level": 1})
    b = sub.create_array("b", shape=(10,), chunks=(4,), dtype="<i4", fill_value=0)
    b[:] = np.arange(10)
    b.attrs["_ARRAY_DIMENSIONS"] = ["t"]
    if consolidated:
        zarr.consolidate_metadata(root)


def expected_state() -> dict:
    return {
        "": {"title": "top"},
        "a": {"units": "m"},
        "sub": {"level": 1},
        "sub/b": {},
        "dims": {"a": ("y", "x"), "sub/b": ("t",)},
        "values": {"a": np.arange(77.0).reshape(7, 11), "sub/b": np.arange(10)},
    }


def state_of(root: str) -> dict:
    """What this package reads: attributes of every node, dimension names, values."""
    g = z3.open_group(root, mode="r")
    return {
        "": dict(g.attrs),
        "a": dict(g["a"].attrs),
        "sub": dict(g["sub"].attrs),
        "sub/b": dict(g["sub/b"].attrs),
        "dims": {p: tuple(g[p].dimension_names or ()) for p in ("a", "sub/b")},
        "values": {p: g[p][...] for p in ("a", "sub/b")},
    }


def assert_same(got: dict, want: dict) -> None:
    for k, v in want.items():
        if k == "values":
            for p, arr in v.items():
                np.testing.assert_array_equal(got[k][p], arr, err_msg=p)
        else:
            assert got[k] == v, k


def v2_files(root: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs if f in V2_DOCS
    }


@pytest.mark.parametrize("consolidated", [False, True], ids=["plain", "zmetadata"])
@pytest.mark.parametrize("kept", [".zarray", ".zgroup"])
def test_rerun_keeps_attributes_when_a_crash_left_the_node_document_without_its_zattrs(
    tmp_path, consolidated, kept
):
    """Every zarr.json written, then the crash: one node's .zattrs removed but not its
    .zarray/.zgroup. The rerun used to translate the remains again and overwrite the node's
    zarr.json without its attributes (and an array's dimension names)."""
    root = str(tmp_path / "v2.zarr")
    write_v2(root, consolidated)
    store = LocalStore(root)
    plan = plan_migration(store)
    for node in plan.nodes:  # the first run wrote every document ...
        store.set(f"{node.path}/zarr.json" if node.path else "zarr.json", document_bytes(node))
    node = "a" if kept == ".zarray" else "sub"
    store.erase(f"{node}/.zattrs")  # ... and died with this node's .zattrs gone, its .zarray/.zgroup not
    result = CliRunner().invoke(main, ["migrate", root])
    assert result.exit_code == 0, result.output + result.stderr
    assert v2_files(root) == set()
    assert_same(state_of(root), expected_state())
    zg = zarr.open_group(root, mode="r")
    assert dict(zg[node].attrs) == expected_state()[node]


# The child runs the migration and kills itself with SIGKILL right after its K-th file-system
# change (a rename, replace or unlink, the store's atomic steps): every instant between them.
CHILD = KILL_AFTER_STEP + textwrap.dedent(
    """
    root = sys.argv[2]
    from zarr3_backend.cli.migrate import apply_migration, plan_migration
    from zarr3_backend.stores import LocalStore
    store = LocalStore(root)
    apply_migration(store, plan_migration(store))
    print(count[0])
    """
)


TXN_AREA = ".z3-txn"


def chunk_files(root: str) -> dict[str, bytes]:
    """Every file but the documents and the writer's own staging area (``.z3-txn``: a kill
    while ``set_many`` writes the documents aside can leave a half-written temporary file
    there, which the rerun's repair drops)."""
    out = {}
    for d, dirs, fs in os.walk(root):
        dirs[:] = [x for x in dirs if x != TXN_AREA]
        for f in fs:
            if f not in V2_DOCS and f != "zarr.json":
                p = os.path.join(d, f)
                out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


@pytest.mark.slow
def test_migrate_killed_after_every_step_reruns_to_the_same_store(tmp_path):
    """SIGKILL after each file-system change of a consolidated migration: chunk bytes never
    change, the store always opens with every value (v2 or v3, never a mix that loses a node),
    and a rerun gives the complete v3 store with every attribute."""
    probe = str(tmp_path / "probe")
    write_v2(probe, consolidated=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "1000000", probe], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    steps = int(done.stdout)
    assert steps > 5
    want = expected_state()
    assert_same(state_of(probe), want)
    for k in range(1, steps):
        root = str(tmp_path / f"k{k}")
        write_v2(root, consolidated=True)
        chunks = chunk_files(root)
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(k), root], env=env, capture_output=True, text=True
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert chunk_files(root) == chunks
        got = state_of(root)  # v2 or v3 by what is there: the values are whole either way
        for p, arr in want["values"].items():
            np.testing.assert_array_equal(got["values"][p], arr)
        result = CliRunner().invoke(main, ["migrate", root])
        assert result.exit_code == 0, (k, result.output, result.stderr)
        assert v2_files(root) == set(), k
        assert chunk_files(root) == chunks, k
        leftovers = [f for _, _, fs in os.walk(os.path.join(root, TXN_AREA)) for f in fs]
        assert leftovers == [], (k, leftovers)  # the killed run's staging area is gone
        assert_same(state_of(root), want)
        root_doc = json.loads(Path(root, "zarr.json").read_text())
        assert set(root_doc["consolidated_metadata"]["metadata"]) == {"a", "sub", "sub/b"}, k
