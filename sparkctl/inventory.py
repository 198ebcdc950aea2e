"""Reading a cluster inventory with Ansible's own loader.

The inventory (INI or YAML, plus ``group_vars``/``host_vars``) is the single
source of truth for the cluster and for the rehearsal lab. It is read with
ansible-core's ``InventoryManager``/``VariableManager`` so that variable
precedence is exactly what the playbooks will see, and values are templated
the same way. Errors name the file (and line where Ansible knows it), the
host and the variable.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sparkctl import inventory_rules
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import roles_dir

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

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise SparkctlError(f"{self.path}: no node named '{name}' (nodes: {known})",
                            ExitCode.BAD_INPUT)

    def cluster_var(self, name: str, default: Any = None) -> Any:
        """A variable as the first node sees it (cluster-wide settings live in group_vars)."""
        if not self.nodes:
            return default
        return self.hostvars[self.nodes[0].name].get(name, default)


# Where Ansible read a value from ("file:line"), when it knows.
origin_of = inventory_rules.origin_of


def bad_input(path: Path, host: str | None, var: str | None, problem: str, *,
              value: object = None, hint: str | None = None) -> SparkctlError:
    """Build the error for a bad inventory value, naming file, host and variable."""
    where = origin_of(value) if value is not None else None
    parts = [where or str(path)]
    if host:
        parts.append(f"host {host}")
    if var:
        parts.append(f"variable {var}")
    return SparkctlError(": ".join(parts) + f": {problem}", ExitCode.BAD_INPUT, hint=hint)


# Strip Ansible's data tags so values compare and serialise as plain Python.
_plain = inventory_rules.plain


HostVars = dict[str, dict[str, Any]]


Origins = dict[tuple[str, str], str]


def load_ansible_inventory(path: Path) -> tuple[str, dict[str, list[str]], HostVars, Origins]:
    """Load ``path`` with ansible-core.

    Returns (cluster group, groups, templated hostvars, (host, var) -> "file:line").
    """
    if not path.exists():
        raise SparkctlError(f"{path}: inventory file not found", ExitCode.BAD_INPUT)
    if not path.is_file():
        raise SparkctlError(f"{path}: not a file (give the inventory file, e.g. inventory/sim.ini)",
                            ExitCode.BAD_INPUT)
    try:
        path.read_bytes()
    except OSError as exc:
        raise SparkctlError(f"{path}: cannot read inventory: {exc.strerror}",
                            ExitCode.BAD_INPUT) from exc

    # An unparsable inventory must be an error, not a warning and an empty
    # inventory. Set before ansible's constants are first imported.
    os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "True")
    os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    # Imported here: loading ansible costs ~0.5 s and most commands never need it.
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415
    from ansible.template import Templar  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    _init_ansible(init_plugin_loader)
    # The environment above is read when ansible.constants is first imported;
    # if something imported Ansible earlier in this process, set it directly.
    from ansible import constants as ansible_constants  # noqa: PLC0415

    ansible_constants.INVENTORY_ANY_UNPARSED_IS_FAILED = True
    ansible_constants.INVENTORY_UNPARSED_WARNING = False
    loader = DataLoader()
    try:
        inv = InventoryManager(loader=loader, sources=[str(path.resolve())])
        vm = VariableManager(loader=loader, inventory=inv)
        groups = {name: [h.name for h in g.get_hosts()] for name, g in inv.groups.items()}
        hostvars: dict[str, dict[str, Any]] = {}
        origins: Origins = {}
        for host in inv.get_hosts():
            raw = vm.get_vars(host=host)
            templar = Templar(loader=loader, variables=raw)
            resolved: dict[str, Any] = {}
            for key, value in raw.items():
                if key in {"groups", "hostvars", "vars", "environment", "omit", "playbook_dir",
                           "ansible_playbook_python", "inventory_dir", "inventory_file"}:
                    continue
                where = origin_of(value)
                if where:
                    origins[(host.name, key)] = where
                try:
                    resolved[key] = templar.template(value)
                except AnsibleError as exc:
                    raise bad_input(path, host.name, key, f"cannot be templated: {exc}",
                                    value=value) from exc
            resolved["inventory_hostname"] = host.name
            hostvars[host.name] = resolved
    except AnsibleError as exc:
        raise SparkctlError(f"{path}: {_first_line(exc)}", ExitCode.BAD_INPUT) from exc

    cluster = _cluster_group(path, groups)
    return cluster, groups, hostvars, origins


_ANSIBLE_READY: list[bool] = []


def _init_ansible(init: Callable[[], None]) -> None:
    """Install Ansible's collection loader once per process (it warns when repeated)."""
    if not _ANSIBLE_READY:
        init()
        _ANSIBLE_READY.append(True)


