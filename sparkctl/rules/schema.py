"""Every role variable's type, choices and constraint, from the roles' own files."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import jsonschema_core
from .common import Problem, load_yaml, same_everywhere

_ANSIBLE_PREFIXES = (
    "ansible_",
    "inventory_",
    "group_names",
    "groups",
    "hostvars",
    "omit",
    "playbook_dir",
    "role_",
    "play_hosts",
    "environment",
)


# ------------------------------------------------------------ argument specs
def load_specs(roles_dir: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every option of every role's ``meta/argument_specs.yml``: name -> (role, spec),
    with the role's ``meta/constraints.yml`` entry for it under ``CONSTRAINT``."""
    specs: dict[str, tuple[str, dict[str, Any]]] = {}
    for spec_file in sorted(Path(roles_dir).glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        data = load_yaml(spec_file) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, spec in (entry.get("options") or {}).items():
                specs.setdefault(name, (role, dict(spec or {})))
    for name, (_role, constraint) in load_constraints(roles_dir).items():
        if name in specs:
            specs[name][1][CONSTRAINT] = constraint
    return specs


# ------------------------------------------------------------------ constraints
# What a value may be beyond its type: each role's meta/constraints.yml names, per
# variable of its argument_specs, a range (min, max, above / below: exclusive minimum / maximum), a
# format of FORMATS, a max_length, and for a list or a mapping the constraint of its
# items, keys and values, and a mapping's named fields (each may name its own type:
# int, str, float, bool, list, dict); nullable lets null (the default) pass, and
# allow_empty the empty string (a role's "unset", as in sglang_image_digest: ""), whatever else is
# said. One declaration per role, enforced by `inventory check` (before any contact)
# and by the preflight play (this package, as a filter).
CONSTRAINT = "sparkctl_constraint"
_CONSTRAINT_KEYS = frozenset(
    {
        "min",
        "max",
        "above",
        "below",
        "format",
        "max_length",
        "items",
        "keys",
        "values",
        "fields",
        "allow_empty",
        "nullable",
        "type",
        "why",
        "secret",
    }
)


def load_constraints(roles_dir: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every role's ``meta/constraints.yml``: variable -> (role, constraint)."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in sorted(Path(roles_dir).glob("*/meta/constraints.yml")):
        data = load_yaml(path) or {}
        for name, constraint in (data.get("constraints") or {}).items():
            out[str(name)] = (path.parent.parent.name, dict(constraint or {}))
    return out


constraint_problem = jsonschema_core.constraint_problem
Specs = Mapping[str, tuple[str, dict[str, Any]]]


def fact_names(hv: Mapping[str, Any]) -> set[str]:
    """Names that come from gathered or cached facts (not from the inventory)."""
    facts = hv.get("ansible_facts")
    if not isinstance(facts, Mapping):
        return set()
    return {"ansible_facts", *map(str, facts), *(f"ansible_{name}" for name in facts)}


def check_types(
    hostvars: Mapping[str, Mapping[str, Any]],
    specs: Specs,
    user_vars: Mapping[str, Iterable[str]] | None = None,
    *,
    in_play: bool = False,
) -> list[Problem]:
    """Types and choices of role variables; unknown names close to a known one.

    Types come from the roles' ``meta/argument_specs.yml`` (:func:`load_specs`), checked
    strictly with their constraints (:mod:`.jsonschema_core`: a wrong type is a refusal
    at any depth). ``user_vars`` (host -> names set by the inventory) limits the checks
    to what the user wrote; without it every variable is checked except facts. Every
    name no role declares is refused; ``in_play`` (the preflight filter) lets a role's
    internal names (a leading ``_``: facts set earlier in the play) pass, and refuses
    an unknown name only when it is a near miss of a declared one or carries a role's
    prefix (a play holds other tools' variables: molecule's).
    """
    problems: list[Problem] = []
    seen: set[tuple[str | None, str]] = set()
    prefixes = tuple(sorted({f"{role}_" for role, _ in specs.values()}))
    known = set(specs)
    for host, hv in hostvars.items():
        names = set(user_vars[host]) if user_vars is not None and host in user_vars else set(hv)
        facts = fact_names(hv)
        for name in sorted(names - facts):
            if name not in hv or name.startswith(_ANSIBLE_PREFIXES):
                continue
            value = hv[name]
            key: tuple[str | None, str] = (
                (None, name) if same_everywhere(hostvars, name) else (host, name)
            )
            if key in seen:
                continue
            if name in specs:
                role, spec = specs[name]
                constraint = spec.get(CONSTRAINT) or {}
                wrong, of_type = None, False
                if value is not None:
                    wrong = _value_problem(name, value)
                    if wrong is None:
                        wrong, of_type = jsonschema_core.judge(name, value, role, spec, constraint)
                hint = None
                if wrong is not None and constraint and not of_type:
                    hint = constraint.get("why") or (
                        f"the role sparkctl.spark.{role} says what {name} may be in its "
                        "meta/constraints.yml"
                    )
                if wrong:
                    seen.add(key)
                    problems.append(Problem(key[0], name, wrong, hint=hint))
                continue
            if name.startswith("_"):
                if not in_play:  # a role's own facts and constants, never the inventory's
                    seen.add(key)
                    problems.append(
                        Problem(
                            key[0],
                            name,
                            "is a name internal to a role (a leading _), not a setting",
                            hint="set the role's public variable instead (docs/inventory.md)",
                        )
                    )
                continue
            close = sorted(
                k for k in known if k.startswith(f"{name}_")
            ) or difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            if in_play and not close and not name.startswith(prefixes):
                continue  # a play's other variables (a harness's): only near misses
            seen.add(key)
            problems.append(
                Problem(
                    key[0],
                    name,
                    "unknown variable",
                    hint=f"did you mean {close[0]}?"
                    if close
                    else (
                        "see the meta/argument_specs.yml of the role sparkctl.spark."
                        + next(p for p in prefixes if name.startswith(p)).rstrip("_")
                        if name.startswith(prefixes)
                        else "no role or sparkctl reads it: docs/inventory.md lists every variable"
                    ),
                )
            )
    return problems


def _fraction(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1


def _value_problem(name: str, value: Any) -> str | None:
    """Values a ``raw`` argument spec cannot describe (roles/validate defaults say why)."""
    if name != "validate_busbw_min_fraction":
        return None
    collectives = ("all_reduce", "all_gather", "reduce_scatter")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key not in collectives:
                return f"{key!r} is not a collective of the gate ({', '.join(collectives)})"
            if item is not None and not _fraction(item):
                return f"{key}: {item!r} is not a fraction in (0, 1] or null"
        return None
    return (
        None
        if _fraction(value)
        else (
            f"{value!r} is neither a fraction in (0, 1] nor a mapping "
            "collective -> fraction or null"
        )
    )


def load_defaults(roles_dir: Path) -> dict[str, Any]:
    """Every role's literal defaults (templated ones are left out: they follow others)."""
    out: dict[str, Any] = {}
    for path in sorted(Path(roles_dir).glob("*/defaults/main.yml")):
        for name, value in (load_yaml(path) or {}).items():
            if "{{" not in repr(value):
                out.setdefault(str(name), value)
    return out


# Flags sparkctl derives from the inventory for every rank (roles/sglang, the unit's
# command line); an extra argument must not set them again or carry a secret. argparse
