"""The sglang_watchdog role: the watchdog's unit on the controller, rendered and run.

The unit template is rendered with the role's own sink filters for a controller run
as root (a system unit) and as another user (a user unit), and each file is read by
systemd itself (``systemd-analyze verify``, which needs no running systemd). The
role then runs through sparkctl's runner on this machine, whose PID 1 is not
systemd: the unit is written and verified, not started; switched off, it is removed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl import paths
from sparkctl.errors import ExitCode
from tests.unit.cli_run import check_cli
from tests.unit.pathload import load_file
from tests.unit.role_templates import template_env

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "sglang_watchdog"
VALID = REPO / "tests" / "fixtures" / "bad_inputs" / "_valid"
sinks_f = load_file(
    "sglang_watchdog_sink_filters", ROLE.parents[1] / "plugins" / "filter" / "sparkctl_sinks.py"
)
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="no systemd-analyze here")
CONSTANTS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def _render(context: dict[str, Any]) -> str:
    env = template_env(ROLE, [sinks_f.FilterModule().filters()])
    return env.get_template("sparkctl-watch.service.j2").render(**context)


def _context(root: bool = True, **override: Any) -> dict[str, Any]:
    """The template's variables as the role has them on a controller (vars/main.yml's
    constants as written there)."""
    user = "root" if root else "ops"
    return {
        "_sglang_watchdog_cluster": "lab",
        "_sglang_watchdog_unit": "sparkctl-watch-lab.service",
        "_sglang_watchdog_system": root,
        "_sglang_watchdog_user": user,
        "sparkctl_state_dir": "/root/.local/state/sparkctl" if root else "/home/ops/state",
        "sglang_watchdog_textfile_dir": "",
        "sglang_watchdog_max_restarts": 3,
        "sglang_watchdog_restart_window": 3600,
        "sglang_watchdog_backoff": 30,
        "_sglang_watchdog_vault_env": {},
        # the Python running this test exists: systemd-analyze checks the program
        "sparkctl_python": sys.executable,
        "sparkctl_inventory": "/srv/sparkctl/inventory/lab.ini",
        **{
            k: CONSTANTS[k]
            for k in (
                "_sglang_watchdog_restart_sec",
                "_sglang_watchdog_start_limit_interval",
                "_sglang_watchdog_start_limit_burst",
                "_sglang_watchdog_no_restart_status",
            )
        },
        **override,
    }


def _settings(unit: str) -> list[str]:
    return [ln for ln in unit.splitlines() if ln and not ln.startswith(("#", "["))]


def _execstart(unit: str) -> list[str]:
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$"))


def _verify(unit: str, tmp_path: Path, *, user: bool) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze [--user] verify`` of ``unit`` written as its unit file; a user
    unit's check gets a runtime directory of its own, as the role's verify gives it."""
    path = tmp_path / "sparkctl-watch-lab.service"
    path.write_text(unit)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *(["--user"] if user else []), "verify", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
    )


# -------------------------------------------------------------- the unit
def test_a_root_controller_gets_a_system_unit() -> None:
    unit = _render(_context(root=True))
    lines = _settings(unit)
    assert "User=root" in lines
    assert "WantedBy=multi-user.target" in lines
    assert "After=network-online.target" in lines
    assert 'Environment="SPARKCTL_STATE_DIR=/root/.local/state/sparkctl"' in lines
    assert not [ln for ln in lines if "SPARKCTL_TEXTFILE_DIR" in ln]
    assert _execstart(unit) == [
        sys.executable,
        "-m",
        "sparkctl",
        "serve",
        "watch",
        "/srv/sparkctl/inventory/lab.ini",
        "--max-restarts",
        "3",
        "--restart-window",
        "3600",
        "--backoff",
        "30",
    ]
    # a crash loop ends; giving up (1) and bad input (2) are never restarted
    assert "Restart=on-failure" in lines and "RestartSec=30" in lines
    assert "RestartPreventExitStatus=1 2" in lines
    assert unit.index("StartLimitBurst=5") < unit.index("[Service]")  # a [Unit] setting
    assert "StartLimitIntervalSec=900" in lines
    assert "enable-linger" not in unit


