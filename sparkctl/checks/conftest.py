"""The node checks' pytest plugin: plan, parametrisation, connections, results.

``sparkctl validate`` runs this suite once per node, all nodes at once, each
in its own pytest process holding one SSH connection (testinfra's ssh backend
with a ControlMaster), and reads back the JSON each writes. It can also be
run by hand, or through testinfra's Ansible backend for comparison
(benchmarks/validate_checks.py)::

    python -m pytest sparkctl/checks -c sparkctl/checks/pytest.ini \\
        --sparkctl-plan PLAN.json --sparkctl-node spark1 \\
        --sparkctl-ssh-config SSH_CONFIG --sparkctl-out spark1.json

Tests are parametrised from the plan (``playbooks/validate_plan.yml``): over
the selected nodes, each node's twins (a, b), its peers, the nccl-tests
binaries. A failure's id names node, interface and peer, and so does its
entry in the results.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkctl.checks.state import DOWN_KEY, FACTS_KEY, HOSTS_KEY, PLAN_KEY, RESULTS_KEY
from sparkctl.errors import SparkctlError
from sparkctl.plan import NodePlan, Plan, ValidatePlan


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sparkctl", "sparkctl validate node checks")
    group.addoption("--sparkctl-plan", help="the plan JSON (playbooks/validate_plan.yml)")
    group.addoption(
        "--sparkctl-node",
        action="append",
        default=[],
        help="check this node (repeatable; default: every node of the plan)",
    )
    group.addoption(
        "--sparkctl-backend",
        choices=["ssh", "ansible"],
        default="ssh",
        help="ssh: one persistent connection per node; ansible: testinfra's "
        "Ansible backend with --force-ansible (one Ansible run per command)",
    )
    group.addoption("--sparkctl-ssh-config", help="ssh_config with a Host entry per node")
    group.addoption("--sparkctl-ansible-inventory", help="inventory for the ansible backend")
    group.addoption("--sparkctl-out", help="write every result and the facts seen here (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    plan_path = config.getoption("--sparkctl-plan")
    if not plan_path:
        raise pytest.UsageError("--sparkctl-plan is required")
    try:
        plan = Plan.from_dict(json.loads(Path(plan_path).read_text()))
    except SparkctlError as exc:
        raise pytest.UsageError(exc.message) from None
    unknown = [n for n in config.getoption("--sparkctl-node") if n not in plan.hosts]
    if unknown:
        raise pytest.UsageError(f"not in the plan: {', '.join(unknown)}")
    config.stash[PLAN_KEY] = plan
    config.stash[RESULTS_KEY] = []
    config.stash[FACTS_KEY] = {}
    config.stash[DOWN_KEY] = {}
    config.stash[HOSTS_KEY] = {}


def _selected(config: pytest.Config) -> list[str]:
    plan = config.stash[PLAN_KEY]
    chosen: list[str] = config.getoption("--sparkctl-node") or plan.nodes
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """node x (twin) x (peer) x (binary), as far as the test asks for them."""
    if "node" not in metafunc.fixturenames:
        return
    plan = metafunc.config.stash[PLAN_KEY]
    names = [n for n in ("node", "twin", "peer", "binary") if n in metafunc.fixturenames]
    combos: list[tuple[str, ...]] = []
    for node in _selected(metafunc.config):
        nplan = plan.node(node)
        twins = [t.twin for t in nplan.roce_fabric.twins] if "twin" in names else [""]
        peers = [p for p in plan.hosts if p != node] if "peer" in names else [""]
        binaries = list(nplan.nccl.binaries) if "binary" in names else [""]
        for twin in twins:
            for peer in peers:
                for binary in binaries:
                    chosen = {"node": node, "twin": twin, "peer": peer, "binary": binary}
                    combos.append(tuple(chosen[n] for n in names))
    ids = ["-".join(v for v in combo if v) for combo in combos]
    values: list[Any] = [c[0] for c in combos] if len(names) == 1 else list(combos)
    metafunc.parametrize(",".join(names), values, ids=ids)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Reachability first: a node that does not answer skips its other checks."""
    items.sort(key=lambda item: 0 if item.name.startswith("test_reachable") else 1)


