"""sparkctl.serve.logs: start-up phases and failure signatures in SGLang rank logs.

The fixtures are real log excerpts (tests/fixtures/sglang, SOURCES.md says
where each comes from); the expected phases and signatures of each are
written out here, not derived from the code under test. The lab stand-in's
lines are copied from its source with its placeholders filled in, and each
case names the piece of the source it comes from, so a changed stand-in
breaks the test rather than silently escaping it.
"""

# ruff: noqa: E501 -- log lines are quoted as the programs print them
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkctl.serve import logs
from sparkctl.serve.logs import Phase, RankLog, Signature

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sglang"
STANDIN = REPO / "sparkctl" / "lab" / "standins" / "sglang" / "launch_server.py"

P = Phase

# file -> (phases in the order first reached, signature ids in order of first appearance)
EXPECTED: dict[str, tuple[list[Phase], list[str]]] = {
    # clean start-up pieces
    "clean_init_ends_sglang_pr21752.log": ([P.DIST_INIT, P.NCCL_READY], []),
    "clean_gloo_nccl_sglang10053.log": ([P.NCCL_READY], []),
    "clean_init_to_load_sglang_pr11716.log": ([P.NCCL_READY, P.WEIGHTS_LOADING], []),
    "clean_load_to_cuda_graph_sglang_pr4826.log": ([P.WEIGHTS_LOADED, P.KV_CACHE, P.CUDA_GRAPH], []),
    "clean_cuda_graph_to_http_sglang_pr11830.log": ([P.ENGINE_READY, P.HTTP_READY], []),
    "clean_ready_sglang32255.log": ([P.READY], []),
    # hangs: nothing to match, the phase tells
    "hang_after_nccl_init_sglang4978.log": ([P.NCCL_READY], []),
    "hang_at_dist_init_sglang30609.log": ([P.DIST_INIT], []),
    # ... until torch's store times out, 30 minutes later: the same hang, named
    "hang_after_nccl_init_sglang7478.log": ([P.DIST_INIT, P.NCCL_READY, P.FAILED], ["host_ip_hang"]),
    # failures
    "gloo_connectfullmesh_sglang3226.log": ([P.DIST_INIT, P.FAILED], ["gloo_connect_full_mesh"]),
    "gloo_loopback_vllm_backport14.log": ([], ["gloo_loopback"]),
    "gloo_no_address_awsdoeks51.log": ([P.FAILED], ["gloo_no_address"]),
    "nccl_no_route_sglang3820.log": ([P.DIST_INIT, P.FAILED], ["nccl_no_route"]),
    "nccl_no_route_hkproj1.log": ([P.FAILED], ["nccl_no_route"]),
    "nccl_connect_retrying_llamafactory8045.log": ([], ["nccl_connect_retrying"]),
    "nccl_connect_abort_sglang5594.log": ([P.FAILED], ["nccl_connect_failed"]),
    "nccl_no_interface_nccl1837.log": ([P.FAILED], ["nccl_no_interface"]),
    "dist_init_timeout_sglang2561.log": ([P.FAILED], ["dist_init_unreachable", "dist_init_retrying"]),
    "dist_init_connect_opensora667.log": ([P.FAILED], ["dist_init_retrying", "dist_init_unreachable"]),
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
    "unbalanced_loading_ktransformers1666.log": ([P.FAILED], ["unbalanced_loading"]),
    "peer_lost_sglang5602.log": ([P.FAILED], ["peer_lost"]),
    "peer_lost_ncclremote_stanford_alpaca207.log": ([P.FAILED], ["peer_lost"]),
    "warmup_failed_sglang2468.log": ([P.WEIGHTS_LOADED, P.KV_CACHE, P.CUDA_GRAPH, P.ENGINE_READY,
                                      P.HTTP_READY, P.FAILED], ["warmup_failed"]),
}

