"""ib_write_bw between node pairs (sparkctl/validate/perftest.py), with a fake runner.

The runner stands in for SSH: it answers the GID record and prints, for each
ib_write_bw client, a result block in perftest's report layout (header
``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]``). The
real-hardware path cannot run here (no RDMA devices); this checks what is
launched where, and how the figures are judged.
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path

from sparkctl.plan import Plan
from sparkctl.report.model import Thresholds
from sparkctl.validate import perftest
from tests.unit import plans

TH = Thresholds(line_rate_gbytes=25.0, min_fraction=0.875, judged_sizes=2, baseline_tolerance=0.1)


def _plan() -> Plan:
    """Four nodes, both twins each (the twins' ibdevs and fabric addresses are what
    ib_write_bw is run with)."""
    return plans.plan(["spark1", "spark2", "spark3", "spark4"])


RULE = "-" * 87


def _block(gbits: float) -> str:
    return (
        f"{RULE}\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        f" 65536      1080730          0.00               {gbits:.2f}              0.180116\n"
        f"{RULE}\n"
    )


class FakeRunner:
    def __init__(self, rates: dict[tuple[str, str], float], gid: str = "3") -> None:
        self.rates = rates  # (client host, server address) -> Gb/s
        self.gid = gid
        self.calls: list[tuple[str, list[str]]] = []
        self.lock = threading.Lock()

    def __call__(self, host: str, command: str, timeout: int) -> tuple[int, str]:
        argv = shlex.split(command)
        with self.lock:
            self.calls.append((host, argv))
        if argv[0] == "cat":
            return 0, f"ROCE_GID_INDEX={self.gid}\nROCE_NETDEVS=a,b\n"
        if argv[-1].startswith("192.168."):
            rate = self.rates.get((host, argv[-1]))
            if rate is None:
                return 1, "Couldn't connect to 192.168.x.x:18515\nUnable to init the socket"
            return 0, _block(rate)
        return 0, "server side\n"


def test_both_twins_of_each_pair_at_once_and_judged_as_one_port(tmp_path: Path) -> None:
    plan = _plan()
    runner = FakeRunner(
        {
            ("spark1", "192.168.100.14"): 92.57,
            ("spark1", "192.168.101.14"): 97.28,
            ("spark2", "192.168.100.13"): 60.0,
            ("spark2", "192.168.101.13"): 60.0,
        }
    )
    checks = perftest.run_all(plan, ["spark1", "spark2", "spark3", "spark4"], runner, TH, tmp_path)
    by_host = {c.host: c for c in checks}
    assert set(by_host) == {"spark1", "spark2"}  # first round: spark1-spark4, spark2-spark3
    good, slow = by_host["spark1"], by_host["spark2"]
    # Both twins of one port at once, as NVIDIA's perftest guide measured them: 189.85 of 200.
    assert good.outcome == "passed" and "92.57 + 97.28 = 189.85 Gb/s" in good.message
    assert good.subject == "-> spark4 (both twins)"
    assert slow.outcome == "failed" and "120.00 Gb/s, 60%" in slow.message
    clients = [argv for host, argv in runner.calls if argv[-1].startswith("192.168.")]
    servers = [
        (host, argv)
        for host, argv in runner.calls
        if "ib_write_bw" in argv and not argv[-1].startswith("192.168.")
    ]
    # Each client names its RoCE device, the GID index read from the record, its own port.
    devices = {(argv[argv.index("-d") + 1], argv[argv.index("-x") + 1]) for argv in clients}
    assert devices == {("rocep1s0f1", "3"), ("roceP2p1s0f1", "3")}
    assert {argv[argv.index("-p") + 1] for argv in clients} == {"18515", "18516"}
    assert {h for h, _ in servers} == {"spark3", "spark4"}
    assert (tmp_path / "ib_write_bw-spark1-spark4-b.log").read_text().count("BW average") == 1


def test_a_client_that_cannot_connect_fails_naming_the_device(tmp_path: Path) -> None:
    runner = FakeRunner({("spark1", "192.168.100.12"): 95.0})
    check = perftest.run_pair(_plan(), "spark1", "spark2", runner, th=TH, run_dir=tmp_path)
    assert check.outcome == "failed"
    assert check.message.startswith("roceP2p1s0f1 to spark2: exit 1")


def test_no_gid_record_is_an_error_not_a_guess(tmp_path: Path) -> None:
    runner = FakeRunner({}, gid="")
    check = perftest.run_pair(_plan(), "spark1", "spark2", runner, th=TH, run_dir=tmp_path)
    assert check.outcome == "error" and "ROCE_GID_INDEX" in check.message
    assert not any("ib_write_bw" in argv for _, argv in runner.calls)
