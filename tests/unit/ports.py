"""Loopback ports for tests that start a server on a port chosen beforehand.

Binding port 0 and closing the socket hands out a port from the kernel's ephemeral
range (net.ipv4.ip_local_port_range, 32768-60999 by default), where any outgoing
connection of another test may take it before the server binds it; under pytest-xdist
another worker may also be handed the same one. These ports come from below that range,
from a block of their own per xdist worker (PYTEST_XDIST_WORKER, gw0, gw1, ...), and are
checked free by binding them.
"""

from __future__ import annotations

import os
import random
import socket

BASE = 20000  # below the ephemeral range
BLOCK = 2000  # ports per worker: gw0 20000-21999, gw1 22000-23999, ...


def _worker() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


def free_port() -> int:
    """A loopback port nothing listens on now, from this worker's block."""
    start = BASE + BLOCK * (_worker() % 6)
    ports = list(range(start, start + BLOCK))
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {start}-{start + BLOCK - 1}")
