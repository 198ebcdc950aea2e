"""Connection variables are allow-listed: an ``ansible_*`` variable of an inventory is one
sparkctl accepts, of the shape ssh expects, or it is refused before any contact.

Aliases (``ansible_ssh_host``), programs (``ansible_ssh_executable``), another
connection than ssh, control paths, any known_hosts file but sparkctl's one and su
passwords are refused by name; facts and what Ansible sets itself are not inventory
variables.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkctl.rules import connection
from tests.contract.test_inventory_types import _ansible_playbook

ROOT = Path(__file__).resolve().parents[2]

SSH = "ansible_ssh_common_args"


def _problems(hv: dict[str, Any]) -> list[str]:
    hostvars = {"spark1": hv, "spark2": {}}
    return [str(p) for p in connection.check_connection(list(hostvars), hostvars)]


def test_what_the_project_s_inventories_set_passes() -> None:
    hv = {
        "ansible_host": "10.77.0.11",
        "ansible_user": "root",
        "ansible_port": 22,
        "ansible_become": True,
        "ansible_become_method": "sudo",
        "ansible_become_user": "root",
        "ansible_connection": "ssh",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_pipelining": "yes",
        "ansible_timeout": 30,
        "ansible_ssh_retries": 3,
        "ansible_ssh_private_key_file": "/root/.local/state/lab/sparkctl_lab/ssh/id_ed25519",
        # the lab's group_vars/sim/connection.yml, as Ansible templates it
        SSH: "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes",
        "sparkctl_known_hosts_file": "/root/.local/state/lab/sparkctl_lab/ssh/known_hosts",
        # and sparkctl's own argument from it (playbooks/group_vars/all), in a play
        "ansible_ssh_extra_args": (
            "-o UserKnownHostsFile=/root/.local/state/lab/sparkctl_lab/ssh/known_hosts"
        ),
        # what Ansible sets itself, and facts
        "ansible_version": {"full": "2.19.4"},
        "ansible_check_mode": False,
        "ansible_local": {},
        "ansible_facts": {"distribution": "Ubuntu"},
        "ansible_distribution": "Ubuntu",
    }
    assert _problems(hv) == []


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (
            "ansible_ssh_host",
            "192.0.2.11",
            "is an alias that ssh would take instead of ansible_host",
        ),
        ("ansible_ssh_user", "-oProxyCommand=x", "instead of ansible_user"),
        ("ansible_ssh_port", 2222, "instead of ansible_port"),
        ("ansible_ssh_executable", "/tmp/x", "names a program that sparkctl would run"),
        ("ansible_become_exe", "/tmp/x", "instead of sudo, as root"),
        ("ansible_become_flags", "-H -S; id", "adds words to the sudo command line"),
        ("ansible_control_path", "/tmp/cp-%%h", "control socket"),
        ("ansible_control_path_dir", "/tmp", "control socket"),
        ("ansible_ssh_control_path_dir", "/tmp", "control socket"),
        ("ansible_private_key", "-----BEGIN OPENSSH PRIVATE KEY-----", "private key's text"),
        ("ansible_shell_type", "csh", "is not a connection variable sparkctl accepts"),
        ("ansible_docker_extra_args", "--privileged", "is not a connection variable"),
    ],
)
def test_refused_names(name: str, value: Any, says: str) -> None:
    problems = _problems({name: value})
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"host spark1: variable {name}: "), problems
    assert says in problems[0]


def test_a_refused_name_never_shows_its_value() -> None:
    (problem,) = _problems({"ansible_private_key": "-----BEGIN OPENSSH PRIVATE KEY----- abc"})
    assert "BEGIN" not in problem


def test_a_near_miss_is_named() -> None:
    (problem,) = connection.check_connection(["s"], {"s": {"ansible_becom_method": "sudo"}})
    assert problem.hint == "did you mean ansible_become_method?"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("ansible_connection", "local", "is not ssh"),
        ("ansible_connection", "community.docker.docker", "is not ssh"),
        ("ansible_connection", "paramiko", "is not ssh"),
        ("ansible_become_method", "su", "is not sudo"),
        ("ansible_become", "maybe", "is not a boolean"),
        ("ansible_become_user", "root\nDefaults !requiretty", "is not a user name"),
        ("ansible_python_interpreter", "python3 -c 'import os'", "is not an absolute path"),
        ("ansible_python_interpreter", "/usr/../tmp/py", "is not an absolute path"),
        ("ansible_timeout", 0, "is not a whole number of seconds"),
        ("ansible_ssh_retries", 99, "is not a whole number of retries"),
        ("ansible_ssh_transfer_method", "rsync", "is not one of smart, sftp, scp, piped"),
    ],
)
def test_accepted_names_of_the_wrong_shape(name: str, value: Any, says: str) -> None:
    (problem,) = _problems({name: value})
    assert problem.startswith(f"host spark1: variable {name}: {value!r} {says}"), problem


@pytest.mark.parametrize("space", ["\u00a0", "\u2007", "\u202f", "\u3000", " "])
def test_an_address_with_a_unicode_or_trailing_blank_is_refused(space: str) -> None:
    """Python's strip() and int() read it as the address; ssh does not."""
    (problem,) = _problems({"ansible_host": f"192.0.2.12{space}"})
    assert "variable ansible_host:" in problem and "has U+" in problem, problem


