"""Nothing from an inventory becomes an ssh option, an ssh_config line or a command.

The inventory rules (``connection.ssh_options`` and the connection rules) refuse
it before any contact; validate's ssh_config writer refuses it again with the same
parser; host names never reach ssh's option position; the ControlMaster sockets live
in a directory only the user owns.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.remote import ssh, sshconfig
from sparkctl.rules import connection


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short state dir (pytest's tmp_path is too deep for a socket path)."""
    path = Path(tempfile.mkdtemp(prefix="st-", dir="/tmp"))
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _problems(hostvars: dict[str, dict[str, Any]]) -> list[str]:
    return [str(p) for p in connection.check_connection(list(hostvars), hostvars)]


@pytest.mark.parametrize(
    ("name", "hv", "says"),
    [
        ("-oProxyCommand=touch_x", {}, "host name '-oProxyCommand=touch_x' is not a host name"),
        ("spark/2", {}, "host name 'spark/2' is not a host name"),
        (
            "spark2",
            {"ansible_user": 'nvidia\nMatch exec "touch /tmp/x"'},
            "variable ansible_user: 'nvidia\\nMatch exec \"touch /tmp/x\"' is not a user name",
        ),
        ("spark2", {"ansible_user": "-l root"}, "variable ansible_user: '-l root' is not a user"),
        ("spark2", {"ansible_port": 0}, "variable ansible_port: 0 is not a TCP port"),
        ("spark2", {"ansible_port": "22\n"}, "variable ansible_port: '22\\n' is not a TCP port"),
        ("spark2", {"ansible_port": True}, "variable ansible_port: True is not a TCP port"),
        (
            "spark2",
            {"ansible_ssh_private_key_file": "/k/id\nProxyCommand x"},
            "variable ansible_ssh_private_key_file: '/k/id\\nProxyCommand x' is not a key file",
        ),
    ],
)
def test_connection_values_of_the_wrong_shape_are_refused(
    name: str, hv: dict[str, Any], says: str
) -> None:
    problems = _problems({name: hv, "spark9": {}})
    assert len(problems) == 1 and says in problems[0], problems
    assert problems[0].startswith(f"host {name}")


def test_good_connection_values_pass() -> None:
    assert (
        _problems(
            {
                "spark1": {
                    "ansible_user": "nvidia",
                    "ansible_port": "2222",
                    "ansible_ssh_private_key_file": "~/.ssh/id_sparkctl",
                },
                "fabric-switch": {"ansible_user": "cumulus", "ansible_port": 22},
            }
        )
        == []
    )


@pytest.mark.parametrize(
    "args",
    [
        "-o StrictHostKeyChecking=yes -o PasswordAuthentication=no",
        "-C -o ControlMaster=auto -o ControlPersist=60s",  # Ansible's own default ssh_args
        "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes",
        "-o ProxyJump=admin@10.0.0.1:2222,jump2 -oServerAliveInterval=5",
    ],
)
def test_the_options_an_operator_uses_pass(args: str) -> None:
    assert connection.ssh_options(args)


@pytest.mark.parametrize(
    "args",
    [
        "-o 'ProxyJump=x\nMatch exec \"id\"'",  # a newline: another ssh_config line
        "-o ProxyJump=x;id",
        "-o 'IdentityFile=/k/id ProxyCommand=id'",
        "-o Include=/tmp/evil.conf",
        "-o 'Match exec id'",
        "-o VerifyHostKeyDNS=yes",
        "-o GlobalKnownHostsFile=/tmp/keys",
        "-o UpdateHostKeys=yes",
        "-o LocalCommand=id -o PermitLocalCommand=yes",
        "-o RemoteCommand=id",
        "-F /tmp/evil.conf",
        "-o ForwardAgent=yes",
    ],
)
def test_options_that_run_a_command_or_vouch_for_keys_are_refused(args: str) -> None:
    with pytest.raises(ValueError):
        connection.ssh_options(args)


def test_check_refuses_them_through_the_host_key_rule() -> None:
    hostvars = {
        "spark1": {"ansible_ssh_common_args": "-o 'KnownHostsCommand=ssh-keyscan %H'"},
        "spark2": {},
    }
    found = [str(p) for p in connection.check_host_keys(list(hostvars), hostvars)]
    assert found == [
        "host spark1: variable ansible_ssh_common_args: 'KnownHostsCommand="
        "ssh-keyscan %H' runs a command on the controller and lets it vouch for "
        "host keys; host key checking stays on"
    ]


