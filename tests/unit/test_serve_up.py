"""serve up's waiting and explaining (sparkctl/serve/up.py), with a scripted cluster.

No SSH: a fake cluster answers unit states, the head's health is a local HTTP
server (or nothing), and journal lines are put on the followers' queue from
real log fixtures (tests/fixtures/sglang, sources in SOURCES.md).
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import SparkctlError
from sparkctl.plan import Plan, SglangPlan
from sparkctl.serve import up
from sparkctl.serve.startup import reader as logs
from tests.unit import plans
from tests.unit.test_serve_probe import _Health as Health

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
# shutdown() waits for serve_forever to look at its flag, every poll_interval (0.5 s by
# default).
QUICK_SHUTDOWN = {"poll_interval": 0.01}


@dataclass
class FakeCluster:
    base_url: str = "http://127.0.0.1:9"  # discard port: nothing answers
    nodes: list[str] = field(default_factory=lambda: ["spark1", "spark2", "spark3", "spark4"])
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    environ: dict[str, str] = field(default_factory=dict)  # node -> SGLANG_HOST_IP it runs with
    unit: str = "sparkctl-sglang.service"
    tls_ca_file: str | None = None
    rdma_expected: bool = False

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def cluster(self) -> FakeCluster:
        return self  # its own one TP group (groups() below)

    @property
    def plan(self) -> Plan:
        return plans.plan(self.nodes)  # spark<i>'s fabric_a_ip is 192.168.100.1<i>

    def rank(self, node: str) -> int:
        return self.nodes.index(node)

    def sglang(self, node: str | None = None) -> SglangPlan:
        # the container method: /usr/bin/docker, container sparkctl-sglang
        s = self.plan.node(node or self.head).sglang
        return dataclasses.replace(s, rdma_expected=self.rdma_expected)

    def label(self, node: str) -> str:
        return f"rank {self.rank(node)} ({node})"

    def groups(self) -> list[Any]:
        return [self]  # one TP group, headed by the first node

    def sudo(self, node: str) -> str:
        return ""

    def unit_states(self, nodes: list[str] | None = None) -> dict[str, dict[str, str]]:
        return {
            n: self.states.get(n, {"ActiveState": "active", "SubState": "running"})
            for n in self.nodes
        }

    def each(self, nodes: list[str], command: str, timeout: int = 60) -> dict[str, tuple[int, str]]:
        return {n: self.run(n, command.replace("{sudo}", self.sudo(n)), timeout) for n in nodes}

    def run(self, node: str, command: str, timeout: int = 60) -> tuple[int, str]:
        if command.startswith(
            "/usr/bin/docker inspect --format '{{json .Config.Env}}' sparkctl-sglang"
        ):
            # the container's environment as docker inspect prints it (a JSON list)
            ip = self.environ.get(node, self.plan.node(node).fabric_a_ip)
            return 0, json.dumps(["PATH=/usr/bin", f"SGLANG_HOST_IP={ip}", "HOME=/x"]) + "\n"
        return 1, ""


class FakeFollowers:
    def __init__(self) -> None:
        self.lines: queue.Queue[tuple[str, str]] = queue.Queue()

    def feed(self, node: str, lines: list[str]) -> None:
        for line in lines:
            self.lines.put((node, line))


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(up, "POLL_S", 0.05)


def test_ready_when_the_head_answers_health() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True).start()
    try:
        cluster = FakeCluster(base_url=f"http://127.0.0.1:{server.server_address[1]}")
        followers = FakeFollowers()
        followers.feed("spark1", _lines("clean_init_to_load_sglang_pr11716.log"))
        result = up.wait_up(cluster, followers, timeout=30)  # type: ignore[arg-type]
    finally:
        server.shutdown()
    assert result.ok and result.message == "ready"
    assert all(r.phase >= logs.Phase.HTTP_READY for r in result.ranks.values())


def test_a_fatal_signature_ends_the_wait_and_names_the_rank() -> None:
    cluster = FakeCluster()
    followers = FakeFollowers()
    followers.feed("spark3", _lines("gloo_connectfullmesh_sglang3226.log"))
    result = up.wait_up(cluster, followers, timeout=30)  # type: ignore[arg-type]
    assert not result.ok and result.failed == ["spark3"]
    text = "\n".join(up.explain(result, 30))
    assert text.startswith("rank 2 (spark3) a rank failed")
    assert "GLOO_SOCKET_IFNAME" in text


@pytest.mark.parametrize(
    ("rdma", "log", "failed"),
    [
        (True, "nccl_socket_transport_sglang3398.log", ["spark2"]),
        (True, "nccl_ib_transport_nccl707.log", []),
        (False, "nccl_socket_transport_sglang3398.log", []),  # the lab: no RDMA, sockets expected
    ],
)
def test_sockets_where_rdma_is_expected_fail_the_start_up(
    rdma: bool, log: str, failed: list[str]
) -> None:
    """NCCL's silent fallback to TCP (no /dev/infiniband in the container, RDMA unusable)
    serves, about 2.5x slower: on a real profile serve up fails it and says why."""
    cluster = FakeCluster(rdma_expected=rdma)
    followers = FakeFollowers()
    followers.feed("spark2", _lines(log))
    result = up.wait_up(cluster, followers, timeout=2)  # type: ignore[arg-type]
    assert not result.ok
    if failed:
        assert (result.message, result.failed) == ("a rank failed", failed)
        text = "\n".join(up.explain(result, 2))
        assert "NCCL moves the data over TCP sockets, not RDMA" in text
        assert "/dev/infiniband" in text
    else:
        assert result.message == "timed out"


def test_a_stopped_units_last_lines_are_waited_for_before_it_is_explained() -> None:
    """systemd says the unit stopped before journalctl -f over ssh has delivered why."""
    cluster = FakeCluster(
        states={"spark3": {"ActiveState": "activating", "SubState": "auto-restart"}}
    )
    followers = FakeFollowers()
    late = threading.Timer(
        0.5,
        followers.feed,
        (
            "spark3",
            [
                "sparkctl sglang launcher: cannot read the secrets file "
                "/etc/sparkctl/sglang-secrets.env:"
                " No such file or directory"
            ],
        ),
    )
    late.start()
    result = up.wait_up(cluster, followers, timeout=30)  # type: ignore[arg-type]
    late.join()
    assert (result.ok, result.failed) == (False, ["spark3"])
    assert "its secrets file did not reach it" in "\n".join(up.explain(result, 30))


def test_a_unit_in_auto_restart_ends_the_wait() -> None:
    cluster = FakeCluster(
        states={"spark2": {"ActiveState": "activating", "SubState": "auto-restart"}}
    )
    result = up.wait_up(cluster, FakeFollowers(), timeout=30)  # type: ignore[arg-type]
    assert not result.ok and result.failed == ["spark2"]
    assert result.message == "a rank's unit stopped"


def test_a_hang_after_nccl_init_names_the_rank_with_the_wrong_host_ip() -> None:
    cluster = FakeCluster(environ={"spark2": "10.77.0.12"})
    followers = FakeFollowers()
    for node in cluster.nodes:  # every rank got through NCCL init, then nothing
        followers.feed(node, _lines("clean_init_ends_sglang_pr21752.log"))
    result = up.wait_up(cluster, followers, timeout=0.5)  # type: ignore[arg-type]
    assert not result.ok and result.message == "timed out"
    assert result.failed == ["spark2"]
    text = "\n".join(up.explain(result, 0.5))
    assert "SGLANG_HOST_IP=10.77.0.12, not its fabric address 192.168.100.12" in text
    assert "fix:" in text and "SGLANG_HOST_IP" in text.split("fix:")[1]


def test_a_plain_timeout_names_the_ranks_that_got_least_far() -> None:
    cluster = FakeCluster()
    followers = FakeFollowers()
    for node in ("spark1", "spark2", "spark4"):
        followers.feed(node, _lines("clean_init_to_load_sglang_pr11716.log"))
    result = up.wait_up(cluster, followers, timeout=0.5)  # type: ignore[arg-type]
    assert result.failed == ["spark3"]
    assert up.explain(result, 0.5)[0].startswith("rank 2 (spark3) timed out in phase starting")


# `systemctl show -p ExecStart --value` of the container unit (systemd 252, as captured in
# tests/unit/test_sglang_role.py), cut to the words that matter here.
_EXECSTART = (
    "{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run --rm --name sparkctl-sglang "
    "--network host --volume /var/lib/sparkctl/models:/var/lib/sparkctl/models:ro "
    "--volume /srv/models/:/srv/models/:ro --volume /a:/b:ro "
    "lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:" + "ab" * 32 + " python3 "
    "/usr/local/lib/sparkctl/sglang-launcher.py -- --model-path "
    "/var/lib/sparkctl/models/current ; ignore_errors=no ; pid=0 }"
)


@dataclass
class _MountCluster(FakeCluster):
    targets: dict[str, str] = field(default_factory=dict)
    execstart: str = _EXECSTART

    def sglang(self, node: str | None = None) -> SglangPlan:
        s = super().sglang(node)
        return dataclasses.replace(s, model_path="/var/lib/sparkctl/models/current")

    def run(self, node: str, command: str, timeout: int = 60) -> tuple[int, str]:
        assert command == (
            "systemctl show -p ExecStart --value sparkctl-sglang.service; "
            "echo @@; readlink -f -- /var/lib/sparkctl/models/current"
        ), command
        return 0, f"{self.execstart}\n@@\n{self.targets.get(node, '')}\n"


def test_a_model_outside_the_containers_mounts_is_refused_before_any_rank_starts() -> None:
    inside = dict.fromkeys(("spark1", "spark2", "spark3", "spark4"), "/var/lib/sparkctl/models/llm")
    up.check_model_visible(_MountCluster(targets={**inside, "spark1": "/srv/models/llm"}))  # type: ignore[arg-type]
    up.check_model_visible(_MountCluster(targets={"spark2": inside["spark2"]}))  # type: ignore[arg-type]  # not synced
    # a host path mounted elsewhere in the container does not make the link's target visible
    with pytest.raises(
        SparkctlError,
        match=r"spark3: /var/lib/sparkctl/models/current -> "
        r"/srv/other/llm \(mounted: ",
    ) as err:
        up.check_model_visible(
            _MountCluster(targets={**inside, "spark3": "/srv/other/llm", "spark4": "/a/llm"})  # type: ignore[arg-type]
        )
    assert "spark4" in str(err.value) and "spark1" not in str(err.value)
    # a venv unit runs on the host: nothing to check
    venv = "{ path=/opt/v/bin/python3 ; argv[]=/opt/v/bin/python3 /l.py -- ; ignore_errors=no }"
    up.check_model_visible(_MountCluster(targets={"spark1": "/x/y"}, execstart=venv))  # type: ignore[arg-type]


def test_a_ready_head_the_controller_cannot_reach_is_not_blamed_or_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every unit runs and the head's journal said "fired up and ready", but /health does
    not answer here (nothing listens on the discard port): after READY_GRACE_S the wait
    ends as unreachable, long before sglang_serve_timeout, naming no rank as failed."""
    monkeypatch.setattr(up, "READY_GRACE_S", 0.2)
    monkeypatch.setenv("HTTP_PROXY", "http://u:pw@127.0.0.1:9")
    cluster = FakeCluster()
    followers = FakeFollowers()
    followers.feed("spark1", _lines("clean_init_to_load_sglang_pr11716.log"))
    followers.feed("spark1", _lines("clean_ready_sglang32255.log"))
    result = up.wait_up(cluster, followers, timeout=600)  # type: ignore[arg-type]
    assert not result.ok and result.message == up.UNREACHABLE, result.message
    assert result.seconds < 600
    assert result.ranks["spark1"].phase is logs.Phase.READY
    err = result.failure()
    assert err is not None and err.code == 3 and "nothing was restarted or stopped" in err.message
    text = "\n".join(result.explanation)
    assert "rank 0 (spark1): every rank's unit is running and its journal says" in text
    assert "HTTP_PROXY is set" in text and "u:pw" not in text


