"""What the pinned release does with a Spark's memory, run in the release's own code.

sparkctl passes ``--mem-fraction-static`` from the hardware profile
(cluster_hw.sglang_mem_fraction_static, 0.75 on a Spark) because the release,
left alone, sizes its static pool for a discrete GPU: on GB10 ``nvidia-smi
--query-gpu=memory.total`` answers ``[N/A]`` (unified memory; marimo-team/marimo
PR #6822), so ``get_nvgpu_memory_capacity`` falls back to torch's total, the whole
119.7 GiB the OS shares, and ``_handle_gpu_memory_settings`` keeps back only
about 14 GiB of it. And ``memory_unbalanced`` (sparkctl/serve/startup/catalogue.yml) says the
release stops a rank whose memory is short: SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK
is true by default.

Each probe runs in the contract venv (``sglang_release``): the release's
functions, with torch's CUDA queries answered as a GB10 answers them (this
machine has no GPU) and a fake ``nvidia-smi`` that prints GB10's answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.contract.conftest import REPO, SGLangRelease

pytestmark = pytest.mark.contract

PROFILES = yaml.safe_load(
    (
        REPO
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "roles"
        / "cluster_defaults"
        / "vars"
        / "main.yml"
    ).read_text()
)["_cluster_defaults_hw_profiles"]
SPARK = PROFILES["dgx_spark"]

# sglang.srt.utils.common.get_nvgpu_memory_capacity with nvidia-smi on PATH printing
# what it prints on a GB10, and torch.cuda answering with GB10's total (bytes).
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

# ServerArgs._handle_gpu_memory_settings on a ServerArgs of the dataclass's defaults
# with the flags sparkctl gives (tp 4, no --mem-fraction-static), for gpu_mem MiB.
# __post_init__ (model config, platform probes) is skipped: only what the memory
# settings read is set up, by the release's own _parse_cuda_graph_config.
_DEFAULT_FRACTION = """
import dataclasses, json, sys, types
from sglang.srt import server_args as sa
gpu_mem, tp = float(sys.argv[1]), int(sys.argv[2])
args = sa.ServerArgs.__new__(sa.ServerArgs)
for f in dataclasses.fields(sa.ServerArgs):
    if f.default is not dataclasses.MISSING:
        setattr(args, f.name, f.default)
    elif f.default_factory is not dataclasses.MISSING:
        setattr(args, f.name, f.default_factory())
args.model_path, args.tp_size, args.device = "/model", tp, "cuda"
args.get_model_config = lambda: types.SimpleNamespace(is_multimodal=False)
args.use_mla_backend = lambda: False
args._parse_cuda_graph_config()
assert args.mem_fraction_static is None
args._handle_gpu_memory_settings(gpu_mem)
print(json.dumps({"fraction": args.mem_fraction_static}))
"""

# sglang.srt.distributed.bootstrap._check_tp_memory_balance with a rank that has
# half the memory of the local ranks; the switch left unset, then set false. The
# module imports the whole model stack (GPU kernels), so the function is compiled
# from the installed file's own text, with the release's envs and a logger.
_IMBALANCE = """
import ast, importlib.util, json, logging, os
from sglang.srt.environ import envs
path = importlib.util.find_spec("sglang").submodule_search_locations[0]
path = os.path.join(path, "srt", "distributed", "bootstrap.py")
tree = ast.parse(open(path).read())
func = [n for n in tree.body if getattr(n, "name", "") == "_check_tp_memory_balance"]
assert len(func) == 1, path
space = {"envs": envs, "logger": logging.getLogger("bootstrap")}
exec(compile(ast.Module(body=func, type_ignores=[]), path, "exec"), space)
check = space["_check_tp_memory_balance"]
out = {"default": envs.SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK.get()}
for key in ("unset", "false"):
    if key == "false":
        os.environ["SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"] = "false"
    try:
        check(pre_model_load_memory=50.0, local_gpu_memory=100.0)
        out[key] = "returned"
    except RuntimeError as exc:
        out[key] = "RuntimeError: " + str(exc)
print(json.dumps(out))
"""


def test_gb10s_na_memory_makes_the_release_size_from_torchs_total(
    sglang_release: SGLangRelease, tmp_path: Path
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '[N/A]'\n")
    smi.chmod(0o755)
    total = int(SPARK["gpu_memory_gib"] * (1 << 30))
    seen = sglang_release.json(_CAPACITY, str(tmp_path), str(total))
    assert seen["mib"] == total // (1 << 20)  # the whole unified memory, as torch reports it


@pytest.mark.parametrize("tp", [1, 4])
def test_the_releases_default_fraction_for_gb10_memory(
    sglang_release: SGLangRelease, tp: int
) -> None:
    gpu_mib = SPARK["gpu_memory_gib"] * 1024
    seen = sglang_release.json(_DEFAULT_FRACTION, str(gpu_mib), str(tp))
    fraction = seen["fraction"]
    # (gpu_mem - reserved) / gpu_mem, the reserve at least 10 GiB above 60 GiB of memory
    # (server_args.py _handle_gpu_memory_settings).
    assert 0.85 < fraction <= round((gpu_mib - 10 * 1024) / gpu_mib, 3), fraction
    assert fraction > SPARK["sglang_mem_fraction_static"]
    if tp == 4:
        assert fraction == 0.879  # the number cluster_defaults' comment quotes


def test_the_tp_memory_imbalance_stops_the_rank_by_default(sglang_release: SGLangRelease) -> None:
    seen = sglang_release.json(_IMBALANCE)
    assert seen["default"] is True
    assert seen["unset"].startswith("RuntimeError: The memory capacity is unbalanced."), seen
    assert seen["false"] == "returned"  # false: the release only logs a warning


# The release's lines roles/cluster_defaults/vars/main.yml cites for the profile's
# gpu_memory_gib and sglang_mem_fraction_static: (file, line, text found there).
CITED = (
    ("srt/utils/common.py", 609, "def _cuda_mem_fallback(reason: str) -> int:"),
    ("srt/utils/common.py", 661, r'if re.match(r"^\d+(\.\d+)?$", mem.strip())'),
    ("srt/utils/common.py", 667, "return _cuda_mem_fallback("),
    ("srt/server_args.py", 4779, "if gpu_mem is not None and gpu_mem > 60 * 1024:"),
    ("srt/server_args.py", 4780, "reserved_mem = max(reserved_mem, 10 * 1024)"),
    ("srt/server_args.py", 4785, "round((gpu_mem - reserved_mem) / gpu_mem, 3)"),
)


def test_the_profiles_citations_hold_in_the_release(sglang_release: SGLangRelease) -> None:
    vars_text = (
        REPO
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "roles"
        / "cluster_defaults"
        / "vars"
        / "main.yml"
    ).read_text()
    for path, line, text in CITED:
        lines = (sglang_release.package_dir / path).read_text().splitlines()
        assert text in lines[line - 1], (path, line, lines[line - 1])
        assert str(line) in vars_text, (path, line)
