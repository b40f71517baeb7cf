"""Store test doubles shared by several test modules (a plain module, imported by name)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from zarr3_backend.core.node_claims import CLAIMS_DIR, SHARED_DIR
from zarr3_backend.stores import MemoryStore


class RecordingStore(MemoryStore):
    """A MemoryStore that records the keys it was asked to write, in order."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.writes: list[str] = []

    def set(self, key, value):
        self.writes.append(key)
        super().set(key, value)

    def set_many(self, items):
        self.writes.extend(items)
        super().set_many(items)

    def move(self, src, dst):
        self.writes.append(dst)
        super().move(src, dst)

    def set_if(self, key, value, expected):
        self.writes.append(key)
        return super().set_if(key, value, expected)


class ChunkWriteFailingStore(MemoryStore):
    """A MemoryStore whose ``fail_at``-th write of a chunk or shard (staged or in place; counted
    while ``armed``) raises ``error(key)``, as a full disk or a store outage would."""

    def __init__(
        self, fail_at: int, error: Callable[[str], BaseException], *args, armed: bool = True, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.fail_at, self.error, self.armed = fail_at, error, armed
        self.chunk_writes = 0

    def _count(self, keys):
        for key in keys:
            if self.armed and re.search(r"(^|/)c(/|$)", key):
                self.chunk_writes += 1
                if self.chunk_writes == self.fail_at:
                    raise self.error(key)

    def set(self, key, value):
        self._count([key])
        super().set(key, value)

    def set_many(self, items):
        self._count(list(items))
        super().set_many(items)


class CommitHookedStore(MemoryStore):
    """A MemoryStore that runs ``hook`` once, just before the first transaction manifest is
    written: another writer committing while this one's values are staged."""

    hook: Callable[[], object] | None = None

    def set(self, key, value):
        if key.endswith("manifest.json") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().set(key, value)


class SnapshotOnSetStore(MemoryStore):
    """Snapshots its keys and values right after the first ``set`` whose key ``when`` picks
    (what a writer killed then leaves behind)."""

    when: Callable[[str], bool] | None = None
    snapshot: dict | None = None

    def set(self, key, value):
        super().set(key, value)
        if self.when is not None and self.snapshot is None and self.when(key):
            self.snapshot = dict(self._data)


class PausedAfterMove(MemoryStore):
    """Runs ``other`` in a thread once the calling writer's staged values are moved into place
    (its documents not yet written), and lets that writer go on when ``other`` has erased what
    it replaces, or waits on a claim: the window in which the two used to interleave."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.race: dict = {"other": None, "thread": None, "reached": threading.Event()}

    def _in_other(self) -> bool:
        return threading.current_thread() is self.race["thread"]

    def move_prefix(self, src, dst):
        super().move_prefix(src, dst)
        other = self.race["other"]
        if other is not None and not self._in_other():
            self.race["other"] = None
            self.race["thread"] = threading.Thread(target=other)
            self.race["thread"].start()
            assert self.race["reached"].wait(60)

    def set(self, key, value):
        super().set(key, value)
        if self._in_other() and key.endswith("/erased"):  # its erases are done
            self.race["reached"].set()

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if self._in_other() and not ok and key.startswith(CLAIMS_DIR):  # it waits on a claim
            self.race["reached"].set()
        return ok

    def list_prefix(self, prefix):
        keys = list(super().list_prefix(prefix))
        if self._in_other() and keys and prefix.startswith(SHARED_DIR):  # it meets shared holds
            self.race["reached"].set()
        return iter(keys)


def judge_dead(monkeypatch, store) -> None:
    """Every write with records in ``store`` is from now on judged dead (as after its process
    was killed)."""
    from zarr3_backend.core import commit, node_claims

    ids = set(commit.pending_writes(store)) | {
        (store.get(k) or b"").decode() for k in store.list_prefix(CLAIMS_DIR)
    }
    real = commit.writer_is_dead
    fake = lambda txn_id: txn_id in ids or real(txn_id)  # noqa: E731
    monkeypatch.setattr(commit, "writer_is_dead", fake)
    monkeypatch.setattr(node_claims, "writer_is_dead", fake)


class ErasedAfterCommit(MemoryStore):
    """Once a write's commit is done (its manifest removed, every document written), keeps a
    snapshot of its keys (``committed``) and erases every key under ``erase_below`` at once, as
    another writer's ``mode="w"`` landing right after the commit would."""

    erase_below: str | None = None
    committed: dict | None = None

    def erase(self, key):
        super().erase(key)
        if self.erase_below is not None and key.endswith("/manifest.json"):
            prefix, self.erase_below = self.erase_below, None
            self.committed = dict(self._data)
            self.erase_many(list(self.list_prefix(prefix)))


class PausesInCommit:
    """Mixed into a store (before it): pauses the first write that stores a key
    ``pause_after(key)`` picks, right after that ``set``, until ``resume`` is set (``paused`` is
    set meanwhile); the other threads go on.
    ``waiting`` is set when another thread meets a claim another write holds: its conditional
    write of an exclusive claim refused, its shared hold withdrawn, or, holding an exclusive
    claim, shared holds of that document listed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)  # the store's own
        self.pause_after: Callable[[str], bool] | None = None
        self.paused, self.resume, self.waiting = threading.Event(), threading.Event(), threading.Event()
        self.paused_thread: threading.Thread | None = None

    def _other(self) -> bool:
        return self.paused.is_set() and threading.current_thread() is not self.paused_thread

    def set(self, key, value):
        super().set(key, value)
        if self.pause_after is not None and self.pause_after(key):
            self.pause_after = None
            self.paused_thread = threading.current_thread()
            self.paused.set()
            assert self.resume.wait(60)

    def set_if(self, key, value, expected):
        ok = super().set_if(key, value, expected)
        if self._other() and not ok and key.startswith(CLAIMS_DIR) and not key.startswith(SHARED_DIR):
            self.waiting.set()
        return ok

    def erase(self, key):
        super().erase(key)
        if self._other() and key.startswith(SHARED_DIR):  # a shared hold withdrawn
            self.waiting.set()

    def list_prefix(self, prefix):
        keys = list(super().list_prefix(prefix))
        if self._other() and keys and prefix.startswith(SHARED_DIR) and prefix != SHARED_DIR:
            self.waiting.set()  # an eraser draining the shared holds of a document
        return iter(keys)


class PausedInCommit(PausesInCommit, MemoryStore):
    """A MemoryStore that pauses a writer in its commit window (``PausesInCommit``)."""


class PausedInEraseGap(MemoryStore):
    """While the calling writer (an erase) writes its manifest, the nodes it holds already
    listed: ``add()`` runs and commits, then ``racer()`` (an append, a resize: a write into what
    ``add`` made) starts in a thread and pauses right after its claims are checked, until the
    erase is done (its manifest removed) or the erase meets the racer's shared hold."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add = self.racer = None
        self.thread = None
        self.checked, self.resume = threading.Event(), threading.Event()
        self.eraser = None

    def set(self, key, value):
        if key.endswith("/manifest.json") and self.add is not None:
            add, self.add = self.add, None
            add()
            self.thread = threading.Thread(target=self.racer)
            self.thread.start()
            assert self.checked.wait(60)
            self.eraser = threading.current_thread()
        super().set(key, value)
        if key.endswith("/claims-checked") and threading.current_thread() is self.thread:
            self.checked.set()
            assert self.resume.wait(60)

    def erase(self, key):
        super().erase(key)
        if key.endswith("/manifest.json") and threading.current_thread() is self.eraser:
            self.eraser = None
            self.resume.set()
            self.thread.join(60)

    def list_prefix(self, prefix):
        keys = list(super().list_prefix(prefix))
        if (
            keys
            and prefix.startswith(SHARED_DIR)
            and prefix != SHARED_DIR
            and threading.current_thread() is self.eraser
        ):
            self.resume.set()  # the erase waits for the racer's shared hold: let it go on
        return iter(keys)
