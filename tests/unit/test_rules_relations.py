"""Rules between variables, judged before any host is contacted (sparkctl/rules/).

The sglang role's firewall (its sets, the ports it drops, SSH against them), the API
port against the ranks' ports, one rendezvous port per TP group, model_cache_link
inside the cache, keys outside world-writable directories, and the names that
become a controller path or a report's title. The rules are called on plain
hostvars here; tests/fixtures/bad_inputs/cases/relations.yml and
paths-and-names.yml run the same through ``sparkctl inventory check``.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.rules import firewall, formats
from sparkctl.rules.common import GROUP_NAME, Problem
from sparkctl.rules.relations import check_relations
from sparkctl.rules.schema import load_constraints
from sparkctl.rules.topology import check_cluster_name, check_names, check_topology, cluster_group
from sparkctl.rules.tp import check_tp
from tests.unit.pathload import load_file

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles"
fw = load_file(
    "sglang_firewall_filters", ROLES.parent / "plugins" / "filter" / "sglang_firewall.py"
)
GROUPS = {
    "sparks": ["spark1", "spark2"],
    "switches": ["fabric-switch"],
    "tiny": ["spark1", "spark2", "fabric-switch"],
}


def _hostvars(
    common: dict[str, Any] | None = None, **per_host: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The corpus' _valid inventory as hostvars: ``common`` for every host, then each
    host's own."""
    cluster = {
        "fabric_a_subnet": "192.168.100.0/24",
        "fabric_b_subnet": "192.168.101.0/24",
        "switch_ports": {"swp1": {"node": "spark1"}, "swp2": {"node": "spark2"}},
        **(common or {}),
    }
    out: dict[str, dict[str, Any]] = {}
    for rank, host in enumerate(("spark1", "spark2")):
        out[host] = {
            **cluster,
            "ansible_host": f"192.0.2.{11 + rank}",
            "node_rank": rank,
            "fabric_a_ip": f"192.168.100.{11 + rank}",
            "fabric_b_ip": f"192.168.101.{11 + rank}",
            **per_host.get(host, {}),
        }
    out["fabric-switch"] = {
        **cluster,
        "ansible_host": "192.0.2.2",
        "switch_os": "nvue",
        **per_host.get("fabric_switch", {}),
    }
    return out


def _relations(
    common: dict[str, Any] | None = None, **per_host: dict[str, Any]
) -> list[tuple[str | None, str | None, str]]:
    problems = check_relations(GROUPS, _hostvars(common, **per_host), ROLES)
    return [(p.host, p.var, p.message) for p in problems]


def test_the_valid_inventory_has_no_relation_problem() -> None:
    assert _relations() == []
    assert check_topology(GROUPS, _hostvars()) == []


# ------------------------------------------------------------ firewall sets
@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("sglang_firewall_fabric_cidrs", ["0.0.0.0/0"], "'0.0.0.0/0' matches every IPv4"),
        ("sglang_firewall_peer_cidrs", ["0.0.0.0/0"], "'0.0.0.0/0' matches every IPv4"),
        ("sglang_firewall_peer_cidrs", ["10.1.2.3/0"], "'10.1.2.3/0' matches every IPv4"),
        (
            "sglang_firewall_fabric_cidrs",
            ["0.0.0.0/1", "128.0.0.0/1"],
            "its items together match every IPv4",
        ),
    ],
)
def test_the_ranks_ports_are_never_open_to_every_address(
    var: str, value: list[str], says: str
) -> None:
    (problem,) = _relations({var: value})
    assert problem[:2] == (None, var)
    assert says in problem[2]


def test_the_api_may_be_opened_to_every_address_on_purpose() -> None:
    assert _relations({"sglang_api_allowed_cidrs": ["0.0.0.0/0"]}) == []


