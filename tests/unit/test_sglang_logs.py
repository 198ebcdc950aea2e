"""sparkctl.serve.startup: start-up phases and failure signatures in SGLang rank logs.

The fixtures are real log excerpts (tests/fixtures/sglang, SOURCES.md says
where each comes from); the expected phases, signatures and NCCL transport
of each are written out here, not derived from the code under test. The lab
stand-in's lines are rendered from its catalogue of the release's strings
(lab/sparkctl_lab/standins/sglang/release.py) with the prefixes it prints, and
every message of that catalogue has a case, so a changed or added stand-in
line breaks the test rather than silently escaping it.
"""

# ruff: noqa: E501 -- log lines are quoted as the programs print them
from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl import nccl_parse
from sparkctl.serve.startup import catalogue
from sparkctl.serve.startup import reader as logs
from sparkctl.serve.startup.reader import Pattern, Phase, RankLog, Signature
from sparkctl_lab.standins.sglang import release as rel

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sglang"

P = Phase

# file -> (phases in the order first reached, signature ids in order of first appearance)
EXPECTED: dict[str, tuple[list[Phase], list[str]]] = {
    # clean start-up pieces
    "clean_init_ends_sglang_pr21752.log": ([P.DIST_INIT, P.NCCL_READY], []),
    "clean_gloo_nccl_sglang10053.log": ([P.NCCL_READY], []),
    "clean_init_to_load_sglang_pr11716.log": ([P.NCCL_READY, P.WEIGHTS_LOADING], []),
    "clean_load_to_cuda_graph_sglang_pr4826.log": (
        [P.WEIGHTS_LOADED, P.KV_CACHE, P.CUDA_GRAPH],
        [],
    ),
    "clean_cuda_graph_to_http_sglang_pr11830.log": ([P.ENGINE_READY, P.HTTP_READY], []),
    "clean_ready_sglang32255.log": ([P.READY], []),
    # hangs: nothing to match, the phase tells
    "hang_after_nccl_init_sglang4978.log": ([P.NCCL_READY], []),
    "hang_at_dist_init_sglang30609.log": ([P.DIST_INIT], []),
    # ... until torch's store times out, 30 minutes later: the same hang, named
    "hang_after_nccl_init_sglang7478.log": (
        [P.DIST_INIT, P.NCCL_READY, P.FAILED],
        ["host_ip_hang", "scheduler_exception"],
    ),
    # NCCL's transport lines: neither a phase nor a failure (nccl_transport reads them)
    "nccl_socket_transport_sglang3398.log": ([], []),
    "nccl_via_socket_nccl952.log": ([], []),
    "nccl_ib_transport_nccl707.log": ([], []),
    # failures ("Scheduler hit an exception" on the release's traceback line as well)
    "gloo_connectfullmesh_sglang3226.log": (
        [P.DIST_INIT, P.FAILED],
        ["gloo_connect_full_mesh", "scheduler_exception"],
    ),
    "gloo_loopback_vllm_backport14.log": ([], ["gloo_loopback"]),
    "gloo_no_address_awsdoeks51.log": ([P.FAILED], ["gloo_no_address"]),
    "nccl_no_route_sglang3820.log": (
        [P.DIST_INIT, P.FAILED],
        ["nccl_no_route", "scheduler_exception"],
    ),
    "nccl_no_route_hkproj1.log": ([P.FAILED], ["nccl_no_route"]),
    "nccl_connect_retrying_llamafactory8045.log": ([], ["nccl_connect_retrying"]),
    "nccl_connect_abort_sglang5594.log": (
        [P.FAILED],
        ["nccl_connect_failed", "scheduler_exception"],
    ),
    "nccl_no_interface_nccl1837.log": ([P.FAILED], ["nccl_no_interface"]),
    "dist_init_timeout_sglang2561.log": (
        [P.FAILED],
        ["dist_init_unreachable", "dist_init_retrying"],
    ),
    "dist_init_connect_opensora667.log": (
        [P.FAILED],
        ["dist_init_retrying", "dist_init_unreachable"],
    ),
    "rendezvous_clients_joined_sglang507.log": ([P.FAILED], ["rendezvous_incomplete"]),
    "port_in_use_uvicorn_openui226.log": ([P.FAILED], ["port_in_use"]),
    "port_in_use_dist_port_tgi1156.log": ([P.FAILED], ["port_in_use"]),
    "address_not_local_zmq_vllm31884.log": ([P.FAILED], ["address_not_local"]),
    "model_not_found_ttrl25.log": ([P.FAILED], ["model_not_found"]),
    "launch_args_sglang12818.log": ([P.FAILED], ["launch_args"]),
    "kv_cache_not_enough_memory_sglang4330.log": ([P.FAILED], ["kv_cache_no_memory"]),
    "kv_cache_not_enough_memory_gpustack3831.log": ([P.FAILED], ["kv_cache_no_memory"]),
    "cuda_oom_cuda_graph_sglang5285.log": ([P.FAILED], ["cuda_oom"]),
    "cuda_oom_torch_fireredtts2_17.log": ([P.FAILED], ["cuda_oom"]),
    "memory_unbalanced_sglang1533.log": ([P.FAILED], ["memory_unbalanced"]),
    "unbalanced_loading_ktransformers1666.log": (
        [P.FAILED],
        ["unbalanced_loading", "scheduler_exception"],
    ),
    "peer_lost_sglang5602.log": ([P.FAILED], ["peer_lost", "scheduler_exception"]),
    "peer_lost_ncclremote_stanford_alpaca207.log": ([P.FAILED], ["peer_lost"]),
    "warmup_failed_sglang2468.log": (
        [P.WEIGHTS_LOADED, P.KV_CACHE, P.CUDA_GRAPH, P.ENGINE_READY, P.HTTP_READY, P.FAILED],
        ["warmup_failed"],
    ),
}