def test_a_broken_groups_ranks_are_killed_after_a_short_grace(tmp_path: Path) -> None:
    """The watchdog's stop (grace 10 s): the container method stops the container itself
    with docker's --time (the unit's process is only the docker CLI), a venv unit is
    killed by systemd after the grace; either way the unit's stop follows. serve up's and
    serve down's stop keep the unit's own grace."""
    inv = plans.two_sparks(tmp_path)

    def cluster(method: str) -> Any:
        return plans.cluster(inv, {"install_method": method}, lambda *a: (0, ""), tmp_path)

    c = cluster("container")
    s = c.sglang("spark1")
    assert up.stop_command(c, "spark1") == f"{{sudo}}systemctl stop {c.unit}"
    assert up.stop_command(c, "spark1", up.BROKEN_GRACE_S) == (
        f"{{sudo}}{s.engine} stop --time 10 {s.container_name} >/dev/null 2>&1; "
        f"{{sudo}}systemctl stop {c.unit}"
    )
    v = cluster("venv")
    assert up.stop_command(v, "spark1", 10) == (
        f"{{sudo}}timeout 10 systemctl stop {v.unit} || "
        f"{{sudo}}systemctl kill --signal=SIGKILL {v.unit}; {{sudo}}systemctl stop {v.unit}"
    )
    sent: list[tuple[str, str]] = []

    def record(node: str, cmd: str, _timeout: int) -> tuple[int, str]:
        sent.append((node, cmd))
        return 0, ""

    recorder = plans.cluster(inv, {}, record, tmp_path)
    up.stop_units(recorder, 10)
    assert [n for n, _ in sent] == ["spark1", "spark2"]  # the head, then its worker
    assert all("stop --time 10" in cmd and "sudo" not in cmd for _, cmd in sent)
