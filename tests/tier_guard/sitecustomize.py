"""The unit tier's guard, in every Python process the tests start.

tests/conftest.py installs :func:`install` in pytest's own process and puts this
directory on PYTHONPATH, so Python processes started from a test (``sparkctl`` run as a
command, a script) import it as ``sitecustomize`` and install it too. While a test of
``tests/unit/`` runs (``PYTEST_CURRENT_TEST``, which pytest sets and subprocesses
inherit), starting ansible-playbook, molecule or a container engine from the test's
thread fails: the unit tier never does. What it refused is appended to
``SPARKCTL_TIER_GUARD_LOG``, so a test that swallowed the error fails in its teardown
all the same (tests/unit/conftest.py).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

FORBIDDEN = frozenset({"ansible-playbook", "ansible", "molecule", "podman", "runc", "buildah"})
EVENTS = frozenset({"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"})
UNIT = "tests/unit/"


def _programs(args: tuple[Any, ...]) -> list[str]:
    """The program and, for ``python script``, the script: the names that would run."""
    executable, argv = args[0], args[1] if len(args) > 1 else ()
    names = [os.fsdecode(executable)] if executable is not None else []
    if isinstance(argv, Sequence) and not isinstance(argv, str | bytes):
        names += [os.fsdecode(a) for a in list(argv)[:2] if isinstance(a, str | bytes)]
    # os.path, not pathlib: this runs at the start of every Python process a test starts.
    return [os.path.basename(n) for n in names]  # noqa: PTH119


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in EVENTS or not os.environ.get("PYTEST_CURRENT_TEST", "").startswith(UNIT):
        return
    # A test runs on the main thread; the session's background work (the molecule
    # scenarios, the lab's bring-up, the contract venv) starts its processes from threads
    # of its own while a unit test may be running. os.exec fires in a forked child, where
    # the forking thread has become the main one.
    if event != "os.exec" and threading.current_thread() is not threading.main_thread():
        return
    hit = next((p for p in _programs(args) if p in FORBIDDEN), None)
    if hit is None:
        return
    test = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    log = os.environ.get("SPARKCTL_TIER_GUARD_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:  # noqa: PTH123 (as above)
            out.write(f"{test}\t{hit}\n")
    raise OSError(
        errno.EPERM, f"the unit tier never starts {hit} (tests/tier_guard): move {test} to a tier"
    )


def install() -> None:
    if not getattr(sys, "_sparkctl_tier_guard", False):
        sys.addaudithook(_hook)
        sys._sparkctl_tier_guard = True  # type: ignore[attr-defined]


install()
