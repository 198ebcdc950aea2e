"""Filters of the switch_mtu role: the one place that knows each switch OS's words.

The tasks stay declarative and every driver's commands, payloads and parsers are
plain functions, unit-tested in tests/unit/test_switch_mtu.py:

- ``switch_ports | switch_mtu_port_names``        -> fabric ports, in natural order
- ``switch_ports | switch_mtu_port_problems(os)``  -> what is wrong with the names
- ``ports | switch_mtu_nvue_commands(mtu, secs)``  -> NVUE argv lists (stage/apply/...)
- ``results | switch_mtu_nvue_mtus``               -> {port: MTU} from ``nv show ... -o json``
- ``ports | switch_mtu_sonic_config(mtu)``         -> ``sonic_interfaces`` ``config:``
- ``facts | switch_mtu_sonic_mtus``                -> {port: MTU} from ``sonic_facts``
- ``result | switch_mtu_linux_mtus``               -> {device: MTU} from ``switch_port_mtu``
- ``live | switch_mtu_to_change(mtu)``             -> ports whose MTU differs
- ``live | switch_mtu_mismatches(devices, mtu)``   -> one message per wrong device

Standard library only: Ansible loads this file on the controller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - the unit tests run with ansible installed
    AnsibleFilterError = ValueError

SWITCH_OSES = ("linux", "nvue", "sonic")

# Linux: IFNAMSIZ is 16 with the NUL, and a name is a sysfs path component.
_LINUX_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
# NVUE joins ports with commas in one `nv set interface a,b,c` (ranges use `-`).
_NVUE_IFNAME = re.compile(r"^[A-Za-z0-9_.:/-]+$")
# SONiC: standard (Eth1/1, Eth1/1/1) or native (Ethernet0) names.
_SONIC_IFNAME = re.compile(r"^(Eth\d+(/\d+){1,2}|Ethernet\d+)$")


def _natural_key(name: str) -> list[Any]:
    """swp2 before swp10, Eth1/2 before Eth1/10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _ports(value: Any) -> list[str]:
    """Port names from switch_ports (a mapping) or an already computed list."""
    if isinstance(value, Mapping | list | tuple):
        names = list(value)
    else:
        raise AnsibleFilterError(f"expected switch_ports (a mapping port -> {{node, twin}}) or "
                                 f"a list of port names, got {type(value).__name__}")
    if not all(isinstance(n, str) and n for n in names):
        raise AnsibleFilterError(f"port names must be non-empty strings: {names!r}")
    return sorted(dict.fromkeys(names), key=_natural_key)


