"""Work the suite starts when collection ends and joins where it is needed.

The unit tests run first (tests/conftest.py orders the phases) and keep one of the
machine's cores busy; what later phases need and what waits on the disk, the network
or a second core runs beside them: the contract venv and its aarch64 resolutions
(tests/contract/conftest.py), the molecule scenarios (tests/molecule/conftest.py)
and the lab's bring-up (tests/conftest.py).
A test that needs a result joins it; an error raised in the background is raised
again there, so a failure is reported by the test it belongs to.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

# The environment the session started with, before any test changed os.environ: work
# on a background thread starts its processes with this (a unit test's monkeypatched
# SPARKCTL_STATE_DIR or PATH must not reach the lab's bring-up or a molecule scenario).
START_ENV: dict[str, str] = dict(os.environ)


class Background:
    """One piece of work on a daemon thread, started at once, joined on first use."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # re-raised in the test that needs it
            self.error = exc

    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, timeout: float | None = None) -> Any:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"background work still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


# Background work other phases must wait for, by name: "lab" (the lab fixture joins its
# bring-up) and "molecule" (the lab tests that measure bandwidth, marked quiet_host, wait
# for the scenarios, so no scenario's containers share the host with them).
RUNNING: dict[str, Background] = {}

# Set once no test that measures (quiet_host) or reads every process (host_processes) is
# left to run (tests/conftest.py): the molecule scenarios start then, beside the lab tests
# after the last of those, which wait on the lab more than they compute.
QUIET_OVER = threading.Event()


def wait_for(name: str) -> None:
    """Wait until the named background work is over (its errors belong to its tests)."""
    work = RUNNING.get(name)
    if work is not None:
        work.thread.join()
