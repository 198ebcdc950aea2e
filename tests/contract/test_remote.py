"""sparkctl.remote: the one way validate, serve and trust reach the nodes, and the
layering it gives (no command package imports another's)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sparkctl import inventory, remote
from sparkctl.plan import Plan

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sparkctl"
# The commands that reach the nodes, each a package or a module of its own.
COMMANDS = {"validate": "sparkctl.validate", "serve": "sparkctl.serve", "trust": "sparkctl.trust"}
# Imports across commands that remain (none: what two commands share lives below both,
# in sparkctl.remote, sparkctl.report, sparkctl.plan and the parsers).


def test_connect_loads_the_plan_and_writes_one_ssh_config_for_every_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    inv = inventory.validate(REPO / "inventory" / "sim.ini")
    session = remote.connect(inv, tmp_path)
    assert isinstance(session.plan, Plan)
    assert session.nodes == remote.node_names(inv) == ["spark1", "spark2", "spark3", "spark4"]
    assert session.plan.nodes == session.nodes
    assert session.ssh_config == tmp_path / "ssh_config"
    hosts = [
        ln.split()[1] for ln in session.ssh_config.read_text().splitlines() if ln[:5] == "Host "
    ]
    assert hosts == session.nodes
    assert (tmp_path / "plan.json").is_file()  # what the node checks read


def _entry(ssh_config: Path, host: str) -> dict[str, str]:
    """One Host entry's options, first value of each (ssh takes the first)."""
    options: dict[str, str] = {}
    current = None
    for line in ssh_config.read_text().splitlines():
        if line.startswith("Host "):
            current = line.split()[1]
        elif current == host and line.strip():
            key, value = line.split(None, 1)
            options.setdefault(key.lower(), value)
    return options


def test_the_ssh_config_is_the_connection_ansible_resolved_extra_vars_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SSH settings are decided once, by Ansible (sparkctl_connection in
    playbooks/group_vars/all/connection.yml): the plan carries each node's, templated
    values resolved, and an extra var wins as it does for ansible-playbook. Before, the
    ssh_config was rebuilt from the inventory and missed `-e ansible_user=...`."""
    state = tmp_path / "state"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(state))
    inv = inventory.validate(REPO / "inventory" / "sim.ini")
    extra = {"ansible_user": "admin", "ansible_port": 2222}
    session = remote.connect(inv, tmp_path, extra)
    conn = session.plan.node("spark2").connection
    key = str(state / "lab" / "ssh" / "id_ed25519")  # "{{ sparkctl_state_dir }}/lab/ssh/..."
    assert (conn.ansible_host, conn.ansible_user, conn.ansible_port) == (
        "10.77.0.12",
        "admin",
        "2222",
    )
    assert conn.ansible_ssh_private_key_file == key
    entry = _entry(session.ssh_config, "spark2")
    assert (entry["hostname"], entry["user"], entry["port"]) == ("10.77.0.12", "admin", "2222")
    assert entry["identityfile"] == key
    assert entry["userknownhostsfile"] == str(state / "lab" / "ssh" / "known_hosts")
    assert remote.sudo_prefix(session.plan, "spark2") == "sudo -n "
    plain = remote.connect(inv, tmp_path / "plain")
    assert _entry(plain.ssh_config, "spark2")["user"] == "root"
    assert "port" not in _entry(plain.ssh_config, "spark2")
    assert remote.sudo_prefix(plain.plan, "spark2") == ""


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            # `from sparkctl.validate import run` imports sparkctl.validate.run
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _command_of(path: Path) -> str | None:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0] if rel.parts[0] in COMMANDS else None


def test_no_command_imports_another_commands_package() -> None:
    crossing = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _command_of(path)
        if own is None:
            continue
        for name in _imports(path):
            for other, module in COMMANDS.items():
                if other != own and (name == module or name.startswith(module + ".")):
                    crossing.add((own, ".".join(name.split(".")[:3])))
    assert not crossing, sorted(crossing)


def test_ssh_config_runner_and_plan_come_from_remote_only() -> None:
    """serve and trust take SSH and the plan from sparkctl.remote, not from validate."""
    for path in [*sorted((PACKAGE / "serve").glob("*.py")), PACKAGE / "trust.py"]:
        names = _imports(path)
        for module in (
            "sparkctl.validate.sshconfig",
            "sparkctl.validate.run",
            "sparkctl.validate.nccl_run",
            "sparkctl.validate.nccl_judge",
        ):
            assert not [n for n in names if n.startswith(module)], (path, module)
