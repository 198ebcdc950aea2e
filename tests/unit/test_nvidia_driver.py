"""roles/nvidia_driver: its modules, its hold set, the role's interface and its Jinja.

The module's parsers are fed real nvidia-smi output from public reports, kept
in tests/fixtures/nvidia-smi/ (its SOURCES.md names each); the whole module is also run as
Ansible runs it (a subprocess with a JSON argument file) against the lab's
nvidia-smi stand-in, with the GPU present and with the driver "not loaded".
The hold set, the kernel/module check and the nvcc check are fed real package
names and real modinfo, uname and nvcc outputs (tests/fixtures/<tool>/, each
with its SOURCES.md).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from sparkctl.collection import tool_output as TO
from tests.unit.pathload import load_file, module_command

# init_plugin_loader() warns from its second call in one process (see test_inventory.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles" / "nvidia_driver"
MODULE_PATH = ROLE.parents[1] / "plugins" / "modules" / "nvidia_gpu_info.py"
STANDIN = ROOT / "lab" / "sparkctl_lab" / "standins" / "nvidia-smi"


def load_module() -> ModuleType:
    return load_file("nvidia_gpu_info", MODULE_PATH)


M = load_module()

# ------------------------------------------------------------- real samples
# Real nvidia-smi outputs, kept once under tests/fixtures/nvidia-smi/ (its
# SOURCES.md names each one's public source), never copied here.
SMI_FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"


def smi_fixture(name: str) -> str:
    return (SMI_FIXTURES / name).read_text()


# DGX Spark, driver 580.95.05: NVIDIA/k8s-device-plugin issue #1482 (the
# layout the lab's stand-in reproduces byte for byte).
GB10_580_95 = smi_fixture("gb10-580.95.05-table.txt")
# DGX Spark, driver 580.126.09: snowflakedb/ArcticTraining PR #345.
GB10_580_126 = smi_fixture("gb10-580.126.09-table.txt")
# A discrete GPU on driver 580.82.09, with the process table: patfinder/cuda-1 README.md.
GTX960_580_82 = smi_fixture("gtx960-580.82.09-table.txt")
# R610 renames the header fields: sgl-project/sglang issue #27487 (B200, 610.43.02).
B200_610 = smi_fixture("b200-610.43.02-umd-banner.txt")
# The older, narrower table: rossumai/nvgpu PR #15 (driver 450.57, CUDA 11.0).
TITAN_450 = smi_fixture("titanxp-450.57-table.txt")

# `--query-gpu=name,driver_version,compute_cap,pci.bus_id --format=csv` on a
# Spark; values as in the GB10 inventory line of tests/fixtures/nvidia-smi
# ("0, NVIDIA GB10, 0000000F:01:00.0, 580.142, 12.1, ..."), the header as
# nvidia-smi prints these fields' names (the lab stand-in prints the same).
GB10_CSV = (
    "name, driver_version, compute_cap, pci.bus_id\nNVIDIA GB10, 580.142, 12.1, 0000000F:01:00.0\n"
)

# nvidia-smi's own words when the kernel driver is not loaded (the module sees them
# with exit 9, as the lab's stand-in prints them): lyulyul/shine-cluster issue #50.
NO_DRIVER = smi_fixture("no-driver-failed.txt")


@pytest.mark.parametrize(
    ("text", "driver", "cuda"),
    [
        (GB10_580_95, "580.95.05", "13.0"),
        (GB10_580_126, "580.126.09", "13.0"),
        (GTX960_580_82, "580.82.09", "13.0"),
        (B200_610, "610.43.02", "13.3"),
        (TITAN_450, "450.57", "11.0"),
    ],
    ids=["gb10-580.95", "gb10-580.126", "gtx960-580.82", "b200-610-kmd-umd", "titan-450"],
)
def test_header_gives_driver_and_cuda(text: str, driver: str, cuda: str) -> None:
    banner = TO.nvidia_smi_banner(text)
    assert (banner["driver_version"], banner["cuda_version"]) == (driver, cuda)


def test_header_without_versions() -> None:
    assert TO.nvidia_smi_banner("No devices were found\n") == {
        "smi_version": None,
        "driver_version": None,
        "cuda_version": None,
    }


def test_query_csv_one_gb10() -> None:
    assert M.gpus_of(GB10_CSV) == [
        {
            "index": 0,
            "name": "NVIDIA GB10",
            "driver_version": "580.142",
            "compute_cap": "12.1",
            "pci_bus_id": "0000000F:01:00.0",
        }
    ]


def test_query_csv_several_gpus_and_not_available_values() -> None:
    # Names and bus ids from the B200 node in sglang #27487.
    text = (
        "name, driver_version, compute_cap, pci.bus_id\n"
        "NVIDIA B200, 610.43.02, 10.0, 00000000:63:00.0\n"
        "NVIDIA B200, 610.43.02, [N/A], 00000000:68:00.0\n\n"
    )
    gpus = M.gpus_of(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert [g["pci_bus_id"] for g in gpus] == ["00000000:63:00.0", "00000000:68:00.0"]
    assert gpus[1]["compute_cap"] is None


def test_query_csv_empty_is_no_gpu() -> None:
    assert M.gpus_of("") == []


def test_query_csv_wrong_field_count_is_an_error() -> None:
    with pytest.raises(M.GpuInfoError, match="2 fields, header has 4"):
        M.gpus_of("name, driver_version, compute_cap, pci.bus_id\nNVIDIA GB10, 580.142\n")


def test_query_csv_is_read_by_its_header_not_by_position() -> None:
    # The same GPU with the columns in another order: the same values come out.
    text = (
        "pci.bus_id, compute_cap, name, driver_version\n"
        "0000000F:01:00.0, 12.1, NVIDIA GB10, 580.142\n"
    )
    assert M.gpus_of(text) == M.gpus_of(GB10_CSV)
    with pytest.raises(M.GpuInfoError, match="lacks compute_cap"):
        M.gpus_of("name, driver_version, pci.bus_id\nNVIDIA GB10, 580.142, 0000000F:01:00.0\n")


# ------------------------------------------------------------- gpu_info
class FakeSmi:
    """Answers the two nvidia-smi calls the module makes, and records them."""

    def __init__(self, query: tuple[int, str, str], table: tuple[int, str, str]) -> None:
        self.query = query
        self.table = table
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        return self.query if len(argv) > 1 else self.table


def test_gpu_info_on_a_spark() -> None:
    smi = FakeSmi((0, GB10_CSV, ""), (0, GB10_580_126, ""))
    info = M.gpu_info("/usr/bin/nvidia-smi", "spark1", smi)
    assert smi.calls == [
        [
            "/usr/bin/nvidia-smi",
            "--query-gpu=name,driver_version,compute_cap,pci.bus_id",
            "--format=csv",
        ],
        ["/usr/bin/nvidia-smi"],
    ]
    assert info["gpu_count"] == 1
    assert info["gpus"][0]["name"] == "NVIDIA GB10"
    assert info["driver_version"] == "580.142"  # the query's, not the header's
    assert info["cuda_version"] == "13.0"


def test_gpu_info_without_nvidia_smi() -> None:
    with pytest.raises(M.GpuInfoError, match=r"^nvidia-smi not found on spark2: "):
        M.gpu_info(None, "spark2", FakeSmi((0, "", ""), (0, "", "")))


def test_gpu_info_driver_not_loaded() -> None:
    smi = FakeSmi((9, NO_DRIVER, ""), (9, NO_DRIVER, ""))
    with pytest.raises(M.GpuInfoError) as info:
        M.gpu_info("/usr/bin/nvidia-smi", "spark3", smi)
    assert str(info.value) == (
        "no GPU answers on spark3: NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and "
        "running. (nvidia-smi exit 9)"
    )


def test_gpu_info_error_text_from_stderr_when_stdout_is_empty() -> None:
    smi = FakeSmi((255, "", "Unknown Error\n"), (0, "", ""))
    with pytest.raises(M.GpuInfoError, match=r"spark4: Unknown Error \(nvidia-smi exit 255\)"):
        M.gpu_info("/usr/bin/nvidia-smi", "spark4", smi)


def test_gpu_info_table_fails_after_query() -> None:
    smi = FakeSmi((0, GB10_CSV, ""), (9, NO_DRIVER, ""))
    with pytest.raises(M.GpuInfoError, match=r"^no GPU answers on spark1: NVIDIA-SMI has failed"):
        M.gpu_info("/usr/bin/nvidia-smi", "spark1", smi)


def test_gpu_info_header_without_cuda_version() -> None:
    smi = FakeSmi((0, GB10_CSV, ""), (0, "| NVIDIA-SMI 580.142   Driver Version: 580.142 |\n", ""))
    with pytest.raises(M.GpuInfoError, match="shows no CUDA version"):
        M.gpu_info("/usr/bin/nvidia-smi", "spark1", smi)


def test_gpu_info_no_gpu_listed_is_returned_for_verify_to_judge() -> None:
    info = M.gpu_info("/usr/bin/nvidia-smi", "spark1", FakeSmi((0, "", ""), (0, GB10_580_95, "")))
    assert info["gpu_count"] == 0
    assert info["driver_version"] == "580.95.05"  # from the header then


def test_gpu_info_cannot_run() -> None:
    def run(argv: list[str]) -> tuple[int, str, str]:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    with pytest.raises(M.GpuInfoError, match=r"^cannot run /opt/x/nvidia-smi on spark1: "):
        M.gpu_info("/opt/x/nvidia-smi", "spark1", run)


# ------------------------------------------- the module as Ansible runs it
def run_module(tmp_path: Path, hw: dict[str, Any] | None, **args: Any) -> dict[str, Any]:
    """Run the module file with a JSON argument file, nvidia-smi being the lab stand-in."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    smi.chmod(0o755)
    hw_path = tmp_path / "hardware.json"
    if hw is not None:
        hw_path.write_text(json.dumps(hw))
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(
        os.environ,
        SPARKCTL_LAB_HW=str(hw_path),
        SPARKCTL_LAB_SYSFS=str(tmp_path),
        PATH=f"{smi.parent}:/usr/bin:/bin",
    )
    proc = subprocess.run(
        module_command(MODULE_PATH, str(argfile)),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stderr
    return result


HW = {
    "gpu_present": True,
    "gpu_name": "NVIDIA GB10",
    "driver_version": "580.95.05",
    "cuda_version": "13.0",
    "gpu_uuid": "GPU-00000000-1111-2222-3333-444444444444",
    "pci_bus_id": "0000000F:01:00.0",
}


def test_module_against_the_lab_standin(tmp_path: Path) -> None:
    result = run_module(tmp_path, HW, node_name="spark1")
    assert result["changed"] is False
    assert result["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA GB10",
            "driver_version": "580.95.05",
            "compute_cap": "12.1",
            "pci_bus_id": "0000000F:01:00.0",
        }
    ]
    assert (result["driver_version"], result["cuda_version"]) == ("580.95.05", "13.0")
    assert result["nvidia_smi"] == str(tmp_path / "bin" / "nvidia-smi")  # found on PATH


