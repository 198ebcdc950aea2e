"""validate's driver checks (sparkctl/checks/test_node.py) on real node outputs.

twin_pcie, kernel_module, holds, compute_cap and nvcc, each fed what the node's
tools print (tests/fixtures/<tool>/, each with its SOURCES.md) through a host that
answers commands as testinfra's does; compute_cap also runs the lab's own
nvidia-smi stand-in, which the rehearsal lab's validate asks.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sparkctl.checks import test_node as checks
from sparkctl.collection import tool_output as TO
from sparkctl.plan import NodePlan, Plan
from tests.unit import plans
from tests.unit.pathload import load_file
from tests.unit.test_tool_output_readers import Result

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
STANDIN = ROOT / "lab" / "sparkctl_lab" / "standins" / "nvidia-smi"
HOLD_FILTERS = load_file(
    "nvidia_hold_checks",
    ROOT / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "filter" / "nvidia_hold.py",
)


def fixture(tool: str, name: str) -> str:
    return (FIXTURES / tool / name).read_text()


@dataclass
class Host:
    """testinfra's host as the checks use it: run() answers by the command's argv."""

    answer: Callable[[list[str]], Result]
    commands: list[str] = field(default_factory=list)

    def run(self, command: str) -> Result:
        self.commands.append(command)
        argv = shlex.split(command)
        if argv[:2] == ["timeout", "30"]:
            argv = argv[2:]
        return self.answer(argv)


def answers(table: Mapping[str, Result]) -> Callable[[list[str]], Result]:
    """Answer by the command's first words ('uname -r', 'modinfo -k K nvidia')."""

    def answer(argv: list[str]) -> Result:
        line = " ".join(argv)
        for prefix in sorted(table, key=len, reverse=True):
            if line.startswith(prefix):
                return table[prefix]
        raise AssertionError(f"the check ran an unexpected command: {line}")

    return answer


def spark_plan(**hw: Any) -> tuple[Plan, NodePlan]:
    """One Spark with the dgx_spark profile's capabilities (cluster_hw), and overrides."""
    data = plans.plan_dict(["spark1"], rdma=True)
    data["cluster_hw"].update(
        {"own_kernel": True, "cuda_toolkit": True, "compute_capability": "12.1", **hw}
    )
    plan = Plan.from_dict(data)
    return plan, plan.node("spark1")


def with_driver(plan: Plan, **values: Any) -> tuple[Plan, NodePlan]:
    data = plans.plan_dict(["spark1"], rdma=True)
    data["cluster_hw"] = dict(plan.cluster_hw)
    data["hosts"]["spark1"]["nvidia_driver"].update(values)
    new = Plan.from_dict(data)
    return new, new.node("spark1")


# ------------------------------------------------------------------ twin_pcie
GB10_SPEED = fixture("sysfs-pcie", "gb10-cx7-current_link_speed")
GB10_WIDTH = fixture("sysfs-pcie", "gb10-cx7-current_link_width")
X2_WIDTH = fixture("sysfs-pcie", "gen5-x2-current_link_width")
# lspci on a Spark: "0000:01:00.1 Ethernet controller: ... [ConnectX-7]" (enp1s0f1np1)
PCI_PATH = "/sys/devices/pci0000:00/0000:00:00.0/0000:01:00.1/net/enp1s0f1np1"


def _pcie(current_width: str, where: str = PCI_PATH) -> tuple[list[str], Host]:
    _plan, nplan = spark_plan()
    host = Host(
        answers(
            {
                "readlink -f": Result(0, where + "\n"),
                "cat": Result(0, GB10_SPEED + GB10_SPEED + current_width + GB10_WIDTH),
            }
        )
    )
    seen: list[str] = []
    checks.test_twin_pcie(host, nplan, "a", seen.append)
    return seen, host


