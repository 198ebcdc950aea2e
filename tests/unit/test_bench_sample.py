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


def test_a_sample_lists_the_fabric_addresses_connections_and_the_servers_memory() -> None:
    """A live loopback connection stands in for a rank's link: ss lists both of its
    ends with their RTT and bytes; the server's memory is what its command prints."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        with client, conn:
            for _ in range(20):
                client.sendall(b"y" * 4096)
                got = 0
                while got < 4096:
                    got += len(conn.recv(65536))
            text = subprocess.run(
                [
                    "bash",
                    "-c",
                    sample_command(
                        [("a", "lo", "")], fabric_addresses=["127.0.0.1"], server_memory="echo 4096"
                    ),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
    s = parse_sample(text)
    assert s is not None and s.server_memory == 4096
    assert s.twins["a"].speed_mbps is None  # lo has no link speed
    ours = [c for c in s.tcp if c.local == c.peer == "127.0.0.1"]
    assert len(ours) >= 2  # both ends of the connection
    assert max(c.bytes_sent for c in ours) >= 20 * 4096
    assert all(c.rtt_ms is not None and c.rtt_ms > 0 for c in ours), ours


def test_speed_cnp_and_clock_lines_and_a_field_the_driver_refuses() -> None:
    text = "\n".join(
        [
            MARK,
            "t 5",
            "net a 1 2",
            "rdma a 1 1",
            "speed a 100000",
            "cnp a 7 9",
            "net b 3 4",
            "speed b -1",
            "srv [not set]",
            "gpu -",
            "clk 2405,0x0000000000000008",
        ]
    )
    s = parse_sample(text)
    assert s is not None
    a, b = s.twins["a"], s.twins["b"]
    assert (a.speed_mbps, a.cnp_sent, a.cnp_handled) == (100000, 7, 9)
    assert (b.speed_mbps, b.cnp_sent, b.source) == (None, None, "netdev")
    assert (s.clock_sm_mhz, s.clock_event_reasons) == (2405, 0x8)
    assert (s.gpu_util, s.server_memory, s.tcp) == (None, None, ())