def test_another_user_gets_a_unit_of_their_own_manager() -> None:
    unit = _render(_context(root=False, sglang_watchdog_textfile_dir="/var/lib/node-exporter"))
    lines = _settings(unit)
    assert not [ln for ln in lines if ln.startswith("User=")]  # a user manager runs as its user
    assert "WantedBy=default.target" in lines
    assert not [ln for ln in lines if "network-online" in ln]  # no such target for a user
    assert "loginctl enable-linger ops" in unit
    assert 'Environment="SPARKCTL_TEXTFILE_DIR=/var/lib/node-exporter"' in lines


def test_no_secret_reaches_the_unit() -> None:
    """The key is found by serve watch itself; the unit names only paths."""
    vault = {"ANSIBLE_VAULT_PASSWORD_FILE": "/root/.vault-pass"}
    unit = _render(_context(_sglang_watchdog_vault_env=vault))
    assert 'Environment="ANSIBLE_VAULT_PASSWORD_FILE=/root/.vault-pass"' in _settings(unit)
    assert "API_KEY" not in unit and "sglang_api_key" not in unit


@needs_analyze
@pytest.mark.parametrize("root", [True, False], ids=["system", "user"])
def test_systemd_reads_the_rendered_unit_without_a_word_of_complaint(
    root: bool, tmp_path: Path
) -> None:
    unit = _render(
        _context(
            root=root,
            sglang_watchdog_textfile_dir="/var/lib/node-exporter",
            sparkctl_inventory="/srv/my inventories/100% lab.ini",
            _sglang_watchdog_vault_env={"ANSIBLE_VAULT_PASSWORD_FILE": "/srv/vault pass"},
        )
    )
    proc = _verify(unit, tmp_path, user=not root)
    assert proc.returncode == 0, proc.stderr
    assert "sparkctl-watch-lab.service" not in proc.stderr, proc.stderr
    # a blank and a % in the inventory's path reach the command line as they are
    assert _execstart(unit)[5] == "/srv/my inventories/100% lab.ini"


@needs_analyze
def test_the_verify_finds_what_systemd_would_refuse(tmp_path: Path) -> None:
    """The role's check can fail: a program that is not there, a value systemd ignores."""
    missing = _render(_context(sparkctl_python="/nonexistent/bin/python3"))
    proc = _verify(missing, tmp_path, user=False)
    assert proc.returncode != 0 and "/nonexistent/bin/python3" in proc.stderr, proc.stderr
    broken = _render(_context()).replace("RestartSec=30", "RestartSec=soon")
    proc = _verify(broken, tmp_path, user=False)
    # exit 0 with a warning naming the file: the role fails on that line too
    assert "sparkctl-watch-lab.service" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ({"sparkctl_state_dir": "/srv/state\nExecStartPre=/bin/sh -c id"}, "sparkctl_state_dir: "),
        ({"sparkctl_state_dir": "/srv/%h/state"}, "sparkctl_state_dir: "),
        ({"sparkctl_state_dir": '/srv/"state'}, "sparkctl_state_dir: "),
        ({"sglang_watchdog_textfile_dir": "/srv/%i"}, "sglang_watchdog_textfile_dir: "),
        ({"sglang_watchdog_textfile_dir": "/srv/a b"}, "sglang_watchdog_textfile_dir: "),
        ({"sparkctl_inventory": "/srv/lab.ini\nUser=nobody"}, "the watchdog command line: "),
        ({"sparkctl_python": "/opt/my venv/bin/python"}, "absolute path"),
        ({"sparkctl_python": "-/usr/bin/python3"}, "absolute path"),
        ({"_sglang_watchdog_cluster": "lab\nUser=nobody"}, "cluster group: "),
        (
            {"_sglang_watchdog_vault_env": {"ANSIBLE_VAULT_PASSWORD_FILE": "/srv/%n"}},
            "ANSIBLE_VAULT_PASSWORD_FILE: ",
        ),
    ],
)
def test_a_value_that_would_change_the_unit_is_refused(override: dict[str, Any], says: str) -> None:
    with pytest.raises(sinks_f.AnsibleFilterError, match=says):
        _render(_context(**override))


