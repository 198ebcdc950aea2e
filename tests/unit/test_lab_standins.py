"""The lab's simulated-hardware tools print what the real tools print, from live state.

Each stand-in script runs as a subprocess (``sys.executable``, as the node's
python3 would run it) against a temporary hardware.json, a fake sysfs tree and,
for ``show_gids``, a file of ``ip -j -4 addr show`` output. Expected strings are
written out literally from real DGX Spark output, not recomputed with the code
under test.
"""

from __future__ import annotations

import ast
import csv
import datetime
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkctl_lab.hardware import (
    HARDWARE_JSON_SCHEMA,
    SPARK_ROCE_PORTS,
    LabHardware,
    gpu_uuid_for,
    render_dgx_release,
)
from sparkctl_lab.standins import PLACEMENTS, STANDINS_DIR

# The stand-in programs of the placement table, by file name (docker.py is
# /usr/bin/docker, nccl_tests.py the nccl-tests binaries).
STANDIN_PROGRAMS = {
    p.source: p.targets for p in PLACEMENTS if not p.source.startswith("<generated:")
}

HOST = "spark-01"
MACS = {
    "enp1s0f0np0": "4c:bb:47:2d:1a:16",
    "enp1s0f1np1": "4c:bb:47:2d:1a:17",
    "enP2p1s0f0np0": "4c:bb:47:2d:1a:18",
    "enP2p1s0f1np1": "4c:bb:47:2d:1a:19",
}
# EUI-64 link-local GIDs of the MACs above, worked out by hand.
LINK_LOCAL = {
    "enp1s0f0np0": "fe80:0000:0000:0000:4ebb:47ff:fe2d:1a16",
    "enp1s0f1np1": "fe80:0000:0000:0000:4ebb:47ff:fe2d:1a17",
    "enP2p1s0f0np0": "fe80:0000:0000:0000:4ebb:47ff:fe2d:1a18",
    "enP2p1s0f1np1": "fe80:0000:0000:0000:4ebb:47ff:fe2d:1a19",
}
GPU_JOB = "sparkctl_unit_gpu_job"  # executable name the tests count as GPU work


@dataclass
class Node:
    """A fake lab node: hardware.json, sysfs tree and ip output on disk."""

    root: Path

    @property
    def hw_path(self) -> Path:
        return self.root / "hardware.json"

    @property
    def sysfs(self) -> Path:
        return self.root / "sys"

    @property
    def ip_json(self) -> Path:
        return self.root / "ip.json"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARKCTL_LAB_HW=str(self.hw_path),
            SPARKCTL_LAB_SYSFS=str(self.sysfs),
            SPARKCTL_LAB_IP_JSON=str(self.ip_json),
        )
        return env

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(STANDINS_DIR / tool), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=60,
            check=False,
        )

    def hw(self) -> dict[str, object]:
        data = json.loads(self.hw_path.read_text())
        assert isinstance(data, dict)
        return data

    def set_hw(self, **changes: object) -> None:
        data = self.hw()
        data.update(changes)
        self.hw_path.write_text(json.dumps(data))

    def netdev(self, name: str) -> Path:
        return self.sysfs / "class" / "net" / name

    def set_operstate(self, name: str, state: str) -> None:
        (self.netdev(name) / "operstate").write_text(state + "\n")

    def set_ipv4(self, addresses: dict[str, list[str]]) -> None:
        entries = [
            {
                "ifindex": i + 10,
                "ifname": dev,
                "operstate": "UP",
                "addr_info": [
                    {"family": "inet", "local": a, "prefixlen": 24, "scope": "global"}
                    for a in addrs
                ],
            }
            for i, (dev, addrs) in enumerate(addresses.items())
        ]
        self.ip_json.write_text(json.dumps(entries))

    def set_temperature(self, millidegrees: int) -> None:
        zone = self.sysfs / "class" / "thermal" / "thermal_zone0"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "temp").write_text(f"{millidegrees}\n")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.hw_path.write_text(LabHardware().to_json(HOST))
    n.set_hw(gpu_process_names=[GPU_JOB])
    for dev, mac in MACS.items():
        d = n.netdev(dev)
        d.mkdir(parents=True)
        (d / "operstate").write_text("up\n")
        (d / "address").write_text(mac + "\n")
        (d / "mtu").write_text("1500\n")
        (d / "speed").write_text("1000\n")
    n.set_ipv4({"enp1s0f1np1": ["192.168.100.10"], "enP2p1s0f1np1": ["192.168.101.10"]})
    return n


