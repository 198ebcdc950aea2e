"""The rules as the Ansible filter ``sparkctl_inventory_problems`` (the preflight play)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparkctl.ansible_compat import origin_of

from . import check, data
from .common import PLAY_VARS, SPARKS, SWITCHES, plain
from .schema import fact_names, load_specs
from .secrets import plaintext_secret, secret_problem

# ------------------------------------------------------- as an Ansible filter
# Variables of the play, not of the inventory; never passed to the rules.
_PLAY_VARS = PLAY_VARS | {"group_names", "play_hosts", "role_names", "ansible_config_file"}


# Settings of connection plugins sparkctl never uses (ansible_connection is judged to be
# ssh): inert in a play, where a container harness sets them on every host (molecule's
# podman driver: ansible_podman_executable). `inventory check` refuses them all the same.
_OTHER_CONNECTIONS = ("ansible_podman_", "ansible_docker_")


def _inventory_vars(
    hv: Mapping[str, Any], read: Callable[[str], bool], raw: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """One host's variables as the rules see them on the controller, and their origins.

    No facts, plain values. A value Ansible cannot template here (it may need facts
    this facts-free play does not have) is left out; the task that uses it will say
    what is wrong. A name nothing reads (``read``) is kept with the value None, never
    templated: in a play it never renders, and its name alone is judged (a near miss).
    """
    names = [str(name) for name in hv]
    try:
        facts = (
            fact_names({"ansible_facts": hv["ansible_facts"]})
            if "ansible_facts" in names
            else set()
        )
    except Exception:  # Ansible raises its own error types
        facts = set()
    out: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in names:
        if name in _PLAY_VARS or name in facts or name.startswith(_OTHER_CONNECTIONS):
            continue
        if not read(name):
            out[name] = None
            where = origin_of(raw.get(name))  # the raw value's tag: nothing rendered
            if where:
                origins[name] = where
            continue
        try:
            value = hv[name]
        except Exception:  # noqa: S112 - see the docstring
            continue
        if plaintext_secret(name, value):
            out[_PLAINTEXT] = [*out.get(_PLAINTEXT, []), name]
        out[name] = plain(value)
        where = origin_of(value)
        if where:
            origins[name] = where
    return out, origins


_PLAINTEXT = "__sparkctl_plaintext_secrets"  # names found by _inventory_vars


def _ours(value: Any, ours: Path) -> bool:
    """``value`` was read from the project's own playbooks directory."""
    where = origin_of(value)
    return where is not None and Path(where.split(":", 1)[0]).is_relative_to(ours)


def _template_problems(
    hostvars: Any, hosts: list[str], ours: Path, read: Callable[[str], bool]
) -> list[str]:
    """Values that are templates (data.py), judged on the raw values before any of
    them is templated: reading ``hostvars[host][name]`` would run a lookup in it.
    Values read from ``ours`` (the project's playbooks directory, whose
    group_vars/all holds the controller's variables) are the project's own code."""
    raw_get = getattr(hostvars, "raw_get", None)
    if not callable(raw_get):
        return []
    try:
        from ansible.template import is_trusted_as_template  # noqa: PLC0415
    except ImportError:  # pragma: no cover - ansible-core before 2.19
        return []
    messages: dict[tuple[str, str], str] = {}
    for host in hosts:
        variables = {
            name: value
            for name, value in dict(raw_get(host)).items()
            if name not in _PLAY_VARS
            and not name.startswith("ansible_facts")
            and not _ours(value, ours)
        }
        # What the roles read, and what that refers to: rendering one renders the other.
        judged = data.referenced(
            variables, {n for n in variables if read(n)}, is_trusted_as_template
        )
        wrong = data.value_problems(variables, is_trusted_as_template, only=judged)
        for name, problem in wrong.items():
            if (name, problem) not in messages:
                where = origin_of(variables[name])
                messages[(name, problem)] = (
                    f"{where}: " if where else ""
                ) + f"host {host}: variable {name}: {problem} ({data.HINT})"
    return list(messages.values())


def _problems_filter(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    roles_dir: str,
    playbooks_dir: str,
) -> list[str]:
    hosts = list(dict.fromkeys([*groups.get(SPARKS, []), *groups.get(SWITCHES, [])]))
    # In a play, only what a role or sparkctl reads can ever render: those names are
    # judged (values and all); any other name is judged by its name alone (a near miss
    # of a declared one). A harness's own variables (molecule's lookups) never render.
    # `sparkctl inventory check` is stricter: every name of an inventory is judged.
    known = set(load_specs(Path(roles_dir)))

    def read(name: str) -> bool:
        return name in known or (
            name.startswith("ansible_") and not name.startswith(_OTHER_CONNECTIONS)
        )

    templates = _template_problems(hostvars, hosts, Path(playbooks_dir).resolve(), read)
    if templates:  # nothing more is read: every other rule would template the values
        return templates
    plain_vars: dict[str, dict[str, Any]] = {}
    origins: dict[tuple[str, str], str] = {}
    for host in hosts:
        raw_get = getattr(hostvars, "raw_get", None)
        raw = dict(raw_get(host)) if callable(raw_get) else {}
        plain_vars[host], found = _inventory_vars(hostvars[host], read, raw)
        origins.update({(host, name): where for name, where in found.items()})
    plain_groups = {str(g): [str(h) for h in members] for g, members in groups.items()}
    secrets = [
        secret_problem(host, name)
        for host in hosts
        for name in plain_vars[host].pop(_PLAINTEXT, [])
    ]
    messages = []
    for p in [*secrets, *check(plain_groups, plain_vars, Path(roles_dir), in_play=True)]:
        top = (p.var or "").split(".", 1)[0]
        where = next(
            (origins[(h, top)] for h in ([p.host] if p.host else hosts) if (h, top) in origins),
            None,
        )
        messages.append(
            (f"{where}: " if where else "") + str(p) + (f" ({p.hint})" if p.hint else "")
        )
    return messages


class FilterModule:
    """``hostvars | sparkctl.spark.sparkctl_inventory_problems(groups, roles_dir, playbook_dir)``
    -> list of messages."""

    def filters(self) -> dict[str, Any]:
        return {"sparkctl_inventory_problems": _problems_filter}