# ------------------------------------------------------------ the variables
def _inventory(tmp_path: Path, extra: str) -> Path:
    dest = tmp_path / "inv"
    shutil.copytree(VALID, dest)
    with (dest / "group_vars" / "tiny" / "cluster.yml").open("a") as fh:
        fh.write(extra)
    return dest / "tiny.ini"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("sglang_watchdog_enabled: maybe\n", "sglang_watchdog_enabled: 'maybe' is a string"),
        ("sglang_watchdog_textfile_dir: metrics\n", "variable sglang_watchdog_textfile_dir"),
        ("sglang_watchdog_max_restarts: 0\n", "variable sglang_watchdog_max_restarts"),
        ("sglang_watchdog_restart_window: an hour\n", "sglang_watchdog_restart_window: 'an hour'"),
        ("sparkctl_inventory: /srv/other.ini\n", "is set by sparkctl for every run"),
    ],
)
def test_inventory_check_types_the_watchdog_variables(
    text: str,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = check_cli(monkeypatch, capsys, _inventory(tmp_path, text))
    assert code == ExitCode.BAD_INPUT, output
    assert says in output, output


def test_the_controller_variables_name_this_python_and_the_inventory(tmp_path: Path) -> None:
    ini = tmp_path / "lab.ini"
    found = paths.controller_vars(ini)
    assert found["sparkctl_python"] == sys.executable
    assert found["sparkctl_inventory"] == str(ini.resolve())
    assert set(found) == set(paths.CONTROLLER_VARS)


# --------------------------------------------------------- the role, run here
def _run(ini: Path, tmp_path: Path) -> Any:
    from sparkctl.runner import run_playbook  # noqa: PLC0415 - ansible-runner

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "AnsibleCollectionFinder has already been configured", UserWarning
        )
        return run_playbook(
            "sglang_watchdog.yml",
            ini,
            results_dir=tmp_path / "runs" / str(len(list(tmp_path.glob("runs/*")))),
            hosts=3,
            # the unit goes here, not into this machine's /etc/systemd/system
            extravars={"_sglang_watchdog_unit_dir": str(tmp_path / "units")},
        )


def _stdout(result: Any) -> str:
    return str((result.artifact_dir / "stdout").read_text())


@pytest.fixture
def controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    for name in ("SPARKCTL_SGLANG_API_KEY", "ANSIBLE_VAULT_PASSWORD_FILE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "units").mkdir()
    return tmp_path


def _in_a_container() -> bool:
    return Path("/proc/1/comm").read_text().strip() != "systemd"


@pytest.mark.skipif(os.geteuid() != 0, reason="the run as root writes a system unit")
@pytest.mark.skipif(not _in_a_container(), reason="a controller run by systemd would start it")
def test_the_role_installs_verifies_and_removes_the_unit(controller: Path) -> None:
    tmp_path = controller
    key = tmp_path / "state" / "clusters" / "tiny" / "secrets" / "sglang-api-key"
    key.parent.mkdir(parents=True)
    key.write_text("k" * 40 + "\n")
    key.chmod(0o600)
    ini = _inventory(tmp_path, "sglang_watchdog_enabled: true\nsglang_watchdog_max_restarts: 2\n")
    unit = tmp_path / "units" / "sparkctl-watch-tiny.service"

    result = _run(ini, tmp_path)
    assert result.ok, _stdout(result)[-3000:]
    text = unit.read_text()
    assert _execstart(text) == [
        sys.executable,
        "-m",
        "sparkctl",
        "serve",
        "watch",
        str(ini.resolve()),
        "--max-restarts",
        "2",  # the inventory's, from the head's hostvars
        "--restart-window",
        "3600",
        "--backoff",
        "30",
    ]
    assert f'Environment="SPARKCTL_STATE_DIR={tmp_path / "state"}"' in text
    out = _stdout(result)
    assert "systemd-analyze verify the unit" in out
    assert "neither enabled nor started: PID 1 on this controller is" in out, out[-3000:]

    (ini.parent / "group_vars" / "tiny" / "cluster.yml").write_text(
        (ini.parent / "group_vars" / "tiny" / "cluster.yml")
        .read_text()
        .replace("sglang_watchdog_enabled: true", "sglang_watchdog_enabled: false")
    )
    result = _run(ini, tmp_path)
    assert result.ok, _stdout(result)[-3000:]
    assert not unit.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the run as root writes a system unit")
def test_the_role_refuses_a_key_the_service_cannot_see(
    controller: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key only in this shell's environment: no unit, and a message that says why."""
    tmp_path = controller
    monkeypatch.setenv("SPARKCTL_SGLANG_API_KEY", "k" * 40)
    ini = _inventory(tmp_path, "sglang_watchdog_enabled: true\n")
    result = _run(ini, tmp_path)
    assert not result.ok
    out = _stdout(result)
    assert "the service would find no API key" in out, out[-3000:]
    assert "k" * 40 not in out
    assert not list((tmp_path / "units").iterdir())
