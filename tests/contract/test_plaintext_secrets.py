"""No plaintext secret in an inventory file, in both paths, and never echoed.

A variable named like a secret (``*_token``, ``*_api_key``, ``*_password``, ...)
must be vault-encrypted or come from the controller's environment. `inventory check`
(the loader sees the values as Ansible loaded them, tags and all) and the preflight
play (the same rule, rules.secrets.plaintext_secret, as a filter) refuse a plain one
before any host is contacted, and neither prints it. A vaulted value and one from
``lookup('ansible.builtin.env', ...)`` pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import inventory
from sparkctl.errors import ExitCode, SparkctlError
from tests.contract.test_inventory_types import (
    _ansible_playbook,
    _assert_no_host_contacted,
    _failures,
    _unreachable_copy,
)

PLAIN = "plaintext-secret-never-echoed-7c1e"
VAULT_PASSWORD = "test-only-vault-password"  # noqa: S105 - test data


def _vaulted(tmp_path: Path, name: str, value: str) -> str:
    pw = tmp_path / "vault-pw"
    pw.write_text(VAULT_PASSWORD)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-vault"),
            "encrypt_string",
            "--vault-password-file",
            str(pw),
            "--name",
            name,
            value,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return proc.stdout


@pytest.fixture(scope="module")
def plaintext_site(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    tmp_path = tmp_path_factory.mktemp("plaintext")
    path = _unreachable_copy(tmp_path)
    (tmp_path / "group_vars" / "sim" / "zz_secret.yml").write_text(
        f"model_cache_hf_token: {PLAIN}\n"
    )
    return path, _ansible_playbook(tmp_path, path, "site.yml")


def test_inventory_check_refuses_it_without_echoing_it(
    plaintext_site: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    path, _ = plaintext_site
    with pytest.raises(SparkctlError) as info:
        inventory.validate(path)
    assert info.value.code == ExitCode.BAD_INPUT
    message = info.value.message
    assert "group_vars/sim/zz_secret.yml:1:" in message
    assert "all hosts: variable model_cache_hf_token: is a secret in plain text" in message
    assert PLAIN not in message and PLAIN not in (info.value.hint or "")


def test_the_preflight_play_refuses_it_without_echoing_it(
    plaintext_site: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    path, proc = plaintext_site
    assert proc.returncode == 2, proc.stdout[-3000:]
    message = str(_failures(proc.stdout)[0][1]["msg"])
    assert "variable model_cache_hf_token: is a secret in plain text" in message
    assert "zz_secret.yml:1:" in message
    assert PLAIN not in proc.stdout + proc.stderr
    _assert_no_host_contacted(path.parent, proc)


def test_a_vaulted_or_environment_secret_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vaulted secret passes; one from the controller's environment is the role's own
    lookup (SPARKCTL_SGLANG_API_KEY), never the inventory's: a lookup in an inventory
    value is a template, refused without running it or showing it."""
    path = _unreachable_copy(tmp_path)
    secret_file = tmp_path / "group_vars" / "sim" / "zz_secret.yml"
    secret_file.write_text(_vaulted(tmp_path, "model_cache_hf_token", PLAIN))
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "vault-pw"))
    monkeypatch.setenv("SPARKCTL_SGLANG_API_KEY", "a-key-from-the-environment-0123")
    inv = inventory.validate(path)
    assert PLAIN in inv.secrets  # decrypted, and kept out of every message
    assert "sglang_api_key" not in inv.hostvars["spark1"]  # the role reads the environment

    secret_file.write_text(
        "sglang_api_key: \"{{ lookup('ansible.builtin.env', 'SPARKCTL_SGLANG_API_KEY') }}\"\n"
    )
    with pytest.raises(SparkctlError) as refused:
        inventory.validate(path)
    assert refused.value.code == ExitCode.BAD_INPUT
    assert "variable sglang_api_key: is a template" in refused.value.message
    assert "a-key-from-the-environment-0123" not in refused.value.message