def test_twin_pcie_passes_at_gen5_x4() -> None:
    seen, host = _pcie(GB10_WIDTH)
    assert seen == ["enp1s0f1np1 PCIe 32 GT/s x4 (its maximum)"]
    assert host.commands[1] == (
        "cat /sys/class/net/enp1s0f1np1/device/current_link_speed "
        "/sys/class/net/enp1s0f1np1/device/max_link_speed "
        "/sys/class/net/enp1s0f1np1/device/current_link_width "
        "/sys/class/net/enp1s0f1np1/device/max_link_width"
    )


def test_twin_pcie_fails_at_x2_though_the_speed_is_full() -> None:
    with pytest.raises(
        AssertionError,
        match=r"^enp1s0f1np1 PCIe link 32 GT/s x2, below its 32 GT/s x4: this twin gets 50% .*"
        r"update the UEFI/BIOS and firmware \(`sudo fwupdmgr refresh && sudo fwupdmgr upgrade`",
    ):
        _pcie(X2_WIDTH)


def test_twin_pcie_of_an_untrained_link_and_of_the_labs_veth() -> None:
    _plan, nplan = spark_plan()
    down = fixture("sysfs-pcie", "link-down-current_link_speed")
    host = Host(
        answers(
            {
                "readlink -f": Result(0, PCI_PATH + "\n"),
                "cat": Result(0, down + GB10_SPEED + GB10_WIDTH + GB10_WIDTH),
            }
        )
    )
    with pytest.raises(AssertionError, match="its PCIe link is not trained"):
        checks.test_twin_pcie(host, nplan, "a", print)
    with pytest.raises(pytest.skip.Exception, match="is a virtual netdev"):
        _pcie(GB10_WIDTH, where="/sys/devices/virtual/net/enp1s0f1np1")


# ------------------------------------------------------------------ kernel_module
UNAME = fixture("uname", "gb10-dgx-os-6.17.0-1014-nvidia.txt")
MODINFO = fixture("modinfo", "gb10-580.142-6.17.0-1014-nvidia.txt")
NOT_FOUND = fixture("modinfo", "not-found.txt")
# DGX OS's packages of 580.142 on 6.17.0-1014 (tests/fixtures/dpkg: the move set) with
# the Spark's container toolkit beside them.
MOVE_1014 = dict(
    w.split("=", 1)
    for w in fixture("dpkg", "dgx-spark-apt-get-install-1014.txt").split()
    if "=" in w and not w.startswith("-")
)


def dpkg_query_text(packages: Mapping[str, str], held: set[str]) -> str:
    """What `dpkg-query -W -f '${Package}\\t${Version}\\t${Architecture}\\t${db:Status-Abbrev}\\n'`
    prints for these packages (name -> version), ``held`` with desired state h."""
    return "".join(
        f"{name}\t{version}\tarm64\t{'hi' if name in held else 'ii'} \n"
        for name, version in sorted(packages.items())
    )


def spark_packages() -> dict[str, str]:
    toolkit = TO.dpkg_list(fixture("dpkg", "dgx-spark-container-toolkit-dpkg-l.txt"))
    keyring = TO.dpkg_list(fixture("dpkg", "ubuntu-22.04-cuda-12.6-dpkg-l-grep-cuda.txt"))
    return {
        **{n: v for n, v in MOVE_1014.items() if n != "dgx-spark-ota-update-meta"},
        "linux-modules-nvidia-580-open-6.17.0-1014-nvidia": "6.17.0-1014.14+1000",
        **{n: v[0]["version"] for n, v in toolkit.items()},
        "cuda-keyring": keyring["cuda-keyring"][0]["version"],
    }


def _kmod(boot_link: Result, modinfo: Mapping[str, Result]) -> list[str]:
    _plan, nplan = spark_plan()
    plan = _plan
    pkgs = spark_packages()
    table = {
        "dpkg-query": Result(0, dpkg_query_text(pkgs, set())),
        "uname -r": Result(0, UNAME),
        "readlink /boot/vmlinuz": boot_link,
        **{f"modinfo -k {k} nvidia": r for k, r in modinfo.items()},
    }
    seen: list[str] = []
    checks.test_kernel_module(Host(answers(table)), plan, nplan, seen.append)
    return seen


