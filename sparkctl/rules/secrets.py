"""Secrets: one rule for every place an inventory can hide one, and never shown.

A secret is known by its name (:func:`.common.is_secret_name`): a variable, an env map's key,
a command-line flag or an ``--env NAME=`` of the container. Its value never appears in
a message. A secret-named variable in plain text in an inventory file is refused
whatever its type or Jinja wrapping (:func:`plaintext_secret`); a secret inside an env
map (a 0644 file on the nodes), an argument list (the unit's argv, world-readable in
/proc) or a URL's user part is refused wherever it is (:func:`check_secrets`), with the
hint to use the secret variables, which reach the nodes in private files only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from sparkctl.ansible_compat import is_vaulted, origin_of

from .common import Problem, is_secret_name, same_everywhere
from .schema import fact_names

# Every variable a connection, become or shell plugin of Ansible reads a password or
# passphrase from (ansible-doc -t connection ssh, -t become sudo / su): refused whatever
# its form, vault-encrypted too (connection.check_passwords); sparkctl uses keys and
# sudo without a stored password.
PASSWORD_VARS = (
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_ssh_password",
    "ansible_become_password",
    "ansible_become_pass",
    "ansible_sudo_pass",
    "ansible_sudo_password",
    "ansible_su_pass",
    "ansible_su_password",
    "ansible_private_key_passphrase",
    "ansible_ssh_private_key_passphrase",
)

VAULT_OR_ENV_HINT = (
    "vault-encrypt it (ansible-vault encrypt_string --name VARIABLE) or "
    "leave it out of the inventory and export it on the controller "
    "(SPARKCTL_SGLANG_API_KEY for sglang_api_key, HF_TOKEN for "
    "model_cache_hf_token)"
)
PRIVATE_FILES_HINT = (
    "give secrets to sparkctl's secret variables, which reach the nodes in private files "
    "only: sglang_api_key (or SPARKCTL_SGLANG_API_KEY on the controller) for the API, "
    "model_cache_hf_token (or HF_TOKEN) for Hugging Face; for TLS, a key file without a "
    "password in sglang_tls_keyfile"
)


# ------------------------------------------------------------ plaintext secrets
def plaintext_secret(name: str, value: Any) -> bool:
    """``value`` (as Ansible loaded it, tags and all) is a secret-named variable's plain
    text from an inventory file: not vault-encrypted, not from the environment.

    Every type counts (a list or mapping of secrets, a number), and a Jinja expression
    whose text carries the secret (``"{{ 'hf_...' }}"``, ``"{{ x | default('hf_...') }}"``)
    is plain text too; one that only refers to other variables or looks a value up
    (``lookup('ansible.builtin.env', 'HF_TOKEN')``) is not.
    """
    if not is_secret_name(name) or name in PASSWORD_VARS:
        return False  # passwords are refused whatever their form (check_passwords)
    return _plaintext(value, None)


def _plaintext(value: Any, parent: str | None) -> bool:
    if value is None or isinstance(value, bool) or is_vaulted(value):
        return False
    where = origin_of(value) or parent
    if isinstance(value, Mapping | list | tuple):
        items = value.values() if isinstance(value, Mapping) else value
        return any(_plaintext(item, where) for item in items)
    literal = (
        bool(value.strip())
        and not (("{{" in value or "{%" in value) and not template_has_literal(value))
        if isinstance(value, str)
        else isinstance(value, int | float)
    )
    return literal and where is not None and not where.startswith("<")


# Calls whose arguments name where a value comes from, not the value itself.
_LOOKUPS = frozenset({"lookup", "query", "q"})


def template_has_literal(text: str) -> bool:
    """A Jinja template carries literal data: text outside ``{{ }}``, a quoted string or a
    long number anywhere but in the arguments of ``lookup()``/``query()`` (whose
    ``default=`` counts: it is the value when the lookup finds none). The template is
    parsed, never run; one Jinja cannot parse counts as literal."""
    try:
        from jinja2 import Environment, nodes  # noqa: PLC0415
        from jinja2.exceptions import TemplateSyntaxError  # noqa: PLC0415
    except ImportError:  # pragma: no cover - Ansible brings Jinja
        return True
    try:
        tree = Environment(autoescape=False).parse(text)  # noqa: S701 - parsed, never rendered
    except TemplateSyntaxError:
        return True

    def literal(node: Any, exempt: bool) -> bool:
        if isinstance(node, nodes.TemplateData):
            return bool(node.data.strip())
        if isinstance(node, nodes.Const):
            value = node.value
            if exempt or isinstance(value, bool):
                return False
            if isinstance(value, str):
                return bool(value.strip())
            return isinstance(value, int | float) and abs(value) >= 10000
        if (
            isinstance(node, nodes.Call)
            and isinstance(node.node, nodes.Name)
            and node.node.name in _LOOKUPS
        ):
            return any(literal(arg, True) for arg in node.args) or any(
                literal(kw.value, exempt or kw.key != "default") for kw in node.kwargs
            )
        return any(literal(child, exempt) for child in node.iter_child_nodes())

    return literal(tree, False)


def secret_problem(host: str | None, name: str) -> Problem:
    """The refusal of a plaintext secret; the value is never part of it."""
    return Problem(
        host,
        name,
        "is a secret in plain text in an inventory file (its value is not shown)",
        hint=VAULT_OR_ENV_HINT,
    )


# ------------------------------------------------- secrets in other places
# Mappings written as NAME=value lines into env files on the nodes (sglang_env_file,
# nccl_env_file: 0644, and nccl.conf), and argument lists that become a unit's argv.
ENV_MAPS = ("sglang_env_extra", "nccl_env_extra", "nccl_env_overrides")
ARG_LISTS = ("sglang_extra_args", "sglang_container_extra_args")
# The same words in one string (pip's options of the venv method's install).
ARG_STRINGS = ("sglang_pip_extra_args",)
# sglang's own secret flags (python -m sglang.launch_server --help, 0.5.17); argparse takes
# an unambiguous prefix of a flag (--api-k), so a prefix is refused too.
SGLANG_SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")
# The container engine's flags that set an environment variable (docker run --help).
_ENV_FLAGS = ("-e", "--env")
# Token shapes worth refusing under any name: Hugging Face (hf_...), GitHub (ghp_...,
# github_pat_...), OpenAI-style (sk-...).
TOKEN_SHAPE = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|"
    r"github_pat_[A-Za-z0-9_]{30,}|sk-[A-Za-z0-9_-]{30,})"
)
# A URL with a password in its user part (https://user:token@host/...).
URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")


def _secret_flag(word: str) -> str | None:
    """The flag part of ``word`` if it is a secret's flag (``--api-key=...``), else None."""
    flag = word.split("=", 1)[0]
    if not flag.startswith("--") or len(flag) < 4:
        return None
    if any(known.startswith(flag) for known in SGLANG_SECRET_FLAGS):
        return flag
    return flag if is_secret_name(flag[2:]) else None


