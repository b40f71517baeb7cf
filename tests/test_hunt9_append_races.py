"""Appends racing other appends and resizes of one array, from separate processes.

Two appends that read the same stored shape both staged their rows at that offset: the second
commit moved its rows over the first one's and wrote the same new shape, so the first writer's
rows were lost. A shape-changing commit now claims the array (its marker records the shape it
started from); a second one waits for a live claim, and re-bases onto the new shape before any
of its data moves.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from concurrent_writers import run_at_once
from store_doubles import CommitHookedStore

import zarr3_backend as z3
from zarr3_backend.errors import WriteConflictError

COLS = 3
REPO = str(Path(__file__).resolve().parents[1])


def _rows(writer: int, round_: int, seed: int) -> int:
    """How many rows ``writer`` appends in ``round_`` (1 to 3, so appends straddle chunks)."""
    return random.Random(f"{seed}-{writer}-{round_}").randint(1, 3)


def _value(writer: int, round_: int) -> int:
    """The value of every element ``writer`` appends in ``round_`` (never the fill value 0)."""
    return 1000 * (writer + 1) + round_ + 1


def appender(root: str, writer: int, rounds: int, seed: int, barrier) -> None:
    """Process body: each round wait for the others, then append this writer's rows."""
    a = z3.open_array(root, "a", mode="r+")
    for r in range(rounds):
        barrier.wait(timeout=120)
        a.append(np.full((_rows(writer, r, seed), COLS), _value(writer, r), dtype="i4"))


def xr_appender(root: str, writer: int, rounds: int, seed: int, barrier) -> None:
    """Process body: each round wait for the others, then append this writer's steps of ``t``
    with ``to_zarr(mode="a", append_dim="t")``."""
    import xarray as xr

    for r in range(rounds):
        n = _rows(writer, r, seed)
        ds = xr.Dataset({"v": (("t", "x"), np.full((n, COLS), _value(writer, r), dtype="i4"))})
        barrier.wait(timeout=120)
        z3.to_zarr(ds, root, mode="a", append_dim="t", consolidated=False)


def _check_blocks(stored: np.ndarray, writers: int, rounds: int, seed: int, *, filler_rows: int = 0) -> None:
    """Every writer's rows of every round are stored exactly once, together and whole; the only
    other rows are ``filler_rows`` rows of the fill value."""
    assert stored.shape == (
        sum(_rows(w, r, seed) for w in range(writers) for r in range(rounds)) + filler_rows,
        COLS,
    )
    assert (stored == stored[:, :1]).all(), "a row mixes values of two writers"
    col = stored[:, 0]
    assert int((col == 0).sum()) == filler_rows
    for w in range(writers):
        for r in range(rounds):
            where = np.flatnonzero(col == _value(w, r))
            n = _rows(w, r, seed)
            assert len(where) == n, (w, r, len(where), n)
            assert where[-1] - where[0] == n - 1, (w, r, where)  # one block, not split


@pytest.mark.slow
@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_processes_appending_at_once_keep_every_row(tmp_path, seed, zarr_format):
    """Four processes append one to three rows each, released together, for several rounds:
    every row of every writer is there exactly once and the shape is the sum of the appends."""
    root = str(tmp_path / "s.zarr")
    z3.create_array(
        root, "a", shape=(0, COLS), dtype="i4", chunks=(2, COLS), fill_value=0, zarr_format=zarr_format
    )
    writers, rounds = 4, 6
    run_at_once([(appender, (root, w, rounds, seed)) for w in range(writers)])
    _check_blocks(z3.open_array(root, "a")[...], writers, rounds, seed)


@pytest.mark.slow
def test_processes_appending_with_to_zarr_at_once_keep_every_step(tmp_path):
    """Three processes ``to_zarr(mode="a", append_dim="t")`` at once, several rounds: every
    step of every writer is stored once (they all planned their steps at the same offset)."""
    xr = pytest.importorskip("xarray")
    root = str(tmp_path / "s.zarr")
    empty = xr.Dataset({"v": (("t", "x"), np.zeros((0, COLS), dtype="i4"))})
    z3.to_zarr(
        empty, root, mode="w", encoding={"v": {"chunks": (2, COLS), "fill_value": 0}}, consolidated=False
    )
    writers, rounds, seed = 3, 5, 3
    run_at_once([(xr_appender, (root, w, rounds, seed)) for w in range(writers)])
    _check_blocks(z3.open_array(root, "v")[...], writers, rounds, seed)


