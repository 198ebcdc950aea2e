"""Vault-encrypted inventory values: decrypted with the password Ansible would use.

A copy of inventory/sim.ini gains group_vars/sim/secrets.yml with a vaulted
``sglang_api_key``, encrypted here with ansible-vault's own Python API. With
ANSIBLE_VAULT_PASSWORD_FILE (or vault_password_file in ansible.cfg)
``sparkctl inventory check`` passes; without it, it exits 2 naming the file
and the variable. The decrypted value never appears in what sparkctl prints.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import inventory, runner
from tests.unit.cli_run import check_cli

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "inventory" / "sim.ini"
VAULT_ENV = ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST")


def encrypt(plaintext: str, password: str, vault_id: str = "default") -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret  # noqa: PLC0415

    lib = VaultLib([(vault_id, VaultSecret(password.encode()))])
    ciphertext: bytes = lib.encrypt(plaintext, vault_id=None if vault_id == "default" else vault_id)
    return ciphertext.decode()


def vaulted(name: str, ciphertext: str) -> str:
    return f"{name}: !vault |\n" + "".join(f"  {line}\n" for line in ciphertext.splitlines())


class Copy:
    """A copy of sim.ini with a vaulted sglang_api_key, its password and its plaintext."""

    def __init__(
        self, tmp_path: Path, *, var: str = "sglang_api_key", vault_id: str = "default"
    ) -> None:
        shutil.copy(SIM, tmp_path / "sim.ini")
        shutil.copytree(SIM.parent / "group_vars", tmp_path / "group_vars")
        self.path = tmp_path / "sim.ini"
        self.plaintext = f"key-{secrets.token_hex(12)}"
        self.password = secrets.token_hex(16)
        self.secrets = tmp_path / "group_vars" / "sim" / "secrets.yml"
        self.secrets.write_text(vaulted(var, encrypt(self.plaintext, self.password, vault_id)))
        self.password_file = tmp_path / "vault-password"
        self.password_file.write_text(self.password + "\n")


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    for name in VAULT_ENV:
        monkeypatch.delenv(name, raising=False)


def test_passes_with_the_password_file_and_never_shows_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = Copy(tmp_path)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(copy.password_file))
    code, output = check_cli(monkeypatch, capsys, copy.path)
    assert code == 0, output
    assert ": OK" in output
    assert copy.plaintext not in output
    # Decrypted as the playbooks will see it.
    inv = inventory.load(copy.path)
    assert inv.hostvars["spark1"]["sglang_api_key"] == copy.plaintext
    assert copy.plaintext not in repr(inv)


def test_without_a_password_exit_2_naming_file_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = Copy(tmp_path)
    code, output = check_cli(monkeypatch, capsys, copy.path)
    assert code == 2, output
    (line,) = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert f"{copy.secrets}:1:" in line, line
    assert (
        "variable sglang_api_key: is vault-encrypted and no vault password is available" in line
    ), line
    assert "set ANSIBLE_VAULT_PASSWORD_FILE" in output
    assert copy.plaintext not in output
    assert "Traceback" not in output


def test_a_wrong_password_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = Copy(tmp_path)
    copy.password_file.write_text("not-the-password\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(copy.password_file))
    code, output = check_cli(monkeypatch, capsys, copy.path)
    assert code == 2, output
    assert f"{copy.secrets}:1:" in output
    assert (
        "variable sglang_api_key: is vault-encrypted and none of the vault passwords given "
        "decrypts it" in output
    )


def test_a_missing_password_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = Copy(tmp_path)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "nope"))
    code, output = check_cli(monkeypatch, capsys, copy.path)
    assert code == 2, output
    assert (
        f"{tmp_path / 'nope'}: cannot use this vault password file (set by env: "
        "ANSIBLE_VAULT_PASSWORD_FILE)" in output
    )
    assert "Traceback" not in output


def test_a_vault_identity_list_works_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = Copy(tmp_path, vault_id="prod")
    monkeypatch.setenv("ANSIBLE_VAULT_IDENTITY_LIST", f"prod@{copy.password_file}")
    code, output = check_cli(monkeypatch, capsys, copy.path)
    assert code == 0, output
    assert copy.plaintext not in output


def test_a_rule_never_prints_the_decrypted_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vaulted value of the wrong type is reported without its plaintext."""
    copy = Copy(tmp_path, var="roce_fabric_mtu")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(copy.password_file))
    code, output = check_cli(monkeypatch, capsys, copy.path)
    assert code == 2, output
    assert (
        "variable roce_fabric_mtu: '<vault-encrypted value>' is a string, but roce_fabric "
        "needs an integer" in output
    )
    assert copy.plaintext not in output


def test_vault_password_file_of_ansible_cfg(tmp_path: Path) -> None:
    """ansible.cfg's vault_password_file, read as Ansible reads it (a fresh process)."""
    copy = Copy(tmp_path)
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\nvault_password_file = {copy.password_file}\n")
    env = {k: v for k, v in os.environ.items() if k not in VAULT_ENV}
    env.update(ANSIBLE_CONFIG=str(cfg), SPARKCTL_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "inventory", "check", str(copy.path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert copy.plaintext not in proc.stdout + proc.stderr
    cfg.write_text("[defaults]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "inventory", "check", str(copy.path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "variable sglang_api_key: is vault-encrypted" in proc.stderr


def test_runner_passes_the_vault_password_file_to_ansible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in runner._env({})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", "vault-password")
    # ansible-playbook runs in the playbooks directory: the path must not be relative.
    assert runner._env({})["ANSIBLE_VAULT_PASSWORD_FILE"] == str(tmp_path / "vault-password")


def test_the_playbooks_get_the_password_the_check_used(tmp_path: Path) -> None:
    """A vault_password_file in the user's ansible.cfg reaches ansible-playbook.

    The runner points ANSIBLE_CONFIG at sparkctl's own ansible.cfg, so before
    the runner passed on what the check found, `inventory check` passed and the
    playbooks failed to decrypt. playbooks/preflight.yml runs on the controller
    only and templates every role variable, the vaulted key among them. A fresh
    process: Ansible reads ANSIBLE_CONFIG once, at import.
    """
    copy = Copy(tmp_path)
    cfg = tmp_path / "user" / "ansible.cfg"
    cfg.parent.mkdir()
    # relative to the file that says it, as Ansible reads a path setting
    cfg.write_text("[defaults]\nvault_password_file = ../vault-password\n")
    env = {k: v for k, v in os.environ.items() if k not in VAULT_ENV}
    env.update(ANSIBLE_CONFIG=str(cfg), SPARKCTL_STATE_DIR=str(tmp_path / "state"))
    script = (
        "import sys; from pathlib import Path; from sparkctl import inventory, runner\n"
        "inv, out = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "inventory.load(inv)\n"
        "r = runner.run_playbook('preflight.yml', inv, results_dir=out, hosts=1)\n"
        "print(r.status, r.rc, [f.message for f in r.failures])\n"
        "sys.exit(0 if r.ok else 1)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(copy.path), str(tmp_path / "run")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("successful 0"), proc.stdout
    assert copy.plaintext not in proc.stdout + proc.stderr


def test_the_runner_passes_identities_and_the_password_file_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_VAULT_IDENTITY_LIST", "prod@prod-pw,prompt,dev@~/dev-pw")
    env = runner._env({})
    assert env["ANSIBLE_VAULT_IDENTITY_LIST"] == (
        f"prod@{tmp_path / 'prod-pw'},dev@{Path.home() / 'dev-pw'}"
    )
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in env
