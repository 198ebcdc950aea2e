"""The one module that reaches into ansible-core's private API, and why.

ansible-core 2.19 tags every value it loads from a file with where it came from
(``Origin``: file, line, column) and every vault-encrypted value with
``VaultedValue``. That is how an inventory error names the file and line of a
variable, and how a plain-text secret is told from a vaulted one after Ansible has
merged the inventory. Both tags live in ``ansible._internal._datatag._tags``, which
ansible-core documents as private and may change in any minor release; there is no
public reader for them (the public ``ansible.module_utils.datatag`` has none).

So: only this module imports them, each use degrades (no origin, not vaulted) when
the import fails, and ``tests/unit/test_ansible_compat.py`` fails loudly on an
ansible-core line that is not in :data:`KNOWN_CORE`, so that a new line is read
before it is trusted. Everything else in sparkctl, and everything in the Ansible
collection, uses public APIs only.
"""

from __future__ import annotations

from typing import Any

# ansible-core lines whose private tags this module was written against and tested on.
KNOWN_CORE = ("2.19",)


def core_line() -> str:
    """The installed ansible-core's "major.minor"."""
    from ansible.release import __version__  # noqa: PLC0415

    return ".".join(__version__.split(".")[:2])


def origin_of(value: object) -> str | None:
    """Where Ansible read ``value`` from ("file:line:column"), when it knows; ``value``
    may also be such an origin itself (an error's ``obj``). None outside Ansible."""
    try:
        from ansible._internal._datatag._tags import Origin  # noqa: PLC0415
    except ImportError:  # pragma: no cover - an ansible-core without the tags
        return None
    tag = value if isinstance(value, Origin) else Origin.get_tag(value)
    return None if tag is None else str(tag)


def is_vaulted(value: Any) -> bool:
    """``value`` came from Ansible Vault (an encrypted string, or a value decrypted
    from one and still tagged so)."""
    from ansible.parsing.vault import EncryptedString  # noqa: PLC0415 - public

    if isinstance(value, EncryptedString):
        return True
    try:
        from ansible._internal._datatag._tags import VaultedValue  # noqa: PLC0415
    except ImportError:  # pragma: no cover - an ansible-core without the tags
        return False
    return bool(VaultedValue.is_tagged_on(value))
