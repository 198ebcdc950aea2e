"""Code that reads node tool output reads it through sparkctl.tool_output, on real outputs.

tests/unit/test_tool_output.py tests the parser itself; these feed its
readers elsewhere in sparkctl the real outputs under tests/fixtures/<tool>/
(each with its SOURCES.md), so a reader cannot drift back to a parse of its own.
"""

from __future__ import annotations

from pathlib import Path

from sparkctl.inventory import Inventory, Node
from sparkctl.serve.cluster import Cluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(tool: str, name: str) -> str:
    return (FIXTURES / tool / name).read_text()


# ---------------------------------------------------------------- serve: systemctl show
def _cluster(tmp_path: Path, answers: dict[str, tuple[int, str]]) -> Cluster:
    nodes = tuple(Node(f"spark{i + 1}", i, f"10.77.0.{11 + i}",
                       {"a": f"192.168.100.{11 + i}"}) for i in range(2))
    inv = Inventory(path=tmp_path / "x.ini", cluster="sim", nodes=nodes, switch=None, ports=(),
                    hostvars={n.name: {"ansible_user": "root"} for n in nodes})
    sglang = {"unit": "sparkctl-sglang.service", "port": 30000}
    plan = {"hosts": {n.name: {"node_rank": n.rank, "sglang": sglang} for n in nodes}}
    return Cluster(inv=inv, plan=plan, run_dir=tmp_path, ssh_config=tmp_path / "cfg",
                   runner=lambda host, cmd, timeout: answers[host])


def test_serve_reads_unit_states_with_the_one_systemctl_show_parser(tmp_path: Path) -> None:
    # A real `systemctl show` (RHEL 7.9, systemd 219): key=value lines, empty values too.
    real = fixture("systemctl", "rhel7-show-all-excerpt.txt")
    states = _cluster(tmp_path, {"spark1": (0, real), "spark2": (
        255, "ssh: connect to host 10.77.0.12 port 22: Connection refused\n")}).unit_states()
    assert (states["spark1"]["ActiveState"], states["spark1"]["SubState"]) == ("inactive",
                                                                               "dead")
    assert states["spark1"]["DropInPaths"] == ""
    assert states["spark2"] == {
        "ActiveState": "unknown", "SubState": "unreachable",
        "error": "ssh: connect to host 10.77.0.12 port 22: Connection refused"}
