"""Every role's molecule scenario: ``molecule test`` in ``roles/<role>``, one test per role.

Each scenario (roles/<role>/molecule/default, base config .config/molecule/)
creates its own instances - systemd containers of the lab node image named
mol-<role>-N on a network of its own - dresses them like Sparks, converges
the role, converges it again (idempotence), verifies with testinfra and
removes them. It never touches the shared rehearsal lab (spark1..4,
lab-switch) and does not use the ``lab`` fixture.

Needs what the lab needs (root, podman, the wiring tools; see
tests/conftest.py ``lab_unavailable``) plus molecule (the ``dev`` extra):
without them the tests skip, and with SPARKCTL_REQUIRE_LAB=1 (CI) they fail.
The node image is built when missing (about 100 s, then cached). Each
scenario is destroyed again in a ``finally``, whatever happened to it; its
wall time is printed at the end of the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, lab_unavailable

VENV_BIN = Path(sys.executable).parent
MOLECULE = VENV_BIN / "molecule"
TIMEOUT = 1800  # seconds for one `molecule test`; a scenario takes one to three minutes
TAIL = 120  # lines of molecule's output shown when a scenario fails

ROLES = sorted(p.parents[2].name
               for p in (REPO / "roles").glob("*/molecule/default/molecule.yml"))

# Scenarios that find a defect in a role this file does not own, role -> what
# fails (an xfail, strict: once the role is fixed the scenario passes, the test
# fails, and the entry goes). Empty: every scenario passes.
KNOWN_DEFECTS: dict[str, str] = {}

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def timings(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Wall time (and outcome) of each scenario, printed once the module is done."""
    results: dict[str, str] = {}
    yield results
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not results:
        return
    with capture.global_and_fixture_disabled():  # else the summary is captured with the test
        reporter.write_line("")
        reporter.write_sep("-", "molecule test wall times")
        for role, line in results.items():
            reporter.write_line(f"  {role:<18} {line}")


@pytest.fixture(scope="module")
def molecule_env() -> dict[str, str]:
    """The environment molecule runs in: lab image, project podman settings, the venv first."""
    reason = lab_unavailable()
    if reason is None and not MOLECULE.exists():
        reason = f"molecule is not installed in {VENV_BIN} (pip install -e '.[dev]')"
    if reason:
        if os.environ.get("SPARKCTL_REQUIRE_LAB") == "1":
            pytest.fail(f"molecule scenarios required but {reason}")
        pytest.skip(reason)

    from sparkctl.lab.image import ensure_image  # noqa: PLC0415 - needs podman
    from sparkctl.lab.lab import lab_dir  # noqa: PLC0415
    from sparkctl.lab.podman import CONTAINERS_CONF, Podman  # noqa: PLC0415

    image = ensure_image(Podman(), work_dir=lab_dir() / "build")
    return {
        **os.environ,
        "SPARKCTL_LAB_IMAGE": image,
        # runc and lowered ulimits for every podman call, molecule's and Ansible's.
        "CONTAINERS_CONF": str(CONTAINERS_CONF),
        # molecule runs ansible-config, ansible-playbook and pytest by name.
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_FORCE_COLOR": "0",
        "PY_COLORS": "0",
        "NO_COLOR": "1",
    }


def _tail(log: Path, lines: int = TAIL) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.mark.parametrize("role", [
    pytest.param(role, marks=[pytest.mark.xfail(reason=KNOWN_DEFECTS[role], strict=True)]
                 if role in KNOWN_DEFECTS else [])
    for role in ROLES])
def test_molecule_scenario(role: str, molecule_env: dict[str, str], timings: dict[str, str],
                           tmp_path: Path,
                           record_property: Callable[[str, object], None]) -> None:
    cwd = REPO / "roles" / role
    log = tmp_path / f"molecule-{role}.log"
    started = time.monotonic()
    outcome = "did not finish"
    try:
        with log.open("w") as out:
            proc = subprocess.run([str(MOLECULE), "test"], cwd=cwd, env=molecule_env,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=TIMEOUT,
                                  check=False)
        outcome = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        outcome = f"timed out after {TIMEOUT} s"
    finally:
        elapsed = time.monotonic() - started
        # Whatever happened (failure, timeout, interrupt): the instances go.
        subprocess.run([str(MOLECULE), "destroy"], cwd=cwd, env=molecule_env,
                       capture_output=True, timeout=300, check=False)
        timings[role] = f"{elapsed:6.0f} s  {outcome}"
        record_property("molecule_seconds", round(elapsed))
    if outcome != "passed":
        pytest.fail(f"molecule test in roles/{role} {outcome} after {elapsed:.0f} s; "
                    f"last {TAIL} lines of {log}:\n{_tail(log)}", pytrace=False)
