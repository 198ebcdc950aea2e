"""The bad-input corpus: every kind of bad inventory is refused before any host is contacted.

Each directory of tests/fixtures/bad_inputs/ (see its README.md) is a small
inventory with one thing wrong and an ``expect.yml``. ``sparkctl inventory
check`` must exit 2 with a line naming the file, the host and the variable,
say what is wrong (and suggest the near miss), and never show a traceback.
For a subset spanning the categories, ``provision``, ``validate`` and ``serve
up`` must stop the same way, with ssh, scp and sftp on PATH replaced by
recorders that nothing may start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import ExitCode
from tests.unit.cli_run import check_cli, run_cli

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs"
CASES = sorted(p for p in CORPUS.iterdir() if (p / "expect.yml").is_file())
VALID = [CORPUS / "_valid", CORPUS / "_valid_two_groups"]
CATEGORIES = {
    "wrong-type",
    "missing-required",
    "address",
    "subnet",
    "switch-os",
    "switch-ports",
    "tp",
    "tp-groups",
    "yaml-syntax",
    "ini-syntax",
    "unreadable",
    "unknown-variable",
    "password",
    "vault",
    "host-key",
    "api-sources",
    "connection",
    "range",
    "format",
    "relation",
    "secret",
    "bomb",
}
KEYS = {
    "category",
    "why",
    "exit",
    "file",
    "host",
    "variable",
    "says",
    "suggest",
    "unreadable",
    "secret",
}
# Vault passwords Ansible would pick up from the environment: none for the corpus.
VAULT_ENV = ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST")


def expectation(case: Path) -> dict[str, Any]:
    data = yaml.safe_load((case / "expect.yml").read_text())
    assert isinstance(data, dict), case
    return data


def make_unreadable(path: Path) -> str:
    """Make ``path`` unreadable: chmod 000, or (root reads anything) a link to nowhere."""
    path.chmod(0)
    try:
        path.open("rb").close()
    except PermissionError:
        return "chmod 000"
    path.chmod(0o644)
    path.unlink()
    path.symlink_to(path.with_name(f"{path.name}.missing"))
    return "dangling symlink"


def materialise(case: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A copy of ``case`` under tmp_path: (its directory, its inventory, its expectation)."""
    dest = tmp_path / case.name
    shutil.copytree(case, dest, symlinks=True)
    expect = expectation(dest)
    if expect.get("unreadable"):
        make_unreadable(dest / expect["unreadable"])
    (ini,) = dest.glob("*.ini")
    return dest, ini, expect


def assert_names_the_problem(output: str, dest: Path, expect: dict[str, Any]) -> None:
    """One line names the file, host and variable; the output says what is expected."""
    assert "Traceback" not in output, output
    assert "internal error" not in output, output
    where = str(dest / expect["file"])
    lines = [ln for ln in output.splitlines() if where in ln]
    if expect.get("variable"):
        lines = [ln for ln in lines if f"variable {expect['variable']}:" in ln]
    if expect.get("host"):
        lines = [ln for ln in lines if f"host {expect['host']}:" in ln]
    assert lines, (
        f"no line names {where}, host {expect.get('host')}, variable "
        f"{expect.get('variable')}:\n{output}"
    )
    for text in expect["says"]:
        assert text in output, (text, output)
    if expect.get("suggest"):
        assert f"did you mean {expect['suggest']}?" in output, output
    if expect.get("secret"):  # a secret in the case is never echoed back
        assert expect["secret"] not in output, output


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    for name in VAULT_ENV:
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------ the corpus
def test_corpus_covers_every_category() -> None:
    assert len(CASES) >= 25, len(CASES)
    seen: dict[str, int] = {}
    for case in CASES:
        expect = expectation(case)
        assert set(expect) <= KEYS, (case.name, set(expect) - KEYS)
        assert {"category", "why", "exit", "file", "says"} <= set(expect), case.name
        assert expect["exit"] == ExitCode.BAD_INPUT.value == 2, case.name
        assert expect["says"] and all(isinstance(s, str) for s in expect["says"]), case.name
        assert expect["category"] in CATEGORIES, (case.name, expect["category"])
        assert len(list(case.glob("*.ini"))) == 1, case.name
        if not expect.get("unreadable"):
            assert (case / expect["file"]).is_file(), case.name
        seen[expect["category"]] = seen.get(expect["category"], 0) + 1
    assert set(seen) == CATEGORIES, CATEGORIES - set(seen)


