"""The pinned release's own parser accepts every command line sparkctl renders.

Every rank of inventory/lab.ini, sim.ini and sim-two-groups.ini is rendered
(``sparkctl.render.render``, shared per session: tests/conftest.py
``rendered_inventory``); its unit's ``ExecStart=`` is split as systemd splits
it (:func:`systemd_split`), the server arguments are taken with the role's own
``sglang_server_args`` filter, and the release parses them with the parser of
``sglang serve`` / ``python -m sglang.launch_server``: ``prepare_server_args``
builds ``argparse.ArgumentParser(prog="sglang serve")`` and calls
``ServerArgs.add_cli_args`` on it (sglang 0.5.17, srt/server_args.py:9355-9356;
tests/contract/release_probe.py does the same in the release's venv).

Expectations come from the inventory (sparkctl's loader) and the role's
defaults, never from the rendered output. One probe of the venv answers the
whole module (importing the release costs ~10 s).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.inventory import Inventory, Node
from sparkctl_lab.standins.sglang.launch_server import build_parser
from tests.conftest import REPO, Rendered
from tests.contract import release_probe
from tests.contract.conftest import SGLangRelease
from tests.unit.pathload import load_file

pytestmark = pytest.mark.contract

ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "sglang"
ARGS = load_file("contract_sglang_args", ROLE.parents[1] / "plugins" / "filter" / "sglang_args.py")
UNIT = "/etc/systemd/system/sparkctl-sglang.service"
FIREWALL = "/etc/sparkctl/sglang-firewall.nft"
INVENTORIES = ("lab", "sim", "sim-two-groups")
DUMMY_KEY = "contract-dummy-key-0123456789"


def role_default(name: str) -> Any:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())[name]


# ------------------------------------------------------- systemd's splitting
# systemd.service(5) "Command lines" and systemd.syntax(7) "Quoting": words are
# separated by whitespace; double or single quotes make one word of what they
# hold (also in the middle of a word); C-style backslash escapes; "$$" is a
# literal "$" and "%%" a literal "%". ${NAME} references stay as written, and
# other specifiers are refused: no rendered unit may need them.
_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
# systemd.service(5), table "Special executable prefixes".
_EXEC_PREFIXES = "@-:+!"


def systemd_split(value: str) -> list[str]:
    """The argv systemd makes of one ``ExecStart=`` value (see above)."""
    words: list[str] = []
    word: str | None = None  # None between words
    quote: str | None = None
    i = 0
    while i < len(value):
        c = value[i]
        if quote is None and c in " \t\n":
            if word is not None:
                words.append(word)
                word = None
            i += 1
            continue
        word = word or ""
        nxt = value[i + 1 : i + 2]
        if c == "\\":
            if nxt in _ESCAPES:
                word, i = word + _ESCAPES[nxt], i + 2
            elif nxt == "x" and re.fullmatch(r"[0-9A-Fa-f]{2}", value[i + 2 : i + 4]):
                word, i = word + chr(int(value[i + 2 : i + 4], 16)), i + 4
            else:
                raise ValueError(f"unsupported escape {value[i : i + 2]!r} at {i} in {value!r}")
        elif quote is None and c in "\"'":
            quote, i = c, i + 1
        elif c == quote:
            quote, i = None, i + 1
        elif c in "$%" and nxt == c:
            word, i = word + c, i + 2
        elif c == "%":
            raise ValueError(f"specifier {value[i : i + 2]!r} at {i} in {value!r}: not supported")
        else:
            word, i = word + c, i + 1
    if quote is not None:
        raise ValueError(f"unterminated {quote} quote in {value!r}")
    if word is not None:
        words.append(word)
    return words


def exec_start(unit: str) -> list[str]:
    """The argv of the unit's one ExecStart= (continuation lines joined, prefixes dropped)."""
    lines = re.sub(r"\\\n", " ", unit).splitlines()
    values = [line.partition("=")[2] for line in lines if line.startswith("ExecStart=")]
    assert len(values) == 1, f"want one ExecStart=, found {len(values)}:\n{unit}"
    argv = systemd_split(values[0])
    assert argv, unit
    argv[0] = argv[0].lstrip(_EXEC_PREFIXES)
    return argv


