"""sparkctl.tool_output, the one parser of node tool output, on the tools' own output.

The first part keeps the node checks' cases (they were sparkctl/checks/parse.py's);
the second reads the real outputs under tests/fixtures/<tool>/ (each directory's
SOURCES.md says where every file came from), including the known variants: the
R610 banner (CUDA UMD Version), a GB10's [N/A] memory fields, ibdev2netdev with
the P2 twins first, show_gids with spaces or tabs, ib_write_bw in Gb/sec and MB/sec.
"""

# ruff: noqa: E501 -- tool output is quoted as the tools print it
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.checks.test_node import _env_diff
from sparkctl.collection import tool_output as parse


def _ping(sent: int, received: int, error: str | None) -> dict[str, object]:
    return {"sent": sent, "received": received, "error": error}


# ---------------------------------------------------------------- versions


def test_version_tuple_reads_driver_and_cuda_versions() -> None:
    assert parse.version_tuple("580.95.05") == (580, 95, 5)
    assert parse.version_tuple("13.0") == (13, 0)
    assert parse.version_tuple("v2.28.9-1") == (2, 28, 9, 1)


def test_version_tuple_refuses_text_without_a_number() -> None:
    with pytest.raises(ValueError, match=r"no version number in '\[N/A\]'"):
        parse.version_tuple("[N/A]")


@pytest.mark.parametrize(
    ("have", "want", "ok"),
    [
        ("580.95.05", "580.0", True),
        ("580.95.05", "580.95.05", True),
        ("575.57.08", "580.0", False),
        ("13.0", "13.0", True),
        ("13", "13.0", True),  # missing parts count as 0
        ("13.0", "13", True),
        ("12.9", "13.0", False),
        ("13.1", "13.0.2", True),
        ("580.9", "580.10", False),  # numeric, not string order
    ],
)
def test_at_least_compares_dotted_versions(have: str, want: str, ok: bool) -> None:
    assert parse.at_least(have, want) is ok


# ---------------------------------------------------------------- nvidia-smi


def test_nvidia_smi_csv_one_gpu_by_header() -> None:
    gpus = parse.nvidia_smi_csv("name, driver_version\nNVIDIA GB10, 580.95.05\n")
    assert gpus == [{"name": "NVIDIA GB10", "driver_version": "580.95.05"}]


def test_nvidia_smi_csv_skips_blank_lines_and_keeps_order() -> None:
    text = (
        "name, driver_version\nNVIDIA H100 80GB HBM3, 570.124.06\n\n"
        "NVIDIA H100 80GB HBM3, 570.124.06\n"
    )
    assert [g["name"] for g in parse.nvidia_smi_csv(text)] == ["NVIDIA H100 80GB HBM3"] * 2


def test_nvidia_smi_csv_refuses_the_driver_failure_text() -> None:
    failure = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    with pytest.raises(ValueError, match="1 fields, header has 2"):
        parse.nvidia_smi_csv(failure, ["name", "driver_version"])
    with pytest.raises(ValueError, match="1 fields, header has 2"):
        parse.nvidia_smi_csv("name, driver_version\nNVIDIA GB10\n")


def test_nvidia_smi_csv_refuses_no_output() -> None:
    with pytest.raises(ValueError, match="nvidia-smi printed no CSV"):
        parse.nvidia_smi_csv("\n")


def test_nvidia_smi_cuda_from_the_banner() -> None:
    # The real GB10 table (tests/fixtures/nvidia-smi/SOURCES.md), not a copy of it here,
    # and its banner line alone.
    table = fixture("nvidia-smi", "gb10-580.95.05-table.txt")
    assert parse.nvidia_smi_cuda(table) == "13.0"
    (line,) = [line for line in table.splitlines() if line.startswith("| NVIDIA-SMI ")]
    assert parse.nvidia_smi_cuda(line) == "13.0"


def test_nvidia_smi_cuda_refuses_a_banner_without_it() -> None:
    with pytest.raises(
        ValueError, match="no 'CUDA Version' or 'CUDA UMD Version' in nvidia-smi's banner"
    ):
        parse.nvidia_smi_cuda("No devices were found\n")


# ---------------------------------------------------------------- ibdev2netdev


def _by_ibdev(text: str) -> dict[str, tuple[str, str]]:
    return {r["ibdev"]: (r["netdev"], r["state"]) for r in parse.ibdev2netdev(text)}


def test_ibdev2netdev_maps_every_device() -> None:
    # A DGX Spark: two ConnectX-7 ports, each seen as two PCIe functions (the "twins");
    # NVIDIA's "Connect two Sparks" (tests/fixtures/ibdev2netdev/SOURCES.md).
    assert _by_ibdev(fixture("ibdev2netdev", "spark-p2-first-port1-up.txt")) == {
        "roceP2p1s0f0": ("enP2p1s0f0np0", "Down"),
        "roceP2p1s0f1": ("enP2p1s0f1np1", "Up"),
        "rocep1s0f0": ("enp1s0f0np0", "Down"),
        "rocep1s0f1": ("enp1s0f1np1", "Up"),
    }


def test_ibdev2netdev_tolerates_blank_lines_and_indentation() -> None:
    assert _by_ibdev("\n  rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)  \n\n") == {
        "rocep1s0f1": ("enp1s0f1np1", "Up")
    }
    assert parse.ibdev2netdev("") == []