def test_a_fabric_subnet_of_every_address_is_refused_as_the_default_fabric_set() -> None:
    problems = _relations({"fabric_b_subnet": "0.0.0.0/0"})
    assert [(h, v) for h, v, m in problems if "matches every IPv4" in m] == [
        (None, "fabric_b_subnet")
    ]
    # The inventory's own fabric set replaces the subnets in the firewall.
    own = {"fabric_b_subnet": "0.0.0.0/0", "sglang_firewall_fabric_cidrs": ["10.0.0.0/24"]}
    assert not [m for _, _, m in _relations(own) if "matches every" in m]


@pytest.mark.parametrize(
    ("items", "pair"),
    [
        (["10.0.0.0/8", "10.1.0.0/16"], "item 0 (10.0.0.0/8) and item 1 (10.1.0.0/16)"),
        (["192.0.2.0/24", "0.0.0.0/0"], "item 0 (192.0.2.0/24) and item 1 (0.0.0.0/0)"),
        (["192.0.2.0/24", "198.51.100.7", "192.0.2.9"], "item 0 (192.0.2.0/24) and item 2"),
    ],
)
def test_overlapping_entries_of_one_set_are_refused_naming_both(
    items: list[str], pair: str
) -> None:
    for var in firewall.CIDR_SETS:
        found = firewall.cidr_problems("spark1", var, items)
        overlaps = [p for p in found if "overlap" in p.message]
        assert [(p.host, p.var) for p in overlaps] == [("spark1", var)], found
        assert pair in overlaps[0].message


@pytest.mark.parametrize(
    "items",
    [
        ["10.0.0.0/8", "11.0.0.0/8"],  # adjacent: nft keeps them apart
        ["192.0.2.0/24", "192.0.2.0/24"],  # the same network twice: the filter dedupes it
        ["192.0.2.5/24", "192.0.2.0/24"],  # host bits: the same network as nft reads it
        ["198.51.100.11", "198.51.100.12"],
    ],
)
def test_sets_that_render_pass(items: list[str]) -> None:
    assert firewall.cidr_problems(None, "sglang_api_allowed_cidrs", items) == []


def _nft_accepts(elements: list[str], tmp_path: Path) -> bool:
    """Whether ``nft -c`` (check only, nothing loaded) takes the set as the role's template
    writes it (roles/sglang/templates/sglang-firewall.nft.j2)."""
    path = tmp_path / "set.nft"
    path.write_text(
        "table inet sparkctl {\n\tset sglang_api_v4 {\n\t\ttype ipv4_addr; flags interval;\n"
        f"\t\telements = {{ {', '.join(elements)} }}\n\t}}\n}}\n"
    )
    proc = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, check=False)
    return proc.returncode == 0


def test_the_overlap_rule_agrees_with_nft(tmp_path: Path) -> None:
    """What the rule passes, the role's filter renders and nft loads; what it refuses, nft
    refuses too. Needs nft and the right to use it (nft -c opens a netlink socket)."""
    if shutil.which("nft") is None or not _nft_accepts(["192.0.2.0/24"], tmp_path):
        pytest.skip("nft -c is not available here")
    lists = [
        ["10.0.0.0/8", "10.1.0.0/16"],
        ["10.0.0.0/8", "11.0.0.0/8"],
        ["192.0.2.0/24", "192.0.2.0/24", "192.0.2.7/24"],
        ["192.0.2.0/24", "192.0.2.11"],
        ["0.0.0.0/0", "198.51.100.0/24"],
        ["0.0.0.0/0"],
        ["198.51.100.0/25", "198.51.100.128/25", "203.0.113.1"],
    ]
    for items in lists:
        rendered = fw.sglang_nft_expected(["192.168.100.0/24"], ["50000-50015"], 30000, items)
        passes = not firewall.cidr_problems(None, "sglang_api_allowed_cidrs", items)
        assert passes == _nft_accepts(rendered["sets"]["sglang_api_v4"], tmp_path), items


