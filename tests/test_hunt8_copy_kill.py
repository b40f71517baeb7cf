"""``zarr3 copy`` interrupted: the destination never passes for a finished copy.

A copy writes every destination unit first and each node's documents after all the data (the
root's last), so an interrupted copy leaves no array that opens with holes where the source has
values: a reader finds no destination (a typed error) or only whole arrays; the rerun resumes
(equal units are kept) and finishes. The source is never changed.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from dying_child import KILL_AFTER_STEP
from store_doubles import ChunkWriteFailingStore

import zarr3_backend as z3
from zarr3_backend.cli.copy import copy_hierarchy
from zarr3_backend.errors import NodeNotFoundError, StoreError, Zarr3Error

REPO = Path(__file__).resolve().parents[1]
ARRAYS = ("t", "sub/b")


def make_source(root: str) -> None:
    g = z3.open_group(root, mode="w", attributes={"title": "source"})
    t = g.create_array(
        "t",
        shape=(40, 30),
        dtype="f4",
        chunks=(5, 5),
        shards=(10, 15),
        fill_value=np.nan,
        dimension_names=("y", "x"),
        attributes={"units": "K"},
    )
    t[:] = np.arange(1200, dtype="f4").reshape(40, 30)
    sub = g.create_group("sub", attributes={"level": 1})
    sub.create_array("b", shape=(9,), dtype="i4", chunks=(3,), attributes={"u": 2})[:] = np.arange(9) + 1


def tree_hash(root: str) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
    return out


def assert_whole_where_present(src: str, dst) -> str:
    """The destination is refused (no node), or each array it shows equals the source's, with
    its attributes. Returns "refused", "partial" (some arrays not there yet) or "complete"."""
    try:
        d = z3.open_group(dst, mode="r")
    except NodeNotFoundError:
        return "refused"
    s = z3.open_group(src, mode="r")
    seen = 0
    for path in ARRAYS:
        try:
            a = d[path]
        except (KeyError, Zarr3Error):
            continue
        seen += 1
        np.testing.assert_array_equal(a[...], s[path][...], err_msg=path)
        assert dict(a.attrs) == dict(s[path].attrs), path
        assert a.metadata.to_json() == s[path].metadata.to_json(), path
    complete = seen == len(ARRAYS) and dict(d.attrs) == dict(s.attrs)
    return "complete" if complete else "partial"


def assert_complete(src: str, dst) -> None:
    assert assert_whole_where_present(src, dst) == "complete"
    d, s = z3.open_group(dst, mode="r"), z3.open_group(src, mode="r")
    assert dict(d["sub"].attrs) == dict(s["sub"].attrs)


def test_a_copy_that_fails_part_way_leaves_no_array_with_holes(tmp_path):
    """The third unit write fails: the copy raises, and the destination shows no array (the
    documents come after the data); the rerun finishes it and keeps the units already there."""
    src = str(tmp_path / "src.zarr")
    make_source(src)
    dst = ChunkWriteFailingStore(3, lambda key: StoreError(f"{key!r}: injected failure"))
    with pytest.raises(StoreError):
        copy_hierarchy(src, dst, scheduler="synchronous")
    assert assert_whole_where_present(src, dst) == "refused"
    with pytest.raises(NodeNotFoundError):
        z3.open_array(dst, "t")
    dst.fail_at = -1
    results = {r.path: r for r in copy_hierarchy(src, dst, scheduler="synchronous")}
    assert results["t"].skipped + results["sub/b"].skipped == 2  # the two units stored before the failure
    assert_complete(src, dst)


# The child copies, and kills itself with SIGKILL right after its K-th file-system change (a
# rename, replace or unlink: the store's atomic steps), or runs to the end printing the count.
CHILD = KILL_AFTER_STEP + textwrap.dedent(
    """
    src, dst = sys.argv[2], sys.argv[3]
    from zarr3_backend.cli.copy import copy_hierarchy
    copy_hierarchy(src, dst, scheduler="threads")
    print(count[0])
    """
)


@pytest.mark.slow
def test_copy_killed_after_every_step_is_never_a_silently_partial_store(tmp_path):
    """SIGKILL after each file-system change of a copy (threads): the source is
    untouched, the destination is refused or shows only whole arrays, and a rerun completes it."""
    src = str(tmp_path / "src.zarr")
    make_source(src)
    before = tree_hash(src)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = str(tmp_path / "probe")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "1000000", src, probe], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    steps = int(done.stdout)
    assert steps > 5
    assert_complete(src, probe)
    outcomes = []
    for k in range(1, steps):
        dst = str(tmp_path / f"k{k}")
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(k), src, dst], env=env, capture_output=True, text=True
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert tree_hash(src) == before, k
        outcomes.append(assert_whole_where_present(src, dst))
        copy_hierarchy(src, dst, scheduler="threads")
        assert_complete(src, dst)
        assert tree_hash(src) == before, k
    assert "refused" in outcomes
