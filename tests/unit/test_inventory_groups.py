"""Several SGLang TP groups in one inventory (``sglang_group``): the rules, per group.

Inventories are copies of inventory/sim.ini (and its group_vars) under
tmp_path with the Sparks split into groups, checked by ``sparkctl inventory
check`` as a user runs it: a valid split exits 0, a bad one exits 2 with a
line naming the file, the host (or "all hosts") and the variable, and the
group it concerns. inventory/sim-two-groups.ini, the shipped example, is the
lab's inventory with two groups of two.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from sparkctl import cli, inventory
from sparkctl import rules as inventory_rules
from sparkctl.errors import ExitCode
from tests.unit.pathload import load_file

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles"
SIM = ROOT / "inventory" / "sim.ini"
TWO_GROUPS = ROOT / "inventory" / "sim-two-groups.ini"
FILTER = ROLES.parent / "plugins" / "filter" / "sparkctl_inventory.py"
SPARKS = ["spark1", "spark2", "spark3", "spark4"]


def _sim_copy(tmp_path: Path, groups: dict[str, str] | None = None) -> Path:
    """sim.ini and its group_vars under tmp_path; ``groups``: host -> sglang_group."""
    path = tmp_path / "sim.ini"
    shutil.copy(SIM, path)
    shutil.copytree(SIM.parent / "group_vars", tmp_path / "group_vars")
    for host, group in (groups or {}).items():
        _edit_host(path, host, f"sglang_group={group}")
    return path


def _edit_host(path: Path, host: str, extra: str) -> None:
    """Append ``extra`` to the host line of ``host`` in [sparks]."""
    lines = path.read_text().splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.startswith(f"{host} ansible_host=")]
    lines[index] += f" {extra}"
    path.write_text("\n".join(lines) + "\n")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _cluster_yml(tmp_path: Path) -> Path:
    return tmp_path / "group_vars" / "sim" / "cluster.yml"


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + textwrap.dedent(text))


def _check_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path
) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["sparkctl", "inventory", "check", str(path)])
    with pytest.raises(SystemExit) as info:
        cli.main()
    return int(info.value.code or 0), capsys.readouterr().err


def _passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path
) -> None:
    monkeypatch.setattr(sys, "argv", ["sparkctl", "inventory", "check", str(path)])
    cli.main()
    out = capsys.readouterr()
    assert "error" not in out.err, out.err
    assert ": OK" in out.out + out.err


def _lines(err: str, var: str) -> list[str]:
    return [ln.strip() for ln in err.splitlines() if f"variable {var}:" in ln]


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))


def _groups_of(path: Path) -> dict[str, list[str]]:
    inv = inventory.load(path)
    return inventory_rules.sglang_groups(list(inv.groups["sparks"]), inv.hostvars)


# ------------------------------------------------------------ valid splits
def test_shipped_two_group_example_is_sim_ini_plus_the_groups() -> None:
    """inventory/sim-two-groups.ini: sim.ini's hosts and addresses, groups a and b."""

    def hosts(path: Path) -> dict[str, str]:
        lines = [
            ln
            for ln in path.read_text().splitlines()
            if ln.startswith("spark") and " ansible_host=" in ln
        ]
        return {ln.split()[0]: ln for ln in lines}

    sim, two = hosts(SIM), hosts(TWO_GROUPS)
    assert sorted(two) == SPARKS
    assert {h: two[h] for h in SPARKS} == {
        h: f"{sim[h]} sglang_group={'a' if h in ('spark1', 'spark2') else 'b'}" for h in SPARKS
    }
    sections = [ln for ln in TWO_GROUPS.read_text().splitlines() if ln.startswith("[")]
    # and the gateway in front of both groups, for every Spark (docs/gateway.md)
    assert sections == [
        *(ln for ln in SIM.read_text().splitlines() if ln.startswith("[")),
        "[sparks:vars]",
    ]
    assert TWO_GROUPS.read_text().rstrip().endswith("[sparks:vars]\nsglang_gateway_enabled=True")
    assert inventory.load(TWO_GROUPS).cluster == "sim"  # group_vars/sim is shared
    assert _groups_of(TWO_GROUPS) == {"a": ["spark1", "spark2"], "b": ["spark3", "spark4"]}


def test_shipped_two_group_example_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _passes(monkeypatch, capsys, TWO_GROUPS)


def test_two_groups_of_two_with_their_tp_set_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _sim_copy(tmp_path, {"spark1": "a", "spark2": "a", "spark3": "b", "spark4": "b"})
    _append(_cluster_yml(tmp_path), "sglang_tp_size: 2\nsglang_nnodes: 2\n")
    _passes(monkeypatch, capsys, path)
    assert _groups_of(path) == {"a": ["spark1", "spark2"], "b": ["spark3", "spark4"]}