def test_the_firewall_off_with_a_list_is_refused() -> None:
    for var, value in (
        ("sglang_api_allowed_cidrs", ["192.0.2.0/24"]),
        ("sglang_firewall_fabric_cidrs", ["192.168.100.0/24"]),
        ("sglang_firewall_peer_cidrs", []),
        ("sglang_firewall_fabric_ports", ["50000-50015"]),
    ):
        (problem,) = _relations({"sglang_firewall_enabled": False, var: value})
        assert problem[:2] == (None, "sglang_firewall_enabled")
        assert f"false while {var} is set" in problem[2]
    assert _relations({"sglang_firewall_enabled": False}) == []
    one = _relations(
        {"sglang_api_allowed_cidrs": ["192.0.2.0/24"]}, spark2={"sglang_firewall_enabled": False}
    )
    assert [p[:2] for p in one] == [("spark2", "sglang_firewall_enabled")]


# ------------------------------------------------------------ ports
@pytest.mark.parametrize(
    ("common", "spark2", "var", "says"),
    [
        ({}, {"ansible_port": 50003}, "ansible_port", "the SSH port 50003 lies in 50000-50015"),
        ({}, {"ansible_port": 40022}, "ansible_port", "the SSH port 40022 lies in 32768-60999"),
        ({}, {"ansible_port": 30000}, "ansible_port", "the SSH port 30000 lies in 30000"),
        ({"sglang_dist_port": 10}, {}, "sglang_dist_port", "the SSH port 22 lies in 10-25"),
        (
            {"sglang_firewall_fabric_ports": ["1-1024"]},
            {},
            "sglang_firewall_fabric_ports",
            "the SSH port 22 lies in 1-1024",
        ),
        ({"sglang_port": 22}, {}, "sglang_port", "the SSH port 22 lies in 22 (sglang_port)"),
        (
            {},
            {"ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o Port=50010"},
            "ansible_ssh_common_args",
            "the SSH port 50010 lies in 50000-50015",
        ),
        (
            {},
            {"ansible_ssh_extra_args": "-oPort=40000"},
            "ansible_ssh_extra_args",
            "the SSH port 40000 lies in 32768-60999",
        ),
    ],
)
def test_the_ssh_port_stays_outside_every_port_the_firewall_drops(
    common: dict[str, Any], spark2: dict[str, Any], var: str, says: str
) -> None:
    problems = _relations(common, spark2=spark2)
    ssh = [p for p in problems if "SSH port" in p[2]]
    assert len(ssh) == 1, problems
    assert ssh[0][1] == var
    assert ssh[0][0] == ("spark2" if spark2 else None)
    assert says in ssh[0][2]


def test_an_ssh_port_outside_the_dropped_ports_or_no_firewall_passes() -> None:
    assert _relations(spark1={"ansible_port": 2222}) == []
    assert (
        _relations(
            {"sglang_firewall_fabric_ports": ["50000-50015"]}, spark1={"ansible_port": 40022}
        )
        == []
    )
    assert _relations({"sglang_firewall_enabled": False}, spark1={"ansible_port": 50003}) == []


@pytest.mark.parametrize("port", [32768, 40000, 60999])
def test_the_api_port_outside_the_ephemeral_range_says_what_the_role_says(port: int) -> None:
    (problem,) = _relations({"sglang_port": port})
    assert problem[:2] == (None, "sglang_port")
    assert f"{port} lies in the kernel's ephemeral port range 32768-60999" in problem[2]
    # The role's own refusal, on the nodes, says the same thing.
    assert "it would only accept the fabric" in problem[2]
    with pytest.raises(fw.AnsibleFilterError, match="it would only accept the fabric"):
        fw.sglang_nft_expected(
            ["192.168.100.0/24"], ["50000-50015", "32768-60999"], port, ["0.0.0.0/0"]
        )