# What each signature's fix must name: the inventory variable, environment
# variable, flag or command that fixes it.
FIX_NAMES: dict[str, tuple[str, ...]] = {
    "host_ip_hang": ("SGLANG_HOST_IP", "`fabric_a_ip`", "sparkctl validate"),
    "dist_init_hang": ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "`sglang_firewall_fabric_cidrs`", "sparkctl validate"),
    "cuda_graph_hang": ("--disable-cuda-graph", "`sglang_extra_args`"),
    "gloo_connect_full_mesh": ("GLOO_SOCKET_IFNAME", "`nccl_socket_ifname`", "`fabric_a_netdev`"),
    "gloo_no_address": ("GLOO_SOCKET_IFNAME", "`fabric_a_netdev`"),
    "gloo_loopback": ("GLOO_SOCKET_IFNAME", "`nccl_socket_ifname`"),
    "nccl_no_interface": ("NCCL_SOCKET_IFNAME", "`nccl_socket_ifname`"),
    "nccl_connect_retrying": ("NCCL_SOCKET_IFNAME", "`sglang_firewall_fabric_cidrs`"),
    "nccl_no_route": ("NCCL_SOCKET_IFNAME", "`nccl_socket_ifname`", "`fabric_a_subnet`", "sparkctl validate"),
    "nccl_connect_failed": ("`sglang_firewall_fabric_ports`", "NCCL_SOCKET_IFNAME"),
    "rendezvous_incomplete": ("`sglang_dist_port`", "`sglang_dist_timeout`"),
    "rank_mismatch": ("`sglang_tp_size`", "`node_rank`", "sparkctl model sync"),
    "rank_rejected": ("`sglang_nnodes`", "`node_rank`"),
    "address_not_local": ("`fabric_a_ip`", "`sglang_host`"),
    "port_in_use": ("`sglang_port`", "`sglang_dist_port`"),
    "model_not_found": ("`sglang_model_path`", "sparkctl model sync"),
    "launch_args": ("`sglang_extra_args`", "`sglang_tp_size`", "sparkctl inventory check"),
    "kv_cache_no_memory": ("--mem-fraction-static", "`sglang_extra_args`"),
    "cuda_oom": ("--mem-fraction-static", "`sglang_extra_args`", "--cuda-graph-max-bs"),
    "memory_unbalanced": ("sparkctl-sglang.service", "docker ps"),
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


@pytest.mark.parametrize("line", [
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
    "2025-03-27 21:33:31,320 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT backend",
])
def test_info_lines_are_neither_phase_nor_failure(line: str) -> None:
    assert logs.phase_of(line) is None
    assert logs.match([line]) == []


@pytest.mark.parametrize(("line", "phase"), [
    ("node5:236:236 [2] NCCL INFO Bootstrap : Using bond0:10.0.0.3<0>", Phase.DIST_INIT),
    ("bm-220ab4v:175:175 [0] NCCL INFO Bootstrap: Using bond0:172.16.0.124<0>", Phase.DIST_INIT),
    ("node01:322:322 [3] NCCL INFO ncclCommInitRank comm 0x55f5be32f460 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 5a000 commId 0x4e2671c9674e940d - Init COMPLETE", Phase.NCCL_READY),
])
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
    assert warnings == {"gloo_loopback", "nccl_connect_retrying", "rank_rejected",
                        "health_check_failed", "dist_init_retrying"}
    for name in ("gloo_loopback_vllm_backport14.log", "nccl_connect_retrying_llamafactory8045.log"):
        assert all(logs.phase_of(line) is None for line in _lines(name))


def test_match_keeps_the_first_line_per_id_in_order_of_appearance() -> None:
    lines = _lines("dist_init_connect_opensora667.log")
    found = logs.match(lines)
    assert [s.line for s in found] == [lines[0], lines[3]]
    assert [s.fatal for s in found] == [False, True]


