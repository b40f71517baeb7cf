"""Shared holds on object storage (ObstoreStore on moto's S3 server): two adds to one group
commit at once, the first paused in its commit window, and an erase of the group still waits for
an add holding it shared (conditional puts, listings and deletes are the store's own)."""

from __future__ import annotations

import uuid

import pytest
from sample_data import small_dataset
from servers import s3_options
from store_doubles import PausesInCommit
from test_holds_shared import _after_claims, _stored, _Writer

import zarr3_backend as z3
from zarr3_backend.core.node_claims import CLAIMS_DIR
from zarr3_backend.stores import ObstoreStore


class _S3Paused(PausesInCommit, ObstoreStore):
    pass


@pytest.fixture
def store(moto):
    bucket = moto.create_bucket()
    url = f"s3://{bucket}/root-{uuid.uuid4().hex[:6]}"
    return _S3Paused(url, s3_options(moto.endpoint, zarr3={"commit_wait": 2}))


def test_two_adds_to_one_group_commit_at_once_on_s3(store):
    assert store.supports_conditional_writes
    z3.to_zarr(small_dataset(a=[1, 2, 3]), store, group="g", consolidated=False)
    store.pause_after = _after_claims
    first = _Writer(
        lambda: z3.to_zarr(small_dataset(x=[4, 5, 6]), store, group="g", mode="a", consolidated=False)
    )
    assert store.paused.wait(60)
    z3.to_zarr(small_dataset(y=[7, 8, 9]), store, group="g", mode="a", consolidated=False)
    assert not first.done.is_set() and not store.waiting.is_set()
    store.resume.set()
    first.join()
    assert _stored(store, "g") == {"a": [1, 2, 3], "x": [4, 5, 6], "y": [7, 8, 9]}
    assert not list(store.list_prefix(CLAIMS_DIR))


def test_an_erase_waits_for_an_add_holding_its_group_on_s3(store):
    z3.to_zarr(small_dataset(a=[1, 2, 3]), store, group="g", consolidated=False)
    store.pause_after = _after_claims
    adder = _Writer(
        lambda: z3.to_zarr(small_dataset(x=[4, 5, 6]), store, group="g", mode="a", consolidated=False)
    )
    assert store.paused.wait(60)
    eraser = _Writer(
        lambda: z3.to_zarr(small_dataset(b=[7, 8, 9]), store, group="g", mode="w", consolidated=False)
    )
    assert store.waiting.wait(60)  # the eraser meets the adder's shared hold
    assert not eraser.done.is_set()
    store.resume.set()
    adder.join()
    eraser.join()
    assert _stored(store, "g") == {"b": [7, 8, 9]}
    assert not list(store.list_prefix(CLAIMS_DIR))
