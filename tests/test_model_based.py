"""Model-based testing of the array API under failing store calls (hypothesis stateful).

Random sequences of what users do to arrays (create, write regions, append, resize, set
attributes, overwrite) run against a ``MemoryStore`` and, side by side, against a model in
numpy. Any step may be armed to make one store call fail: before the call reaches the store,
after it took effect (an answer lost on its way back), or half-way through a batch. The rules:

* a step either succeeds, or raises a ``Zarr3Error``;
* after a failed step and ``repair``, every array reads as the model before the step or after
  it, whole (never a mix, never another shape, never lost attributes);
* no step leaves records behind once repaired, and every later step works on what is there.

The search covers plain and sharded arrays, edge chunks, shrinking and growing (the part a
shrink cuts off must read as fill when grown again) and appends after failed appends.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import zarr3_backend as z3
from zarr3_backend.errors import StoreError, Zarr3Error
from zarr3_backend.stores import MemoryStore

_FAILING = (
    "get",
    "get_many",
    "get_partial_values",
    "get_versioned",
    "set",
    "set_many",
    "set_if",
    "erase",
    "erase_many",
    "erase_if",
    "erase_prefix",
    "move",
    "move_prefix",
    "list_prefix",
    "list_dir",
)


class FailingStore(MemoryStore):
    """A MemoryStore whose ``fail_at``-th store call (counted from ``arm``) fails: ``"before"``
    it reaches the dict, ``"after"`` it took effect, or ``"half"`` (a batch: half of its
    items written or erased, then the failure)."""

    def __init__(self) -> None:
        # a reader waits on a failed write's markers until repaired: briefly here
        super().__init__(settings={"commit_wait": 0.2})
        self.fail_at = -1
        self.mode = "before"
        self.calls = 0
        self.failed = False
        self._depth = threading.local()

    def arm(self, fail_at: int, mode: str) -> None:
        self.fail_at, self.mode, self.calls, self.failed = fail_at, mode, 0, False

    def disarm(self) -> None:
        self.fail_at = -1


def _failing(name: str):
    original = getattr(MemoryStore, name)

    def call(self, *args, **kwargs):
        depth = getattr(self._depth, "n", 0)
        if depth or self.fail_at < 0:  # a call made by another call of the store is not counted
            self._depth.n = depth + 1
            try:
                return original(self, *args, **kwargs)
            finally:
                self._depth.n = depth
        self.calls += 1
        hit = self.calls == self.fail_at
        if hit and self.mode == "before":
            self.failed = True
            raise StoreError(f"injected failure of {name} (before)")
        self._depth.n = 1
        try:
            if hit and self.mode == "half" and name in ("set_many", "erase_many") and args:
                items = list(args[0].items()) if name == "set_many" else list(args[0])
                half = items[: len(items) // 2]
                original(self, dict(half) if name == "set_many" else half)
                self.failed = True
                raise StoreError(f"injected failure of {name} (half done)")
            out = original(self, *args, **kwargs)
            if name in ("list_prefix", "list_dir"):
                out = list(out)
        finally:
            self._depth.n = 0
        if hit:
            self.failed = True
            raise StoreError(f"injected failure of {name} (after)")
        return out

    return call


for _name in _FAILING:
    setattr(FailingStore, _name, _failing(_name))


FILL = -7.0
LAYOUTS = {
    "plain": {"chunks": (3, 2)},
    "sharded": {"chunks": (4, 4), "shards": (2, 2)},  # shards of 4x4, inner chunks 2x2
    "gzip": {"chunks": (2, 3), "compressors": [{"name": "gzip", "configuration": {"level": 1}}]},
}


class ArrayModel(RuleBasedStateMachine):
    """Arrays in a store and a model of them in numpy, kept equal through failures."""

    def __init__(self) -> None:
        super().__init__()
        self.store = FailingStore()
        self.values: dict[str, np.ndarray] = {}
        self.attrs: dict[str, dict] = {}
        self.layout: dict[str, str] = {}
        self.counter = 0

    @initialize(
        layout=st.sampled_from(sorted(LAYOUTS)), shape=st.tuples(st.integers(0, 9), st.integers(1, 7))
    )
    def first_array(self, layout, shape) -> None:
        """A group and one array, made without failures: every rule has an array to work on."""
        z3.create_group(self.store)
        self.create(layout, shape, -1, "before")

    # ---- helpers ---------------------------------------------------------------------------
    def _create_kwargs(self, layout: str) -> dict:
        kw = dict(LAYOUTS[layout])
        if layout == "sharded":
            kw = {"chunks": (2, 2), "shards": (4, 4)}
        return kw

    def _observe(self, name: str) -> tuple[np.ndarray, dict] | None:
        try:
            a = z3.open_array(self.store, path=name, mode="r")
        except z3.errors.NodeNotFoundError:
            return None
        return a[...], dict(a.attrs)

    def _same(self, seen, want) -> bool:
        if seen is None or want is None:
            return seen is None and want is None
        (v, at), (wv, wat) = seen, want
        return v.shape == wv.shape and np.array_equal(v, wv) and at == wat

    def _step(self, name: str, fail_at: int, mode: str, op, new_values, new_attrs) -> None:
        """Run ``op`` with the store armed; check the outcome against the model's old and new
        states of array ``name``, and take the one the store shows."""
        old = None if name not in self.values else (self.values[name].copy(), dict(self.attrs[name]))
        new = None if new_values is None else (new_values, new_attrs)
        self.store.arm(fail_at, mode)
        try:
            op()
            error = None
        except Zarr3Error as e:
            error = e
        finally:
            self.store.disarm()
        if error is not None:
            assert self.store.failed, f"a Zarr3Error without an injected failure: {error!r}"
            self._before_repair(name, old, new)
            z3.repair(self.store, all_writers=True)
        seen = self._observe(name)
        if error is None:
            assert self._same(seen, new), (name, seen, new)
        else:
            assert self._same(seen, old) or self._same(seen, new), (name, str(error), seen, old, new)
        if seen is None:
            self.values.pop(name, None)
            self.attrs.pop(name, None)
        else:
            self.values[name], self.attrs[name] = seen
        leftovers = [k for k in self.store.list_prefix(".z3-txn/") if "shape-claims" not in k]
        assert not leftovers, leftovers

    def _before_repair(self, name: str, old, new) -> None:
        """Before repair, a reader sees the old or the new state, or is refused with a typed
        error (a write left in flight); never a mix."""
        try:
            seen = self._observe(name)
        except Zarr3Error:
            return
        assert self._same(seen, old) or self._same(seen, new), (name, "before repair", seen, old, new)

    def _array(self, name: str) -> z3.Array:
        return z3.open_array(self.store, path=name, mode="r+")

    # ---- rules -----------------------------------------------------------------------------
    @precondition(lambda self: len(self.values) < 4)
    @rule(
        layout=st.sampled_from(sorted(LAYOUTS)),
        shape=st.tuples(st.integers(0, 9), st.integers(1, 7)),
        fail_at=st.integers(-1, 12),
        mode=st.sampled_from(["before", "after", "half"]),
    )
    def create(self, layout, shape, fail_at, mode) -> None:
        name = f"a{self.counter}"
        self.counter += 1
        kw = self._create_kwargs(layout)
        self.layout[name] = layout

        def op() -> None:
            z3.create_array(
                self.store, name, shape=shape, dtype="f8", fill_value=FILL, attributes={"n": 0}, **kw
            )

        self._step(name, fail_at, mode, op, np.full(shape, FILL), {"n": 0})

    @precondition(lambda self: self.values)
    @rule(
        data=st.data(),
        fail_at=st.integers(-1, 20),
        mode=st.sampled_from(["before", "after", "half"]),
    )
    def write_region(self, data, fail_at, mode) -> None:
        name = data.draw(st.sampled_from(sorted(self.values)))
        cur = self.values[name]
        sel = []
        for n in cur.shape:
            start = data.draw(st.integers(0, n))
            stop = data.draw(st.integers(start, n))
            sel.append(slice(start, stop))
        sel = tuple(sel)
        region = cur[sel]
        value = data.draw(st.sampled_from(["fill", "random"]))
        block = (
            np.full(region.shape, FILL)
            if value == "fill"
            else np.random.default_rng(data.draw(st.integers(0, 99)))
            .integers(-50, 50, region.shape)
            .astype("f8")
        )
        new = cur.copy()
        new[sel] = block
        self._step(
            name, fail_at, mode, lambda: self._array(name).__setitem__(sel, block), new, self.attrs[name]
        )

    @precondition(lambda self: self.values)
    @rule(
        data=st.data(),
        rows=st.integers(1, 6),
        fail_at=st.integers(-1, 25),
        mode=st.sampled_from(["before", "after", "half"]),
    )
    def append(self, data, rows, fail_at, mode) -> None:
        name = data.draw(st.sampled_from(sorted(self.values)))
        cur = self.values[name]
        block = np.arange(rows * cur.shape[1], dtype="f8").reshape(rows, cur.shape[1]) + 100 * self.counter
        self.counter += 1
        new = np.concatenate([cur, block])
        self._step(name, fail_at, mode, lambda: self._array(name).append(block), new, self.attrs[name])

    @precondition(lambda self: self.values)
    @rule(
        data=st.data(),
        fail_at=st.integers(-1, 25),
        mode=st.sampled_from(["before", "after", "half"]),
    )
    def resize(self, data, fail_at, mode) -> None:
        name = data.draw(st.sampled_from(sorted(self.values)))
        cur = self.values[name]
        shape = (data.draw(st.integers(0, 10)), data.draw(st.integers(1, 8)))
        new = np.full(shape, FILL)
        keep = tuple(slice(0, min(a, b)) for a, b in zip(cur.shape, shape, strict=True))
        new[keep] = cur[keep]
        self._step(name, fail_at, mode, lambda: self._array(name).resize(shape), new, self.attrs[name])

    @precondition(lambda self: self.values)
    @rule(
        data=st.data(),
        value=st.integers(0, 9),
        fail_at=st.integers(-1, 6),
        mode=st.sampled_from(["before", "after"]),
    )
    def set_attribute(self, data, value, fail_at, mode) -> None:
        name = data.draw(st.sampled_from(sorted(self.values)))
        attrs = {**self.attrs[name], "n": value}

        def op() -> None:
            self._array(name).attrs["n"] = value

        self._step(name, fail_at, mode, op, self.values[name], attrs)

    @precondition(lambda self: self.values)
    @rule(
        data=st.data(),
        shape=st.tuples(st.integers(0, 8), st.integers(1, 6)),
        fail_at=st.integers(-1, 20),
        mode=st.sampled_from(["before", "after", "half"]),
    )
    def overwrite(self, data, shape, fail_at, mode) -> None:
        """create_array(overwrite=True) over an existing array, another layout, then filled."""
        name = data.draw(st.sampled_from(sorted(self.values)))
        layout = data.draw(st.sampled_from(sorted(LAYOUTS)))
        block = np.arange(np.prod(shape), dtype="f8").reshape(shape) - 3
        kw = self._create_kwargs(layout)

        def op() -> None:
            a = z3.create_array(
                self.store,
                name,
                shape=shape,
                dtype="f8",
                fill_value=FILL,
                attributes={"n": 5},
                overwrite=True,
                **kw,
            )
            a[...] = block

        # two steps: the creation (old or an all-fill array), then the write (fill or block)
        old = None if name not in self.values else (self.values[name].copy(), dict(self.attrs[name]))
        self.store.arm(fail_at, mode)
        try:
            op()
            error = None
        except Zarr3Error as e:
            error = e
        finally:
            self.store.disarm()
        allowed = [(block, {"n": 5})]
        if error is not None:
            allowed += [old, (np.full(shape, FILL), {"n": 5})]
            assert self.store.failed, repr(error)
            try:
                early = self._observe(name)
            except Zarr3Error:
                early = allowed[0]
            assert any(self._same(early, s) for s in allowed), (name, "before repair", early, allowed)
            z3.repair(self.store, all_writers=True)
        seen = self._observe(name)
        assert any(self._same(seen, s) for s in allowed), (name, error, seen, allowed)
        self.values[name], self.attrs[name] = seen
        self.layout[name] = layout

    # ---- invariants ------------------------------------------------------------------------
    @invariant()
    def every_array_reads_as_the_model(self) -> None:
        for name, want in self.values.items():
            seen = self._observe(name)
            assert self._same(seen, (want, self.attrs[name])), (name, seen, want)


ArrayModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
test_array_model = ArrayModel.TestCase


@pytest.mark.slow
def test_array_model_longer():
    """The same machine, more and longer runs."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        ArrayModel,
        settings=settings(
            max_examples=200,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )


