"""Writer identities: a live process is never judged dead, a finished one always is."""

import subprocess
import sys

from zarr3_backend._owner import Owner, current_owner, token_is_dead


def _finished_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_current_process_is_alive():
    me = current_owner()
    assert not me.is_dead()
    assert not token_is_dead(me.token())
    assert Owner.from_json(me.to_json()) == me


def test_finished_process_is_dead():
    me = current_owner()
    gone = Owner(me.host, me.boot, _finished_pid(), me.start)
    assert gone.is_dead()
    assert token_is_dead(gone.token())


def test_reused_pid_with_other_start_time_is_dead():
    me = current_owner()
    assert Owner(me.host, me.boot, me.pid, "1").is_dead()


def test_other_host_never_judged_dead():
    me = current_owner()
    assert not Owner(me.host + "-elsewhere", me.boot, _finished_pid(), me.start).is_dead()


def test_malformed_token_is_not_dead():
    assert not token_is_dead("not-a-token")
