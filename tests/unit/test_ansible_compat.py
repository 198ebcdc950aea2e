"""sparkctl.ansible_compat: the one module allowed ansible-core's private API.

It reads the origin and vault tags ansible-core 2.19 puts on loaded values. These
tests fail loudly on an ansible-core line the module was not written against, prove
that each reader still reads what it is for on this one, and that no other Python
file of the repository imports ``ansible._internal``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import VaultLib, VaultSecret

from sparkctl import ansible_compat

REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "sparkctl" / "ansible_compat.py"


def test_the_installed_ansible_core_line_is_one_the_compat_module_knows() -> None:
    line = ansible_compat.core_line()
    assert line in ansible_compat.KNOWN_CORE, (
        f"ansible-core {line} is installed; sparkctl/ansible_compat.py was written against "
        f"{', '.join(ansible_compat.KNOWN_CORE)}. Read ansible/_internal/_datatag/_tags.py "
        "of this line (Origin.get_tag, VaultedValue.is_tagged_on), run these tests, and "
        "only then add it to KNOWN_CORE."
    )


def test_a_value_loaded_from_yaml_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text("---\nfirst: 1\nsecond: hello\n")
    data = DataLoader().load_from_file(str(path))
    assert ansible_compat.origin_of(data["second"]) == f"{path}:3:9"
    assert ansible_compat.origin_of("made here") is None


def test_a_vaulted_value_is_told_from_plain_text(tmp_path: Path) -> None:
    secret = VaultSecret(b"a vault password")
    vault = VaultLib([("default", secret)])
    ciphertext = vault.encrypt("hf_not_a_real_token").decode()
    indented = "\n".join("  " + ln for ln in ciphertext.splitlines())
    path = tmp_path / "secret.yml"
    path.write_text(f"---\ntoken: !vault |\n{indented}\nplain: hf_plain_text\n")
    loader = DataLoader()
    loader.set_vault_secrets([("default", secret)])
    data = loader.load_from_file(str(path))
    assert ansible_compat.is_vaulted(data["token"])
    assert not ansible_compat.is_vaulted(data["plain"])
    assert not ansible_compat.is_vaulted("made here")


@pytest.mark.parametrize("word", ["ansible._internal", "ansible.module_utils._internal"])
def test_no_other_file_imports_ansibles_private_api(word: str) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = [
        name
        for name in tracked
        if (REPO / name).resolve() not in {COMPAT, Path(__file__).resolve()}
        and (REPO / name).is_file()
        and any(
            line.lstrip().startswith(("import ", "from ")) and word in line
            for line in (REPO / name).read_text(errors="replace").splitlines()
        )
    ]
    assert not offenders, f"{word} imported outside sparkctl/ansible_compat.py: {offenders}"