def test_a_plain_address_passes() -> None:
    assert _problems({"ansible_host": "192.0.2.12"}) == []


@pytest.mark.parametrize(
    "name",
    [
        "ansible_su_pass",
        "ansible_su_password",
        "ansible_sudo_password",
        "ansible_private_key_passphrase",
        "ansible_ssh_private_key_passphrase",
    ],
)
def test_su_passwords_and_passphrases_are_passwords(name: str) -> None:
    hostvars = {"spark1": {name: "hunter2hunter2"}}
    (problem,) = connection.check_passwords(["spark1"], hostvars)
    assert problem.var == name and "passwords are not accepted" in problem.message
    assert "hunter2" not in str(problem)
    # and the allow-list leaves them to that rule (one problem, not two)
    assert connection.check_connection(["spark1"], hostvars) == []


def test_a_control_path_is_sparkctl_s_to_place() -> None:
    (problem,) = _problems({SSH: "-o ControlPath=/tmp/cm-%C"})
    assert problem.startswith(
        f"host spark1: variable {SSH}: 'ControlPath=/tmp/cm-%C' moves the ssh connections'"
    ), problem


@pytest.mark.parametrize("var", connection.SSH_ARGS_VARS)
@pytest.mark.parametrize(
    "option",
    [
        "-o UserKnownHostsFile=/etc/sparkctl/kh",  # even one file: sparkctl names it
        "-o 'UserKnownHostsFile /etc/sparkctl/kh /tmp/evil_kh'",
        "-oUserKnownHostsFile=/dev/null",
        "-o userknownhostsfile=none",
    ],
)
def test_no_inventory_ssh_argument_names_a_known_hosts_file(var: str, option: str) -> None:
    """ssh checks a host against every known_hosts file it is given: the one file is
    sparkctl's to pass (sparkctl_known_hosts_file), never an inventory's argument."""
    hostvars = {"spark1": {var: f"-o StrictHostKeyChecking=yes {option}"}, "spark2": {}}
    (problem,) = connection.check_host_keys(list(hostvars), hostvars)
    assert problem.host == "spark1" and problem.var == var
    assert "names a known_hosts file, which is sparkctl's to pass" in problem.message
    assert "set sparkctl_known_hosts_file" in problem.message


@pytest.mark.parametrize(
    "value",
    [
        "-o UserKnownHostsFile=/tmp/planted",
        "-o UserKnownHostsFile=/etc/sparkctl/kh -o UserKnownHostsFile=/tmp/planted",
        "-o Compression=yes",  # harmless, but the variable is sparkctl's
        ["-o", "UserKnownHostsFile=/etc/sparkctl/kh"],
    ],
)
def test_the_extra_args_are_sparkctl_s_own(value: Any) -> None:
    (problem,) = _problems(
        {"sparkctl_known_hosts_file": "/etc/sparkctl/kh", "ansible_ssh_extra_args": value}
    )
    assert problem.startswith(
        "host spark1: variable ansible_ssh_extra_args: is sparkctl's own: it passes ssh "
        "the known_hosts file of sparkctl_known_hosts_file "
        "('-o UserKnownHostsFile=/etc/sparkctl/kh') and nothing else"
    ), problem
    assert "/tmp/planted" not in problem


def test_the_extra_args_sparkctl_derives_pass() -> None:
    assert _problems({"ansible_ssh_extra_args": "-o UserKnownHostsFile=~/.ssh/known_hosts"}) == []
    assert (
        _problems(
            {
                "sparkctl_known_hosts_file": "/etc/sparkctl/kh",
                "ansible_ssh_extra_args": "-o UserKnownHostsFile=/etc/sparkctl/kh",
            }
        )
        == []
    )