@pytest.mark.parametrize(
    ("value", "argv"),
    [
        ("a b\tc", ["a", "b", "c"]),
        ("  /bin/x   -y  ", ["/bin/x", "-y"]),
        ('"a b" c', ["a b", "c"]),
        ("'a b' \"c'd\"", ["a b", "c'd"]),
        ('x"y z"w', ["xy zw"]),
        ("\"a\\\"b\" 'c\\'d'", ['a"b', "c'd"]),
        ("a\\\\b \\x41\\sB", ["a\\b", "A B"]),
        ('$$HOME 100%% "$$x %%y"', ["$HOME", "100%", "$x %y"]),
        ('--api-key "${SGLANG_API_KEY}"', ["--api-key", "${SGLANG_API_KEY}"]),
        ('"" x', ["", "x"]),
    ],
)
def test_systemd_split(value: str, argv: list[str]) -> None:
    assert systemd_split(value) == argv


@pytest.mark.parametrize("value", ['a "b', "a 'b", "a\\", "a\\q", "%n", "x%i"])
def test_systemd_split_refuses(value: str) -> None:
    with pytest.raises(ValueError, match=r"unsupported|unterminated|not supported"):
        systemd_split(value)


def test_systemd_split_reads_what_the_role_writes() -> None:
    """The role's own escaping (sglang_exec_line) splits back into the same argv."""
    argv = [
        "/usr/bin/python3",
        "-c",
        'import os; x = "$HOME" % 2 \\ y',
        "--flag",
        "a b",
        "100%",
        "plain-word",
        "image:tag@<digest>",
    ]
    line = ARGS.sglang_exec_line(argv)
    assert systemd_split(line) == argv, line
    assert exec_start(f"[Service]\nExecStart=-{line}\nRestart=no\n") == argv


def test_exec_start_joins_continuation_lines() -> None:
    assert exec_start('ExecStart=/bin/a \\\n  b "c d"\n') == ["/bin/a", "b", "c d"]


# ------------------------------------------------------------- the ranks
@dataclass(frozen=True)
class Rank:
    """One rendered rank: what its unit passes to SGLang and what the inventory intends."""

    inventory: str
    node: Node
    args: tuple[str, ...]  # server args with the key marker replaced by DUMMY_KEY
    head: Node
    position: int
    size: int
    fabric_subnet: str  # fabric_a_subnet of the group's head
    fabric_ports: tuple[tuple[int, int], ...]  # the rendered firewall's fabric port ranges
    api_port_rule: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.inventory}/{self.node.name}"


def _hostvar(inv: Inventory, node: Node, name: str) -> Any:
    return inv.hostvars[node.name].get(name, role_default(name))


def _groups(inv: Inventory) -> dict[str, list[Node]]:
    """sglang_group -> members in node_rank order (the role's grouping rule)."""
    groups: dict[str, list[Node]] = {}
    for node in sorted(inv.nodes, key=lambda n: n.rank):
        groups.setdefault(str(_hostvar(inv, node, "sglang_group")), []).append(node)
    return groups


_FABRIC_RULE = re.compile(r"ip saddr @sglang_fabric_v4 tcp dport \{ (?P<ports>[^}]*) \} accept")
# One port, or a set of them where the gateway's ports join the API's (its host).
_API_RULE = re.compile(
    r"ip saddr @sglang_api_v4 tcp dport (?:(?P<port>\d+)|\{ (?P<ports>[0-9, ]+) \}) accept"
)


def _port_ranges(text: str) -> tuple[tuple[int, int], ...]:
    ranges = []
    for item in text.split(","):
        low, _, high = item.strip().partition("-")
        ranges.append((int(low), int(high or low)))
    return tuple(ranges)