def test_ibdev2netdev_verbose_and_refusals() -> None:
    verbose = (
        "0000:01:00.1 rocep1s0f1 (MT4129 - MCX750500B-0D00) NVIDIA ConnectX-7 "
        "fw 28.44.1036 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)"
    )
    assert parse.ibdev2netdev(verbose) == [
        {
            "ibdev": "rocep1s0f1",
            "port": 1,
            "netdev": "enp1s0f1np1",
            "state": "Up",
            "pci": "0000:01:00.1",
            "port_state": "ACTIVE",
        }
    ]
    with pytest.raises(ValueError, match="not an ibdev2netdev line: 'rocep1s0f1 port 1 ==>'"):
        parse.ibdev2netdev("rocep1s0f1 port 1 ==> ")
    with pytest.raises(ValueError, match="not an ibdev2netdev line: 'ibdev2netdev: command"):
        parse.ibdev2netdev("ibdev2netdev: command not found\n")


# ---------------------------------------------------------------- chronyc

TRACKING_SLOW = """\
Reference ID    : C0A86401 (192.168.100.1)
Stratum         : 3
Ref time (UTC)  : Sun Nov 30 06:58:12 2026
System time     : 0.000012345 seconds slow of NTP time
Last offset     : -0.000010231 seconds
RMS offset      : 0.000021876 seconds
Frequency       : 2.345 ppm fast
Residual freq   : -0.001 ppm
Skew            : 0.034 ppm
Root delay      : 0.001234567 seconds
Root dispersion : 0.000456789 seconds
Update interval : 64.2 seconds
Leap status     : Normal
"""

# The head of an isolated cluster serves its own clock ("local stratum 10"):
# chronyd shows the reference 127.127.1.1 with no name.
TRACKING_ISOLATED_HEAD = """\
Reference ID    : 7F7F0101 ()
Stratum         : 10
Ref time (UTC)  : Sun Nov 30 07:00:40 2026
System time     : 0.000000000 seconds fast of NTP time
Last offset     : +0.000000000 seconds
RMS offset      : 0.000000000 seconds
Frequency       : 0.000 ppm slow
Residual freq   : +0.000 ppm
Skew            : 0.000 ppm
Root delay      : 0.000000000 seconds
Root dispersion : 0.000000000 seconds
Update interval : 0.0 seconds
Leap status     : Normal
"""

TRACKING_UNSYNCHRONISED = """\
Reference ID    : 00000000 ()
Stratum         : 0
Ref time (UTC)  : Thu Jan 01 00:00:00 1970
System time     : 0.000000000 seconds fast of NTP time
Last offset     : +0.000000000 seconds
RMS offset      : 0.000000000 seconds
Frequency       : 0.000 ppm slow
Residual freq   : +0.000 ppm
Skew            : 0.000 ppm
Root delay      : 1.000000000 seconds
Root dispersion : 1.000000000 seconds
Update interval : 0.0 seconds
Leap status     : Not synchronised
"""


def test_chronyc_tracking_slow_clock_is_a_negative_offset() -> None:
    track = parse.chronyc_tracking(TRACKING_SLOW)
    assert track == {
        "reference": "C0A86401",
        "stratum": 3,
        "offset_s": -0.000012345,
        "leap": "Normal",
    }


def test_chronyc_tracking_fast_clock_is_a_positive_offset() -> None:
    fast = TRACKING_SLOW.replace("0.000012345 seconds slow", "0.250000000 seconds fast")
    assert parse.chronyc_tracking(fast)["offset_s"] == 0.25


def test_chronyc_tracking_isolated_head_with_an_empty_name() -> None:
    track = parse.chronyc_tracking(TRACKING_ISOLATED_HEAD)
    assert (track["reference"], track["stratum"], track["offset_s"], track["leap"]) == (
        "7F7F0101",
        10,
        0.0,
        "Normal",
    )


def test_chronyc_tracking_unsynchronised() -> None:
    track = parse.chronyc_tracking(TRACKING_UNSYNCHRONISED)
    assert (track["reference"], track["stratum"], track["leap"]) == (
        "00000000",
        0,
        "Not synchronised",
    )


def test_chronyc_tracking_refuses_other_output() -> None:
    with pytest.raises(
        ValueError,
        match=r"not chronyc tracking output \('Reference ID'\): '506 Cannot talk to daemon",
    ):
        parse.chronyc_tracking("506 Cannot talk to daemon\n")
    without_stratum = TRACKING_SLOW.replace("Stratum         : 3\n", "")
    with pytest.raises(ValueError, match=r"not chronyc tracking output \('Stratum'\)"):
        parse.chronyc_tracking(without_stratum)
    garbled = TRACKING_SLOW.replace("0.000012345 seconds slow", "seconds slow")
    with pytest.raises(ValueError, match=r"not chronyc tracking output \(could not convert"):
        parse.chronyc_tracking(garbled)
    empty_ref = TRACKING_SLOW.replace("C0A86401 (192.168.100.1)", "")
    with pytest.raises(
        ValueError, match=r"not chronyc tracking output \(list index out of range\)"
    ):
        parse.chronyc_tracking(empty_ref)