# What each signature's fix must name: the inventory variable, environment
# variable, flag or command that fixes it.
FIX_NAMES: dict[str, tuple[str, ...]] = {
    "host_ip_hang": ("SGLANG_HOST_IP", "head", "`fabric_a_ip`", "sparkctl validate"),
    "rdma_register_failed": ("ulimit -l", "--ulimit memlock=-1", "kho=off", "sparkctl validate"),
    "rdma_completion_error": ("`nccl_ib_gid_index: auto`", "sparkctl validate", "twin_mtu"),
    "launcher_secrets": (
        "`sglang_secrets_file`",
        "`sglang_user`",
        "--volume",
        "sparkctl provision",
    ),
    "image_missing": ("sparkctl provision", "docker image inspect"),
    "gpu_runtime": ("nvidia-smi", "sparkctl validate", "nvidia-ctk runtime configure"),
    "rdma_device_missing": ("ibdev2netdev", "/dev/infiniband", "sparkctl validate"),
    "dist_init_hang": (
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "`sglang_firewall_fabric_cidrs`",
        "sparkctl validate",
    ),
    "cuda_graph_hang": (
        "--cuda-graph-backend-decode=disabled",
        "--cuda-graph-max-bs-decode",
        "`sglang_extra_args`",
    ),
    "gloo_connect_full_mesh": ("GLOO_SOCKET_IFNAME", "`nccl_socket_ifname`", "`fabric_a_netdev`"),
    "gloo_no_address": ("GLOO_SOCKET_IFNAME", "`fabric_a_netdev`"),
    "gloo_loopback": ("GLOO_SOCKET_IFNAME", "`nccl_socket_ifname`"),
    "nccl_no_interface": ("NCCL_SOCKET_IFNAME", "`nccl_socket_ifname`"),
    "nccl_connect_retrying": ("NCCL_SOCKET_IFNAME", "`sglang_firewall_fabric_cidrs`"),
    "nccl_no_route": (
        "NCCL_SOCKET_IFNAME",
        "`nccl_socket_ifname`",
        "`fabric_a_subnet`",
        "sparkctl validate",
    ),
    "nccl_connect_failed": ("`sglang_firewall_fabric_ports`", "NCCL_SOCKET_IFNAME"),
    "rendezvous_incomplete": ("`sglang_dist_port`", "`sglang_dist_timeout`"),
    "address_not_local": ("`fabric_a_ip`", "`sglang_host`"),
    "port_in_use": ("`sglang_port`", "`sglang_dist_port`"),
    "model_not_found": ("`sglang_model_path`", "sparkctl model sync"),
    "launch_args": ("`sglang_extra_args`", "`sglang_tp_size`", "sparkctl inventory check"),
    "kv_cache_no_memory": ("--mem-fraction-static", "`sglang_mem_fraction_static`"),
    "cuda_oom": (
        "`sglang_mem_fraction_static`",
        "`sglang_extra_args`",
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-backend-decode=disabled",
    ),
    "scheduler_killed": ("dmesg -T | grep -i oom", "`sglang_mem_fraction_static`"),
    "scheduler_exception": ("sparkctl serve logs", "sparkctl validate"),
    "nccl_socket_transport": ("`nccl_ib_hca`", "`nccl_ib_gid_index`", "sparkctl validate"),
    "memory_unbalanced": (
        "sparkctl-sglang.service",
        "docker ps",
        "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK",
        "`sglang_env_extra`",
    ),
    "unbalanced_loading": ("`sglang_model_path`", "sparkctl model sync"),
    "peer_lost": ("sparkctl validate",),
    "warmup_failed": ("NO_PROXY", "`sglang_env_extra`"),
    "health_check_failed": ("SGLANG_HEALTH_CHECK_TIMEOUT", "`sglang_env_extra`"),
    "dist_init_unreachable": ("`fabric_a_ip`", "`sglang_firewall_fabric_cidrs`"),
    "dist_init_retrying": ("`sglang_dist_port`", "`sglang_firewall_fabric_cidrs`"),
}


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


# ----------------------------------------------------------------- fixtures
def test_every_fixture_is_expected_and_has_a_source() -> None:
    files = {p.name for p in FIXTURES.glob("*.log")}
    assert files == set(EXPECTED)
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert [f for f in sorted(files) if f"`{f}`" not in sources] == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_phases_in_order(name: str) -> None:
    assert logs.milestones(_lines(name)) == EXPECTED[name][0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_signatures(name: str) -> None:
    found = logs.match(_lines(name))
    assert [s.id for s in found] == EXPECTED[name][1]
    for sig in found:
        assert sig.line in _lines(name)  # the line it was recognised in, verbatim
        assert sig.title and sig.explanation and sig.fix


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.startswith("clean_")))
def test_clean_start_up_has_no_failure(name: str) -> None:
    lines = _lines(name)
    assert logs.match(lines) == []
    assert [line for line in lines if logs.phase_of(line) is Phase.FAILED] == []
    assert logs.furthest_phase(lines) is not Phase.FAILED


@pytest.mark.parametrize(
    "line",
    [
        # NCCL's INFO chatter, from the fixtures: never a failure, never a phase of its own
        "node-0:270:270 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to enx",
        "bm-220ab4v:175:175 [0] NCCL INFO ENV/Plugin: Could not find: libnccl-env.so",
        "bm-220ab4v:175:175 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
        "node-0:276:276 [6] NCCL INFO TUNER/Plugin: Could not find: libnccl-tuner.so. Using internal tuner plugin.",
        "node-0:273:273 [3] NCCL INFO Init timings - ncclCommInitRank: rank 3 nranks 16 total 2.65 (kernels 0.23, alloc 1.00, bootstrap 0.28, allgathers 0.12, topo 0.03, graphs 0.09, connections 0.87, rest 0.01)",
        "node5:240:240 [6] NCCL INFO init.cc:1534 -> 2",
        "[2025-06-23 15:06:59 TP0] Found nccl from library libnccl.so.2",
        "[2025-06-23 15:07:01 TP6] Connecting to tcp://127.0.0.1:57063",
        "[2025-11-30 11:18:06] Endpoint '/get_model_info' is deprecated and will be removed in a future version. Please use '/model_info' instead.",
        "[2026-03-08 12:30:01] Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead.",
        "\x1b[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.\x1b[0m",
        "spark-1:4242:4242 [0] NCCL INFO NET/IB : No device found.",
        "spark-1:4242:4242 [0] NCCL INFO Using network Socket",
        "spark-1:4242:4242 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
        "2025-03-27 21:33:31,320 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT backend",
    ],
)
def test_info_lines_are_neither_phase_nor_failure(line: str) -> None:
    assert logs.phase_of(line) is None
    assert logs.match([line]) == []


@pytest.mark.parametrize(
    ("line", "phase"),
    [
        ("node5:236:236 [2] NCCL INFO Bootstrap : Using bond0:10.0.0.3<0>", Phase.DIST_INIT),
        (
            "bm-220ab4v:175:175 [0] NCCL INFO Bootstrap: Using bond0:172.16.0.124<0>",
            Phase.DIST_INIT,
        ),
        (
            "node01:322:322 [3] NCCL INFO ncclCommInitRank comm 0x55f5be32f460 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5a000 commId 0x4e2671c9674e940d - Init COMPLETE",
            Phase.NCCL_READY,
        ),
    ],
)
def test_nccl_info_milestones(line: str, phase: Phase) -> None:
    assert logs.phase_of(line) is phase
    assert logs.match([line]) == []


# --------------------------------------------------------------- signatures
def test_every_signature_fix_names_what_to_change() -> None:
    assert set(FIX_NAMES) == set(logs.SIGNATURES)
    for sig_id, names in FIX_NAMES.items():
        fix = logs.SIGNATURES[sig_id].fix
        assert [n for n in names if n not in fix] == [], sig_id


def test_signature_texts_are_single_paragraphs() -> None:
    for sig in logs.SIGNATURES.values():
        for text in (sig.title, sig.explanation, sig.fix):
            assert text == " ".join(text.split()), sig.id
        assert sig.line == "" and sig.rank is None


def test_warnings_are_not_fatal_and_do_not_fail_the_rank() -> None:
    warnings = {i for i, s in logs.SIGNATURES.items() if not s.fatal}
    assert warnings == {
        "gloo_loopback",
        "nccl_connect_retrying",
        "health_check_failed",
        "dist_init_retrying",
    }
    for name in ("gloo_loopback_vllm_backport14.log", "nccl_connect_retrying_llamafactory8045.log"):
        assert all(logs.phase_of(line) is None for line in _lines(name))


