"""Power loss, simulated: a writer dies at a store operation and the machine loses what
the page cache had not written to disk since the store's last ``barrier()``.

``PowerLossStore`` keeps two states: what readers of the live machine see, and what is on disk
(the state at the last barrier). A crash keeps, of the operations since that barrier, an
arbitrary subset, in order (a rename whole or not at all). A durable local store writes each
file's contents before renaming it into place and flushes the file system at each barrier;
without those, a crash may also keep a file's name without its contents (an empty value, as
ext4 does for a renamed file whose blocks were not yet allocated). With the barriers the commit
protocol places, every outcome must repair to the old or the new state; without them (the
negative control) some do not. With the
machine up (a process killed, every write kept), every store operation of each write is tried
as the instant of death: readers see the old state, the new one or a typed refusal.
"""

from __future__ import annotations

import json
import random
import threading
import types

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr3_backend as z3
from zarr3_backend.cli.migrate import apply_migration, plan_migration
from zarr3_backend.errors import InterruptedWriteError, StoreError, Zarr3Error
from zarr3_backend.stores import MemoryStore


class Crash(BaseException):
    """The writer's process dies here: nothing after it runs (not even cleanup)."""


_MUTATING = ("set", "set_many", "erase", "erase_many", "erase_prefix", "set_if", "erase_if")


class PowerLossStore(MemoryStore):
    """A MemoryStore with a disk: writes are volatile until ``barrier()``; ``crash_at`` kills
    the writer at its n-th mutating call."""

    def __init__(self) -> None:
        super().__init__()
        # one machine, shared by the views ``with_read_only`` makes (they copy attributes)
        self.m = types.SimpleNamespace(
            disk={},
            volatile=[],
            calls=0,
            crash_at=None,
            crashed=False,
            barriers_work=True,
            lock=threading.Lock(),
        )

    # -- the page cache and the disk
    def _put(self, key: str, data: bytes) -> None:
        super()._put(key, data)
        self.m.volatile.append(("put", key, data))

    def _pop(self, key: str) -> None:
        super()._pop(key)
        self.m.volatile.append(("pop", key, None))

    def move(self, src: str, dst: str) -> None:
        """A rename: kept whole or not at all; the name moves with what the disk holds under it."""
        self._count()
        with self._lock:
            if src in self._data:
                value = self._data[src]
                MemoryStore._pop(self, src)
                MemoryStore._put(self, dst, value)
                self.m.volatile.append(("move", src, dst))

    def barrier(self) -> None:
        self._count()  # the power can also go while a flush runs: what it flushes is not kept
        if self.m.barriers_work:
            self.settle()

    def settle(self) -> None:
        """Everything written so far is on disk."""
        self.m.disk = dict(self._data)
        self.m.volatile = []

    def after_power_loss(self, rng: random.Random) -> MemoryStore:
        """The store as the machine finds it after rebooting."""
        state = dict(self.m.disk)
        for op, key, arg in self.m.volatile:
            if rng.random() < 0.5:
                continue  # this operation never reached the disk
            if op == "pop":
                state.pop(key, None)
            elif op == "move":
                if key in state:
                    state[arg] = state.pop(key)
            elif self.m.barriers_work:  # a durable store writes a file's blocks before its name
                state[key] = arg
            else:  # without: the name can reach the disk before the blocks (an empty file)
                state[key] = b"" if rng.random() < 0.25 else arg
        return MemoryStore(state)

    # -- the writer's death
    def _alive(self) -> None:
        if self.m.crashed:
            raise Crash()

    def _count(self) -> None:
        self._alive()
        with self.m.lock:
            self.m.calls += 1
            if self.m.crash_at is not None and self.m.calls >= self.m.crash_at:
                self.m.crashed = True
        self._alive()


def _guarded(name):
    def method(self, *args, **kwargs):
        self._count()
        return getattr(MemoryStore, name)(self, *args, **kwargs)

    return method


for _name in _MUTATING:
    setattr(PowerLossStore, _name, _guarded(_name))


# ---- scenarios: (make the old state, the write, read what is stored, the states allowed) ------
def _ds(t0: int, n: int, seed: int) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {
            "t": (("time", "x"), rng.random((n, 6)).astype("float32")),
            "s": (("time",), rng.integers(0, 100, n).astype("int16")),
        },
        coords={"time": pd.date_range("2000-01-01", periods=n, freq="D") + pd.Timedelta(days=t0)},
        attrs={"title": "a dataset"},
    )


def _read_ds(store) -> xr.Dataset:
    return xr.open_dataset(store, engine="zarr3").load()