def _first_line(exc: Exception) -> str:
    """Ansible's errors carry a multi-line story; its first lines say what is wrong."""
    text = getattr(exc, "message", None) or str(exc)
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " ".join(lines[:3]) if lines else type(exc).__name__


def _cluster_group(path: Path, groups: Mapping[str, list[str]]) -> str:
    """The group that contains every Spark and the switch: its name is the cluster's name."""
    if SPARKS_GROUP not in groups or not groups[SPARKS_GROUP]:
        raise SparkctlError(f"{path}: no hosts in group [{SPARKS_GROUP}]", ExitCode.BAD_INPUT,
                            hint="list the Sparks under a [sparks] section")
    members = set(groups[SPARKS_GROUP]) | set(groups.get(SWITCHES_GROUP, []))
    candidates = [name for name, hosts in groups.items()
                  if name not in {"all", "ungrouped", SPARKS_GROUP, SWITCHES_GROUP}
                  and members <= set(hosts)]
    if not candidates:
        return path.stem
    return sorted(candidates, key=lambda n: (len(groups[n]), n))[0]


def _get(path: Path, hostvars: Mapping[str, Any], host: str, var: str, *,
         convert: Callable[[Any], T], what: str) -> T:
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


def load(path: Path) -> Inventory:
    """Load the inventory and build the typed cluster model."""
    path = Path(path)
    cluster, groups, hostvars, origins = load_ansible_inventory(path)
    nodes: list[Node] = []
    for name in groups[SPARKS_GROUP]:
        hv = hostvars[name]
        rank = _get(path, hv, name, "node_rank", convert=_int,
                    what="an integer rank (0 = head)")
        mgmt = _get(path, hv, name, "ansible_host", convert=_ipv4,
                    what="an IPv4 management address")
        fabric = {twin: _get(path, hv, name, f"fabric_{twin}_ip", convert=_ipv4,
                             what="an IPv4 address")
                  for twin in TWINS if f"fabric_{twin}_ip" in hv}
        nodes.append(Node(name=name, rank=rank, mgmt_ip=mgmt, fabric_ips=fabric))
    nodes.sort(key=lambda n: n.rank)

    switch: Switch | None = None
    switches = groups.get(SWITCHES_GROUP, [])
    if len(switches) > 1:
        raise bad_input(path, None, None, f"[{SWITCHES_GROUP}] lists {len(switches)} switches; "
                        "sparkctl drives exactly one fabric switch")
    if switches:
        name = switches[0]
        hv = hostvars[name]
        switch = Switch(name=name,
                        mgmt_ip=_get(path, hv, name, "ansible_host", convert=_ipv4,
                                     what="an IPv4 address"),
                        os=_get(path, hv, name, "switch_os", convert=str, what="a switch OS name"))

    ports: list[SwitchPort] = []
    raw_ports = _plain(hostvars[nodes[0].name].get("switch_ports", {})) if nodes else {}
    if not isinstance(raw_ports, dict):
        raise bad_input(path, None, "switch_ports", "must be a mapping of port -> {node, twin}")
    for port, spec in raw_ports.items():
        if not isinstance(spec, dict) or "node" not in spec:
            raise bad_input(path, None, f"switch_ports.{port}", "needs at least `node:`")
        ports.append(SwitchPort(name=port, node=str(spec["node"]),
                                twin=str(spec.get("twin", "both"))))
    return Inventory(path=path, cluster=cluster, nodes=tuple(nodes), switch=switch,
                     ports=tuple(ports), hostvars={k: _plain(v) for k, v in hostvars.items()},
                     groups=groups, origins=origins)


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


def validate(path: Path) -> Inventory:
    """Load the inventory and apply every rule; raise one BAD_INPUT error listing all problems.

    Nothing is contacted: this runs on the controller before any playbook.
    """
    inv = load(path)
    problems = inventory_rules.check(inv.groups, inv.hostvars, roles_dir())
    if not problems:
        return inv
    lines = []
    for p in problems:
        where: str | None = None
        if p.var:
            top = p.var.split(".", 1)[0]
            hosts = [p.host] if p.host else list(inv.hostvars)
            where = next((inv.origins[(h, top)] for h in hosts if (h, top) in inv.origins), None)
            where = where or _defined_in(path, p.var)
        line = f"{where or path}: {p}"
        if p.hint:
            line += f" ({p.hint})"
        lines.append(line)
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    raise SparkctlError(f"{path}: {count} in the inventory; no host was contacted\n  "
                        + "\n  ".join(lines), ExitCode.BAD_INPUT)