# ---------------------------------------------------------------- nvidia-smi
SMI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def smi_fixture(name: str) -> str:
    """A real nvidia-smi output (tests/fixtures/nvidia-smi/SOURCES.md names its source)."""
    return (SMI_FIXTURES / name).read_text()


TABLE_PATTERNS = [
    r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}",
    r"\+-{89}\+",
    r"\| NVIDIA-SMI 580\.95\.05 {14}Driver Version: 580\.95\.05 {6}CUDA Version: 13\.0 {5}\|",
    r"\+-{41}\+-{24}\+-{22}\+",
    r"\| GPU  Name                 Persistence-M \| Bus-Id          Disp\.A "
    r"\| Volatile Uncorr\. ECC \|",
    r"\| Fan  Temp   Perf          Pwr:Usage/Cap \|           Memory-Usage "
    r"\| GPU-Util  Compute M\. \|",
    r"\| {41}\| {24}\| {15}MIG M\. \|",
    r"\|={41}\+={24}\+={22}\|",
    r"\|   0  NVIDIA GB10                    On  \|   0000000F:01:00\.0 Off \| {18}N/A \|",
    r"\| N/A  [ \d]{2}\dC    P8 +\d+W /  N/A  \| Not Supported {10}\| +\d+%      Default \|",
    r"\| {41}\| {24}\| {18}N/A \|",
    r"\+-{41}\+-{24}\+-{22}\+",
    r"",
    r"\+-{89}\+",
    r"\| Processes: {78}\|",
    r"\|  GPU   GI   CI              PID   Type   Process name {24}GPU Memory \|",
    r"\|        ID   ID {63}Usage      \|",
    r"\|={89}\|",
    r"\|  No running processes found {61}\|",
    r"\+-{89}\+",
]


def test_default_table_has_the_real_gb10_layout(node: Node) -> None:
    result = node.run("nvidia-smi")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    assert len(lines) == len(TABLE_PATTERNS), result.stdout
    for line, pattern in zip(lines, TABLE_PATTERNS, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} !~ {pattern!r}"
    assert all(len(line) == 91 for line in lines[1:] if line)


def test_table_is_byte_identical_to_a_real_spark_apart_from_live_values(node: Node) -> None:
    # NVIDIA/k8s-device-plugin#1482, nvidia-smi on a DGX Spark with driver 580.95.05: the
    # real table (tests/fixtures/nvidia-smi/SOURCES.md), below the stand-in's live date line.
    real = smi_fixture("gb10-580.95.05-table.txt")
    node.set_temperature(40000)
    out = node.run("nvidia-smi").stdout
    assert out.split("\n", 1)[1].startswith(real)