_ENC = {"t": {"chunks": (2, 6)}, "s": {"chunks": (2,)}}
OLD_DS, APPENDED, REPLACED = _ds(0, 4, 1), _ds(4, 3, 2), _ds(10, 5, 3)
REGION = _ds(1, 2, 4)

SCENARIOS = {
    "array_overwrite": (
        lambda s: z3.create_array(s, shape=(12,), chunks=(3,), dtype="int32", fill_value=0).__setitem__(
            slice(None), np.arange(12)
        ),
        lambda s: z3.open_array(s, mode="r+").__setitem__(slice(None), -np.arange(12)),
        lambda s: z3.open_array(s)[:],
        [np.arange(12), -np.arange(12)],
    ),
    "array_append": (
        lambda s: z3.create_array(s, shape=(7,), chunks=(3,), dtype="int32", fill_value=0).__setitem__(
            slice(None), np.arange(7)
        ),
        lambda s: z3.open_array(s, mode="r+").append(np.arange(100, 105)),
        lambda s: z3.open_array(s)[:],
        [np.arange(7), np.concatenate([np.arange(7), np.arange(100, 105)])],
    ),
    "to_zarr_append": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC),
        lambda s: z3.to_zarr(APPENDED, s, append_dim="time"),
        _read_ds,
        [OLD_DS, xr.concat([OLD_DS, APPENDED], dim="time")],
    ),
    "to_zarr_mode_w": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC),
        lambda s: z3.to_zarr(REPLACED, s, mode="w", encoding=_ENC),
        _read_ds,
        [OLD_DS, REPLACED],
    ),
    "array_shrink": (
        lambda s: z3.create_array(s, shape=(10,), chunks=(4,), dtype="int32", fill_value=-1).__setitem__(
            slice(None), np.arange(10)
        ),
        lambda s: z3.open_array(s, mode="r+").resize(5),
        lambda s: z3.open_array(s)[:],
        [np.arange(10), np.arange(5)],
    ),
    "v2_append": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC, zarr_format=2),
        lambda s: z3.to_zarr(APPENDED, s, append_dim="time"),
        _read_ds,
        [OLD_DS, xr.concat([OLD_DS, APPENDED], dim="time")],
    ),
    "sharded_region": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding={"t": {"chunks": (1, 3), "shards": (2, 6)}}),
        lambda s: z3.to_zarr(REGION.drop_vars(["time", "s"]), s, region={"time": slice(1, 3)}),
        _read_ds,
        [
            OLD_DS,
            OLD_DS.assign(
                t=OLD_DS.t.copy(
                    data=np.concatenate([OLD_DS.t.values[:1], REGION.t.values, OLD_DS.t.values[3:]])
                )
            ),
        ],
    ),
    "consolidated_append": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC, consolidated=True),
        lambda s: z3.to_zarr(APPENDED, s, append_dim="time", consolidated=True),
        _read_ds,
        [OLD_DS, xr.concat([OLD_DS, APPENDED], dim="time")],
    ),
    "attributes": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC),
        lambda s: z3.open_group(s, mode="r+").attrs.update({"title": "new"}),
        _read_ds,
        [OLD_DS, OLD_DS.assign_attrs(title="new")],
    ),
    "create_overwrite": (
        lambda s: z3.create_array(s, shape=(9,), chunks=(3,), dtype="int32", fill_value=0).__setitem__(
            slice(None), np.arange(9)
        ),
        lambda s: z3.create_array(s, shape=(4,), chunks=(2,), dtype="int16", fill_value=7, overwrite=True),
        lambda s: z3.open_array(s)[:],
        [np.arange(9), np.full(4, 7, dtype="int16")],
    ),
    "datatree_append": (
        lambda s: z3.to_zarr(xr.DataTree.from_dict({"/": OLD_DS, "/child": OLD_DS}), s, encoding={}),
        lambda s: z3.to_zarr(
            xr.DataTree.from_dict({"/": APPENDED, "/child": APPENDED}), s, append_dim="time"
        ),
        lambda s: xr.open_datatree(s, engine="zarr3").load(),
        [
            xr.DataTree.from_dict({"/": OLD_DS, "/child": OLD_DS}),
            xr.DataTree.from_dict(
                {"/": xr.concat([OLD_DS, APPENDED], "time")}
                | {"/child": xr.concat([OLD_DS, APPENDED], "time")}
            ),
        ],
    ),
    "consolidate_v2": (  # the same dataset read either way
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC, zarr_format=2, consolidated=False),
        lambda s: z3.consolidate_metadata(s),
        _read_ds,
        [OLD_DS],
    ),
    # both sides read as the same dataset: in v2, then in v3
    "migrate_v2_to_v3": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC, zarr_format=2),
        lambda s: apply_migration(s, plan_migration(s)),
        _read_ds,
        [OLD_DS],
    ),
    "migrate_unconsolidated_v2_to_v3": (
        lambda s: z3.to_zarr(OLD_DS, s, encoding=_ENC, zarr_format=2, consolidated=False),
        lambda s: apply_migration(s, plan_migration(s)),
        _read_ds,
        [OLD_DS],
    ),
}