# ---------------------------------------------------------------- ip -j addr

# `ip -j -4 addr show` of iproute2 6.1 on a provisioned Spark (abridged to the fields ip prints).
IP_ADDR = json.dumps(
    [
        {
            "ifindex": 1,
            "ifname": "lo",
            "flags": ["LOOPBACK", "UP", "LOWER_UP"],
            "mtu": 65536,
            "qdisc": "noqueue",
            "operstate": "UNKNOWN",
            "group": "default",
            "txqlen": 1000,
            "addr_info": [
                {
                    "family": "inet",
                    "local": "127.0.0.1",
                    "prefixlen": 8,
                    "scope": "host",
                    "label": "lo",
                    "valid_life_time": 4294967295,
                    "preferred_life_time": 4294967295,
                }
            ],
        },
        {
            "ifindex": 2,
            "ifname": "enP7s7",
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 1500,
            "qdisc": "mq",
            "operstate": "UP",
            "group": "default",
            "txqlen": 1000,
            "addr_info": [
                {
                    "family": "inet",
                    "local": "10.0.0.21",
                    "prefixlen": 24,
                    "broadcast": "10.0.0.255",
                    "scope": "global",
                    "dynamic": True,
                    "label": "enP7s7",
                    "valid_life_time": 86020,
                    "preferred_life_time": 86020,
                }
            ],
        },
        {
            "ifindex": 4,
            "ifname": "enp1s0f1np1",
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 9000,
            "qdisc": "mq",
            "operstate": "UP",
            "group": "default",
            "txqlen": 1000,
            "addr_info": [
                {
                    "family": "inet",
                    "local": "192.168.100.11",
                    "prefixlen": 24,
                    "broadcast": "192.168.100.255",
                    "scope": "global",
                    "label": "enp1s0f1np1",
                    "valid_life_time": 4294967295,
                    "preferred_life_time": 4294967295,
                },
                {
                    "family": "inet",
                    "local": "169.254.3.1",
                    "prefixlen": 16,
                    "scope": "link",
                    "label": "enp1s0f1np1",
                    "valid_life_time": 4294967295,
                    "preferred_life_time": 4294967295,
                },
            ],
        },
        {
            "ifindex": 6,
            "ifname": "enP2p1s0f1np1",
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 9000,
            "qdisc": "mq",
            "operstate": "UP",
            "group": "default",
            "txqlen": 1000,
            "addr_info": [
                {"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link"}
            ],
        },
    ]
)


def test_ip_addr_json_every_interface_ipv4_only() -> None:
    assert parse.ip_addr(IP_ADDR) == {
        "lo": ["127.0.0.1/8"],
        "enP7s7": ["10.0.0.21/24"],
        "enp1s0f1np1": ["192.168.100.11/24", "169.254.3.1/16"],
        "enP2p1s0f1np1": [],
    }


def test_ip_addr_json_empty_output_is_no_interface() -> None:
    assert parse.ip_addr("") == {}
    assert parse.ip_addr("[]") == {}


def test_ip_addr_json_refuses_text() -> None:
    with pytest.raises(ValueError, match="ip -j addr printed no JSON"):
        parse.ip_addr('Option "-j" is unknown, try "ip -help".')


# ---------------------------------------------------------------- /proc/meminfo

MEMINFO = """\
MemTotal:       127535524 kB
MemFree:        101246080 kB
MemAvailable:   119630012 kB
Buffers:           85372 kB
Cached:         18466328 kB
SwapCached:            0 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
"""


def test_meminfo_in_bytes() -> None:
    mem = parse.meminfo(MEMINFO)
    assert mem["MemAvailable"] == 119630012 * 1024
    assert mem["MemTotal"] == 127535524 * 1024
    assert mem["Hugepagesize"] == 2 * 1024 * 1024
    assert mem["HugePages_Total"] == 0  # a count, no unit


def test_meminfo_refuses_output_without_mem_available() -> None:
    with pytest.raises(ValueError, match="no MemAvailable in /proc/meminfo"):
        parse.meminfo("MemTotal:       127535524 kB\nMemFree:        101246080 kB\n")
    with pytest.raises(ValueError, match="no MemAvailable"):
        parse.meminfo("")


# ---------------------------------------------------------------- systemctl show


def test_systemctl_show_splits_at_the_first_equals_sign() -> None:
    text = (
        "ActiveState=active\nSubState=running\nExecMainPID=2817\n"
        "Environment=NCCL_SOCKET_IFNAME=enp1s0f1np1 GLOO_SOCKET_IFNAME=enp1s0f1np1\n"
        "Result=success\nNRestarts=0\n"
    )
    props = parse.systemctl_show(text)
    assert props["ActiveState"] == "active" and props["SubState"] == "running"
    assert props["Environment"] == "NCCL_SOCKET_IFNAME=enp1s0f1np1 GLOO_SOCKET_IFNAME=enp1s0f1np1"
    assert props["NRestarts"] == "0"


def test_systemctl_show_of_an_unknown_unit() -> None:
    # systemd prints the properties of a unit it does not know, with empty values.
    props = parse.systemctl_show(
        "LoadState=not-found\nActiveState=inactive\nExecMainPID=0\nFragmentPath=\n"
    )
    assert props == {
        "LoadState": "not-found",
        "ActiveState": "inactive",
        "ExecMainPID": "0",
        "FragmentPath": "",
    }
    assert parse.systemctl_show("") == {}