def test_rank_from_prefix_or_argument() -> None:
    assert [s.rank for s in logs.match(_lines("gloo_connectfullmesh_sglang3226.log"))] == [10]
    assert [s.rank for s in logs.match(_lines("peer_lost_sglang5602.log"))] == [3]
    assert [s.rank for s in logs.match(_lines("nccl_no_route_sglang3820.log"))] == [None]
    assert [s.rank for s in logs.match(_lines("nccl_no_route_sglang3820.log"), rank=2)] == [2]
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
    assert [s.id for s in logs.match(lines)] == ["host_ip_hang"]


# -------------------------------------------------------------------- hangs
def test_hang_after_nccl_init_is_the_sglang_host_ip_hang() -> None:
    lines = _lines("hang_after_nccl_init_sglang7478.log")
    before_timeout = lines[:next(i for i, line in enumerate(lines) if "waitForInput" in line)]
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
    assert "--disable-cuda-graph" in sig.fix


@pytest.mark.parametrize("phase", [Phase.WEIGHTS_LOADING, Phase.WEIGHTS_LOADED, Phase.KV_CACHE,
                                   Phase.ENGINE_READY, Phase.HTTP_READY, Phase.READY,
                                   Phase.FAILED])
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


# --------------------------------------------------- the lab's SGLang stand-in
STANDIN_TEXT = STANDIN.read_text()