def _which(got, states) -> int | None:
    for i, state in enumerate(states):
        if isinstance(state, xr.DataTree):
            if isinstance(got, xr.DataTree) and got.identical(state):
                return i
        elif isinstance(state, xr.Dataset):
            if isinstance(got, xr.Dataset) and got.identical(state):
                return i
        elif isinstance(got, np.ndarray) and got.shape == state.shape and np.array_equal(got, state):
            return i
    return None


def _outcome(name: str, crash_at: int, seed: int, barriers_work: bool = True) -> str:
    """Crash the write of ``name`` at its ``crash_at``-th mutating call, lose power, reboot and
    repair: "old", "new", or what else is there."""
    make_old, write, read, states = SCENARIOS[name]
    store = PowerLossStore()
    make_old(store)
    store.settle()  # the old state is long on disk
    store.m.calls = 0
    store.m.barriers_work = barriers_work
    store.m.crash_at = crash_at
    try:
        write(store)
    except Crash:
        pass
    rebooted = store.after_power_loss(random.Random(seed))
    try:
        z3.repair(rebooted, all_writers=True)
        got = read(rebooted)
    except Zarr3Error as e:
        return f"refused after repair: {type(e).__name__}: {e}"
    except Exception as e:  # an untyped failure is a finding too
        return f"untyped after repair: {type(e).__name__}: {e}"
    i = _which(got, states)
    return ("old", "new")[min(i, 1) if len(states) > 1 else 1] if i is not None else f"torn: {got!r}"


def _process_crash(name: str, crash_at: int) -> tuple[str, str]:
    """Kill the write of ``name`` at its ``crash_at``-th mutating call, the machine up (every
    write kept): what a reader sees before repair ("old", "new" or "refused", the typed refusal
    of a marked node), and after it."""
    make_old, write, read, states = SCENARIOS[name]
    store = PowerLossStore()
    make_old(store)
    store.m.calls = 0
    store.m.crash_at = crash_at
    try:
        write(store)
    except Crash:
        pass
    survivor = MemoryStore(dict(store._data), settings={"commit_wait": 0})  # its writer is this live process
    seen = []
    for step in ("before", "after"):
        try:
            if step == "after":
                z3.repair(survivor, all_writers=True)
            got = read(survivor)
        except InterruptedWriteError:
            seen.append("refused" if step == "before" else "refused after repair")
            continue
        except Exception as e:
            seen.append(f"{type(e).__name__}: {e}")
            continue
        i = _which(got, states)
        seen.append(
            ("old", "new")[min(i, 1) if len(states) > 1 else 1] if i is not None else f"torn: {got!r}"
        )
    return seen[0], seen[1]


def _mutating_calls(name: str) -> int:
    make_old, write, _, _ = SCENARIOS[name]
    store = PowerLossStore()
    make_old(store)
    store.m.calls = 0
    write(store)
    return store.m.calls


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_power_loss_at_any_step_repairs_to_the_old_or_the_new_state(name):
    total = _mutating_calls(name)
    rng = random.Random(name)
    points = sorted({1, 2, total, total + 1, *rng.sample(range(1, total + 1), min(total, 24))})
    outcomes = {}
    for crash_at in points:
        for seed in range(8):
            outcomes[(crash_at, seed)] = _outcome(name, crash_at, seed)
    bad = {k: v for k, v in outcomes.items() if v not in ("old", "new")}
    assert not bad, (
        f"{len(bad)} of {len(outcomes)} power losses left another state: {dict(list(bad.items())[:3])}"
    )
    if len(SCENARIOS[name][3]) > 1:
        assert {"old", "new"} <= set(outcomes.values())  # the crash points reach both sides


