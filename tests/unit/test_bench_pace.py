"""The pace-setter: the node or link apart from the other ranks of its group."""

from __future__ import annotations

import pytest

from sparkctl.bench import pace
from sparkctl.bench.sample import NodeSample, TcpConn, TwinCounters

pytestmark = pytest.mark.unit

LINE = 125e6  # bytes/s: the lab's 1000 Mbit/s twin
GROUP = [["spark1", "spark2", "spark3", "spark4"]]


def _samples(
    node_rate: float,
    *,
    paths: dict[str, float] | None = None,
    busy: dict[str, float] | None = None,
    speed: int | None = None,
    cnp_per_s: int = 0,
    clock: float | None = None,
    power: float | None = None,
    util: float | None = None,
    reasons: int | None = None,
    n: int = 5,
) -> list[NodeSample]:
    """``n`` one-second samples of a node whose twin a moves ``node_rate`` bytes/s and whose
    fabric connections to each peer address of ``paths`` deliver up to that many Mb/s
    (path-limited samples, with an app-limited one faster between them) and are busy
    (data in flight) ``busy[peer]`` of each second (10 % where not given)."""
    out = []
    for i in range(n):
        moved = int(node_rate * i)
        conns = tuple(
            TcpConn(
                "10.0.0.9",
                peer,
                0.3,
                4096 * i,
                4096 * i,
                40000 + k,
                5000,
                (mbps * 1e6 * (1 - 0.1 * (i % 2))) if i != 2 else 25e9,
                i == 2,  # loopback-fast, but the sender's own pace: not the path's
                int(1000 * i * (busy or {}).get(peer, 0.1)),
            )
            for k, (peer, mbps) in enumerate((paths or {"10.0.0.1": 900.0}).items())
        )
        out.append(
            NodeSample(
                t=100.0 + i,
                mem_available=1 << 30,
                twins={
                    "a": TwinCounters(moved, moved, "netdev", speed, cnp_per_s * i, 0),
                    "b": TwinCounters(0, 0, "netdev", speed),
                },
                gpu_util=util,
                power_w=power,
                clock_sm_mhz=clock,
                clock_event_reasons=reasons,
                tcp=conns,
            )
        )
    return out


ADDRESSES = {f"10.0.0.{i}": f"spark{i}" for i in range(1, 5)}


def _figures(samples: dict[str, list[NodeSample]]) -> dict[str, pace.NodeFigures]:
    out = {}
    for node, s in samples.items():
        f = pace.node_figures(node, s, LINE)
        assert f is not None
        out[node] = f
    return out


def test_equal_peers_name_nobody() -> None:
    figs = _figures({n: _samples(30e6) for n in GROUP[0]})
    assert pace.findings(GROUP, figs, speed_mbps=1000) == []


def test_a_shaped_port_is_named_by_its_senders_busy_connections_with_figures() -> None:
    """The lab's quarter-rate port under a star through TP0: equal bytes on every
    worker's link, so no twin is apart. The head's connections to the worker behind the
    shaped port have data in flight far longer than to the others (as measured on the
    lab at concurrency 16: 0.42 of the level against 0.10 and 0.16)."""
    star = {"10.0.0.2": 3700.0, "10.0.0.3": 282.0, "10.0.0.4": 990.0}
    held = {"10.0.0.2": 0.10, "10.0.0.3": 0.42, "10.0.0.4": 0.16}
    samples = {"spark1": _samples(90e6, paths=star, busy=held)}
    samples |= {f"spark{i}": _samples(30e6) for i in (2, 3, 4)}
    found = pace.findings(GROUP, _figures(samples), speed_mbps=1000, addresses=ADDRESSES)
    assert found, "nobody named"
    top = found[0]
    assert (top.node, top.subject) == ("spark3", "link")
    assert top.figures == pytest.approx(
        {
            "busy_share": 0.42,
            "peers_busy_share": 0.16,
            "delivery_mbps": 282.0,
            "peers_delivery_mbps": (3700.0 + 990.0) / 2,
        }
    )
    assert top.message == (
        "spark1's connections to it had data in flight 42% of the level, to its peers typically 16%"
    )
    assert len(found) == 1
    # unshaped, as measured: the last worker in the head's order waits behind the others
    # (0.10, 0.18, 0.26 at concurrency 4: 1.43x the median); a path-limited delivery far
    # below the others' alone (a healthy peer measured 4.4x apart) names nobody either;
    # nor do connections whose nodes are not known
    even = {
        "spark1": _samples(
            90e6,
            paths={"10.0.0.2": 1469.0, "10.0.0.3": 6443.0, "10.0.0.4": 6443.0},
            busy={"10.0.0.2": 0.10, "10.0.0.3": 0.18, "10.0.0.4": 0.26},
        )
    }
    even |= {f"spark{i}": _samples(30e6) for i in (2, 3, 4)}
    assert pace.findings(GROUP, _figures(even), speed_mbps=1000, addresses=ADDRESSES) == []
    assert pace.findings(GROUP, _figures(samples), speed_mbps=1000) == []
    # a peer apart but mostly idle (under BUSY_MIN of the level) is no bound
    idle = {"spark1": _samples(90e6, busy={"10.0.0.2": 0.01, "10.0.0.3": 0.15, "10.0.0.4": 0.02})}
    idle |= {f"spark{i}": _samples(30e6) for i in (2, 3, 4)}
    assert pace.findings(GROUP, _figures(idle), speed_mbps=1000, addresses=ADDRESSES) == []


