"""sparkctl.checks.parse: the node checks' readers on the tools' own output, and their refusals."""

# ruff: noqa: E501 -- tool output is quoted as the tools print it
from __future__ import annotations

import json

import pytest

from sparkctl.checks import parse

# ---------------------------------------------------------------- versions


def test_version_tuple_reads_driver_and_cuda_versions() -> None:
    assert parse.version_tuple("580.95.05") == (580, 95, 5)
    assert parse.version_tuple("13.0") == (13, 0)
    assert parse.version_tuple("v2.28.9-1") == (2, 28, 9, 1)


def test_version_tuple_refuses_text_without_a_number() -> None:
    with pytest.raises(ValueError, match=r"no version number in '\[N/A\]'"):
        parse.version_tuple("[N/A]")


@pytest.mark.parametrize(("have", "want", "ok"), [
    ("580.95.05", "580.0", True),
    ("580.95.05", "580.95.05", True),
    ("575.57.08", "580.0", False),
    ("13.0", "13.0", True),
    ("13", "13.0", True),  # missing parts count as 0
    ("13.0", "13", True),
    ("12.9", "13.0", False),
    ("13.1", "13.0.2", True),
    ("580.9", "580.10", False),  # numeric, not string order
])
def test_at_least_compares_dotted_versions(have: str, want: str, ok: bool) -> None:
    assert parse.at_least(have, want) is ok


# ---------------------------------------------------------------- nvidia-smi