def test_one_group_of_four_named_or_not_is_todays_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _groups_of(SIM) == {"main": SPARKS}
    path = _sim_copy(tmp_path)
    _append(_cluster_yml(tmp_path), "sglang_group: main\nsglang_tp_size: 4\n")
    _passes(monkeypatch, capsys, path)
    assert _groups_of(path) == {"main": SPARKS}


def test_groups_follow_node_rank_and_a_group_of_one_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # spark4 alone (TP=1); spark1..3 a group of three, listed out of rank order.
    path = _sim_copy(
        tmp_path, {"spark1": "trio", "spark2": "trio", "spark3": "trio", "spark4": "solo"}
    )
    lines = path.read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("spark1 "))
    lines[first], lines[first + 2] = lines[first + 2], lines[first]
    path.write_text("\n".join(lines) + "\n")
    _edit_host(path, "spark4", "sglang_tp_size=1 sglang_nnodes=1")
    _passes(monkeypatch, capsys, path)
    assert _groups_of(path) == {"trio": ["spark1", "spark2", "spark3"], "solo": ["spark4"]}


# -------------------------------------------------------------- bad splits
def test_cluster_wide_tp_names_every_host_with_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _sim_copy(tmp_path, {"spark1": "a", "spark2": "a", "spark3": "b", "spark4": "b"})
    _append(_cluster_yml(tmp_path), "sglang_tp_size: 4\n")
    code, err = _check_cli(monkeypatch, capsys, path)
    assert code == ExitCode.BAD_INPUT, err
    lines = _lines(err, "sglang_tp_size")
    assert len(lines) == 4, err
    for host, line in zip(SPARKS, lines, strict=True):
        group = "'a' (spark1, spark2)" if host in ("spark1", "spark2") else "'b' (spark3, spark4)"
        assert line.startswith(f"{_cluster_yml(tmp_path)}:"), line
        assert (
            f"host {host}: variable sglang_tp_size: TP 4 does not match the 2 Sparks of "
            f"SGLang group {group} x 1 GPU(s) per node"
        ) in line, line
        assert "(set sglang_tp_size: 2 for this group" in line, line


class Bad(NamedTuple):
    host: str
    extra: str  # what the host line gains (node_rank: replaces its rank)
    var: str
    text: str


BAD = {
    "nnodes": Bad(
        "spark3",
        "sglang_nnodes=4",
        "sglang_nnodes",
        "4 nodes does not match the 2 Sparks of SGLang group 'b' (spark3, spark4)",
    ),
    "tp-not-a-multiple": Bad(
        "spark1",
        "sglang_tp_size=3",
        "sglang_tp_size",
        "TP 3 is not a multiple of the 2 Sparks of SGLang group 'a' (spark1, spark2)",
    ),
    "tp-mismatch": Bad(
        "spark2",
        "sglang_tp_size=4",
        "sglang_tp_size",
        "TP 4 does not match the 2 Sparks of SGLang group 'a' (spark1, spark2) x 1 GPU(s) per node",
    ),
    "tp-zero": Bad(
        "spark4",
        "sglang_tp_size=0",
        "sglang_tp_size",
        "0 is an integer, but sglang needs a positive integer",
    ),
    "group-not-a-string": Bad(
        "spark4", "sglang_group=1", "sglang_group", "1 is an integer, but sglang needs a string"
    ),
    "rank-twice-across-groups": Bad(
        "spark3", "node_rank=0", "node_rank", "rank 0 is also spark1's"
    ),
}


@pytest.mark.parametrize("bad", [pytest.param(b, id=name) for name, b in BAD.items()])
def test_one_bad_host_is_named_with_file_host_variable_and_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bad: Bad
) -> None:
    path = _sim_copy(tmp_path, {"spark1": "a", "spark2": "a", "spark3": "b", "spark4": "b"})
    if bad.var == "node_rank":
        old = f"{bad.host} ansible_host=10.77.0.13 node_rank=2"
        assert old in path.read_text()
        path.write_text(
            path.read_text().replace(old, f"{bad.host} ansible_host=10.77.0.13 {bad.extra}")
        )
    else:
        _edit_host(path, bad.host, bad.extra)
    code, err = _check_cli(monkeypatch, capsys, path)
    assert code == ExitCode.BAD_INPUT, err
    lines = _lines(err, bad.var)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{path}:"), lines[0]
    assert f"host {bad.host}: variable {bad.var}: {bad.text}" in lines[0], lines[0]