# (line as the stand-in prints it, a piece of its source that prints it,
#  expected phase, expected signature id)
STANDIN_LINES: list[tuple[str, str, Phase | None, str | None]] = [
    # start-up, in order (run(), Node.resolve_addresses(), gloo_mesh(), nccl_links(), serve())
    ("[2025-03-08 12:29:13] server_args=ServerArgs(model_path='/var/lib/sparkctl/models/current', tp_size=4, nnodes=4, node_rank=1)",
     'log(f"server_args={args_repr(args)}")', Phase.STARTING, None),
    ("[2025-03-08 12:29:13 TP1] Init torch distributed begin.",
     'log("Init torch distributed begin.", node.tp)', Phase.DIST_INIT, None),
    ("spark-2:4242:4242 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to enp1s0f1np1",
     'f"NCCL_SOCKET_IFNAME set by environment to {spec}"', None, None),
    ("spark-2:4242:4242 [0] NCCL INFO Bootstrap : Using enp1s0f1np1:192.168.100.12<0>",
     'f"Bootstrap : Using {self.nccl_if}:{self.nccl_ip}<0>"', Phase.DIST_INIT, None),
    ("[2025-03-08 12:29:14 TP0] Waiting for node rank(s) 2, 3 at 192.168.100.11:50000 (5 s of --dist-timeout)",
     'f"Waiting for node rank(s) {', None, None),
    ("[2025-03-08 12:29:14 TP0] Node rank 1 (spark-2, 192.168.100.12) joined the rendezvous (2/4)",
     'joined the rendezvous', None, None),
    ("[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3",
     'emit(f"[Gloo] Rank {self.tp} is connected to {len(peers)} peer ranks. Expected number',
     Phase.DIST_INIT, None),
    ("spark-2:4242:4250 [0] NCCL INFO comm 0x5a1b2c3d4e5f rank 1 nranks 4 cudaDev 0 nvmlDev 0 busId f01000 commId 0x8c1d2e3f4a5b6c7d - Init COMPLETE",
     'nvmlDev 0 busId f01000 commId 0x{comm_id:x} - Init COMPLETE"', Phase.NCCL_READY, None),
    ("[2025-03-08 12:29:15 TP1] Custom allreduce is disabled because this process group spans across nodes.",
     'log("Custom allreduce is disabled because this process group spans across nodes.", node.tp)',
     Phase.NCCL_READY, None),
    ("[2025-03-08 12:29:15 TP1] Init torch distributed ends. elapsed=1.52 s, mem usage=0.00 GB",
     'log(f"Init torch distributed ends. elapsed=', Phase.NCCL_READY, None),
    ("[2025-03-08 12:29:15 TP1] Load weight begin. avail mem=110.25 GB",
     'log(f"Load weight begin. avail mem=', Phase.WEIGHTS_LOADING, None),
    ("[2025-03-08 12:29:18 TP1] Load weight end. elapsed=2.91 s, type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=109.80 GB, mem usage=0.12 GB.",
     'log(f"Load weight end. elapsed=', Phase.WEIGHTS_LOADED, None),
    ("[2025-03-08 12:29:18 TP1] KV Cache is allocated. #tokens: 163840, K size: 0.00 GB, V size: 0.00 GB",
     'log(f"KV Cache is allocated. #tokens: ', Phase.KV_CACHE, None),
    ("[2025-03-08 12:29:18 TP0] max_total_num_tokens=163840, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, context_len=8192, available_gpu_mem=109.80 GB",
     'log(f"max_total_num_tokens=', Phase.ENGINE_READY, None),
    ("[2025-03-08 12:29:18] Started server process [4242]",
     'log(f"Started server process [{os.getpid()}]")', None, None),
    ("[2025-03-08 12:29:18] Application startup complete.",
     'log("Application startup complete.")', None, None),
    ("[2025-03-08 12:29:18] Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
     'log(f"Uvicorn running on http://', Phase.HTTP_READY, None),
    ("[2025-03-08 12:29:19] The server is fired up and ready to roll!",
     'log("The server is fired up and ready to roll!")', Phase.READY, None),
    ("[2025-03-08 13:00:00] Received sigterm; shutting down.",
     'log("Received sigterm; shutting down.")', None, None),
    # Gloo
    ("[rank1]:[E ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:40123",
     'Gloo connectFullMesh failed with "', Phase.FAILED, "gloo_connect_full_mesh"),
    ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
     'f"RuntimeError: Gloo connectFullMesh failed with {detail}"', Phase.FAILED, "gloo_connect_full_mesh"),
    ("[rank1]:[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())",
     '"hostname to a (local) address. Using the loopback address as fallback. Manually "',
     None, "gloo_loopback"),
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find address for: enp1s0f1np1",
     'f"device.cc:83] ifa != nullptr. Unable to find address for: {name}"', Phase.FAILED, "gloo_no_address"),
    # NCCL
    ("spark-2:4242:4242 [0] misc/socket.cc:384 NCCL WARN Bootstrap : no socket interface found",
     'nccl("WARN", "Bootstrap : no socket interface found", "misc/socket.cc:384 ")',
     Phase.FAILED, "nccl_no_interface"),
    ("torch.distributed.DistBackendError: NCCL error: internal error - please report this issue to the NCCL developers, NCCL version 2.27.3",
     '"torch.distributed.DistBackendError: NCCL error: internal error - please report "',
     Phase.FAILED, None),
    ("spark-1:4242:4250 [0] NCCL INFO socketPollConnect: connect returned Connection refused, retrying (3/34) after sleep for 300 msec",
     'f"socketPollConnect: connect returned {os.strerror(code)}, "', None, "nccl_connect_retrying"),
    ("spark-1:4242:4250 [0] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 192.168.100.12<41234> returned 113(No route to host) errno 115(Operation now in progress)",
     'nccl("WARN", f"socketPollConnect: Connect to {ip}<{port}> returned {code}"',
     Phase.FAILED, "nccl_no_route"),
    ("spark-1:4242:4250 [0] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 192.168.100.12<41234> returned 111(Connection refused) errno 115(Operation now in progress)",
     'nccl("WARN", f"socketPollConnect: Connect to {ip}<{port}> returned {code}"',
     Phase.FAILED, "nccl_connect_failed"),
    ("spark-1:4242:4250 [0] NCCL INFO misc/socket.cc:570 -> 2",
     'for where in ("misc/socket.cc:570"', None, None),
    ("[2025-03-08 12:29:40 TP0] Scheduler hit an exception: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details)",
     '"../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "',
     Phase.FAILED, None),
    ("no connection from rank 0 within --dist-timeout (TimeoutError)",
     'f"no connection from rank 0 within --dist-timeout "', Phase.FAILED, "nccl_connect_failed"),
    # SGLang's cross-node message queue (SGLANG_HOST_IP)
    ("[2025-03-08 13:29:15 TP1] Scheduler hit an exception: TimeoutError: MessageQueue.wait_until_ready: no answer from tcp://10.0.0.51:45678 within --dist-timeout (SGLANG_HOST_IP must be each node's fabric address)",
     'f"exception: TimeoutError: MessageQueue.wait_until_ready: no answer from "',
     Phase.FAILED, "host_ip_hang"),
    ("[2025-03-08 13:29:15 TP0] Scheduler hit an exception: TimeoutError: MessageQueue.wait_until_ready: readers [1, 2, 3] did not connect to tcp://10.0.0.50:45678 within --dist-timeout (SGLANG_HOST_IP must be this node's fabric address)",
     '"an exception: TimeoutError: MessageQueue.wait_until_ready: "', Phase.FAILED, "host_ip_hang"),
    ("zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.0.0.99:0')",
     'Fatal(f"zmq.error.ZMQError: {os.strerror(os_errno(err))} "', Phase.FAILED, "address_not_local"),
    # rendezvous
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 50000, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
     '"listen on any local network address. port: {self.dist_port}, "', Phase.FAILED, "port_in_use"),
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 50000, useIpv6: false, code: -99, name: EADDRNOTAVAIL, message: cannot assign requested address",
     '"listen on any local network address. port: {self.dist_port}, "', Phase.FAILED, "address_not_local"),
    ("torch.distributed.DistStoreError: Timed out after 3600 seconds waiting for clients. 2/4 clients joined.",
     '"waiting for clients. {len(self.world)}/{self.nnodes} clients "', Phase.FAILED, "rendezvous_incomplete"),
    ("[W socket.cpp:663] [c10d] The client socket has failed to connect to [192.168.100.11]:50000 (errno: 111 - Connection refused).",
     'emit(f"[W socket.cpp:663] [c10d] The client socket has failed to connect to "',
     None, "dist_init_retrying"),
    ("torch.distributed.DistNetworkError: The client socket has timed out after 3600s while trying to connect to (192.168.100.11, 50000).",
     'Fatal("torch.distributed.DistNetworkError: The client socket has timed out "',
     Phase.FAILED, "dist_init_unreachable"),
    ("torch.distributed.DistNetworkError: failed to recv, got 0 bytes (ConnectionResetError: [Errno 104] Connection reset by peer)",
     'f"torch.distributed.DistNetworkError: failed to recv, got 0 bytes "', Phase.FAILED, "dist_init_unreachable"),
    ("torch.distributed.DistStoreError: the head refused this rank: the model's config.json differs from the head's",
     '"torch.distributed.DistStoreError: the head refused this rank: "', Phase.FAILED, "rank_mismatch"),
    ("[2025-03-08 12:29:16 TP0] Rejected a rank from 192.168.100.13: node rank 1 has joined already (from 192.168.100.12)",
     'log(f"Rejected a rank from {peer}: {problem}", self.tp)', None, "rank_rejected"),
    # arguments and model
    ("AssertionError: please provide --dist-init-addr as host:port of head node",
     'Fatal("AssertionError: please provide --dist-init-addr as host:port of head node")',
     Phase.FAILED, "launch_args"),
    ("AssertionError: node_rank 4 is not in [0, nnodes=4)",
     'f"AssertionError: node_rank {args[\'node_rank\']} is not in "', Phase.FAILED, "launch_args"),
    ("AssertionError: tp_size 6 must be divisible by nnodes 4",
     'f"AssertionError: tp_size {args[\'tp_size\']} must be divisible by "', Phase.FAILED, "launch_args"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/var/lib/sparkctl/models/current'. Use `repo_type` argument if needed.",
     'Fatal("huggingface_hub.errors.HFValidationError: Repo id must be in the form "',
     Phase.FAILED, "model_not_found"),
    ("OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files. (HF_HUB_OFFLINE is set: Qwen/Qwen3-8B must be in the local cache)",
     '"OSError: We couldn\'t connect to \'https://huggingface.co\' to load the files, "',
     Phase.FAILED, "model_not_found"),
    ("OSError: It looks like the config file at '/var/lib/sparkctl/models/current/config.json' is not a valid JSON file. (Expecting value: line 1 column 1 (char 0))",
     'f"OSError: It looks like the config file at \'{config}\' is not a valid JSON "', Phase.FAILED, "model_not_found"),
    ("[2025-03-08 12:29:30 TP0] Scheduler hit an exception: rank 2 did not finish loading: Connection reset by peer",
     'f"exception: rank {peer} did not finish loading: "', Phase.FAILED, "unbalanced_loading"),
    # serving
    ("[Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use",
     'raise Fatal(f"[Errno {code}] error while attempting to bind on address "', Phase.FAILED, "port_in_use"),
    ("[2025-03-08 14:00:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
     'log(f"Scheduler watchdog timeout (self.watchdog_timeout=', Phase.FAILED, "peer_lost"),
    ("spark-1:4242:4250 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer 192.168.100.12<41234>",
     'f"socketProgress: Connection closed by remote peer {ip}<{port}>"', Phase.FAILED, "peer_lost"),
    ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
     'emit("ncclRemoteError: A call failed possibly due to a network error or a remote "',
     Phase.FAILED, "peer_lost"),
    ("[2025-03-08 14:00:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
     'log(f"Health check failed. Server couldn\'t get a response from detokenizer for last "',
     None, "health_check_failed"),
    ("[2025-03-08 12:29:40] Initialization failed. warmup error: the scheduler did not answer (watchdog)",
     'log(f"Initialization failed. warmup error: {err}")', Phase.FAILED, "warmup_failed"),
]