def test_module_when_the_gpu_does_not_answer(tmp_path: Path) -> None:
    result = run_module(tmp_path, {**HW, "gpu_present": False}, node_name="spark3")
    assert result["failed"] is True
    assert result["msg"] == (
        "no GPU answers on spark3: NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and "
        "running. (nvidia-smi exit 9)"
    )


def test_module_with_a_missing_nvidia_smi(tmp_path: Path) -> None:
    result = run_module(
        tmp_path, HW, nvidia_smi=str(tmp_path / "nowhere" / "nvidia-smi"), node_name="spark2"
    )
    assert result["failed"] is True
    assert result["msg"].startswith(f"cannot run {tmp_path}/nowhere/nvidia-smi on spark2: ")


def test_module_without_nvidia_smi_anywhere(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi", path="/usr/bin:/bin:/sbin:/usr/sbin:/usr/local/sbin"):
        pytest.skip("this machine has a real nvidia-smi")
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"node_name": "spark2"}}))
    proc = subprocess.run(
        module_command(MODULE_PATH, str(argfile)),
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH="/usr/bin:/bin"),
        timeout=60,
        check=False,
    )
    assert json.loads(proc.stdout)["msg"].startswith(
        "nvidia-smi not found on spark2: the NVIDIA driver is not installed"
    )


