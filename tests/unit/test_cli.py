"""The sparkctl command line: version, help, exit codes and error output.

Most tests run ``sparkctl.cli.main`` in-process with a patched ``sys.argv``
(and ``os.geteuid``/``PATH`` where the test is about the environment), so they
exercise the real error handling that maps SparkctlError to exit codes. None
of them gets as far as touching podman: each stops at a check that comes
before it, and PATH holds only stubs that fail where a check is passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from sparkctl import __version__, cli
from sparkctl.errors import ExitCode
from sparkctl_lab import cli as lab_commands

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
LAB_TOOLS = ("podman", "runc", "ip", "tc", "nsenter", "ssh-keygen", "ssh")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("SPARKCTL_DEBUG", "SPARKCTL_LAB_INVENTORY", "SPARKCTL_LAB_MIRROR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))


def run_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """Run sparkctl's entry point in-process; return (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["sparkctl", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def stub_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with only stubs of the lab's tools, and root.

    Each stub fails if it is ever run, so a test that unexpectedly gets past
    the check it is about fails instead of touching a real lab.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in LAB_TOOLS:
        stub = bin_dir / tool
        stub.write_text('#!/bin/sh\necho "stub $0 must not run" >&2\nexit 97\n')
        stub.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return bin_dir


# -------------------------------------------------------------- subprocess
def test_version_subprocess() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"sparkctl, version {__version__}"


def test_console_script_help() -> None:
    script = Path(sys.executable).parent / "sparkctl"
    if not script.exists():
        pytest.skip(f"no sparkctl console script next to {sys.executable}")
    proc = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0
    assert "Usage: sparkctl" in proc.stdout
    assert "lab" in proc.stdout.split("Commands:")[1].split()


# --------------------------------------------------------------- in-process
def test_version(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "--version")
    assert code == 0
    assert __version__ in out


def test_help_lists_lab(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "--help")
    assert code == 0
    commands = out.split("Commands:")[1]
    assert "lab" in commands.split()


def test_lab_help_lists_subcommands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "lab", "-h")
    assert code == 0
    words = out.split("Commands:")[1].split()
    for sub in ("up", "down", "status", "ssh", "port"):
        assert sub in words


def test_lab_up_not_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # every tool present, but not root
    code, out, err = run_main(monkeypatch, capsys, "lab", "up")
    assert code == int(ExitCode.ENVIRONMENT) == 4
    assert "root" in err
    assert "error:" in err
    assert "Traceback" not in err + out


def test_lab_up_without_podman(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    code, out, err = run_main(monkeypatch, capsys, "lab", "up")
    assert code == ExitCode.ENVIRONMENT
    assert "podman" in err
    assert "hint:" in err  # how to install it
    assert "Traceback" not in err + out


@pytest.mark.parametrize("missing", ["runc", "tc", "nsenter", "ssh-keygen"])
def test_lab_up_without_a_wiring_tool(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stub_tools: Path,
    missing: str,
) -> None:
    (stub_tools / missing).unlink()
    code, _, err = run_main(monkeypatch, capsys, "lab", "up")
    assert code == ExitCode.ENVIRONMENT
    assert f"'{missing}'" in err


def test_lab_up_nonexistent_inventory(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    code, out, err = run_main(monkeypatch, capsys, "lab", "up", "-i", "/nonexistent.ini")
    assert code == int(ExitCode.BAD_INPUT) == 2
    assert "/nonexistent.ini" in err
    assert "not found" in err
    assert "stub" not in err  # nothing was run
    assert "Traceback" not in err + out


def test_lab_up_inventory_from_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    monkeypatch.setenv("SPARKCTL_LAB_INVENTORY", "/nonexistent-env.ini")
    code, _, err = run_main(monkeypatch, capsys, "lab", "up")
    assert code == ExitCode.BAD_INPUT
    assert "/nonexistent-env.ini" in err


def test_lab_up_real_cluster_inventory_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    code, _, err = run_main(
        monkeypatch, capsys, "lab", "up", "-i", str(ROOT / "inventory" / "lab.ini")
    )
    assert code == ExitCode.BAD_INPUT
    assert "switch_os" in err
    assert "stub" not in err


def test_inventory_directory_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stub_tools: Path,
    tmp_path: Path,
) -> None:
    code, _, err = run_main(monkeypatch, capsys, "lab", "up", "-i", str(tmp_path))
    assert code == ExitCode.BAD_INPUT
    assert "directory" in err


@pytest.mark.parametrize(
    "args",
    [
        ("lab", "up", "--rate", "0"),
        ("lab", "nosuch"),
        ("--nosuch",),
        ("lab", "port", "swp1", "--mtu", "9"),
    ],
)
def test_usage_errors_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stub_tools: Path,
    args: tuple[str, ...],
) -> None:
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == ExitCode.BAD_INPUT
    assert "Error" in err
    assert "Traceback" not in err + out
    assert "stub" not in err