def test_version_is_byte_identical_to_a_real_spark(node: Node) -> None:
    # `nvidia-smi --version` of a GB10 on driver 580.142 (the Spark0 probe in SOURCES.md).
    node.set_hw(driver_version="580.142", cuda_version="13.0")
    version = node.run("nvidia-smi", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout == smi_fixture("gb10-580.142-version.txt")


def test_table_timestamp_and_temperature_are_live(node: Node) -> None:
    node.set_temperature(47000)
    before = datetime.datetime.now().replace(microsecond=0)
    first = node.run("nvidia-smi").stdout
    after = datetime.datetime.now()
    stamp = datetime.datetime.strptime(first.split("\n")[0].strip(), "%a %b %d %H:%M:%S %Y")
    assert before <= stamp <= after
    assert "| N/A   47C    P8" in first
    node.set_temperature(52500)
    second = node.run("nvidia-smi").stdout
    assert "| N/A   52C    P8" in second
    assert "47C" not in second


def test_driver_version_follows_hardware_json(node: Node) -> None:
    node.set_hw(driver_version="580.142", cuda_version="13.1")
    out = node.run("nvidia-smi").stdout
    assert (
        "| NVIDIA-SMI 580.142                Driver Version: 580.142        "
        "CUDA Version: 13.1     |" in out
    )
    assert "580.95.05" not in out
    version = node.run("nvidia-smi", "--version")
    assert version.returncode == 0
    assert version.stdout == (
        "NVIDIA-SMI version  : 580.142\n"
        "NVML version        : 580.142\n"
        "DRIVER version      : 580.142\n"
        "CUDA Version        : 13.1\n"
    )
    csv_out = node.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    assert csv_out.stdout == "580.142\n"


def test_version_of_the_default_driver(node: Node) -> None:
    assert node.run("nvidia-smi", "--version").stdout == (
        "NVIDIA-SMI version  : 580.95.05\n"
        "NVML version        : 580.95\n"
        "DRIVER version      : 580.95.05\n"
        "CUDA Version        : 13.0\n"
    )


def test_list_gpus(node: Node) -> None:
    result = node.run("nvidia-smi", "-L")
    assert result.returncode == 0
    match = re.fullmatch(
        r"GPU 0: NVIDIA GB10 \(UUID: (GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
        r"[0-9a-f]{12})\)\n",
        result.stdout,
    )
    assert match, result.stdout
    assert match.group(1) == gpu_uuid_for(HOST)
    node.set_hw(gpu_uuid="GPU-00000000-1111-2222-3333-444444444444")
    assert "GPU-00000000-1111-2222-3333-444444444444" in node.run("nvidia-smi", "-L").stdout


QUERY = (
    "index,name,driver_version,uuid,pci.bus_id,count,memory.total,memory.used,"
    "memory.free,temperature.gpu,utilization.gpu,compute_cap"
)


def test_query_gpu_csv_with_header_and_units(node: Node) -> None:
    node.set_temperature(44000)
    result = node.run("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv")
    assert result.returncode == 0, result.stdout
    rows = list(csv.reader(io.StringIO(result.stdout), skipinitialspace=True))
    assert rows[0] == [
        "index",
        "name",
        "driver_version",
        "uuid",
        "pci.bus_id",
        "count",
        "memory.total [MiB]",
        "memory.used [MiB]",
        "memory.free [MiB]",
        "temperature.gpu",
        "utilization.gpu [%]",
        "compute_cap",
    ]
    assert rows[1] == [
        "0",
        "NVIDIA GB10",
        "580.95.05",
        gpu_uuid_for(HOST),
        "0000000F:01:00.0",
        "1",
        "[N/A]",
        "[N/A]",
        "[N/A]",
        "44",
        "0 %",
        "12.1",
    ]
    assert len(rows) == 2
    assert ", " in result.stdout.splitlines()[1]


def test_query_gpu_noheader_nounits(node: Node) -> None:
    node.set_temperature(44000)
    out = node.run(
        "nvidia-smi",
        "--query-gpu=index,name,memory.total,utilization.gpu,temperature.gpu",
        "--format=csv,noheader,nounits",
    ).stdout
    # the shape unslothai/unsloth#10703 and others parse on a GB10
    assert out == "0, NVIDIA GB10, [N/A], 0, 44\n"
    noheader = node.run("nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader")
    assert noheader.stdout == "0 %\n"


def test_query_gpu_aliases_and_id_selection(node: Node) -> None:
    out = node.run(
        "nvidia-smi", "-i", "0", "--query-gpu=gpu_name,gpu_bus_id", "--format=csv,noheader"
    )
    assert out.stdout == "NVIDIA GB10, 0000000F:01:00.0\n"
    missing = node.run("nvidia-smi", "-i", "3", "--query-gpu=name", "--format=csv")
    assert missing.returncode == 6
    assert missing.stdout == "No devices were found\n"


def test_unknown_field_is_the_real_error(node: Node) -> None:
    result = node.run("nvidia-smi", "--query-gpu=name,cuda_version", "--format=csv")
    assert result.returncode == 2
    assert result.stdout == 'Field "cuda_version" is not a valid field to query.\n\n'


def test_query_without_csv_format_is_refused(node: Node) -> None:
    result = node.run("nvidia-smi", "--query-gpu=name")
    assert result.returncode == 2
    assert "Invalid combination of input arguments" in result.stdout


def test_unsimulated_option_says_so(node: Node) -> None:
    result = node.run("nvidia-smi", "-q")
    assert result.returncode == 2
    assert "stand-in" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args",
    [(), ("-L",), ("--query-gpu=name", "--format=csv"), ("--version",)],
    ids=["table", "list", "query", "version"],
)
def test_no_gpu_fails_like_a_missing_driver(node: Node, args: tuple[str, ...]) -> None:
    node.set_hw(gpu_present=False)
    result = node.run("nvidia-smi", *args)
    assert result.returncode == 9
    # nvidia-smi's real words (tests/fixtures/nvidia-smi/no-driver-failed.txt), then a blank line.
    assert result.stdout == smi_fixture("no-driver-failed.txt") + "\n"