@pytest.mark.parametrize("name", ["array_overwrite", "to_zarr_append"])
def test_without_the_barriers_a_power_loss_can_tear_the_store(name):
    # the negative control: the simulator finds what the barriers prevent
    total = _mutating_calls(name)
    outcomes = [
        _outcome(name, crash_at, seed, barriers_work=False)
        for crash_at in range(1, total + 2)
        for seed in range(4)
    ]
    assert any(o not in ("old", "new") for o in outcomes)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_writer_killed_at_any_store_operation_is_seen_whole_or_refused(name):
    # the machine stays up: every crash point, not a sample; readers before the repair see the
    # old state, the new one, or a typed refusal (InterruptedWriteError); after it, old or new
    for crash_at in range(1, _mutating_calls(name) + 2):
        before, after = _process_crash(name, crash_at)
        assert before in ("old", "new", "refused"), (crash_at, before)
        assert after in ("old", "new"), (crash_at, after)


# ---- writes outside a commit, and a commit that fails at its manifest (review12) -------------
def _after_power_loss(write, seeds=range(48)) -> list[MemoryStore]:
    """The store after ``write`` returned (it was acknowledged) and then the power went."""
    found = []
    for seed in seeds:
        store = PowerLossStore()
        z3.create_group(store)
        store.settle()
        write(store)
        rebooted = store.after_power_loss(random.Random(seed))
        z3.repair(rebooted, all_writers=True)
        found.append(rebooted)
    return found


def test_a_created_array_is_kept_with_its_new_parent_groups_once_created():
    # outside a commit: the parents' documents, then the node's, each written to disk before
    # its name, flushed before create_array returns
    def write(s):
        z3.create_array(s, "a/b", shape=(4,), chunks=(2,), dtype="int32", fill_value=0)

    for rebooted in _after_power_loss(write):
        np.testing.assert_array_equal(z3.open_group(rebooted)["a"]["b"][:], np.zeros(4))


def test_a_creation_cut_by_a_power_loss_leaves_whole_documents():
    # the power goes at each step of create_array (a flush included): the group above, the
    # array, or neither, never an empty or orphaned document
    for crash_at in range(1, 8):
        for seed in range(16):
            store = PowerLossStore()
            z3.create_group(store)
            store.settle()
            store.m.calls, store.m.crash_at = 0, crash_at
            try:
                z3.create_array(store, "a/b", shape=(4,), chunks=(2,), dtype="int32", fill_value=0)
            except Crash:
                pass
            kept = store.after_power_loss(random.Random(seed))._data
            # what a killed process can leave: the parent alone, or both (readers that know no
            # implicit groups, as zarr-python 3, reach a node only through its parent's document)
            assert "a/b/zarr.json" not in kept or "a/zarr.json" in kept, (crash_at, seed)
            for key in ("a/zarr.json", "a/b/zarr.json"):
                assert key not in kept or json.loads(kept[key]), (crash_at, seed, key)


def test_a_one_chunk_write_cut_by_a_power_loss_reads_old_or_new():
    # one unit, no commit: written to disk, renamed in, flushed; the power goes at each step
    for crash_at in range(1, 4):
        for seed in range(16):
            store = PowerLossStore()
            z3.create_array(store, shape=(4,), chunks=(2,), dtype="int32", fill_value=0)
            store.settle()
            store.m.calls, store.m.crash_at = 0, crash_at
            try:
                z3.open_array(store, mode="r+")[0:2] = [5, 6]
            except Crash:
                pass
            got = z3.open_array(store.after_power_loss(random.Random(seed)))[:]
            assert got.tolist() in ([0, 0, 0, 0], [5, 6, 0, 0]), (crash_at, seed, got)


class ManifestLandsThenFails(PowerLossStore):
    """The manifest's write lands, then the call raises (a lost answer, a Ctrl-C after the rename)."""

    failing = False

    def set(self, key, value):
        super().set(key, value)
        if self.failing and key.endswith("/manifest.json"):
            raise StoreError(f"{key}: timed out (the value was stored)")


def test_a_commit_whose_manifest_write_failed_is_never_rolled_forward_without_its_values():
    # the abort removes the manifest, flushed, before the staged values it names
    for seed in range(48):
        store = ManifestLandsThenFails()
        z3.create_array(store, shape=(6,), chunks=(3,), dtype="int32", fill_value=-1)[:] = np.arange(6)
        store.settle()
        store.failing = True
        with pytest.raises(StoreError):
            z3.open_array(store, mode="r+").append(np.arange(100, 106))
        rebooted = store.after_power_loss(random.Random(seed))
        z3.repair(rebooted, all_writers=True)
        assert z3.open_array(rebooted)[:].tolist() == list(range(6)), seed
