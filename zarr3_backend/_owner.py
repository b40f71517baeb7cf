"""Who is writing: an identity for this process that another process can test for liveness.

Temporary files and in-flight write records carry it, so that the next writer removes what dead
writers left behind and never what a live writer is still using. A process is named by its host,
the host's boot, its pid and its start time (pids are reused; start times are not).
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from dataclasses import dataclass


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:  # not Linux: the boot cannot be told apart, the start time still can
        return ""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), ``""`` where unknown, ``None``
    when no process ``pid`` exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return stat[stat.rfind(b")") + 2 :].split()[19].decode()


@dataclass(frozen=True)
class Owner:
    """One writing process: host, boot, pid and start time."""

    host: str
    boot: str
    pid: int
    start: str

    def token(self) -> str:
        """A short file-name-safe form (``pid-start-bootprefix``) for temporary names."""
        return f"{self.pid}-{self.start or 'x'}-{(self.boot or 'x')[:8]}"

    def to_json(self) -> dict:
        """The JSON form stored in in-flight write records."""
        return {"host": self.host, "boot": self.boot, "pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, doc: dict) -> Owner:
        """Parse :meth:`to_json`'s form (raises KeyError/TypeError on a malformed record)."""
        return cls(str(doc["host"]), str(doc["boot"]), int(doc["pid"]), str(doc["start"]))

    def is_dead(self) -> bool:
        """True only when this process certainly no longer runs: same host and boot, and no
        process with its pid and start time. A writer on another host is never judged dead."""
        me = current_owner()
        if self.host != me.host:
            return False
        if self.boot and me.boot and self.boot != me.boot:
            return True  # the machine rebooted since: every process of that boot is gone
        start = _start_time(self.pid)
        if start is None:
            return True
        return bool(self.start) and bool(start) and start != self.start


@functools.cache
def _owner_for(pid: int) -> Owner:
    return Owner(socket.gethostname(), _boot_id(), pid, _start_time(pid) or "")


def current_owner() -> Owner:
    """This process (recomputed after a fork: the pid is part of the cache key)."""
    return _owner_for(os.getpid())


def token_is_dead(token: str) -> bool:
    """Whether the writer named by :meth:`Owner.token` (on this host) is certainly gone."""
    try:
        pid_s, start, boot = token.split("-", 2)
        pid = int(pid_s)
    except ValueError:
        return False
    me = current_owner()
    if boot != "x" and me.boot and not me.boot.startswith(boot):
        return True
    now = _start_time(pid)
    if now is None:
        return True
    return start != "x" and bool(now) and now != start


@functools.cache
def host_tag(host: str | None = None) -> str:
    """A short file-name-safe tag of a host name (this host's by default): tokens name pid,
    start time and boot but not the host, and a shared store is written from many hosts."""
    name = socket.gethostname() if host is None else host
    return hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