def test_the_ssh_config_writer_refuses_what_the_rules_refuse(state: Path, tmp_path: Path) -> None:
    """Called without `inventory check` first, the writer still writes no injected line."""
    cases: list[dict[str, Any]] = [
        {"ansible_user": 'nvidia\nMatch exec "touch /tmp/x"'},
        {"ansible_host": "10.0.0.1\n  ProxyCommand touch /tmp/x"},
        {"ansible_port": "22\nProxyCommand x"},
        {"ansible_ssh_private_key_file": "/k/id\nProxyCommand x"},
        {"ansible_ssh_common_args": "-o 'KnownHostsCommand=ssh-keyscan %H'"},
    ]
    for hv in cases:
        with pytest.raises(SparkctlError) as err:
            sshconfig.write(tmp_path / "ssh_config", {"spark1": hv}, ["spark1"])
        assert err.value.code == ExitCode.BAD_INPUT, hv
        assert "spark1" in err.value.message, hv
        assert not (tmp_path / "ssh_config").exists()
    with pytest.raises(SparkctlError):
        sshconfig.write(tmp_path / "ssh_config", {"-oProxyCommand=x": {}}, ["-oProxyCommand=x"])


def test_a_written_config_has_one_line_per_option(state: Path, tmp_path: Path) -> None:
    path = sshconfig.write(
        tmp_path / "ssh_config",
        {
            "spark1": {
                "ansible_host": "10.77.0.11",
                "ansible_user": "nvidia",
                "ansible_port": "2222",
                "ansible_ssh_common_args": "-C -o ConnectTimeout=20",
            }
        },
        ["spark1"],
    )
    lines = path.read_text().splitlines()
    assert lines[1:3] == ["Host spark1", "  StrictHostKeyChecking yes"]
    assert "  Compression yes" in lines and "  Port 2222" in lines
    assert all(line.startswith(("#", "Host ", "  ")) for line in lines)


# ------------------------------------------------------ ControlMaster directory
def test_control_sockets_live_in_a_private_directory_of_the_state_dir(state: Path) -> None:
    path = sshconfig.control_dir()
    assert path == state / "ssh-cm"
    info = path.lstat()
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    assert stat.S_IMODE(info.st_mode) == 0o700
    path.chmod(0o755)  # loosened by hand: tightened again
    assert stat.S_IMODE(sshconfig.control_dir().lstat().st_mode) == 0o700


def test_a_link_in_place_of_the_directory_is_refused(state: Path, tmp_path: Path) -> None:
    (state / "ssh-cm").symlink_to(tmp_path)
    with pytest.raises(SparkctlError) as err:
        sshconfig.control_dir()
    assert err.value.code == ExitCode.ENVIRONMENT
    assert "not a directory of this user" in err.value.message


def test_a_directory_another_user_made_is_refused(state: Path) -> None:
    (state / "ssh-cm").mkdir(mode=0o700)
    os.chown(state / "ssh-cm", 65534, 65534)  # the tests run as root (the lab needs it)
    with pytest.raises(SparkctlError) as err:
        sshconfig.control_dir()
    assert err.value.code == ExitCode.ENVIRONMENT and str(state / "ssh-cm") in err.value.message


def test_a_state_dir_too_deep_for_a_socket_falls_back_to_a_checked_tmp_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 60)
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = sshconfig.control_dir()
    assert path == tmp_path / f"sparkctl-cm-{os.getuid()}"
    assert stat.S_IMODE(path.lstat().st_mode) == 0o700
    path.rmdir()
    path.symlink_to(deep.parent)  # planted by someone else before the first run
    with pytest.raises(SparkctlError):
        sshconfig.control_dir()


# ------------------------------------------------------------- ssh's argv
def test_host_names_never_reach_sshs_option_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """validate's runner puts ``--`` before the host: whatever the name, ssh reads it as a
    destination (a recording ssh on PATH shows the argv)."""
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    record = tmp_path / "argv"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("ssh") == str(fake)
    ssh.ssh_runner(tmp_path / "ssh_config")("spark1", "true", 10)
    argv = record.read_text().splitlines()
    assert argv == ["-F", str(tmp_path / "ssh_config"), "--", "spark1", "true"]