@pytest.fixture(scope="session")
def plan(request: pytest.FixtureRequest) -> Plan:
    return request.config.stash[PLAN_KEY]


@pytest.fixture
def nplan(plan: Plan, node: str) -> NodePlan:
    """This node's part of the plan."""
    return plan.node(node)


@pytest.fixture
def settings(plan: Plan, node: str) -> ValidatePlan:
    """The validate role's thresholds as this node sees them."""
    return plan.node(node).validate


def _connect(config: pytest.Config, node: str) -> Any:
    import testinfra  # noqa: PLC0415 - imported when a check needs a host

    cache = config.stash[HOSTS_KEY]
    if node not in cache:
        timeout = config.stash[PLAN_KEY].node(node).validate.command_timeout
        if config.getoption("--sparkctl-backend") == "ansible":
            cache[node] = testinfra.get_host(
                f"ansible://{node}",
                force_ansible=True,
                ansible_inventory=config.getoption("--sparkctl-ansible-inventory"),
            )
        else:
            cache[node] = testinfra.get_host(
                f"ssh://{node}",
                ssh_config=config.getoption("--sparkctl-ssh-config"),
                timeout=min(timeout, 15),
                controlpersist=300,
            )
    return cache[node]


@pytest.fixture
def host(request: pytest.FixtureRequest, node: str) -> Any:
    """testinfra's host for ``node``: one persistent connection per node and process."""
    down = request.config.stash[DOWN_KEY]
    if node in down and not request.node.name.startswith("test_reachable"):
        pytest.skip(f"{node} did not answer: {down[node]}")
    return _connect(request.config, node)


@pytest.fixture
def facts(request: pytest.FixtureRequest, node: str) -> dict[str, Any]:
    """What the checks saw on this node (addresses, MACs, memory), for the cluster checks."""
    return request.config.stash[FACTS_KEY].setdefault(node, {})


@pytest.fixture
def seen(request: pytest.FixtureRequest) -> Any:
    """Record what a passing check saw (its message in the report)."""

    def record(text: str) -> None:
        request.node.user_properties.append(("seen", text))

    return record


@contextlib.contextmanager
def as_root(host: Any) -> Iterator[None]:
    """Run as root: sudo unless the connection already is root."""
    if host.user.uid == 0:
        yield
    else:
        with host.sudo():
            yield


# ------------------------------------------------------------------ results
def _message(report: pytest.TestReport) -> str:
    if report.passed:
        return "; ".join(str(v) for k, v in report.user_properties if k == "seen")
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (file, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None else str(longrepr)
    first = text.split("\nassert ")[0].strip()
    for prefix in ("AssertionError: ", "Failed: "):
        first = first.removeprefix(prefix)
    return first


def _subject(plan: Plan, params: dict[str, Any]) -> str | None:
    node = params.get("node")
    parts = []
    if params.get("twin") and node:
        parts.append(plan.node(node).roce_fabric.twin(params["twin"]).netdev)
    if params.get("peer"):
        parts.append(f"-> {params['peer']}")
    if params.get("binary"):
        parts.append(str(params["binary"]))
    return " ".join(parts) or None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _pending.append(report)


_pending: list[pytest.TestReport] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    start = time.monotonic()
    _pending.clear()
    yield
    config = item.config
    plan = config.stash[PLAN_KEY]
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = dict(callspec.params) if callspec is not None else {}
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    for report in _pending:
        outcome = (
            "passed"
            if report.passed
            else "skipped"
            if report.skipped
            else "failed"
            if report.when == "call"
            else "error"
        )
        config.stash[RESULTS_KEY].append(
            {
                "check": name,
                "host": params.get("node", "?"),
                "subject": _subject(plan, params),
                "outcome": outcome,
                "message": _message(report),
                "duration_s": round(time.monotonic() - start, 3),
            }
        )
    _pending.clear()


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = session.config.getoption("--sparkctl-out")
    if not out:
        return
    data = {
        "checks": session.config.stash[RESULTS_KEY],
        "facts": session.config.stash[FACTS_KEY],
        "down": session.config.stash[DOWN_KEY],
    }
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(out)
