"""An injection of each class reaches no rendered file: `render` refuses it first.

The classes a security review of render found: a newline that starts another unit or
env-file line, shell metacharacters in a value a shell or a launcher reads, an ssh
option that runs a command or vouches for host keys, a path that leaves the directory
it names. For each, `sparkctl render` (in-process, its own entry point) exits 2 naming
the variable and writes nothing under --out; the same inventory without the edit is
`_valid`, which renders (tests/contract/test_render.py renders the example inventories).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.cli_run import run_cli

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs"

CLASSES = [
    (
        "newline",
        "group_vars/tiny/cluster.yml",
        'sglang_extra_args: ["--enable-metrics\\nExecStartPre=/bin/sh -c id"]\n',
        "sglang_extra_args",
    ),
    (
        "newline-env",
        "group_vars/tiny/cluster.yml",
        'nccl_env_extra: {"reboot\\n": "1"}\n',
        "nccl_env_extra",
    ),
    (
        "shell",
        "group_vars/tiny/cluster.yml",
        'sglang_env_extra: {SGLANG_X: "$(touch /tmp/pwned)"}\n',
        "sglang_env_extra",
    ),
    (
        "shell-args",
        "group_vars/tiny/cluster.yml",
        'sglang_extra_args: ["--x;reboot"]\n',
        "sglang_extra_args",
    ),
    (
        "ssh-option",
        "group_vars/tiny/connection.yml",
        "ansible_ssh_extra_args: -o 'ProxyCommand=sh -c id'\n",
        "ansible_ssh_extra_args",
    ),
    ("path", "group_vars/tiny/cluster.yml", "sglang_env_file: /../../tmp/x\n", "sglang_env_file"),
]


@pytest.mark.parametrize(("name", "file", "line", "var"), CLASSES, ids=[c[0] for c in CLASSES])
def test_render_refuses_the_injection_and_writes_nothing(
    *,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    file: str,
    line: str,
    var: str,
) -> None:
    inv = tmp_path / "inv"
    shutil.copytree(CORPUS / "_valid", inv)
    with (inv / file).open("a") as fh:
        fh.write(line)
    out = tmp_path / "out"
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    code, output = run_cli(monkeypatch, capsys, "render", str(inv / "tiny.ini"), "--out", str(out))
    assert code == 2, output
    assert f"variable {var}:" in output and "no host was contacted" in output, output
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))
    assert not (tmp_path / "pwned").exists()