def test_match_keeps_the_first_line_per_id_in_order_of_appearance() -> None:
    lines = _lines("dist_init_connect_opensora667.log")
    found = logs.match(lines)
    assert [s.line for s in found] == [lines[0], lines[3]]
    assert [s.fatal for s in found] == [False, True]


def test_rank_from_prefix_or_argument() -> None:
    assert [s.rank for s in logs.match(_lines("gloo_connectfullmesh_sglang3226.log"))] == [10, 10]
    assert [s.rank for s in logs.match(_lines("peer_lost_sglang5602.log"))] == [3, 3]
    # NCCL's lines name no TP rank; the scheduler's traceback line does
    assert [s.rank for s in logs.match(_lines("nccl_no_route_sglang3820.log"))] == [None, 14]
    assert [s.rank for s in logs.match(_lines("nccl_no_route_sglang3820.log"), rank=2)] == [2, 2]
    assert logs.rank_of("[2026-07-14 07:49:04 TP3 EP3] Init torch distributed begin.") == 3
    assert logs.rank_of("[2026-01-21 19:39:12 DP1 TP0] x") == 0
    assert logs.rank_of("[rank7]:[W806 14:25:27.650991133 ProcessGroupGloo.cpp:524] Warning") == 7
    assert logs.rank_of("node5:240:240 [6] NCCL INFO x") is None


def test_streaming_gives_what_match_gives() -> None:
    for name in EXPECTED:
        log = RankLog()
        added: list[Signature] = []
        for line in _lines(name):
            added += log.feed(line)
        assert added == log.signatures == logs.match(_lines(name))
        assert log.phase is logs.furthest_phase(_lines(name))


def test_a_c10d_timeout_is_the_host_ip_hang_only_after_nccl_was_up() -> None:
    lines = _lines("hang_after_nccl_init_sglang7478.log")
    timeout = next(line for line in lines if "timed out after" in line)
    assert [s.id for s in logs.match([timeout])] == ["dist_init_unreachable"]
    assert [s.id for s in logs.match(lines)] == ["host_ip_hang", "scheduler_exception"]


# -------------------------------------------------------------------- hangs
def test_hang_after_nccl_init_is_the_sglang_host_ip_hang() -> None:
    lines = _lines("hang_after_nccl_init_sglang7478.log")
    before_timeout = lines[: next(i for i, line in enumerate(lines) if "waitForInput" in line)]
    for part in (before_timeout, _lines("hang_after_nccl_init_sglang4978.log")):
        assert logs.match(part) == []
        phase = logs.furthest_phase(part)
        assert phase is Phase.NCCL_READY
        assert logs.hang_signature(phase, 60) is None
        sig = logs.hang_signature(phase, 600, rank=1, line=part[-1])
        assert sig is not None
        assert (sig.id, sig.rank, sig.line, sig.fatal) == ("host_ip_hang", 1, part[-1], True)
        assert "SGLANG_HOST_IP" in sig.fix and "No progress for 600 s" in sig.explanation


def test_hang_at_or_before_dist_init_points_at_the_rendezvous() -> None:
    lines = _lines("hang_at_dist_init_sglang30609.log")
    assert logs.match(lines) == []
    phase = logs.furthest_phase(lines)
    assert phase is Phase.DIST_INIT
    assert logs.hang_signature(phase, 299) is None
    assert getattr(logs.hang_signature(phase, 301), "id", None) == "dist_init_hang"
    assert getattr(logs.hang_signature(Phase.STARTING, 601), "id", None) == "dist_init_hang"
    assert logs.hang_signature(Phase.STARTING, 301) is None


def test_hang_in_cuda_graph_capture() -> None:
    lines = _lines("clean_load_to_cuda_graph_sglang_pr4826.log")
    phase = logs.furthest_phase(lines)
    assert phase is Phase.CUDA_GRAPH
    assert logs.hang_signature(phase, 120) is None
    sig = logs.hang_signature(phase, 34 * 60)
    assert sig is not None and sig.id == "cuda_graph_hang"
    assert "--cuda-graph-backend-decode=disabled" in sig.fix


@pytest.mark.parametrize(
    "phase",
    [
        Phase.WEIGHTS_LOADING,
        Phase.WEIGHTS_LOADED,
        Phase.KV_CACHE,
        Phase.ENGINE_READY,
        Phase.HTTP_READY,
        Phase.READY,
        Phase.FAILED,
    ],
)
def test_no_hang_where_waiting_is_normal(phase: Phase) -> None:
    # large models load for long; workers rest at KV_CACHE / ENGINE_READY; a failed rank is failed
    assert logs.hang_signature(phase, 10 * 3600) is None


def test_phase_order() -> None:
    order = list(Phase)
    assert order == sorted(order)
    assert order[0] is Phase.STARTING and order[-1] is Phase.FAILED
    assert Phase.DIST_INIT < Phase.NCCL_READY < Phase.WEIGHTS_LOADING < Phase.HTTP_READY
    assert max(Phase.READY, Phase.FAILED) is Phase.FAILED
    assert [p.value for p in order[:3]] == ["starting", "dist_init", "nccl_ready"]


# The release's deprecated flags (sglang srt/server_args.py:8316-8336): advice must name
# their replacements only.
DEPRECATED_FLAGS = (
    "--disable-cuda-graph",
    "--cuda-graph-max-bs",
    "--cuda-graph-bs",
    "--disable-piecewise-cuda-graph",
    "--enable-breakable-cuda-graph",
)


def test_no_advice_names_a_deprecated_flag() -> None:
    for sig in logs.SIGNATURES.values():
        for flag in DEPRECATED_FLAGS:
            assert not re.search(re.escape(flag) + r"(?![-\w])", sig.fix), (sig.id, flag)


# --------------------------------------------------------------- patterns as data
def test_every_pattern_has_sources_and_matches_its_examples() -> None:
    owners = {owner for owner, _ in logs.PATTERNS}
    assert {p.value for p in Phase if p not in (Phase.FAILED,)} <= owners
    assert {
        i
        for i, s in logs.SIGNATURES.items()
        if i not in ("dist_init_hang", "cuda_graph_hang", "nccl_socket_transport")
    } <= owners
    for owner, pattern in logs.PATTERNS:
        assert pattern.sources and pattern.examples, (owner, pattern.regex)
        for source in pattern.sources:
            assert source.origin in (
                "sglang",
                "sglang@0.4.6",
                "nccl",
                "torch",
                "gloo",
                "uvicorn",
                "transformers",
                "huggingface_hub",
                "linux",
                "python",
                "issue",
                "docker",
                "sparkctl",
            ), source.ref
            if source.origin == "sglang":
                assert re.fullmatch(r"sglang:srt/[\w/]+\.py:\d+", source.ref), source.ref
                assert source.text, source.ref  # what the contract test looks for there
        for example in pattern.examples:
            assert pattern.search(example), (owner, example)


