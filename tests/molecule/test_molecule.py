"""Every role's molecule scenario: ``molecule test`` in the collection's ``roles/<role>``,
one test per role.

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
scenario's last step destroys its instances; one that did not pass (a failed
step, a timeout, an interrupt) is destroyed again in a ``finally``; its wall
time is printed at the end of the module. The scenarios run in the
background from the end of collection, beside the unit tests
(tests/molecule/conftest.py); each test here waits for its own result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.molecule.conftest import SEQUENCE, Scenario, molecule_env, run_scenario, unavailable

TAIL = 120  # lines of molecule's output shown when a scenario fails

ROLES = sorted(
    p.parents[2].name
    for p in (REPO / "ansible_collections" / "sparkctl" / "spark" / "roles").glob(
        "*/molecule/default/molecule.yml"
    )
)

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
def available() -> None:
    """Skip (or, with SPARKCTL_REQUIRE_LAB=1 as in CI, fail) without what molecule needs."""
    reason = unavailable()
    if reason:
        if os.environ.get("SPARKCTL_REQUIRE_LAB") == "1":
            pytest.fail(f"molecule scenarios required but {reason}")
        pytest.skip(reason)


def _tail(log: Path, lines: int = TAIL) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.mark.parametrize(
    "role",
    [
        pytest.param(
            role,
            marks=[pytest.mark.xfail(reason=KNOWN_DEFECTS[role], strict=True)]
            if role in KNOWN_DEFECTS
            else [],
        )
        for role in ROLES
    ],
)
def test_molecule_scenario(
    role: str,
    available: None,
    timings: dict[str, str],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    queued = next((q for q in SEQUENCE if role in q.roles), None)
    result: Scenario = (
        queued.wait(role)
        if queued is not None
        else run_scenario(role, molecule_env(), tmp_path / f"molecule-{role}.log")
    )
    timings[role] = f"{result.seconds:6.0f} s  {result.outcome}"
    record_property("molecule_seconds", round(result.seconds))
    if not result.passed:
        pytest.fail(
            f"molecule test in roles/{role} {result.outcome} after {result.seconds:.0f} s; "
            f"last {TAIL} lines of {result.log}:\n{_tail(result.log)}",
            pytrace=False,
        )