# ---------------------------------------------------------------- env files

# /etc/sparkctl/nccl.env as roles/nccl/templates/nccl-env.j2 writes it.
NCCL_ENV = """\
# Managed by sparkctl (Ansible role nccl): edit the inventory, not this file.
# exported to every rank of nccl-tests and SGLang

GLOO_SOCKET_IFNAME=enp1s0f1np1
NCCL_IB_GID_INDEX=3
NCCL_IB_HCA=rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1
NCCL_IB_SUBNET_AWARE_ROUTING=1
NCCL_SOCKET_IFNAME=enp1s0f1np1
OMPI_MCA_btl_tcp_if_include=enp1s0f1np1
"""


def test_env_file_reads_the_roles_file() -> None:
    env = parse.env_file(NCCL_ENV)
    assert env == {
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1",
        "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1",
    }


def test_env_file_keeps_everything_after_the_first_equals_sign() -> None:
    assert parse.env_file("NCCL_DEBUG_SUBSYS=INIT,ENV\nX=a=b\nEMPTY=\n") == {
        "NCCL_DEBUG_SUBSYS": "INIT,ENV",
        "X": "a=b",
        "EMPTY": "",
    }


def test_env_file_refuses_lines_that_are_not_key_value() -> None:
    # The line stays out of the message: the sglang role reads its secrets file with this.
    with pytest.raises(ValueError, match=r"^line 2 is not KEY=VALUE$"):
        parse.env_file("# x\nexport NCCL_DEBUG=INFO\n")
    with pytest.raises(ValueError, match=r"^line 1 is not KEY=VALUE$"):
        parse.env_file("SGLANG_API_KEY sk-secret\n")
    with pytest.raises(ValueError, match=r"^line 1 is not KEY=VALUE$"):
        parse.env_file("1NCCL=1\n")
    with pytest.raises(ValueError, match=r"^line 2: X is set twice$"):
        parse.env_file("X=1\nX=2\n")


