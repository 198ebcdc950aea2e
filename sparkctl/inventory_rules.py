"""The inventory rules, in one place for the CLI and for the playbooks.

``sparkctl`` runs :func:`check` on the controller before any host is
contacted; the ``preflight`` role runs the very same function as the filter
``sparkctl_inventory_problems`` (``roles/preflight/filter_plugins`` links to
this file), so plain ``ansible-playbook`` is just as safe.

This module must stay importable by Ansible on its own: standard library and
PyYAML only, no imports from the sparkctl package.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

import yaml

SPARKS = "sparks"
SWITCHES = "switches"
TWINS = ("a", "b")
SWITCH_OSES = ("linux", "nvue", "sonic")
PASSWORD_VARS = (
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_ssh_password",
    "ansible_become_password",
    "ansible_become_pass",
    "ansible_sudo_pass",
)
# Connection variables that would turn host key checking off (a boolean false).
HOST_KEY_CHECKING_VARS = (
    "ansible_host_key_checking",
    "ansible_ssh_host_key_checking",
    "ansible_paramiko_host_key_checking",
    "ansible_libssh_host_key_checking",
)
# ... that would accept and record unknown keys (paramiko, network_cli: a boolean true).
HOST_KEY_AUTO_ADD_VARS = ("ansible_paramiko_host_key_auto_add", "ansible_host_key_auto_add")
# ssh argument strings: their -o options reach ssh's command line (Ansible) and
# validate's ssh_config.
SSH_ARGS_VARS = (
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_ssh_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
)
_TRUE_WORDS = frozenset({"true", "yes", "on", "1", "y", "t"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0", "n", "f"})
TRUST_HINT = "run `sparkctl trust INVENTORY` to record the hosts' keys"
# Variables the rules check themselves (and whose defaults are in cluster_defaults).
HOST_VARS = ("node_rank", "fabric_a_ip", "fabric_b_ip")
# The sglang role's TP group of a Spark without sglang_group (its default).
DEFAULT_SGLANG_GROUP = "main"
# A group name: one word (the sglang role's filter accepts the same).
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")

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


# Variables Ansible itself, facts and the lab define: never "unknown".
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
# variable of its argument_specs, a range (min, max, above: exclusive minimum), a
# format of FORMATS, a max_length, and for a list or a mapping the constraint of its
# items, keys and values; allow_empty lets the empty string (a role's "unset", as in
# sglang_image_digest: "") pass whatever else is said. One declaration per role,
# enforced by `inventory check` (before any contact) and by the preflight play (this
# module, as a filter).
CONSTRAINT = "sparkctl_constraint"
_CONSTRAINT_KEYS = frozenset(
    {
        "min",
        "max",
        "above",
        "format",
        "max_length",
        "items",
        "keys",
        "values",
        "allow_empty",
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


def _abs_path(value: str) -> bool:
    """An absolute path of plain characters, no ``..`` and no empty component: a file a
    role writes stays where it says (``/../../tmp/x`` is refused)."""
    if value == "/":
        return True
    return bool(re.fullmatch(r"/[A-Za-z0-9_.,+@%=:/-]*", value)) and not any(
        part in ("", ".", "..") for part in value[1:].rstrip("/").split("/")
    )


def _controller_path(value: str) -> bool:
    """A path on the controller: absolute or from ``~``, same characters."""
    return _abs_path(value[1:] if value.startswith("~/") else value) if value != "~" else True


def _unit_path(value: str) -> bool:
    """An absolute path (as :func:`_abs_path`) that a systemd unit line and docker's
    ``--volume SRC:DST:ro`` take as it is: no ``:`` (docker's separator), no ``%``
    (a systemd specifier in EnvironmentFile=) and no ``,``."""
    return _abs_path(value) and re.fullmatch(r"[A-Za-z0-9_.+@=/-]+", value) is not None


def _port_range(value: str) -> bool:
    """A TCP port or a range ``a-b`` with 1 <= a <= b <= 65535 (nft's and the sglang
    firewall filter's form)."""
    found = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", value)
    if found is None:
        return False
    low = int(found.group(1))
    return 1 <= low <= int(found.group(2) or low) <= 65535


def _hf_repo(value: str) -> bool:
    """``org/name`` as huggingface_hub's validate_repo_id takes it (utils/_validators.py:
    each part 1-96 of letters, digits and _ . -, not starting or ending with - or ., no
    ``--`` or ``..``), with the namespace required: ``org/..`` names no repository and
    ``--`` is the hub cache's separator (``models--org--name``)."""
    part = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
    return (
        re.fullmatch(rf"{part}/{part}", value) is not None
        and "--" not in value
        and ".." not in value
    )


def _power_of_two(value: str) -> bool:
    """A positive power of two written in digits (an int's text): 1, 2, 4 ... 1048576."""
    return (
        re.fullmatch(r"[0-9]+", value) is not None
        and int(value) > 0
        and int(value) & (int(value) - 1) == 0
    )


def _ifname(value: str) -> bool:
    """A Linux interface name (the kernel's dev_valid_name: 1-15 bytes, not . or ..,
    no '/', ':' or whitespace) of the characters netplan and nft take unquoted."""
    return bool(re.fullmatch(r"[A-Za-z0-9_.@-]{1,15}", value)) and value not in (".", "..")


def _regex(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda value: compiled.fullmatch(value) is not None


def _ipv4_ok(value: str) -> bool:
    return _ipv4(value) is not None and value == value.strip()


def _network_ok(value: str) -> bool:
    try:
        ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        return False
    return value == value.strip()


_IMAGE_NAME = r"[a-z0-9]+(?:[._-][a-z0-9]+)*"
_URL_REST = r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+=:@/-]*)?"  # host, port, path
FORMATS: dict[str, tuple[Callable[[str], bool], str]] = {
    "word": (_regex(r"[A-Za-z0-9_.,:/=@+-]+"), "one word (letters, digits and _ . , : / = @ + -)"),
    "text": (
        _regex(r"[A-Za-z0-9_.,:/=@+ ()-]*"),
        "plain text (letters, digits, blanks and _ . , : / = @ + ( ) -)",
    ),
    "env_name": (_regex(r"[A-Za-z_][A-Za-z0-9_]*"), "an environment variable name"),
    "env_value": (
        _regex(r"[A-Za-z0-9_.,:/=@^+%-]*"),
        "an environment value (no blanks, quotes, backslash, $ or #)",
    ),
    "abs_path": (
        _abs_path,
        "an absolute path without .. (letters, digits and _ . , + @ % = : / -)",
    ),
    "controller_path": (_controller_path, "an absolute path or one from ~, without .."),
    "unit_path": (
        _unit_path,
        "an absolute path without .. (letters, digits and _ . + @ = / -; "
        "no : or %, which docker --volume and systemd read)",
    ),
    "ifname": (_ifname, "a Linux interface name (1-15 of letters, digits and _ . @ -)"),
    "ipv4": (_ipv4_ok, "an IPv4 address"),
    "ipv4_network": (_network_ok, "an IPv4 address or network (a.b.c.d/n)"),
    "hf_repo": (_hf_repo, "a Hugging Face repository id (org/name)"),
    "git_sha": (_regex(r"[0-9a-f]{40}"), "a full commit hash (40 hex digits)"),
    "version": (_regex(r"[0-9]+(?:\.[0-9]+)*"), "a version number (digits and dots)"),
    # PEP 440's normalized public versions (pip's ==): 0.5.17, 0.5.12.post1, 1.0rc2.
    "pip_version": (
        _regex(
            r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?"
            r"(?:\.dev[0-9]+)?"
        ),
        "a release version as pip writes it (0.5.17, 0.5.12.post1, 1.0rc2)",
    ),
    "package": (_regex(r"[a-z0-9][a-z0-9.+-]+"), "a Debian package name"),
    "package_pattern": (_regex(r"[a-z0-9*?][a-z0-9.+*?-]+"), "a Debian package name or glob (* ?)"),
    "user_name": (
        lambda v: USER_NAME.fullmatch(v) is not None,
        "a user name (letters, digits, . _ -, at most 32)",
    ),
    "group_name": (
        lambda v: _GROUP_NAME.fullmatch(v) is not None,
        "a name (letters, digits, . _ -, at most 63)",
    ),
    "host_or_ipv4": (
        lambda v: HOST_NAME.fullmatch(v) is not None,
        "a host name or an IPv4 address",
    ),
    "https_url": (_regex(rf"https://{_URL_REST}"), "an https:// URL without query or fragment"),
    "http_url": (
        _regex(rf"https?://{_URL_REST}"),
        "an http:// or https:// URL without query or fragment",
    ),
    "image_ref": (
        _regex(
            rf"{_IMAGE_NAME}(?:\.{_IMAGE_NAME})*(?::[0-9]{{1,5}})?"
            rf"(?:/{_IMAGE_NAME})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
        ),
        "a container image reference (registry/name:tag)",
    ),
    "digest": (_regex(r"sha256:[0-9a-f]{64}"), "an image digest (sha256:64 hex digits)"),
    # The sglang role's own rule for the API key (its preflight, and the launcher's file).
    "api_key": (
        _regex(r"[A-Za-z0-9._~+/=:-]{16,4096}"),
        "a key of 16 or more letters, digits and . _ ~ + / = : -",
    ),
    # A Hugging Face access token (hf_ and 34 letters and digits today; older
    # organisation tokens are api_org_...): one word, sent on the relay's stdin.
    "hf_token": (_regex(r"[A-Za-z0-9_-]{8,512}"), "a token (8 or more letters, digits, _ and -)"),
    "hostport_list": (_port_range, "a port or a port range a-b within 1-65535"),
    # nccl, nvidia_driver and validate (their meta/constraints.yml say where each goes):
    # a package-name part that is digits only (nvidia-driver-580-open) or digits and
    # dashes (cuda-toolkit-13-0, where 13.0 names no package), a git release tag (the
    # nccl role reads x.y.z of it for libnccl.so.x.y.z), an RDMA device of NCCL_IB_HCA
    # (the nccl role's own preflight rule), the two raw settings that take "auto", and
    # the nccl-tests sizes the sweep doubles between.
    "digits": (_regex(r"[0-9]+"), "digits only (such as 580)"),
    "dashed_version": (
        _regex(r"[0-9]+(?:-[0-9]+)*"),
        "a version with dashes as package names carry it (such as 13-0)",
    ),
    "release_tag": (
        _regex(r"v?[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9]+)?"),
        "a release tag (such as v2.28.9-1 or v2.18.3)",
    ),
    "ibdev": (
        _regex(r"[A-Za-z0-9_]+(?::[0-9]+)?"),
        "an RDMA device name, optionally with :port (such as rocep1s0f1 or mlx5_0:1)",
    ),
    "auto_or_int": (_regex(r"auto|[0-9]+"), "auto or a non-negative integer"),
    # The relay's --streams (sparkctl_model_relay.MAX_STREAMS is 32).
    "stream_count": (_regex(r"auto|[1-9]|[12][0-9]|3[0-2]"), "auto or a whole number 1-32"),
    "auto_bool": (_regex(r"(?i:auto|true|false|yes|no)"), "one of auto, true, false"),
    "power_of_two": (_power_of_two, "a power of two (such as 1048576 = 1 MiB)"),
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scalar_problem(value: Any, constraint: Mapping[str, Any]) -> str | None:
    if value == "" and constraint.get("allow_empty"):
        return None
    low, high, above = constraint.get("min"), constraint.get("max"), constraint.get("above")
    if _number(value):
        if above is not None and not value > above:
            return f"{value!r} must be above {above}"
        if (low is not None and value < low) or (high is not None and value > high):
            span = f"{low if low is not None else '-inf'}..{high if high is not None else 'inf'}"
            return f"{value!r} is outside {span}"
    fmt = constraint.get("format")
    if fmt is not None and isinstance(value, str | int) and not isinstance(value, bool):
        ok, words = FORMATS[str(fmt)]
        if not ok(str(value)):
            return f"{value!r} is not {words}"
    limit = constraint.get("max_length")
    if (
        limit is not None
        and isinstance(value, str | list | tuple | Mapping)
        and len(value) > int(limit)
    ):
        unit = "characters" if isinstance(value, str) else "items"
        return f"{len(value)} {unit}: at most {limit}"
    return None


def constraint_problem(value: Any, constraint: Mapping[str, Any]) -> str | None:
    """What ``value`` breaks of ``constraint`` (see FORMATS and load_constraints), or None.
    Values of a type the constraint does not speak of (a raw "auto") pass. A ``secret``
    constraint (a format, no more) says what the value should be, never what it is."""
    if value is None:
        return None
    if constraint.get("secret"):
        if value == "" and constraint.get("allow_empty"):
            return None
        ok, words = FORMATS[str(constraint["format"])]
        return (
            None
            if isinstance(value, str) and ok(value)
            else f"the value (not shown) is not {words}"
        )
    wrong = _scalar_problem(value, constraint)
    items, keys, values = (constraint.get(k) for k in ("items", "keys", "values"))
    if wrong is None and items and isinstance(value, list | tuple):
        wrong = next(
            (
                f"item {i}: {w}"
                for i, item in enumerate(value)
                if (w := constraint_problem(item, items)) is not None
            ),
            None,
        )
    if wrong is None and isinstance(value, Mapping):
        for key, item in value.items():
            if keys and (w := constraint_problem(str(key), keys)) is not None:
                return f"key {w}"
            if values and (w := constraint_problem(item, values)) is not None:
                return f"{key}: {w}"
    return wrong


def _type_ok(value: Any, kind: str) -> bool:
    """Strict type check: no silent conversion of "yes" to True or "4" to 4.

    Ansible's own argument spec validation converts: ``type: str`` accepts a list
    (as its string form) and ``type: int`` accepts "4". These rules do not.
    """
    checks: dict[str, tuple[type, ...]] = {
        "str": (str,),
        "path": (str,),
        "bool": (bool,),
        "int": (int,),
        "float": (int, float),
        "list": (list, tuple),
        "dict": (dict, Mapping),
        "raw": (object,),
    }
    if kind in {"int", "float"} and isinstance(value, bool):
        return False
    return isinstance(value, checks.get(kind, (object,)))


def _type_name(value: Any) -> str:
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


_KIND_WORDS = {
    "str": "a string",
    "path": "a path",
    "bool": "a boolean (true/false, unquoted)",
    "int": "an integer",
    "float": "a number",
    "list": "a list",
    "dict": "a mapping",
}
_ELEMENT_WORDS = {
    "str": "strings",
    "path": "paths",
    "bool": "booleans",
    "int": "integers",
    "float": "numbers",
    "list": "lists",
    "dict": "mappings",
}


Specs = Mapping[str, tuple[str, dict[str, Any]]]


def _spec_problem(name: str, value: Any, role: str, spec: Mapping[str, Any]) -> str | None:
    """What is wrong with ``value`` for the option ``spec`` of ``role``, or None."""
    kind = str(spec.get("type", "str"))
    if not _type_ok(value, kind):
        return f"{value!r} is {_type_name(value)}, but {role} needs {_KIND_WORDS.get(kind, kind)}"
    elements = spec.get("elements")
    if kind == "list" and elements:
        for index, item in enumerate(value):
            if item is not None and not _type_ok(item, str(elements)):
                return (
                    f"item {index} ({item!r}) is {_type_name(item)}, but {role} needs a list "
                    f"of {_ELEMENT_WORDS.get(str(elements), str(elements))}"
                )
    choices = spec.get("choices")
    if choices and kind != "list" and not _in(value, choices):
        return f"{name} must be one of: {', '.join(map(str, choices))}, got: {value!r}"
    return None


def _in(value: Any, choices: Iterable[Any]) -> bool:
    try:
        return value in choices
    except TypeError:  # unhashable value against a set of choices
        return False


def _fact_names(hv: Mapping[str, Any]) -> set[str]:
    """Names that come from gathered or cached facts (not from the inventory)."""
    facts = hv.get("ansible_facts")
    if not isinstance(facts, Mapping):
        return set()
    return {"ansible_facts", *map(str, facts), *(f"ansible_{name}" for name in facts)}


def check_types(
    hostvars: Mapping[str, Mapping[str, Any]],
    specs: Specs,
    user_vars: Mapping[str, Iterable[str]] | None = None,
) -> list[Problem]:
    """Types and choices of role variables; unknown names close to a known one.

    Types come from the roles' ``meta/argument_specs.yml`` (:func:`load_specs`), checked
    strictly (:func:`_type_ok`). ``user_vars`` (host -> names set by the inventory) limits
    the checks to what the user wrote; without it every variable is checked except facts.
    """
    problems: list[Problem] = []
    seen: set[tuple[str | None, str]] = set()
    prefixes = tuple(sorted({f"{role}_" for role, _ in specs.values()}))
    known = set(specs)
    for host, hv in hostvars.items():
        names = set(user_vars[host]) if user_vars is not None and host in user_vars else set(hv)
        facts = _fact_names(hv)
        for name in sorted(names - facts):
            if name not in hv or name.startswith(_ANSIBLE_PREFIXES):
                continue
            value = hv[name]
            key: tuple[str | None, str] = (
                (None, name) if _same_everywhere(hostvars, name) else (host, name)
            )
            if key in seen:
                continue
            if name in specs:
                role, spec = specs[name]
                wrong = (
                    None
                    if value is None
                    else (_spec_problem(name, value, role, spec) or _value_problem(name, value))
                )
                hint = None
                if wrong is None and value is not None and spec.get(CONSTRAINT):
                    wrong = constraint_problem(value, spec[CONSTRAINT])
                    hint = spec[CONSTRAINT].get("why") or (
                        f"roles/{role}/meta/constraints.yml says what {name} may be"
                    )
                if wrong:
                    seen.add(key)
                    problems.append(Problem(key[0], name, wrong, hint=hint))
                continue
            close = sorted(
                k for k in known if k.startswith(f"{name}_")
            ) or difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            if close or name.startswith(prefixes):
                seen.add(key)
                problems.append(
                    Problem(
                        key[0],
                        name,
                        "unknown variable",
                        hint=f"did you mean {close[0]}?"
                        if close
                        else "see the role's meta/argument_specs.yml",
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


def _same_everywhere(hostvars: Mapping[str, Mapping[str, Any]], name: str) -> bool:
    values = [hv[name] for hv in hostvars.values() if name in hv]
    return len(values) == len(hostvars) and all(v == values[0] for v in values)


# ----------------------------------------------------------------- topology
def _ipv4(value: Any) -> ipaddress.IPv4Address | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.IPv4Address(value.strip())
    except ValueError:
        return None


def _net(value: Any) -> ipaddress.IPv4Network | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.IPv4Network(value.strip(), strict=True)
    except ValueError:
        return None


def check_topology(
    groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """Cross-host rules: ranks, addresses, subnets, switch ports, TP size, passwords."""
    sparks = list(groups.get(SPARKS, []))
    switches = list(groups.get(SWITCHES, []))
    if not sparks:
        return [
            Problem(
                None,
                None,
                f"no hosts in group [{SPARKS}]",
                hint="list the Sparks under a [sparks] section",
            )
        ]
    problems: list[Problem] = []
    if len(switches) > 1:
        problems.append(
            Problem(
                None,
                None,
                f"[{SWITCHES}] lists {len(switches)} hosts "
                f"({', '.join(switches)}); sparkctl drives one fabric switch",
            )
        )
    first = hostvars[sparks[0]]
    hosts = list(dict.fromkeys(sparks + switches))  # a host in both groups is one host
    problems += _check_passwords(hosts, hostvars)
    problems += _check_connection(hosts, hostvars)
    problems += _check_host_keys(hosts, hostvars)
    mgmt, found = _check_mgmt(hosts, hostvars)
    problems += found
    nets, found = _check_subnets(first)
    problems += found
    for addr, host in mgmt.items():
        for twin, net in nets.items():
            if addr in net:
                problems.append(
                    Problem(
                        host,
                        "ansible_host",
                        f"management address {addr} lies "
                        f"in the fabric subnet of twin {twin} ({net})",
                    )
                )
    problems += _check_ranks(sparks, hostvars)
    problems += _check_fabric_ips(sparks, hostvars, nets)
    problems += _check_switch(sparks, switches, hostvars)
    problems += _check_tp(sparks, hostvars)
    problems += _check_api_sources(sparks, hostvars)
    return problems


def _network(value: Any) -> bool:
    """An IPv4 address or network, host bits allowed (nft takes 10.77.0.5/24 as the /24)."""
    try:
        ipaddress.IPv4Network(str(value).strip(), strict=False)
    except ValueError:
        return False
    return isinstance(value, str)


def _check_api_sources(
    sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """sglang_api_allowed_cidrs, where the inventory sets it: IPv4 networks, never empty.

    The API is never open by omission (the sglang role's firewall refuses [] too, but only
    once provision has reached it): ``["0.0.0.0/0"]`` opens it on purpose."""
    problems: list[Problem] = []
    var = "sglang_api_allowed_cidrs"
    hint = (
        'list the networks the API may be reached from, or ["0.0.0.0/0"] for every '
        "address; leave it unset for the Sparks' management networks"
    )
    for host in sparks:
        if var not in hostvars[host]:
            continue
        value = plain(hostvars[host][var])
        if isinstance(value, str) and "{{" in value:
            continue  # a template, left to the role
        if not isinstance(value, list) or not value:
            what = (
                "an empty list: the API would answer from anywhere"
                if value == []
                else f"{value!r}, not a list of IPv4 networks"
            )
            problems.append(Problem(host, var, f"is {what}", hint=hint))
            continue
        bad = [v for v in value if not _network(v)]
        if bad:
            problems.append(
                Problem(host, var, f"{bad!r} are not IPv4 networks or addresses", hint=hint)
            )
    if problems and _same_everywhere({h: hostvars[h] for h in sparks}, var):
        return [replace(problems[0], host=None)]
    return problems


def _check_passwords(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    return [
        Problem(
            host,
            var,
            "passwords are not accepted in inventories",
            hint="use SSH key authentication (ansible_ssh_private_key_file) "
            "and sudo without a stored password",
        )
        for host in hosts
        for var in PASSWORD_VARS
        if var in hostvars[host]
    ]


def _boolean(value: Any) -> bool | None:
    """``value`` as Ansible reads a boolean setting (True, "yes", 1, ...); None if it is not one."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    return None


def _host_key_weakness(var: str, value: Any) -> str | None:
    """How ``var: value`` would weaken host key checking, or None if it does not."""
    if var in HOST_KEY_CHECKING_VARS and _boolean(value) is not True:
        return f"{value!r} would turn host key checking off"
    if var in HOST_KEY_AUTO_ADD_VARS and _boolean(value) is not False:
        return f"{value!r} would accept and record host keys it does not know"
    if var in SSH_ARGS_VARS:
        text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        try:
            ssh_options(text)
        except ValueError as exc:
            return str(exc)
    return None


# --------------------------------------------------------------- ssh options
# Only -o options of these names pass from an inventory to ssh, each with a value of a
# known shape (one word: no whitespace but where a list of files is meant, no quotes,
# no control characters, no shell or ssh_config syntax). Anything else could run a
# command on the controller (ProxyCommand, KnownHostsCommand, LocalCommand, Match exec,
# an Include), or let another key or file vouch for a host; sparkctl refuses it.
_WORD = r"[A-Za-z0-9_.,+@%~/=:-]+"
_YES_NO = r"(?i:yes|no)"
_NUMBER = r"[0-9]{1,6}"
_HOSTPORT = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?"
_ALGORITHMS = r"[+^-]?[A-Za-z0-9@._-]+(?:,[A-Za-z0-9@._-]+)*"
SSH_OPTIONS: dict[str, str] = {
    "addressfamily": r"(?i:any|inet|inet6)",
    "batchmode": r"(?i:yes)",
    "checkhostip": _YES_NO,
    "ciphers": _ALGORITHMS,
    "compression": _YES_NO,
    "connectionattempts": _NUMBER,
    "connecttimeout": _NUMBER,
    "controlmaster": r"(?i:yes|no|auto|ask|autoask)",
    "controlpath": _WORD,
    "controlpersist": r"(?i:yes|no|[0-9]{1,6}[smhdw]?)",
    "forwardagent": r"(?i:no)",
    "hashknownhosts": _YES_NO,
    "hostkeyalgorithms": _ALGORITHMS,
    "identitiesonly": _YES_NO,
    "identityfile": _WORD,
    "ipqos": r"[A-Za-z0-9]+(?: [A-Za-z0-9]+)?",
    "kexalgorithms": _ALGORITHMS,
    "loglevel": r"(?i:quiet|fatal|error|info|verbose|debug[123]?)",
    "macs": _ALGORITHMS,
    "passwordauthentication": r"(?i:no)",
    "port": r"[0-9]{1,5}",
    "preferredauthentications": r"[a-z-]+(?:,[a-z-]+)*",
    "proxyjump": rf"(?i:none)|{_HOSTPORT}(?:,{_HOSTPORT})*",
    "pubkeyacceptedalgorithms": _ALGORITHMS,
    "pubkeyacceptedkeytypes": _ALGORITHMS,
    "pubkeyauthentication": r"(?i:yes)",
    "serveralivecountmax": _NUMBER,
    "serveraliveinterval": _NUMBER,
    "stricthostkeychecking": r"(?i:yes)",
    "tcpkeepalive": _YES_NO,
    "user": r"[A-Za-z_][A-Za-z0-9_.-]{0,31}",
    "userknownhostsfile": rf"{_WORD}(?: {_WORD})*",
}
# Why an option of note is refused (any other unknown one: "not an option sparkctl
# passes on").
_REFUSED_SSH_OPTIONS = {
    "proxycommand": "runs a command on the controller (use ProxyJump)",
    "localcommand": "runs a command on the controller",
    "permitlocalcommand": "lets LocalCommand run a command on the controller",
    "remotecommand": "replaces the command sparkctl runs on the node",
    "knownhostscommand": "runs a command on the controller and lets it vouch for host keys",
    "match": "its exec criterion runs a command on the controller",
    "include": "reads further ssh configuration from another file",
    "hostkeyalias": "lets another host's recorded key stand for this host",
    "globalknownhostsfile": "lets another file vouch for host keys",
    "verifyhostkeydns": "lets DNS vouch for host keys",
    "updatehostkeys": "lets a host replace its own recorded keys",
    "stricthostkeychecking": "would accept host keys it does not know",
    "userknownhostsfile": "would keep no known host key to check against",
}


# The flags of ssh's command line that are options in another spelling.
_SSH_FLAGS = {
    "-C": ("Compression", "yes"),
    "-4": ("AddressFamily", "inet"),
    "-6": ("AddressFamily", "inet6"),
}


def ssh_options(text: str) -> list[tuple[str, str]]:
    """The ``-o Key=Value`` pairs of an ssh argument string (``-o K=V``, ``-oK=V``,
    ``-o 'K V'``), each checked against SSH_OPTIONS. ValueError says what is wrong."""
    import shlex  # noqa: PLC0415 - only here

    try:
        words = shlex.split(text or "")
    except ValueError as exc:
        raise ValueError(f"{exc} in {text!r}") from None
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in _SSH_FLAGS:  # Ansible's own default ssh_args start with -C
            out.append(_SSH_FLAGS[word])
            i += 1
            continue
        if word == "-o" and i + 1 < len(words):
            spec, i = words[i + 1], i + 2
        elif word.startswith("-o") and len(word) > 2:
            spec, i = word[2:], i + 1
        else:
            raise ValueError(
                f"sparkctl passes only -o options (and -C, -4, -6) to ssh, not {word!r}"
            )
        if re.search(r"[\x00-\x1f\x7f]", spec):
            raise ValueError(f"{spec!r}: control characters (a newline, a tab) in an ssh option")
        parts = re.split(r"\s*=\s*|\s+", spec.strip(), maxsplit=1)
        key, value = parts[0], " ".join(parts[1].split()) if len(parts) > 1 else ""
        pattern = SSH_OPTIONS.get(key.lower())
        shown = " ".join(spec.split())
        if (
            pattern is not None
            and value
            and re.fullmatch(pattern, value)
            and not (
                key.lower() == "userknownhostsfile"
                and value.split()[0].lower() in ("none", "/dev/null")
            )
        ):
            out.append((key, value))
            continue
        why = _REFUSED_SSH_OPTIONS.get(key.lower())
        if why is None and pattern is not None:
            why = "is not a value sparkctl passes on for this option"
        if why is None:
            why = (
                "is not an ssh option sparkctl passes on (one of: "
                + ", ".join(sorted(SSH_OPTIONS))
                + ")"
            )
        raise ValueError(f"{shown!r} {why}")
    return out


KEY_FILE_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")


def port_number(value: Any) -> int | None:
    """A TCP port (1-65535) as an int or a string of digits; None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value):
        value = int(value)
    return value if isinstance(value, int) and 1 <= value <= 65535 else None


def _check_connection(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Host names, users, ports and key files: one word each, of the shape ssh expects."""
    problems: list[Problem] = []
    for host in hosts:
        hv = hostvars[host]
        if not HOST_NAME.fullmatch(host):
            problems.append(
                Problem(
                    host,
                    None,
                    f"host name {host!r} is not a host name "
                    "(letters, digits, '.', '_', '-'; starting with a letter or "
                    "digit; at most 63)",
                    hint="name the host like spark1 and give its address in ansible_host",
                )
            )
        user = hv.get("ansible_user")
        if user is not None and not (isinstance(user, str) and USER_NAME.fullmatch(user)):
            problems.append(
                Problem(
                    host,
                    "ansible_user",
                    f"{user!r} is not a user name (letters, digits, '.', '_', '-', at most 32)",
                )
            )
        if "ansible_port" in hv and port_number(hv["ansible_port"]) is None:
            problems.append(
                Problem(host, "ansible_port", f"{hv['ansible_port']!r} is not a TCP port (1-65535)")
            )
        for var in KEY_FILE_VARS:
            key = hv.get(var)
            if key is not None and not (isinstance(key, str) and KEY_FILE.fullmatch(key)):
                problems.append(
                    Problem(
                        host,
                        var,
                        f"{key!r} is not a key file path sparkctl "
                        "passes to ssh (no whitespace, quotes or control "
                        "characters)",
                    )
                )
    everywhere: list[Problem] = []
    for problem in problems:  # a group_vars value is reported once, for all hosts
        if (
            problem.var
            and _same_everywhere({h: hostvars[h] for h in hosts}, problem.var)
            and all(problem.var in hostvars[h] for h in hosts)
        ):
            if not any(p.var == problem.var for p in everywhere):
                everywhere.append(replace(problem, host=None))
        else:
            everywhere.append(problem)
    return everywhere


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
        return False  # passwords are refused whatever their form (_check_passwords)
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


def _check_host_keys(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """No inventory variable may weaken host key checking.

    A setting every host shares (group_vars) is reported once, for all hosts.
    """
    problems: list[Problem] = []
    these = {host: hostvars[host] for host in hosts}
    for var in (*HOST_KEY_CHECKING_VARS, *HOST_KEY_AUTO_ADD_VARS, *SSH_ARGS_VARS):
        weak = [
            (host, text)
            for host in hosts
            if var in these[host]
            and (text := _host_key_weakness(var, these[host][var])) is not None
        ]
        everywhere = len(weak) == len(hosts) and _same_everywhere(these, var)
        for host, text in weak[:1] if everywhere else weak:
            problems.append(
                Problem(
                    None if everywhere else host,
                    var,
                    f"{text}; host key checking stays on",
                    hint=TRUST_HINT,
                )
            )
    return problems


def _check_mgmt(
    hosts: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[ipaddress.IPv4Address, str], list[Problem]]:
    problems: list[Problem] = []
    mgmt: dict[ipaddress.IPv4Address, str] = {}
    for host in hosts:
        raw = hostvars[host].get("ansible_host", host)
        addr = _ipv4(raw)
        if addr is None:
            if "ansible_host" in hostvars[host]:
                problems.append(Problem(host, "ansible_host", f"{raw!r} is not an IPv4 address"))
            continue
        if addr in mgmt:
            problems.append(
                Problem(host, "ansible_host", f"{addr} is also the address of {mgmt[addr]}")
            )
        mgmt.setdefault(addr, host)
    return mgmt, problems


def _check_subnets(
    first: Mapping[str, Any],
) -> tuple[dict[str, ipaddress.IPv4Network], list[Problem]]:
    problems: list[Problem] = []
    nets: dict[str, ipaddress.IPv4Network] = {}
    for twin in TWINS:
        var = f"fabric_{twin}_subnet"
        raw = first.get(var)
        net = _net(raw)
        if raw is None:
            problems.append(
                Problem(
                    None,
                    var,
                    f"missing (the IPv4 subnet of twin {twin}, in CIDR form like 192.168.100.0/24)",
                )
            )
        elif net is None:
            problems.append(
                Problem(
                    None,
                    var,
                    f"{raw!r} is not an IPv4 network in CIDR form "
                    "(like 192.168.100.0/24, host bits zero)",
                )
            )
        else:
            nets[twin] = net
    if len(nets) == 2 and nets["a"].overlaps(nets["b"]):
        problems.append(
            Problem(
                None,
                "fabric_b_subnet",
                f"twins a and b share a subnet ({nets['a']} / {nets['b']}); "
                "each twin needs its own",
                hint="one subnet for both twins causes NCCL communication "
                "failures (NVIDIA multi-sparks-through-switch)",
            )
        )
    return nets, problems


def _check_ranks(sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    ranks: dict[int, str] = {}
    for host in sparks:
        rank = hostvars[host].get("node_rank")
        if rank is None:
            problems.append(Problem(host, "node_rank", "missing (the Spark's TP rank, 0..N-1)"))
        elif isinstance(rank, bool) or not isinstance(rank, int):
            problems.append(Problem(host, "node_rank", f"{rank!r} is not an integer"))
        elif rank in ranks:
            problems.append(Problem(host, "node_rank", f"rank {rank} is also {ranks[rank]}'s"))
        else:
            ranks[rank] = host
    if ranks and len(ranks) == len(sparks) and sorted(ranks) != list(range(len(sparks))):
        problems.append(
            Problem(
                None,
                "node_rank",
                f"ranks must be 0..{len(sparks) - 1}, one per Spark; got {sorted(ranks)}",
            )
        )
    return problems


def _check_fabric_ips(
    sparks: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    nets: Mapping[str, ipaddress.IPv4Network],
) -> list[Problem]:
    problems: list[Problem] = []
    used: dict[ipaddress.IPv4Address, str] = {}
    for host in sparks:
        hv = hostvars[host]
        for twin in TWINS:
            var = f"fabric_{twin}_ip"
            if var not in hv:
                problems.append(Problem(host, var, f"missing (address on twin {twin})"))
                continue
            addr = _ipv4(hv[var])
            if addr is None:
                problems.append(Problem(host, var, f"{hv[var]!r} is not an IPv4 address"))
                continue
            net = nets.get(twin)
            if net is not None and (
                addr not in net or addr in {net.network_address, net.broadcast_address}
            ):
                problems.append(
                    Problem(
                        host, var, f"{addr} is not a host address of fabric_{twin}_subnet {net}"
                    )
                )
            if addr in used:
                problems.append(Problem(host, var, f"{addr} is also used by {used[addr]}"))
            used.setdefault(addr, f"{host} ({var})")
    return problems


def _check_switch(
    sparks: list[str], switches: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    problems: list[Problem] = []
    for sw in switches:
        os_name = hostvars[sw].get("switch_os")
        if os_name is None:
            problems.append(
                Problem(sw, "switch_os", f"missing (the switch's OS: {', '.join(SWITCH_OSES)})")
            )
        elif not _in(os_name, SWITCH_OSES):
            close = difflib.get_close_matches(str(os_name).lower(), SWITCH_OSES, n=1)
            problems.append(
                Problem(
                    sw,
                    "switch_os",
                    f"{os_name!r} is not a supported switch OS ({', '.join(SWITCH_OSES)})",
                    hint=f"did you mean {close[0]}?" if close else None,
                )
            )
    ports = hostvars[sparks[0]].get("switch_ports", {})
    if not isinstance(ports, Mapping):
        return [
            *problems,
            Problem(
                None,
                "switch_ports",
                "must be a mapping of port name -> {node: NAME, twin: a|b|both}",
            ),
        ]
    cabled: dict[tuple[str, str], str] = {}
    for port, spec in ports.items():
        var = f"switch_ports.{port}"
        if not isinstance(spec, Mapping) or "node" not in spec:
            problems.append(Problem(None, var, "needs `node:` (and `twin: a|b|both`)"))
            continue
        node, twin = spec.get("node"), spec.get("twin", "both")
        if node not in sparks:
            close = difflib.get_close_matches(str(node), sparks, n=1)
            problems.append(
                Problem(
                    None,
                    f"{var}.node",
                    f"{node!r} is not a host in [{SPARKS}]",
                    hint=f"did you mean {close[0]}?" if close else None,
                )
            )
            continue
        if twin not in (*TWINS, "both"):
            problems.append(Problem(None, f"{var}.twin", f"{twin!r} is not a, b or both"))
            continue
        for t in TWINS if twin == "both" else (twin,):
            if (node, t) in cabled:
                problems.append(
                    Problem(None, var, f"{node} twin {t} is already cabled to {cabled[(node, t)]}")
                )
            cabled[(node, t)] = str(port)
    return problems


def sglang_groups(
    sparks: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[str]]:
    """The TP groups (``sglang_group``, default ``main``): name -> hosts in node_rank order.

    Groups are ordered by their head (the member with the lowest node_rank). A
    value that is not a string is grouped by its text (its type is reported by
    :func:`check_types`); hosts whose node_rank is not an integer sort last.
    """

    def order(host: str) -> tuple[int, int, str]:
        rank = hostvars[host].get("node_rank")
        return (0, rank, host) if _is_int(rank) else (1, 0, host)

    groups: dict[str, list[str]] = {}
    for host in sorted(sparks, key=order):
        groups.setdefault(str(hostvars[host].get("sglang_group", DEFAULT_SGLANG_GROUP)), []).append(
            host
        )
    return groups


def _check_group_names(
    sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    bad = [
        h
        for h in sparks
        if isinstance(hostvars[h].get("sglang_group"), str)
        and not _GROUP_NAME.match(hostvars[h]["sglang_group"])
    ]
    hint = "Sparks with the same sglang_group serve one copy of the model together"

    def problem(host: str | None, value: Any) -> Problem:
        return Problem(
            host,
            "sglang_group",
            f"{value!r} is not a simple word (letters, digits, "
            "_ . -, starting with a letter or digit, at most 63 characters)",
            hint=hint,
        )

    if (
        bad
        and len(bad) == len(sparks)
        and _same_everywhere({h: hostvars[h] for h in sparks}, "sglang_group")
    ):
        return [problem(None, hostvars[bad[0]]["sglang_group"])]
    return [problem(h, hostvars[h]["sglang_group"]) for h in bad]


def _check_tp(sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Per TP group: its nodes = sglang_nnodes, and TP = its nodes x GPUs per node.

    ``sglang_tp_size`` and ``sglang_nnodes`` are ``type: raw`` in the sglang role's
    argument spec (their defaults are templates), so their types are checked here.
    A setting every Spark shares, in a cluster of one group (the default), is
    reported once for the cluster; otherwise each Spark is named with its group.
    """
    spark_vars = {h: hostvars[h] for h in sparks}
    problems = _check_group_names(sparks, hostvars)
    for var in ("sglang_nnodes", "sglang_tp_size"):
        wrong = [
            h
            for h in sparks
            if hostvars[h].get(var) is not None
            and (not _is_int(hostvars[h][var]) or hostvars[h][var] < 1)
        ]
        everywhere = len(wrong) == len(sparks) and _same_everywhere(spark_vars, var)
        for host in wrong[:1] if everywhere else wrong:
            value = hostvars[host][var]
            problems.append(
                Problem(
                    None if everywhere else host,
                    var,
                    f"{value!r} is {_type_name(value)}, but sglang needs a positive integer",
                )
            )
    groups = sglang_groups(sparks, hostvars)
    if len(groups) == 1:
        cluster = _check_tp_cluster(sparks, spark_vars)
        if cluster is not None:
            return problems + cluster
    for name, members in groups.items():
        problems += _check_tp_group(name, members, hostvars)
    return problems


def _check_tp_cluster(
    sparks: list[str],
    spark_vars: Mapping[str, Mapping[str, Any]],
) -> list[Problem] | None:
    """One group of every Spark with the same settings everywhere: cluster-wide problems.

    None when a setting differs between Sparks (then each Spark is judged).
    """
    if not all(
        _same_everywhere(spark_vars, var) or all(var not in hv for hv in spark_vars.values())
        for var in ("sglang_gpus_per_node", "sglang_nnodes", "sglang_tp_size")
    ):
        return None
    first = spark_vars[sparks[0]]
    problems: list[Problem] = []
    gpus = first.get("sglang_gpus_per_node", 1)
    nnodes = first.get("sglang_nnodes")
    if _is_int(nnodes) and nnodes >= 1 and nnodes != len(sparks):
        problems.append(
            Problem(
                None,
                "sglang_nnodes",
                f"{nnodes} nodes does not match the {len(sparks)} Sparks in "
                f"[{SPARKS}] (one SGLang process per Spark)",
                hint=f"set sglang_nnodes: {len(sparks)} or change [{SPARKS}]",
            )
        )
    tp = first.get("sglang_tp_size")
    if _is_int(tp) and tp >= 1 and _is_int(gpus) and tp != len(sparks) * gpus:
        problems.append(
            Problem(
                None,
                "sglang_tp_size",
                f"TP {tp} does not match {len(sparks)} Sparks x {gpus} GPU(s) per node",
                hint=f"set sglang_tp_size: {len(sparks) * gpus} or change [{SPARKS}]",
            )
        )
    return problems


def _check_tp_group(
    name: str, members: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """Each member's sglang_nnodes and sglang_tp_size against its group's size."""
    n = len(members)
    sparks = f"{n} Spark{'s' if n != 1 else ''}"
    group = f"SGLang group {name!r} ({', '.join(members)})"
    unset = "or leave it unset: it defaults to the group's"
    problems: list[Problem] = []
    for host in members:
        hv = hostvars[host]
        nnodes, tp, gpus = (
            hv.get("sglang_nnodes"),
            hv.get("sglang_tp_size"),
            hv.get("sglang_gpus_per_node", 1),
        )
        if _is_int(nnodes) and nnodes >= 1 and nnodes != n:
            problems.append(
                Problem(
                    host,
                    "sglang_nnodes",
                    f"{nnodes} nodes does not match the {sparks} of {group} "
                    "(one SGLang process per Spark)",
                    hint=f"set sglang_nnodes: {n} for this group, {unset} size",
                )
            )
        if not (_is_int(tp) and tp >= 1 and _is_int(gpus)) or tp == n * gpus:
            continue
        if tp % n:
            text = (
                f"TP {tp} is not a multiple of the {sparks} of {group} (--tp-size is the "
                "total degree; each node holds tp/nnodes GPUs)"
            )
        else:
            text = f"TP {tp} does not match the {sparks} of {group} x {gpus} GPU(s) per node"
        problems.append(
            Problem(
                host,
                "sglang_tp_size",
                text,
                hint=f"set sglang_tp_size: {n * gpus} for this group, {unset} "
                "size x sglang_gpus_per_node",
            )
        )
    return problems


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------- relations
# Rules between variables (each alone may be fine). A variable the inventory does not
# set has its role's default (the literal ones of roles/*/defaults/main.yml).
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
# takes an unambiguous prefix for a flag (--tp is --tp-size: sglang 0.5.17's parser,
# tests/contract/test_parser.py), so a prefix is refused too.
SGLANG_DERIVED_FLAGS = (
    "--tp-size",
    "--tensor-parallel-size",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--host",
    "--port",
    "--model-path",
    "--served-model-name",
    "--dist-timeout",
    "--ssl-certfile",
    "--ssl-keyfile",
)
SGLANG_SECRET_FLAGS = ("--api-key", "--admin-api-key")


def _flag_problem(item: Any) -> str | None:
    word = str(item).split("=", 1)[0]
    if not word.startswith("--") or len(word) < 4:
        return None
    for flag in SGLANG_SECRET_FLAGS:
        if flag.startswith(word):
            return (
                f"{word} would put a secret on the command line (the unit's argv is "
                "world-readable in /proc)"
            )
    for flag in SGLANG_DERIVED_FLAGS:
        if flag.startswith(word):
            return f"{word} sets {flag}, which sparkctl derives from the inventory"
    return None


def _relation_problems(host: str, v: Callable[[str], Any], switched: bool) -> list[Problem]:
    problems: list[Problem] = []
    mtu, switch_mtu = v("roce_fabric_mtu"), v("switch_mtu_value")
    if switched and _is_int(mtu) and _is_int(switch_mtu) and mtu > switch_mtu:
        problems.append(
            Problem(
                host,
                "roce_fabric_mtu",
                f"{mtu} is above the switch ports' "
                f"MTU {switch_mtu} (switch_mtu_value): larger frames are "
                "dropped without a word",
                hint="raise switch_mtu_value or lower roce_fabric_mtu",
            )
        )
    a, b = v("fabric_a_netdev"), v("fabric_b_netdev")
    if a is not None and a == b:
        problems.append(
            Problem(
                host,
                "fabric_b_netdev",
                f"{b!r} is also fabric_a_netdev: the two twins are two ports",
            )
        )
    ia, ib = v("roce_fabric_ibdev_a"), v("roce_fabric_ibdev_b")
    if ia is not None and ia == ib:
        problems.append(
            Problem(
                host,
                "roce_fabric_ibdev_b",
                f"{ib!r} is also roce_fabric_ibdev_a: each twin has its own RoCE device",
            )
        )
    api, dist = v("sglang_port"), v("sglang_dist_port")
    if _is_int(api) and _is_int(dist) and dist <= api <= dist + 15:
        problems.append(
            Problem(
                host,
                "sglang_port",
                f"{api} lies in the ranks' port range "
                f"{dist}-{dist + 15} (sglang_dist_port and the ports "
                "torch.distributed and NCCL take after it)",
            )
        )
    for var in ("sglang_extra_args",):
        for index, item in enumerate(v(var) or []):
            if (wrong := _flag_problem(item)) is not None:
                problems.append(
                    Problem(
                        host,
                        var,
                        f"item {index}: {wrong}",
                        hint="set the inventory variable instead; see docs/inventory.md",
                    )
                )
    cert, key = v("sglang_tls_certfile"), v("sglang_tls_keyfile")
    if bool(cert) != bool(key):
        given, other = (
            ("sglang_tls_certfile", "sglang_tls_keyfile")
            if cert
            else ("sglang_tls_keyfile", "sglang_tls_certfile")
        )
        problems.append(
            Problem(
                host,
                given,
                f"set without {other}: the two go together (TLS on the API) or neither is set",
            )
        )
    low, high = v("validate_nccl_min_bytes"), v("validate_nccl_max_bytes")
    if _is_int(low) and _is_int(high) and low > high:
        problems.append(
            Problem(
                host, "validate_nccl_min_bytes", f"{low} is above validate_nccl_max_bytes {high}"
            )
        )
    confirm, rollback = v("roce_fabric_confirm_seconds"), v("roce_fabric_rollback_seconds")
    if _is_int(confirm) and _is_int(rollback) and confirm >= rollback:
        problems.append(
            Problem(
                host,
                "roce_fabric_confirm_seconds",
                f"{confirm} s is not "
                f"below roce_fabric_rollback_seconds {rollback} s: the node "
                "would roll back before sparkctl confirms the change",
            )
        )
    problems += _model_source_problems(host, v)
    return problems


def _model_source_problems(host: str, v: Callable[[str], Any]) -> list[Problem]:
    source = v("model_cache_source")
    needs = {
        "hf": (("model_cache_hf_repo", "hf_repo"), ("model_cache_hf_revision", "git_sha")),
        "head": (("model_cache_head_dir", "abs_path"),),
        "controller": (("model_cache_controller_dir", "controller_path"),),
    }
    problems: list[Problem] = []
    for var, fmt in needs.get(str(source), ()):
        if not v(var):
            problems.append(
                Problem(
                    host,
                    "model_cache_source",
                    f"{source!r} needs {var} ({FORMATS[fmt][1]}), which is not set",
                )
            )
    return problems


def check_relations(
    groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]], roles_dir: Path
) -> list[Problem]:
    """Rules between variables, each host's values over the roles' defaults; a problem
    every Spark shares (group_vars) is reported once."""
    sparks = list(groups.get(SPARKS, []))
    switches = list(groups.get(SWITCHES, []))
    problems: list[Problem] = [
        Problem(host, None, f"is in both [{SPARKS}] and [{SWITCHES}]; a host has one role")
        for host in sparks
        if host in switches
    ]
    defaults = load_defaults(roles_dir)
    per_host: dict[str, list[Problem]] = {}
    for host in sparks:
        hv = hostvars[host]
        switch_vars = hostvars[switches[0]] if switches else {}

        def value(
            name: str, hv: Mapping[str, Any] = hv, switch_vars: Mapping[str, Any] = switch_vars
        ) -> Any:
            if name.startswith("switch_mtu_") and name in switch_vars:
                return switch_vars[name]
            return hv.get(name, defaults.get(name))

        per_host[host] = _relation_problems(host, value, bool(switches))
    if switches and sparks:
        problems += _uncabled(sparks, hostvars)
    seen: set[tuple[str | None, str]] = set()
    for host in sparks:
        for problem in per_host[host]:
            everywhere = all(
                any(q.var == problem.var and q.message == problem.message for q in per_host[h])
                for h in sparks
            )
            key = (None if everywhere else host, problem.message)
            if key not in seen:
                seen.add(key)
                problems.append(replace(problem, host=key[0]))
    return problems


def _uncabled(sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    ports = hostvars[sparks[0]].get("switch_ports")
    if not isinstance(ports, Mapping):
        return []  # _check_switch says so
    cabled = set()
    for spec in ports.values():
        if isinstance(spec, Mapping):
            twin = spec.get("twin", "both")
            cabled |= {(spec.get("node"), t) for t in (TWINS if twin == "both" else (twin,))}
    if not cabled:
        return []  # no ports at all: a fabric cabled without a managed switch
    problems = []
    for host in sparks:
        missing = [t for t in TWINS if (host, t) not in cabled]
        if missing:
            problems.append(
                Problem(
                    host,
                    "switch_ports",
                    f"no port for {host} twin "
                    f"{' and '.join(missing)}: every Spark's two twins are "
                    "cabled to the switch (NVIDIA's guide), or validate finds "
                    "a fabric that cannot pass",
                    hint="add the port, or twin: a|b on a port that carries one twin",
                )
            )
    return problems


def check(
    groups: Mapping[str, list[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    roles_dir: Path,
    user_vars: Mapping[str, Iterable[str]] | None = None,
) -> list[Problem]:
    """All rules: topology first, then types of role variables.

    A variable the topology rules already reported (``node_rank: one``) is not
    reported again as a wrong type. Cluster-wide problems (no host) say which hosts
    they concern.
    """
    problems = check_topology(groups, hostvars)
    reported = {(p.host, p.var) for p in problems}
    problems += [
        p
        for p in check_types(hostvars, load_specs(roles_dir), user_vars)
        if (p.host, p.var) not in reported
    ]
    if not any(p.var is None and p.host is None for p in problems):  # a topology at all
        reported = {(p.host, p.var) for p in problems} | {(None, p.var) for p in problems}
        problems += [
            p
            for p in check_relations(groups, hostvars, roles_dir)
            if (p.host, p.var) not in reported
        ]
    return [
        replace(p, scope=_scope(hostvars, p.var)) if p.host is None and p.var else p
        for p in problems
    ]


def _scope(hostvars: Mapping[str, Mapping[str, Any]], var: str | None) -> str:
    top = (var or "").split(".", 1)[0]
    having = [host for host, hv in hostvars.items() if top in hv]
    if not having or len(having) == len(hostvars):
        return "all hosts"
    return f"hosts {', '.join(having)}"


# ------------------------------------------------------- as an Ansible filter
# Variables of the play, not of the inventory; never passed to the rules.
_PLAY_VARS = frozenset(
    {
        "groups",
        "group_names",
        "hostvars",
        "vars",
        "environment",
        "omit",
        "playbook_dir",
        "play_hosts",
        "role_names",
        "inventory_dir",
        "inventory_file",
        "ansible_playbook_python",
        "ansible_config_file",
    }
)


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


def origin_of(value: object) -> str | None:
    """Where Ansible read ``value`` from ("file:line:column"), when it knows.

    ansible-core 2.19 tags loaded values with their origin; the API is internal,
    so this degrades to ``None`` on other versions (and outside Ansible).
    """
    try:
        from ansible._internal._datatag._tags import Origin  # noqa: PLC0415
    except ImportError:  # pragma: no cover - other ansible-core versions
        return None
    tag = Origin.get_tag(value)
    return None if tag is None else str(tag)


def _inventory_vars(hv: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """One host's variables as the rules see them on the controller, and their origins.

    No facts, plain values. A value Ansible cannot template here (it may need facts
    this facts-free play does not have) is left out; the task that uses it will say
    what is wrong.
    """
    names = [str(name) for name in hv]
    try:
        facts = (
            _fact_names({"ansible_facts": hv["ansible_facts"]})
            if "ansible_facts" in names
            else set()
        )
    except Exception:  # Ansible raises its own error types
        facts = set()
    out: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in names:
        if name in _PLAY_VARS or name in facts:
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


def _problems_filter(
    hostvars: Mapping[str, Any], groups: Mapping[str, list[str]], roles_dir: str
) -> list[str]:
    hosts = list(dict.fromkeys([*groups.get(SPARKS, []), *groups.get(SWITCHES, [])]))
    plain_vars: dict[str, dict[str, Any]] = {}
    origins: dict[tuple[str, str], str] = {}
    for host in hosts:
        plain_vars[host], found = _inventory_vars(hostvars[host])
        origins.update({(host, name): where for name, where in found.items()})
    plain_groups = {str(g): [str(h) for h in members] for g, members in groups.items()}
    secrets = [
        secret_problem(host, name)
        for host in hosts
        for name in plain_vars[host].pop(_PLAINTEXT, [])
    ]
    messages = []
    for p in [*secrets, *check(plain_groups, plain_vars, Path(roles_dir))]:
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
    """``hostvars | sparkctl_inventory_problems(groups, roles_dir)`` -> list of messages."""

    def filters(self) -> dict[str, Any]:
        return {"sparkctl_inventory_problems": _problems_filter}