def test_a_pattern_means_what_its_owner_says() -> None:
    for owner, pattern in logs.PATTERNS:
        for example in pattern.examples:
            if owner in {p.value for p in Phase}:
                assert logs.phase_of(example) is Phase(owner), (owner, example)
            elif owner == "failure":
                assert logs.phase_of(example) is Phase.FAILED, example
            elif owner.startswith("transport:"):
                assert nccl_parse.nccl_transport([example]) == owner.split(":")[1], example
            elif owner == "nccl_version":
                assert nccl_parse.nccl_version(example) == example.split()[-1].split("==")[-1], (
                    example
                )
            else:
                assert owner in [s.id for s in logs.match([example])], (owner, example)


# ------------------------------------------------------------ NCCL transport
TRANSPORT = {
    "nccl_socket_transport_sglang3398.log": "socket",
    "nccl_via_socket_nccl952.log": "socket",
    "nccl_ib_transport_nccl707.log": "ib",
    "hang_after_nccl_init_sglang7478.log": None,
    "nccl_no_route_sglang3820.log": None,
}


@pytest.mark.parametrize("name", sorted(TRANSPORT))
def test_nccl_transport_from_ncclss_own_lines(name: str) -> None:
    lines = _lines(name)
    assert nccl_parse.nccl_transport(lines) == TRANSPORT[name]
    log = RankLog()
    for line in lines:
        log.feed(line)
    assert log.transport == TRANSPORT[name]


def test_one_socket_communicator_makes_it_sockets() -> None:
    ib, socket_ = _lines("nccl_ib_transport_nccl707.log"), _lines("nccl_via_socket_nccl952.log")
    assert (
        nccl_parse.nccl_transport(ib + socket_)
        == nccl_parse.nccl_transport(socket_ + ib)
        == "socket"
    )
    sig = nccl_parse.transport_signature(nccl_parse.nccl_transport(socket_), rank=2)
    assert sig is not None and (sig.id, sig.rank, sig.fatal) == ("nccl_socket_transport", 2, True)
    assert nccl_parse.transport_signature("ib") is None
    assert nccl_parse.transport_signature("socket", expected="socket") is None
    assert nccl_parse.transport_signature(None) is None


# --------------------------------------------------- the lab's SGLang stand-in
STAMP = "[2026-03-08 12:29:13"
NCCL_HEAD = "spark-2:4242:4250 [0] "


def _tp(rank: int, msg: rel.Msg, **fields: object) -> str:
    """A scheduler line of a TP=4 group (srt/managers/scheduler.py:4853 prefix)."""
    return f"{STAMP}{rel.tp_prefix(rank, 4)}] {msg(**fields)}"


def _main(msg: rel.Msg, **fields: object) -> str:
    return f"{STAMP}] {msg(**fields)}"


def _info(msg: rel.Msg, **fields: object) -> str:
    return f"{NCCL_HEAD}NCCL INFO {msg(**fields)}"


def _warn(msg: rel.Msg, where: str, **fields: object) -> str:
    return f"{STAMP}] {NCCL_HEAD}{where} NCCL WARN {msg(**fields)}"


def _c10d(level: str, msg: rel.Msg, where: str, rank: int | None = None, **fields: object) -> str:
    head = f"[rank{rank}]:" if rank is not None else ""
    return f"{head}[{level}0308 12:29:13.123456789 {where}] {msg(**fields)}"


_REFUSED = {"strerror": "Connection refused"}
_ADDR = {"addr": "192.168.100.12<41234>"}

