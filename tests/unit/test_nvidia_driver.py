"""roles/nvidia_driver: the nvidia_gpu_info module, the role's interface and its Jinja.

The module's parsers are fed real nvidia-smi output, copied from public
reports with the source named at each sample; the whole module is also run as
Ansible runs it (a subprocess with a JSON argument file) against the lab's
nvidia-smi stand-in, with the GPU present and with the driver "not loaded".
"""

from __future__ import annotations

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

from tests.unit.pathload import load_file

# init_plugin_loader() warns from its second call in one process (see test_inventory.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning")

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_driver"
MODULE_PATH = ROLE / "library" / "nvidia_gpu_info.py"
STANDIN = ROOT / "sparkctl" / "lab" / "standins" / "nvidia-smi"


def load_module() -> ModuleType:
    return load_file("nvidia_gpu_info", MODULE_PATH)


M = load_module()

# ------------------------------------------------------------- real samples
# DGX Spark, driver 580.95.05: NVIDIA/k8s-device-plugin issue #1482 (the
# layout the lab's stand-in reproduces byte for byte).
GB10_580_95 = """\
Sun Nov 29 21:47:19 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |
| N/A   40C    P8              4W /  N/A  | Not Supported          |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""

# DGX Spark, driver 580.126.09: snowflakedb/ArcticTraining PR #345
# ("pynvml DGX Spark fix"), found with the search tool.
GB10_580_126 = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.126.09             Driver Version: 580.126.09     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |
| N/A   36C    P8              3W /  N/A  | Not Supported          |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""

# A discrete GPU on driver 580.82.09, with the process table: patfinder/cuda-1
# README.md (found with the search tool).
GTX960_580_82 = """\
Sun Sep 21 21:56:02 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.82.09              Driver Version: 580.82.09      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA GeForce GTX 960         Off |   00000000:03:00.0 Off |                  N/A |
|  0%   45C    P8             14W /  160W |       0MiB /   2048MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""

# R610 renames the header fields: sgl-project/sglang issue #27487 (B200, 610.43.02).
B200_610 = """\
Sun Jun  7 08:16:57 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02     CUDA UMD Version: 13.3     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
"""

# The older, narrower table: rossumai/nvgpu PR #15 (driver 450.57, CUDA 11.0).
TITAN_450 = """\
Wed Jul 29 21:51:11 2020
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 450.57       Driver Version: 450.57       CUDA Version: 11.0     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
"""

# `--query-gpu=name,driver_version,compute_cap,pci.bus_id --format=csv,noheader`
# on a Spark; values as in the GB10 inventory line quoted in the stand-in
# ("0, NVIDIA GB10, 0000000F:01:00.0, 580.142, 12.1, ...").
GB10_CSV = "NVIDIA GB10, 580.142, 12.1, 0000000F:01:00.0\n"

# nvidia-smi's own words when the kernel driver is not loaded (exit 9); it
# prints them on stdout.
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)


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
    assert M.parse_header(text) == {"driver_version": driver, "cuda_version": cuda}


def test_header_without_versions() -> None:
    assert M.parse_header("No devices were found\n") == {
        "driver_version": None, "cuda_version": None}


def test_query_csv_one_gb10() -> None:
    assert M.parse_query_csv(GB10_CSV) == [{
        "index": 0, "name": "NVIDIA GB10", "driver_version": "580.142",
        "compute_cap": "12.1", "pci_bus_id": "0000000F:01:00.0"}]