def test_kernel_module_running_and_next_boot_have_the_drivers_module() -> None:
    seen = _kmod(
        Result(0, "vmlinuz-6.17.0-1014-nvidia\n"), {"6.17.0-1014-nvidia": Result(0, MODINFO)}
    )
    assert seen == ["6.17.0-1014-nvidia nvidia 580.142 (running and next boot)"]


def test_kernel_module_a_next_boot_kernel_without_its_module_fails() -> None:
    # apt moved the kernel and held its module package back, as public Spark operators'
    # notes report (tests/fixtures/dpkg/SOURCES.md: the unmet-dependency report).
    with pytest.raises(
        AssertionError,
        match=r"^the next-boot kernel \(/boot/vmlinuz -> vmlinuz-6.17.0-1029-nvidia\) "
        r"6.17.0-1029-nvidia has no nvidia module \(modinfo: ERROR: Module nvidia not found.\): "
        r"it boots without a GPU. Install linux-modules-nvidia-580-open-6.17.0-1029-nvidia",
    ):
        _kmod(
            Result(0, "vmlinuz-6.17.0-1029-nvidia\n"),
            {
                "6.17.0-1014-nvidia": Result(0, MODINFO),
                "6.17.0-1029-nvidia": Result(1, "", NOT_FOUND),
            },
        )


def test_kernel_module_of_another_driver_fails_and_the_lab_skips() -> None:
    older = MODINFO.replace("580.142", "580.95.05")
    with pytest.raises(AssertionError, match=r"has nvidia 580.95.05, driver 580.142 is installed"):
        _kmod(Result(0, "vmlinuz-6.17.0-1014-nvidia\n"), {"6.17.0-1014-nvidia": Result(0, older)})
    plan, nplan = spark_plan(own_kernel=False)
    host = Host(answers({}))
    with pytest.raises(pytest.skip.Exception, match="boots no kernel of its own"):
        checks.test_kernel_module(host, plan, nplan, print)
    assert host.commands == []


def test_boot_kernel_without_the_symlink_is_the_newest_image() -> None:
    host = Host(
        answers(
            {
                "readlink /boot/vmlinuz": Result(1, ""),
                "ls -1 /boot": Result(
                    0,
                    "config-6.17.0-1014-nvidia\nvmlinuz-6.17.0-1008-nvidia\n"
                    "vmlinuz-6.17.0-1014-nvidia\nvmlinuz-6.11.0-1016-nvidia\n",
                ),
            }
        )
    )
    assert checks._boot_kernel(host) == (
        "6.17.0-1014-nvidia",
        "the newest of /boot/vmlinuz-* (3)",
    )


# ------------------------------------------------------------------ holds
UPGRADABLE = fixture("apt", "noble-amd64-list-upgradable.txt")


def _holds(
    pkgs: Mapping[str, str],
    held: set[str],
    *,
    upgradable: Result | None = None,
    plan_nplan: tuple[Plan, NodePlan] | None = None,
) -> list[str]:
    plan, nplan = plan_nplan or spark_plan()
    table = {
        "dpkg-query": Result(0, dpkg_query_text(pkgs, held)),
        "uname -r": Result(0, UNAME),
        "env LC_ALL=C apt list --upgradable": upgradable or Result(0, "Listing... Done\n"),
    }
    seen: list[str] = []
    checks.test_holds(Host(answers(table)), plan, nplan, seen.append)
    return seen


def driver_set(names: Mapping[str, str], nplan: NodePlan) -> set[str]:
    """The names the role itself holds (its filter), to compare the check with."""
    return set(HOLD_FILTERS.nvidia_hold_select(names, nplan.nvidia_driver.hold))