@pytest.fixture
def gpu_job(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    sleep = shutil.which("sleep")
    if sleep is None or not Path("/proc/self/cmdline").exists():
        pytest.skip("needs /proc and sleep")
    job = tmp_path / "bin" / GPU_JOB
    job.parent.mkdir()
    job.symlink_to(sleep)
    proc = subprocess.Popen([str(job), "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_running_gpu_job_shows_in_the_process_table(
    node: Node, gpu_job: subprocess.Popen[bytes]
) -> None:
    out = node.run("nvidia-smi").stdout
    rows = [line for line in out.splitlines() if re.search(rf"\b{gpu_job.pid}\b", line)]
    assert len(rows) == 1, out
    assert re.fullmatch(
        rf"\|    0   N/A  N/A {gpu_job.pid:>15}      C   \S*{GPU_JOB} +\d+MiB \|", rows[0]
    ), rows[0]
    assert len(rows[0]) == 91
    assert "No running processes found" not in out
    assert re.search(r"\| N/A  [ \d]{2}\dC    P0 ", out)
    apps = node.run(
        "nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"
    ).stdout.splitlines()
    assert apps[0] == "pid, process_name, used_gpu_memory [MiB]"
    assert re.fullmatch(rf"{gpu_job.pid}, \S*{GPU_JOB}, \d+ MiB", apps[1])
    gpu_job.kill()
    gpu_job.wait()
    deadline = time.monotonic() + 10
    while str(gpu_job.pid) in node.run("nvidia-smi").stdout and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "No running processes found" in node.run("nvidia-smi").stdout


# -------------------------------------------------------------- ibdev2netdev
def test_ibdev2netdev_plain_lists_the_twins_in_order(node: Node) -> None:
    result = node.run("ibdev2netdev")
    assert result.returncode == 0
    assert result.stdout == (
        "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)\n"
        "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n"
        "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)\n"
        "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)\n"
    )


def test_ibdev2netdev_state_follows_operstate(node: Node) -> None:
    node.set_operstate("enp1s0f1np1", "down")
    lines = node.run("ibdev2netdev").stdout.splitlines()
    assert lines[1] == "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)"
    assert [line.endswith("(Up)") for line in lines] == [True, False, True, True]
    node.set_operstate("enp1s0f1np1", "up")
    assert node.run("ibdev2netdev").stdout.splitlines()[1].endswith("(Up)")
    node.set_operstate("enP2p1s0f0np0", "lowerlayerdown")
    assert node.run("ibdev2netdev").stdout.splitlines()[2].endswith("(Down)")


def test_ibdev2netdev_missing_netdev_is_down(node: Node) -> None:
    shutil.rmtree(node.netdev("enP2p1s0f1np1"))
    assert node.run("ibdev2netdev").stdout.splitlines()[3] == (
        "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)"
    )


def test_ibdev2netdev_verbose(node: Node) -> None:
    node.set_operstate("enp1s0f0np0", "down")
    lines = node.run("ibdev2netdev", "-v").stdout.splitlines()
    assert lines == [
        "0000:01:00.0 rocep1s0f0 (MT4129 - NA)  fw 28.45.4028 port 1 (DOWN  ) ==> "
        "enp1s0f0np0 (Down)",
        "0000:01:00.1 rocep1s0f1 (MT4129 - NA)  fw 28.45.4028 port 1 (ACTIVE) ==> enp1s0f1np1 (Up)",
        "0002:01:00.0 roceP2p1s0f0 (MT4129 - NA)  fw 28.45.4028 port 1 (ACTIVE) ==> "
        "enP2p1s0f0np0 (Up)",
        "0002:01:00.1 roceP2p1s0f1 (MT4129 - NA)  fw 28.45.4028 port 1 (ACTIVE) ==> "
        "enP2p1s0f1np1 (Up)",
    ]


def test_ibdev2netdev_rejects_unknown_arguments_like_the_script(node: Node) -> None:
    result = node.run("ibdev2netdev", "-x")
    assert result.returncode == 255
    assert result.stdout.endswith(
        "-h, --help                print help message\n-v, --verbose             print more info\n"
    )


# ----------------------------------------------------------------- show_gids
SHOW_GIDS_HEADER = [
    "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV",
    "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---",
]


def test_show_gids_builds_the_table_from_mac_and_ipv4(node: Node) -> None:
    result = node.run("show_gids")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        *SHOW_GIDS_HEADER,
        f"rocep1s0f0\t1\t0\t{LINK_LOCAL['enp1s0f0np0']}\t\t\tv1\tenp1s0f0np0",
        f"rocep1s0f0\t1\t1\t{LINK_LOCAL['enp1s0f0np0']}\t\t\tv2\tenp1s0f0np0",
        f"rocep1s0f1\t1\t0\t{LINK_LOCAL['enp1s0f1np1']}\t\t\tv1\tenp1s0f1np1",
        f"rocep1s0f1\t1\t1\t{LINK_LOCAL['enp1s0f1np1']}\t\t\tv2\tenp1s0f1np1",
        "rocep1s0f1\t1\t2\t0000:0000:0000:0000:0000:ffff:c0a8:640a\t192.168.100.10  \tv1"
        "\tenp1s0f1np1",
        "rocep1s0f1\t1\t3\t0000:0000:0000:0000:0000:ffff:c0a8:640a\t192.168.100.10  \tv2"
        "\tenp1s0f1np1",
        f"roceP2p1s0f0\t1\t0\t{LINK_LOCAL['enP2p1s0f0np0']}\t\t\tv1\tenP2p1s0f0np0",
        f"roceP2p1s0f0\t1\t1\t{LINK_LOCAL['enP2p1s0f0np0']}\t\t\tv2\tenP2p1s0f0np0",
        f"roceP2p1s0f1\t1\t0\t{LINK_LOCAL['enP2p1s0f1np1']}\t\t\tv1\tenP2p1s0f1np1",
        f"roceP2p1s0f1\t1\t1\t{LINK_LOCAL['enP2p1s0f1np1']}\t\t\tv2\tenP2p1s0f1np1",
        "roceP2p1s0f1\t1\t2\t0000:0000:0000:0000:0000:ffff:c0a8:650a\t192.168.101.10  \tv1"
        "\tenP2p1s0f1np1",
        "roceP2p1s0f1\t1\t3\t0000:0000:0000:0000:0000:ffff:c0a8:650a\t192.168.101.10  \tv2"
        "\tenP2p1s0f1np1",
        "n_gids_found=12",
    ]


def test_show_gids_columns_line_up_like_a_real_spark(node: Node) -> None:
    # Tab-expanded rows of show_gids on a GB10 (RoCEv2 hands-on write-up): with a
    # ten-letter device name VER sits at column 88 after a link-local GID and at
    # 96 after an IPv4 address; the header's VER stays at 80.
    out = node.run("show_gids", "rocep1s0f1").stdout
    lines = [line.expandtabs() for line in out.splitlines()]
    assert lines[0] == (
        "DEV     PORT    INDEX   GID                                     "
        "IPv4            VER     DEV"
    )
    assert lines[1] == (
        "---     ----    -----   ---                                     "
        "------------    ---     ---"
    )
    assert lines[2] == (
        "rocep1s0f1      1       0       fe80:0000:0000:0000:4ebb:47ff:fe2d:1a17"
        "                 v1      enp1s0f1np1"
    )
    assert lines[4] == (
        "rocep1s0f1      1       2       0000:0000:0000:0000:0000:ffff:c0a8:640a "
        "192.168.100.10          v1      enp1s0f1np1"
    )
    assert (lines[2].index("v1"), lines[4].index("v1")) == (88, 96)


def test_show_gids_follows_address_changes(node: Node) -> None:
    node.set_ipv4({"enp1s0f1np1": ["10.31.4.2", "172.16.0.1"]})
    out = node.run("show_gids", "rocep1s0f1").stdout.splitlines()
    gids = [(line.split("\t")[2], line.split("\t")[3]) for line in out[2:-1]]
    assert gids == [
        ("0", LINK_LOCAL["enp1s0f1np1"]),
        ("1", LINK_LOCAL["enp1s0f1np1"]),
        ("2", "0000:0000:0000:0000:0000:ffff:0a1f:0402"),
        ("3", "0000:0000:0000:0000:0000:ffff:0a1f:0402"),
        ("4", "0000:0000:0000:0000:0000:ffff:ac10:0001"),
        ("5", "0000:0000:0000:0000:0000:ffff:ac10:0001"),
    ]
    assert out[-1] == "n_gids_found=6"
    assert "192.168.100.10" not in "\n".join(out)
    node.set_ipv4({})
    assert node.run("show_gids", "rocep1s0f1").stdout.splitlines()[-1] == "n_gids_found=2"


def test_show_gids_follows_the_mac(node: Node) -> None:
    (node.netdev("enp1s0f0np0") / "address").write_text("08:c0:eb:3d:ca:54\n")
    out = node.run("show_gids", "rocep1s0f0").stdout
    assert "\tfe80:0000:0000:0000:0ac0:ebff:fe3d:ca54\t" in out
    shutil.rmtree(node.netdev("enp1s0f0np0"))
    assert node.run("show_gids", "rocep1s0f0").stdout.splitlines()[-1] == "n_gids_found=0"


def test_show_gids_unknown_device(node: Node) -> None:
    result = node.run("show_gids", "mlx5_9")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [*SHOW_GIDS_HEADER, "n_gids_found=0"]
    assert "mlx5_9" in result.stderr


# ------------------------------------------------------------ hardware.py
def test_hardware_json_round_trips_and_has_the_schema() -> None:
    hw = LabHardware(driver_version="580.142", cuda_version="13.0", link_rate_mbit=25000)
    text = hw.to_json("spark-02")
    assert LabHardware.from_json(text) == hw
    data = json.loads(text)
    assert list(data) == [
        "gpu_present",
        "gpu_name",
        "driver_version",
        "cuda_version",
        "gpu_uuid",
        "pci_bus_id",
        "roce",
        "link_rate_mbit",
    ]
    assert data["gpu_uuid"] == gpu_uuid_for("spark-02")
    assert data["pci_bus_id"] == "0000000F:01:00.0"
    assert data["link_rate_mbit"] == 25000
    assert data["roce"] == [
        {"ibdev": "rocep1s0f0", "port": 1, "netdev": "enp1s0f0np0", "pci": "0000:01:00.0"},
        {"ibdev": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1", "pci": "0000:01:00.1"},
        {"ibdev": "roceP2p1s0f0", "port": 1, "netdev": "enP2p1s0f0np0", "pci": "0002:01:00.0"},
        {"ibdev": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1", "pci": "0002:01:00.1"},
    ]
    assert len(SPARK_ROCE_PORTS) == 4
    absent = LabHardware(gpu_present=False)
    assert LabHardware.from_json(absent.to_json("x")) == absent
    assert json.loads(absent.to_json("x"))["gpu_present"] is False
    for key in ("gpu_present", "gpu_uuid", "pci_bus_id", "roce", "link_rate_mbit"):
        assert key in HARDWARE_JSON_SCHEMA


def test_gpu_uuid_is_stable_per_host_and_distinct_between_hosts() -> None:
    assert gpu_uuid_for("spark-01") == gpu_uuid_for("spark-01")
    assert gpu_uuid_for("spark-01") != gpu_uuid_for("spark-02")
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        gpu_uuid_for("spark-01"),
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"driver_version": 580}, "driver_version"),
        ({"link_rate_mbit": "1000"}, "link_rate_mbit"),
        ({"link_rate_mbit": True}, "link_rate_mbit"),
        ({"gpu_present": "yes"}, "gpu_present"),
    ],
)
def test_from_json_rejects_bad_values(change: dict[str, object], message: str) -> None:
    data = json.loads(LabHardware().to_json("h"))
    data.update(change)
    with pytest.raises(ValueError, match=message):
        LabHardware.from_json(json.dumps(data))
    del data["gpu_name"]
    with pytest.raises(ValueError, match="gpu_name"):
        LabHardware.from_json(json.dumps(data))