def test_query_csv_several_gpus_and_not_available_values() -> None:
    # Names and bus ids from the B200 node in sglang #27487.
    text = ("NVIDIA B200, 610.43.02, 10.0, 00000000:63:00.0\n"
            "NVIDIA B200, 610.43.02, [N/A], 00000000:68:00.0\n\n")
    gpus = M.parse_query_csv(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert [g["pci_bus_id"] for g in gpus] == ["00000000:63:00.0", "00000000:68:00.0"]
    assert gpus[1]["compute_cap"] is None


def test_query_csv_empty_is_no_gpu() -> None:
    assert M.parse_query_csv("") == []


def test_query_csv_wrong_field_count_is_an_error() -> None:
    with pytest.raises(M.GpuInfoError, match="2 fields, expected 4"):
        M.parse_query_csv("NVIDIA GB10, 580.142\n")


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
        ["/usr/bin/nvidia-smi", "--query-gpu=name,driver_version,compute_cap,pci.bus_id",
         "--format=csv,noheader"],
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
        "running. (nvidia-smi exit 9)")


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
    info = M.gpu_info("/usr/bin/nvidia-smi", "spark1",
                      FakeSmi((0, "", ""), (0, GB10_580_95, "")))
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
    env = dict(os.environ, SPARKCTL_LAB_HW=str(hw_path), SPARKCTL_LAB_SYSFS=str(tmp_path),
               PATH=f"{smi.parent}:/usr/bin:/bin")
    proc = subprocess.run([sys.executable, str(MODULE_PATH), str(argfile)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stderr
    return result


HW = {
    "gpu_present": True, "gpu_name": "NVIDIA GB10", "driver_version": "580.95.05",
    "cuda_version": "13.0", "gpu_uuid": "GPU-00000000-1111-2222-3333-444444444444",
    "pci_bus_id": "0000000F:01:00.0",
}


def test_module_against_the_lab_standin(tmp_path: Path) -> None:
    result = run_module(tmp_path, HW, node_name="spark1")
    assert result["changed"] is False
    assert result["gpus"] == [{
        "index": 0, "name": "NVIDIA GB10", "driver_version": "580.95.05",
        "compute_cap": "12.1", "pci_bus_id": "0000000F:01:00.0"}]
    assert (result["driver_version"], result["cuda_version"]) == ("580.95.05", "13.0")
    assert result["nvidia_smi"] == str(tmp_path / "bin" / "nvidia-smi")  # found on PATH


def test_module_when_the_gpu_does_not_answer(tmp_path: Path) -> None:
    result = run_module(tmp_path, {**HW, "gpu_present": False}, node_name="spark3")
    assert result["failed"] is True
    assert result["msg"] == (
        "no GPU answers on spark3: NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and "
        "running. (nvidia-smi exit 9)")


def test_module_with_a_missing_nvidia_smi(tmp_path: Path) -> None:
    result = run_module(tmp_path, HW, nvidia_smi=str(tmp_path / "nowhere" / "nvidia-smi"),
                        node_name="spark2")
    assert result["failed"] is True
    assert result["msg"].startswith(f"cannot run {tmp_path}/nowhere/nvidia-smi on spark2: ")


def test_module_without_nvidia_smi_anywhere(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi", path="/usr/bin:/bin:/sbin:/usr/sbin:/usr/local/sbin"):
        pytest.skip("this machine has a real nvidia-smi")
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"node_name": "spark2"}}))
    proc = subprocess.run([sys.executable, str(MODULE_PATH), str(argfile)], capture_output=True,
                          text=True, env=dict(os.environ, PATH="/usr/bin:/bin"), timeout=60,
                          check=False)
    assert json.loads(proc.stdout)["msg"].startswith(
        "nvidia-smi not found on spark2: the NVIDIA driver is not installed")