def test_holds_as_provision_leaves_a_spark() -> None:
    pkgs = spark_packages()
    _plan, nplan = spark_plan()
    held = driver_set(pkgs, nplan)
    assert "libnvidia-container1" not in held and "cuda-keyring" not in held
    assert "linux-modules-nvidia-580-open-6.17.0-1014-nvidia" in held
    assert _holds(pkgs, held) == [f"{len(held)} held, the driver set and nothing else"]


def test_holds_the_old_globs_left_on_the_toolkit_and_keyring_fail() -> None:
    pkgs = spark_packages()
    _plan, nplan = spark_plan()
    old = set(HOLD_FILTERS.nvidia_hold_select(pkgs, ["libnvidia-*", "cuda-*"]))
    assert old == {"libnvidia-container1", "libnvidia-container-tools", "cuda-keyring"}
    with pytest.raises(
        AssertionError,
        match=r"^held outside the driver set: cuda-keyring, libnvidia-container-tools, "
        r"libnvidia-container1; .* `sudo apt-mark unhold cuda-keyring "
        r"libnvidia-container-tools libnvidia-container1`",
    ):
        _holds(pkgs, driver_set(pkgs, nplan) | old)


def test_holds_a_loose_driver_package_or_a_missing_kernel_package_fails() -> None:
    pkgs = spark_packages()
    _plan, nplan = spark_plan()
    held = driver_set(pkgs, nplan)
    with pytest.raises(AssertionError, match=r"^not on hold: nvidia-kernel-common-580; "):
        _holds(pkgs, held - {"nvidia-kernel-common-580"})
    no_modules = {k: v for k, v in pkgs.items() if not k.endswith("-6.17.0-1014-nvidia")}
    with pytest.raises(
        AssertionError,
        match=r"the running kernel 6.17.0-1014-nvidia's "
        r"linux-modules-nvidia-580-open-6.17.0-1014-nvidia is not installed",
    ):
        _holds(no_modules, driver_set(no_modules, nplan))


def test_holds_reports_held_packages_with_updates_waiting_security_first() -> None:
    # A plain Ubuntu node of the generic flavour: the real noble listing's installed
    # versions, and the kernel metapackages held with the driver.
    rows = TO.apt_upgradable(UPGRADABLE)
    pkgs = {r["name"]: r["installed"] for r in rows}
    plan, _ = spark_plan(own_kernel=False)
    generic = [p.replace("nvidia-hwe-24.04", "generic") for p in plans.NVIDIA_HOLD]
    plan, nplan = with_driver(plan, hold=generic, kernel_flavour="generic")
    held = driver_set(pkgs, nplan)
    assert held == {"linux-generic", "linux-headers-generic", "linux-image-generic"}
    (seen,) = _holds(pkgs, held, upgradable=Result(0, UPGRADABLE), plan_nplan=(plan, nplan))
    assert seen == (
        "3 held, the driver set and nothing else; WARNING: 3 held with updates waiting "
        "(3 from a security pocket, listed first): "
        "linux-generic 6.8.0-106.106 -> 6.8.0-107.107 (noble-updates,noble-security), "
        "linux-headers-generic 6.8.0-106.106 -> 6.8.0-107.107 (noble-updates,noble-security), "
        "linux-image-generic 6.8.0-106.106 -> 6.8.0-107.107 (noble-updates,noble-security); "
        "update node by node (docs/operate.md)"
    )


def test_holds_on_the_lab_where_nothing_of_the_set_is_installed() -> None:
    plan, nplan = spark_plan(own_kernel=False)
    seen = _holds({"openssh-server": "1:9.2p1-2+deb12u7"}, set(), plan_nplan=(plan, nplan))
    assert seen == ["no package of the driver set installed, nothing held"]