BANNER = """\
Sun Nov 30 07:01:02 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |
| N/A   41C    P8              4W /  N/A  | Not Supported          |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""


def test_nvidia_smi_query_one_gpu() -> None:
    gpus = parse.nvidia_smi_query("NVIDIA GB10, 580.95.05\n")
    assert gpus == [parse.Gpu("NVIDIA GB10", "580.95.05")]


def test_nvidia_smi_query_skips_blank_lines_and_keeps_order() -> None:
    text = "NVIDIA H100 80GB HBM3, 570.124.06\n\nNVIDIA H100 80GB HBM3, 570.124.06\n"
    assert [g.name for g in parse.nvidia_smi_query(text)] == ["NVIDIA H100 80GB HBM3"] * 2


def test_nvidia_smi_query_refuses_the_driver_failure_text() -> None:
    failure = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")
    with pytest.raises(ValueError, match=r"not 'name, driver_version': \"NVIDIA-SMI has failed"):
        parse.nvidia_smi_query(failure)
    with pytest.raises(ValueError, match=r"not 'name, driver_version': 'NVIDIA GB10, '"):
        parse.nvidia_smi_query("NVIDIA GB10, \n")


def test_nvidia_smi_query_refuses_no_gpu() -> None:
    with pytest.raises(ValueError, match="nvidia-smi listed no GPU"):
        parse.nvidia_smi_query("\n")


def test_nvidia_smi_cuda_from_the_banner() -> None:
    assert parse.nvidia_smi_cuda(BANNER) == "13.0"
    line = "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |"
    assert parse.nvidia_smi_cuda(line) == "13.0"


def test_nvidia_smi_cuda_refuses_a_banner_without_it() -> None:
    with pytest.raises(ValueError, match="no 'CUDA Version' in nvidia-smi's banner"):
        parse.nvidia_smi_cuda("No devices were found\n")


# ---------------------------------------------------------------- ibdev2netdev

# A DGX Spark: two ConnectX-7 ports, each seen as two PCIe functions (the "twins").
IBDEV2NETDEV = """\
roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Down)
roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)
rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)
rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)
"""


def test_ibdev2netdev_maps_every_device() -> None:
    assert parse.ibdev2netdev(IBDEV2NETDEV) == {
        "roceP2p1s0f0": ("enP2p1s0f0np0", "Down"),
        "roceP2p1s0f1": ("enP2p1s0f1np1", "Up"),
        "rocep1s0f0": ("enp1s0f0np0", "Down"),
        "rocep1s0f1": ("enp1s0f1np1", "Up"),
    }


def test_ibdev2netdev_tolerates_blank_lines_and_indentation() -> None:
    assert parse.ibdev2netdev("\n  rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)  \n\n") == {
        "rocep1s0f1": ("enp1s0f1np1", "Up")}
    assert parse.ibdev2netdev("") == {}


def test_ibdev2netdev_refuses_other_output() -> None:
    verbose = ("0000:01:00.1 rocep1s0f1 (MT4129 - MCX750500B-0D00) NVIDIA ConnectX-7 "
               "fw 28.44.1036 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)")
    with pytest.raises(ValueError, match=r"not an ibdev2netdev line: '0000:01:00.1 rocep1s0f1"):
        parse.ibdev2netdev(verbose)
    with pytest.raises(ValueError, match="not an ibdev2netdev line: 'rocep1s0f1 port 1 ==>'"):
        parse.ibdev2netdev("rocep1s0f1 port 1 ==> ")


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
    assert track == parse.Tracking("C0A86401", 3, -0.000012345, "Normal")


def test_chronyc_tracking_fast_clock_is_a_positive_offset() -> None:
    fast = TRACKING_SLOW.replace("0.000012345 seconds slow", "0.250000000 seconds fast")
    assert parse.chronyc_tracking(fast).offset_s == 0.25


def test_chronyc_tracking_isolated_head_with_an_empty_name() -> None:
    track = parse.chronyc_tracking(TRACKING_ISOLATED_HEAD)
    assert (track.reference, track.stratum, track.offset_s, track.leap) == ("7F7F0101", 10, 0.0, "Normal")


def test_chronyc_tracking_unsynchronised() -> None:
    track = parse.chronyc_tracking(TRACKING_UNSYNCHRONISED)
    assert (track.reference, track.stratum, track.leap) == ("00000000", 0, "Not synchronised")


def test_chronyc_tracking_refuses_other_output() -> None:
    with pytest.raises(ValueError, match=r"not chronyc tracking output \('Reference ID'\): '506 Cannot talk to daemon"):
        parse.chronyc_tracking("506 Cannot talk to daemon\n")
    without_stratum = TRACKING_SLOW.replace("Stratum         : 3\n", "")
    with pytest.raises(ValueError, match=r"not chronyc tracking output \('Stratum'\)"):
        parse.chronyc_tracking(without_stratum)
    garbled = TRACKING_SLOW.replace("0.000012345 seconds slow", "seconds slow")
    with pytest.raises(ValueError, match=r"not chronyc tracking output \(could not convert"):
        parse.chronyc_tracking(garbled)
    empty_ref = TRACKING_SLOW.replace("C0A86401 (192.168.100.1)", "")
    with pytest.raises(ValueError, match=r"not chronyc tracking output \(list index out of range\)"):
        parse.chronyc_tracking(empty_ref)


# ---------------------------------------------------------------- ip -j addr

# `ip -j -4 addr show` of iproute2 6.1 on a provisioned Spark (abridged to the fields ip prints).
IP_ADDR = json.dumps([
    {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "mtu": 65536,
     "qdisc": "noqueue", "operstate": "UNKNOWN", "group": "default", "txqlen": 1000,
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host",
                    "label": "lo", "valid_life_time": 4294967295, "preferred_life_time": 4294967295}]},
    {"ifindex": 2, "ifname": "enP7s7", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
     "mtu": 1500, "qdisc": "mq", "operstate": "UP", "group": "default", "txqlen": 1000,
     "addr_info": [{"family": "inet", "local": "10.0.0.21", "prefixlen": 24, "broadcast": "10.0.0.255",
                    "scope": "global", "dynamic": True, "label": "enP7s7",
                    "valid_life_time": 86020, "preferred_life_time": 86020}]},
    {"ifindex": 4, "ifname": "enp1s0f1np1", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
     "mtu": 9000, "qdisc": "mq", "operstate": "UP", "group": "default", "txqlen": 1000,
     "addr_info": [{"family": "inet", "local": "192.168.100.11", "prefixlen": 24,
                    "broadcast": "192.168.100.255", "scope": "global", "label": "enp1s0f1np1",
                    "valid_life_time": 4294967295, "preferred_life_time": 4294967295},
                   {"family": "inet", "local": "169.254.3.1", "prefixlen": 16,
                    "scope": "link", "label": "enp1s0f1np1",
                    "valid_life_time": 4294967295, "preferred_life_time": 4294967295}]},
    {"ifindex": 6, "ifname": "enP2p1s0f1np1", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
     "mtu": 9000, "qdisc": "mq", "operstate": "UP", "group": "default", "txqlen": 1000,
     "addr_info": [{"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link"}]},
])


def test_ip_addr_json_every_interface_ipv4_only() -> None:
    assert parse.ip_addr_json(IP_ADDR) == {
        "lo": ["127.0.0.1/8"],
        "enP7s7": ["10.0.0.21/24"],
        "enp1s0f1np1": ["192.168.100.11/24", "169.254.3.1/16"],
        "enP2p1s0f1np1": [],
    }


def test_ip_addr_json_empty_output_is_no_interface() -> None:
    assert parse.ip_addr_json("") == {}
    assert parse.ip_addr_json("[]") == {}


def test_ip_addr_json_refuses_text() -> None:
    with pytest.raises(ValueError, match="ip -j printed no JSON: Expecting value"):
        parse.ip_addr_json('Option "-j" is unknown, try "ip -help".')


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
    text = ("ActiveState=active\nSubState=running\nExecMainPID=2817\n"
            "Environment=NCCL_SOCKET_IFNAME=enp1s0f1np1 GLOO_SOCKET_IFNAME=enp1s0f1np1\n"
            "Result=success\nNRestarts=0\n")
    props = parse.systemctl_show(text)
    assert props["ActiveState"] == "active" and props["SubState"] == "running"
    assert props["Environment"] == "NCCL_SOCKET_IFNAME=enp1s0f1np1 GLOO_SOCKET_IFNAME=enp1s0f1np1"
    assert props["NRestarts"] == "0"


def test_systemctl_show_of_an_unknown_unit() -> None:
    # systemd prints the properties of a unit it does not know, with empty values.
    props = parse.systemctl_show("LoadState=not-found\nActiveState=inactive\nExecMainPID=0\nFragmentPath=\n")
    assert props == {"LoadState": "not-found", "ActiveState": "inactive", "ExecMainPID": "0",
                     "FragmentPath": ""}
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
    assert env == {"GLOO_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_GID_INDEX": "3",
                   "NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1",
                   "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
                   "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1"}


def test_env_file_keeps_everything_after_the_first_equals_sign() -> None:
    assert parse.env_file("NCCL_DEBUG_SUBSYS=INIT,ENV\nX=a=b\nEMPTY=\n") == {
        "NCCL_DEBUG_SUBSYS": "INIT,ENV", "X": "a=b", "EMPTY": ""}


def test_env_file_refuses_lines_that_are_not_key_value() -> None:
    with pytest.raises(ValueError, match=r"line 2 is not KEY=VALUE: 'export NCCL_DEBUG=INFO'"):
        parse.env_file("# x\nexport NCCL_DEBUG=INFO\n")
    with pytest.raises(ValueError, match=r"line 1 is not KEY=VALUE: 'NCCL_DEBUG INFO'"):
        parse.env_file("NCCL_DEBUG INFO\n")
    with pytest.raises(ValueError, match=r"line 1 is not KEY=VALUE: '1NCCL=1'"):
        parse.env_file("1NCCL=1\n")


def test_env_diff_names_missing_unexpected_and_different() -> None:
    actual = {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "NCCL_DEBUG": "INFO", "NCCL_IB_GID_INDEX": "3"}
    expected = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_GID_INDEX": "3",
                "NCCL_IB_HCA": "rocep1s0f1"}
    assert parse.env_diff(actual, expected) == [
        "NCCL_IB_HCA missing (want 'rocep1s0f1')",
        "NCCL_DEBUG='INFO' not expected",
        "NCCL_SOCKET_IFNAME='enp1s0f0np0', want 'enp1s0f1np1'",
    ]


def test_env_diff_of_equal_files_is_empty_and_compares_as_text() -> None:
    env = parse.env_file(NCCL_ENV)
    assert parse.env_diff(env, dict(env)) == []
    # An inventory integer (NCCL_IB_GID_INDEX: 3) equals the file's "3".
    assert parse.env_diff({"NCCL_IB_GID_INDEX": "3"}, {"NCCL_IB_GID_INDEX": 3}) == []  # type: ignore[dict-item]


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
    assert parse.ping(PING_OK, "") == parse.Ping(3, 3, None)


def test_ping_total_loss_has_no_error_line() -> None:
    assert parse.ping(PING_LOST, "") == parse.Ping(3, 0, None)


def test_ping_message_too_long_is_the_error() -> None:
    result = parse.ping(PING_TOO_LONG_OUT, PING_TOO_LONG_ERR)
    assert result == parse.Ping(3, 0, "ping: local error: message too long, mtu=1500")
    # Older iputils report the refused send this way instead.
    sendmsg = parse.ping(PING_TOO_LONG_OUT, "ping: sendmsg: Message too long\n")
    assert sendmsg.error == "ping: sendmsg: Message too long"


def test_ping_network_unreachable_prints_no_summary() -> None:
    result = parse.ping("", "ping: connect: Network is unreachable\n")
    assert result == parse.Ping(0, 0, "ping: connect: Network is unreachable")


def test_ping_other_failures_keep_stderr_or_say_nothing_was_printed() -> None:
    assert parse.ping("", "ping: SO_BINDTODEVICE enp9s0: No such device\n") == \
        parse.Ping(0, 0, "ping: SO_BINDTODEVICE enp9s0: No such device")
    assert parse.ping("", "ping: bind: Cannot assign requested address\n").error == \
        "ping: bind: Cannot assign requested address"
    assert parse.ping("", "") == parse.Ping(0, 0, "ping printed no summary")


def test_ping_busybox_summary_wording() -> None:
    text = "--- 192.168.100.12 ping statistics ---\n3 packets transmitted, 2 packets received, 33% packet loss\n"
    assert parse.ping(text, "") == parse.Ping(3, 2, None)


# ---------------------------------------------------------------- ip -j neigh


def test_neigh_mac_of_a_resolved_neighbour() -> None:
    # `ip -j neigh show ADDR dev IF` leaves out "dev" (it was given).
    text = '[{"dst":"192.168.100.12","lladdr":"4c:bb:47:2a:10:b3","state":["REACHABLE"]}]'
    assert parse.neigh_mac(text) == "4c:bb:47:2a:10:b3"
    stale = '[{"dst":"192.168.100.12","lladdr":"4c:bb:47:2a:10:b3","state":["STALE"]}]'
    assert parse.neigh_mac(stale) == "4c:bb:47:2a:10:b3"


def test_neigh_mac_unresolved_is_none() -> None:
    assert parse.neigh_mac('[{"dst":"192.168.100.13","state":["FAILED"]}]') is None
    assert parse.neigh_mac('[{"dst":"192.168.100.13","state":["INCOMPLETE"]}]') is None
    # A FAILED entry can still show the last address it had: it is not the neighbour now.
    assert parse.neigh_mac('[{"dst":"192.168.100.13","lladdr":"4c:bb:47:2a:10:b3","state":["FAILED"]}]') is None
    assert parse.neigh_mac("") is None
    assert parse.neigh_mac("[]") is None
    assert parse.neigh_mac("Cannot find device \"enp9s0\"") is None


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
    text = ("{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run --rm -v /m:/m:ro --volume "
            "/h:/c --volume /x:/x python3 -c x ; ignore_errors=no ; start_time=[n/a] ; pid=0 }")
    argv = parse.execstart_argv(text)
    assert argv[:3] == ["/usr/bin/docker", "run", "--rm"] and argv[-2:] == ["-c", "x"]
    assert parse.container_mounts(argv) == [("/m", "/m"), ("/h", "/c"), ("/x", "/x")]
    assert parse.execstart_argv("") == [] and parse.container_mounts([]) == []