def test_a_group_vars_setting_is_reported_once_for_all_hosts() -> None:
    hostvars = {h: {"ansible_ssh_host": "192.0.2.11"} for h in ("spark1", "spark2", "sw")}
    (problem,) = connection.check_connection(list(hostvars), hostvars)
    assert problem.host is None and problem.var == "ansible_ssh_host"


# ------------------------------------------------- the preflight play, the same rule
def _preflight(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    """playbooks/preflight.yml on a copy of the corpus's valid inventory, ``extra`` added
    to its group_vars; ssh replaced by a recorder first on PATH."""
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "tests" / "fixtures" / "bad_inputs" / "_valid", inv)
    (inv / "group_vars" / "tiny" / "extra.yml").write_text(extra)
    (tmp_path / "bin").mkdir()
    stub = tmp_path / "bin" / "ssh"
    stub.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ssh-was-run'}\nexit 255\n")
    stub.chmod(0o755)
    proc = _ansible_playbook(tmp_path, inv / "tiny.ini", "preflight.yml")
    assert not (tmp_path / "ssh-was-run").exists(), proc.stdout
    return proc


def test_the_preflight_play_passes_what_ansible_sets_and_refuses_an_alias(
    tmp_path: Path,
) -> None:
    """In a play, hostvars carry Ansible's own ansible_* names (ansible_version,
    ansible_check_mode, ansible_forks, ...): the allow-list leaves them alone, and still
    stops an alias before any host is contacted."""
    ok = _preflight(
        tmp_path / "ok", "ansible_timeout: 10\nsparkctl_known_hosts_file: /etc/sparkctl/kh\n"
    )
    # (and the playbooks' own ansible_ssh_extra_args, derived from it, passes)
    assert ok.returncode == 0, ok.stdout[-3000:]
    bad = _preflight(
        tmp_path / "bad",
        "ansible_ssh_host: 192.0.2.11\n"
        "ansible_ssh_extra_args: -o UserKnownHostsFile=/tmp/planted_kh\n",
    )
    assert bad.returncode == 2, bad.stdout[-3000:]
    assert "variable ansible_ssh_host: is refused" in bad.stdout, bad.stdout[-3000:]
    assert "variable ansible_ssh_extra_args: is sparkctl's own" in bad.stdout, bad.stdout[-3000:]


def test_ssh_is_given_the_one_known_hosts_file(tmp_path: Path) -> None:
    """What ssh itself receives from a playbook run: sparkctl's one UserKnownHostsFile
    (playbooks/group_vars/all/connection.yml from sparkctl_known_hosts_file), after
    the inventory's own options. An ssh recorder first on PATH writes each argv."""
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "tests" / "fixtures" / "bad_inputs" / "_valid", inv)
    (inv / "group_vars" / "tiny" / "extra.yml").write_text(
        "sparkctl_known_hosts_file: ~/.config/sparkctl/known_hosts\n"
    )
    (tmp_path / "bin").mkdir()
    stub = tmp_path / "bin" / "ssh"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "--" >> {tmp_path / "argv"}\nexit 255\n')
    stub.chmod(0o755)
    proc = _ansible_playbook(tmp_path, inv / "tiny.ini", "site.yml")
    assert "UNREACHABLE" in proc.stdout, proc.stdout[-3000:]
    runs = [
        run.split("\n") for run in (tmp_path / "argv").read_text().split("\n--\n") if run.strip()
    ]
    assert runs, proc.stdout[-3000:]
    for argv in runs:
        files = [w for w in argv if w.lower().startswith("userknownhostsfile")]
        assert files == ["UserKnownHostsFile=~/.config/sparkctl/known_hosts"], argv
        assert "StrictHostKeyChecking=yes" in argv, argv


def test_an_inventory_s_own_ansible_facts_does_not_hide_a_connection_variable() -> None:
    hv = {
        "ansible_facts": {
            "ssh_executable": 1,
            "control_path": 1,
            "ssh_host": 1,
            "remote_tmp": 1,
            "distribution": 1,
        },
        "ansible_ssh_executable": "/tmp/evil",
        "ansible_remote_tmp": "/tmp",
        "ansible_control_path": "/tmp/cp",
        "ansible_ssh_host": "192.0.2.11",
        "ansible_distribution": "Ubuntu",  # a real fact's name: not judged
    }
    found = {p.var for p in connection.check_connection(["spark1"], {"spark1": hv})}
    assert found == {
        "ansible_ssh_executable",
        "ansible_control_path",
        "ansible_ssh_host",
        "ansible_remote_tmp",
    }