# ------------------------------------------------------ the role's interface
def yaml_file(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


DEFAULTS = yaml_file(ROLE / "defaults" / "main.yml")


def test_defaults_are_what_the_cluster_needs() -> None:
    assert DEFAULTS["nvidia_driver_min_version"] == "580.0"
    assert DEFAULTS["nvidia_driver_kernel_flavour"] == "nvidia-hwe-24.04"
    assert DEFAULTS["nvidia_driver_nvcc"] == "/usr/local/cuda/bin/nvcc"  # DGX OS: not on PATH
    assert DEFAULTS["nvidia_driver_min_nvcc"] == "13.0"
    assert DEFAULTS["nvidia_driver_min_cuda"] == "13.0"
    assert DEFAULTS["nvidia_driver_expected_gpu"] == "GB10"
    assert DEFAULTS["nvidia_driver_allow_reboot"] is False
    assert "ubuntu2404/sbsa/cuda-keyring" in DEFAULTS["nvidia_driver_cuda_keyring_url"]


def test_no_shell_in_the_role() -> None:
    for path in (ROLE / "tasks").glob("*.yml"):
        text = path.read_text()
        assert not re.search(r"ansible\.builtin\.(shell|command)\b", text), path.name
        assert "ignore_errors" not in text, path.name


# ------------------------------------------------------------ the role's Jinja
# Ansible's own templating, run in a child process: importing ansible.template
# here would load ansible's constants in the test process, before
# sparkctl.inventory sets the environment it needs for that (see the report).
# The role's filter plugins are loaded as a role's are, and the role's vars
# are templates themselves (trusted, as Ansible trusts a role's vars files).
_RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader, init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader()
filter_loader.add_directory(sys.argv[1])
def trust(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trust(v) for v in value]
    if isinstance(value, dict):
        return {k: trust(v) for k, v in value.items()}
    return value
out = []
for expression, variables in json.load(sys.stdin):
    templar = Templar(loader=DataLoader(), variables=trust(variables))
    out.append(templar.template(trust_as_template(expression)))
json.dump(out, sys.stdout)
"""

VARS = yaml_file(ROLE / "vars" / "main.yml")
FILTERS = load_file("nvidia_hold", ROLE.parents[1] / "plugins" / "filter" / "nvidia_hold.py")
FIXTURES = ROOT / "tests" / "fixtures"


def render(*cases: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each (expression, extra variables) templated with the role's defaults and vars.
    The same cases are templated once and the text kept (a child process with
    Ansible's imports is a second of CPU): several tests read the default hold set,
    each from its own copy."""
    payload = json.dumps([[expr, {**DEFAULTS, **VARS, **extra}] for expr, extra in cases])
    result: list[Any] = json.loads(_rendered(payload))
    return result


@functools.cache
def _rendered(payload: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _RENDER, str(ROLE.parents[1] / "plugins" / "filter")],
        input=payload,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def fixture(tool: str, name: str) -> str:
    return (FIXTURES / tool / name).read_text()


def dpkg_l_names(text: str) -> list[str]:
    """Package names of `dpkg -l` lines ("ii  name[:arch]  version  arch  description")."""
    return [line.split()[1].split(":")[0] for line in text.splitlines() if line.startswith("ii ")]


def name_version_pairs(text: str) -> dict[str, str]:
    """`name=version` words (apt-get install arguments, package baselines)."""
    pairs = (w.split("=", 1) for w in text.split() if "=" in w and not w.startswith("-"))
    return dict(pairs)


# Real names: an Ubuntu 24.04 580.95.05 node's `dpkg -l` and three DGX Spark
# package lists (tests/fixtures/dpkg/SOURCES.md).
UBUNTU_580 = dpkg_l_names(fixture("dpkg", "ubuntu-24.04-580.95.05-dpkg-l.txt"))
SPARK_BASELINE = name_version_pairs(fixture("dpkg", "dgx-spark-package-baseline.txt"))
SPARK_MOVE_1014 = name_version_pairs(fixture("dpkg", "dgx-spark-apt-get-install-1014.txt"))
SPARK_UNMET = re.findall(
    r"^ (\S+) +: Depends: (\S+)", fixture("dpkg", "dgx-spark-apt-unmet-depends.txt"), re.M
)


def hold_set(**extra: Any) -> list[str]:
    (patterns,) = render(("{{ _nvidia_driver_hold_set }}", extra))
    return list(patterns)


def hold_matches(names: list[str], **extra: Any) -> list[str]:
    """What configure would hold: names matching _nvidia_driver_hold_regex (Jinja's `match`)."""
    (matched,) = render(
        (
            "{{ names | select('match', _nvidia_driver_hold_regex) | sort }}",
            {"names": names, **extra},
        )
    )
    return list(matched)


def test_the_hold_set_is_the_driver_branch_its_cuda_nccl_and_the_kernel_with_its_modules() -> None:
    patterns = hold_set()
    assert patterns == [
        "nvidia-driver-580",
        "nvidia-driver-580-*",
        "nvidia-dkms-580",
        "nvidia-dkms-580-*",
        "nvidia-kernel-common-580",
        "nvidia-kernel-source-580",
        "nvidia-kernel-source-580-*",
        "nvidia-utils-580",
        "nvidia-utils-580-*",
        "nvidia-compute-utils-580",
        "nvidia-compute-utils-580-*",
        "nvidia-firmware-580-*",
        "libnvidia-*-580",
        "xserver-xorg-video-nvidia-580",
        "cuda-drivers-580",
        "cuda-*-13-0",
        *DEFAULTS["nvidia_driver_hold_packages"],
        "linux-nvidia-hwe-24.04",
        "linux-image-nvidia-hwe-24.04",
        "linux-headers-nvidia-hwe-24.04",
        "linux-tools-nvidia-hwe-24.04",
        "linux-modules-nvidia-fs-nvidia-hwe-24.04",
        "linux-modules-nvidia-580-open-*",
    ]
    assert DEFAULTS["nvidia_driver_hold_packages"] == ["libnccl2", "libnccl-dev"]


# Real DGX OS package names beside the driver (tests/fixtures/dpkg/SOURCES.md):
# the NVIDIA Container Toolkit of a Spark on 580.142 / 6.17.0-1014, and
# cuda-keyring with versioned CUDA packages and a held libnccl2.
SPARK_TOOLKIT = TO.dpkg_list(fixture("dpkg", "dgx-spark-container-toolkit-dpkg-l.txt"))
CUDA_12_6 = TO.dpkg_list(fixture("dpkg", "ubuntu-22.04-cuda-12.6-dpkg-l-grep-cuda.txt"))


def test_the_container_toolkit_and_cuda_keyring_are_never_held() -> None:
    # The old `libnvidia-*` and `cuda-*` held both, and with them the toolkit's
    # security fixes (CVE-2025-23266) and the repository's key.
    beside = sorted({*SPARK_TOOLKIT, *CUDA_12_6, *SPARK_MOVE_1014, *UBUNTU_580})
    held = hold_matches(beside)
    assert not [n for n in held if n.startswith(("libnvidia-container", "nvidia-container"))]
    assert "cuda-keyring" not in held
    assert {"libnvidia-container1", "libnvidia-container-tools", "cuda-keyring"} <= set(beside)
    # ... while the driver branch, its modules and the kernel still are.
    assert {
        "nvidia-driver-580-open",
        "nvidia-kernel-common-580",
        "libnvidia-compute-580",
        "linux-modules-nvidia-580-open-nvidia-hwe-24.04",
        "linux-image-nvidia-hwe-24.04",
        "libnccl2",
    } <= set(held)


def test_cuda_is_held_at_its_version_only() -> None:
    names = sorted(CUDA_12_6)
    held = hold_matches(names, nvidia_driver_cuda_package_version="12-6")
    assert held == [
        "cuda-compat-12-6",
        "cuda-cudart-12-6",
        "cuda-libraries-12-6",
        "cuda-nvrtc-12-6",
        "cuda-nvtx-12-6",
        "cuda-opencl-12-6",
        "libnccl2",
    ]  # not cuda-keyring, nor the unversioned cuda-toolkit-*-config-common
    assert "cuda-cudart-12-6" not in hold_matches(names)  # CUDA 13.0 holds 13-0 only


def test_holds_the_old_patterns_placed_are_released_and_the_operators_stay() -> None:
    # A node provisioned with the old list: the toolkit and cuda-keyring were held
    # by it; libfoo is held by the operator; libnccl2 stays in the set.
    old_list = "# comment\nlibnvidia-*\ncuda-*\nlibnccl2\n"
    packages: dict[str, Any] = {
        **{n: [{**v[0], "selection": "hold"}] for n, v in SPARK_TOOLKIT.items()},
        "cuda-keyring": [{**CUDA_12_6["cuda-keyring"][0], "selection": "hold"}],
        "libnccl2": [{**CUDA_12_6["libnccl2"][0]}],  # "hi" in the fixture
        "libnvidia-compute-580": [{"name": "libnvidia-compute-580", "selection": "hold"}],
        "libfoo": [{"name": "libfoo", "selection": "hold"}],
    }
    assert FILTERS.nvidia_hold_release(packages, old_list, hold_set()) == [
        "cuda-keyring",
        "libnvidia-container-tools",
        "libnvidia-container1",
    ]
    assert FILTERS.nvidia_hold_release(packages, "", hold_set()) == []  # no list: none ours
    assert FILTERS.nvidia_hold_list_patterns("a-*\n# x\n\nNot A Pattern\n") == ["a-*"]


def test_the_hold_set_follows_branch_and_flavour() -> None:
    patterns = hold_set(
        nvidia_driver_branch="590", nvidia_driver_kernel_flavour="generic-hwe-24.04"
    )
    assert "linux-modules-nvidia-590-open-*" in patterns
    assert "linux-image-generic-hwe-24.04" in patterns
    assert not [p for p in patterns if "580" in p or "nvidia-hwe" in p]


def test_every_package_that_moves_a_spark_kernel_or_driver_is_held() -> None:
    # The whole set an operator moved together to 6.17.0-1014 / 580.142, the
    # baseline of four Sparks, and both packages of apt's unmet-dependency
    # report: all in the hold set (dgx-spark-ota-update-meta aside).
    moved = [n for n in SPARK_MOVE_1014 if n != "dgx-spark-ota-update-meta"]
    stranded = [pkg for pkg, _ in SPARK_UNMET] + [dep for _, dep in SPARK_UNMET]
    names = sorted(
        set(moved)
        | {
            "linux-nvidia-hwe-24.04",
            "linux-image-nvidia-hwe-24.04",
            "linux-modules-nvidia-580-open-nvidia-hwe-24.04",
            "nvidia-driver-580-open",
        }
        | set(stranded)
    )
    assert hold_matches(names) == names
    assert "linux-modules-nvidia-580-open-6.17.0-1014-nvidia" in names
    assert "nvidia-kernel-common-580" in names


def test_the_rest_of_a_spark_is_not_held() -> None:
    others = [n for n in SPARK_BASELINE if not n.startswith(("linux-", "nvidia-"))]
    assert others == ["dgx-dashboard", "dgx-oobe", "fwupd", "tailscale"]
    kept = [
        *others,
        "dgx-spark-ota-update-meta",
        "linux-firmware",
        "gcc-13",
        "libnccl2-dbg",
        "nvidia-container-toolkit",
        "linux-image-6.17.0-1014-nvidia",
        "openssh-server",
    ]
    assert hold_matches(kept) == []


def test_on_ubuntu_580_the_driver_and_its_modules_are_held_and_other_nvidia_tools_are_not() -> None:
    # The generic-hwe flavour of plain Ubuntu, set as a site would.
    held = hold_matches(UBUNTU_580, nvidia_driver_kernel_flavour="generic-hwe-24.04")
    assert set(UBUNTU_580) - set(held) == {
        "libnvidia-egl-wayland1",  # Wayland's EGL library: no branch in its name
        "nsight-compute-2025.4.0",
        "nvidia-prime",
        "nvidia-settings",
        "screen-resolution-extra",
    }
    assert {
        "linux-modules-nvidia-580-open-6.14.0-37-generic",
        "linux-modules-nvidia-580-open-generic-hwe-24.04",
        "nvidia-kernel-common-580",
        "nvidia-driver-580-open",
        "libnvidia-compute-580",
    } <= set(held)


def test_patterns_are_globs_not_regexes() -> None:
    names = ["less", "lesspipe", "g++-12", "g++-13", "gxx-12", "libfoo.so", "libfooxso"]
    assert FILTERS.nvidia_hold_select(names, ["les?", "g++-1?", "lib*.so"]) == [
        "g++-12",
        "g++-13",
        "less",
        "libfoo.so",
    ]
    assert FILTERS.nvidia_hold_select(names, ["nothing-*"]) == []
    assert FILTERS.nvidia_hold_regex("linux-nvidia-hwe-24.04") == "^linux-nvidia-hwe-24[.]04$"
    assert "\\" not in "".join(FILTERS.nvidia_hold_regex(p) for p in hold_set())


@pytest.mark.parametrize(
    "bad", ['nvidia-"; };', "nvidia driver", "Nvidia-*", "-x", "a", "nvidia-$", "nvidia\\-"]
)
def test_what_is_not_a_package_name_never_reaches_a_file(bad: str) -> None:
    assert FILTERS.nvidia_hold_pattern_problems([bad, "libnccl2"]) == [repr(bad)]
    with pytest.raises(ValueError, match="is not a package name pattern"):
        FILTERS.nvidia_hold_regex(bad)


def blacklist_entries(text: str) -> list[str]:
    """The quoted entries of the Package-Blacklist block, as apt-config would list them."""
    block = text[text.index("Unattended-Upgrade::Package-Blacklist {") :]
    return re.findall(r'^\s+"([^"]*)";$', block[: block.index("};")], re.M)


def rendered_blacklist(**extra: Any) -> str:
    source = (ROLE / "templates" / "51sparkctl-nvidia-hold.j2").read_text()
    (text,) = render((source, {"ansible_managed": "Ansible managed", **extra}))
    return str(text)


def test_unattended_upgrades_blacklist_is_the_hold_set() -> None:
    text = rendered_blacklist()
    entries = blacklist_entries(text)
    assert entries == [FILTERS.nvidia_hold_regex(p) for p in hold_set()]
    assert all(
        line.startswith("//")
        for line in text.splitlines()
        if line.strip()
        and "Package-Blacklist" not in line
        and line.strip() != "};"
        and not line.startswith('    "')
    )


def test_the_blacklist_read_as_unattended_upgrades_reads_it_selects_what_dpkg_holds() -> None:
    # unattended-upgrades matches each entry with Python's re.match (from the
    # start of the name); the hold uses Jinja's `match` on the joined regex.
    entries = blacklist_entries(rendered_blacklist())
    names = sorted(
        {
            *UBUNTU_580,
            *SPARK_BASELINE,
            *SPARK_MOVE_1014,
            *(p for p, _ in SPARK_UNMET),
            "libnccl2-dbg",
            "cuda-toolkit-13-0",
            "linux-modules-nvidia-580-open-6.17.0-1029-nvidia",
            "libc6",
        }
    )
    by_blacklist = sorted(n for n in names if any(re.match(e, n) for e in entries))
    assert by_blacklist == hold_matches(names)
    assert "libnccl2-dbg" not in by_blacklist  # the $ of "libnccl2$"


def test_hold_list_file_names_the_set_one_pattern_a_line() -> None:
    source = (ROLE / "templates" / "nvidia-hold.list.j2").read_text()
    (text,) = render((source, {"ansible_managed": "Ansible managed"}))
    lines = [line for line in str(text).splitlines() if line and not line.startswith("#")]
    assert lines == hold_set()


def test_playbook_runs_preflight_first_then_the_role_on_the_sparks() -> None:
    plays = yaml_file(ROOT / "playbooks" / "nvidia_driver.yml")
    assert plays[0]["ansible.builtin.import_playbook"] == "preflight.yml"
    assert plays[1]["hosts"] == "sparks"
    assert plays[1]["roles"][0]["role"] == "sparkctl.spark.nvidia_driver"


def test_render_playbook_renders_this_role() -> None:
    tasks = yaml_file(ROOT / "playbooks" / "render.yml")[1]["tasks"]
    assert {"name": "sparkctl.spark.nvidia_driver", "tasks_from": "render.yml"} in [
        t["ansible.builtin.include_role"] for t in tasks
    ]


def test_module_documentation_is_valid_yaml() -> None:
    doc = yaml.safe_load(textwrap.dedent(M.DOCUMENTATION))
    assert doc["module"] == "nvidia_gpu_info"
    assert set(doc["options"]) == {"nvidia_smi", "node_name"}
    assert set(yaml.safe_load(M.RETURN)) == {
        "gpus",
        "gpu_count",
        "driver_version",
        "cuda_version",
        "nvidia_smi",
    }


# --------------------------------------------------- the hardware profiles
PROFILES = yaml_file(
    ROOT
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "cluster_defaults"
    / "vars"
    / "main.yml"
)["_cluster_defaults_hw_profiles"]


def test_a_spark_is_compute_capability_12_1_with_cuda_and_its_own_kernel() -> None:
    spark = PROFILES["dgx_spark"]
    assert spark["compute_capability"] == "12.1"
    assert spark["cuda_arch"] == "sm_" + spark["compute_capability"].replace(".", "")
    assert spark["cuda_toolkit"] is True
    assert spark["own_kernel"] is True


def test_the_lab_profile_says_what_its_stand_ins_produce() -> None:
    sim = PROFILES["sim"]
    # The nvidia-smi stand-in's compute_cap field.
    assert '"compute_cap": ("compute_cap", "12.1", None)' in STANDIN.read_text()
    assert sim["compute_capability"] == "12.1"
    # No nvcc and no kernel of its own on a lab node: nothing stands in for them.
    standins = load_file("lab_standins", ROOT / "lab" / "sparkctl_lab" / "standins" / "__init__.py")
    targets = {t for p in standins.PLACEMENTS for t in p.targets}
    assert DEFAULTS["nvidia_driver_nvcc"] not in targets and sim["cuda_toolkit"] is False
    assert not any("modinfo" in t or t.startswith("/boot") for t in targets)
    assert sim["own_kernel"] is False


# ------------------------------------------------ nvidia_kernel_modules
KM = load_file(
    "nvidia_kernel_modules", ROLE.parents[1] / "plugins" / "modules" / "nvidia_kernel_modules.py"
)
GRUB_CFG = fixture("grub", "dgx-os-two-kernels.grub.cfg")
GB10_MODINFO = fixture("modinfo", "gb10-580.142-6.17.0-1014-nvidia.txt")
NOT_FOUND = fixture("modinfo", "not-found.txt")
PREFIX = "linux-modules-nvidia-580-open-"


def test_upstream_version_of_real_debian_versions() -> None:
    assert TO.debian_upstream_version("580.95.05-0ubuntu0.24.04.3") == "580.95.05"
    assert TO.debian_upstream_version("580.142-0ubuntu0.24.04.1") == "580.142"
    assert TO.debian_upstream_version("1:1.1.13-1ubuntu0.1") == "1.1.13"
    assert TO.debian_upstream_version("580.159.03-0ubuntu192.0.2.10") == "580.159.03"
    assert TO.debian_upstream_version("") is None


def test_modinfo_of_a_spark() -> None:
    assert TO.modinfo(GB10_MODINFO) == {
        "filename": "/lib/modules/6.17.0-1014-nvidia/kernel/nvidia-580-open/nvidia.ko",
        "version": "580.142",
        "vermagic": "6.17.0-1014-nvidia SMP preempt mod_unload modversions aarch64",
    }
    fields = TO.modinfo(fixture("modinfo", "rtx2080-580.126.09-6.17.0-22-generic.txt"))
    assert (fields["version"], fields["srcversion"]) == ("580.126.09", "43ECDFFFD2238CDC4017DFE")


def test_uname_of_a_spark() -> None:
    assert (
        TO.uname_release(fixture("uname", "gb10-dgx-os-6.17.0-1014-nvidia.txt"))
        == "6.17.0-1014-nvidia"
    )
    with pytest.raises(TO.ToolOutputError):
        TO.uname_release("Linux spark1 6.17.0-1014-nvidia\n")


def test_grub_menu_of_dgx_os() -> None:
    menu = KM.parse_grub_cfg(GRUB_CFG)
    assert (menu.default, menu.honours_next_entry) == ("0", True)
    assert [(i.kind, i.title, i.kernel) for i in menu.items] == [
        ("menuentry", "DGX OS GNU/Linux", "6.17.0-1029-nvidia"),
        ("submenu", "Advanced options for DGX OS GNU/Linux", None),
        ("menuentry", "UEFI Firmware Settings", None),
    ]
    assert [i.kernel for i in menu.items[1].items] == ["6.17.0-1029-nvidia"] * 2 + [
        "6.17.0-1014-nvidia"
    ] * 2
    assert KM.menu_path_of(menu, "6.17.0-1014-nvidia") == (
        "Advanced options for DGX OS GNU/Linux>DGX OS GNU/Linux, with Linux 6.17.0-1014-nvidia"
    )


@pytest.mark.parametrize(
    ("grubenv", "cfg_default", "kernel", "why"),
    [
        ("grubenv-empty", None, "6.17.0-1029-nvidia", 'set default="0"'),
        ("grubenv-saved-1014", "${saved_entry}", "6.17.0-1014-nvidia", "GRUB_DEFAULT=saved"),
        ("grubenv-empty", "${saved_entry}", "6.17.0-1029-nvidia", "saved_entry="),
        ("grubenv-next-1014", None, "6.17.0-1014-nvidia", "grub-reboot"),
        ("grubenv-empty", "1>2", "6.17.0-1014-nvidia", 'set default="1>2"'),
        (
            "grubenv-empty",
            "Advanced options for DGX OS GNU/Linux>DGX OS GNU/Linux, with Linux 6.17.0-1014-nvidia",
            "6.17.0-1014-nvidia",
            "set default",
        ),
        ("grubenv-empty", "gnulinux-gone", "6.17.0-1029-nvidia", "falls back to the first entry"),
    ],
)
def test_the_kernel_grub_boots_next(
    grubenv: str, cfg_default: str | None, kernel: str, why: str
) -> None:
    cfg = (
        GRUB_CFG
        if cfg_default is None
        else GRUB_CFG.replace('set default="0"', f'set default="{cfg_default}"')
    )
    found, source = KM.boot_kernel_from_grub(cfg, fixture("grub", grubenv))
    assert found == kernel
    assert why in source


def test_a_default_that_boots_no_linux() -> None:
    cfg = GRUB_CFG.replace('set default="0"', 'set default="uefi-firmware"')
    assert KM.boot_kernel_from_grub(cfg, "")[0] is None


def test_the_vmlinuz_symlink_when_there_is_no_grub() -> None:
    assert (
        KM.boot_kernel_from_link("vmlinuz-6.17.0-1014-nvidia", "/boot/vmlinuz")[0]
        == "6.17.0-1014-nvidia"
    )


class FakeNode:
    """uname -r and modinfo -k <kernel> nvidia answered from real outputs, per kernel."""

    def __init__(self, running: str, modinfo: dict[str, str | None]) -> None:
        self.running = running
        self.modinfo = modinfo
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv)
        if argv[1:] == ["-r"]:
            return 0, self.running + "\n", ""
        text = self.modinfo.get(argv[2])
        return (0, text, "") if text is not None else (1, "", NOT_FOUND)