# (message name, the line as the stand-in prints it, expected phase, expected signature id)
STANDIN_LINES: list[tuple[str, str, Phase | None, str | None]] = [
    # start-up, in the release's order
    ("LAUNCH_DEPRECATED", rel.LAUNCH_DEPRECATED().splitlines()[0], None, None),
    (
        "PY_WARNING",
        rel.PY_WARNING(
            filename="/opt/sglang/launch_server.py",
            lineno=139,
            category="UserWarning",
            message="x",
            line="warnings.warn(",
        ),
        None,
        None,
    ),
    (
        "DEPRECATED_FLAG",
        rel.DEPRECATED_FLAG(
            option="--cuda-graph-max-bs", replacement=" Use '--cuda-graph-max-bs-decode' instead."
        ),
        None,
        None,
    ),
    (
        "SERVER_ARGS",
        _main(rel.SERVER_ARGS, server_args="ServerArgs(model_path='/m', api_key='k')"),
        P.STARTING,
        None,
    ),
    ("INIT_DIST_BEGIN", _tp(1, rel.INIT_DIST_BEGIN), P.DIST_INIT, None),
    ("GLOO_CONNECTED", rel.GLOO_CONNECTED(rank=1, peers=3), P.DIST_INIT, None),
    ("SGLANG_NCCL", _tp(0, rel.SGLANG_NCCL, version=rel.NCCL_VERSION), P.DIST_INIT, None),
    ("NCCL_IFNAME_ENV", _info(rel.NCCL_IFNAME_ENV, spec="enp1s0f1np1"), None, None),
    (
        "NCCL_BOOTSTRAP",
        _info(rel.NCCL_BOOTSTRAP, ifname="enp1s0f1np1", ip="192.168.100.12"),
        P.DIST_INIT,
        None,
    ),
    ("NCCL_VERSION_LINE", _info(rel.NCCL_VERSION_LINE, version=rel.NCCL_VERSION), None, None),
    ("NCCL_IB_NONE", _info(rel.NCCL_IB_NONE), None, None),
    ("NCCL_PLUGIN_FAILED", _info(rel.NCCL_PLUGIN_FAILED, name="IB"), None, None),
    (
        "NCCL_SOCKET_USING",
        _info(rel.NCCL_SOCKET_USING, ifname="enp1s0f1np1", ip="192.168.100.12"),
        None,
        None,
    ),
    ("NCCL_PLUGIN_INIT", _info(rel.NCCL_PLUGIN_INIT, name="Socket"), None, None),
    ("NCCL_PLUGIN_ASSIGNED", _info(rel.NCCL_PLUGIN_ASSIGNED, name="Socket"), None, None),
    ("NCCL_USING_NETWORK", _info(rel.NCCL_USING_NETWORK, name="Socket"), None, None),
    (
        "NCCL_CHANNEL",
        _info(rel.NCCL_CHANNEL, channel=0, src=0, dst=1, way="receive", name="Socket"),
        None,
        None,
    ),
    (
        "NCCL_INIT_COMPLETE",
        _info(
            rel.NCCL_INIT_COMPLETE,
            comm=0x5A1B2C3D4E5F,
            rank=1,
            nranks=4,
            comm_id=0x8C1D2E3F4A5B6C7D,
        ),
        P.NCCL_READY,
        None,
    ),
    ("CUSTOM_AR_CROSS_NODE", _tp(1, rel.CUSTOM_AR_CROSS_NODE), P.NCCL_READY, None),
    ("INIT_DIST_END", _tp(1, rel.INIT_DIST_END, elapsed=1.52, mem=0.0), P.NCCL_READY, None),
    ("LOAD_BEGIN", _tp(1, rel.LOAD_BEGIN, avail=110.25), P.WEIGHTS_LOADING, None),
    (
        "LOAD_SHARDS",
        "\r" + rel.meter(0, 4, 0.0, rel.LOAD_SHARDS(), sglang_format=True),
        P.WEIGHTS_LOADING,
        None,
    ),
    (
        "SGLANG_BAR",
        "\r" + rel.meter(4, 4, 9.5, rel.LOAD_SHARDS(), sglang_format=True),
        P.WEIGHTS_LOADING,
        None,
    ),
    (
        "LOAD_END",
        _tp(1, rel.LOAD_END, elapsed=2.91, arch="LlamaForCausalLM", avail=109.8, usage=0.12),
        P.WEIGHTS_LOADED,
        None,
    ),
    (
        "KV_ALLOCATED",
        _tp(1, rel.KV_ALLOCATED, dtype="torch.bfloat16", tokens=163840, k=2.5, v=2.5),
        P.KV_CACHE,
        None,
    ),
    ("MEMORY_POOL_END", _tp(1, rel.MEMORY_POOL_END, avail=104.8), P.KV_CACHE, None),
    (
        "CAPTURE_PREFILL_BEGIN",
        _tp(0, rel.CAPTURE_PREFILL_BEGIN, backend="breakable", num_tokens=[4, 8], avail=104.8),
        P.CUDA_GRAPH,
        None,
    ),
    ("TQDM_BAR_NO_DESC", "\r" + rel.meter(0, 2, 0.0), None, None),
    (
        "CAPTURING_NUM_TOKENS",
        "\r" + rel.meter(0, 2, 0.0, rel.CAPTURING_NUM_TOKENS(num_tokens=8, avail=104.8)),
        P.CUDA_GRAPH,
        None,
    ),
    (
        "CAPTURE_PREFILL_END",
        _tp(0, rel.CAPTURE_PREFILL_END, elapsed=1.0, usage=0.1, avail=104.7),
        P.CUDA_GRAPH,
        None,
    ),
    (
        "CAPTURE_DECODE_BEGIN",
        _tp(0, rel.CAPTURE_DECODE_BEGIN, backend="full", bs=[1, 2], avail=104.7),
        P.CUDA_GRAPH,
        None,
    ),
    (
        "CAPTURING_BATCHES",
        "\r"
        + rel.meter(0, 2, 0.0)
        + "\r"
        + rel.meter(1, 2, 0.5, rel.CAPTURING_BATCHES(bs=1, avail=104.7)),
        P.CUDA_GRAPH,
        None,
    ),
    (
        "TQDM_BAR",
        "\r" + rel.meter(2, 2, 1.0, rel.CAPTURING_BATCHES(bs=1, avail=104.6)),
        P.CUDA_GRAPH,
        None,
    ),
    (
        "CAPTURE_DECODE_END",
        _tp(2, rel.CAPTURE_DECODE_END, elapsed=2.0, usage=0.4, avail=104.2),
        P.ENGINE_READY,
        None,
    ),
    (
        "MAX_TOTAL_TOKENS",
        _tp(
            0,
            rel.MAX_TOTAL_TOKENS,
            tokens=163840,
            chunked=8192,
            prefill=16384,
            running=64,
            context=8192,
            avail=104.2,
        ),
        P.ENGINE_READY,
        None,
    ),
    ("DUMMY_HEALTH", _main(rel.DUMMY_HEALTH, host="127.0.0.1", port=30000), P.ENGINE_READY, None),
    ("UVICORN_STARTED", _main(rel.UVICORN_STARTED, pid=4242), None, None),
    ("UVICORN_LIFESPAN", _main(rel.UVICORN_LIFESPAN), None, None),
    ("UVICORN_LIFESPAN_DONE", _main(rel.UVICORN_LIFESPAN_DONE), None, None),
    (
        "UVICORN_RUNNING",
        _main(rel.UVICORN_RUNNING, scheme="https", host="10.77.0.11", port=30000),
        P.HTTP_READY,
        None,
    ),
    (
        "UVICORN_ACCESS",
        _main(
            rel.UVICORN_ACCESS,
            client="127.0.0.1:40418",
            method="GET",
            path="/model_info",
            status=200,
            phrase="OK",
        ),
        None,
        None,
    ),
    ("FIRED_UP", _main(rel.FIRED_UP), P.READY, None),
    (
        "SSL_ENABLED",
        _main(
            rel.SSL_ENABLED,
            certfile="/etc/sparkctl/tls/sglang.crt",
            keyfile="/etc/sparkctl/tls/sglang.key",
        ),
        None,
        None,
    ),
    ("SSL_VERIFY_OFF", _main(rel.SSL_VERIFY_OFF), None, None),
    # serving, stopping: nothing to diagnose
    (
        "DEPRECATED_ENDPOINT",
        _main(rel.DEPRECATED_ENDPOINT, old="/get_server_info", new="/server_info"),
        None,
        None,
    ),
    (
        "DEPRECATED_MODEL_INFO",
        _main(rel.DEPRECATED_MODEL_INFO, old="/get_model_info", new="/model_info"),
        None,
        None,
    ),
    ("DEPRECATED_LOAD", _main(rel.DEPRECATED_LOAD, old="/get_load", new="/v1/loads"), None, None),
    (
        "PREFILL_BATCH",
        _tp(
            0, rel.PREFILL_BATCH, new=1, tokens=7, usage=0.0, running=0, queued=0, throughput=812.3
        ),
        None,
        None,
    ),
    (
        "DECODE_BATCH",
        _tp(0, rel.DECODE_BATCH, running=1, tokens=40, usage=0.0, throughput=25.3, queued=0),
        None,
        None,
    ),
    ("SIGTERM_RECEIVED", _main(rel.SIGTERM_RECEIVED), None, None),
    ("GRACEFUL_EXIT", _main(rel.GRACEFUL_EXIT, n=0, rids=[]), None, None),
    ("KILL_TREE", _main(rel.KILL_TREE, parent=4242, include=False, pid=4242), None, None),
    ("UVICORN_SHUTDOWN", _main(rel.UVICORN_SHUTDOWN), None, None),
    ("UVICORN_SHUTDOWN_DONE", _main(rel.UVICORN_SHUTDOWN_DONE), None, None),
    (
        "DUMMY_HEALTH_STOPPED",
        _main(rel.DUMMY_HEALTH_STOPPED, host="127.0.0.1", port=30000),
        None,
        None,
    ),
    # Gloo
    (
        "GLOO_FULL_MESH",
        _c10d(
            "E",
            rel.GLOO_FULL_MESH,
            "ProcessGroupGloo.cpp:143",
            1,
            detail="timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:40123",
        ),
        P.FAILED,
        "gloo_connect_full_mesh",
    ),
    (
        "GLOO_LOOPBACK",
        _c10d("W", rel.GLOO_LOOPBACK, "ProcessGroupGloo.cpp:524", 1),
        None,
        "gloo_loopback",
    ),
    (
        "GLOO_NO_ADDRESS",
        "RuntimeError: " + rel.GLOO_NO_ADDRESS(name="enp1s0f1np1"),
        P.FAILED,
        "gloo_no_address",
    ),
    (
        "GLOO_PEER_CLOSED",
        "RuntimeError: " + rel.GLOO_PEER_CLOSED(ip="192.168.100.11", port=4242),
        P.FAILED,
        "peer_lost",
    ),
    # NCCL
    ("NCCL_NO_IFACE", _warn(rel.NCCL_NO_IFACE, "bootstrap.cc:114"), P.FAILED, "nccl_no_interface"),
    (
        "NCCL_CONNECT_RETRY",
        _info(rel.NCCL_CONNECT_RETRY, **_ADDR, **_REFUSED, n=3, ms=300),
        None,
        "nccl_connect_retrying",
    ),
    (
        "NCCL_CONNECT_EXCEEDED",
        _warn(
            rel.NCCL_CONNECT_EXCEEDED,
            "misc/socket.cc:582",
            **_ADDR,
            strerror="No route to host",
            n=35,
        ),
        P.FAILED,
        "nccl_no_route",
    ),
    (
        "NCCL_CONNECT_EXCEEDED",
        _warn(rel.NCCL_CONNECT_EXCEEDED, "misc/socket.cc:582", **_ADDR, **_REFUSED, n=35),
        P.FAILED,
        "nccl_connect_failed",
    ),
    (
        "NCCL_CONNECT_FAILED",
        _warn(
            rel.NCCL_CONNECT_FAILED,
            "misc/socket.cc:596",
            **_ADDR,
            strerror="Network is unreachable",
        ),
        P.FAILED,
        "nccl_connect_failed",
    ),
    ("NCCL_UNWIND", _info(rel.NCCL_UNWIND, where="misc/socket.cc:661", code=2), None, None),
    ("NCCL_ERROR", "RuntimeError: " + rel.NCCL_ERROR(error=rel.NCCL_SYSTEM_ERROR), P.FAILED, None),
    (
        "NCCL_ERROR",
        "RuntimeError: " + rel.NCCL_ERROR(error=rel.NCCL_REMOTE_ERROR),
        P.FAILED,
        "peer_lost",
    ),
    (
        "NCCL_PEER_CLOSED",
        _warn(rel.NCCL_PEER_CLOSED, "misc/socket.cc:71", **_ADDR),
        P.FAILED,
        "peer_lost",
    ),
    # the rendezvous (torch) and the message queue (ZeroMQ)
    (
        "DIST_LISTEN_FAILED",
        "torch.distributed.DistNetworkError: "
        + rel.DIST_LISTEN_FAILED(
            port=50000, code=98, name="EADDRINUSE", message="address already in use"
        ),
        P.FAILED,
        "port_in_use",
    ),
    (
        "DIST_LISTEN_FAILED",
        "torch.distributed.DistNetworkError: "
        + rel.DIST_LISTEN_FAILED(
            port=50000, code=99, name="EADDRNOTAVAIL", message="cannot assign requested address"
        ),
        P.FAILED,
        "address_not_local",
    ),
    (
        "DIST_CLIENTS_JOINED",
        "torch.distributed.DistStoreError: "
        + rel.DIST_CLIENTS_JOINED(seconds=3601, joined=2, world=4),
        P.FAILED,
        "rendezvous_incomplete",
    ),
    (
        "C10D_CONNECT_FAILED",
        _c10d(
            "W",
            rel.C10D_CONNECT_FAILED,
            "socket.cpp:697",
            host="192.168.100.11",
            port=50000,
            errno=113,
            strerror="No route to host",
        ),
        None,
        "dist_init_retrying",
    ),
    (
        "C10D_CONNECT_TIMEOUT",
        _c10d(
            "E",
            rel.C10D_CONNECT_TIMEOUT,
            "socket.cpp:1011",
            ms=3600000,
            host="192.168.100.11",
            port=50000,
        ),
        P.FAILED,
        "dist_init_unreachable",
    ),
    (
        "DIST_CLIENT_TIMEOUT",
        "torch.distributed.DistNetworkError: "
        + rel.DIST_CLIENT_TIMEOUT(ms=3600000, host="192.168.100.11", port=50000),
        P.FAILED,
        "dist_init_unreachable",
    ),
    (
        "DIST_RECV_CLOSED",
        "torch.distributed.DistNetworkError: " + rel.DIST_RECV_CLOSED(),
        P.FAILED,
        "dist_init_unreachable",
    ),
    # arguments and model
    ("TP_NODES", "AssertionError: " + rel.TP_NODES(), P.FAILED, "launch_args"),
    (
        "HF_REPO_ID",
        "huggingface_hub.errors.HFValidationError: "
        + rel.HF_REPO_ID(path="/var/lib/sparkctl/models/current"),
        P.FAILED,
        "model_not_found",
    ),
    (
        "HF_OFFLINE",
        "OSError: " + rel.HF_OFFLINE(path="Qwen/Qwen3-8B").splitlines()[0],
        P.FAILED,
        "model_not_found",
    ),
    (
        "HF_BAD_JSON",
        "OSError: " + rel.HF_BAD_JSON(path="/m/config.json"),
        P.FAILED,
        "model_not_found",
    ),
    (
        "UNBALANCED_LOADING",
        "ValueError: " + rel.UNBALANCED_LOADING(tp_rank=0),
        P.FAILED,
        "unbalanced_loading",
    ),
    ("MONITORED_BARRIER_PEER", rel.MONITORED_BARRIER_PEER(rank=3), P.FAILED, "peer_lost"),
    # serving
    (
        "UVICORN_BIND_ERROR",
        _main(
            rel.UVICORN_BIND_ERROR,
            errno=98,
            host="10.77.0.11",
            port=30000,
            message="address already in use",
        ),
        P.FAILED,
        "port_in_use",
    ),
    (
        "UVICORN_BIND_ERROR_ROOT",
        _main(
            rel.UVICORN_BIND_ERROR_ROOT,
            errno=98,
            host="127.0.0.1",
            port=30000,
            message="address already in use",
        ),
        P.FAILED,
        "port_in_use",
    ),
    ("WATCHDOG_TIMEOUT", _tp(0, rel.WATCHDOG_TIMEOUT, timeout=300), P.FAILED, "peer_lost"),
    (
        "HEALTH_FAILED",
        _main(rel.HEALTH_FAILED, timeout=20, tic="14:00:00", last="13:59:20"),
        None,
        "health_check_failed",
    ),
    (
        "WARMUP_FAILED",
        _main(rel.WARMUP_FAILED, traceback="Traceback (most recent call last):"),
        P.FAILED,
        "warmup_failed",
    ),
    (
        "SCHEDULER_EXCEPTION",
        _tp(1, rel.SCHEDULER_EXCEPTION, traceback="Traceback (most recent call last):"),
        P.FAILED,
        "scheduler_exception",
    ),
    ("SIGQUIT_CHILD", _main(rel.SIGQUIT_CHILD), P.FAILED, None),
    # Python's traceback lines around the error line: nothing of their own
    ("TRACEBACK_HEAD", rel.TRACEBACK_HEAD(), None, None),
    (
        "TRACEBACK_FRAME",
        rel.TRACEBACK_FRAME(file="/opt/sglang/rendezvous.py", line=312, func="gloo_mesh"),
        None,
        None,
    ),
    ("TRACEBACK_CODE", rel.TRACEBACK_CODE(code="self._gloo_failure('no error')"), None, None),
    ("TRACEBACK_CARET", rel.TRACEBACK_CARET(carets="^^^^^^^^^^"), None, None),
    ("TRACEBACK_LAST", rel.TRACEBACK_LAST(exc_type="ValueError", message="x"), None, None),
]


