"""pytest plugin for benchmarks/unit_suite.py: each test's wall time and CPU time.

CPU is the pytest process's own (all its threads) plus that of the children it reaped
during the test (subprocess.run, Popen.wait): on a shared machine wall time says how
busy the machine was, CPU time what the test itself cost. Rows go to the TSV file named
by $SPARKCTL_CPUTIME_OUT: node id, wall s, own CPU s, children's CPU s.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_ROWS: list[tuple[str, float, float, float]] = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    begun = time.monotonic()
    own, children = _cpu()
    yield
    own_after, children_after = _cpu()
    _ROWS.append(
        (item.nodeid, time.monotonic() - begun, own_after - own, children_after - children)
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("SPARKCTL_CPUTIME_OUT")
    if out:
        Path(out).write_text(
            "".join(
                f"{node}\t{wall:.3f}\t{own:.3f}\t{children:.3f}\n"
                for node, wall, own, children in _ROWS
            )
        )