def test_the_api_port_against_the_ranks_ports() -> None:
    assert _relations({"sglang_port": 32767}) == []
    assert _relations({"sglang_port": 61000}) == []
    (moved,) = _relations({"sglang_dist_port": 29995})
    assert moved[:2] == (None, "sglang_dist_port")
    assert "the API port 30000 lies in the ranks' port range 29995-30010" in moved[2]
    (listed,) = _relations({"sglang_firewall_fabric_ports": ["29000-30500"]})
    assert listed[:2] == (None, "sglang_firewall_fabric_ports")
    (own,) = _relations({"sglang_port": 50003})
    assert own[:2] == (None, "sglang_port")
    assert own[2].startswith("50003 lies in the ranks' port range 50000-50015")
    # Without the firewall the ephemeral range still collides with the ranks' sockets.
    (off,) = _relations({"sglang_firewall_enabled": False, "sglang_port": 40000})
    assert "the ranks' own sockets take these ports" in off[2]


def _tp(hostvars: dict[str, dict[str, Any]]) -> list[Problem]:
    sparks = [h for h in hostvars if h.startswith("spark")]
    return [p for p in check_tp(sparks, hostvars) if p.var == "sglang_dist_port"]


def test_one_rendezvous_port_per_tp_group() -> None:
    assert _tp(_hostvars()) == []
    assert _tp(_hostvars({"sglang_dist_port": 50100})) == []
    (member,) = _tp(_hostvars(spark2={"sglang_dist_port": 50100}))
    assert member.host == "spark2"
    assert "50100 differs from 50000, the port of spark1" in member.message
    # Two members, the head moved: the one the inventory moved is named.
    (head,) = _tp(_hostvars(spark1={"sglang_dist_port": 50300}))
    assert head.host == "spark1"
    assert "50300 differs from 50000" in head.message


def test_groups_each_keep_their_own_rendezvous_port() -> None:
    hostvars = _hostvars()
    for rank, host in enumerate(("spark3", "spark4"), start=2):
        hostvars[host] = {**hostvars["spark1"], "node_rank": rank}
    for host, group, port in (
        ("spark1", "a", 50000),
        ("spark2", "a", 50000),
        ("spark3", "b", 50100),
        ("spark4", "b", 50100),
    ):
        hostvars[host] |= {"sglang_group": group, "sglang_dist_port": port}
    assert _tp(hostvars) == []
    hostvars["spark4"]["sglang_dist_port"] = 50200
    hostvars["spark3"].pop("sglang_dist_port")
    problems = _tp(hostvars)
    # 50000 (spark3, unset) and 50200 (spark4) tie: the role's default wins.
    assert [(p.host, p.var) for p in problems] == [("spark4", "sglang_dist_port")]
    assert "SGLang group 'b' (spark3, spark4)" in problems[0].message


# ------------------------------------------------------------ paths
@pytest.mark.parametrize(
    ("root", "link", "inside"),
    [
        ("/var/lib/sparkctl/models", "/var/lib/sparkctl/models/current", True),
        ("/var/lib/sparkctl/models/", "/var/lib/sparkctl/models/a/b", True),
        ("/", "/anything", True),
        ("/var/lib/sparkctl/models", "/etc/passwd", False),
        ("/var/lib/sparkctl/models", "/var/lib/sparkctl/models-old/current", False),
        ("/var/lib/sparkctl/models", "/var/lib/sparkctl/models", False),
        ("/var/lib/sparkctl/models", "/var/lib/sparkctl/models/", False),
        ("/srv/models", "/var/lib/sparkctl/models/current", False),
    ],
)
def test_model_cache_link_stays_inside_the_cache(root: str, link: str, inside: bool) -> None:
    problems = _relations({"model_cache_dir": root, "model_cache_link": link})
    assert (problems == []) is inside, problems
    if not inside:
        assert problems[0][:2] == (None, "model_cache_link")
        assert "is not inside model_cache_dir" in problems[0][2]