def _env_name(words: list[str], index: int) -> tuple[str, str] | None:
    """(flag, variable) of an engine's env flag at ``words[index]`` (``-e NAME=v``,
    ``--env=NAME=v``, ``-eNAME=v``, ``--env NAME``), or None if it is none."""
    word = words[index]
    if word in _ENV_FLAGS:
        following = words[index + 1] if index + 1 < len(words) else ""
        return word, following.split("=", 1)[0]
    if word.startswith("--env="):
        return "--env", word[len("--env=") :].split("=", 1)[0]
    if word.startswith("-e") and not word.startswith("--") and len(word) > 2:
        return "-e", word[2:].split("=", 1)[0]
    return None


def args_secret(words: list[str]) -> Iterator[tuple[int, str]]:
    """(item index, what it is) of each secret in an argument list; values never shown."""
    for index, word in enumerate(words):
        env = _env_name(words, index)
        if env and is_secret_name(env[1]):
            yield index, f"{env[0]} {env[1]}=... would put a secret on the command line"
            continue
        flag = _secret_flag(word)
        if flag is not None:
            yield index, f"{flag} would put a secret on the command line"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _env_secret_keys(value: Any, path: str = "") -> Iterator[str]:
    """The secret-named keys of an env map, at any depth ("A.B" for a nested one)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if is_secret_name(str(key)):
                yield where
            yield from _env_secret_keys(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _env_secret_keys(item, path)


def _host_secrets(host: str, hv: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for var in ENV_MAPS:
        keys = list(_env_secret_keys(hv.get(var)))
        if keys:
            problems.append(
                Problem(
                    host,
                    var,
                    f"{', '.join(keys)}: a secret's name in an env map, whose values "
                    "are written to a file every user of the node can read (the value "
                    "is not shown)",
                    hint=PRIVATE_FILES_HINT,
                )
            )
    for var in (*ARG_LISTS, *ARG_STRINGS):
        value = hv.get(var)
        words = (
            value.split()
            if isinstance(value, str)
            else [str(v) for v in value]
            if isinstance(value, list | tuple)
            else []
        )
        found = list(args_secret(words))
        if found:
            shown = "; ".join(f"item {i}: {what}" for i, what in found)
            problems.append(
                Problem(
                    host,
                    var,
                    f"{shown} (the server's argv is world-readable in /proc; the value is "
                    "not shown)",
                    hint=PRIVATE_FILES_HINT,
                )
            )
    # Facts are the nodes', not the inventory's; only ansible_* names are taken for facts
    # (an inventory's own ansible_facts could name any variable).
    facts = {n for n in fact_names(hv) if n.startswith("ansible_")} | {"ansible_local"}
    for var in sorted(hv):
        if is_secret_name(var) or var in facts or var in {p.var for p in problems}:
            continue  # a secret variable's own value is plaintext_secret's
        texts = list(_strings(hv[var]))
        if any(URL_CREDENTIALS.search(t) for t in texts):
            problems.append(
                Problem(
                    host,
                    var,
                    "has a URL with a password in it (the value is not shown): it would "
                    "land in files and command lines on the nodes",
                    hint=PRIVATE_FILES_HINT,
                )
            )
        elif any(TOKEN_SHAPE.search(t) for t in texts):
            problems.append(
                Problem(
                    host,
                    var,
                    "has an access token in it (the value is not shown)",
                    hint=PRIVATE_FILES_HINT,
                )
            )
    return problems


def check_secrets(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Secrets outside the secret variables: in env maps, argument lists, URLs, or a
    token's shape in any value. A problem every host shares is reported once."""
    problems: list[Problem] = []
    these = {h: hostvars[h] for h in hosts}
    seen: set[str] = set()
    for host in hosts:
        for problem in _host_secrets(host, hostvars[host]):
            var = problem.var or ""
            if all(var in hv for hv in these.values()) and same_everywhere(these, var):
                if var not in seen:
                    seen.add(var)
                    problems.append(replace(problem, host=None))
            else:
                problems.append(problem)
    return problems