def findings(node: FakeNode, driver: str | None, grubenv: str = "grubenv-empty") -> Any:
    """The module's findings; a saved entry counts as GRUB_DEFAULT=saved."""
    cfg = (
        GRUB_CFG
        if "saved" not in grubenv
        else GRUB_CFG.replace('set default="0"', 'set default="${saved_entry}"')
    )
    boot = KM.boot_kernel_from_grub(cfg, fixture("grub", grubenv))
    return KM.kernel_modules(
        node="spark2",
        driver_package="nvidia-kernel-common-580",
        driver_version=driver,
        prefix=PREFIX,
        boot=(*boot, KM.parse_grub_cfg(cfg)),
        uname="/usr/bin/uname",
        modinfo="/usr/sbin/modinfo",
        run=node,
    )


def test_healthy_spark_running_and_booting_1014() -> None:
    node = FakeNode("6.17.0-1014-nvidia", {"6.17.0-1014-nvidia": GB10_MODINFO})
    result = findings(node, "580.142-0ubuntu0.24.04.1", "grubenv-saved-1014").result()
    assert result["problems"] == []
    assert (result["running_kernel"], result["boot_kernel"]) == ("6.17.0-1014-nvidia",) * 2
    assert node.calls == [
        ["/usr/bin/uname", "-r"],
        ["/usr/sbin/modinfo", "-k", "6.17.0-1014-nvidia", "nvidia"],
    ]


