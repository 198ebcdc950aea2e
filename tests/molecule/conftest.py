"""The molecule scenarios run in the background, beside the lab tests that wait more than
they compute.

``molecule test`` of one role takes one to three minutes, most of it Ansible in the
scenario's containers. When collection ends and molecule scenarios are selected on a
machine that can run them, one thread runs them one after the other (each destroyed
again unless it passed), at nice 10, and each ``test_molecule_scenario`` (ordered after
the lab tests, tests/conftest.py) waits for its own scenario's result. The thread starts
its first scenario once no test that measures bandwidth (quiet_host) or reads every
process of the host (host_processes) is left (tests/background.py, QUIET_OVER): those
run first, and then the serving lab's fault tests, the watchdog's and the TP groups'
run beside the scenarios. SPARKCTL_MOLECULE_BACKGROUND=0 runs each scenario inside its
test instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.background import QUIET_OVER, RUNNING, START_ENV, Background
from tests.conftest import REPO, lab_image, lab_unavailable

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
MOLECULE = VENV_BIN / "molecule"
NICE = 10  # the scenarios' niceness: they yield to the lab tests beside them
TIMEOUT = 1800  # seconds for one `molecule test`; a scenario takes one to three minutes


def unavailable() -> str | None:
    reason = lab_unavailable()
    if reason is None and not MOLECULE.exists():
        reason = f"molecule is not installed in {VENV_BIN} (pip install -e '.[dev]')"
    return reason


def molecule_env() -> dict[str, str]:
    """The environment molecule runs in: lab image, project podman settings, the venv first.
    Builds the lab node image when it is missing."""
    from sparkctl_lab.podman import CONTAINERS_CONF  # noqa: PLC0415

    image = lab_image()  # shared with the lab's bring-up, which starts at the same time
    return {
        **START_ENV,  # not os.environ: unit tests change it meanwhile
        "SPARKCTL_LAB_IMAGE": image,
        # runc and lowered ulimits for every podman call, molecule's and Ansible's.
        "CONTAINERS_CONF": str(CONTAINERS_CONF),
        # molecule runs ansible-config, ansible-playbook and pytest by name.
        "PATH": f"{VENV_BIN}{os.pathsep}{START_ENV.get('PATH', '')}",
        "ANSIBLE_FORCE_COLOR": "0",
        "PY_COLORS": "0",
        "NO_COLOR": "1",
    }


@dataclass(frozen=True)
class Scenario:
    """How one role's ``molecule test`` ended."""

    role: str
    outcome: str  # "passed", "failed (exit N)", "timed out after N s", ...
    seconds: float
    log: Path

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def run_scenario(
    role: str,
    env: Mapping[str, str],
    log: Path,
    started: list[subprocess.Popen[bytes]] | None = None,
) -> Scenario:
    """``molecule test`` in roles/<role>, then ``molecule destroy`` unless it passed.

    A scenario that passed ran its own sequence's last step, ``destroy``; anything else
    (a failed step, a timeout, an interrupt) may have left its instances behind, so they
    are destroyed again here. A second destroy after a pass would only cost another
    molecule and ansible-playbook start beside the lab tests."""
    cwd = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / role
    began = time.monotonic()
    outcome = "did not finish"
    try:
        with log.open("w") as out:
            # stdin is /dev/null of molecule's own: ansible-core refuses to run
            # ("Ansible requires blocking IO on stdin/stdout/stderr") when the
            # stdin it inherits is non-blocking, and pytest's stdin is shared
            # with every background job of the session, any of which may set
            # O_NONBLOCK on it (seen in CI: roce_fabric's create failed so).
            # At nice 10, as scripts/test.sh's first pass: molecule and its
            # ansible-playbook yield to the lab tests' own on the controller. Its
            # containers inherit the niceness but are cgroups of their own, and compete
            # with the lab's nodes as equals (docs/benchmarks.md, "The test suite"):
            # what keeps them off the measuring tests is QUIET_OVER, below.
            proc = subprocess.Popen(
                ["nice", "-n", str(NICE), str(MOLECULE), "test"],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            if started is not None:
                started.append(proc)
            try:
                code = proc.wait(timeout=TIMEOUT)
                outcome = "passed" if code == 0 else f"failed (exit {code})"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                outcome = f"timed out after {TIMEOUT} s"
    finally:
        if outcome != "passed":
            # A failure, a timeout or an interrupt: the instances go all the same.
            subprocess.run(
                [str(MOLECULE), "destroy"],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=300,
                check=False,
            )
    return Scenario(role, outcome, time.monotonic() - began, log)


class ScenarioQueue:
    """Every selected scenario, one after the other, on one background thread."""

    def __init__(self, roles: Sequence[str], logs: Path) -> None:
        self.roles = list(roles)
        self.logs = logs
        self.results: dict[str, Scenario | BaseException] = {}
        self.ready = {role: threading.Event() for role in self.roles}
        self.stopping = threading.Event()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.work = Background(self._run)

    def _run(self) -> None:
        try:
            env = molecule_env()
        except BaseException as exc:  # every scenario's test reports it
            for role in self.roles:
                self.results[role] = exc
                self.ready[role].set()
            return
        # Not before the last test that measures bandwidth or reads every process is over
        # (tests/background.py, QUIET_OVER); an ended session ends the wait.
        while not QUIET_OVER.wait(1) and not self.stopping.is_set():
            pass
        for role in self.roles:
            try:
                if self.stopping.is_set():
                    raise RuntimeError("the test session ended before this scenario ran")
                self.results[role] = run_scenario(
                    role, env, self.logs / f"molecule-{role}.log", self.procs
                )
            except BaseException as exc:
                self.results[role] = exc
            finally:
                self.ready[role].set()

    def wait(self, role: str) -> Scenario:
        self.ready[role].wait()
        result = self.results[role]
        if isinstance(result, BaseException):
            raise result
        return result

    def stop(self) -> None:
        """The session is over (or interrupted): end the running scenario, let it clean up."""
        self.stopping.set()
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        self.work.thread.join(timeout=360)


SEQUENCE: list[ScenarioQueue] = []  # the one running in this session, if any


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.testsfailed:  # a collection error ends the session before any test
        return
    roles = [
        item.callspec.params["role"]
        for item in session.items
        if Path(str(item.path)).resolve().is_relative_to(HERE)
        and hasattr(item, "callspec")
        and "role" in item.callspec.params
    ]
    if (
        not roles
        or session.config.option.collectonly
        or os.environ.get("SPARKCTL_MOLECULE_BACKGROUND") == "0"
        or unavailable() is not None
    ):
        return  # nothing to run, or each test runs (or skips, or fails) on its own
    logs = Path(tempfile.mkdtemp(prefix="sparkctl-molecule-"))
    sequence = ScenarioQueue(roles, logs)
    SEQUENCE.append(sequence)
    RUNNING["molecule"] = sequence.work


def pytest_sessionfinish(session: pytest.Session) -> None:
    for sequence in SEQUENCE:
        sequence.stop()