# ---- datasets through to_zarr -----------------------------------------------------------------
def _dataset(times: np.ndarray, names: list[str], seed: int) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    data = {
        name: (("time", "x"), rng.integers(-9, 9, (len(times), 3)).astype("f4"), {"units": name})
        for name in names
    }
    return xr.Dataset(data, coords={"time": times, "x": [10, 20, 30]}, attrs={"seed": seed})


class DatasetModel(RuleBasedStateMachine):
    """A dataset written with ``to_zarr`` (appends, region writes, added and rewritten
    variables, whole rewrites) and the dataset it must read as, kept equal through failures of
    one store call per step."""

    def __init__(self) -> None:
        super().__init__()
        self.store = FailingStore()
        self.want: xr.Dataset | None = None
        self.seed = 0
        self.encoding: dict = {}

    @initialize(
        n=st.integers(1, 6),
        layout=st.sampled_from(["plain", "sharded", "consolidated-v2"]),
    )
    def first_write(self, n, layout) -> None:
        ds = _dataset(np.arange(n), ["a", "b"], 0)
        self.kw = {"zarr_format": 2, "consolidated": True} if layout == "consolidated-v2" else {}
        chunks = {"chunks": (2, 3)} if layout != "sharded" else {"chunks": (1, 3), "shards": (2, 3)}
        self.encoding = {"a": dict(chunks), "b": dict(chunks)}
        if layout == "consolidated-v2":
            self.encoding = {"a": {"chunks": (2, 3)}, "b": {"chunks": (2, 3)}}
        z3.to_zarr(ds, self.store, encoding=self.encoding, **self.kw)
        self.want = ds

    def _read(self) -> xr.Dataset:
        with xr.open_dataset(self.store, engine="zarr3") as ds:
            return ds.load()

    def _matches(self, got: xr.Dataset, want: xr.Dataset) -> bool:
        try:
            xr.testing.assert_identical(got, want)
        except AssertionError:
            return False
        return True

    def _step(self, fail_at: int, mode: str, write, new: xr.Dataset) -> None:
        old = self.want
        self.store.arm(fail_at, mode)
        try:
            write()
            error = None
        except Zarr3Error as e:
            error = e
        finally:
            self.store.disarm()
        if error is None:
            got = self._read()
            assert self._matches(got, new), (got, new)
            self.want = new
            return
        assert self.store.failed, f"a Zarr3Error without an injected failure: {error!r}"
        try:
            early = self._read()
        except Zarr3Error:
            early = None
        # v2 documents carry no in-flight marker: before repair a v2 reader may see a write's
        # values under the old documents (documented); v3 readers see old, new or a refusal
        if early is not None and not self.kw:
            assert self._matches(early, old) or self._matches(early, new), ("before repair", error, early)
        z3.repair(self.store, all_writers=True)
        got = self._read()
        if self._matches(got, new):
            self.want = new
        else:
            assert self._matches(got, old), (str(error), got, old, new)
        leftovers = [k for k in self.store.list_prefix(".z3-txn/") if "shape-claims" not in k]
        assert not leftovers, leftovers

    @rule(
        steps=st.integers(1, 3),
        fail_at=st.integers(-1, 30),
        mode=st.sampled_from(["before", "after", "half"]),
    )
    def append(self, steps, fail_at, mode) -> None:
        start = int(self.want.time[-1]) + 1 if self.want.sizes["time"] else 0
        self.seed += 1
        more = _dataset(np.arange(start, start + steps), list(self.want.data_vars), self.seed)
        more.attrs = self.want.attrs
        new = xr.concat([self.want, more], dim="time", data_vars="minimal")
        self._step(fail_at, mode, lambda: z3.to_zarr(more, self.store, append_dim="time"), new)

    @rule(data=st.data(), fail_at=st.integers(-1, 30), mode=st.sampled_from(["before", "after", "half"]))
    def region(self, data, fail_at, mode) -> None:
        n = self.want.sizes["time"]
        start = data.draw(st.integers(0, max(n - 1, 0)))
        stop = data.draw(st.integers(start + 1, max(n, start + 1)))
        if stop > n:
            return
        self.seed += 1
        part = _dataset(self.want.time.values[start:stop], list(self.want.data_vars), self.seed)
        new = self.want.copy(deep=True)
        for name in part.data_vars:
            new[name][start:stop] = part[name].values
        write = part.drop_vars(["x"]).drop_attrs()
        self._step(
            fail_at, mode, lambda: z3.to_zarr(write, self.store, region={"time": slice(start, stop)}), new
        )

    @rule(fail_at=st.integers(-1, 30), mode=st.sampled_from(["before", "after", "half"]))
    def add_or_overwrite_variable(self, fail_at, mode) -> None:
        self.seed += 1
        name = ["c", "a"][self.seed % 2]  # a new one, or one there already
        var = _dataset(self.want.time.values, [name], self.seed)
        new = self.want.copy()
        new[name] = var[name]
        new.attrs = dict(var.attrs)  # mode="a" writes the dataset's attributes (as xarray's engine)
        enc = {name: dict(self.encoding["a"])} if name not in self.want else None
        self._step(fail_at, mode, lambda: z3.to_zarr(var[[name]], self.store, mode="a", encoding=enc), new)

    @rule(n=st.integers(0, 5), fail_at=st.integers(-1, 40), mode=st.sampled_from(["before", "after", "half"]))
    def rewrite(self, n, fail_at, mode) -> None:
        self.seed += 1
        ds = _dataset(np.arange(n), ["a", "b"], self.seed)
        self._step(
            fail_at, mode, lambda: z3.to_zarr(ds, self.store, mode="w", encoding=self.encoding, **self.kw), ds
        )


DatasetModel.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
test_dataset_model = DatasetModel.TestCase
