"""Secrets in plain text: refused, and never shown."""

from __future__ import annotations

import re
from typing import Any

from .common import Problem, origin_of
from .connection import PASSWORD_VARS

# ------------------------------------------------------------ plaintext secrets
# A variable named like a secret must not sit in plain text in an inventory file: it is
# vault-encrypted (ansible-vault encrypt_string) or comes from the controller's
# environment (lookup('ansible.builtin.env', ...), as roles/*/defaults do).
SECRET_NAME = re.compile(
    r"(?:^|_)(?:token|password|passwd|secret|api_key|apikey|"
    r"private_key|credentials?)\Z"
)
VAULT_OR_ENV_HINT = (
    "vault-encrypt it (ansible-vault encrypt_string --name VARIABLE) or "
    "leave it out of the inventory and export it on the controller "
    "(SPARKCTL_SGLANG_API_KEY for sglang_api_key, HF_TOKEN for "
    "model_cache_hf_token)"
)


def plaintext_secret(name: str, value: Any) -> bool:
    """``value`` (as Ansible loaded it, tags and all) is a secret-named variable's plain
    text from an inventory file: not vault-encrypted, not from the environment."""
    if not SECRET_NAME.search(name) or name in PASSWORD_VARS:
        return False  # passwords are refused whatever their form (check_passwords)
    if not isinstance(value, str) or not value.strip() or "{{" in value:
        return False
    try:
        from ansible._internal._datatag._tags import VaultedValue  # noqa: PLC0415
        from ansible.parsing.vault import EncryptedString  # noqa: PLC0415
    except ImportError:  # pragma: no cover - other ansible-core versions
        return False
    if isinstance(value, EncryptedString) or VaultedValue.is_tagged_on(value):
        return False
    where = origin_of(value)
    return where is not None and not where.startswith("<")


def secret_problem(host: str | None, name: str) -> Problem:
    """The refusal of a plaintext secret; the value is never part of it."""
    return Problem(
        host,
        name,
        "is a secret in plain text in an inventory file (its value is not shown)",
        hint=VAULT_OR_ENV_HINT,
    )
