"""What every rule shares: the problem type, plain values, names and small readers.

This package must stay importable by Ansible on its own (the preflight filter imports
it): standard library, PyYAML and jsonschema only, and of sparkctl only
:mod:`sparkctl.collection` (the route to the collection's module_utils, whose TP groups
the rules check) and what that imports.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from sparkctl.collection import tp_groups

SPARKS = "sparks"
SWITCHES = "switches"
TWINS = ("a", "b")
SWITCH_OSES = ("linux", "nvue", "sonic")
TRUE_WORDS = frozenset({"true", "yes", "on", "1", "y", "t"})
FALSE_WORDS = frozenset({"false", "no", "off", "0", "n", "f"})
# The sglang role's TP group of a Spark without sglang_group, and what a group name
# may be: decided once, in the collection's module_utils (tp_groups.py), which the
# role's filter uses too.
DEFAULT_SGLANG_GROUP = tp_groups.DEFAULT_GROUP
GROUP_NAME = tp_groups.GROUP_NAME
GROUP_NAME_WORDS = tp_groups.GROUP_NAME_WORDS

# Connection values reach ssh's command line and validate's ssh_config as single words.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
KEY_FILE = re.compile(r"[A-Za-z0-9_.,+@%~/=:-]+")

# The roles' files are read with libyaml's parser where PyYAML has it (as Ansible reads
# these same files): the pure-Python one took a quarter of a second of CPU of every
# check, i.e. of every sparkctl command's start and of every playbook's preflight play,
# twelve times what libyaml takes for the same data.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path) -> Any:
    """A YAML file of a role, as yaml.safe_load reads it."""
    return yaml.load(path.read_text(), Loader=_YAML_LOADER)  # noqa: S506 - a SafeLoader


@dataclass(frozen=True)
class Problem:
    host: str | None
    var: str | None
    message: str
    hint: str | None = None
    # Who a cluster-wide problem (host None) concerns: "all hosts" or "hosts a, b"
    # (filled in by :func:`check`).
    scope: str | None = None

    def __str__(self) -> str:
        who = f"host {self.host}" if self.host else self.scope
        where = ": ".join(p for p in (who, f"variable {self.var}" if self.var else None) if p)
        return f"{where}: {self.message}" if where else self.message


def plain(value: Any) -> Any:
    """Ansible's tagged and lazy values as plain Python (bool before int: it is one)."""
    for scalar in (bool, int, float, str):
        if isinstance(value, scalar):
            return scalar(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def same_everywhere(hostvars: Mapping[str, Mapping[str, Any]], name: str) -> bool:
    values = [hv[name] for hv in hostvars.values() if name in hv]
    return len(values) == len(hostvars) and all(v == values[0] for v in values)


def type_name(value: Any) -> str:
    for kind, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "a list"),
        (tuple, "a list"),
        (Mapping, "a mapping"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def in_choices(value: Any, choices: Iterable[Any]) -> bool:
    try:
        return value in choices
    except TypeError:  # unhashable value against a set of choices
        return False


def boolean(value: Any) -> bool | None:
    """``value`` as Ansible reads a boolean setting (True, "yes", 1, ...); None if it is not one."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    return None


def ipv4(value: Any) -> ipaddress.IPv4Address | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.IPv4Address(value.strip())
    except ValueError:
        return None


def ipv4_net(value: Any) -> ipaddress.IPv4Network | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.IPv4Network(value.strip(), strict=True)
    except ValueError:
        return None


# ------------------------------------------------------------------ names
# A name is a secret's when its last word is one of these (HF_TOKEN, SGLANG_API_KEY,
# AWS_SECRET_ACCESS_KEY, ansible_ssh_pass, --ssl-keyfile-password) or when any word is
# one of the second set (CLIENT_SECRET_ID). Words are split at _ - and . and compared
# without case. "tokens" (sglang_verify_max_tokens) and "keyfile" (a path) are not.
_LAST_WORDS = frozenset(
    {
        "token",
        "password",
        "passwd",
        "pass",
        "passphrase",
        "secret",
        "key",
        "apikey",
        "credential",
        "credentials",
    }
)
_ANY_WORDS = frozenset(
    {"secret", "password", "passwd", "passphrase", "apikey", "credential", "credentials"}
)


def is_secret_name(name: str) -> bool:
    """``name`` (a variable, an environment variable, a flag) names a secret: its value
    is never shown in a message and never goes on a command line or in an env file."""
    words = [w for w in re.split(r"[_.-]+", str(name).lower()) if w]
    return bool(words) and (words[-1] in _LAST_WORDS or not _ANY_WORDS.isdisjoint(words))


# Variables of the play and of Ansible itself among a host's variables
# (VariableManager.get_vars): never an inventory's, never judged or templated as one.
PLAY_VARS = frozenset(
    {
        "groups",
        "hostvars",
        "vars",
        "environment",
        "omit",
        "playbook_dir",
        "ansible_playbook_python",
        "inventory_dir",
        "inventory_file",
    }
)
