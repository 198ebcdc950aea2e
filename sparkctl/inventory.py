"""Reading a cluster inventory with Ansible's own loader.

The inventory (INI or YAML, plus ``group_vars``/``host_vars``) is the single
source of truth for the cluster and for the rehearsal lab. It is read with
ansible-core's ``InventoryManager``/``VariableManager`` so that variable
precedence is exactly what the playbooks will see, and values are templated
the same way. Errors name the file (and line where Ansible knows it), the
host and the variable.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sparkctl import rules
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import CONTROLLER_VARS, controller_vars, roles_dir
from sparkctl.rules import data
from sparkctl.rules.common import PLAY_VARS
from sparkctl.rules.topology import check_cluster_name

log = logging.getLogger(__name__)

SPARKS_GROUP = "sparks"
SWITCHES_GROUP = "switches"
TWINS = ("a", "b")

T = TypeVar("T")


@dataclass(frozen=True)
class Node:
    """One Spark: its place in the TP order and its addresses."""

    name: str
    rank: int
    mgmt_ip: str
    fabric_ips: Mapping[str, str]  # twin ("a"/"b") -> address, may be empty in partial inventories


@dataclass(frozen=True)
class Switch:
    name: str
    mgmt_ip: str
    os: str


@dataclass(frozen=True)
class SwitchPort:
    """A switch port and the node twin cabled to it."""

    name: str
    node: str
    twin: str  # "a", "b" or "both" (one physical port carrying both twins)


@dataclass(frozen=True)
class Inventory:
    path: Path
    cluster: str
    nodes: tuple[Node, ...]
    switch: Switch | None
    ports: tuple[SwitchPort, ...]
    hostvars: Mapping[str, Mapping[str, Any]] = field(repr=False)
    groups: Mapping[str, list[str]] = field(repr=False, default_factory=dict)
    origins: Mapping[tuple[str, str], str] = field(repr=False, default_factory=dict)
    # Decrypted vault values: never part of a message (see :func:`redact`).
    secrets: frozenset[str] = field(repr=False, default=frozenset())
    # A second inventory source read after ``path`` (sparkctl/layout.py: another TP
    # layout's sglang_group per host, in its own host_vars): None for the inventory alone.
    overlay: Path | None = None

    @property
    def sources(self) -> tuple[Path, ...]:
        """What Ansible reads, in order: the inventory, then the overlay (whose
        host_vars override the inventory's, as a later source's do)."""
        return (self.path,) if self.overlay is None else (self.path, self.overlay)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise SparkctlError(
            f"{self.path}: no node named '{name}' (nodes: {known})", ExitCode.BAD_INPUT
        )

    def cluster_var(self, name: str, default: Any = None) -> Any:
        """A variable as the first node sees it (cluster-wide settings live in group_vars)."""
        if not self.nodes:
            return default
        return self.hostvars[self.nodes[0].name].get(name, default)


# Where Ansible read a value from ("file:line"), when it knows.
origin_of = rules.origin_of


def bad_input(
    path: Path,
    host: str | None,
    var: str | None,
    problem: str,
    *,
    value: object = None,
    hint: str | None = None,
) -> SparkctlError:
    """Build the error for a bad inventory value, naming file, host and variable."""
    where = origin_of(value) if value is not None else None
    parts = [where or str(path)]
    if host:
        parts.append(f"host {host}")
    if var:
        parts.append(f"variable {var}")
    return SparkctlError(": ".join(parts) + f": {problem}", ExitCode.BAD_INPUT, hint=hint)


# Strip Ansible's data tags so values compare and serialise as plain Python.
_plain = rules.plain


HostVars = dict[str, dict[str, Any]]


Origins = dict[tuple[str, str], str]

VAULT_HINT = (
    "set ANSIBLE_VAULT_PASSWORD_FILE to a file holding the vault password "
    "(or vault_password_file in ansible.cfg)"
)


def redact(text: str, secrets: frozenset[str] | set[str]) -> str:
    """``text`` with every decrypted vault value blanked (longest first)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "<vault-encrypted value>")
    return text