def test_kernel_upgraded_without_its_module_fails_before_the_reboot() -> None:
    # apt moved the kernel to 1029 (GRUB's entry 0 now) and held its module back.
    node = FakeNode("6.17.0-1014-nvidia", {"6.17.0-1014-nvidia": GB10_MODINFO})
    (problem,) = findings(node, "580.142-0ubuntu0.24.04.1").problems()
    assert problem.startswith(
        "spark2: the kernel it boots next (GRUB default entry 'DGX OS GNU/Linux' "
        '(/boot/grub/grub.cfg, set default="0")), 6.17.0-1029-nvidia, has no nvidia module '
        "(modinfo: modinfo: ERROR: Module nvidia not found.), but driver 580.142 is installed "
        "(nvidia-kernel-common-580); "
    )
    assert "`sudo apt-get install linux-modules-nvidia-580-open-6.17.0-1029-nvidia`" in problem
    assert (
        "`sudo grub-set-default 'Advanced options for DGX OS GNU/Linux>DGX OS GNU/Linux, "
        "with Linux 6.17.0-1014-nvidia'`"
    ) in problem


def test_booted_into_a_kernel_without_the_module() -> None:
    node = FakeNode("6.17.0-1029-nvidia", {"6.17.0-1014-nvidia": GB10_MODINFO})
    (problem,) = findings(node, "580.142-0ubuntu0.24.04.1").problems()
    assert problem.startswith(
        "spark2: the running kernel, 6.17.0-1029-nvidia, has no nvidia module"
    )
    assert "keep booting" not in problem