def test_env_diff_names_missing_unexpected_and_different() -> None:
    actual = {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_DEBUG": "INFO", "NCCL_IB_GID_INDEX": "3"}
    expected = {
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_HCA": "rocep1s0f1",
    }
    assert _env_diff(actual, expected) == [
        "NCCL_IB_HCA missing (want 'rocep1s0f1')",
        "NCCL_DEBUG='INFO' not expected",
        "NCCL_SOCKET_IFNAME='enp1s0f0np0', want 'enp1s0f1np1'",
    ]


def test_env_diff_of_equal_files_is_empty_and_compares_as_text() -> None:
    env = parse.env_file(NCCL_ENV)
    assert _env_diff(env, dict(env)) == []
    # An inventory integer (NCCL_IB_GID_INDEX: 3) equals the file's "3".
    assert _env_diff({"NCCL_IB_GID_INDEX": "3"}, {"NCCL_IB_GID_INDEX": 3}) == []  # type: ignore[dict-item]


# ---------------------------------------------------------------- ping (iputils)

PING_OK = """\
PING 192.168.100.12 (192.168.100.12) from 192.168.100.11 enp1s0f1np1: 8972(9000) bytes of data.

--- 192.168.100.12 ping statistics ---
3 packets transmitted, 3 received, 0% packet loss, time 404ms
rtt min/avg/max/mdev = 0.101/0.132/0.160/0.024 ms
"""

PING_LOST = """\
PING 192.168.100.13 (192.168.100.13) from 192.168.100.11 enp1s0f1np1: 8972(9000) bytes of data.

--- 192.168.100.13 ping statistics ---
3 packets transmitted, 0 received, 100% packet loss, time 2044ms

"""

# The local interface has MTU 1500: the kernel refuses the DF frame before it leaves.
PING_TOO_LONG_OUT = """\
PING 192.168.100.12 (192.168.100.12) from 192.168.100.11 enp1s0f1np1: 8972(9000) bytes of data.

--- 192.168.100.12 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2047ms

"""
PING_TOO_LONG_ERR = """\
ping: local error: message too long, mtu=1500
ping: local error: message too long, mtu=1500
ping: local error: message too long, mtu=1500
"""


def test_ping_success() -> None:
    assert parse.ping(PING_OK, "") == _ping(3, 3, None)


def test_ping_total_loss_has_no_error_line() -> None:
    assert parse.ping(PING_LOST, "") == _ping(3, 0, None)


def test_ping_message_too_long_is_the_error() -> None:
    result = parse.ping(PING_TOO_LONG_OUT, PING_TOO_LONG_ERR)
    assert result == _ping(3, 0, "ping: local error: message too long, mtu=1500")
    # Older iputils report the refused send this way instead.
    sendmsg = parse.ping(PING_TOO_LONG_OUT, "ping: sendmsg: Message too long\n")
    assert sendmsg["error"] == "ping: sendmsg: Message too long"


def test_ping_network_unreachable_prints_no_summary() -> None:
    result = parse.ping("", "ping: connect: Network is unreachable\n")
    assert result == _ping(0, 0, "ping: connect: Network is unreachable")


def test_ping_other_failures_keep_stderr_or_say_nothing_was_printed() -> None:
    assert parse.ping("", "ping: SO_BINDTODEVICE enp9s0: No such device\n") == _ping(
        0, 0, "ping: SO_BINDTODEVICE enp9s0: No such device"
    )
    assert (
        parse.ping("", "ping: bind: Cannot assign requested address\n")["error"]
        == "ping: bind: Cannot assign requested address"
    )
    assert parse.ping("", "") == _ping(0, 0, "ping printed no summary")


def test_ping_busybox_summary_wording() -> None:
    text = "--- 192.168.100.12 ping statistics ---\n3 packets transmitted, 2 packets received, 33% packet loss\n"
    assert parse.ping(text, "") == _ping(3, 2, None)


# ---------------------------------------------------------------- ip -j neigh


def test_neigh_mac_of_a_resolved_neighbour() -> None:
    # `ip -j neigh show ADDR dev IF` leaves out "dev" (it was given).
    text = '[{"dst":"192.168.100.12","lladdr":"4c:bb:47:2a:10:b3","state":["REACHABLE"]}]'
    assert parse.ip_neigh_mac(text) == "4c:bb:47:2a:10:b3"
    stale = '[{"dst":"192.168.100.12","lladdr":"4c:bb:47:2a:10:b3","state":["STALE"]}]'
    assert parse.ip_neigh_mac(stale) == "4c:bb:47:2a:10:b3"


def test_neigh_mac_unresolved_is_none() -> None:
    assert parse.ip_neigh_mac('[{"dst":"192.168.100.13","state":["FAILED"]}]') is None
    assert parse.ip_neigh_mac('[{"dst":"192.168.100.13","state":["INCOMPLETE"]}]') is None
    # A FAILED entry can still show the last address it had: it is not the neighbour now.
    assert (
        parse.ip_neigh_mac(
            '[{"dst":"192.168.100.13","lladdr":"4c:bb:47:2a:10:b3","state":["FAILED"]}]'
        )
        is None
    )
    assert parse.ip_neigh_mac("") is None
    assert parse.ip_neigh_mac("[]") is None
    assert parse.ip_neigh_mac('Cannot find device "enp9s0"') is None


def test_environ_reads_proc_and_docker_inspect_alike() -> None:
    # /proc/PID/environ: NUL-separated; docker inspect --format '{{json .Config.Env}}': a list
    proc = "PATH=/usr/bin\0SGLANG_HOST_IP=192.168.100.12\0EMPTY=\0X=a=b\0"
    docker = '["PATH=/usr/bin","SGLANG_HOST_IP=192.168.100.12","EMPTY=","X=a=b"]\n'
    want = {"PATH": "/usr/bin", "SGLANG_HOST_IP": "192.168.100.12", "EMPTY": "", "X": "a=b"}
    assert parse.environ(proc) == parse.environ(docker) == want
    assert parse.environ("") == {}
    with pytest.raises(ValueError, match=r"Config\.Env is not JSON"):
        parse.environ('["PATH=/usr/bin"')
    with pytest.raises(ValueError, match="not a list of strings"):
        parse.environ("[1, 2]")


def test_execstart_argv_and_the_containers_binds() -> None:
    text = (
        "{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run --rm -v /m:/m:ro --volume "
        "/h:/c --volume /x:/x python3 -c x ; ignore_errors=no ; start_time=[n/a] ; pid=0 }"
    )
    argv = parse.execstart_argv(text)
    assert argv[:3] == ["/usr/bin/docker", "run", "--rm"] and argv[-2:] == ["-c", "x"]
    assert parse.docker_run_mounts(argv) == [("/m", "/m"), ("/h", "/c"), ("/x", "/x")]
    assert parse.docker_run_mounts([]) == []
    with pytest.raises(ValueError, match="no argv"):
        parse.execstart_argv("")


# ================================================================ real outputs
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(tool: str, name: str) -> str:
    return (FIXTURES / tool / name).read_text()


def test_every_fixture_is_listed_in_its_sources() -> None:
    for tool in (
        "nvidia-smi",
        "ibdev2netdev",
        "show_gids",
        "ibv_devinfo",
        "ethtool",
        "ib_write_bw",
        "ip",
        "systemctl",
        "apt",
        "dpkg",
        "sysfs-pcie",
    ):
        sources = (FIXTURES / tool / "SOURCES.md").read_text()
        files = [p.name for p in (FIXTURES / tool).iterdir() if p.name != "SOURCES.md"]
        assert files, tool
        missing = [f for f in files if f"`{f}`" not in sources]
        assert not missing, f"{tool}/SOURCES.md does not say where {missing} came from"


@pytest.mark.parametrize(
    ("name", "driver", "cuda"),
    [
        ("gb10-580.95.05-table.txt", "580.95.05", "13.0"),
        ("b200-610.43.02-umd-banner.txt", "610.43.02", "13.3"),  # KMD / CUDA UMD Version
        ("gb10-580.142-version.txt", "580.142", "13.0"),  # nvidia-smi --version
    ],
)
def test_nvidia_smi_banners_old_and_new(name: str, driver: str, cuda: str) -> None:
    text = fixture("nvidia-smi", name)
    banner = parse.nvidia_smi_banner(text)
    assert (banner["driver_version"], banner["cuda_version"]) == (driver, cuda)
    assert parse.nvidia_smi_cuda(text) == cuda


def test_nvidia_smi_gb10_memory_is_none_not_zero() -> None:
    rows = parse.nvidia_smi_csv(fixture("nvidia-smi", "gb10-query-memory-header.csv"))
    assert rows == [{"memory.free": None, "memory.total": None, "memory.used": None}]


def test_nvidia_smi_noheader_is_read_by_the_query_names() -> None:
    rows = parse.nvidia_smi_csv(
        fixture("nvidia-smi", "gb10-query-name-memory-driver-noheader.csv"),
        ["name", "memory.total", "driver_version"],
    )
    assert rows == [{"name": "NVIDIA GB10", "memory.total": None, "driver_version": "580.126.09"}]
    fields = [
        "index",
        "gpu_name",
        "pci.bus_id",
        "driver_version",
        "compute_cap",
        "temperature.gpu",
        "pstate",
        "memory.total",
    ]
    (gb10,) = parse.nvidia_smi_csv(
        fixture("nvidia-smi", "gb10-query-inventory-noheader.csv"), fields
    )
    assert (gb10["gpu_name"], gb10["compute_cap"], gb10["memory.total"]) == (
        "NVIDIA GB10",
        "12.1",
        None,
    )
    with pytest.raises(ValueError, match="no nvidia-smi CSV header"):
        parse.nvidia_smi_csv(fixture("nvidia-smi", "gb10-query-inventory-noheader.csv"))


def test_ibdev2netdev_p2_first_and_p1_first_give_the_same_twins() -> None:
    p2_first = parse.ibdev2netdev(fixture("ibdev2netdev", "spark-p2-first-port1-up.txt"))
    assert [r["ibdev"] for r in p2_first][:2] == ["roceP2p1s0f0", "roceP2p1s0f1"]
    up = {r["ibdev"]: r["netdev"] for r in p2_first if r["state"] == "Up"}
    assert up == {"roceP2p1s0f1": "enP2p1s0f1np1", "rocep1s0f1": "enp1s0f1np1"}
    p1_first = parse.ibdev2netdev(fixture("ibdev2netdev", "spark-port0-up.txt"))
    assert {r["ibdev"]: r["netdev"] for r in p1_first if r["state"] == "Up"} == {
        "rocep1s0f0": "enp1s0f0np0",
        "roceP2p1s0f0": "enP2p1s0f0np0",
    }


def test_show_gids_gb10_spaces_and_mlnx_tabs() -> None:
    rows = parse.show_gids(fixture("show_gids", "gb10-port0-spaces-redacted.txt"))
    assert len(rows) == 12  # n_gids_found=12
    v2 = [
        (r["dev"], r["index"], r["ipv4"], r["ndev"]) for r in rows if r["ver"] == "v2" and r["ipv4"]
    ]
    assert v2 == [
        ("rocep1s0f0", 3, "192.168.100.10", "enp1s0f0np0"),
        ("roceP2p1s0f0", 3, "192.168.100.14", "enP2p1s0f0np0"),
    ]
    tabs = parse.show_gids(fixture("show_gids", "mlx5-tabs.txt"))
    assert [(r["index"], r["ver"], r["ipv4"]) for r in tabs] == [
        (0, "v1", None),
        (1, "v2", None),
        (2, "v1", "192.168.211.242"),
        (3, "v2", "192.168.211.242"),
    ]
    assert parse.gid_to_ipv4(tabs[3]["gid"]) == "192.168.211.242"


def test_ibv_devinfo_gb10_four_devices() -> None:
    devices = parse.ibv_devinfo(fixture("ibv_devinfo", "gb10-port1-up.txt"))
    assert [d["hca_id"] for d in devices] == [
        "rocep1s0f0",
        "rocep1s0f1",
        "roceP2p1s0f0",
        "roceP2p1s0f1",
    ]
    assert {d["fw_ver"] for d in devices} == {"28.45.4028"}
    assert {d["vendor_part_id"] for d in devices} == {"4129"}  # MT4129, ConnectX-7
    ports = {d["hca_id"]: d["ports"][0] for d in devices}
    assert ports["rocep1s0f1"]["state"] == "PORT_ACTIVE"
    assert ports["rocep1s0f1"]["active_mtu"] == "4096"
    assert ports["rocep1s0f0"]["state"] == "PORT_DOWN"
    assert {p["link_layer"] for p in ports.values()} == {"Ethernet"}
    with pytest.raises(ValueError, match="no hca_id"):
        parse.ibv_devinfo("No IB devices found\n")


def test_ethtool_spark_speed_and_full_outputs() -> None:
    assert parse.ethtool(fixture("ethtool", "spark-grep-speed-200g.txt"))["speed_mbps"] == 200000
    degraded = parse.ethtool(fixture("ethtool", "spark-grep-speed-100g.txt"))
    assert degraded == {
        "speed_mbps": 100000,
        "link_detected": None,
        "duplex": None,
        "auto_negotiation": None,
        "port": None,
        "lanes": None,
    }
    full = parse.ethtool(fixture("ethtool", "ascend-hccn-200g-an-off.txt"))
    assert (full["speed_mbps"], full["link_detected"], full["auto_negotiation"]) == (
        200000,
        True,
        "off",
    )
    mlx5 = parse.ethtool(fixture("ethtool", "mlx5-connectx4lx-25g.txt"))
    assert (mlx5["speed_mbps"], mlx5["port"], mlx5["duplex"]) == (
        25000,
        "Direct Attach Copper",
        "Full",
    )
    with pytest.raises(ValueError, match="no Speed line"):
        parse.ethtool("netlink error: No such device\n")


def test_ib_write_bw_unit_from_the_header() -> None:
    one = parse.ib_write_bw(fixture("ib_write_bw", "gb10-nvidia-guide-client1-gbits.txt"))
    two = parse.ib_write_bw(fixture("ib_write_bw", "gb10-nvidia-guide-client2-gbits.txt"))
    assert (one["unit"], len(one["rows"])) == ("Gb/sec", 5)
    # NVIDIA's guide: 92.57 + 97.28 = 189.85 Gb/s on one port (the last rows: 92.57, 97.28).
    assert round(one["average_gbps"] + two["average_gbps"], 2) == 189.85
    cpu = parse.ib_write_bw(fixture("ib_write_bw", "gb10-cpu-util-gbits.txt"))
    assert cpu["rows"] == [
        {
            "bytes": 65536,
            "iterations": 1059332,
            "BW peak": 0.0,
            "BW average": 92.57,
            "MsgRate": 0.176557,
            "CPU_Util": 5.07,
        }
    ]
    mib = parse.ib_write_bw(fixture("ib_write_bw", "mlx5-bond-send-mbytes.txt"))
    assert mib["unit"] == "MB/sec"
    # perftest's MB/sec is MiB/s: 2757.93 MiB/s = 23.14 Gb/s, not 2757.93 Gb/s
    assert round(mib["average_gbps"], 2) == round(2757.93 * 1048576 * 8 / 1e9, 2) == 23.14


def test_ip_json_of_a_real_host() -> None:
    addrs = parse.ip_addr(fixture("ip", "build-host-ip-j-addr.json"))
    assert addrs["eth0"] == ["192.0.2.2/24"] and addrs["lo"] == ["127.0.0.1/8"]
    assert addrs["veth0"] == []  # IPv6 link-local only
    assert (
        parse.ip_addr(fixture("ip", "build-host-ip-j-4-addr.json"))["podman1"] == addrs["podman1"]
    )
    links = parse.ip_link(fixture("ip", "build-host-ip-j-link.json"))
    assert links["lo"]["mtu"] == 65536
    assert (links["eth0"]["operstate"], links["eth0"]["lower_up"]) == ("UP", True)
    assert (links["ifb0"]["up"], links["ifb0"]["operstate"]) == (False, "DOWN")
    # `ip -j addr` carries the same link fields (lab status reads both from one call)
    from_addr = parse.ip_link(fixture("ip", "build-host-ip-j-addr.json"))
    assert {k: from_addr[k]["mtu"] for k in ("lo", "eth0")} == {"lo": 65536, "eth0": 1400}
    assert from_addr.keys() == links.keys()


def test_systemctl_show_real_execstart() -> None:
    atd = parse.systemctl_show(fixture("systemctl", "ubuntu-atd-execstart.txt"))
    assert parse.execstart_argv(atd["ExecStart"]) == ["/usr/sbin/atd", "-f"]
    rhel = fixture("systemctl", "rhel7-show-all-excerpt.txt")
    props = parse.systemctl_show(rhel)
    assert (props["LoadState"], props["UnitFileState"], props["DropInPaths"]) == (
        "loaded",
        "static",
        "",
    )
    assert parse.execstart_argv(rhel) == ["/usr/bin/python3", "-c", "import", "socket"]


# ------------------------------------------------------------------ dpkg -l, apt list, sysfs PCIe
def test_dpkg_list_reads_a_sparks_container_toolkit_and_a_held_line() -> None:
    spark = parse.dpkg_list(fixture("dpkg", "dgx-spark-container-toolkit-dpkg-l.txt"))
    assert sorted(spark) == [
        "libnvidia-container-tools",
        "libnvidia-container1",  # "libnvidia-container1:arm64": the name without its arch
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
    ]
    assert spark["libnvidia-container1"][0]["version"] == "1.19.0-1"
    assert spark["libnvidia-container1"][0]["arch"] == "arm64"
    cuda = parse.dpkg_list(fixture("dpkg", "ubuntu-22.04-cuda-12.6-dpkg-l-grep-cuda.txt"))
    held = sorted(n for n, v in cuda.items() if v[0]["selection"] == "hold")
    assert held == ["libnccl2"]  # the one "hi" line
    assert cuda["cuda-keyring"][0] == {
        "name": "cuda-keyring",
        "version": "1.1-1",
        "arch": "all",
        "source": "apt",
        "selection": "install",
    }


def test_dpkg_list_skips_its_header_and_removed_packages() -> None:
    text = (
        "Desired=Unknown/Install/Remove/Purge/Hold\n"
        "| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend\n"
        "||/ Name           Version      Architecture Description\n"
        "+++-==============-============-============-=================================\n"
        + fixture("dpkg", "ubuntu-24.04-580.95.05-dpkg-l.txt")
        + "rc  nvidia-driver-570-server  570.86.15-0ubuntu1  arm64  removed, config files remain\n"
    )
    names = parse.dpkg_list(text)
    assert "nvidia-driver-580-open" in names
    assert "nvidia-driver-570-server" not in names  # rc: not installed
    assert not [n for n in names if n.startswith(("|", "+", "Desired"))]


def test_apt_upgradable_security_pocket_first() -> None:
    rows = parse.apt_upgradable(fixture("apt", "noble-amd64-list-upgradable.txt"))
    assert len(rows) == 56  # every package line, the "Listing... Done" header skipped
    security = [r["name"] for r in rows if r["security"]]
    assert [r["name"] for r in rows[: len(security)]] == security  # security first
    assert "openssl" in security and "linux-image-generic" in security
    assert "docker-ce" not in security and "systemd" not in security
    image = next(r for r in rows if r["name"] == "linux-image-generic")
    assert image == {
        "name": "linux-image-generic",
        "version": "6.8.0-107.107",
        "installed": "6.8.0-106.106",
        "arch": "amd64",
        "pockets": ["noble-updates", "noble-security"],
        "security": True,
    }
    docker = next(r for r in rows if r["name"] == "docker-ce")
    assert (docker["version"], docker["pockets"]) == ("5:29.4.0-1~ubuntu.24.04~noble", ["noble"])


def test_apt_upgradable_of_nothing_and_of_a_broken_line() -> None:
    assert parse.apt_upgradable("Listing... Done\n") == []
    warned = "\nWARNING: apt does not have a stable CLI interface. Use with caution in scripts.\n\n"
    assert parse.apt_upgradable(warned + "Listing... Done\n") == []
    with pytest.raises(parse.ToolOutputError, match="not an `apt list --upgradable` line"):
        parse.apt_upgradable("openssl/noble-security [upgradable from: 3.0.13-0ubuntu3.7]\n")


def test_pcie_link_attributes_as_the_kernel_prints_them() -> None:
    assert parse.pcie_link_speed(fixture("sysfs-pcie", "gb10-cx7-current_link_speed")) == 32.0
    assert parse.pcie_link_speed("8 GT/s\n") == 8.0  # before Linux 5.7: no " PCIe"
    assert parse.pcie_link_speed(fixture("sysfs-pcie", "link-down-current_link_speed")) is None
    assert parse.pcie_link_width(fixture("sysfs-pcie", "gb10-cx7-current_link_width")) == 4
    assert parse.pcie_link_width(fixture("sysfs-pcie", "gen5-x2-current_link_width")) == 2
    with pytest.raises(parse.ToolOutputError, match="not a PCIe link speed"):
        parse.pcie_link_speed("200000\n")  # the netdev's own speed file, read by mistake
    with pytest.raises(parse.ToolOutputError, match="not a PCIe link width"):
        parse.pcie_link_width("x4")


def test_ss_tcp_info_reads_both_ends_of_a_real_connection() -> None:
    text = fixture("ss", "tin_established_loopback_iproute2_6.1.0.txt")
    conns = parse.ss_tcp_info(text)
    assert len(conns) == 2
    ends = {(c["local_port"], c["peer_port"]) for c in conns}
    (a, b) = sorted(ends)
    assert (b[1], b[0]) == a  # the two ends of one connection
    for c in conns:
        assert c["local"] == c["peer"] == "127.0.0.1"
        assert c["bytes_sent"] == c["bytes_received"] == 819200  # 200 echoes of 4 KiB
        assert 0 < c["rtt_ms"] < 1 and c["rttvar_ms"] is not None and c["min_rtt_ms"] > 0
        assert c["delivery_rate_bps"] > 1e9 and c["retrans"] is None and c["app_limited"]
        assert c["busy_ms"] == 8  # "busy:8ms"
    assert {c["send_q"] for c in conns} == {0, 4096}


def test_ss_tcp_info_reads_rates_retransmits_and_ipv6_and_refuses_other_text() -> None:
    text = (
        "0 0 [fe80::1%eth0]:5000 [fe80::2%eth0]:41000\n"
        "\t cubic rtt:12.5/3.25 retrans:0/7 bytes_sent:10 bytes_received:20"
        " delivery_rate 2.5Mbps minrtt:0.8\n"
    )
    (c,) = parse.ss_tcp_info(text)
    assert (c["local"], c["peer_port"], c["rtt_ms"], c["retrans"]) == (
        "fe80::1%eth0",
        41000,
        12.5,
        7,
    )
    assert c["delivery_rate_bps"] == 2.5e6 and c["min_rtt_ms"] == 0.8 and not c["app_limited"]
    assert c["busy_ms"] is None  # a connection that never sent prints no busy
    assert parse.ss_tcp_info("") == []
    with pytest.raises(parse.ToolOutputError, match="not a socket line"):
        parse.ss_tcp_info("State Recv-Q Send-Q Local Address:Port Peer Address:Port\n")
    with pytest.raises(parse.ToolOutputError, match="figures before a socket line"):
        parse.ss_tcp_info("\t rtt:1/1\n")