def _array(store, rows: int, value: int = 1, zarr_format: int = 3):
    a = z3.create_array(
        store, "a", shape=(rows, COLS), dtype="i4", chunks=(2, COLS), fill_value=0, zarr_format=zarr_format
    )
    a[...] = value
    return a


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_append_goes_after_a_growth_committed_while_it_was_staged(zarr_format):
    """Another handle grows the array while an append's rows are staged: the append moves its
    rows after the grown part and keeps the growth (it used to write its rows at the old end
    and set the shape back to old end + its rows)."""
    store = CommitHookedStore()
    _array(store, 3, zarr_format=zarr_format)
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    store.hook = lambda: other.resize((6, COLS))
    mine.append(np.full((2, COLS), 9, dtype="i4"))
    assert store.hook is None  # the other writer ran
    got = z3.open_array(store, "a")
    assert got.shape == (8, COLS) and mine.shape == (8, COLS)
    np.testing.assert_array_equal(got[:, 0], [1, 1, 1, 0, 0, 0, 9, 9])


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_append_goes_after_another_append_committed_while_it_was_staged(zarr_format):
    """Another handle appends while this append's rows are staged: both sets of rows stay."""
    store = CommitHookedStore()
    _array(store, 3, zarr_format=zarr_format)
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    store.hook = lambda: other.append(np.full((1, COLS), 5, dtype="i4"))
    mine.append(np.full((2, COLS), 9, dtype="i4"))
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 5, 9, 9])


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_shrink_erases_rows_appended_while_it_was_staged(zarr_format):
    """A shrink chose the units to erase from the shape it read; rows another handle appended
    before its commit were left stored outside the new shape, and came back on a later growth
    instead of the fill value."""
    store = CommitHookedStore()
    _array(store, 6, zarr_format=zarr_format)
    mine, other = z3.open_array(store, "a", mode="r+"), z3.open_array(store, "a", mode="r+")
    store.hook = lambda: other.append(np.full((4, COLS), 5, dtype="i4"))
    mine.resize((2, COLS))
    assert store.hook is None
    again = z3.open_array(store, "a", mode="r+")
    assert again.shape == (2, COLS)
    again.resize((10, COLS))
    np.testing.assert_array_equal(again[:, 0], [1, 1] + [0] * 8)


# ---- a writer killed while it holds the shape change -------------------------------------------
_CHILD_APPEND = """
import os, signal, sys
import numpy as np
import zarr3_backend as z3
from zarr3_backend.stores import LocalStore

step, root = int(sys.argv[1]), sys.argv[2]
store = LocalStore(root)
count = [0]


def dying(method):
    original = getattr(store, method)

    def call(*args, **kwargs):
        out = original(*args, **kwargs)
        count[0] += 1
        if count[0] >= step:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    setattr(store, method, call)


for method in ("set", "set_if", "set_many", "erase", "erase_if", "erase_many", "erase_prefix", "move_prefix"):
    dying(method)
a = z3.open_array(store, "a", mode="r+")
if sys.argv[3] == "append":
    a.append(np.full((3, 3), 7, dtype="i4"))
else:
    a.resize((8, 3))
print(count[0])
"""