def test_module_of_another_driver_version() -> None:
    # The module package moved to 580.142, the driver stayed at 580.95.05.
    node = FakeNode("6.17.0-1014-nvidia", {"6.17.0-1014-nvidia": GB10_MODINFO})
    (problem,) = findings(node, "580.95.05-0ubuntu0.24.04.2", "grubenv-saved-1014").problems()
    assert (
        "the running kernel, 6.17.0-1014-nvidia, has nvidia module 580.142 "
        "(/lib/modules/6.17.0-1014-nvidia/kernel/nvidia-580-open/nvidia.ko), but driver "
        "580.95.05 is installed"
    ) in problem


def test_no_driver_package_installed() -> None:
    node = FakeNode("6.17.0-1014-nvidia", {"6.17.0-1014-nvidia": GB10_MODINFO})
    (problem,) = findings(node, "").problems()
    assert problem.startswith("spark2: nvidia-kernel-common-580 is not installed")


def test_no_boot_kernel_to_be_found_is_a_problem(tmp_path: Path) -> None:
    boot = KM.find_boot_kernel(
        str(tmp_path / "grub.cfg"), str(tmp_path / "grubenv"), [str(tmp_path / "vmlinuz")]
    )
    assert boot[0] is None
    node = FakeNode("6.17.0-1014-nvidia", {"6.17.0-1014-nvidia": GB10_MODINFO})
    result = KM.kernel_modules(
        node="spark1",
        driver_package="nvidia-kernel-common-580",
        driver_version="580.142-0ubuntu0.24.04.1",
        prefix=PREFIX,
        boot=boot,
        uname="/usr/bin/uname",
        modinfo="/usr/sbin/modinfo",
        run=node,
    )
    (problem,) = result.problems()
    assert problem.startswith("spark1: cannot tell which kernel boots next (no ")