@pytest.mark.parametrize(
    ("lease", "interval", "refused"),
    [
        (None, None, False),  # the defaults: 60 s, readings every 2 s
        (15, None, False),
        (60, 20, False),
        (30, 10, False),
        (29, 10, True),
        (60, 30, True),
        (None, 21, True),  # the default lease against slow readings
    ],
)
def test_the_model_lease_spans_three_progress_readings(
    lease: int | None, interval: int | None, refused: bool
) -> None:
    given = {"model_cache_lease_timeout": lease, "model_cache_progress_interval": interval}
    problems = _relations({k: x for k, x in given.items() if x is not None})
    assert bool(problems) is refused, problems
    if refused:
        assert problems[0][:2] == (None, "model_cache_lease_timeout")
        assert "progress readings (model_cache_progress_interval" in problems[0][2]


def test_the_link_follows_the_cache_when_unset() -> None:
    # The role's default is "{{ model_cache_dir }}/current": always inside.
    assert _relations({"model_cache_dir": "/srv/models"}) == []


@pytest.mark.parametrize(
    "path",
    ["/tmp/k", "/tmp", "/var/tmp/sparkctl/ssh", "/dev/shm/k", "/run/lock/k", "/private/tmp/k"],
)
def test_keys_are_never_in_world_writable_directories(path: str) -> None:
    ok, words = formats.FORMATS["private_path"]
    assert not ok(path)
    assert "outside the world-writable" in words
    assert formats.world_writable(path) is not None


@pytest.mark.parametrize(
    "path",
    ["~/.local/state/sparkctl/clusters/lab/ssh", "/srv/sparkctl/keys", "/tmpfs/keys", "/var/tmpx"],
)
def test_keys_elsewhere_pass(path: str) -> None:
    assert formats.FORMATS["private_path"][0](path)


def test_key_and_secret_paths_carry_the_private_format() -> None:
    constraints = load_constraints(ROLES)
    for name in ("base_cluster_key_dir", "sglang_api_key_file", "sglang_tls_keyfile"):
        assert constraints[name][1]["format"] == "private_path", name


# Names that hold a path by their role's own words: its argument spec says path, or the
# name ends in one of these.
_PATH_NAME = re.compile(r"_(dir|file|path|home|link|venv|mounts|keyfile|certfile|bundle)$")
_PATH_FORMATS = {"abs_path", "unit_path", "controller_path", "private_path", "ssh_file"}