@pytest.mark.parametrize(
    ("name", "line", "phase", "sig_id"),
    STANDIN_LINES,
    ids=[f"{i:02d}-{c[0]}" for i, c in enumerate(STANDIN_LINES)],
)
def test_standin_lines(name: str, line: str, phase: Phase | None, sig_id: str | None) -> None:
    assert isinstance(getattr(rel, name), rel.Msg)
    assert logs.phase_of(line) is phase
    assert [s.id for s in logs.match([line])] == ([sig_id] if sig_id else [])


def test_every_standin_message_has_a_case() -> None:
    assert {name for name, *_ in STANDIN_LINES} == set(rel.messages())


def test_standin_start_up_reaches_every_phase_it_prints() -> None:
    start = [
        line
        for name, line, *_ in STANDIN_LINES[
            : STANDIN_LINES.index(next(c for c in STANDIN_LINES if c[0] == "FIRED_UP")) + 1
        ]
    ]
    assert logs.milestones(start) == [
        Phase.STARTING,
        Phase.DIST_INIT,
        Phase.NCCL_READY,
        Phase.WEIGHTS_LOADING,
        Phase.WEIGHTS_LOADED,
        Phase.KV_CACHE,
        Phase.CUDA_GRAPH,
        Phase.ENGINE_READY,
        Phase.HTTP_READY,
        Phase.READY,
    ]
    assert logs.match(start) == []
    assert nccl_parse.nccl_transport(start) == "socket"  # the lab has no RDMA device