def test_group_name_that_is_not_a_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _sim_copy(tmp_path, {"spark1": "a", "spark2": "a"})
    for host in ("spark3", "spark4"):
        _write(tmp_path / "host_vars" / f"{host}.yml", "sglang_group: 'b c'\n")
    code, err = _check_cli(monkeypatch, capsys, path)
    assert code == ExitCode.BAD_INPUT, err
    lines = _lines(err, "sglang_group")
    assert [ln.split(": host ")[0] for ln in lines] == [
        f"{tmp_path}/host_vars/spark3.yml:1:15",
        f"{tmp_path}/host_vars/spark4.yml:1:15",
    ]
    for host, line in zip(("spark3", "spark4"), lines, strict=True):
        assert f"host {host}: variable sglang_group: 'b c' is not a simple word" in line, line


def test_one_bad_group_name_for_every_host_is_reported_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _sim_copy(tmp_path)
    _append(_cluster_yml(tmp_path), "sglang_group: 'my group'\n")
    code, err = _check_cli(monkeypatch, capsys, path)
    assert code == ExitCode.BAD_INPUT, err
    (line,) = _lines(err, "sglang_group")
    assert line.startswith(f"{_cluster_yml(tmp_path)}:"), line
    assert "all hosts: variable sglang_group: 'my group' is not a simple word" in line, line


# ------------------------------------------------ the rules on plain values
def _hostvars(groups: list[str | None], **extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    base = {"fabric_a_subnet": "192.168.100.0/24", "fabric_b_subnet": "192.168.101.0/24"}
    out = {}
    for i, (host, group) in enumerate(zip(SPARKS, groups, strict=True), 1):
        hv: dict[str, Any] = {
            **base,
            "ansible_host": f"10.0.0.{i}",
            "node_rank": i - 1,
            "fabric_a_ip": f"192.168.100.{i}",
            "fabric_b_ip": f"192.168.101.{i}",
        }
        if group is not None:
            hv["sglang_group"] = group
        out[host] = {**hv, **extra.get(host, {})}
    return out


def _check(hostvars: dict[str, dict[str, Any]]) -> list[str]:
    return [str(p) for p in inventory_rules.check({"sparks": SPARKS}, hostvars, ROLES)]


def test_default_group_keeps_todays_cluster_wide_messages() -> None:
    every = {h: {"sglang_tp_size": 8, "sglang_nnodes": 3} for h in SPARKS}
    assert _check(_hostvars([None] * 4, **every)) == [
        "all hosts: variable sglang_nnodes: 3 nodes does not match the 4 Sparks in [sparks] "
        "(one SGLang process per Spark)",
        "all hosts: variable sglang_tp_size: TP 8 does not match 4 Sparks x 1 GPU(s) per node",
    ]
    # the same on one host only (not noticed before groups) names that host
    assert _check(_hostvars([None] * 4, spark2={"sglang_tp_size": 8})) == [
        "host spark2: variable sglang_tp_size: TP 8 does not match the 4 Sparks of SGLang group "
        "'main' (spark1, spark2, spark3, spark4) x 1 GPU(s) per node"
    ]


def test_groups_are_ordered_by_head_and_members_by_node_rank() -> None:
    hostvars = _hostvars(["b", "a", "b", "a"])
    assert inventory_rules.sglang_groups(list(reversed(SPARKS)), hostvars) == {
        "b": ["spark1", "spark3"],
        "a": ["spark2", "spark4"],
    }
    assert _check(hostvars) == []


def test_gpus_per_node_count_per_group() -> None:
    two_gpus = {h: {"sglang_gpus_per_node": 2, "sglang_tp_size": 4} for h in ("spark1", "spark2")}
    assert _check(_hostvars(["a", "a", "b", "b"], **two_gpus)) == []
    assert _check(_hostvars(["a", "a", "b", "b"], spark3={"sglang_tp_size": 4})) == [
        "host spark3: variable sglang_tp_size: TP 4 does not match the 2 Sparks of SGLang group "
        "'b' (spark3, spark4) x 1 GPU(s) per node"
    ]


def test_preflight_filter_reports_the_group_problems_too() -> None:
    """The preflight play runs the same module (a link) on Ansible's hostvars."""
    module = load_file("sparkctl_inventory_filter_groups", FILTER)
    problems_filter = module.FilterModule().filters()["sparkctl_inventory_problems"]
    hostvars = _hostvars(["a", "a", "b", "b"], spark4={"sglang_nnodes": 4})
    assert problems_filter(hostvars, {"sparks": SPARKS}, str(ROLES), str(ROOT / "playbooks")) == [
        "host spark4: variable sglang_nnodes: 4 nodes does not match the 2 Sparks of SGLang "
        "group 'b' (spark3, spark4) (one SGLang process per Spark) (set sglang_nnodes: 2 for "
        "this group, or leave it unset: it defaults to the group's size)"
    ]