def test_find_boot_kernel_reads_the_symlink(tmp_path: Path) -> None:
    (tmp_path / "vmlinuz").symlink_to("vmlinuz-6.17.0-1014-nvidia")
    kernel, why, menu = KM.find_boot_kernel(
        str(tmp_path / "grub.cfg"), str(tmp_path / "env"), [str(tmp_path / "vmlinuz")]
    )
    assert (kernel, menu) == ("6.17.0-1014-nvidia", None)
    assert why.endswith("-> vmlinuz-6.17.0-1014-nvidia")


def test_without_modinfo_the_module_says_so() -> None:
    with pytest.raises(KM.KernelModuleError, match=r"^spark1: modinfo \(kmod\) not found"):
        KM.kernel_modules(
            node="spark1",
            driver_package="p",
            driver_version="1",
            prefix=PREFIX,
            boot=(None, "", None),
            uname="/usr/bin/uname",
            modinfo=None,
            run=FakeNode("x", {}),
        )


# ------------------------------------------------------ nvidia_nvcc_info
NV = load_file("nvidia_nvcc_info", ROLE.parents[1] / "plugins" / "modules" / "nvidia_nvcc_info.py")
NVCC_ANSWERS = {
    "--version": fixture("nvcc", "gb10-13.0.88-version.txt"),
    "--list-gpu-arch": fixture("nvcc", "gb10-13.0-list-gpu-arch.txt"),
    "--list-gpu-code": fixture("nvcc", "gb10-13.0-list-gpu-code.txt"),
}


def test_nvcc_of_a_spark() -> None:
    def run(argv: list[str]) -> tuple[int, str, str]:
        return 0, NVCC_ANSWERS[argv[1]], ""

    info = NV.nvcc_info("/usr/local/cuda/bin/nvcc", "spark1", run)
    assert (info["release"], info["version"]) == ("13.0", "13.0.88")
    spark = PROFILES["dgx_spark"]
    assert spark["cuda_arch"] in info["gpu_code"]
    assert spark["cuda_arch"].replace("sm_", "compute_") in info["gpu_arch"]
    assert info["gpu_arch"][-1] == "compute_121" and len(info["gpu_code"]) == 12


