"""Hypothesis fuzzing of v3 consolidated metadata (``consolidated_metadata`` in the root
``zarr.json``) whose members contradict their own documents: other shapes, data types, codecs,
node types, members that do not exist, paths that are not node paths, entries of the wrong type.

A reader that trusts the consolidated copy opens the member from it; the stored chunks are the
real document's. Reads, writes, listings and ``consolidate_metadata`` (which rebuilds the copy)
must end in success or a ``Zarr3Error``.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import zarr3_backend as z3
from tests.test_corruption import _memory_cap  # noqa: F401  (autouse: caps the address space)
from tests.test_fuzz_layout import _SETTINGS, _typed, _warm_pools, budget  # noqa: F401  (autouse)
from tests.test_fuzz_metadata import _SCALARS, _mutate


def _base() -> tuple[dict[str, bytes], dict[str, Any]]:
    """A consolidated hierarchy's files, and its root document (parsed)."""
    store = z3.MemoryStore()
    g = z3.open_group(store, mode="w")
    a = g.create_array("a", shape=(6, 4), dtype="int32", chunks=(3, 2))
    a[...] = np.arange(24, dtype="int32").reshape(6, 4)
    b = g.create_group("g").create_array("b", shape=(8,), dtype="float64", chunks=(4,), shards=(8,))
    b[...] = np.arange(8.0)
    z3.consolidate_metadata(store)
    files = {k: bytes(store.get(k)) for k in store.list()}
    return files, json.loads(files["zarr.json"])


FILES, ROOT = _base()
MEMBERS = sorted(ROOT["consolidated_metadata"]["metadata"])
_PATHS = ["a", "g", "g/b", "nope", "g/nope", "", "/", "a/", "/a", "../a", "a/../g", "g//b", "a/x", 5]


@st.composite
def consolidated_roots(draw: st.DrawFn) -> dict[str, Any]:
    """The root document with its consolidated members damaged, swapped, added or removed."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    root = copy.deepcopy(ROOT)
    members = root["consolidated_metadata"]["metadata"]
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.integers(0, 5))
        name = draw(st.sampled_from(MEMBERS))
        if action == 0:  # the seed document mutated as the metadata fuzzer mutates documents
            members[name] = _mutate(ROOT["consolidated_metadata"]["metadata"][name], rng)
        elif action == 1:  # another member's document under this name (array <-> group, shapes)
            members[name] = copy.deepcopy(
                ROOT["consolidated_metadata"]["metadata"][draw(st.sampled_from(MEMBERS))]
            )
        elif action == 2:
            members.pop(name, None)
        elif action == 3:  # a member under a path that is not a node, or not a node path
            path = draw(st.sampled_from(_PATHS))
            if isinstance(path, str):
                members[path] = copy.deepcopy(ROOT["consolidated_metadata"]["metadata"][name])
        elif (
            action == 4
            and isinstance(members.get(name), dict)
            and isinstance(members[name].get("shape"), list)
        ):
            members[name]["shape"] = [draw(st.integers(0, 40)) for _ in members[name]["shape"]]
        else:
            root["consolidated_metadata"] = draw(
                st.one_of(
                    st.sampled_from(_SCALARS),
                    st.just({"kind": "inline", "must_understand": False, "metadata": members}),
                    st.just({"kind": "inline", "metadata": list(members)}),
                    st.just({"kind": "other", "must_understand": False}),
                )
            )
            break
    return root


@settings(max_examples=budget(400), **_SETTINGS)
@given(root=consolidated_roots(), use=st.sampled_from([None, True, False]))
def test_consolidated_members_contradicting_their_documents(root, use):
    store = z3.MemoryStore()
    for key, value in FILES.items():
        store.set(key, value)
    # stored as written, bare NaN included (zarr-python writes NaN attributes so; the commit
    # spells them when it rewrites the root: test_commit_protocol)
    store.set("zarr.json", json.dumps(root).encode())
    group = _typed(z3.open_group, store, mode="r", use_consolidated=use)
    if group is not None:
        _typed(group.members, max_depth=None)
        _typed(group.tree)
        _typed(lambda: group.info)
        for name in ("a", "g", "g/b", "nope", "a/x"):
            node = _typed(group.__getitem__, name)
            if isinstance(node, z3.Array) and node.nbytes <= 2**20:
                _typed(lambda node=node: node[...])
            if node is not None:
                _typed(group.__contains__, name)
    for path in ("a", "g/b"):
        a = _typed(z3.open_array, store, path=path, mode="r+")
        if a is not None and a.nbytes <= 2**20:
            got = _typed(lambda a=a: a[...])
            if got is not None:
                _typed(a.__setitem__, ..., got)
    _typed(z3.consolidate_metadata, store)
    writable = _typed(z3.open_group, store, mode="r+")
    if writable is not None:
        _typed(writable.attrs.__setitem__, "fuzz", 1)