def test_debug_prints_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    code, _, err = run_main(monkeypatch, capsys, "--debug", "lab", "up", "-i", "/nonexistent.ini")
    assert code == ExitCode.BAD_INPUT
    assert "Traceback" in err
    assert "/nonexistent.ini" in err


def test_debug_from_env_prints_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    monkeypatch.setenv("SPARKCTL_DEBUG", "1")
    code, _, err = run_main(monkeypatch, capsys, "lab", "up", "-i", "/nonexistent.ini")
    assert code == ExitCode.BAD_INPUT
    assert "Traceback" in err


def test_debug_env_zero_means_off(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    monkeypatch.setenv("SPARKCTL_DEBUG", "0")
    code, _, err = run_main(monkeypatch, capsys, "lab", "up", "-i", "/nonexistent.ini")
    assert code == ExitCode.BAD_INPUT
    assert "Traceback" not in err


def test_ctrl_c_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    from sparkctl_lab import lab as lab_mod  # noqa: PLC0415

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(lab_mod, "check_environment", interrupted)
    code, out, err = run_main(monkeypatch, capsys, "lab", "up")
    assert code == int(ExitCode.INTERRUPTED) == 130
    assert "Traceback" not in err + out


SIM = str(ROOT / "inventory" / "sim.ini")


def test_model_sync_without_a_model_is_refused_before_any_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stub_tools: Path
) -> None:
    code, out, err = run_main(monkeypatch, capsys, "model", "sync", SIM)
    assert code == ExitCode.BAD_INPUT
    assert "variable model_cache_source" in err and "nothing was contacted" in err
    assert "stub" not in err and "Traceback" not in err + out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("model_cache_source", "expected KEY=VALUE"),
        ("{not: [closed", "not a YAML mapping"),
        ("[1, 2]=x", "expected KEY=VALUE"),
    ],
)
def test_model_sync_bad_extra_vars_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stub_tools: Path,
    extra: str,
    message: str,
) -> None:
    code, _, err = run_main(monkeypatch, capsys, "model", "sync", SIM, "-e", extra)
    assert code == ExitCode.BAD_INPUT
    assert message in err


def test_lab_model_size_is_parsed_in_binary_units() -> None:
    assert lab_commands.parse_size("1GiB") == 1 << 30
    assert lab_commands.parse_size("512M") == 512 << 20
    assert lab_commands.parse_size("64 MiB") == 64 << 20
    assert lab_commands.parse_size("1048576") == 1 << 20
    for bad in ("lots", "-1G", "1PB", "0"):
        with pytest.raises(click.BadParameter):
            lab_commands.parse_size(bad)


def test_report_nccl_parses_a_saved_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.unit.test_nccl_parse import MODERN  # noqa: PLC0415

    log = tmp_path / "run.log"
    log.write_text(MODERN)
    code, out, _ = run_main(monkeypatch, capsys, "report", "nccl", str(log), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["avg_busbw"] == 11.455 and len(data["rows"]) == 3 and data["wrong"] == 0


@pytest.mark.parametrize(
    "content", [b"", b"\x00\xff\xfe garbage", b"#       size count type redop\n"]
)
def test_report_nccl_refuses_what_is_not_a_complete_log(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    content: bytes,
) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(content)
    code, out, err = run_main(monkeypatch, capsys, "report", "nccl", str(log))
    assert code == ExitCode.BAD_INPUT
    assert str(log) in err and "Traceback" not in err + out


def test_report_nccl_missing_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_main(monkeypatch, capsys, "report", "nccl", str(tmp_path / "absent.log"))
    assert code == ExitCode.BAD_INPUT and "absent.log" in err
