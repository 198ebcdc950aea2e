"""The files of a mature project: the licence, the changelog, the contribution guide
and the pre-commit hooks, each consistent with what the project declares and runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml

from sparkctl import __version__

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_licence_file_is_the_licence_pyproject_declares() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    # NOTICE says what a distribution combined with ansible-core (GPL-3.0-or-later) means.
    notice = (REPO / "NOTICE").read_text()
    assert "GPL-3.0-or-later" in notice and "ansible-core" in notice


def test_the_changelog_keeps_a_changelog_and_knows_this_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert "[Keep a Changelog](https://keepachangelog.com/" in text
    versions = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert versions, "no `## [version] - date` heading"
    released = [v for v, _ in versions if v != "Unreleased"]
    # The newest release is the package's version (bumped with its entry).
    assert released[:1] == [__version__], f"sparkctl {__version__}; changelog: {released}"
    for version, date in versions[1:]:
        assert date, f"{version} has no date"
    for heading in re.findall(r"^### (.+)$", text, re.MULTILINE):
        assert heading in {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def _gates() -> list[str]:
    """The gate commands scripts/test.sh runs before pytest."""
    script = (REPO / "scripts" / "test.sh").read_text()
    return [
        ln.strip()
        for ln in script.splitlines()
        if ln.strip().startswith((".venv/bin/ruff", ".venv/bin/mypy", 'PATH="$PWD/.venv/bin'))
    ]


def test_pre_commit_runs_the_gates_of_the_test_command() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert set(hooks) == {"ruff-check", "ruff-format", "mypy", "ansible-lint"}
    gates = " ".join(_gates())
    assert ".venv/bin/ruff check ." in gates and ".venv/bin/ruff format --check ." in gates
    assert ".venv/bin/mypy" in gates and "ansible-lint -q" in gates
    assert hooks["ruff-check"]["entry"].startswith(".venv/bin/ruff check")
    assert hooks["ruff-format"]["entry"].startswith(".venv/bin/ruff format --check")
    assert hooks["mypy"]["entry"] == ".venv/bin/mypy"
    assert hooks["ansible-lint"]["entry"].endswith(".venv/bin/ansible-lint -q")
    for hook in hooks.values():
        assert hook["language"] == "system"  # the project's venv, nothing fetched


def test_pre_commit_accepts_the_config() -> None:
    exe = REPO / ".venv" / "bin" / "pre-commit"
    found = str(exe) if exe.exists() else shutil.which("pre-commit")
    if found is None:
        pytest.skip("pre-commit is not installed (pip install -e '.[dev]')")
    proc = subprocess.run(
        [found, "validate-config", ".pre-commit-config.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_contribution_guide_is_a_page_and_its_commands_exist() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text()
    assert len(text.splitlines()) <= 80
    for script in re.findall(r"scripts/[\w.]+", text):
        assert (REPO / script).is_file(), script


# ------------------------------------------------- the README's two commands
def _as_nobody(script: str, path: str) -> subprocess.CompletedProcess[str]:
    """``script`` run from the checkout as an unprivileged user with only ``path``."""
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", f"scripts/{script}"],
        cwd=REPO,
        env={"PATH": path, "HOME": "/nonexistent", "SPARKCTL_MARK": "kept"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)


@needs_root
def test_quickstart_without_root_or_sudo_says_so_and_exits_4() -> None:
    proc = _as_nobody("quickstart.sh", "/usr/bin:/bin")
    assert proc.returncode == 4, proc
    assert "quickstart: needs root" in proc.stderr
    assert "as a user with sudo" in proc.stderr


@needs_root
@pytest.mark.parametrize("script", ["quickstart.sh", "test.sh"])
def test_a_sudo_user_runs_the_same_command_through_sudo(script: str) -> None:
    """A stand-in for sudo on PATH records how it was called (the real one would ask for
    the password and run the script as root, which the script then sees as EUID 0)."""
    with tempfile.TemporaryDirectory(prefix="sparkctl-sudo-") as where:
        _through_sudo(Path(where), script)


def _through_sudo(tmp_path: Path, script: str) -> None:
    tmp_path.chmod(0o755)  # the unprivileged user runs the stand-in from here
    record = tmp_path / "argv"
    sudo = tmp_path / "sudo"
    sudo.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > '
        + str(record)
        + '\necho "$SPARKCTL_MARK" >> '
        + str(record)
        + "\n"
    )
    sudo.chmod(0o755)
    record.touch()
    record.chmod(0o666)
    proc = _as_nobody(script, f"{tmp_path}:/usr/bin:/bin")
    assert proc.returncode == 0, proc
    assert record.read_text().splitlines() == ["-E", "--", str(REPO / "scripts" / script), "kept"]