def test_dgx_release_has_the_dgx_os_7_spark_keys() -> None:
    text = render_dgx_release("spark-01")
    lines = text.splitlines()
    assert text.endswith('"\n')
    assert [line.split("=", 1)[0] for line in lines] == [
        "DGX_NAME",
        "DGX_PRETTY_NAME",
        "DGX_SWBUILD_DATE",
        "DGX_SWBUILD_VERSION",
        "DGX_COMMIT_ID",
        "DGX_PLATFORM",
        "DGX_SERIAL_NUMBER",
    ]
    assert lines[0] == 'DGX_NAME="DGX Spark"'
    assert lines[1] == 'DGX_PRETTY_NAME="NVIDIA DGX Spark"'
    assert re.fullmatch(r'DGX_SWBUILD_DATE="\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d"', lines[2])
    assert re.fullmatch(r'DGX_SWBUILD_VERSION="7\.\d+\.\d+"', lines[3])
    serial = re.fullmatch(r'DGX_SERIAL_NUMBER="(\d{13})"', lines[6])
    assert serial
    assert render_dgx_release("spark-01") == text
    assert render_dgx_release("spark-02") != text
    ota_date = "Thu Jun 18 17:40:28 EDT 2026"
    ota = render_dgx_release("spark-01", ota_version="7.5.0", ota_date=ota_date)
    assert ota == text + f'\nDGX_OTA_VERSION="7.5.0"\nDGX_OTA_DATE="{ota_date}"\n'


