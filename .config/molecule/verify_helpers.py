"""What every role scenario's verify step shares (roles/<role>/molecule/default/tests/).

molecule's testinfra verifier runs pytest on a scenario's tests/ with this
directory on PYTHONPATH (config.yml, ``verifier: env``), so each
test_default.py says ``from verify_helpers import ...`` and keeps only what is
its role's own: the scenario as the tests see it (the role, its defaults, the
inventory molecule wrote, the instances' management addresses, the head) and
the few checks more than one role makes in the same way.

Read when a test module is imported, inside ``molecule verify`` (or ``test``):
the MOLECULE_* variables are molecule's, SPARKCTL_STATE_DIR config.yml's.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import testinfra
import yaml
from testinfra.utils.ansible_runner import AnsibleRunner

# The role under test: molecule runs in the collection's roles/<role>
# (tests/molecule/conftest.py).
ROLE = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SCENARIO = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])


def role_yaml(name: str) -> Any:
    """The role's ``<name>/main.yml`` (defaults, vars)."""
    return yaml.safe_load((ROLE / name / "main.yml").read_text())


def collection_plugin(kind: str, name: str) -> ModuleType:
    """One of the collection's plugins ("filter", "modules"), imported by its module name
    as Ansible imports it (the checkout's root is on sys.path: the venv's editable install)."""
    from sparkctl import collection  # noqa: PLC0415 - installs Ansible's collection finder first

    return collection.plugin(kind, name)


DEFAULTS: dict[str, Any] = role_yaml("defaults")
INVENTORY = AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
SPARKS: list[str] = INVENTORY.get_hosts("sparks")
HOSTVARS: dict[str, dict[str, Any]] = {name: INVENTORY.get_variables(name) for name in SPARKS}
# Management address of every instance: its `ip` on the scenario network.
MGMT: dict[str, str] = {
    p["name"]: p["ip"]
    for p in yaml.safe_load(Path(os.environ["MOLECULE_FILE"]).read_text())["platforms"]
}
(HEAD,) = [name for name in SPARKS if HOSTVARS[name]["node_rank"] == 0]


def podman(name: str) -> str:
    """testinfra's address of an instance (``testinfra_hosts`` entries)."""
    return f"podman://{name}"


def instance(name: str) -> Any:
    """A testinfra host for an instance other than the test's own ``host``."""
    return testinfra.get_host(podman(name))


def name_of(host: Any) -> str:
    return str(host.backend.get_hostname())


def hostvars(host: Any) -> dict[str, Any]:
    """The inventory's variables of a testinfra host."""
    return dict(INVENTORY.get_variables(name_of(host)))


def read_env(host: Any, path: str) -> dict[str, str]:
    """KEY=VALUE lines of an environment file (comments skipped)."""
    text = host.file(path).content_string
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def assert_running(host: Any, unit: str, *, enabled: bool = True, succeeded: bool = False) -> None:
    """The unit runs (a oneshot with RemainAfterExit: active (exited)), is enabled
    unless ``enabled`` is false, and with ``succeeded`` its last run succeeded; on
    failure its journal is printed before the assertion is raised again."""
    service = host.service(unit)
    try:
        assert service.is_running
        if enabled:
            assert service.is_enabled
        if succeeded:
            assert service.systemd_properties["Result"] == "success"
    except AssertionError:
        print(host.run("journalctl -u %s --no-pager -n 60", unit).stdout)
        raise


def converge_check(extra_vars: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The scenario's converge.yml with extra variables, in check mode: changes nothing."""
    inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "--check",
            "-i",
            str(inventory),
            str(SCENARIO / "converge.yml"),
            "-e",
            json.dumps(extra_vars),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def failed_task(stdout: str) -> str:
    """The task (``role : name``, as Ansible prints it) that failed first in a play's output."""
    return stdout.split("fatal:", maxsplit=1)[0].rsplit("TASK [", 1)[-1]