def test_every_path_variable_of_every_role_has_a_path_format() -> None:
    """Absolute, normalised, no ``..``: a path variable without one of the path formats
    would take whatever it is given."""
    constraints = load_constraints(ROLES)
    missing = []
    checked = 0
    for spec_file in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        data = yaml.safe_load(spec_file.read_text())
        for entry in data["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                if spec.get("type") != "path" and not _PATH_NAME.search(name):
                    continue
                checked += 1
                constraint = constraints.get(name, ("", {}))[1]
                fmt = constraint.get("format") or (constraint.get("items") or {}).get("format")
                if fmt not in _PATH_FORMATS:
                    missing.append(f"{spec_file.parent.parent.name}: {name} ({fmt})")
    assert checked >= 25
    assert missing == []


@pytest.mark.parametrize(
    "path",
    ["/a/../b", "/a/./b", "/a//b", "a/b", "/var/lib/x/..", "/a\nb", "/a b"],
)
def test_path_formats_refuse_what_is_not_normalised(path: str) -> None:
    for fmt in _PATH_FORMATS:
        assert not formats.FORMATS[fmt][0](path), (fmt, path)


# ------------------------------------------------------------ names
@pytest.mark.parametrize("name", ["..", ".", "a.b", "x<b>", "-x", "a b", "a/b", "é", "a" * 64])
def test_group_names_are_one_plain_word(name: str) -> None:
    assert GROUP_NAME.match(name) is None
    assert not formats.FORMATS["group_name"][0](name)


@pytest.mark.parametrize("name", ["main", "lab", "tiny_2", "group-b", "a" * 63, "7"])
def test_plain_group_names_pass(name: str) -> None:
    assert formats.FORMATS["group_name"][0](name)


def test_model_names_keep_their_dots() -> None:
    ok = formats.FORMATS["dir_name"][0]
    assert ok("Qwen2.5-7B") and ok("Qwen3-8B")
    assert not any(ok(n) for n in (".", "..", "../x", "a/b", ".hidden", ""))


def test_the_cluster_group_is_named_when_not_a_word() -> None:
    assert check_names(GROUPS) == []
    assert cluster_group(GROUPS) == "tiny"
    for bad in ("..", "tiny.v2", "x<img/src=x/onerror=alert(1)>"):
        groups = {**GROUPS, bad: GROUPS["tiny"]}
        (problem,) = check_names(groups)
        assert (problem.host, problem.var) == (None, "cluster_name")
        assert f"inventory group [{bad}]" in problem.message
    # A group of none of the cluster's hosts never becomes its name.
    assert check_names({**GROUPS, "other.hosts": ["elsewhere"]}) == []


def test_an_inventory_file_name_that_would_be_the_cluster_name_is_judged_too() -> None:
    assert check_cluster_name("lab", "inventory/lab.ini") is None
    problem = check_cluster_name("..", "/srv/inv/...ini")
    assert problem is not None
    assert (problem.host, problem.var) == (None, "cluster_name")
    assert "the name of /srv/inv/...ini would become the cluster's name" in problem.message


def test_a_host_in_both_groups_is_named_and_is_not_a_second_switch() -> None:
    groups = {**GROUPS, "switches": ["fabric-switch", "spark2"]}
    hostvars = _hostvars()
    hostvars["spark2"]["switch_os"] = "nvue"
    problems = check_topology(groups, hostvars)
    assert [(p.host, p.var) for p in problems] == [("spark2", None)], problems
    assert "is in both [sparks] and [switches]" in problems[0].message
    assert not [p for p in problems if "lists 2 hosts" in p.message]
    assert check_relations(groups, hostvars, ROLES) == []


def test_the_rules_and_the_role_filter_group_the_sparks_with_one_decision() -> None:
    """The TP groups are decided once (module_utils/tp_groups.py): the rules' groups
    and the filter's group of every node agree, ranks given out of order, and the
    role's default group is that module's."""
    from sparkctl.collection import plugin, tp_groups  # noqa: PLC0415
    from sparkctl.rules import sglang_groups  # noqa: PLC0415

    args = plugin("filter", "sglang_args")
    assert args.GROUP_NAME is tp_groups.GROUP_NAME is GROUP_NAME
    for key in ("defaults", "vars"):
        data = yaml.safe_load((ROLES / "sglang" / key / "main.yml").read_text())
        name = data.get("sglang_group", data.get("_sglang_default_group"))
        assert name == tp_groups.DEFAULT_GROUP, key
    ranks = {"s1": 3, "s2": 0, "s3": 5, "s4": 1, "s5": 2, "s6": 4}
    named = {"s1": "b", "s3": "b", "s6": "b"}  # the others in the default group
    hostvars = {
        h: {"node_rank": r, **({"sglang_group": named[h]} if h in named else {})}
        for h, r in ranks.items()
    }
    groups = sglang_groups(list(ranks), hostvars)
    assert groups == {"main": ["s2", "s4", "s5"], "b": ["s1", "s6", "s3"]}
    nodes = [{"name": h, "node_rank": r, "group": named.get(h, "main")} for h, r in ranks.items()]
    for host, rank in ranks.items():
        group = args.sglang_tp_group(nodes, rank)
        members = groups[named.get(host, "main")]
        assert (group["members"], group["head"], group["rank"]) == (
            members,
            members[0],
            members.index(host),
        ), host


def test_the_ephemeral_range_is_the_kernels_default() -> None:
    assert firewall.EPHEMERAL == (32768, 60999)
    defaults = yaml.safe_load((ROLES / "sglang" / "defaults" / "main.yml").read_text())
    assert "32768-60999" in defaults["sglang_firewall_fabric_ports"]
    assert ipaddress.IPv4Network("0.0.0.0/0") == firewall.EVERY_ADDRESS
