"""One sparkctl run per machine at a time.

Two runs against the same cluster would interleave network changes and
collective tests. Two *inventories* can describe the same machines (the lab's
``sim.ini`` and ``sim-two-groups.ini`` both name its four Sparks), so the lock
is not on the inventory file but on every host it names: one ``flock`` per
management address under the state directory. A run takes all of its hosts'
locks or none (non-blocking, in sorted order), so two runs never deadlock and
never share a host. The kernel releases a flock when the process dies, so a
crash never leaves a stale lock. Each file records who holds it, for the
"already running (command, pid, since)" message.

Within one process the lock is re-entrant: ``sparkctl up`` holds the hosts for
the whole job while provision, validate and serve take them again inside it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import state_dir

if TYPE_CHECKING:
    from sparkctl.inventory import Inventory


@dataclass(frozen=True)
class _Held:
    fd: int
    count: int


_held: dict[Path, _Held] = {}
_guard = threading.Lock()


def lock_dir() -> Path:
    return state_dir() / "locks"


def host_lock_path(address: str) -> Path:
    return lock_dir() / f"host-{re.sub(r'[^A-Za-z0-9.:_-]', '_', address)}.lock"


def hosts_of(inv: Inventory) -> list[tuple[str, str]]:
    """(name, management address) of every host the inventory names."""
    hosts = [(n.name, n.mgmt_ip) for n in inv.nodes]
    if inv.switch is not None:
        hosts.append((inv.switch.name, inv.switch.mgmt_ip))
    return hosts


@contextmanager
def inventory_lock(inv: Inventory | Path, command: str) -> Iterator[None]:
    """Hold every host of ``inv`` for ``command``, or fail at once with exit 6."""
    if isinstance(inv, Path):
        from sparkctl import inventory  # noqa: PLC0415

        inv = inventory.load(inv)
    with host_locks(hosts_of(inv), command, str(inv.path)):
        yield


@contextmanager
def host_locks(hosts: Sequence[tuple[str, str]], command: str, inventory: str) -> Iterator[None]:
    taken: list[Path] = []
    try:
        for name, address in sorted(set(hosts), key=lambda h: h[1]):
            path = host_lock_path(address)
            _acquire(path, name, address, command, inventory)
            taken.append(path)
        yield
    finally:
        for path in reversed(taken):
            _release(path)


def _acquire(path: Path, name: str, address: str, command: str, inventory: str) -> None:
    with _guard:
        held = _held.get(path)
        if held is not None:  # this process holds it already (sparkctl up)
            _held[path] = _Held(held.fd, held.count + 1)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SparkctlError(
                f"{name} ({address}) is in use by another sparkctl run: {holder(path)}",
                ExitCode.LOCKED,
                hint="wait for it to finish; the lock goes away when that process ends",
            ) from None
        os.ftruncate(fd, 0)
        os.write(
            fd,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "command": command,
                    "inventory": inventory,
                    "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                }
            ).encode(),
        )
        _held[path] = _Held(fd, 1)


def _release(path: Path) -> None:
    with _guard:
        held = _held.pop(path)
        if held.count > 1:
            _held[path] = _Held(held.fd, held.count - 1)
        else:
            os.close(held.fd)  # closing releases the flock


def holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "already running"
    where = f" of {info['inventory']}" if info.get("inventory") else ""
    return (
        f"already running ({info.get('command', 'sparkctl')}{where}, "
        f"pid {info.get('pid', '?')}, since {info.get('since', '?')})"
    )