def _standin(name: str) -> str:
    return next(line for n, line, *_ in STANDIN_LINES if n == name)


def test_standin_rank_that_stops_after_customallreduce_is_the_host_ip_hang() -> None:
    worker = [
        _standin("INIT_DIST_BEGIN"),
        _standin("NCCL_INIT_COMPLETE"),
        _standin("CUSTOM_AR_CROSS_NODE"),
    ]
    assert logs.milestones(worker) == [Phase.DIST_INIT, Phase.NCCL_READY]
    assert logs.match(worker) == []
    sig = logs.hang_signature(logs.furthest_phase(worker), 130, rank=1, line=worker[-1])
    assert sig is not None and sig.id == "host_ip_hang" and "`fabric_a_ip`" in sig.fix


@pytest.mark.parametrize(
    ("line", "sig_id"),
    [
        # NCCL's verbs wrapper and IB transport (NVIDIA/nccl-tests #206, NVIDIA/nccl #426)
        (
            "spark-1:4242:4250 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with "
            "error Cannot allocate memory",
            "rdma_register_failed",
        ),
        (
            "10-0-0-1:5000:5050 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with "
            "error 12, opcode 1, len 0, vendor err 129",
            "rdma_completion_error",
        ),
        # sparkctl's launcher inside a container that was not given the secrets file
        (
            "sparkctl sglang launcher: cannot read the secrets file /etc/sparkctl/sglang-secrets.env: "
            "No such file or directory",
            "launcher_secrets",
        ),
        (
            "sparkctl sglang launcher: SGLANG_API_KEY is empty or missing in /x.env",
            "launcher_secrets",
        ),
        # docker's own words (moby daemon/errors.go, oci_linux.go; nvidia-container-toolkit #260)
        (
            "docker: Error response from daemon: No such image: lmsysorg/sglang:v0.5.17-cu130-runtime"
            "@sha256:" + "ab" * 32 + ".",
            "image_missing",
        ),
        (
            'docker: Error response from daemon: could not select device driver "" with capabilities: '
            "[[gpu]].",
            "gpu_runtime",
        ),
        (
            "docker: Error response from daemon: error gathering device information while adding "
            'custom device "/dev/infiniband": no such file or directory.',
            "rdma_device_missing",
        ),
    ],
)
def test_the_container_and_rdma_failures_are_explained(line: str, sig_id: str) -> None:
    (sig,) = logs.match([line])
    assert (sig.id, sig.fatal) == (sig_id, True)
    assert logs.phase_of(line) is Phase.FAILED


def test_memory_unbalanced_says_the_release_stops_by_default() -> None:
    """sglang 0.5.17 raises RuntimeError on the imbalance unless the switch is false
    (srt/distributed/bootstrap.py _check_tp_memory_balance, srt/environ.py: EnvBool(True);
    tests/contract/test_memory_defaults.py runs it)."""
    sig = logs.SIGNATURES["memory_unbalanced"]
    assert "only warns" not in sig.explanation
    assert "RuntimeError" in sig.explanation
    assert "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK is true by default" in sig.explanation
    assert sig.fatal


# ------------------------------------------------------------ the catalogue as data
# What sparkctl/sglang_logs.py held before its data moved to catalogue.yml and
# nccl_parse.yml, counted by importing it at e069983 (the last commit with the
# catalogue in Python): len() of _PHASE_PATTERNS, _GENERIC_FAILURES, _RULES, the
# patterns of all _RULES together, _HANG_RULES, TRANSPORT_PATTERNS["ib"] and
# ["socket"], NCCL_VERSION_PATTERNS, SIGNATURES and those with fatal False, PATTERNS,
# and over PATTERNS every pattern's sources, those of origin "sglang", and examples.
# A rule or pattern added to the data since adds to them here too.
CATALOGUE_COUNTS = {
    "phase patterns": 24,
    "generic failures": 5,
    "rules": 30,
    "rule patterns": 51,
    "hang rules": 2,
    "transport ib": 3,
    "transport socket": 4,
    "nccl version patterns": 3,
    "signatures": 33,
    "warnings": 4,
    "patterns": 90,
    "sources": 130,
    "sglang sources": 49,
    "examples": 100,
}


def test_the_data_holds_what_the_code_held() -> None:
    cat = catalogue.load()
    sources = [s for _, p in logs.PATTERNS for s in p.sources]
    assert {
        "phase patterns": len(cat.phases),
        "generic failures": len(cat.generic_failures),
        "rules": len(cat.rules),
        "rule patterns": sum(len(r.patterns) for r in cat.rules),
        "hang rules": len(cat.hang_rules),
        "transport ib": len(nccl_parse.TRANSPORT_PATTERNS["ib"]),
        "transport socket": len(nccl_parse.TRANSPORT_PATTERNS["socket"]),
        "nccl version patterns": len(nccl_parse.NCCL_VERSION_PATTERNS),
        "signatures": len(logs.SIGNATURES),
        "warnings": sum(not s.fatal for s in logs.SIGNATURES.values()),
        "patterns": len(logs.PATTERNS),
        "sources": len(sources),
        "sglang sources": sum(s.origin == "sglang" for s in sources),
        "examples": sum(len(p.examples) for _, p in logs.PATTERNS),
    } == CATALOGUE_COUNTS
    # HANG_AFTER and the rule each phase's silence is, as the code had them
    assert dict(logs.HANG_AFTER) == {
        Phase.STARTING: 600.0,
        Phase.DIST_INIT: 300.0,
        Phase.NCCL_READY: 120.0,
        Phase.CUDA_GRAPH: 900.0,
    }
    assert list(logs.HANG_AFTER) == sorted(logs.HANG_AFTER)
    hangs = {phase: getattr(logs.hang_signature(phase, 10**6), "id", None) for phase in Phase}
    assert {p: i for p, i in hangs.items() if i} == {
        Phase.STARTING: "dist_init_hang",
        Phase.DIST_INIT: "dist_init_hang",
        Phase.NCCL_READY: "host_ip_hang",
        Phase.CUDA_GRAPH: "cuda_graph_hang",
    }
    # tried furthest phase first, every pattern compiles
    assert [ph for ph, _ in cat.phases] == sorted((ph for ph, _ in cat.phases), reverse=True)
    for owner, pattern in logs.PATTERNS:
        assert pattern.compiled.pattern == pattern.regex, owner