@pytest.mark.parametrize("valid", VALID, ids=[p.name for p in VALID])
def test_the_inventories_the_cases_edit_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], valid: Path
) -> None:
    """Each case fails for its one edit, not for something every case shares."""
    shutil.copytree(valid, tmp_path / valid.name)
    code, output = check_cli(monkeypatch, capsys, tmp_path / valid.name / "tiny.ini")
    assert code == 0, output
    assert ": OK" in output, output


@pytest.mark.parametrize("case", CASES, ids=[p.name for p in CASES])
def test_inventory_check_refuses_naming_file_host_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: Path
) -> None:
    dest, ini, expect = materialise(case, tmp_path)
    code, output = check_cli(monkeypatch, capsys, ini)
    assert code == expect["exit"] == ExitCode.BAD_INPUT, output
    assert_names_the_problem(output, dest, expect)


def test_unreadable_cases_are_unreadable_the_honest_way(tmp_path: Path) -> None:
    """chmod 000 when it works (not root); a link to nowhere when root reads anyway."""
    path = tmp_path / "f.yml"
    path.write_text("a: 1\n")
    how = make_unreadable(path)
    if os.geteuid() != 0:
        assert how == "chmod 000"
    with pytest.raises(OSError):  # PermissionError, or FileNotFoundError for the link
        path.open("rb").close()


# ----------------------------------------- nothing is contacted, by any command
# A case per kind of failure: a load error, a rule, YAML, the vault, host keys, passwords,
# and of every family of the schema (issue 16): a connection value that would be an ssh
# line, a relation, a plaintext secret, an alias bomb, a range, an injection-style format.
NO_CONTACT = [
    "wrong-type-string-for-number",
    "missing-node-rank",
    "address-duplicate-mgmt",
    "yaml-syntax-group-vars",
    "ini-syntax-unknown-section-type",
    "vault-no-password",
    "host-key-strict-no",
    "password-ansible-password",
    "switch-os-junos",
    "connection-user-newline-match-exec",
    "host-key-known-hosts-command",
    "relation-extra-arg-secret",
    "secret-api-key-plaintext",
    "bomb-yaml-aliases",
    "range-switch-mtu-value",
    "format-sglang-extra-args-newline-exec-start-pre",
    "format-nccl-env-extra-key-newline",
]
COMMANDS = [("provision",), ("validate",), ("serve", "up")]
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> \'{marker}\'\nexit 255\n'


@pytest.fixture
def recorders(tmp_path: Path) -> tuple[Path, Path]:
    """A bin directory whose ssh, scp, sftp and ssh-keyscan record that they ran;
    (bin, marker)."""
    bin_dir, marker = tmp_path / "fake-bin", tmp_path / "contacted"
    bin_dir.mkdir()
    for tool in ("ssh", "scp", "sftp", "ssh-keyscan"):
        stub = bin_dir / tool
        stub.write_text(RECORDER.format(marker=marker))
        stub.chmod(0o755)
    return bin_dir, marker


def test_the_recorders_record(recorders: tuple[Path, Path]) -> None:
    """The check below means something: a started ssh leaves the marker."""
    bin_dir, marker = recorders
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "192.0.2.11", "true"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert proc.returncode == 255
    assert marker.read_text() == "ssh -o BatchMode=yes 192.0.2.11 true\n"


@pytest.mark.parametrize("command", COMMANDS, ids=["-".join(c) for c in COMMANDS])
@pytest.mark.parametrize("name", NO_CONTACT)
def test_commands_stop_before_contacting_any_host(
    *,
    tmp_path: Path,
    recorders: tuple[Path, Path],
    name: str,
    command: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real command, in-process (its own entry point, cli.main): anything it started
    (ansible-playbook, ssh-keyscan) would find the recorders first on PATH."""
    assert expectation(CORPUS / name)["category"] in CATEGORIES
    dest, ini, expect = materialise(CORPUS / name, tmp_path)
    bin_dir, marker = recorders
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("NO_COLOR", "1")
    code, output = run_cli(monkeypatch, capsys, *command, str(ini))
    assert code == ExitCode.BAD_INPUT, output
    assert not marker.exists(), marker.read_text() if marker.exists() else ""
    assert_names_the_problem(output, dest, expect)
    assert not (tmp_path / "state" / "results").exists(), "a run started"