# ------------------------------------------------------------- the assets
@pytest.mark.parametrize("tool", sorted(STANDIN_PROGRAMS))
def test_standin_scripts_are_executable_stdlib_python(tool: str) -> None:
    path = STANDINS_DIR / tool
    if tool in {"nvidia-smi", "ibdev2netdev", "show_gids"}:
        assert STANDIN_PROGRAMS[tool] == (f"/usr/bin/{tool}",)
        assert os.access(path, os.X_OK)
    assert {p.mode for p in PLACEMENTS if p.source == tool} == {0o755}
    source = path.read_text()
    assert source.startswith("#!/usr/bin/python3\n")
    imported: set[str] = set()
    for stmt in ast.walk(ast.parse(source)):
        if isinstance(stmt, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            imported.add(stmt.module.split(".")[0])
    assert imported, tool
    # nccl-tests runs under mpirun: the lab image installs python3-mpi4py
    # (lab/sparkctl_lab/image.py) for it; every other stand-in is stdlib only.
    allowed = set(sys.stdlib_module_names) | ({"mpi4py"} if tool == "nccl_tests.py" else set())
    assert imported <= allowed, imported - allowed


# ------------------------------------------------- read by the one parser
def test_standin_outputs_are_read_by_the_one_parser_as_real_ones(node: Node) -> None:
    """The roles and validate read the stand-ins with sparkctl.tool_output, exactly as they
    read a Spark: what the stand-ins print must parse as the real tools' output does."""
    from sparkctl.collection import tool_output  # noqa: PLC0415

    node.set_operstate("enp1s0f0np0", "down")
    plain = tool_output.ibdev2netdev(node.run("ibdev2netdev").stdout)
    verbose = tool_output.ibdev2netdev(node.run("ibdev2netdev", "-v").stdout)
    assert [(r["ibdev"], r["netdev"], r["state"]) for r in plain] == [
        (r["ibdev"], r["netdev"], r["state"]) for r in verbose
    ]
    assert [r["port_state"] for r in verbose] == ["DOWN", "ACTIVE", "ACTIVE", "ACTIVE"]
    gpus = tool_output.nvidia_smi_csv(
        node.run(
            "nvidia-smi",
            "--query-gpu=name,driver_version,compute_cap,pci.bus_id,memory.total",
            "--format=csv",
        ).stdout,
        ["name", "driver_version", "compute_cap", "pci.bus_id"],
    )
    assert gpus[0]["name"] == "NVIDIA GB10" and gpus[0]["memory.total"] is None
    assert tool_output.nvidia_smi_cuda(node.run("nvidia-smi").stdout)
    assert (
        tool_output.nvidia_smi_banner(node.run("nvidia-smi", "--version").stdout)["driver_version"]
        == gpus[0]["driver_version"]
    )
    rows = tool_output.show_gids(node.run("show_gids").stdout)
    assert {r["dev"] for r in rows} >= {"rocep1s0f1", "roceP2p1s0f1"}