# ------------------------------------------------------ the role's interface
def yaml_file(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


DEFAULTS = yaml_file(ROLE / "defaults" / "main.yml")
SPEC = yaml_file(ROLE / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def test_every_default_is_documented_with_the_same_value() -> None:
    assert sorted(SPEC) == sorted(DEFAULTS)
    for name, option in SPEC.items():
        assert name.startswith("nvidia_driver_"), name
        assert option["default"] == DEFAULTS[name], name
        assert option["description"], name


def test_defaults_are_what_the_cluster_needs() -> None:
    assert DEFAULTS["nvidia_driver_min_version"] == "580.0"
    assert DEFAULTS["nvidia_driver_min_cuda"] == "13.0"
    assert DEFAULTS["nvidia_driver_expected_gpu"] == "GB10"
    assert DEFAULTS["nvidia_driver_allow_reboot"] is False
    assert "ubuntu2404/sbsa/cuda-keyring" in DEFAULTS["nvidia_driver_cuda_keyring_url"]


def test_internal_vars_are_underscored() -> None:
    assert all(name.startswith("_nvidia_driver_")
               for name in yaml_file(ROLE / "vars" / "main.yml"))


def test_role_depends_on_cluster_defaults() -> None:
    meta = yaml_file(ROLE / "meta" / "main.yml")
    assert meta["dependencies"] == [{"role": "cluster_defaults"}]


def test_no_shell_in_the_role() -> None:
    for path in (ROLE / "tasks").glob("*.yml"):
        text = path.read_text()
        assert not re.search(r"ansible\.builtin\.(shell|command)\b", text), path.name
        assert "ignore_errors" not in text, path.name


# ------------------------------------------------------------ the role's Jinja
# Ansible's own templating, run in a child process: importing ansible.template
# here would load ansible's constants in the test process, before
# sparkctl.inventory sets the environment it needs for that (see the report).
_RENDER = """
import json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader()
out = []
for expression, variables in json.load(sys.stdin):
    templar = Templar(loader=DataLoader(), variables=variables)
    out.append(templar.template(trust_as_template(expression)))
json.dump(out, sys.stdout)
"""


def render(*cases: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each (expression, extra variables) templated with the role's defaults."""
    payload = json.dumps([[expr, {**DEFAULTS, **extra}] for expr, extra in cases])
    proc = subprocess.run([sys.executable, "-c", _RENDER], input=payload, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result: list[Any] = json.loads(proc.stdout)
    return result


HOLD_REGEX = yaml_file(ROLE / "vars" / "main.yml")["_nvidia_driver_hold_regex"]


def hold_matches(names: list[str], patterns: list[str] | None = None) -> list[str]:
    extra: dict[str, Any] = {} if patterns is None else {"nvidia_driver_hold_packages": patterns}
    (pattern,) = render((HOLD_REGEX, extra))
    (matched,) = render(("{{ names | select('match', pattern) | list }}",
                         {"names": names, "pattern": pattern}))
    return list(matched)


def test_default_hold_patterns_match_driver_cuda_and_nccl_only() -> None:
    # Package names of DGX OS 7 / NVIDIA's CUDA repository for the 580 branch.
    held = ["nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580",
            "nvidia-kernel-common-580", "nvidia-compute-utils-580", "libnvidia-compute-580",
            "xserver-xorg-video-nvidia-580", "cuda-toolkit-13-0", "cuda-drivers-580",
            "libnccl2", "libnccl-dev"]
    kept = ["nvidia-container-toolkit", "nvidia-persistenced", "libnccl2-dbg", "less",
            "libcudnn9-cuda-13", "linux-image-6.11.0-1016-nvidia"]
    assert hold_matches(held + kept) == held


def test_hold_patterns_are_globs_not_regexes() -> None:
    names = ["less", "lesspipe", "g++-12", "g++-13", "gxx-12", "libfoo.so", "libfooxso"]
    assert hold_matches(names, ["les?", "g++-1?", "lib*.so"]) == [
        "less", "g++-12", "g++-13", "libfoo.so"]
    assert hold_matches(names, ["nothing-*"]) == []


def test_unattended_upgrades_blacklist_file() -> None:
    source = (ROLE / "templates" / "51sparkctl-nvidia-hold.j2").read_text()
    (text,) = render((source, {"ansible_managed": "Ansible managed"}))
    body = " ".join(line.strip() for line in text.splitlines()
                    if line.strip() and not line.startswith("//"))
    assert body == ('Unattended-Upgrade::Package-Blacklist { "nvidia-"; "libnvidia-"; '
                    '"cuda-"; "libnccl"; };')


def test_playbook_runs_preflight_first_then_the_role_on_the_sparks() -> None:
    plays = yaml_file(ROOT / "playbooks" / "nvidia_driver.yml")
    assert plays[0]["ansible.builtin.import_playbook"] == "preflight.yml"
    assert plays[1]["hosts"] == "sparks"
    assert plays[1]["roles"][0]["role"] == "nvidia_driver"


def test_module_documentation_is_valid_yaml() -> None:
    doc = yaml.safe_load(textwrap.dedent(M.DOCUMENTATION))
    assert doc["module"] == "nvidia_gpu_info"
    assert set(doc["options"]) == {"nvidia_smi", "node_name"}
    assert set(yaml.safe_load(M.RETURN)) == {
        "gpus", "gpu_count", "driver_version", "cuda_version", "nvidia_smi"}