def _mtu(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnsibleFilterError(f"MTU must be an integer, got {value!r}")
    return value


def port_names(switch_ports: Any) -> list[str]:
    """The fabric ports the switch must carry jumbo frames on, in natural order."""
    return _ports(switch_ports)


def port_problems(switch_ports: Any, switch_os: str) -> list[str]:
    """Messages for port names the driver of ``switch_os`` cannot use (empty: all fine)."""
    if not isinstance(switch_ports, Mapping):
        return [f"switch_ports must be a mapping port -> {{node, twin}}, "
                f"not {type(switch_ports).__name__}"]
    if not switch_ports:
        return ["switch_ports is empty: list the switch's fabric ports "
                "(port -> {node, twin}) in group_vars/<cluster>/"]
    pattern, hint = {
        "linux": (_LINUX_IFNAME, "a Linux interface name: 1-15 characters, no '/' or spaces"),
        "nvue": (_NVUE_IFNAME, "an NVUE interface name like swp1 (no commas or spaces)"),
        "sonic": (_SONIC_IFNAME, "a SONiC interface name like Eth1/1 or Ethernet0"),
    }.get(switch_os, (None, ""))
    if pattern is None:
        return [f"switch_os {switch_os!r} is not one of {', '.join(SWITCH_OSES)}"]
    problems = []
    for name in switch_ports:
        if not isinstance(name, str) or not pattern.match(name) or name in {".", ".."}:
            problems.append(f"switch_ports: {name!r} is not {hint}")
    return problems


# --------------------------------------------------------------------- NVUE
def nvue_commands(ports: Any, mtu: int, confirm_seconds: int) -> dict[str, list[list[str]]]:
    """The NVUE commands (argv lists) that set ``ports`` to ``mtu`` with a safety net.

    - ``stage``: detach whatever another session left pending (kept as a numbered
      revision, not lost), so our apply carries only our change; then one
      ``nv set interface swp1,swp3 link mtu 9216``.
    - ``apply``: ``nv config apply --confirm <N>s`` rolls back by itself unless
      confirmed within N seconds (dgx-spark.md, "Switches"; NVUE Config Commands).
    - ``confirm``: keeps the applied revision once the controller reconnected.
    - ``save``: writes the startup configuration; Cumulus Linux 5.9 and later
      already save on apply (auto-save), 5.8 and earlier need it to survive a reboot.
    """
    names = _ports(ports)
    mtu = _mtu(mtu)
    if isinstance(confirm_seconds, bool) or not isinstance(confirm_seconds, int) \
            or confirm_seconds <= 0:
        raise AnsibleFilterError(f"confirm time must be a positive number of seconds, "
                                 f"got {confirm_seconds!r}")
    if not names:
        return {"stage": [], "apply": [], "confirm": [], "save": []}
    return {
        "stage": [["nv", "config", "detach"],
                  ["nv", "set", "interface", ",".join(names), "link", "mtu", str(mtu)]],
        "apply": [["nv", "config", "apply", "--confirm", f"{confirm_seconds}s",
                   "--assume-yes"]],
        # Not in NVIDIA's reference pages (they document --confirm and
        # --confirm-status only); this is the CLI's own "keep it" option.
        "confirm": [["nv", "config", "apply", "--confirm-yes"]],
        "save": [["nv", "config", "save"]],
    }


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def nvue_link_mtu(doc: Any) -> int | None:
    """The MTU in one ``nv show interface <port> link [--operational] -o json`` document.

    The link object carries ``mtu`` at its top level; a document that keeps the
    revisions apart (``{"operational": {...}, "applied": {...}}``) is read from
    its operational part, since that is what frames meet. None when absent.
    """
    if isinstance(doc, str):
        try:
            doc = json.loads(doc) if doc.strip() else {}
        except ValueError as exc:
            raise AnsibleFilterError(f"nv show did not print JSON: {exc}") from exc
    if not isinstance(doc, Mapping):
        return None
    if "mtu" in doc:
        return _as_int(doc["mtu"])
    if isinstance(doc.get("link"), Mapping):
        return nvue_link_mtu(doc["link"])
    for rev in ("operational", "applied"):
        if isinstance(doc.get(rev), Mapping):
            found = nvue_link_mtu(doc[rev])
            if found is not None:
                return found
    return None


def nvue_mtus(show_results: Any) -> dict[str, int | None]:
    """{port: MTU} from the registered loop over ``nv show interface <port> link -o json``.

    Accepts the loop's ``results`` list (``item`` + ``stdout``), the registered
    variable itself, or a plain mapping port -> JSON text.
    """
    if isinstance(show_results, Mapping) and "results" in show_results:
        show_results = show_results["results"]
    if isinstance(show_results, Mapping):
        return {str(port): nvue_link_mtu(doc) for port, doc in show_results.items()}
    if not isinstance(show_results, list):
        raise AnsibleFilterError("expected the results of a loop over nv show commands")
    return {str(r["item"]): nvue_link_mtu(r.get("stdout", "")) for r in show_results}


# -------------------------------------------------------------------- SONiC
def sonic_config(ports: Any, mtu: int) -> list[dict[str, Any]]:
    """``config:`` of dellemc.enterprise_sonic.sonic_interfaces (state merged)."""
    mtu = _mtu(mtu)
    return [{"name": name, "mtu": mtu} for name in _ports(ports)]


def sonic_mtus(facts: Any) -> dict[str, int | None]:
    """{interface: MTU} from a registered ``sonic_facts`` result (or its interface list).

    The module returns ``ansible_facts.ansible_network_resources.interfaces``;
    once Ansible injected the facts they are ``ansible_facts.network_resources``.
    """
    interfaces: Any = facts
    if isinstance(facts, Mapping):
        af = facts.get("ansible_facts", facts)
        resources = af.get("ansible_network_resources", af.get("network_resources", {}))
        interfaces = (resources or {}).get("interfaces", [])
    if not isinstance(interfaces, list):
        raise AnsibleFilterError("expected sonic_facts interfaces (a list)")
    return {str(i["name"]): _as_int(i.get("mtu")) for i in interfaces
            if isinstance(i, Mapping) and "name" in i}


# -------------------------------------------------------------------- Linux
def linux_mtus(result: Any) -> dict[str, int | None]:
    """{device: live MTU} for ports and bridges from a ``switch_port_mtu`` result.

    Run the module in check mode to read: ``before`` is what sysfs holds now.
    """
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("expected a registered switch_port_mtu result")
    live: dict[str, int | None] = {}
    for group in ("ports", "bridges"):
        for dev, state in (result.get(group) or {}).items():
            live[str(dev)] = _as_int(state.get("before")) if isinstance(state, Mapping) \
                else None
    return live


# ------------------------------------------------------------------ generic
def to_change(live: Any, mtu: int) -> list[str]:
    """Ports whose live MTU is not ``mtu`` (unknown counts as different), natural order."""
    if not isinstance(live, Mapping):
        raise AnsibleFilterError("expected a mapping port -> MTU")
    mtu = _mtu(mtu)
    return sorted((p for p, v in live.items() if v != mtu), key=_natural_key)


def mismatches(live: Any, devices: Iterable[str], mtu: int) -> list[str]:
    """One message per expected device whose live MTU is not ``mtu`` or was not reported."""
    if not isinstance(live, Mapping):
        raise AnsibleFilterError("expected a mapping device -> MTU")
    mtu = _mtu(mtu)
    problems = []
    for dev in devices:
        value = live.get(dev)
        if dev not in live or value is None:
            problems.append(f"{dev}: MTU not reported by the switch")
        elif value != mtu:
            problems.append(f"{dev}: MTU {value}, expected {mtu}")
    return problems


class FilterModule:
    """Filters of the switch_mtu role (see the module docstring)."""

    def filters(self) -> dict[str, Any]:
        return {
            "switch_mtu_port_names": port_names,
            "switch_mtu_port_problems": port_problems,
            "switch_mtu_nvue_commands": nvue_commands,
            "switch_mtu_nvue_mtus": nvue_mtus,
            "switch_mtu_sonic_config": sonic_config,
            "switch_mtu_sonic_mtus": sonic_mtus,
            "switch_mtu_linux_mtus": linux_mtus,
            "switch_mtu_to_change": to_change,
            "switch_mtu_mismatches": mismatches,
        }