def test_holds_glob_is_the_roles_own_translation() -> None:
    # The check matches with fnmatch, the role with nvidia_hold_regex: the same names.
    names = sorted({*spark_packages(), *(r["name"] for r in TO.apt_upgradable(UPGRADABLE))})
    names += ["libnvidia-compute-5800", "nvidia-driver-580x", "libnvidia-compute-580"]
    _plan, nplan = spark_plan()
    hold = nplan.nvidia_driver.hold
    by_role = HOLD_FILTERS.nvidia_hold_select(names, hold)
    assert by_role == sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in hold))
    assert "libnvidia-compute-580" in by_role and "libnvidia-compute-5800" not in by_role


# ------------------------------------------------------------------ compute_cap, nvcc
HW = {
    "gpu_present": True,
    "gpu_name": "NVIDIA GB10",
    "driver_version": "580.142",
    "cuda_version": "13.0",
    "gpu_uuid": "GPU-00000000-1111-2222-3333-444444444444",
    "pci_bus_id": "0000000F:01:00.0",
}


def standin_host(tmp_path: Path) -> Host:
    """Runs each command here, nvidia-smi being the lab's stand-in (as on a lab node)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    smi.chmod(0o755)
    (tmp_path / "hardware.json").write_text(json.dumps(HW))
    env = dict(
        os.environ,
        SPARKCTL_LAB_HW=str(tmp_path / "hardware.json"),
        SPARKCTL_LAB_SYSFS=str(tmp_path),
        PATH=f"{bin_dir}:/usr/bin:/bin",
    )

    def answer(argv: list[str]) -> Result:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=60, check=False
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return Host(answer)


def test_compute_cap_of_the_labs_nvidia_smi_is_the_profiles(tmp_path: Path) -> None:
    plan, _ = spark_plan()
    seen: list[str] = []
    checks.test_compute_cap(standin_host(tmp_path), plan, seen.append)
    assert seen == ["compute capability 12.1"]
    other, _ = spark_plan(compute_capability="9.0")
    with pytest.raises(
        AssertionError,
        match=r"^compute capability 12.1, the dgx_spark profile expects 9.0 "
        r"\(cluster_hw.compute_capability\)",
    ):
        checks.test_compute_cap(standin_host(tmp_path / "x"), other, print)


def test_compute_cap_of_a_real_gb10_row() -> None:
    # The GB10 inventory row's compute_cap (tests/fixtures/nvidia-smi), alone as queried.
    row = fixture("nvidia-smi", "gb10-query-inventory-noheader.csv").split(", ")[4]
    plan, _ = spark_plan()
    seen: list[str] = []
    checks.test_compute_cap(Host(answers({"nvidia-smi": Result(0, row + "\n")})), plan, seen.append)
    assert seen == ["compute capability 12.1"]


NVCC = fixture("nvcc", "gb10-13.0.88-version.txt")


def test_nvcc_on_a_spark_and_its_failures() -> None:
    plan, nplan = spark_plan()
    seen: list[str] = []
    checks.test_nvcc(
        Host(answers({"/usr/local/cuda/bin/nvcc --version": Result(0, NVCC)})),
        plan,
        nplan,
        seen.append,
    )
    assert seen == ["/usr/local/cuda/bin/nvcc: CUDA 13.0, V13.0.88"]
    plan13, nplan13 = with_driver(plan, cuda_release="13.1")
    with pytest.raises(
        AssertionError,
        match=r"is CUDA 13.0 \(V13.0.88\), want CUDA 13.1 .*install cuda-toolkit-13-1",
    ):
        checks.test_nvcc(Host(answers({"/usr": Result(0, NVCC)})), plan13, nplan13, print)
    gone = Result(127, "", "timeout: failed to run command '/usr/local/cuda/bin/nvcc'\n")
    with pytest.raises(AssertionError, match=r"^no nvcc at /usr/local/cuda/bin/nvcc"):
        checks.test_nvcc(Host(answers({"/usr": gone})), plan, nplan, print)
    lab, nlab = spark_plan(cuda_toolkit=False)
    with pytest.raises(pytest.skip.Exception, match="no CUDA toolkit on the dgx_spark profile"):
        checks.test_nvcc(Host(answers({})), lab, nlab, print)