def test_nvcc_of_cuda_12_cannot_build_for_a_spark() -> None:
    # The same lists without the Blackwell GB10 entries, as a toolkit before 12.9 lists them.
    code = TO.nvcc_targets(NVCC_ANSWERS["--list-gpu-code"].replace("sm_121\n", ""))
    assert PROFILES["dgx_spark"]["cuda_arch"] not in code
    assert TO.nvcc_version("Cuda compilation tools, release 12.8, V12.8.93") == {
        "release": "12.8",
        "version": "12.8.93",
    }


def test_nvcc_missing_or_failing() -> None:
    def missing(argv: list[str]) -> tuple[int, str, str]:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    with pytest.raises(NV.NvccError, match=r"^cannot run /usr/local/cuda/bin/nvcc on spark3: "):
        NV.nvcc_info("/usr/local/cuda/bin/nvcc", "spark3", missing)
    with pytest.raises(TO.ToolOutputError, match=r"no 'release X\.Y"):
        TO.nvcc_version("nvcc fatal   : Unknown option '--versio'")
    with pytest.raises(TO.ToolOutputError, match="unexpected lines"):
        TO.nvcc_targets("compute_121\nWarning: something\n")


def test_new_module_documentation_is_valid_yaml() -> None:
    for module, options, returns in (
        (
            KM,
            {
                "driver_version",
                "driver_package",
                "modules_package_prefix",
                "grub_cfg",
                "grubenv",
                "vmlinuz_links",
                "node_name",
            },
            {
                "driver_version",
                "running_kernel",
                "boot_kernel",
                "boot_source",
                "modules",
                "problems",
            },
        ),
        (NV, {"nvcc", "node_name"}, {"release", "version", "gpu_arch", "gpu_code"}),
    ):
        doc = yaml.safe_load(textwrap.dedent(module.DOCUMENTATION))
        assert set(doc["options"]) == options
        assert set(yaml.safe_load(module.RETURN)) == returns
        yaml.safe_load(module.EXAMPLES)


def test_the_role_hands_the_modules_the_hold_set_and_the_profile() -> None:
    verify = (ROLE / "tasks" / "verify.yml").read_text()
    assert "when: cluster_hw.own_kernel" in verify
    assert "when: cluster_hw.cuda_toolkit" in verify
    assert "cluster_hw.compute_capability" in verify
    assert "_nvidia_driver_hold_regexes" in verify
    assert " lab" not in verify.replace("the lab's", "")


# ------------------------------------------------------ nvidia_held_updates
HU = load_file(
    "nvidia_held_updates", ROLE.parents[1] / "plugins" / "modules" / "nvidia_held_updates.py"
)
UPGRADABLE = fixture("apt", "noble-amd64-list-upgradable.txt")


def test_held_updates_of_a_real_listing_security_first() -> None:
    # A generic-flavour node holding its kernel metapackages and NCCL-free set; the
    # listing is real (tests/fixtures/apt), so is apt's stderr warning.
    warned = "\nWARNING: apt does not have a stable CLI interface. Use with caution in scripts.\n\n"

    def run(argv: list[str]) -> tuple[int, str, str]:
        assert argv == ["apt", "list", "--upgradable"]
        return 0, UPGRADABLE, warned

    held = ["linux-generic", "linux-image-generic", "systemd", "libnccl2"]
    updates = HU.held_updates(held, run, "spark1")
    assert [(u["name"], u["security"]) for u in updates] == [
        ("linux-generic", True),
        ("linux-image-generic", True),
        ("systemd", False),  # noble-updates only: after the security ones
    ]
    said = HU.warning(updates, "spark1")
    assert said.startswith(
        "spark1: 3 held package(s) have updates waiting, 2 from a security pocket (listed "
        "first): linux-generic 6.8.0-106.106 -> 6.8.0-107.107 (noble-updates,noble-security), "
    )
    assert said.endswith(
        "update the nodes one at a time (docs/operate.md, Rolling update of one node)."
    )
    assert HU.warning([], "spark1") is None


def test_held_updates_when_apt_cannot_list() -> None:
    def run(argv: list[str]) -> tuple[int, str, str]:
        return 100, "", "E: Could not open lock file\n"

    with pytest.raises(
        HU.HeldUpdatesError, match=r"^spark1: apt list --upgradable failed \(exit 100\)"
    ):
        HU.held_updates(["libnccl2"], run, "spark1")


def test_the_role_releases_stale_holds_and_reports_waiting_updates() -> None:
    configure = (ROLE / "tasks" / "configure.yml").read_text()
    verify = (ROLE / "tasks" / "verify.yml").read_text()
    # the release runs before the hold, from the hold list preflight read
    assert configure.index("nvidia_hold_release(") < configure.index("selection: hold")
    assert "__nvidia_driver_node.files[_nvidia_driver_hold_list].content" in configure
    assert (
        "nvidia_held_updates:" in verify and 'held: "{{ nvidia_driver_held_packages }}"' in verify
    )
    # a warning, not a failure: no assert reads its result
    assert "__nvidia_driver_waiting" not in verify.split("register: __nvidia_driver_waiting", 1)[1]


def test_held_updates_module_as_ansible_runs_it_against_this_machines_apt(tmp_path: Path) -> None:
    if shutil.which("apt") is None:
        pytest.skip("no apt here")
    argfile = tmp_path / "args.json"
    held = ["apt", "libc6", "base-files"]
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"held": held, "node_name": "here"}}))
    proc = subprocess.run(
        module_command(
            ROLE.parents[1] / "plugins" / "modules" / "nvidia_held_updates.py", str(argfile)
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    result = json.loads(proc.stdout)
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert all(u["name"] in held for u in result["updates"])
    assert result["security"] == sum(1 for u in result["updates"] if u["security"])
    assert bool(result.get("warnings")) == bool(result["updates"])
