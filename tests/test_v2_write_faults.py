"""Writers of Zarr v2 appends killed with SIGKILL inside the commit and at random instants
(``test_fault_injection``'s child and helpers). v2 documents carry no marker, so a reader is
never refused: it sees the old array (the new chunks lie past the old ``.zarray`` shape) or
the new one; after ``repair()`` both we and zarr-python read exactly the old or the new state,
with no record left and ``.zmetadata`` equal to a fresh consolidation."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr
from test_fault_injection import (
    CHUNKS,
    KILL_HOOK,
    REPO,
    SHAPE,
    XR_CHILD,
    classify,
    dataset,
    expected_states,
    leftovers,
    old_values,
    run_child,
    run_xr_child,
    state_seen,
    xr_classify,
    xr_encoding,
    xr_states,
    zarr_python_sees,
)

import zarr3_backend as z3
from zarr3_backend.core.consolidate import consolidated_v2
from zarr3_backend.stores import LocalStore

pytestmark = pytest.mark.interop


def make_old_v2(root: Path) -> None:
    a = z3.create_array(
        str(root), path="x", shape=SHAPE, chunks=CHUNKS, dtype="f8", fill_value=0.0, zarr_format=2
    )
    a[...] = old_values()
    z3.consolidate_metadata(str(root))


def check_v2_after_kill(root: Path, must_finish: bool) -> str:
    states = expected_states("append")
    seen = state_seen(root)
    assert not isinstance(seen, str), "a v2 reader is never refused"
    before = ("old", "new")[classify(seen, states)]
    assert zarr_python_sees(root, states) == str(("old", "new").index(before))
    z3.repair(str(root))
    after = ("old", "new")[classify(state_seen(root), states)]
    if before == "new" or must_finish:
        assert after == "new", before
    assert zarr_python_sees(root, states) == str(("old", "new").index(after))
    assert not leftovers(root), leftovers(root)
    assert json.loads((root / ".zmetadata").read_bytes()) == json.loads(
        consolidated_v2(LocalStore(str(root)))
    )
    assert not list(root.rglob("zarr.json"))
    return after


@pytest.mark.parametrize(
    "kill_at,must_finish",
    [
        ("set:manifest.json:1", True),  # manifest written: repair rolls it forward
        ("_merge_dir::1", True),  # part-way through putting the chunks in place
        ("move_prefix::1", True),  # every chunk in place, no document written yet
        ("set_many:.zarray:1", True),  # the new shape written (one batch), .zmetadata not yet
        ("erase_prefix:.z3-txn:1", True),  # done, records being removed
    ],
)
def test_v2_append_killed_inside_its_commit(tmp_path, kill_at, must_finish):
    root = tmp_path / "s.zarr"
    make_old_v2(root)
    assert run_child(root, "append", "raw", env={"KILL_AT": kill_at}) is None
    assert check_v2_after_kill(root, must_finish) == "new"


@pytest.mark.slow
def test_v2_append_killed_at_random_instants(tmp_path):
    rng = random.Random("v2-append")
    probe = tmp_path / "probe"
    make_old_v2(probe)
    took = run_child(probe, "append", "raw")
    assert took is not None
    outcomes = []
    for i in range(5):
        root = tmp_path / f"k{i}"
        make_old_v2(root)
        if run_child(root, "append", "raw", kill_after=rng.uniform(0, took * 1.2)) is None:
            outcomes.append(check_v2_after_kill(root, must_finish=False))
        else:
            assert classify(state_seen(root), expected_states("append")) == 1
            outcomes.append("finished")
    assert len(outcomes) == 5


# ---- to_zarr appends to a v2 store ---------------------------------------------------------------
def _xr_seen(root: Path, engine: str):
    """The dataset an engine reads through ``.zmetadata``, or "inconsistent" when it cannot be
    read as one (v2 documents are unmarked: a kill between two .zarray writes leaves arrays
    that disagree on the append dimension until the commit is finished)."""
    try:
        with xr.open_dataset(str(root), engine=engine, consolidated=True) as ds:
            return ds.load()
    except Exception:
        return "inconsistent"


def _make_old_v2_dataset(root: Path) -> None:
    old = dataset()
    old.to_zarr(str(root), mode="w", zarr_format=2, encoding=xr_encoding("blosc", old))


@pytest.mark.slow
def test_v2_to_zarr_append_killed_inside_and_at_random_instants(tmp_path):
    """xarray's engine made the v2 store; our append is killed inside its commit and at random
    instants: after repair both engines read the same whole dataset (the new one when the kill
    came after the manifest), .zmetadata fresh, no records left."""
    states = xr_states("append")
    child = XR_CHILD.replace('print("ready", flush=True)', 'print("ready", flush=True)\n' + KILL_HOOK)
    roots = []
    inside = tmp_path / "inside"
    _make_old_v2_dataset(inside)
    proc = subprocess.run(
        [sys.executable, "-c", child, str(inside), "append", "blosc", str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    for engine in ("zarr3", "zarr"):  # .zmetadata is written last: both still read the old dataset
        assert xr_classify(_xr_seen(inside, engine), states) == 0
    roots.append((inside, True))
    probe = tmp_path / "probe"
    _make_old_v2_dataset(probe)
    took = run_xr_child(probe, "append", "blosc", None)
    assert took is not None
    rng = random.Random("v2-xr-append")
    for i in range(3):
        root = tmp_path / f"k{i}"
        _make_old_v2_dataset(root)
        if run_xr_child(root, "append", "blosc", rng.uniform(0, took * 1.2)) is None:
            roots.append((root, False))
    for root, must_finish in roots:
        z3.repair(str(root))
        seen = [xr_classify(_xr_seen(root, engine), states) for engine in ("zarr3", "zarr")]
        assert seen[0] == seen[1] and (seen[0] == 1 or not must_finish), (root, seen)
        assert not leftovers(root) and not list(root.rglob("zarr.json"))
        fresh = consolidated_v2(LocalStore(str(root)))
        assert json.loads((root / ".zmetadata").read_bytes()) == json.loads(fresh)