def test_a_twin_at_line_rate_while_its_peers_idle_is_named() -> None:
    samples = {n: _samples(20e6) for n in GROUP[0]}
    samples["spark1"] = _samples(118e6)  # the star's centre at 94 % of its line
    (top, *_) = pace.findings(GROUP, _figures(samples), speed_mbps=1000)
    assert (top.node, top.subject) == ("spark1", "link (twin a)")
    assert top.figures["utilisation"] == pytest.approx(118e6 / LINE, rel=1e-3)
    assert "94% of its line rate" in top.message


def test_a_port_negotiated_down_and_congestion_and_throttling_are_named() -> None:
    samples = {n: _samples(20e6, speed=200000, clock=2400, power=40, util=90) for n in GROUP[0]}
    samples["spark2"] = _samples(20e6, speed=100000, clock=2400, power=40, util=90)
    samples["spark3"] = _samples(20e6, speed=200000, cnp_per_s=500, clock=2400, power=40, util=90)
    samples["spark4"] = _samples(
        20e6, speed=200000, clock=1800, power=22, util=90, reasons=pace.HW_THERMAL
    )
    found = pace.findings(GROUP, _figures(samples), speed_mbps=200000)
    by_node = {(f.node, f.subject): f for f in found}
    assert "100000 Mb/s" in by_node[("spark2", "link (twin a)")].message
    assert "500 congestion notifications" in by_node[("spark3", "link (twin a)")].message
    gpu = [f.message for f in found if f.node == "spark4"]
    assert any("hw_thermal_slowdown" in m for m in gpu), gpu
    assert any("SM clock 1800 MHz, its peers' 2400" in m for m in gpu), gpu
    assert any("power draw 22 W, its peers' 40 W" in m for m in gpu), gpu
    assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)
    assert {f.node for f in found} == {"spark2", "spark3", "spark4"}


def test_a_group_of_one_and_a_node_with_one_sample_name_nobody() -> None:
    figs = _figures({"spark1": _samples(120e6, paths={"10.0.0.2": 9.0, "10.0.0.3": 900.0})})
    assert pace.findings([["spark1"]], figs, addresses=ADDRESSES) == []
    assert pace.node_figures("spark2", _samples(1e6, n=1), LINE) is None


def test_a_connection_that_moved_nothing_gives_no_rtt() -> None:
    """An idle connection keeps its last RTT: only intervals that moved bytes count."""
    idle = [
        NodeSample(
            100.0 + i,
            None,
            {},
            tcp=(TcpConn("10.0.0.1", "10.0.0.2", 50.0, 7, 7, 1, 2, 1e6, False),),
        )
        for i in range(4)
    ]
    f = pace.node_figures("spark1", idle, LINE)
    assert f is not None and f.peer_delivery_bps == {}