def load_ansible_inventory(path: Path) -> tuple[str, dict[str, list[str]], HostVars, Origins]:
    """Load ``path`` with ansible-core.

    Returns (cluster group, groups, templated hostvars, (host, var) -> "file:line").
    """
    cluster, groups, hostvars, origins, _ = _load_ansible_inventory(path)
    return cluster, groups, hostvars, origins


def _load_ansible_inventory(
    path: Path, overlay: Path | None = None
) -> tuple[str, dict[str, list[str]], HostVars, Origins, set[str]]:
    """:func:`load_ansible_inventory`, and the decrypted vault values it met."""
    _check_readable(path)

    # An unparsable inventory must be an error, not a warning and an empty
    # inventory. Set before ansible's constants are first imported.
    os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "True")
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    # Imported here: loading ansible costs ~0.5 s and most commands never need it.
    # The environment above is read when ansible.constants is first imported;
    # if something imported Ansible earlier in this process, set it directly.
    from ansible import constants as ansible_constants  # noqa: PLC0415
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    from sparkctl import collection  # noqa: F401, PLC0415 - installs Ansible's collection finder

    ansible_constants.INVENTORY_ANY_UNPARSED_IS_FAILED = True
    ansible_constants.INVENTORY_UNPARSED_WARNING = False
    loader = DataLoader()
    have_password = _set_vault_secrets(loader)
    secrets: set[str] = set()
    try:
        sources = [str(path.resolve())] + ([str(overlay.resolve())] if overlay else [])
        inv = InventoryManager(loader=loader, sources=sources)
        groups = {name: [h.name for h in g.get_hosts()] for name, g in inv.groups.items()}
        _check_vars_files(path.resolve().parent, [*groups, *(h.name for h in inv.get_hosts())])
        vm = VariableManager(loader=loader, inventory=inv)
        hostvars: dict[str, dict[str, Any]] = {}
        origins: Origins = {}
        plaintext: list[tuple[str, str]] = []
        raw = {host.name: vm.get_vars(host=host) for host in inv.get_hosts()}
        _refuse_templates(path, raw)  # before anything is templated: values are data
        controller = controller_vars(path)
        for host in inv.get_hosts():
            hostvars[host.name] = _resolve_host(
                path,
                host.name,
                {**controller, **raw[host.name]},
                loader=loader,
                have_password=have_password,
                origins=origins,
                secrets=secrets,
                plaintext=plaintext,
            )
    except AnsibleError as exc:
        ini = _ini_problem(path, loader) if "failed to parse inventory source" in str(exc) else None
        if ini is not None:
            raise SparkctlError(
                f"{ini[0]}: cannot parse the inventory: {ini[1]}", ExitCode.BAD_INPUT
            ) from exc
        where = _error_origin(exc)
        raise SparkctlError(f"{where or path}: {_first_line(exc)}", ExitCode.BAD_INPUT) from exc

    cluster = _cluster_group(path, groups)
    if plaintext:
        _refuse_plaintext(path, plaintext, origins)
    return cluster, groups, hostvars, origins, secrets


def _controller_var(name: str) -> str:
    """The refusal of a controller variable (paths.CONTROLLER_VARS) that an inventory or
    -e sets."""
    return (
        "is set by sparkctl for every run (from the controller: SPARKCTL_STATE_DIR, "
        "PIP_CERT, its Python, the inventory's path); refer to it as {{ " + name + " }}, "
        "do not set it"
    )