def _change_killed_at(root: str, step: int, change: str) -> int | None:
    """Run an append of three rows of 7 (or a growth by three rows) in a child killed right
    after its ``step``-th store write or erase; the number of those when it finished, or None
    when it was killed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD_APPEND, str(step), root, change],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if out.returncode == -signal.SIGKILL:
        return None
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def _leftovers(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".z3-txn" in p.parts]


@pytest.mark.slow
@pytest.mark.parametrize("zarr_format,change", [(3, "append"), (2, "append"), (3, "grow")])
def test_an_append_after_a_writer_killed_inside_its_shape_change_proceeds(tmp_path, zarr_format, change):
    """A child appending three rows (or growing the array by three) is killed after each of its
    store writes in turn (so also while it holds the array's shape claim); then a handle opened
    before the kill appends two rows. That append finishes or drops the dead one first, never
    waits on its claim, and the array is the old rows, then the child's three rows whole or not
    at all, then the new two."""
    root = tmp_path / "s.zarr"
    step, finished, held = 1, None, 0
    while finished is None:
        shutil.rmtree(root, ignore_errors=True)
        a = z3.create_array(
            str(root),
            "a",
            shape=(5, COLS),
            dtype="i4",
            chunks=(2, COLS),
            fill_value=0,
            zarr_format=zarr_format,
        )
        a[...] = 1
        handle = z3.open_array(str(root), "a", mode="r+")
        finished = _change_killed_at(str(root), step, change)
        held += (root / ".z3-txn" / "shape-claims").is_dir() and any(
            (root / ".z3-txn" / "shape-claims").iterdir()
        )
        handle.append(np.full((2, COLS), 9, dtype="i4"))
        col = z3.open_array(str(root), "a")[:, 0].tolist()
        with_child, without = [1] * 5 + [7 if change == "append" else 0] * 3 + [9] * 2, [1] * 5 + [9] * 2
        assert col in (with_child, without), (step, col)
        if finished is not None:
            assert col == with_child
        assert not _leftovers(root), (step, _leftovers(root))
        assert handle.shape == (len(col), COLS)
        step += 1
    assert step > 4 and held >= 2  # kills at every step, some while the dead writer held the claim


class _StallingStore(z3.MemoryStore):
    """A MemoryStore that holds the first conditional write of ``a/zarr.json`` made by the thread
    named ``stalled`` until ``go`` is set: a writer stuck inside its commit, holding its claim."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.go, self.stalling = threading.Event(), threading.Event()

    def set_if(self, key, value, expected):
        if (
            key == "a/zarr.json"
            and threading.current_thread().name == "stalled"
            and not self.stalling.is_set()
        ):
            self.stalling.set()
            self.go.wait(timeout=60)
        return super().set_if(key, value, expected)


@pytest.mark.parametrize("change", ["append", "grow"])
def test_a_shape_change_waits_for_a_live_one_then_refuses_naming_the_array(change):
    """While a live writer holds the array's shape change past ``commit_wait``, an append (or a
    growing resize, which writes the document alone) raises WriteConflictError naming the array
    and writes nothing; once that writer is done, the same change goes after its rows."""
    store = _StallingStore(settings={"commit_wait": 0.3})
    _array(store, 3)
    mine = z3.open_array(store, "a", mode="r+")
    stuck = threading.Thread(
        target=lambda: z3.open_array(store, "a", mode="r+").append(np.full((2, COLS), 5, dtype="i4")),
        name="stalled",
    )
    stuck.start()
    assert store.stalling.wait(timeout=60)

    def mine_changes():
        if change == "append":
            mine.append(np.full((1, COLS), 9, dtype="i4"))
        else:
            mine.resize((7, COLS))

    with pytest.raises(WriteConflictError, match=r"'a/zarr\.json'.*holds this node's claim"):
        mine_changes()
    store.go.set()
    stuck.join(timeout=60)
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 5, 5])
    assert not [k for k in store.list() if k.startswith(".z3-txn")]
    mine_changes()
    want = [1, 1, 1, 5, 5, 9] if change == "append" else [1, 1, 1, 5, 5, 0, 0]
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], want)


def _dead_writer_id() -> str:
    """A write id of a process of this host that has ended."""
    from zarr3_backend._owner import host_tag

    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return f"1-{int(child.stdout)}-x-x-{host_tag()}-0"


@pytest.mark.parametrize("holder", ["dead", "garbage"])
def test_an_append_takes_over_a_claim_left_without_a_write(tmp_path, holder):
    """A shape claim whose holder left no records (it died between dropping its write and
    giving the claim up), or that names no write at all, does not block the next append."""
    from zarr3_backend.core.node_claims import claim_key
    from zarr3_backend.stores import LocalStore

    store = LocalStore(str(tmp_path), settings={"commit_wait": 5})
    _array(store, 3)
    store.set(claim_key("a/zarr.json"), (_dead_writer_id() if holder == "dead" else "../x").encode())
    z3.open_array(store, "a", mode="r+").append(np.full((1, COLS), 9, dtype="i4"))
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 9])
    assert not [k for k in store.list() if k.startswith(".z3-txn")]


def test_a_datatree_append_goes_after_another_append_committed_while_it_was_staged():
    """``DataTree`` ``to_zarr(append_dim=...)`` whose commit finds the array grown by another
    writer meanwhile is planned again from the new shape: both writers' steps stay (it raised
    ShapeMovedError, nothing written)."""
    xr = pytest.importorskip("xarray")
    store = CommitHookedStore()
    tree = xr.DataTree.from_dict(
        {"/": xr.Dataset(), "/obs": xr.Dataset({"v": (("t", "x"), np.ones((3, COLS), "i4"))})}
    )
    z3.to_zarr(tree, store, mode="w", encoding={"/obs": {"v": {"chunks": (2, COLS), "fill_value": 0}}})
    other = z3.open_array(store, "obs/v", mode="r+")
    store.hook = lambda: other.append(np.full((1, COLS), 5, dtype="i4"))
    more = xr.DataTree.from_dict(
        {"/": xr.Dataset(), "/obs": xr.Dataset({"v": (("t", "x"), np.full((2, COLS), 9, "i4"))})}
    )
    z3.to_zarr(more, store, append_dim="t")
    assert store.hook is None  # the other writer ran
    np.testing.assert_array_equal(z3.open_array(store, "obs/v")[:, 0], [1, 1, 1, 5, 9, 9])
