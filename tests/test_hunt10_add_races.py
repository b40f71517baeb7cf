"""Writers adding the same new variable to one group at once (``to_zarr(mode="a")``).

Both planned ``v`` as new; both commits moved their chunks into place, and when the moves
interleaved the stored ``v`` held chunks of both writers: a variable neither wrote. A commit now
claims the documents of the variables it adds; the one that finds ``v`` added by another is
dropped (nothing of it moved) and planned again, as an overwrite of the stored ``v`` (what
running the two one after the other gives). Overwrites of a whole array claim it too, so two of
them never interleave either.
"""

from __future__ import annotations

import random
import re
import threading

import numpy as np
import pytest
from concurrent_writers import run_at_once

import zarr3_backend as z3
from zarr3_backend.errors import ArgumentError, Zarr3Error

xr = pytest.importorskip("xarray")

N, CHUNK = 24, 2
_WAIT = 60  # seconds a test thread waits for another before giving up (a hang, not a timing)


def _values(writer: int, seed: int) -> np.ndarray:
    """``writer``'s ``v``: its own value, with a few whole chunks empty (NaN, the fill value),
    which ``write_empty_chunks=False`` leaves out of the store."""
    rng = random.Random(f"{seed}-{writer}")
    v = np.full(N, float(writer + 1))
    for c in rng.sample(range(N // CHUNK), 3):
        v[c * CHUNK : (c + 1) * CHUNK] = np.nan
    return v


def _dataset(writer: int, seed: int, name: str = "v") -> xr.Dataset:
    return xr.Dataset({name: ("x", _values(writer, seed))}).chunk({"x": CHUNK})


def _base(store, zarr_format: int) -> None:
    z3.to_zarr(
        xr.Dataset({"x": ("x", np.arange(N))}), store, mode="w", zarr_format=zarr_format, consolidated=False
    )


def _written_by(stored: np.ndarray, writers: list[int], seed: int) -> list[int]:
    """The writers whose whole ``v`` equals ``stored``."""
    return [w for w in writers if np.array_equal(stored, _values(w, seed), equal_nan=True)]


def _chunk_owners(stored: np.ndarray, writers: list[int]) -> set[int]:
    """The writers some chunk of ``stored`` comes from (by its non-NaN value)."""
    return {int(x) - 1 for x in stored[~np.isnan(stored)]} & set(writers)


# ---- in-process, deterministic: B commits in the middle of A's commit -----------------------------
class SteppedStore(z3.MemoryStore):
    """A MemoryStore that moves staged values one key at a time (in order) and calls the test's
    hooks: ``on_manifest()`` before each manifest write, ``on_move(dst)`` before each move,
    ``on_claim_read()`` at each versioned read of a node claim (a writer finding one taken),
    ``on_erase(key)`` before each erase."""

    on_manifest = staticmethod(lambda: None)
    on_move = staticmethod(lambda dst: None)
    on_claim_read = staticmethod(lambda: None)
    on_erase = staticmethod(lambda key: None)

    def set(self, key, value):
        if key.endswith("/manifest.json"):
            self.on_manifest()
        super().set(key, value)

    def move_prefix(self, src, dst):
        for key in sorted(self.list_prefix(src)):
            self.move(key, dst + key[len(src) :])

    def move(self, src, dst):
        self.on_move(dst)
        super().move(src, dst)

    def erase(self, key):
        self.on_erase(key)
        super().erase(key)

    def get_versioned(self, key):
        if key.startswith(".z3-txn/shape-claims/"):
            self.on_claim_read()
        return super().get_versioned(key)


def _interleave(store: SteppedStore, first, second) -> dict:
    """Run ``first()`` here and ``second()`` in a thread so that: ``second`` plans and stages
    before ``first`` commits, then commits once ``first`` has moved one chunk of ``v`` into
    place, and ``first`` goes on once ``second`` has committed (its manifest erased) or waits on
    a claim. Returns what each
    raised (None when it finished)."""
    staged, go, blocked_or_done = threading.Event(), threading.Event(), threading.Event()
    outcome: dict[str, BaseException | None] = {}
    chunk = re.compile(r"^v/(c/)?\d")
    moved = []

    def run_second():
        try:
            second()
            outcome["second"] = None
        except Zarr3Error as e:
            outcome["second"] = e
        finally:
            staged.set()
            blocked_or_done.set()

    thread = threading.Thread(target=run_second)

    def on_manifest():
        if threading.current_thread() is thread:
            if not staged.is_set():  # second's first commit: let first commit into its moves
                staged.set()
                assert go.wait(_WAIT)
        elif not thread.is_alive() and not staged.is_set():
            thread.start()  # first is about to commit: second plans and stages now
            assert staged.wait(_WAIT)

    def on_move(dst):
        if threading.current_thread() is not thread and chunk.match(dst):
            moved.append(dst)
            if len(moved) == 2:  # first has put one chunk of v in place: second commits now
                go.set()
                assert blocked_or_done.wait(_WAIT)

    def on_claim_read():
        if threading.current_thread() is thread and go.is_set():
            blocked_or_done.set()  # second waits on first's claim

    def on_erase(key):
        if threading.current_thread() is thread and key.endswith("/manifest.json"):
            blocked_or_done.set()  # second's commit is over (or dropped)

    store.on_manifest, store.on_move, store.on_claim_read = on_manifest, on_move, on_claim_read
    store.on_erase = on_erase
    try:
        first()
        outcome["first"] = None
    finally:
        go.set()
        thread.join(_WAIT)
    assert not thread.is_alive() and len(moved) >= 2
    return outcome


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_variable_added_while_another_adds_it_is_one_writers_whole(zarr_format):
    """A and B add ``v`` (different values, some chunks empty); B's commit runs while A's moves
    its chunks into place. Without the claim ``v`` held B's chunk 0 and A's others. Now B waits
    for A, finds ``v`` stored, is planned again as an overwrite and ``v`` is B's, whole (B's
    empty chunks erase A's there)."""
    store = SteppedStore()
    _base(store, zarr_format)
    kwargs = dict(mode="a", write_empty_chunks=False, consolidated=False)
    outcome = _interleave(
        store,
        lambda: z3.to_zarr(_dataset(0, 7), store, **kwargs),
        lambda: z3.to_zarr(_dataset(1, 7), store, **kwargs),
    )
    assert outcome == {"first": None, "second": None}
    stored = xr.open_dataset(store, engine="zarr3")["v"].values
    assert _chunk_owners(stored, [0, 1]) == {1}, stored
    assert _written_by(stored, [0, 1], 7) == [1]
    assert not list(store.list_prefix(".z3-txn/"))  # no records, no claims left


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_whole_overwrites_of_one_variable_do_not_interleave(zarr_format):
    """Two ``mode="a"`` writes of a stored ``v`` (each over all of it): the second's commit
    waits for the first's, so ``v`` ends as one writer's whole, never a mix."""
    store = SteppedStore()
    _base(store, zarr_format)
    z3.to_zarr(_dataset(2, 7), store, mode="a", consolidated=False)
    kwargs = dict(mode="a", write_empty_chunks=False, consolidated=False)
    outcome = _interleave(
        store,
        lambda: z3.to_zarr(_dataset(0, 7), store, **kwargs),
        lambda: z3.to_zarr(_dataset(1, 7), store, **kwargs),
    )
    assert outcome == {"first": None, "second": None}
    stored = xr.open_dataset(store, engine="zarr3")["v"].values
    assert _written_by(stored, [0, 1], 7) == [1], stored


def test_an_added_variable_given_an_encoding_is_refused_when_another_writer_added_it():
    """Planned again over the stored ``v``, a write that gives ``v`` an encoding is refused as
    it would be run after the other (mode="a" takes no encoding for a stored variable): a typed
    error, and the stored ``v`` is the other writer's, whole."""
    store = SteppedStore()
    _base(store, 3)
    outcome = _interleave(
        store,
        lambda: z3.to_zarr(_dataset(0, 3), store, mode="a", consolidated=False),
        lambda: z3.to_zarr(
            _dataset(1, 3).compute(),
            store,
            mode="a",
            consolidated=False,
            encoding={"v": {"chunks": (CHUNK,)}},
        ),
    )
    assert outcome["first"] is None
    assert isinstance(outcome["second"], ArgumentError) and "'v'" in str(outcome["second"])
    stored = xr.open_dataset(store, engine="zarr3")["v"].values
    assert _written_by(stored, [0, 1], 3) == [0], stored
    assert not list(store.list_prefix(".z3-txn/"))


# ---- processes -----------------------------------------------------------------------------------
def adder(root: str, writer: int, rounds: int, seed: int, results, barrier) -> None:
    """Process body: each round wait for the others, then add ``v<round>`` with this writer's
    values (``mode="a"``, empty chunks left out)."""
    for r in range(rounds):
        ds = _dataset(writer, seed + r, name=f"v{r}")
        barrier.wait(timeout=120)
        try:
            z3.to_zarr(ds, root, mode="a", write_empty_chunks=False)
            results.put((r, writer, "ok"))
        except Zarr3Error as e:
            results.put((r, writer, f"{type(e).__name__}: {e}"))


@pytest.mark.slow
@pytest.mark.parametrize(("zarr_format", "seed"), [(3, 0), (3, 10), (2, 20)])
def test_processes_adding_one_variable_at_once_leave_one_writers_whole(tmp_path, zarr_format, seed):
    """Three processes add the same variable at once, several rounds: every round's variable
    is exactly one writer's (all of them succeed: the later ones overwrite)."""
    import multiprocessing as mp

    root = str(tmp_path / "s.zarr")
    _base(root, zarr_format)
    writers, rounds = 3, 4
    results = mp.get_context("spawn").Queue()
    run_at_once([(adder, (root, w, rounds, seed, results)) for w in range(writers)])
    outcomes = [results.get(timeout=10) for _ in range(writers * rounds)]
    assert all(o == "ok" for _, _, o in outcomes), outcomes
    ds = xr.open_dataset(root, engine="zarr3")
    for r in range(rounds):
        stored = ds[f"v{r}"].values
        assert len(_written_by(stored, list(range(writers)), seed + r)) == 1, (r, stored)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_an_overwrite_planned_before_an_append_is_planned_again_not_over_its_rows(zarr_format):
    """A ``mode="a"`` overwrite of ``a`` (3 rows, chunks of 2) is staged; another writer appends a
    row, which lands in the edge chunk the overwrite rewrites whole. The overwrite's commit used
    to put that chunk back with fill past row 3: the appended row was lost. Its claim now finds
    the shape changed: it is planned again and refused as it would be after the append (the
    dataset's 3 rows no longer match the stored 4), having written nothing."""
    from store_doubles import CommitHookedStore

    store = CommitHookedStore()
    three = xr.Dataset({"a": (("t", "x"), np.ones((3, 2), "i4"))})
    z3.to_zarr(
        three,
        store,
        mode="w",
        zarr_format=zarr_format,
        consolidated=False,
        encoding={"a": {"chunks": (2, 2)}},
    )
    store.hook = lambda: z3.open_array(store, "a", mode="r+").append(np.full((1, 2), 5, "i4"))
    with pytest.raises(ArgumentError, match="'a' already exists with different dimension sizes"):
        z3.to_zarr(three * 7, store, mode="a", consolidated=False)
    assert store.hook is None  # the append ran
    np.testing.assert_array_equal(z3.open_array(store, "a")[:, 0], [1, 1, 1, 5])
    assert not list(store.list_prefix(".z3-txn/"))


class _ClashCheckHooked(z3.MemoryStore):
    """Runs ``hook`` once, when a write checks that nothing is stored where it adds ``v`` (after
    it planned ``v`` as new)."""

    hook = None

    def exists_many(self, keys):
        keys = list(keys)
        if self.hook is not None and any(k.startswith("v/") for k in keys):
            hook, self.hook = self.hook, None
            hook()
        return super().exists_many(keys)


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_variable_added_between_planning_and_the_clash_check_is_planned_again(zarr_format):
    """Another writer adds ``v`` after this one planned it as new, before its check that nothing
    is stored there: it was refused as if a group were stored at ``v``; it is planned again as
    an overwrite, and ``v`` is this writer's, whole."""
    store = _ClashCheckHooked()
    _base(store, zarr_format)
    kwargs = dict(mode="a", write_empty_chunks=False, consolidated=False)
    store.hook = lambda: z3.to_zarr(_dataset(1, 5), store, **kwargs)
    z3.to_zarr(_dataset(0, 5), store, **kwargs)
    assert store.hook is None
    stored = xr.open_dataset(store, engine="zarr3")["v"].values
    assert _written_by(stored, [0, 1], 5) == [0], stored