@pytest.mark.parametrize(("line", "source", "phase", "sig_id"), STANDIN_LINES,
                         ids=[f"{i:02d}" for i in range(len(STANDIN_LINES))])
def test_standin_lines(line: str, source: str, phase: Phase | None, sig_id: str | None) -> None:
    assert source in STANDIN_TEXT, "the stand-in no longer prints this line"
    assert logs.phase_of(line) is phase
    assert [s.id for s in logs.match([line])] == ([sig_id] if sig_id else [])


def test_standin_start_up_reaches_every_phase_it_prints() -> None:
    start = [line for line, _, phase, _ in STANDIN_LINES[:19] if phase is not None]
    assert logs.milestones(start) == [Phase.STARTING, Phase.DIST_INIT, Phase.NCCL_READY,
                                      Phase.WEIGHTS_LOADING, Phase.WEIGHTS_LOADED,
                                      Phase.KV_CACHE, Phase.ENGINE_READY, Phase.HTTP_READY,
                                      Phase.READY]
    assert logs.match(line for line, *_ in STANDIN_LINES[:19]) == []


def _standin(fragment: str) -> str:
    return next(line for line, *_ in STANDIN_LINES if fragment in line)


def test_standin_queue_timeout_after_nccl_ready_is_the_host_ip_hang() -> None:
    worker = [_standin("Init torch distributed begin."), _standin("Init COMPLETE"),
              _standin("spans across nodes"), _standin("no answer from tcp://")]
    assert logs.milestones(worker) == [Phase.DIST_INIT, Phase.NCCL_READY, Phase.FAILED]
    assert [s.id for s in logs.match(worker, rank=1)] == ["host_ip_hang"]
    assert re.search(r"`fabric_a_ip`", logs.match(worker)[0].fix)
