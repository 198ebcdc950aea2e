"""The bench's node sample: its command run here by bash, as ssh runs it on a node."""

from __future__ import annotations

import socket
import subprocess
import threading

import pytest

from sparkctl.bench.sample import MARK, TwinRate, parse_sample, rates, sample_command

pytestmark = pytest.mark.unit


def _sample(twins: list[tuple[str, str, str]]) -> str:
    return subprocess.run(
        ["bash", "-c", sample_command(twins)], capture_output=True, text=True, check=True
    ).stdout


def _send(address: tuple[str, int], size: int) -> None:
    with socket.create_connection(address) as out:
        out.sendall(b"x" * size)


def test_a_sample_reads_memory_and_a_twins_bytes_and_two_make_a_rate() -> None:
    """Loopback stands in for a twin's netdev (its counters are the kernel's); the RoCE
    device and nvidia-smi are absent here, and say so with no figure."""
    twins = [("a", "lo", "rocep1s0f0")]
    first = parse_sample(_sample(twins))
    payload = 4 << 20
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = threading.Thread(target=_send, args=(server.getsockname(), payload))
        sender.start()
        conn, _ = server.accept()
        with conn:
            got = 0
            while got < payload:
                got += len(conn.recv(1 << 20))
        sender.join()
    second = parse_sample(_sample(twins))
    assert first is not None and second is not None
    assert first.mem_available is not None and first.mem_available > 0
    assert first.twins["a"].source == "netdev"  # no /sys/class/infiniband/rocep1s0f0 here
    assert (first.gpu_util, first.power_w) == (None, None)  # no nvidia-smi here
    r = rates(first, second)["a"]
    assert r.source == "netdev" and r.tx_bytes_per_s * (second.t - first.t) >= payload


def test_rdma_port_counters_count_four_bytes_and_win_over_the_netdevs() -> None:
    text = "\n".join(
        [
            "ssh banner",
            MARK,
            "t 100.0",
            "mem_kb 1000",
            "net a 10 20",
            "rdma a 5 7",
            "net b - -",
            "gpu 96,41.52,52",
        ]
    )
    s = parse_sample(text)
    assert s is not None
    assert (s.t, s.mem_available, s.gpu_util, s.power_w, s.temp_c) == (
        100.0,
        1024000,
        96,
        41.52,
        52,
    )
    assert s.twins["a"].rx_bytes == 20 and s.twins["a"].tx_bytes == 28
    assert s.twins["a"].source == "rdma" and "b" not in s.twins
    assert parse_sample("Connection refused") is None


def test_a_counter_that_went_back_gives_no_rate() -> None:
    a = parse_sample(f"{MARK}\nt 1\nnet a 100 100")
    b = parse_sample(f"{MARK}\nt 3\nnet a 50 300")
    assert a is not None and b is not None
    assert rates(a, b) == {}
    c = parse_sample(f"{MARK}\nt 3\nnet a 300 500")
    assert c is not None
    assert rates(a, c) == {"a": TwinRate(100.0, 200.0, "netdev")}
    assert rates(a, c)["a"].utilisation(400.0) == 0.5