def _ids_named_in_code() -> set[str]:
    """Signature ids sparkctl's code names: ``SIGNATURES["x"]`` / ``_BY_ID["x"]``,
    ``<something>.id == "x"``, and the reader's own id constants."""
    found = {logs.HOST_IP_HANG, logs._DIST_INIT_UNREACHABLE}
    for path in [*(REPO / "sparkctl").rglob("*.py"), *(REPO / "lab").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
                and (
                    (isinstance(node.value, ast.Attribute) and node.value.attr == "SIGNATURES")
                    or (
                        isinstance(node.value, ast.Name)
                        and node.value.id in {"SIGNATURES", "_BY_ID"}
                    )
                )
            ):
                found.add(node.slice.value)
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Attribute)
                and node.left.attr == "id"
            ):
                found |= {
                    c.value
                    for c in node.comparators
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return found


def test_every_rule_id_the_code_names_is_in_the_data() -> None:
    named = _ids_named_in_code()
    assert {"host_ip_hang", "dist_init_unreachable"} <= named  # up.py and the reader
    assert named - set(logs.SIGNATURES) == set()
    # and the ids this file expects
    expected = {i for _, ids in EXPECTED.values() for i in ids}
    expected |= {sig_id for *_, sig_id in STANDIN_LINES if sig_id}
    assert expected - set(logs.SIGNATURES) == set()


def _yaml(package: str, name: str) -> dict[str, Any]:
    data = yaml.safe_load(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _pattern_data(p: Pattern) -> dict[str, Any]:
    return {
        "regex": p.regex,
        "sources": [{"ref": s.ref, "text": list(s.text)} if s.text else s.ref for s in p.sources],
        "examples": list(p.examples),
    }


def _rule_data(rule: catalogue.Rule, snippets: dict[str, str]) -> dict[str, Any]:
    def text(t: str) -> str:  # the snippets put back in
        for name, snippet in snippets.items():
            t = t.replace(" ".join(snippet.split()), "{" + name + "}")
        return t

    out: dict[str, Any] = {
        "id": rule.id,
        "title": text(rule.title),
        "explanation": text(rule.explanation),
        "fix": text(rule.fix),
    }
    if not rule.fatal:
        out["fatal"] = False
    if rule.hang_after:
        out["hang_after"] = {phase.name: seconds for phase, seconds in rule.hang_after}
    if rule.patterns:
        out["patterns"] = [_pattern_data(p) for p in rule.patterns]
    return out


def _one_paragraph(rule: dict[str, Any]) -> dict[str, Any]:
    return {
        k: " ".join(v.split()) if k in ("title", "explanation", "fix") else v
        for k, v in rule.items()
    }


def test_the_catalogue_round_trips() -> None:
    """Every key of the data reaches the types: what the reader built, written back, is
    the file (texts as one paragraph each, with their snippets)."""
    raw = _yaml("sparkctl.serve.startup", "catalogue.yml")
    cat = catalogue.load()
    phases: dict[str, list[dict[str, Any]]] = {}
    for phase, pattern in reversed(cat.phases):  # the file lists them in start-up order
        phases.setdefault(phase.name, []).append(_pattern_data(pattern))
    for patterns in phases.values():
        patterns.reverse()
    assert phases == raw["phases"]
    assert [_pattern_data(p) for p in cat.generic_failures] == raw["generic_failures"]
    snippets = raw["snippets"]
    assert [_rule_data(r, snippets) for r in cat.rules] == list(map(_one_paragraph, raw["rules"]))
    assert [_rule_data(r, snippets) for r in cat.hang_rules] == list(
        map(_one_paragraph, raw["hang_rules"])
    )
    nccl = _yaml("sparkctl", "nccl_parse.yml")
    assert {
        kind: [_pattern_data(p) for p in ps] for kind, ps in nccl_parse.TRANSPORT_PATTERNS.items()
    } == nccl["transport"]
    assert [_pattern_data(p) for p in nccl_parse.NCCL_VERSION_PATTERNS] == nccl["versions"]
    assert _rule_data(nccl_parse.SOCKET_TRANSPORT_RULE, {}) == _one_paragraph(
        nccl["socket_transport"]
    )


def test_a_broken_catalogue_fails_loudly_naming_the_rule() -> None:
    raw = _yaml("sparkctl.serve.startup", "catalogue.yml")
    assert raw["rules"][0]["id"] == "host_ip_hang"
    assert raw["rules"][1]["id"] == "gloo_connect_full_mesh"

    def broken(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
        doc = copy.deepcopy(raw)
        change(doc)
        return doc

    def refused(doc: dict[str, Any], message: str) -> None:
        with pytest.raises(catalogue.CatalogueError, match=message):
            catalogue.build(catalogue.check(doc, catalogue.SCHEMA, "catalogue.yml"))

    refused(
        broken(lambda d: d["rules"][0].pop("fix")),
        r"rule 'host_ip_hang': 'fix' is a required property",
    )
    refused(
        broken(lambda d: d["rules"][1]["patterns"][0].update(regex="Gloo (connectFullMesh")),
        r"rule 'gloo_connect_full_mesh' patterns\[0\]\.regex: 'Gloo \(connectFullMesh' does "
        r"not compile",
    )
    refused(
        broken(lambda d: d["rules"][1]["patterns"][0]["sources"].clear()),
        r"rule 'gloo_connect_full_mesh' patterns\[0\]\.sources: \[\] should be non-empty",
    )
    refused(
        broken(lambda d: d["phases"].update(WARMING=d["phases"]["READY"])),
        r"phases: 'WARMING' is not one of",
    )
    refused(
        broken(lambda d: d["rules"][0].update(fix="Set {host_ip}.")),
        r"rule 'host_ip_hang' fix: unknown snippet\(s\) \['host_ip'\]",
    )
    refused(
        broken(lambda d: d["rules"][1].update(id="host_ip_hang")),
        r"rule 'host_ip_hang': the id is given twice",
    )
    refused(
        broken(lambda d: d["hang_rules"][1].update(hang_after={"NCCL_READY": 60})),
        r"rule 'cuda_graph_hang': NCCL_READY is already 'host_ip_hang''s hang",
    )
    nccl = _yaml("sparkctl", "nccl_parse.yml")
    del nccl["socket_transport"]["title"]
    with pytest.raises(catalogue.CatalogueError, match=r"rule 'nccl_socket_transport': 'title'"):
        catalogue.check(nccl, nccl_parse.DATA_SCHEMA, "nccl_parse.yml")
