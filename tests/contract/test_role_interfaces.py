"""Every role keeps the interface conventions of docs/roles.md.

- ``defaults/main.yml`` is the whole public interface and
  ``meta/argument_specs.yml`` documents every variable in it with the same
  default (parsed YAML compared; a templated default is a string and is
  compared as the string it is, never rendered) and a description; every
  documented default lives in ``defaults/main.yml``, and so does every
  variable the spec does not require (but cluster_defaults' per-host schema
  variables);
- public variables carry the role's name as prefix and internal constants in
  ``vars/main.yml`` an underscore and the role's name; ``cluster_defaults`` is
  the inventory schema (``hw_profile``, ``fabric_a_netdev``, ...) and exempt
  from the prefix, as in ``.ansible-lint-ignore``;
- ``meta/main.yml`` depends on ``cluster_defaults`` and nothing else;
- ``tasks/main.yml`` includes preflight -> install -> configure -> verify in
  that order (those of them the role has), each tagged ``<role>`` and
  ``<role>_<step>``.

Roles are discovered from ``roles/``: a new role is checked without editing
this file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.pathload import ansible_playbook

ROOT = Path(__file__).resolve().parents[2]
ROLES_DIR = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "meta" / "main.yml").is_file())
SCHEMA_ROLE = "cluster_defaults"  # the inventory schema: names without a role prefix
STEPS = ("preflight", "install", "configure", "verify")
INCLUDE_MODULES = {
    "include_tasks",
    "ansible.builtin.include_tasks",
    "ansible.legacy.include_tasks",
    "import_tasks",
    "ansible.builtin.import_tasks",
    "ansible.legacy.import_tasks",
}
_MISSING = object()

# Known gaps in files this test does not own, kept visible: each case fails as
# expected (strict: once fixed it XPASSes and fails, so the entry is removed).
KNOWN_GAPS: dict[tuple[str, str], str] = {}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def role_defaults(role: str) -> dict[str, Any]:
    data = _load(ROLES_DIR / role / "defaults" / "main.yml")
    return dict(data or {})


def role_options(role: str) -> dict[str, dict[str, Any]]:
    """Options of every entry point of the role's argument spec (``main`` first)."""
    data = _load(ROLES_DIR / role / "meta" / "argument_specs.yml") or {}
    entries = data.get("argument_specs") or {}
    options: dict[str, dict[str, Any]] = {}
    for name in sorted(entries, key=lambda n: (n != "main", n)):
        for opt, spec in ((entries[name] or {}).get("options") or {}).items():
            options.setdefault(opt, spec or {})
    return options


def _cases(kind: str) -> list[Any]:
    cases = []
    for role in ROLES:
        names = (
            role_defaults(role)
            if kind == "defaults"
            else {n: s for n, s in role_options(role).items() if "default" in s}
        )
        cases += [
            pytest.param(
                role,
                name,
                id=f"{role}:{name}",
                marks=[pytest.mark.xfail(reason=KNOWN_GAPS[(role, name)], strict=True)]
                if kind == "defaults" and (role, name) in KNOWN_GAPS
                else [],
            )
            for name in names
        ]
    return cases