def _ranks(rendered: Rendered, name: str) -> list[Rank]:
    inv = rendered.inv
    out = []
    for members in _groups(inv).values():
        for position, node in enumerate(members):
            argv = exec_start(rendered.read(node.name, UNIT))
            args = [str(a) for a in ARGS.sglang_server_args(argv)]
            # The role requires a key by default: the filter marks the one the
            # launcher adds with `--api-key ${SGLANG_API_KEY}`, last.
            assert args[-2:] == ["--api-key", ARGS.API_KEY_REF], (node, args)
            rules = rendered.read(node.name, FIREWALL)
            fabric, api = _FABRIC_RULE.search(rules), _API_RULE.search(rules)
            assert fabric is not None and api is not None, rules
            out.append(
                Rank(
                    inventory=name,
                    node=node,
                    args=(*args[:-1], DUMMY_KEY),
                    head=members[0],
                    position=position,
                    size=len(members),
                    fabric_subnet=str(inv.hostvars[members[0].name]["fabric_a_subnet"]),
                    fabric_ports=_port_ranges(fabric.group("ports")),
                    api_port_rule=tuple(
                        (api.group("port") or api.group("ports")).replace(" ", "").split(",")
                    ),
                )
            )
    return out


@pytest.fixture(scope="module")
def ranks(rendered_inventory: Callable[[str], Rendered]) -> list[Rank]:
    found = [rank for name in INVENTORIES for rank in _ranks(rendered_inventory(name), name)]
    assert len(found) == 12, [r.label for r in found]
    return found


# Controls: the probe must SEE what it is asked to catch, or its silence means nothing.
_CONTROL_DEPRECATED = ["--model-path", "/m", "--disable-cuda-graph"]
_CONTROL_ABBREVIATED = ["--model-path", "/m", "--tp", "2"]


