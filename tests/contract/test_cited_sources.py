"""Facts the project credits to a public source, held against that source's own text.

Two citations once named the wrong source for what they state:

* The nccl role puts socket traffic (NCCL's bootstrap, Gloo, UCX, Open MPI's TCP
  transport) on twin a "as in NVIDIA's 4-node switch script". That script runs
  its test with all three socket variables on the management NIC ``enP7s7``;
  twin a (``enp1s0f1np1``) is what the switch guide's own mpirun example in
  step 7 exports. Both are stored under tests/fixtures/dgx-spark-playbooks/.
* That ``nvidia-smi --query-gpu=memory.total`` answers ``[N/A]`` on a GB10 was
  credited to NVIDIA/gpu-operator #1794, a thread about the device plugin's
  NVML error ("error getting device memory: Not Supported") that shows no
  such answer. marimo-team/marimo PR #6822 prints it, in the
  ``--format=csv,noheader,nounits`` SGLang queries
  (tests/fixtures/nvidia-smi/gb10-query-memory-noheader-nounits.csv).

Each test reads the stored excerpt, checks the fact the project builds on, and
checks that every place stating it credits that source and not the old one.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from sparkctl.collection import tool_output
from sparkctl_lab.lab import MGMT_IF
from tests.contract.conftest import REPO, SGLangRelease

pytestmark = pytest.mark.contract

FIXTURES = REPO / "tests" / "fixtures"
PLAYBOOKS = FIXTURES / "dgx-spark-playbooks"
SOCKET_VARS = ("UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include")


def _yaml(path: str) -> dict[str, object]:
    data = yaml.safe_load((REPO / path).read_text())
    assert isinstance(data, dict), path
    return data


def _words(text: str) -> str:
    """Text with comment markers and line breaks folded away, for phrases that wrap."""
    lines = (re.sub(r"^\s*(?:#+(?=\s|$)|//)?\s*", "", line) for line in text.splitlines())
    return " ".join(line for line in lines if line)


def _comment_above(path: str, key: str) -> str:
    """The comment lines right above ``key:`` in a YAML file, folded into one string."""
    lines = (REPO / path).read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    start = at
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return _words("\n".join(lines[start:at]))


def _exported(text: str) -> dict[str, str]:
    """``export NAME=value`` lines and ``-x NAME=value`` mpirun options of an excerpt."""
    pairs = re.findall(r"(?:export|-x)\s+([A-Za-z_]\w*)=(\S+?)(?:\"|\s|$)", text)
    return dict(pairs)


# ------------------------------------------------------------- socket interface


def test_the_switch_guides_own_run_puts_socket_traffic_on_twin_a() -> None:
    guide = _exported((PLAYBOOKS / "switch-guide-step7-mpirun.md").read_text())
    script = _exported((PLAYBOOKS / "spark_cluster_setup-mpirun.py.txt").read_text())
    twin_a = _yaml("ansible_collections/sparkctl/spark/roles/cluster_defaults/defaults/main.yml")[
        "fabric_a_netdev"
    ]
    assert {guide[v] for v in SOCKET_VARS} == {twin_a}
    # The setup script is no source for it: its run uses the management NIC.
    assert {script[v] for v in SOCKET_VARS} == {MGMT_IF}
    assert twin_a != MGMT_IF
    # What the role does take from the script: both twins of the cabled port
    # among its NCCL_IB_HCA (which also names port 0's), and subnet-aware routing.
    hca = _yaml("ansible_collections/sparkctl/spark/roles/nccl/defaults/main.yml")["nccl_ib_hca"]
    assert isinstance(hca, list)
    assert set(hca) < set(script["NCCL_IB_HCA"].split(","))
    assert script["NCCL_IB_SUBNET_AWARE_ROUTING"] == "1"


def test_the_nccl_role_puts_socket_traffic_where_it_says_and_cites_the_guide() -> None:
    nccl = _yaml("ansible_collections/sparkctl/spark/roles/nccl/defaults/main.yml")
    assert nccl["nccl_socket_ifname"] == "{{ fabric_a_netdev }}"
    env = _yaml("ansible_collections/sparkctl/spark/roles/nccl/vars/main.yml")["_nccl_env_defaults"]
    assert isinstance(env, dict)
    assert {env[v] for v in SOCKET_VARS} == {"{{ nccl_socket_ifname }}"}
    comment = _comment_above(
        "ansible_collections/sparkctl/spark/roles/nccl/defaults/main.yml", "nccl_socket_ifname"
    )
    assert "twin a" in comment
    assert "multi-sparks-through-switch/README.md" in comment
    assert "step 7" in comment
    assert "as in NVIDIA's 4-node switch script" not in comment, comment


# ------------------------------------------------------------ GB10 memory.total

NA_QUERY = "index,name,memory.total,memory.used,memory.free"
NA_SOURCE = "marimo-team/marimo PR #6822"
# Where the [N/A] answer is stated: (file, the words that state it).
NA_CLAIMS = (
    ("docs/serve.md", "`nvidia-smi --query-gpu=memory.total` answers `[N/A]` on GB10"),
    (
        "ansible_collections/sparkctl/spark/roles/cluster_defaults/vars/main.yml",
        "nvidia-smi answers memory.total with [N/A] on GB10",
    ),
    ("tests/contract/test_memory_defaults.py", "--query-gpu=memory.total`` answers ``[N/A]``"),
)

# sglang.srt.utils.common.get_nvgpu_memory_capacity with an nvidia-smi on PATH that
# answers its query (memory.total, csv,noheader,nounits) with the given cell.
_CAPACITY = """
import json, os, sys, torch
from sglang.srt.utils import common
bin_dir, total = sys.argv[1], int(sys.argv[2])
os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.mem_get_info = lambda i=0: (total // 2, total)
print(json.dumps({"mib": common.get_nvgpu_memory_capacity()}))
"""


def _gb10_memory_total_cell() -> str:
    """memory.total as a GB10's nvidia-smi prints it in csv,noheader,nounits (the fixture)."""
    text = (FIXTURES / "nvidia-smi" / "gb10-query-memory-noheader-nounits.csv").read_text()
    fields = NA_QUERY.split(",")
    (row,) = tool_output.nvidia_smi_csv(text, fields)
    assert row["name"] == "NVIDIA GB10"
    assert row["memory.total"] is None  # not available, not a number
    (line,) = text.splitlines()
    return line.split(", ")[fields.index("memory.total")]


def test_the_cited_output_is_what_sglang_falls_back_on(
    sglang_release: SGLangRelease, tmp_path: Path
) -> None:
    cell = _gb10_memory_total_cell()
    assert cell == "[N/A]"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(cell)}\n")
    smi.chmod(0o755)
    profiles = _yaml("ansible_collections/sparkctl/spark/roles/cluster_defaults/vars/main.yml")[
        "_cluster_defaults_hw_profiles"
    ]
    assert isinstance(profiles, dict)
    total = int(profiles["dgx_spark"]["gpu_memory_gib"] * (1 << 30))
    seen = sglang_release.json(_CAPACITY, str(tmp_path), str(total))
    assert seen["mib"] == total // (1 << 20)  # torch's total: the [N/A] was not a number


def test_the_fixtures_source_is_the_one_cited() -> None:
    notes = (FIXTURES / "nvidia-smi" / "SOURCES.md").read_text()
    row = next(line for line in notes.splitlines() if "gb10-query-memory-noheader-nounits" in line)
    assert "`marimo-team/marimo` PR #6822" in row
    assert "https://github.com/marimo-team/marimo/pull/6822" in row


@pytest.mark.parametrize(("path", "claim"), NA_CLAIMS, ids=[p for p, _ in NA_CLAIMS])
def test_every_statement_of_the_na_answer_credits_its_source(path: str, claim: str) -> None:
    text = _words((REPO / path).read_text())
    at = text.find(claim)
    assert at >= 0, f"{path} no longer says {claim!r}: update NA_CLAIMS with it"
    credit = text[at + len(claim) :][:120]
    assert credit.lstrip().startswith("(") and NA_SOURCE in credit, (path, credit)
    assert "gpu-operator" not in credit, (path, credit)