def test_every_role_is_found() -> None:
    assert {"cluster_defaults", "preflight", "base", "roce_fabric"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_an_argument_spec(role: str) -> None:
    spec = ROLES_DIR / role / "meta" / "argument_specs.yml"
    assert spec.is_file(), f"{spec.relative_to(ROOT)} is missing"
    assert "main" in (_load(spec) or {}).get("argument_specs", {}), (
        f"{spec.relative_to(ROOT)} has no `main` entry point"
    )


@pytest.mark.parametrize(("role", "name"), _cases("defaults"))
def test_default_is_documented_with_the_same_value(role: str, name: str) -> None:
    spec = role_options(role).get(name)
    where = f"roles/{role}/meta/argument_specs.yml"
    assert spec is not None, f"{name} (roles/{role}/defaults/main.yml) is not documented in {where}"
    documented = spec.get("default", _MISSING)
    assert documented is not _MISSING, (
        f"{where}: {name} has no `default:`; defaults/main.yml sets {role_defaults(role)[name]!r}"
    )
    assert documented == role_defaults(role)[name], (
        f"{name}: {where} says {documented!r}, "
        f"roles/{role}/defaults/main.yml says {role_defaults(role)[name]!r}"
    )


@pytest.mark.parametrize(("role", "name"), _cases("spec"))
def test_documented_default_lives_in_defaults(role: str, name: str) -> None:
    assert name in role_defaults(role), (
        f"roles/{role}/meta/argument_specs.yml documents a default for {name}, "
        f"but roles/{role}/defaults/main.yml does not set it"
    )


@pytest.mark.parametrize("role", [r for r in ROLES if r != SCHEMA_ROLE])
def test_every_variable_the_spec_does_not_require_has_a_default(role: str) -> None:
    # cluster_defaults is exempt: node_rank, fabric_*_ip and switch_os are per host.
    missing = sorted(
        n
        for n, spec in role_options(role).items()
        if not spec.get("required") and n not in role_defaults(role)
    )
    assert not missing, (
        f"roles/{role}/meta/argument_specs.yml documents {missing}, which are not required, "
        f"but roles/{role}/defaults/main.yml does not set them"
    )


@pytest.mark.parametrize("role", ROLES)
def test_every_documented_variable_has_a_description(role: str) -> None:
    bare = sorted(n for n, spec in role_options(role).items() if not spec.get("description"))
    assert not bare, f"roles/{role}/meta/argument_specs.yml: no description for {bare}"


@pytest.mark.parametrize("role", [r for r in ROLES if r != SCHEMA_ROLE])
def test_public_variables_carry_the_role_prefix(role: str) -> None:
    names = set(role_defaults(role)) | set(role_options(role))
    wrong = sorted(n for n in names if not n.startswith(f"{role}_"))
    assert not wrong, f"roles/{role}: public variables without the prefix {role}_: {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_internal_constants_carry_an_underscore_and_the_role_prefix(role: str) -> None:
    constants = dict(_load(ROLES_DIR / role / "vars" / "main.yml") or {})
    wrong = sorted(n for n in constants if not n.startswith(f"_{role}_"))
    assert not wrong, f"roles/{role}/vars/main.yml: names without the prefix _{role}_: {wrong}"


def _dependencies(role: str) -> list[str]:
    meta = _load(ROLES_DIR / role / "meta" / "main.yml") or {}
    names = []
    for dep in meta.get("dependencies") or []:
        names.append(dep if isinstance(dep, str) else dep.get("role", dep.get("name")))
    return names


@pytest.mark.parametrize("role", [r for r in ROLES if r != SCHEMA_ROLE])
def test_role_depends_on_cluster_defaults_only(role: str) -> None:
    assert _dependencies(role) == [f"sparkctl.spark.{SCHEMA_ROLE}"], (
        f"roles/{role}/meta/main.yml: dependencies {_dependencies(role)}, expected only "
        f"{SCHEMA_ROLE} (the inventory schema and cluster_hw; the order of the other roles "
        "is the playbooks')"
    )


def test_cluster_defaults_depends_on_nothing() -> None:
    assert _dependencies(SCHEMA_ROLE) == []


def _step_includes(role: str) -> list[tuple[str, dict[str, Any]]]:
    """(step, task) of every include/import of a step file in tasks/main.yml, in order."""
    tasks = _load(ROLES_DIR / role / "tasks" / "main.yml") or []
    found = []
    for task in tasks:
        for module in INCLUDE_MODULES & set(task):
            arg = task[module]
            target = arg.get("file") if isinstance(arg, dict) else arg
            stem = Path(str(target)).name.removesuffix(".yml").removesuffix(".yaml")
            if stem in STEPS:
                found.append((stem, task))
    return found


def _steps_present(role: str) -> list[str]:
    return [s for s in STEPS if (ROLES_DIR / role / "tasks" / f"{s}.yml").is_file()]


@pytest.mark.parametrize("role", ROLES)
def test_main_includes_the_steps_in_order(role: str) -> None:
    included = [step for step, _ in _step_includes(role)]
    assert included == _steps_present(role), (
        f"roles/{role}/tasks/main.yml includes {included}; expected {_steps_present(role)} "
        "(preflight -> install -> configure -> verify, each once)"
    )


def _tags(value: Any) -> set[str]:
    if value is None:
        return set()
    return {value} if isinstance(value, str) else set(value)


@pytest.mark.parametrize(
    ("role", "step"), [pytest.param(r, s, id=f"{r}:{s}") for r in ROLES for s in _steps_present(r)]
)
def test_step_include_is_tagged(role: str, step: str) -> None:
    tasks = [t for s, t in _step_includes(role) if s == step]
    assert tasks, f"roles/{role}/tasks/main.yml does not include {step}.yml"
    task = tasks[0]
    want = {role, f"{role}_{step}"}
    module = next(iter(INCLUDE_MODULES & set(task)))
    arg = task[module] if isinstance(task[module], dict) else {}
    assert want <= _tags(task.get("tags")), (
        f"roles/{role}/tasks/main.yml: the {step} include lacks tags {sorted(want)}"
    )
    if module.endswith("include_tasks"):
        # Tags on a dynamic include select the include only; `apply` passes them on.
        applied = _tags((arg.get("apply") or {}).get("tags"))
        assert want <= applied, (
            f"roles/{role}/tasks/main.yml: the {step} include does not apply tags "
            f"{sorted(want)} to its tasks"
        )


# Every playbook but switch_mtu.yml (tests/contract/test_switch_mtu.py checks it
# once per switch_os) parses against the lab inventory.
PLAYBOOKS = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml") if p.name != "switch_mtu.yml")


def _syntax_check(*playbooks: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(ansible_playbook()),
            "-i",
            str(ROOT / "inventory" / "sim.ini"),
            *(str(ROOT / "playbooks" / p) for p in playbooks),
            "--syntax-check",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def syntax_of_all() -> subprocess.CompletedProcess[str]:
    """One ansible-playbook --syntax-check of every playbook: Ansible's start-up (a second
    or two of CPU) once instead of once a playbook."""
    return _syntax_check(*PLAYBOOKS)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_passes_syntax_check(
    playbook: str, syntax_of_all: subprocess.CompletedProcess[str]
) -> None:
    proc = syntax_of_all
    if proc.returncode != 0:
        # The shared run stops at the first playbook in error: check this one alone,
        # so each case passes or fails for its own playbook.
        proc = _syntax_check(playbook)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"playbook: {ROOT / 'playbooks' / playbook}\n" in proc.stdout, proc.stdout