@pytest.fixture(scope="module")
def release_answer(
    sglang_release: SGLangRelease, ranks: list[Rank], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One run of release_probe.py in the venv: actions, every rank parsed, ports."""
    work = tmp_path_factory.mktemp("release-probe")
    request = {
        "actions": True,
        "tmpdir": str(work),
        "parse": {
            **{r.label: list(r.args) for r in ranks},
            "control/deprecated": _CONTROL_DEPRECATED,
            "control/abbreviated": _CONTROL_ABBREVIATED,
        },
        "ports": {r.label: list(r.args) for r in ranks},
    }
    (work / "request.json").write_text(json.dumps(request))
    answer: dict[str, Any] = sglang_release.json(
        Path(release_probe.__file__).read_text(), str(work / "request.json")
    )
    return answer


def test_every_rank_parses_to_the_topology_the_inventory_intends(
    ranks: list[Rank], release_answer: dict[str, Any]
) -> None:
    dist_port = role_default("sglang_dist_port")
    for rank in ranks:
        parsed = release_answer["parse"][rank.label]
        assert parsed["error"] is None, (rank.label, rank.args, parsed["error"])
        ns = parsed["namespace"]
        inv_node = rank.node
        gpus = int(role_default("sglang_gpus_per_node"))
        host = role_default("sglang_host" if rank.position == 0 else "sglang_worker_host")
        want = {
            "tp_size": rank.size * gpus,
            "nnodes": rank.size,
            "node_rank": rank.position,
            "dist_init_addr": (
                f"{rank.head.fabric_ips['a']}:{dist_port}" if rank.size > 1 else None
            ),
            "host": host,
            "port": int(role_default("sglang_port")),
            "model_path": role_default("sglang_model_path"),
            "api_key": DUMMY_KEY,
            "enable_metrics": bool(role_default("sglang_enable_metrics")),
            "dist_timeout": int(role_default("sglang_dist_timeout")),
        }
        got = {k: ns[k] for k in want}
        assert got == want, (rank.label, inv_node, rank.args)


def test_no_flag_is_deprecated_or_only_an_abbreviation(
    ranks: list[Rank], release_answer: dict[str, Any]
) -> None:
    """The release warns about deprecated flags through logging (argparse_actions.py:28-29);
    argparse silently takes a prefix of a longer option (``--tp`` for ``--tp-size``),
    which stops working the day the release adds another option with that prefix."""
    deprecated = release_answer["parse"]["control/deprecated"]
    assert any("'--disable-cuda-graph' is deprecated" in m for m in deprecated["logged"]), (
        deprecated
    )
    abbreviated = release_answer["parse"]["control/abbreviated"]
    assert abbreviated["inexact"] == {"--tp": ["--tp-size"]}, abbreviated
    problems = []
    for rank in ranks:
        parsed = release_answer["parse"][rank.label]
        problems += [f"{rank.label}: the release logged {m!r}" for m in parsed["logged"]]
        problems += [
            f"{rank.label}: {flag} is only an abbreviation of {full}"
            for flag, full in parsed["inexact"].items()
        ]
        if parsed["stderr"]:
            problems.append(f"{rank.label}: the parser printed {parsed['stderr']!r}")
    assert problems == []


# ---------------------------------------------- the lab stand-in's parser
_COMPARED = ("dest", "kind", "type", "default", "choices", "nargs", "const", "required")


def parser_differences(standin: list[dict[str, Any]], real: list[dict[str, Any]]) -> list[str]:
    """Every way the stand-in's actions are not a subset of the release's, one line each."""
    by_flag = {flag: action for action in real for flag in action["option_strings"]}
    problems = []
    for action in standin:
        flags = action["option_strings"]
        if not flags:
            problems.append(f"positional {action['dest']!r}: the release has no positionals")
            continue
        unknown = [f for f in flags if f not in by_flag]
        if unknown:
            problems.append(f"{', '.join(unknown)}: unknown to the release's parser")
        owners = {json.dumps(by_flag[f], sort_keys=True) for f in flags if f in by_flag}
        if len(owners) > 1:
            problems.append(f"{', '.join(flags)}: one stand-in option, several release options")
            continue
        if not owners:
            continue
        theirs = json.loads(owners.pop())
        for key in _COMPARED:
            if action[key] != theirs[key]:
                problems.append(
                    f"{flags[0]}: {key} is {action[key]!r} in the stand-in, "
                    f"{theirs[key]!r} in the release"
                )
    return problems


def test_parser_differences_names_each_kind_of_difference() -> None:
    real: list[dict[str, Any]] = [
        {
            "option_strings": ["--a", "--a-alias"],
            "dest": "a",
            "kind": "_StoreAction",
            "type": "int",
            "default": 1,
            "choices": None,
            "nargs": None,
            "const": None,
            "required": False,
        },
        {
            "option_strings": ["--b"],
            "dest": "b",
            "kind": "_StoreTrueAction",
            "type": None,
            "default": False,
            "choices": None,
            "nargs": 0,
            "const": True,
            "required": False,
        },
    ]
    assert parser_differences([real[0] | {"option_strings": ["--a"]}, real[1]], real) == []
    changed = [
        real[0] | {"type": "str", "default": "1"},
        {**real[1], "option_strings": ["--c"]},
        {**real[1], "option_strings": ["--a", "--b"]},
    ]
    assert parser_differences(changed, real) == [
        "--a: type is 'str' in the stand-in, 'int' in the release",
        "--a: default is '1' in the stand-in, 1 in the release",
        "--c: unknown to the release's parser",
        "--a, --b: one stand-in option, several release options",
    ]


def test_standin_flags_are_the_releases_with_the_same_semantics(
    release_answer: dict[str, Any],
) -> None:
    standin = release_probe.describe_parser(build_parser())
    real = release_answer["actions"]
    assert len(real) > 400, len(real)  # the whole release parser, not a stand-in
    assert standin, "the stand-in's parser has no actions"
    problems = parser_differences(standin, real)
    assert problems == [], "\n".join(
        ["the lab stand-in's parser differs from sglang's:", *problems]
    )


# ------------------------------------------------------- ports and firewall
# Linux's default net.ipv4.ip_local_port_range (Documentation/networking/ip-sysctl.rst):
# where the kernel puts every port a program binds as port 0.
LINUX_EPHEMERAL = (32768, 60999)


def _inside(port: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= port <= high for low, high in ranges)


def _tcp(endpoint: Any) -> tuple[str, int] | None:
    match = re.fullmatch(r"tcp://(?P<host>[^:/]+):(?P<port>\d+)", str(endpoint or ""))
    return (match.group("host"), int(match.group("port"))) if match else None


def test_release_ports_of_each_rank_are_inside_the_fabric_firewall(
    ranks: list[Rank], release_answer: dict[str, Any]
) -> None:
    """Every TCP port the release derives for a rank's flags is open to the fabric.

    Computed with the release's code in the venv (release_probe.ports):
    the rendezvous (torch.distributed's TCPStore on the group's head, the
    address from ``_resolve_dist_init_method``, distributed/bootstrap.py:145)
    and ``PortArgs.init_new``'s endpoints (server_args.py:9423) as the flags
    are (IPC sockets only: nothing on TCP) and with ``--enable-dp-attention``
    (in sglang_extra_args it moves them to TCP on the head: port_base =
    dist-init port + 1 .. +6, server_args.py:9476-9497). Not computable here,
    because the kernel picks them: ``nccl_port`` (get_free_port,
    server_args.py:9428), the MessageQueue's remote socket (get_open_port,
    distributed/device_communicators/shm_broadcast.py:240) and NCCL's and
    Gloo's own listeners; for those the firewall must hold Linux's default
    ephemeral range, which is what an unconfigured Spark uses.
    """
    problems: list[str] = []
    for rank in ranks:
        if rank.size == 1:
            continue
        fabric = ipaddress.ip_network(rank.fabric_subnet)
        answer = release_answer["ports"][rank.label]
        found: list[tuple[str, str, int]] = []
        rendezvous = _tcp(answer["dist_init_method"])
        assert rendezvous == (rank.head.fabric_ips["a"], role_default("sglang_dist_port")), (
            rank.label,
            answer["dist_init_method"],
        )
        found.append(("rendezvous", *rendezvous))
        as_given = answer["as_given"]["endpoints"]
        assert [k for k, v in as_given.items() if _tcp(v)] == [], (rank.label, as_given)
        for key, value in answer["dp_attention"]["endpoints"].items():
            endpoint = _tcp(value)
            if endpoint is not None:
                found.append((f"dp-attention {key}", *endpoint))
        checked = dict(answer["dp_attention"]["checked"])
        assert checked.pop("nccl_port") == answer["dp_attention"]["endpoints"]["nccl_port"]
        found += [
            (f"dp-attention {name}", rank.head.fabric_ips["a"], port)
            for name, port in checked.items()
        ]
        assert len(found) >= 8, found
        for what, host, port in found:
            if host != rank.head.fabric_ips["a"]:
                problems.append(f"{rank.label}: {what} on {host}, not the head's fabric_a_ip")
            if ipaddress.ip_address(host) not in fabric:
                problems.append(f"{rank.label}: {what} on {host}, outside {fabric}")
            if not _inside(port, rank.fabric_ports):
                problems.append(
                    f"{rank.label}: {what} port {port} is outside the firewall's "
                    f"fabric ports {rank.fabric_ports}"
                )
        if not any(
            low <= LINUX_EPHEMERAL[0] and LINUX_EPHEMERAL[1] <= high
            for low, high in rank.fabric_ports
        ):
            problems.append(
                f"{rank.label}: the firewall's fabric ports {rank.fabric_ports} "
                f"do not hold the kernel's ephemeral range {LINUX_EPHEMERAL}"
            )
        if (
            rank.position == 0
            and str(release_answer["parse"][rank.label]["namespace"]["port"])
            not in rank.api_port_rule
        ):
            problems.append(
                f"{rank.label}: the API rule opens {rank.api_port_rule}, the head "
                "serves on another port"
            )
    assert problems == []