def _refuse_templates(path: Path, raw: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse every value that is a template (rules/data.py), and a controller variable
    the inventory sets, naming file, host and variable: before any value is templated,
    so no lookup, filter or call in an inventory ever runs, not even here."""
    from ansible.template import is_trusted_as_template  # noqa: PLC0415

    found: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for host, variables in raw.items():
        own = {k: v for k, v in variables.items() if k not in PLAY_VARS}
        wrong = data.value_problems(own, is_trusted_as_template)
        for name, value in own.items():
            if name in CONTROLLER_VARS:
                problem: str | None = _controller_var(name)
            else:
                problem = wrong.get(name)
                if problem is not None and rules.plaintext_secret(name, value):
                    # A secret wrapped in a template is still a secret in plain text:
                    # said too, so its hint (the vault, the environment) is given.
                    secret = rules.secret_problem(None, name)
                    where = origin_of(value) or _defined_in(path, name) or str(path)
                    found.setdefault((name, f"{secret.message} ({secret.hint})"), (where, []))[
                        1
                    ].append(host)
            if problem is None:
                continue
            where = origin_of(value) or _defined_in(path, name) or str(path)
            entry = found.setdefault((name, problem), (where, []))
            entry[1].append(host)
    if not found:
        return
    lines = []
    for (name, problem), (where, hosts) in found.items():
        who = f"host {hosts[0]}" if len(hosts) == 1 else "all hosts"
        hint = "" if problem.endswith(")") else f" ({data.HINT})"
        lines.append(f"{where}: {who}: variable {name}: {problem}{hint}")
    raise _refused(path, lines)


def _refuse_plaintext(path: Path, found: list[tuple[str, str]], origins: Origins) -> None:
    """Plaintext secrets stop everything, before any other rule and before any contact;
    a value set for every host (group_vars) is said once, and never shown."""
    by_name: dict[str, list[str]] = {}
    for host, name in found:
        by_name.setdefault(name, []).append(host)
    lines = []
    for name, hosts in by_name.items():
        where = next((origins[(h, name)] for h in hosts if (h, name) in origins), str(path))
        problem = rules.secret_problem(hosts[0] if len(hosts) == 1 else None, name)
        if problem.host is None:
            problem = replace(problem, scope="all hosts")
        lines.append(f"{where}: {problem} ({problem.hint})")
    raise _refused(path, lines)


def _refused(path: Path, lines: list[str]) -> SparkctlError:
    """The one error of an inventory's problems: a line each, nothing contacted (exit 2)."""
    count = f"{len(lines)} problem{'s' if len(lines) > 1 else ''}"
    return SparkctlError(
        f"{path}: {count} in the inventory; no host was contacted\n  " + "\n  ".join(lines),
        ExitCode.BAD_INPUT,
    )


def _resolve_host(
    path: Path,
    host: str,
    raw: Mapping[str, Any],
    *,
    loader: Any,
    have_password: bool,
    origins: Origins,
    secrets: set[str],
    plaintext: list[tuple[str, str]],
) -> dict[str, Any]:
    """One host's variables templated as the playbooks will see them; their origins, the
    decrypted vault values and the plaintext secrets are recorded on the way."""
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.template import Templar  # noqa: PLC0415

    templar = Templar(loader=loader, variables=raw)
    resolved: dict[str, Any] = {}
    for key, value in raw.items():
        if key in PLAY_VARS or (key in CONTROLLER_VARS and origin_of(value) is None):
            continue
        where = origin_of(value)
        if where:
            origins[(host, key)] = where
        if rules.plaintext_secret(key, value):
            plaintext.append((host, key))
        try:
            resolved[key] = templar.template(value)
            secrets.update(str(templar.template(enc)) for enc in _encrypted(value))
        except AnsibleError as exc:
            if _is_vault_error(exc):
                raise bad_input(
                    path, host, key, _vault_problem(have_password), value=value, hint=VAULT_HINT
                ) from None
            raise bad_input(path, host, key, f"cannot be templated: {exc}", value=value) from exc
    resolved["inventory_hostname"] = host
    return resolved


# Files Ansible's host_group_vars plugin reads from group_vars/ and host_vars/.
_VARS_SUFFIXES = {"", ".yml", ".yaml", ".json"}


def _check_readable(path: Path) -> None:
    """The inventory file exists, is a file and can be read."""
    if path.is_symlink() and not path.exists():
        raise SparkctlError(
            f"{path}: cannot read inventory: it links to {path.readlink()}, which does not exist",
            ExitCode.BAD_INPUT,
        )
    if not path.exists():
        raise SparkctlError(f"{path}: inventory file not found", ExitCode.BAD_INPUT)
    if not path.is_file():
        raise SparkctlError(
            f"{path}: not a file (give the inventory file, e.g. inventory/sim.ini)",
            ExitCode.BAD_INPUT,
        )
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SparkctlError(
            f"{path}: cannot read inventory: {exc.strerror}", ExitCode.BAD_INPUT
        ) from exc
    # Whatever its suffix: Ansible's yaml plugin reads a YAML inventory named lab.ini
    # too, and its aliases multiply the same way. An INI file is no YAML document
    # and passes in microseconds.
    _check_bounded(path, data)


def _check_vars_files(base: Path, names: Iterable[str]) -> None:
    """Every group_vars/ and host_vars/ file Ansible would read for ``names`` can be read.

    Ansible skips a vars file it cannot open (a link to nowhere) without a word,
    so the settings in it would silently not apply.
    """
    for folder in ("group_vars", "host_vars"):
        top = base / folder
        if not top.is_dir():
            continue
        for name in names:
            for candidate in _vars_files(top, name):
                _check_vars_file(candidate)


def _vars_files(top: Path, name: str) -> list[Path]:
    """``top/NAME``, ``top/NAME.yml`` (.yaml, .json), and the files in ``top/NAME/``."""
    found = [top / f"{name}{suffix}" for suffix in sorted(_VARS_SUFFIXES)]
    folder = top / name
    if folder.is_dir():
        found += [
            p
            for p in sorted(folder.rglob("*"))
            if p.suffix in _VARS_SUFFIXES and not p.name.startswith(".")
        ]
    return [p for p in found if (p.is_symlink() or p.exists()) and not p.is_dir()]


# Bounds on what an inventory file may make Ansible do: a 300-byte YAML alias bomb
# expands to billions of nodes, and Ansible templates every variable of every host.
MAX_FILE_BYTES = 1 << 20
MAX_YAML_NODES = 100_000
MAX_SCALAR_CHARS = 64 << 10


def _check_vars_file(candidate: Path) -> None:
    if candidate.is_symlink() and not candidate.exists():
        raise SparkctlError(
            f"{candidate}: cannot read vars file: it links to "
            f"{candidate.readlink()}, which does not exist",
            ExitCode.BAD_INPUT,
            hint="fix the link or remove it; its variables would not be applied",
        )
    try:
        with candidate.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SparkctlError(
            f"{candidate}: cannot read vars file: {exc.strerror}", ExitCode.BAD_INPUT
        ) from exc
    _check_bounded(candidate, data)


def _check_bounded(path: Path, data: bytes) -> None:
    """Refuse a file too large, or YAML that expands beyond MAX_YAML_NODES (aliases
    counted as often as they are used) or holds a scalar beyond MAX_SCALAR_CHARS: in
    milliseconds, before Ansible loads and templates it. The graph is composed, never
    constructed, so an alias bomb costs its own size here."""
    if len(data) > MAX_FILE_BYTES:
        raise SparkctlError(
            f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; an inventory "
            "file is a page of settings",
            ExitCode.BAD_INPUT,
        )
    try:
        docs = list(yaml.compose_all(data.decode("utf-8", "replace"), Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return  # Ansible's loader reports the syntax error with its line
    except RecursionError:
        raise SparkctlError(f"{path}: YAML nested too deep to read", ExitCode.BAD_INPUT) from None
    sizes: dict[int, int] = {}

    def expanded(node: yaml.Node, depth: int = 0) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > 100:
            raise SparkctlError(f"{path}: YAML nested deeper than 100 levels", ExitCode.BAD_INPUT)
        sizes[id(node)] = MAX_YAML_NODES + 1  # a node that contains itself never ends
        if isinstance(node, yaml.ScalarNode):
            if len(node.value) > MAX_SCALAR_CHARS:
                line = node.start_mark.line + 1
                raise SparkctlError(
                    f"{path}:{line}: a value of {len(node.value)} characters "
                    f"(at most {MAX_SCALAR_CHARS})",
                    ExitCode.BAD_INPUT,
                )
            total = 1
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(expanded(child, depth + 1) for child in node.value)
        else:
            total = 1 + sum(expanded(k, depth + 1) + expanded(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = min(total, MAX_YAML_NODES + 1)
        return sizes[id(node)]

    total = sum(expanded(doc) for doc in docs if doc is not None)
    if total > MAX_YAML_NODES:
        raise SparkctlError(
            f"{path}: its YAML expands to more than {MAX_YAML_NODES} values "
            "(aliases counted where they are used): refused before Ansible "
            "loads it",
            ExitCode.BAD_INPUT,
            hint="an inventory needs no aliases that multiply; write the values out",
        )


def _ini_problem(path: Path, loader: Any) -> tuple[str, str] | None:
    """("FILE:LINE", what is wrong) of an INI inventory Ansible could not parse, or None.

    Ansible only says it "completely failed to parse" the source (the reason goes
    to a warning, without the line): parse the file again with its INI plugin,
    noting the line it stopped at.
    """
    from ansible.inventory.data import InventoryData  # noqa: PLC0415
    from ansible.plugins.inventory.ini import InventoryModule  # noqa: PLC0415

    class LineNoting(InventoryModule):  # type: ignore[misc]
        line: int | None = None

        def _parse(self, lines: list[str]) -> None:
            try:
                super()._parse(lines)
            except Exception:
                origin = getattr(self, "_origin", None)
                self.line = getattr(origin, "line_num", None)
                raise

    if path.suffix.lower() in {".yml", ".yaml", ".json", ".toml"}:
        return None
    plugin = LineNoting()
    try:
        if not plugin.verify_file(str(path)):
            return None
        plugin.parse(InventoryData(), loader, str(path))
    except Exception as exc:  # Ansible's parser raises its own errors and Python's
        cause = _first_line(exc.__cause__ or exc).removeprefix("Failed to parse inventory: ")
        kind = re.search(r"has unknown type: (\S+)", cause)
        close = (
            difflib.get_close_matches(kind.group(1), ["children", "vars", "hosts"], n=1)
            if kind
            else []
        )
        if close:
            cause += f" (did you mean {close[0]}?)"
        lines = path.read_text(errors="replace").splitlines()
        if not (plugin.line and 0 < plugin.line <= len(lines)):
            return str(path), cause
        text = lines[plugin.line - 1].strip()
        if text.startswith("[") and "]" not in text:
            cause = f"section header {text!r} has no closing ]"
        return f"{path}:{plugin.line}", cause
    return None


_PROMPTS = frozenset({"prompt", "prompt_ask_vault_pass"})


def _vault_sources() -> tuple[list[tuple[str | None, str, str]], tuple[str, str] | None]:
    """The vault passwords Ansible's configuration names, read now.

    ``vault_identity_list`` (ID@SOURCE or SOURCE) and ``vault_password_file``,
    each also set by its environment variable (ANSIBLE_VAULT_IDENTITY_LIST,
    ANSIBLE_VAULT_PASSWORD_FILE) and read at this call, not when
    ansible.constants was imported. Returns the identities as (vault id or None,
    source, where it was set) and the password file as (source, where it was
    set), None when unset.
    """
    from ansible import constants as ansible_constants  # noqa: PLC0415

    config = ansible_constants.config
    identities: list[tuple[str | None, str, str]] = []
    ids, ids_origin = config.get_config_value_and_origin("DEFAULT_VAULT_IDENTITY_LIST")
    for slug in ids or []:
        name, at, source = str(slug).partition("@")
        if not at:
            name, source = "", str(slug)
        identities.append((name or None, source, str(ids_origin)))
    pw_file, pw_origin = config.get_config_value_and_origin("DEFAULT_VAULT_PASSWORD_FILE")
    return identities, (str(pw_file), str(pw_origin)) if pw_file else None


def vault_environment() -> dict[str, str]:
    """The environment that gives ansible-playbook the vault passwords this process
    decrypts the inventory with.

    The runner points ANSIBLE_CONFIG at sparkctl's own ansible.cfg, so a
    ``vault_password_file`` found in the user's ansible.cfg (or ~/.ansible.cfg)
    would otherwise pass ``inventory check`` and be missing from the playbooks.
    Paths are made absolute: ansible-playbook runs in another directory. Prompts
    are left out, as here: no run is interactive.
    """
    identities, pw_file = _vault_sources()
    env: dict[str, str] = {}
    slugs = [
        f"{vault_id}@{_absolute(source)}" if vault_id else _absolute(source)
        for vault_id, source, _ in identities
        if source not in _PROMPTS
    ]
    if slugs:
        env["ANSIBLE_VAULT_IDENTITY_LIST"] = ",".join(slugs)
    if pw_file and pw_file[0] not in _PROMPTS:
        env["ANSIBLE_VAULT_PASSWORD_FILE"] = _absolute(pw_file[0])
    return env


def _absolute(source: str) -> str:
    return str(Path(source).expanduser().absolute())


def _set_vault_secrets(loader: Any) -> bool:
    """Give ``loader`` the vault passwords Ansible itself would use
    (:func:`_vault_sources`); True if there are any. Prompts are skipped: nothing
    here is interactive. A password file that cannot be used is bad input.
    """
    from ansible import constants as ansible_constants  # noqa: PLC0415
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.parsing.vault import (  # noqa: PLC0415
        VaultSecretsContext,
        get_file_vault_secret,
    )

    identities, pw_file = _vault_sources()
    sources = identities + ([(None, *pw_file)] if pw_file else [])
    secrets: list[tuple[str, Any]] = []
    for vault_id, source, origin in sources:
        if source in _PROMPTS:
            continue
        try:
            secret = get_file_vault_secret(filename=source, vault_id=vault_id, loader=loader)
            secret.load()
        except AnsibleError as exc:
            raise SparkctlError(
                f"{source}: cannot use this vault password file (set by "
                f"{origin}): {_first_line(exc)}",
                ExitCode.BAD_INPUT,
                hint=VAULT_HINT,
            ) from None
        secrets.append((vault_id or ansible_constants.DEFAULT_VAULT_IDENTITY, secret))
    loader.set_vault_secrets(secrets)
    # Decryption asks the process-wide context (ansible-core 2.19), which can be
    # initialized once only: later loads in this process replace its secrets.
    context = VaultSecretsContext.current(optional=True)
    if context is None:
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))
    else:
        context.secrets = secrets
    return bool(secrets)


def _encrypted(value: Any) -> list[Any]:
    """The vault-encrypted strings in ``value`` (a value, or lists and mappings of them)."""
    from ansible.parsing.vault import EncryptedString  # noqa: PLC0415

    if isinstance(value, EncryptedString):
        return [value]
    if isinstance(value, Mapping):
        return [enc for item in value.values() for enc in _encrypted(item)]
    if isinstance(value, list | tuple):
        return [enc for item in value for enc in _encrypted(item)]
    return []


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in out):
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _is_vault_error(exc: BaseException) -> bool:
    from ansible.parsing.vault import AnsibleVaultError  # noqa: PLC0415

    return any(
        isinstance(e, AnsibleVaultError) or "undecryptable" in str(e).lower() for e in _chain(exc)
    )


def _vault_problem(have_password: bool) -> str:
    if have_password:
        return "is vault-encrypted and none of the vault passwords given decrypts it"
    return "is vault-encrypted and no vault password is available"


def _error_origin(exc: BaseException) -> str | None:
    """ "file:line:column" of what an Ansible error is about (a YAML file's syntax error),
    when Ansible says: the error, or one it was raised from, carries the origin."""
    for error in _chain(exc):
        obj = getattr(error, "obj", None)
        where = origin_of(obj) if obj is not None else None
        if where:
            return where
    return None


def _first_line(exc: BaseException) -> str:
    """Ansible's errors carry a multi-line story; its first lines say what is wrong."""
    text = getattr(exc, "message", None) or str(exc)
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " ".join(lines[:3]) if lines else type(exc).__name__


def _cluster_group(path: Path, groups: Mapping[str, list[str]]) -> str:
    """The group that contains every Spark and the switch: its name is the cluster's name."""
    if SPARKS_GROUP not in groups or not groups[SPARKS_GROUP]:
        raise SparkctlError(
            f"{path}: no hosts in group [{SPARKS_GROUP}]",
            ExitCode.BAD_INPUT,
            hint="list the Sparks under a [sparks] section",
        )
    members = set(groups[SPARKS_GROUP]) | set(groups.get(SWITCHES_GROUP, []))
    candidates = [
        name
        for name, hosts in groups.items()
        if name not in {"all", "ungrouped", SPARKS_GROUP, SWITCHES_GROUP} and members <= set(hosts)
    ]
    if not candidates:
        wrong = check_cluster_name(path.stem, str(path))
        if wrong is not None:
            raise _refused(path, [f"{path}: {wrong}" + (f" ({wrong.hint})" if wrong.hint else "")])
        return path.stem
    return sorted(candidates, key=lambda n: (len(groups[n]), n))[0]


def _get(
    path: Path,
    hostvars: Mapping[str, Any],
    host: str,
    var: str,
    *,
    convert: Callable[[Any], T],
    what: str,
) -> T:
    if var not in hostvars:
        raise bad_input(path, host, var, f"missing (required: {what})")
    value = hostvars[var]
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise bad_input(path, host, var, f"{value!r} is not {what}", value=value) from exc


def _ipv4(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return str(ipaddress.IPv4Address(value.strip()))


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return int(value)


# The whole check (load, template, rules) ends within this many seconds, whatever an
# inventory holds: a pathological file is a refusal, never a hang. A real inventory
# takes well under a second (docs/benchmarks.md).
CHECK_DEADLINE_SECONDS = 60.0


@contextlib.contextmanager
def deadline(path: Path, seconds: float | None = None) -> Iterator[None]:
    """Raise BAD_INPUT naming ``path`` if the block runs longer than ``seconds``.

    A real-time timer and SIGALRM, in the main thread only (where every sparkctl
    command runs its check; elsewhere, a test's worker thread, the block runs
    unbounded). A timer already set by the caller is left alone."""
    limit = CHECK_DEADLINE_SECONDS if seconds is None else seconds
    usable = threading.current_thread() is threading.main_thread() and (
        signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )
    if not usable:
        yield
        return

    def expired(_signum: int, _frame: object) -> None:
        raise SparkctlError(
            f"{path}: checking the inventory took longer than {limit:g} s; refused "
            "(no host was contacted)",
            ExitCode.BAD_INPUT,
            hint="an inventory is a page of settings: look for a file that is "
            "generated, huge, or refers to itself",
        )

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load(path: Path, overlay: Path | None = None) -> Inventory:
    """Load the inventory (and ``overlay`` after it) and build the typed cluster model."""
    path = Path(path)
    cluster, groups, hostvars, origins, secrets = _load_ansible_inventory(path, overlay)
    try:
        inv = _build(
            path,
            cluster,
            groups=groups,
            hostvars=hostvars,
            origins=origins,
            secrets=frozenset(secrets),
        )
        return replace(inv, overlay=overlay) if overlay is not None else inv
    except SparkctlError as exc:
        if not secrets:
            raise
        raise SparkctlError(
            redact(exc.message, secrets), exc.code, hint=exc.hint and redact(exc.hint, secrets)
        ) from None


def _build(
    path: Path,
    cluster: str,
    *,
    groups: dict[str, list[str]],
    hostvars: HostVars,
    origins: Origins,
    secrets: frozenset[str],
) -> Inventory:
    nodes: list[Node] = []
    for name in groups[SPARKS_GROUP]:
        hv = hostvars[name]
        rank = _get(path, hv, name, "node_rank", convert=_int, what="an integer rank (0 = head)")
        mgmt = _get(
            path, hv, name, "ansible_host", convert=_ipv4, what="an IPv4 management address"
        )
        fabric = {
            twin: _get(path, hv, name, f"fabric_{twin}_ip", convert=_ipv4, what="an IPv4 address")
            for twin in TWINS
            if f"fabric_{twin}_ip" in hv
        }
        nodes.append(Node(name=name, rank=rank, mgmt_ip=mgmt, fabric_ips=fabric))
    nodes.sort(key=lambda n: n.rank)

    switch: Switch | None = None
    # A Spark also listed under [switches] is one host with two roles: the rules name it
    # (rules/topology.py), it is not a second switch.
    switches = [h for h in groups.get(SWITCHES_GROUP, []) if h not in groups[SPARKS_GROUP]]
    if len(switches) > 1:
        raise bad_input(
            path,
            None,
            None,
            f"[{SWITCHES_GROUP}] lists {len(switches)} switches; "
            "sparkctl drives exactly one fabric switch",
        )
    if switches:
        name = switches[0]
        hv = hostvars[name]
        switch = Switch(
            name=name,
            mgmt_ip=_get(path, hv, name, "ansible_host", convert=_ipv4, what="an IPv4 address"),
            os=_get(
                path,
                hv,
                name,
                "switch_os",
                convert=str,
                what=f"the switch's OS: {', '.join(rules.SWITCH_OSES)}",
            ),
        )

    ports: list[SwitchPort] = []
    raw_ports = _plain(hostvars[nodes[0].name].get("switch_ports", {})) if nodes else {}
    where = (
        (origins.get((nodes[0].name, "switch_ports")) or _defined_in(path, "switch_ports"))
        if nodes
        else None
    )
    if not isinstance(raw_ports, dict):
        raise SparkctlError(
            f"{where or path}: variable switch_ports: {raw_ports!r} is "
            f"{rules.common.type_name(raw_ports)}, not a mapping of port -> {{node, twin}}",
            ExitCode.BAD_INPUT,
            hint="switch_ports: {swp1: {node: spark1, twin: a}, ...}",
        )
    for port, spec in raw_ports.items():
        if not isinstance(spec, dict) or "node" not in spec:
            raise SparkctlError(
                f"{where or path}: variable switch_ports.{port}: needs at least `node:`",
                ExitCode.BAD_INPUT,
            )
        ports.append(
            SwitchPort(name=port, node=str(spec["node"]), twin=str(spec.get("twin", "both")))
        )
    return Inventory(
        path=path,
        cluster=cluster,
        nodes=tuple(nodes),
        switch=switch,
        ports=tuple(ports),
        hostvars={k: _plain(v) for k, v in hostvars.items()},
        groups=groups,
        origins=origins,
        secrets=secrets,
    )


def _defined_in(path: Path, var: str) -> str | None:
    """The group_vars/host_vars file that sets ``var`` (for values Ansible cannot tag)."""
    top = var.split(".", 1)[0]
    base = path.resolve().parent
    for folder in ("host_vars", "group_vars"):
        for candidate in sorted((base / folder).rglob("*")):
            if not candidate.is_file() or candidate.suffix not in {"", ".yml", ".yaml", ".json"}:
                continue
            try:
                data = yaml.safe_load(candidate.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(data, dict) and top in data:
                return str(candidate)
    return None


EXTRA_VARS = "-e"  # where a value given on the command line comes from


def _refuse_extra(path: Path, extra: Mapping[str, Any]) -> None:
    """``-e`` values are data too, and stricter: no template at all (a command line has
    no variables of its own to refer to), and no controller variable."""
    lines = []
    for name, value in extra.items():
        if name in CONTROLLER_VARS:
            problem: str | None = _controller_var(name)
        else:
            problem = data.template_problem(value)
            if problem is None and data.references(value):
                problem = "is a template: values given with -e are data"
        if problem is not None:
            lines.append(f"{EXTRA_VARS}: all hosts: variable {name}: {problem} ({data.HINT})")
    if lines:
        raise _refused(path, lines)


def validate(
    path: Path, extra: Mapping[str, Any] | None = None, overlay: Path | None = None
) -> Inventory:
    """Load the inventory and apply every rule; raise one BAD_INPUT error listing all problems.

    ``extra`` (a command's ``-e`` values, which override every inventory value in the
    playbooks) is judged with the inventory, as the hosts would see it. Nothing is
    contacted: this runs on the controller before any playbook.
    """
    with deadline(Path(path)):
        return _validate(Path(path), extra, overlay)


def _validate(path: Path, extra: Mapping[str, Any] | None, overlay: Path | None) -> Inventory:
    inv = load(path, overlay)
    hostvars: Mapping[str, Mapping[str, Any]] = inv.hostvars
    origins = dict(inv.origins)
    if extra:
        _refuse_extra(path, extra)
        plain_extra = {str(k): _plain(v) for k, v in extra.items()}
        hostvars = {host: {**hv, **plain_extra} for host, hv in inv.hostvars.items()}
        origins.update({(host, name): EXTRA_VARS for host in hostvars for name in plain_extra})
    problems = rules.check(inv.groups, hostvars, roles_dir())
    if not problems:
        return inv
    lines = []
    for p in problems:
        where: str | None = None
        if p.var:
            top = p.var.split(".", 1)[0]
            hosts = [p.host] if p.host else list(hostvars)
            where = next((origins[(h, top)] for h in hosts if (h, top) in origins), None)
            where = where or _defined_in(path, p.var)
        line = f"{where or path}: {p}"
        if p.hint:
            line += f" ({p.hint})"
        lines.append(line)
    raise _refused(path, [redact(line, inv.secrets) for line in lines])
