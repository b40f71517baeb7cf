"""Temporary files of writers killed mid-write (``kill -9``) are removed by the next write into
their directory; a live writer's never are."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from zarr3_backend._owner import current_owner
from zarr3_backend.stores import LocalStore
from zarr3_backend.stores.local import TEMP_PREFIX

# A writer that stops for good halfway through writing its temporary file.
HANGING_WRITER = """
import os, sys, time
from zarr3_backend.stores import local

def hang(fd, value):
    os.write(fd, bytes(value)[:10])
    print("writing", flush=True)
    time.sleep(600)

local._write_all = hang
local.LocalStore(sys.argv[1]).set("a/c/0", b"x" * 100)
"""


def temp_files(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX))


def test_temp_files_of_a_killed_writer_are_removed_and_a_live_ones_kept(tmp_path):
    root = tmp_path / "data.zarr"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", HANGING_WRITER, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout.readline().strip() == "writing"
        chunks = root / "a" / "c"
        [theirs] = temp_files(chunks)
        tag, token, _ = theirs[len(TEMP_PREFIX) :].split(".")
        assert token.startswith(f"{child.pid}-")  # named after its writer
        mine = chunks / f"{TEMP_PREFIX}{tag}.{current_owner().token()}.feed"  # this live process's
        mine.write_bytes(b"in flight")
        dead_pid = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
        )
        # a writer on another host (same token form, other host tag) is never judged from here
        remote = chunks / f"{TEMP_PREFIX}00000000.{int(dead_pid.stdout)}-1-x.feed"
        remote.write_bytes(b"in flight elsewhere")

        LocalStore(root).set("a/c/1", b"1")  # the writer is alive: its file stays
        assert temp_files(chunks) == sorted([theirs, mine.name, remote.name])

        later = LocalStore(root)
        later.set("a/c/2", b"2")  # this store object has now looked at a/c once
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        later.set("a/c/3", b"3")  # no second scan of a/c by the same store object
        assert temp_files(chunks) == sorted([theirs, mine.name, remote.name])

        LocalStore(root).set("a/c/4", b"4")  # the next store object's first write removes it
        assert temp_files(chunks) == sorted([mine.name, remote.name])  # never a live or remote writer's
        assert sorted(LocalStore(root).list()) == [f"a/c/{i}" for i in range(1, 5)]
        assert not (chunks / "0").exists()  # the killed write never landed
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def test_repair_removes_dead_writers_temp_files_everywhere_and_keeps_live_ones(tmp_path):
    """``zarr3_backend.repair`` sweeps the whole store (a write sweeps only where it writes)."""
    import zarr3_backend as z3
    from zarr3_backend.stores.local import _temp_name

    root = tmp_path / "data.zarr"
    (root / "a" / "c" / "7").mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    mine = _temp_name()
    tag = mine[len(TEMP_PREFIX) :].split(".")[0]
    dead = f"{TEMP_PREFIX}{tag}.{int(gone.stdout)}-1-x.beef"
    (root / "a" / "c" / "7" / dead).write_bytes(b"torn")
    (root / "a" / mine).write_bytes(b"in flight")  # this live process's
    z3.repair(str(root))
    assert not (root / "a" / "c" / "7" / dead).exists()
    assert (root / "a" / mine).exists()
