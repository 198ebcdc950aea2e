"""Read an SGLang rank's start-up log: how far it got, what went wrong, which NCCL transport.

``sparkctl serve up`` follows every rank's journal
(``journalctl -u sparkctl-sglang.service -o cat -f``) while the
tensor-parallel group starts. Each line may announce a start-up
:class:`Phase` (:func:`phase_of`) and may carry a known failure
:class:`Signature` (:func:`match`): what it means and what to change, in
sparkctl's terms (inventory variables, environment variables, commands).
A rank that stops making progress is diagnosed by :func:`hang_signature`
from the phase it is stuck in, because the worst multi-node failure prints
nothing at all: with TP0's ``SGLANG_HOST_IP`` off the fabric, start-up hangs
after "CustomAllreduce is disabled because this process group spans across
nodes.", for ever. :func:`nccl_transport` reads NCCL's own INFO lines
(NCCL_DEBUG=INFO) to tell whether the data goes over RDMA (``ib``) or TCP
sockets (``socket``).

Every marker here is data with its origin: a :class:`Pattern` carries its
:class:`Source`\\ s (``sglang:<path below the package>:<line>`` in the pinned
0.5.17 wheel, with the literal source text found there; ``sglang@0.4.6:`` an
older release that printed another form; ``nccl:``, ``torch:``, ``gloo:``,
``uvicorn:``, ``transformers:``, ``huggingface_hub:``, ``linux:``; issues as
``issue:owner/repo#N``) and example lines it must match, real ones from
``tests/fixtures/sglang`` where there is one. ``tests/contract/
test_release_logs.py`` holds every ``sglang:`` citation against the
installed release, so a new pin says what changed.

Pure functions over strings: no I/O, no clock. The caller measures how
long a rank has been in its phase and asks :func:`hang_signature`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType


@functools.total_ordering
class Phase(Enum):
    """Start-up phases of one rank, in the order a healthy rank goes through them.

    Members compare by that order (``Phase.DIST_INIT < Phase.NCCL_READY``);
    ``FAILED`` sorts after everything, so "furthest phase" is simply ``max``.
    Ranks other than TP0 end at ``ENGINE_READY`` (their health server is up):
    only TP0 serves the API.
    """

    STARTING = "starting"  # server_args logged; imports, tokenizer, config
    DIST_INIT = "dist_init"  # "Init torch distributed begin.": rendezvous, Gloo, NCCL
    NCCL_READY = "nccl_ready"  # NCCL communicator up ("Init COMPLETE", CustomAllreduce off)
    WEIGHTS_LOADING = "weights_loading"  # "Load weight begin."
    WEIGHTS_LOADED = "weights_loaded"  # "Load weight end."
    KV_CACHE = "kv_cache"  # "KV Cache is allocated.", "Memory pool end."
    CUDA_GRAPH = "cuda_graph"  # "Capture target prefill/decode CUDA graph begin."
    ENGINE_READY = "engine_ready"  # decode capture end, "max_total_num_tokens=", health server
    HTTP_READY = "http_ready"  # "Uvicorn running on ..." (TP0)
    READY = "ready"  # "The server is fired up and ready to roll!" (warm-up done)
    FAILED = "failed"

    @property
    def order(self) -> int:
        return _ORDER[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Phase):
            return NotImplemented
        return self.order < other.order


_ORDER: dict[Phase, int] = {p: i for i, p in enumerate(Phase)}


@dataclass(frozen=True)
class Signature:
    """A known failure: what it means and how to fix it.

    ``line`` is the log line it was recognised in (empty for a hang, which no
    line announces); ``rank`` the TP rank when known. ``fatal`` is False for
    warnings that often precede a failure but do not end start-up by
    themselves (e.g. NCCL retrying a connect).
    """

    id: str
    title: str
    explanation: str
    fix: str
    line: str = ""
    rank: int | None = None
    fatal: bool = True


# ------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Source:
    """Where a marker comes from: ``ref`` (see the module doc) and, for SGLang's own
    source, the literal ``text`` pieces that occur at or near the cited line."""

    ref: str
    text: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        return self.ref.split(":", 1)[0]


@dataclass(frozen=True)
class Pattern:
    """A regular expression over one log line, its sources and lines it must match."""

    regex: str
    sources: tuple[Source, ...]
    examples: tuple[str, ...] = ()

    @functools.cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex)

    def search(self, line: str) -> bool:
        return self.compiled.search(line) is not None


def S(ref: str, *text: str) -> Source:
    return Source(ref, text)


def _p(regex: str, *sources: Source, ex: tuple[str, ...] | str = ()) -> Pattern:
    return Pattern(regex, sources, (ex,) if isinstance(ex, str) else ex)


_CA = "srt/distributed/device_communicators/custom_all_reduce_utils.py"
_CG = "srt/model_executor/model_runner_components/cuda_graph_setup.py"
_HTTP = "srt/entrypoints/http_server.py"

# ------------------------------------------------------------------ phases
_PHASE_PATTERNS: tuple[tuple[Phase, Pattern], ...] = (
    (
        Phase.READY,
        _p(
            r"The server is fired up and ready to roll!",
            S(f"sglang:{_HTTP}:2355", 'logger.info("The server is fired up and ready to roll!")'),
            ex="[2025-12-03 05:10:07] The server is fired up and ready to roll!",
        ),
    ),
    (
        Phase.HTTP_READY,
        _p(
            r"Uvicorn running on ",
            S("uvicorn:uvicorn/server.py (Server._log_started_message)"),
            S(f"sglang:{_HTTP}:2602", "uvicorn.run("),
            ex="[2025-11-30 11:18:46] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press "
            "CTRL+C to quit)",
        ),
    ),
    (
        Phase.ENGINE_READY,
        _p(
            r"Capture (?:target|draft) (?:decode|verify) (?:CUDA|CPU|NPU|XPU) graph end\.",
            S(
                f"sglang:{_CG}:453",
                'f"Capture {capture_name} {graph_backend[model_runner.device]} end. "',
            ),
            S(f"sglang:{_CG}:425", 'capture_name = f"{role} decode"', '"cuda": "CUDA graph"'),
            ex="[2026-03-08 12:29:19 TP1] Capture target decode CUDA graph end. elapsed=2.91 s, "
            "mem usage=0.41 GB, avail mem=99.80 GB.",
        ),
    ),
    (
        Phase.ENGINE_READY,
        _p(
            r"Capture cuda graph end\b",
            S("sglang@0.4.6:srt/model_executor/model_runner.py:970", "Capture cuda graph end."),
            ex="[2024-12-13 01:45:01 TP0] Capture cuda graph end. Time elapsed: 2.19 s",
        ),
    ),
    (
        Phase.ENGINE_READY,
        _p(
            r"\bmax_total_num_tokens=\d+",
            S(
                "sglang:srt/managers/scheduler.py:1069",
                'f"max_total_num_tokens={self.max_total_num_tokens}, "',
            ),
            ex="[2025-11-30 11:18:40 TP0] max_total_num_tokens=1030645, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=4096, context_len=131072, "
            "available_gpu_mem=15.82 GB",
        ),
    ),
    # The release's ranks other than TP0, once their scheduler is up (engine.py:1124).
    (
        Phase.ENGINE_READY,
        _p(
            r"Dummy health check server started in background thread at ",
            S(
                "sglang:srt/utils/common.py:3166",
                'f"Dummy health check server started in background thread at ',
            ),
            ex="[2026-03-08 12:29:21] Dummy health check server started in background thread at "
            "127.0.0.1:30000",
        ),
    ),
    (
        Phase.CUDA_GRAPH,
        _p(
            r"Capture (?:target|draft) (?:prefill|decode|verify) (?:CUDA|CPU|NPU|XPU) graph begin\.",  # noqa: E501 - the real text, whole
            S(
                f"sglang:{_CG}:430",
                'f"Capture {capture_name} {graph_backend[model_runner.device]} begin. "',
            ),
            S(f"sglang:{_CG}:363", 'f"Capture {capture_name} CUDA graph begin. "'),
            ex=(
                "[2026-03-08 12:29:18 TP0] Capture target decode CUDA graph begin. backend=full, "
                "num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=100.21 GB",
                "[2026-03-08 12:29:18 TP2] Capture target prefill CUDA graph begin. "
                "backend=breakable, num_tokens=[4, 8], avail mem=100.30 GB",
            ),
        ),
    ),
    (
        Phase.CUDA_GRAPH,
        _p(
            r"Capture (?:target|draft) prefill CUDA graph end\.",
            S(f"sglang:{_CG}:374", 'f"Capture {capture_name} CUDA graph end. "'),
            ex="[2026-03-08 12:29:18 TP0] Capture target prefill CUDA graph end. elapsed=1.02 s, "
            "mem usage=0.09 GB, avail mem=100.21 GB.",
        ),
    ),
    (
        Phase.CUDA_GRAPH,
        _p(
            r"Capturing (?:batches|num tokens) \(",
            S(
                "sglang:srt/model_executor/runner/decode_cuda_graph_runner.py:904",
                'f"Capturing batches ({bs=} {avail_mem=:.2f} GB)"',
            ),
            S(
                "sglang:srt/model_executor/runner/prefill_cuda_graph_runner.py:1327",
                'f"Capturing num tokens ({num_tokens=} {avail_mem=:.2f} GB)"',
            ),
            ex="  0%|          | 0/36 [00:00<?, ?it/s]\rCapturing batches (bs=256 avail_mem=99.80 "
            "GB):   0%|          | 0/36 [00:00<?, ?it/s]",
        ),
    ),
    (
        Phase.CUDA_GRAPH,
        _p(
            r"Capture cuda graph (?:begin|bs)\b",
            S("sglang@0.4.6:srt/model_executor/model_runner.py:965", "Capture cuda graph begin."),
            ex="[2025-03-27 21:33:31 TP0] Capture cuda graph begin. This can take up to several "
            "minutes. avail mem=12.41 GB",
        ),
    ),
    (
        Phase.KV_CACHE,
        _p(
            r"KV Cache is allocated\.",
            S(
                "sglang:srt/mem_cache/memory_pool.py:1670",
                'else "KV Cache"',
                'f"{cache_name} is allocated. dtype: {self.dtype}, "',
            ),
            S("sglang@0.4.6:srt/mem_cache/memory_pool.py:243", "KV Cache is allocated. #tokens: "),
            ex=(
                "[2026-03-08 12:29:18 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: "
                "163840, K size: 2.50 GB, V size: 2.50 GB",
                "[2025-03-27 21:33:31 TP0] KV Cache is allocated. #tokens: 1290355, K size: 38.46 "
                "GB, V size: 38.46 GB",
            ),
        ),
    ),
    (
        Phase.KV_CACHE,
        _p(
            r"Memory pool end\.",
            S("sglang:srt/mem_cache/kv_cache_configurator.py:258", 'f"Memory pool end. "'),
            ex="[2024-12-13 01:44:59 TP0] Memory pool end. avail mem=2.44 GB",
        ),
    ),
    (
        Phase.KV_CACHE,
        _p(
            r"Mamba Cache is allocated\.",
            S("sglang:srt/mem_cache/memory_pool.py:789", 'f"Mamba Cache is allocated. "'),
            ex="[2026-03-08 12:29:18 TP0] Mamba Cache is allocated. max_mamba_cache_size: 656, "
            "conv_state size: 0.56GB, ssm_state size: 15.57GB ",
        ),
    ),
    (
        Phase.WEIGHTS_LOADED,
        _p(
            r"Load weight end\.",
            S("sglang:srt/model_executor/model_runner.py:1100", 'f"Load weight end. "'),
            ex="[2026-03-08 12:29:18 TP1] Load weight end. elapsed=2.91 s, type=LlamaForCausalLM, "
            "avail mem=109.80 GB, mem usage=0.12 GB.",
        ),
    ),
    (
        Phase.WEIGHTS_LOADING,
        _p(
            r"Load weight begin\.",
            S("sglang:srt/model_executor/model_runner.py:1012", 'f"Load weight begin. avail mem='),
            ex="[2025-10-17 02:45:09 TP7] Load weight begin. avail mem=77.95 GB",
        ),
    ),
    (
        Phase.WEIGHTS_LOADING,
        _p(
            r"(?:Multi-thread loading shards|Loading safetensors checkpoint shards): ",
            S("sglang:srt/model_loader/weight_utils.py:1088", 'desc="Multi-thread loading shards"'),
            S(
                "sglang:srt/model_loader/weight_utils.py:982",
                'desc="Loading safetensors checkpoint shards"',
            ),
            ex="Multi-thread loading shards:   0% Completed | 0/2 [00:00<?, ?it/s]",
        ),
    ),
    (
        Phase.NCCL_READY,
        _p(
            r"Init torch distributed ends\.",
            S("sglang:srt/distributed/bootstrap.py:127", 'f"Init torch distributed ends. elapsed='),
            ex="[2026-03-25 16:44:54 TP1] Init torch distributed ends. elapsed=0.37 s, mem usage="
            "0.88 GB",
        ),
    ),
    # Every reason the custom all-reduce gives up (the cross-node one on Sparks);
    # "Custom allreduce is disabled ..." is the older releases' wording.
    (
        Phase.NCCL_READY,
        _p(
            r"CustomAll[Rr]educe(?:V2)? is disabled|Custom (?:quick )?allreduce is disabled",
            S(
                f"sglang:{_CA}:482",
                'f"{cls_name} is disabled because this process group" " spans across nodes."',
            ),
            S(
                "sglang:srt/distributed/device_communicators/custom_all_reduce.py:91",
                'cls_name="CustomAllreduce"',
            ),
            S(f"sglang:{_CA}:514", 'f"{cls_name} is disabled because it\'s not supported on"'),
            S(
                "sglang:srt/distributed/device_communicators/quick_all_reduce.py:100",
                '"Custom quick allreduce is disabled because "',
            ),
            S(
                "sglang@0.4.6:srt/distributed/device_communicators/custom_all_reduce.py:187",
                '"Custom allreduce is disabled because this process group"',
            ),
            ex=(
                "[2026-03-08 12:29:15 TP1] CustomAllreduce is disabled because this process group "
                "spans across nodes.",
                "[2025-04-01 09:58:02 TP0] Custom allreduce is disabled because this process group "
                "spans across nodes.",
            ),
        ),
    ),
    (
        Phase.NCCL_READY,
        _p(
            r"- Init COMPLETE",
            S("nccl:src/init.cc:1598@v2.28.9-1"),
            ex="node01:322:322 [3] NCCL INFO ncclCommInitRank comm 0x55f5be32f460 rank 3 nranks 16 "
            "cudaDev 3 nvmlDev 3 busId 5a000 commId 0x4e2671c9674e940d - Init COMPLETE",
        ),
    ),
    (
        Phase.DIST_INIT,
        _p(
            r"Init torch distributed begin\.",
            S(
                "sglang:srt/distributed/bootstrap.py:62",
                'logger.info("Init torch distributed begin.")',
            ),
            ex="[2026-07-14 07:49:04 TP3 EP3] Init torch distributed begin.",
        ),
    ),
    (
        Phase.DIST_INIT,
        _p(
            r"sglang is using nccl==",
            S(
                "sglang:srt/distributed/device_communicators/pynccl.py:84",
                '"sglang is using nccl==%s"',
            ),
            ex="[2026-07-14 07:49:05 TP0 EP0] sglang is using nccl==2.28.9",
        ),
    ),
    (
        Phase.DIST_INIT,
        _p(
            r"NCCL INFO Bootstrap ?: Using",
            S("nccl:src/bootstrap.cc:121@v2.28.9-1"),
            ex=(
                "bm-220ab4v:175:175 [0] NCCL INFO Bootstrap: Using bond0:172.16.0.124<0>",
                "node5:236:236 [2] NCCL INFO Bootstrap : Using bond0:10.0.0.3<0>",
            ),
        ),
    ),
    (
        Phase.DIST_INIT,
        _p(
            r"\[Gloo\] Rank \d+ is connected to",
            S("gloo:gloo/rendezvous/context.cc (Context::connectFullMesh)"),
            ex="[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks "  # noqa: E501 - the real text, whole
            "is : 3",
        ),
    ),
    (
        Phase.STARTING,
        _p(
            r"server_args=ServerArgs\(",
            S("sglang:srt/entrypoints/engine.py:1059", 'logger.info(f"{server_args=}")'),
            S("sglang:srt/server_args.py:438", "@dataclasses.dataclass"),
            ex="[2026-03-08 12:29:13] server_args=ServerArgs(model_path='/var/lib/sparkctl/models/"
            "current', tokenizer_path='/var/lib/sparkctl/models/current', tokenizer_mode='auto')",
        ),
    ),
)

# Lines that end start-up without a signature of their own (the signature, if
# any, is on a nearby line: the exception at the end of the traceback).
_GENERIC_FAILURES: tuple[Pattern, ...] = (
    _p(
        r"Received sigquit from a child process",
        S(
            "sglang:srt/entrypoints/engine.py:1651",
            '"Received sigquit from a child process. It usually means the child failed."',
        ),
        ex="[2025-04-21 10:02:11] Received sigquit from a child process. It usually means the "
        "child failed.",
    ),
    _p(
        r"SIGQUIT received\. .*It usually means one child failed",
        S(
            "sglang:srt/managers/tokenizer_manager.py:3755",
            'f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed."',
        ),
        ex="[2026-03-08 14:00:05] SIGQUIT received. signum=None, frame=None. It usually means "
        "one child failed.",
    ),
    _p(
        r"\bDistBackendError\b",
        S("torch:torch/distributed/distributed_c10d.py (DistBackendError)"),
        ex="torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:268, unhandled system error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.21.5",
    ),
    _p(
        r"\bnccl(?:System|Internal|InvalidUsage|Unhandled\w*)Error\b",
        S("torch:torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclErrorDetailStr)"),
        ex="ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error.",
    ),
    _p(
        r"RuntimeError: NCCL error",
        S(
            "sglang:srt/distributed/device_communicators/pynccl_wrapper.py:461",
            'raise RuntimeError(f"NCCL error: {error_str}")',
        ),
        ex="RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for "
        "details)",
    ),
)


# ------------------------------------------------------------- signatures
@dataclass(frozen=True)
class _Rule:
    id: str
    title: str
    explanation: str
    fix: str
    patterns: tuple[Pattern, ...] = ()
    fatal: bool = True

    def signature(self, line: str = "", rank: int | None = None) -> Signature:
        return Signature(self.id, self.title, self.explanation, self.fix, line, rank, self.fatal)

    def matches(self, line: str) -> bool:
        return any(p.search(line) for p in self.patterns)


def _rule(
    id_: str, title: str, explanation: str, fix: str, *patterns: Pattern, fatal: bool = True
) -> _Rule:
    return _Rule(id_, title, " ".join(explanation.split()), " ".join(fix.split()), patterns, fatal)


_FABRIC_IFNAME = (
    "sparkctl writes NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME from the inventory's "
    "`nccl_socket_ifname` (nccl role, default `fabric_a_netdev`) into /etc/sparkctl/nccl.env, "
    "and from `fabric_a_netdev` into /etc/sparkctl/sglang.env; a per-node value goes in "
    "`nccl_env_overrides`."
)
_FIREWALL = (
    "the sparkctl nftables table (`nft list table inet sparkctl`) must accept the fabric "
    "subnets (`sglang_firewall_fabric_cidrs`) on the rendezvous ports and the ephemeral range "
    "(`sglang_firewall_fabric_ports`, 32768-60999)"
)
_NCCL_SOCKET = "nccl:src/misc/socket.cc"

_RULES: tuple[_Rule, ...] = (
    _rule(
        "host_ip_hang",
        "Start-up hangs after NCCL init: SGLang's cross-node message queue is off the fabric",
        """NCCL and Gloo came up ('CustomAllreduce is disabled because this process group spans
        across nodes.') but 'Init torch distributed ends' never follows. Next the TP group's
        message queue connects every rank to TP0's address, which TP0 takes from
        get_local_ip_auto(): SGLANG_HOST_IP if set, else the default route's source address,
        which on a Spark is the management NIC or Wi-Fi, not the ConnectX-7 fabric
        (sglang srt/distributed/device_communicators/shm_broadcast.py:196). The other ranks
        cannot reach it and every rank waits in MessageQueue.wait_until_ready() without a
        timeout or a log line (MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks #3, fixed by PR #9).
        A c10d timeout after NCCL was up is the same hang ending at --dist-timeout.""",
        """Set SGLANG_HOST_IP to each node's own fabric address; the one that decides is the
        head's (TP0 binds the queue there). sparkctl writes it from the per-host inventory
        variable `fabric_a_ip` into /etc/sparkctl/sglang.env (sglang role): check `grep
        SGLANG_HOST_IP /etc/sparkctl/sglang.env` on the head and that the address is on
        `fabric_a_netdev` (`ip -4 addr show dev <fabric_a_netdev>`). Correct `fabric_a_ip` (or
        set SGLANG_HOST_IP in that host's `sglang_env_extra`), re-run `sparkctl provision`, and
        check the fabric with `sparkctl validate`.""",
        # Only a stack dump shows where it waits (faulthandler, py-spy).
        _p(
            r'shm_broadcast\.py", line \d+,? in wait_until_ready',
            S(
                "sglang:srt/distributed/device_communicators/shm_broadcast.py:314",
                "def wait_until_ready(self):",
            ),
            ex='  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/'
            'device_communicators/shm_broadcast.py", line 344 in wait_until_ready',
        ),
    ),
    _rule(
        "gloo_connect_full_mesh",
        "Gloo connectFullMesh failed: Gloo is not on the fabric interface",
        """torch's Gloo groups (SGLang's CPU-side coordination) could not connect every rank
        to every other. Without GLOO_SOCKET_IFNAME, Gloo binds the address the hostname
        resolves to, often 127.0.0.1 or the management NIC, and the other nodes cannot reach
        it (sglang #3226; 'Gloo defaults to loopback ... Fix: GLOO_SOCKET_IFNAME' on 2x DGX
        Spark, al-engr.com).""",
        f"""Set GLOO_SOCKET_IFNAME to the fabric interface on every node. {_FABRIC_IFNAME}
        GLOO_SOCKET_IFNAME takes one interface name, not an NCCL list such as ^lo,docker. If
        it is already right: {_FIREWALL}; then run `sparkctl validate`.""",
        _p(
            r"Gloo connectFullMesh failed",
            S("torch:torch/csrc/distributed/c10d/ProcessGroupGloo.cpp"),
            S("issue:sgl-project/sglang#3226"),
            ex="[rank10]:[E130 18:11:34.707542570 ProcessGroupGloo.cpp:143] Gloo connectFullMesh "
            "failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        ),
    ),
    _rule(
        "gloo_no_address",
        "Gloo cannot find an address on GLOO_SOCKET_IFNAME",
        """GLOO_SOCKET_IFNAME names an interface that does not exist or has no IPv4 address on
        this node, or an NCCL-style list (^lo,...) that Gloo does not understand
        (aws-samples/aws-do-eks #51).""",
        f"""GLOO_SOCKET_IFNAME must be the one fabric netdev that carries this node's
        `fabric_a_ip`. {_FABRIC_IFNAME} Check `ip -4 addr show dev <fabric_a_netdev>`; if the
        address is missing, `sparkctl provision` configures the fabric.""",
        _p(
            r"Unable to find address for: ",
            S("gloo:gloo/transport/tcp/device.cc:84"),
            S("issue:aws-samples/aws-do-eks#51"),
            ex="ifa != nullptr. Unable to find address for: ^lo",
        ),
    ),
    _rule(
        "gloo_loopback",
        "Gloo fell back to the loopback address",
        """torch could not resolve this node's hostname to a local address and bound Gloo to
        127.0.0.1; the other nodes will then connect to their own loopback and Gloo
        connectFullMesh fails (wtdcode/vllm-backport #14, aws-samples/aws-do-eks #50).""",
        f"""Set GLOO_SOCKET_IFNAME to the fabric interface on every node. {_FABRIC_IFNAME}""",
        _p(
            r"Unable to resolve hostname to a \(local\) address",
            S("torch:torch/csrc/distributed/c10d/ProcessGroupGloo.cpp"),
            S("issue:wtdcode/vllm-backport#14"),
            ex="[rank7]:[W806 14:25:27.650991133 ProcessGroupGloo.cpp:524] Warning: Unable to "
            "resolve hostname to a (local) address. Using the loopback address as fallback. "
            "Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. "
            "(function operator())",
        ),
        fatal=False,
    ),
    _rule(
        "nccl_no_interface",
        "NCCL found no socket interface to bootstrap on",
        """NCCL_SOCKET_IFNAME matches no interface with an address on this node (a typo, an
        interface that is down, or the '=' exact-match prefix some builds ignore: NVIDIA/nccl
        #1837, marin-community/marin #6940).""",
        f"""NCCL_SOCKET_IFNAME must name the fabric netdev, up and carrying `fabric_a_ip`.
        {_FABRIC_IFNAME} Check `ip -4 addr show dev <fabric_a_netdev>` on the node and run
        `sparkctl provision` if the fabric is not configured.""",
        _p(
            r"Bootstrap : no (?:NCCL_SOCKET_IFNAME )?(?:socket )?interface found",
            S("nccl:src/bootstrap.cc:114@v2.28.9-1"),
            ex="spark-2:4242:4242 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface "
            "found",
        ),
        _p(
            r"NET/Socket : no interface found",
            S("nccl:src/transport/net_socket.cc:60@v2.28.9-1"),
            ex="spark-2:4242:4242 [0] transport/net_socket.cc:60 NCCL WARN NET/Socket : no "
            "interface found",
        ),
        _p(
            r"is neither AF_INET\(2\) nor AF_INET6\(10\)",
            S("nccl:src/misc/socket.cc:819@v2.28.9-1"),
            S("issue:NVIDIA/nccl#1837"),
            ex="[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither "
            "AF_INET(2) nor AF_INET6(10)",
        ),
    ),
    _rule(
        "nccl_connect_retrying",
        "NCCL cannot connect to a peer yet and is retrying",
        """NCCL retries a refused, unreachable or timed-out socket connect 34 times, sleeping
        n x 100 ms (about a minute, NCCL_SOCKET_RETRY_CNT / NCCL_SOCKET_RETRY_SLEEP_MSEC)
        before it gives up. 'No route to host' means the socket interface cannot reach the
        peer's address (wrong NCCL_SOCKET_IFNAME); 'Connection refused' that nothing listens
        there yet or a firewall rejects (hiyouga/LlamaFactory #8045).""",
        f"""If it does not clear: NCCL_SOCKET_IFNAME must be the fabric netdev on every node.
        {_FABRIC_IFNAME} Also {_FIREWALL}.""",
        _p(
            r"socket\w*Connect: connect (?:to \S+ )?returned .*retrying",
            S(f"{_NCCL_SOCKET}:587@v2.28.9-1"),
            S("issue:hiyouga/LlamaFactory#8045"),
            ex=(
                "spark-1:4242:4250 [0] NCCL INFO socketPollConnect: connect to "
                "192.168.100.12<41234> returned Connection refused, retrying (3/34) after sleep "
                "for 300 msec",
                "NCCL INFO socketPollConnect: connect returned No route to host, retrying "
                "(26/34) after sleep for 2600 msec",
            ),
        ),
        fatal=False,
    ),
    _rule(
        "nccl_no_route",
        "NCCL: No route to host (wrong socket interface)",
        """NCCL's bootstrap connection left through an interface that has no route to the
        peer's address: NCCL_SOCKET_IFNAME is unset or names the wrong interface, or the
        peer's fabric address is not in this node's fabric subnet (sglang #3820;
        hkproj/pytorch-transformer-distributed #1, fixed by NCCL_SOCKET_IFNAME).""",
        f"""Set NCCL_SOCKET_IFNAME to the fabric interface on every node. {_FABRIC_IFNAME}
        Every node's `fabric_a_ip` must be on that interface, inside `fabric_a_subnet`. Then
        run `sparkctl validate` (its NCCL test uses the same environment).""",
        _p(
            r"socket\w*Connect: [Cc]onnect to .*No route to host",
            S(f"{_NCCL_SOCKET}:582@v2.28.9-1"),
            S("issue:sgl-project/sglang#3820"),
            ex=(
                "spark-1:4242:4250 [0] misc/socket.cc:582 NCCL WARN socketPollConnect: connect "
                "to 192.168.100.12<41234> returned No route to host, exceeded error retry count "
                "after 35 attempts",
                "NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> returned 113(No route "
                "to host) errno 115(Operation now in progress)",
            ),
        ),
    ),
    _rule(
        "nccl_connect_failed",
        "NCCL could not connect to a peer",
        """A socket connect between ranks failed for good: 'Connection refused' after every
        retry means nothing listens on that port (the peer died, or a firewall rejects);
        'Connection timed out' or 'Software caused connection abort' means packets are
        dropped on the way (sglang #5594).""",
        f"""Look at the peer rank's log first. Then: {_FIREWALL}; NCCL_SOCKET_IFNAME must be
        the fabric netdev ({_FABRIC_IFNAME}); test the links with `sparkctl validate`.""",
        _p(
            r"socket\w*Connect: [Cc]onnect to \S+ (?:returned .*exceeded error retry count|"
            r"returned \d+\(|failed)",
            S(f"{_NCCL_SOCKET}:582@v2.28.9-1"),
            S(f"{_NCCL_SOCKET}:596@v2.28.9-1"),
            S("issue:sgl-project/sglang#5594"),
            ex=(
                "NCCL WARN socketStartConnect: Connect to 10.0.0.82<38455> failed : Software "
                "caused connection abort",
                "spark-1:4242:4250 [0] misc/socket.cc:582 NCCL WARN socketPollConnect: connect "
                "to 192.168.100.12<41234> returned Connection refused, exceeded error retry "
                "count after 35 attempts",
            ),
        ),
    ),
    _rule(
        "rendezvous_incomplete",
        "Not every rank joined the rendezvous",
        """The head waited --dist-timeout at --dist-init-addr and only some of the --nnodes
        ranks arrived (torch's TCPStore; sglang #507: '1/4 clients joined'): the others were
        not started, failed early, or cannot reach the head.""",
        f"""Look at the missing ranks' journals (`journalctl -u sparkctl-sglang.service`) for
        their own error. Every host in the `sparks` group must run the unit; the workers must
        reach the head's `fabric_a_ip` on `sglang_dist_port`: {_FIREWALL}. `sparkctl
        validate` tests the fabric; `sglang_dist_timeout` sets how long the head waits.""",
        _p(
            r"waiting for clients\. \d+/\d+ clients joined",
            S("torch:torch/csrc/distributed/c10d/TCPStore.cpp (TCPStore::waitForWorkers)"),
            S("issue:sgl-project/sglang#507"),
            ex="torch.distributed.DistStoreError: Timed out after 601 seconds waiting for "
            "clients. 1/4 clients joined.",
        ),
    ),
    _rule(
        "address_not_local",
        "An address the server binds is not this node's",
        """A bind failed with 'Cannot assign requested address' (EADDRNOTAVAIL): the address
        is not configured on this node. It is the head's --dist-init-addr (the head's
        `fabric_a_ip`), SGLANG_HOST_IP (the message queue's ZeroMQ bind on TP0, this node's
        `fabric_a_ip`; sglang #4877) or --host.""",
        """Check that `ip -4 addr show dev <fabric_a_netdev>` carries this node's `fabric_a_ip`
        (`sparkctl provision` configures the fabric) and that the inventory gives each host
        its own `fabric_a_ip`; the HTTP address is `sglang_host` on the head and
        `sglang_worker_host` elsewhere.""",
        _p(
            r"[Cc]annot assign requested address",
            S("linux:strerror(EADDRNOTAVAIL)"),
            S("issue:sgl-project/sglang#4877"),
            ex="(APIServer pid=396) zmq.error.ZMQError: Cannot assign requested address "
            "(addr='tcp://10.27.91.102:13345')",
        ),
    ),
    _rule(
        "port_in_use",
        "A port the server needs is already in use",
        """Another process holds the port: the HTTP port (uvicorn's '[Errno 98] error while
        attempting to bind') or, on the head, the rendezvous port (torch's 'The server socket
        has failed to bind ... Address already in use'). Usually a previous server is still
        running.""",
        """Find the holder with `ss -ltnp 'sport = :<port>'` (a previous sparkctl-sglang.service,
        a leftover container in `docker ps`) and stop it, or choose another `sglang_port`
        (HTTP, default 30000) or `sglang_dist_port` (rendezvous, default 50000; the head also
        uses the ports just above it) in the inventory.""",
        _p(
            r"[Aa]ddress already in use",
            S("linux:strerror(EADDRINUSE)"),
            S("uvicorn:uvicorn/server.py (Server.startup)"),
            S("torch:torch/csrc/distributed/c10d/socket.cpp (SocketListenOp)"),
            ex="ERROR (uvicorn.error):  [Errno 98] error while attempting to bind on address "
            "('0.0.0.0', 7878): address already in use",
        ),
    ),
    _rule(
        "launcher_secrets",
        "The server got no API key: its secrets file did not reach it",
        """sparkctl's launcher (the unit's command, inside the container with the container
        method) reads SGLANG_API_KEY from the secrets file and stops when the file is not
        there or holds no key. In the container it sees only what the unit mounts: a unit that
        does not mount the file (or hands the key to docker's own environment, which docker
        never passes on) gets here on every rank.""",
        """`sparkctl provision` writes the file (`sglang_secrets_file`, root's and readable by
        `sglang_user`'s group) and the unit that mounts it read-only; check `ls -l
        /etc/sparkctl/sglang-secrets.env` and that ExecStart of sparkctl-sglang.service has
        `--volume /etc/sparkctl/sglang-secrets.env:...:ro` (`systemctl cat
        sparkctl-sglang.service`); no drop-in may replace ExecStart.""",
        _p(
            r"sparkctl sglang launcher: (?:cannot read the secrets file|SGLANG_API_KEY is empty)",
            S("sparkctl:roles/sglang/files/sglang_launcher.py (read_key)"),
            ex="sparkctl sglang launcher: cannot read the secrets file "
            "/etc/sparkctl/sglang-secrets.env: No such file or directory",
        ),
    ),
    _rule(
        "image_missing",
        "The pinned image is not on this node",
        """The unit runs the image by its digest with --pull never (a start never downloads
        tens of GB by surprise), and docker does not have it: provision pulls it, and someone
        removed it since (docker image prune / rmi), or this node was never provisioned with
        this digest.""",
        """Run `sparkctl provision` (it pulls the pinned digest where it is missing; `-t
        sglang` is enough), then `sparkctl serve up`; check with `docker image inspect
        <sglang_image>@<digest>` on the node.""",
        _p(
            r"Error response from daemon: No such image: ",
            S("docker:moby daemon/errors.go (errNotFound, No such image: %s)"),
            ex="docker: Error response from daemon: No such image: "
            "lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:835d68f665a2c49804ca899216ea6a5a05"
            "4661d8ab77e5a9b6f5c4cf4d1d6fae.",
        ),
    ),
    _rule(
        "gpu_runtime",
        "docker cannot give the container the GPU",
        """`docker run --gpus all` needs the NVIDIA container runtime: without it dockerd finds
        no device driver for the GPU capability; with it but the driver not loaded, its hook
        fails in NVML (NVIDIA/nvidia-container-toolkit #230, #260). On a Spark the driver is
        missing after a kernel update without the matching nvidia module package.""",
        """Check `nvidia-smi` on the node (`sparkctl validate` checks gpu and cuda): load or
        reinstall the driver for the running kernel; DGX OS ships the NVIDIA container toolkit
        (`nvidia-ctk runtime configure --runtime=docker` and a docker restart if it was
        removed).""",
        _p(
            r'could not select device driver "" with capabilities: \[\[gpu\]\]',
            S("docker:moby daemon/devices.go (errConflictingDeviceDriver)"),
            S("issue:NVIDIA/nvidia-container-toolkit#230"),
            ex='docker: Error response from daemon: could not select device driver "" with '
            "capabilities: [[gpu]].",
        ),
        _p(
            r"nvidia-container-cli: initialization error: nvml error: driver not loaded",
            S("issue:NVIDIA/nvidia-container-toolkit#260"),
            ex="nvidia-container-cli: initialization error: nvml error: driver not loaded: "
            "unknown.",
        ),
    ),
    _rule(
        "rdma_device_missing",
        "The RoCE devices are not on this node",
        """The unit passes /dev/infiniband to the container so that NCCL can use RDMA, and
        the node has no such directory: the RDMA drivers (mlx5_ib, ib_uverbs) are not
        loaded, or the ConnectX-7 is not up.""",
        """Check `ibdev2netdev` and `ls /dev/infiniband` on the node and run `sparkctl
        validate` (roce_device); load the modules (`modprobe mlx5_ib ib_uverbs`) or reboot
        after a driver update, then `sparkctl serve up`.""",
        _p(
            r'error gathering device information while adding custom device "/dev/infiniband"',
            S("docker:moby daemon/oci_linux.go (devicesFromPath)"),
            ex="docker: Error response from daemon: error gathering device information while "
            'adding custom device "/dev/infiniband": no such file or directory.',
        ),
    ),
    _rule(
        "model_not_found",
        "The model is not on this node",
        """`--model-path` is not a local model directory: SGLang (transformers) then takes it
        for a Hugging Face repo id ('Repo id must be in the form ...') or tries to download
        it, which the unit's HF_HUB_OFFLINE=1 forbids; or its config.json is damaged.""",
        """The path is `sglang_model_path` (default /var/lib/sparkctl/models/current). Copy the
        model to every node with `sparkctl model sync` and check `ls
        <sglang_model_path>/config.json` on each.""",
        _p(
            r"HFValidationError: Repo id must be in the form",
            S("huggingface_hub:src/huggingface_hub/utils/_validators.py (validate_repo_id)"),
            ex="huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' "
            "or 'namespace/repo_name': '~/models/deepseek-llm-7b-chat'. Use `repo_type` "
            "argument if needed.",
        ),
        _p(
            r"We couldn't connect to 'https://huggingface\.co'",
            S("transformers:src/transformers/utils/hub.py (cached_files)"),
            ex="OSError: We couldn't connect to 'https://huggingface.co' to load this file, "
            "couldn't find it in the cached files and it looks like Qwen/Qwen3-8B is not the "
            "path to a directory containing a file named config.json.",
        ),
        _p(
            r"is not a valid JSON file",
            S("transformers:src/transformers/configuration_utils.py (_dict_from_json_file)"),
            ex="OSError: It looks like the config file at '/var/lib/sparkctl/models/current/"
            "config.json' is not a valid JSON file.",
        ),
    ),
    _rule(
        "launch_args",
        "SGLang refused its command line",
        """A flag does not exist in the installed SGLang, is misspelt (SGLang's flags use
        dashes: --reasoning-parser, not --reasoning_parser; sglang #12818) or has a bad value,
        or the topology is inconsistent (--tp not a multiple of --nnodes).""",
        """Extra flags come from `sglang_extra_args` (one list item per word): check them
        against `python3 -m sglang.launch_server --help` of the pinned `sglang_version` /
        `sglang_image`. The topology comes from `node_rank` (per host), `sglang_nnodes` and
        `sglang_tp_size`: `sparkctl inventory check`.""",
        _p(
            r"error: unrecognized arguments",
            S("python:Lib/argparse.py (ArgumentParser.parse_args)"),
            ex="sglang serve: error: unrecognized arguments: --reasoning_parser kimi_k2",
        ),
        _p(
            r"sglang serve: error: ",
            S("sglang:srt/server_args.py:9355", 'argparse.ArgumentParser(prog="sglang serve")'),
            ex="sglang serve: error: argument --port: invalid int value: 'x'",
        ),
        _p(
            r"launch_server\.py: error: ",
            S("sglang@0.4.6:srt/server_args.py:1259", "parser = argparse.ArgumentParser()"),
            S("issue:sgl-project/sglang#12818"),
            ex="launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2",
        ),
        _p(
            r"tp_size must be divisible by number of nodes",
            S("sglang:srt/server_args.py:8704", '"tp_size must be divisible by number of nodes"'),
            ex="AssertionError: tp_size must be divisible by number of nodes",
        ),
    ),
    _rule(
        "kv_cache_no_memory",
        "No memory left for the KV cache",
        """After the weights are loaded there is no room for the KV cache at this
        --mem-fraction-static. SGLang sizes the cache as total memory x fraction minus what
        is used, so its message says to *increase* the fraction (sglang #4330; gpustack
        #3831). On a Spark the 128 GB are shared with the OS and every other process.""",
        """Raise `--mem-fraction-static` with `sglang_mem_fraction_static` (0.75 on a Spark by
        default, e.g. 0.8), or shrink what the cache must hold (`--context-length`,
        `--max-running-requests` in `sglang_extra_args`), or serve a smaller / more quantised
        model; free unified memory on the node (other processes, a crashed container that
        kept its memory).""",
        _p(
            r"Not enough memory\. Please try to increase --mem-fraction-static",
            S(
                "sglang:srt/model_executor/pool_configurator.py:64",
                '"Not enough memory. Please try to increase --mem-fraction-static."',
            ),
            ex="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.2",
        ),
    ),
    _rule(
        "cuda_oom",
        "CUDA out of memory",
        """An allocation failed: the static pool (weights + KV cache, --mem-fraction-static)
        left too little for activations or CUDA graph capture (sglang #5285: 'Capture cuda
        graph failed: CUDA out of memory'), or a running batch outgrew the pool ('Prefill/
        Decode out of memory'). On a Spark the GPU shares its 128 GB with the OS and every
        other process on the node.""",
        """Lower the static reservation: set `sglang_mem_fraction_static` (`--mem-fraction-static`)
        below the one in the log's server_args (e.g. 0.7); during CUDA graph capture also add
        `--cuda-graph-max-bs-decode` (e.g. 16) or, as a last resort,
        `--cuda-graph-backend-decode=disabled` to `sglang_extra_args`; cap
        `--max-running-requests` / `--context-length` there. Stop other memory users on the
        node.""",
        _p(
            r"CUDA out of memory",
            S("torch:c10/cuda/CUDACachingAllocator.cpp"),
            ex="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 "
            "has a total capacity of 119.70 GiB",
        ),
        _p(
            r"\bOutOfMemoryError\b",
            S("torch:torch/cuda/memory.py (torch.OutOfMemoryError)"),
            ex="torch.OutOfMemoryError: CUDA out of memory.",
        ),
        _p(
            r"Capture cuda graph failed",
            S(
                "sglang:srt/model_executor/runner/decode_cuda_graph_runner.py:418",
                'f"Capture cuda graph failed: {e}\\n"',
            ),
            ex="Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate "
            "448.00 MiB. GPU 7 has a total capacity of 95.00",
        ),
        _p(
            r"(?:Prefill|Decode) out of memory\. Try to lower your batch size",
            S(
                "sglang:srt/mem_cache/allocation.py:240",
                'f"Prefill out of memory. Try to lower your batch size.\\n"',
            ),
            S(
                "sglang:srt/mem_cache/allocation.py:527",
                'f"Decode out of memory. Try to lower your batch size.\\n"',
            ),
            ex="RuntimeError: Decode out of memory. Try to lower your batch size.",
        ),
    ),
    _rule(
        "scheduler_killed",
        "A scheduler process was killed during start-up (on a Spark: the OOM killer)",
        """The rank's scheduler process died without a Python error; exit code -9 is SIGKILL,
        which on a Spark's unified memory is usually the kernel's OOM killer taking the
        largest process when weights, KV cache and the OS do not fit (SGLang's own hint:
        `dmesg -T | grep -i oom`).""",
        """Check `dmesg -T | grep -i oom` on the node. Lower `--mem-fraction-static` with
        `sglang_mem_fraction_static` (a 4-Spark deployment lost engines at 0.85 of memory and
        runs 0.75: MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks #115), cap `--context-length` /
        `--max-running-requests` in `sglang_extra_args`, or serve a smaller model; stop other
        memory users (leftover containers: `docker ps`).""",
        _p(
            r"scheduler died during initialization",
            S(
                "sglang:srt/entrypoints/engine.py:1681",
                'f"Rank {rank} scheduler died during initialization "',
            ),
            S("issue:MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks#3"),
            ex="RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If "
            "exit code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | "
            "grep -i oom` to check.",
        ),
    ),
    _rule(
        "memory_unbalanced",
        "Free memory differs between the ranks",
        """One rank has noticeably less free memory than the others: something else holds
        memory on that node (sglang #1533). On a Spark a crashed or hard-stopped container
        can keep its unified memory after it exits, so the next start fails with this
        (al-engr.com, 2x DGX Spark). The pinned release stops the rank with a RuntimeError
        when a rank has less than 0.9 of the memory the local ranks report:
        SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK is true by default, and only set false does
        the release merely warn.""",
        """On the node with less free memory, stop leftover servers and containers
        (`systemctl status sparkctl-sglang.service`, `docker ps`) and other memory users;
        reboot it if the memory does not come back; then `sparkctl serve up` again. Only if
        the difference is known and harmless, SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK set to
        "false" in `sglang_env_extra` turns the stop into a warning.""",
        _p(
            r"The memory capacity is unbalanced",
            S("sglang:srt/distributed/bootstrap.py:264", '"The memory capacity is unbalanced. '),
            S(
                "sglang:srt/distributed/bootstrap.py:268",
                "if envs.SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK.get():",
                "raise RuntimeError(msg)",
            ),
            S(
                "sglang:srt/environ.py:368",
                "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK = EnvBool(True)",
            ),
            ex="The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
        ),
    ),
    _rule(
        "unbalanced_loading",
        "Other ranks did not finish loading the weights",
        """This rank loaded its weights, but the others did not reach the barrier within 480 s
        (dist_barrier_after_load): another rank failed (often out of memory) or is slow,
        e.g. reading the model from a slow disk (sglang #4503, kvcache-ai/ktransformers
        #1666).""",
        """Look at the other ranks' logs for their own error. Keep the model on local disk of
        every node (`sparkctl model sync`, `sglang_model_path`) and check free memory there.""",
        _p(
            r"other ranks that didn't finish loading",
            S(
                "sglang:srt/model_executor/model_runner_components/load_model_utils.py:335",
                "but there are other ranks that didn't finish loading.",
            ),
            ex="ValueError: TP rank 1 could finish the model loading, but there are other ranks "
            "that didn't finish loading. It is likely due to unexpected failures (e.g., OOM) "
            "or a slow node.",
        ),
    ),
    _rule(
        "peer_lost",
        "A peer rank went away (process exit or network error)",
        """A collective lost a peer: another rank exited, or the fabric link between them
        dropped (NCCL 'remote process exited or there was a network error', 'Connection
        closed by remote peer'; Gloo's 'Connection closed by peer' and monitoredBarrier naming
        the faulty rank, sglang #5602), or a forward pass stopped for --watchdog-timeout.""",
        """Look at the other ranks' logs first and fix their error. If every rank was healthy,
        test the links with `sparkctl validate` (link speed, MTU, RoCE).""",
        _p(
            r"\bncclRemoteError\b",
            S("torch:torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclErrorDetailStr)"),
            ex="ncclRemoteError: A call failed possibly due to a network error or a remote "
            "process exiting prematurely.",
        ),
        _p(
            r"remote process exited or there was a network error",
            S("nccl:src/init.cc:2691@v2.28.9-1"),
            ex="RuntimeError: NCCL error: remote process exited or there was a network error",
        ),
        _p(
            r"Connection closed by (?:remote )?peer",
            S(f"{_NCCL_SOCKET}:71@v2.28.9-1"),
            S("gloo:gloo/transport/tcp/pair.cc (Pair::read)"),
            ex=(
                "spark-1:4242:4250 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection "
                "closed by remote peer spark-2<41234>",
                "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                "Connection closed by peer [10.0.1.9]:45459",
            ),
        ),
        _p(
            r"received errors while waiting for send/recv from rank",
            S("torch:torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier)"),
            S("issue:sgl-project/sglang#5602"),
            ex="Rank 3 successfully reached monitoredBarrier, but received errors while waiting "
            "for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
        ),
        _p(
            r"Scheduler watchdog timeout",
            S("sglang:srt/utils/watchdog.py:154", 'f"{self.debug_name} watchdog timeout "'),
            S(
                "sglang:srt/managers/scheduler_components/invariant_checker.py:482",
                'debug_name="Scheduler"',
            ),
            ex="[2026-03-08 14:00:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
            "self.soft=False)",
        ),
    ),
    _rule(
        "warmup_failed",
        "The server's warm-up request failed",
        """TP0 serves HTTP, but its own warm-up request (GET /model_info, then POST /generate)
        failed (sglang #2468: a 502 to the warm-up request): the request did not reach the
        server (an HTTP proxy from http_proxy/https_proxy answered), or the tensor-parallel
        group could not finish a forward pass because a rank or a link is down. The release
        then kills the server.""",
        """Look at the other ranks' logs for an error. Keep proxies out of the unit's
        environment or put 127.0.0.1,localhost in NO_PROXY through `sglang_env_extra`; test
        the links with `sparkctl validate`.""",
        _p(
            r"Initialization failed\. warmup error",
            S(f"sglang:{_HTTP}:2324", 'f"Initialization failed. warmup error: {last_traceback}"'),
            S(f"sglang:{_HTTP}:2185", 'f"Initialization failed. warmup error: {last_traceback}"'),
            ex="[2024-12-13 01:47:34] Initialization failed. warmup error: Traceback (most recent "
            "call last):",
        ),
    ),
    _rule(
        "health_check_failed",
        "/health did not get a token in time",
        """The health check's one-token generation did not come back within
        SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default): the server is busy with a long prefill,
        or the tensor-parallel group is stuck.""",
        """If another rank logged an error, fix that. If the server is only busy, raise
        SGLANG_HEALTH_CHECK_TIMEOUT through `sglang_env_extra`.""",
        _p(
            r"Health check failed\. Server couldn't get a response from detokenizer",
            S(
                f"sglang:{_HTTP}:714",
                'f"Health check failed. Server couldn\'t get a response from detokenizer for last "',  # noqa: E501 - the real text, whole
            ),
            ex="[2026-03-08 14:00:00] Health check failed. Server couldn't get a response from "
            "detokenizer for last 20 seconds. tic start time: 13:59:40. last_heartbeat time: "
            "13:59:12",
        ),
        fatal=False,
    ),
    _rule(
        "dist_init_unreachable",
        "This rank cannot reach the rendezvous (--dist-init-addr)",
        """torch.distributed gave up connecting to the TCPStore at --dist-init-addr (the
        head's `fabric_a_ip`:`sglang_dist_port`), or lost it: the head is not running or
        failed, the address is not reachable from this node, or a firewall drops the packets
        (sglang #2561; hpcaitech/Open-Sora #667).""",
        f"""Check that the head's unit runs and printed 'Init torch distributed begin.', and
        that this node reaches the head's `fabric_a_ip` over the fabric (`sparkctl
        validate`). Also: {_FIREWALL}.""",
        _p(
            r"\[c10d\] The client socket has timed out after|DistNetworkError: The client socket "
            r"has timed out after",
            S("torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::throwTimeoutError)"),
            S("issue:sgl-project/sglang#2561"),
            ex="[E1226 15:44:25.497183572 socket.cpp:1011] [c10d] The client socket has timed out "
            "after 600000ms while trying to connect to (sws-8h100grid-05, 8000).",
        ),
        _p(
            r"The client socket has failed to connect to any network address",
            S("torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::run)"),
            ex="[E socket.cpp:753] [c10d] The client socket has failed to connect to any network "
            "address of (6841231, 47389).",
        ),
        _p(
            r"TCP client failed to connect/validate to host \S+ - timed out",
            S("torch:torch/csrc/distributed/c10d/TCPStore.cpp (TCPClient::connect)"),
            ex="[E1226 15:54:25.497497753 TCPStore.cpp:358] [c10d] TCP client failed to "
            "connect/validate to host sws-8h100grid-05:8000 - timed out (try=1, "
            "timeout=600000ms): The client socket has timed out after 600000ms",
        ),
        _p(
            r"DistNetworkError: [Ff]ailed to recv",
            S("torch:torch/csrc/distributed/c10d/Utils.hpp (recvBytes)"),
            ex="torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was "
            "likely closed. Did the remote server shutdown or crash?",
        ),
        _p(
            r"\[c10d\] waitForInput: .*timed out after",
            S("torch:torch/csrc/distributed/c10d/socket.cpp (SocketImpl::waitForInput)"),
            S("issue:sgl-project/sglang#7478"),
            ex="[rank0]:[E623 15:37:03.781413227 socket.cpp:460] [c10d] waitForInput: poll for "
            "socket SocketImpl(fd=56, addr=[::ffff:10.0.0.1]:41234) returned 0, likely a "
            "timeout, timed out after 1800000ms",
        ),
    ),
    _rule(
        "dist_init_retrying",
        "This rank cannot reach the rendezvous yet and is retrying",
        """torch.distributed keeps retrying the TCPStore at --dist-init-addr. A refused
        connect is retried without a word while the head starts (workers start first); this
        warning is printed for other errors (no route, timed out), a problem if it goes on.""",
        f"""If it does not clear: the head must be running; this node must reach the head's
        `fabric_a_ip` on `sglang_dist_port` over the fabric; {_FIREWALL}.""",
        _p(
            r"\[c10d\] The client socket has failed to connect to \[",
            S("torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::tryConnect)"),
            S("issue:hpcaitech/Open-Sora#667"),
            ex="[W socket.cpp:697] [c10d] The client socket has failed to connect to "
            "[::ffff:0.104.99.143]:47389 (errno: 110 - Connection timed out).",
        ),
        _p(
            r"\[c10d\] The client socket has failed to connect to \d",
            S("torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::tryConnect)"),
            ex="[W socket.cpp:697] [c10d] The client socket has failed to connect to "
            "0.104.99.143:47389 (errno: 110 - Connection timed out).",
        ),
        _p(
            r"TCP client failed to connect/validate to host \S+ - retrying",
            S("torch:torch/csrc/distributed/c10d/TCPStore.cpp (TCPClient::connect)"),
            ex="[W1226 15:44:25.497497753 TCPStore.cpp:358] [c10d] TCP client failed to "
            "connect/validate to host sws-8h100grid-05:8000 - retrying (try=0, timeout="
            "600000ms, delay=82879ms)",
        ),
        fatal=False,
    ),
    # Last, so that a specific error on the same line wins; the traceback's last
    # line, a few lines below, names the cause.
    _rule(
        "scheduler_exception",
        "A rank's scheduler raised during start-up",
        """The scheduler process (distributed init, weight loading, memory pool, CUDA graphs)
        raised an exception; SGLang logs the traceback, SIGQUITs its main process, and the
        rank is killed (exit by SIGKILL). The cause is the traceback's last line, in the
        rank's log right below; a known one is named as well.""",
        """Read the last line of the traceback in `sparkctl serve logs <inventory> <node>` (or
        `journalctl -u sparkctl-sglang.service` on the node) and fix that; if it is a network
        error, also look at the other ranks' logs and run `sparkctl validate`.""",
        _p(
            r"Scheduler hit an exception",
            S(
                "sglang:srt/managers/scheduler.py:4951",
                'logger.error(f"Scheduler hit an exception: {traceback}")',
            ),
            ex="[2025-01-30 18:11:34 TP10] Scheduler hit an exception: Traceback (most recent "
            "call last):",
        ),
    ),
    _rule(
        "rdma_register_failed",
        "NCCL cannot register memory for RDMA",
        """ibv_reg_mr failed with ENOMEM: the process may lock too little memory (a container
        without --ulimit memlock=-1: NVIDIA/nccl-tests #206, 8192 KiB), or, on DGX OS's HWE
        kernel 7.0 (7.0.0-1019-nvidia), Kexec HandOver leaves no CMA for the registration even
        with unlimited memlock; /proc/meminfo then shows CmaTotal: 0 kB with a CmaFree above it
        (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark #259, luxingcom/aicad-nccl-optimization
        #1).""",
        """Check `ulimit -l` inside the container (the unit passes `--ulimit memlock=-1` and
        LimitMEMLOCK=infinity) and `grep Cma /proc/meminfo` on the node; on kernel 7.0 boot with
        the kernel parameter kho=off, or the 6.17 kernel, then `sparkctl validate` and `sparkctl
        serve up`.""",
        _p(
            r"Call to ibv_reg_mr\w* failed with error Cannot allocate memory",
            S("nccl:src/misc/ibvwrap.cc:40@v2.28.3-1"),
            S("issue:NVIDIA/nccl-tests#206"),
            S("issue:MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259"),
            ex="spark-1:4242:4250 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 "
            "failed with error Cannot allocate memory",
        ),
    ),
    _rule(
        "rdma_completion_error",
        "RDMA work requests fail between the nodes (GID index or MTU)",
        """The ConnectX-7s cannot complete RoCE transfers with each other: status 12 is a retry
        timeout ('the NICs can't talk to each other using RoCE', NVIDIA/nccl #426). On Sparks
        the causes are a GID index that does not point at the twin's IPv4 RoCE v2 GID (the table
        can be reshuffled by interface events), or a twin whose MTU differs from its peer's (a
        firmware update reset one NIC to 1500).""",
        """Let NCCL use the index sparkctl detects (`nccl_ib_gid_index: auto`), run `sparkctl
        provision` so it is detected again, and `sparkctl validate` (roce_device, twin_mtu and the
        full-MTU mesh pings name the twin).""",
        _p(
            r"NET/IB ?: Got completion (?:from peer \S+ )?with (?:error|status=)\s*\d+",
            S("nccl:src/transport/net_ib.cc:2470@v2.28.3-1"),
            S("issue:NVIDIA/nccl#426"),
            ex=(
                "spark-2:4242:4260 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got "
                "completion with error 12, opcode 1, len 0, vendor err 129",
                "spark-2:4242:4260 [0] transport/net_ib.cc:2470 NCCL WARN NET/IB: Got completion "
                "from peer 192.168.100.12<45678> with status=12 opcode=0 len=0 vendor err 129 "
                "(Send) hca rocep1s0f1",
            ),
        ),
    ),
)

_HANG_RULES: dict[str, _Rule] = {
    r.id: r
    for r in (
        _rule(
            "dist_init_hang",
            "Start-up stalls at the distributed rendezvous",
            """The rank has not got past torch.distributed init: it waits for all --nnodes ranks
        at --dist-init-addr (the head's `fabric_a_ip`:`sglang_dist_port`; a refused connect
        is retried without a log line), or for Gloo/NCCL connections that are being dropped.
        Typical causes: a rank not started or already failed, the head's address unreachable
        from a node, a firewall, or NCCL/Gloo on an interface that cannot reach the others
        (sglang #958: 'stopped at Init nccl begin').""",
            f"""Check that every rank printed 'Init torch distributed begin.' and look at the ones
        that did not. NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME must be the fabric netdev
        ({_FABRIC_IFNAME}); {_FIREWALL}. `sparkctl validate` tests the fabric between all
        nodes.""",
        ),
        _rule(
            "cuda_graph_hang",
            "CUDA graph capture does not finish",
            """No progress since 'Capture target ... CUDA graph begin': multi-node CUDA graph
        capture can deadlock on an NCCL collective inside the graph; on 2x DGX Spark both
        nodes sat at 0/36 batch sizes after 34 minutes, GPUs spinning (al-engr.com, SGLang
        v0.5.12, citing sglang #19991). The capture bar is TP0's only and reaches the journal
        when it ends.""",
            """Capture fewer batch sizes with a smaller `--cuda-graph-max-bs-decode`, or disable
        the capture: add `--cuda-graph-backend-decode=disabled` (and
        `--cuda-graph-backend-prefill=disabled`) to `sglang_extra_args` (the same report found
        the SGLANG_DISABLE_CUDA_GRAPH environment variable had no effect).""",
        ),
    )
}

# ------------------------------------------------------------ NCCL transport
#: NCCL's own lines that say which network a communicator uses (NCCL_DEBUG=INFO).
TRANSPORT_PATTERNS: Mapping[str, tuple[Pattern, ...]] = MappingProxyType(
    {
        "ib": (
            _p(
                r"NCCL INFO Using network IB\b",
                S("nccl:src/init.cc:428@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO Using network IB",
            ),
            _p(
                r"NCCL INFO Assigned NET plugin IB to comm",
                S("nccl:src/plugin/net.cc:244@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO Assigned NET plugin IB to comm",
            ),
            _p(
                r"NCCL INFO Channel \d+(?:/\d+)? : .* via NET/IB/",
                S("nccl:src/transport/net.cc:313@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via "
                "NET/IB/0/GDRDMA",
            ),
        ),
        "socket": (
            _p(
                r"NCCL INFO Using network Socket\b",
                S("nccl:src/init.cc:428@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO Using network Socket",
            ),
            _p(
                r"NCCL INFO Assigned NET plugin Socket to comm",
                S("nccl:src/plugin/net.cc:244@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO Assigned NET plugin Socket to comm",
            ),
            _p(
                r"NCCL INFO Channel \d+(?:/\d+)? : .* via NET/Socket/",
                S("nccl:src/transport/net.cc:313@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via "
                "NET/Socket/0",
            ),
            # No RDMA device at all: NCCL falls back to sockets.
            _p(
                r"NCCL INFO NET/IB : No device found\.",
                S("nccl:src/transport/net_ib.cc:826@v2.28.9-1"),
                ex="spark-1:4242:4242 [0] NCCL INFO NET/IB : No device found.",
            ),
        ),
    }
)

_TRANSPORT_RULE = _rule(
    "nccl_socket_transport",
    "NCCL moves the data over TCP sockets, not RDMA",
    """NCCL's INFO lines show the Socket transport ('Using network Socket', 'via NET/Socket',
    or 'NET/IB : No device found.'): the ConnectX-7 RoCE devices were not usable, so
    all-reduces go over TCP at a fraction of the 200 Gb/s. Causes: NCCL_IB_HCA names devices
    that do not exist or are down, the RDMA stack is missing in the container (no
    /dev/infiniband, no libibverbs), or the GID index does not match the fabric address.""",
    """Check the devices on every node with `ibv_devinfo` and `sparkctl validate` (RoCE, GID
    index); the NCCL environment comes from the nccl role (`nccl_ib_hca`, `nccl_ib_gid_index`
    in /etc/sparkctl/nccl.env); the container method must pass /dev/infiniband and run with
    LimitMEMLOCK=infinity; then `sparkctl provision` and `sparkctl serve up` again.""",
)

_BY_ID: dict[str, _Rule] = {r.id: r for r in (*_RULES, *_HANG_RULES.values(), _TRANSPORT_RULE)}

#: Every signature this module can report, by id (``line`` and ``rank`` empty).
SIGNATURES: Mapping[str, Signature] = MappingProxyType(
    {id_: rule.signature() for id_, rule in _BY_ID.items()}
)

#: Every pattern with what it stands for: a phase's value, a signature id, ``failure``
#: (ends start-up without a signature) or ``transport:ib`` / ``transport:socket``.
# Which NCCL the rank's process loaded (the image's own, not the host build validate
# measures). SGLang's own line on TP0 at start-up, at any NCCL_DEBUG (pynccl.py:
# ncclGetRawVersion as x.y.z); NCCL's banner at NCCL_DEBUG=INFO, once per process:
# src/init.cc's showVersion prints VERSION_STRING, "NCCL version " MAJOR.MINOR.PATCH
# SUFFIX "+cuda" CUDA_MAJOR.CUDA_MINOR; and torch's NCCL errors end with ", NCCL
# version X.Y.Z" (the library loaded at run time). Group 1 is the version as printed.
NCCL_VERSION_PATTERNS: tuple[Pattern, ...] = (
    _p(
        r"\bsglang is using nccl==(\d+\.\d+\.\d+)",
        S(
            "sglang:srt/distributed/device_communicators/pynccl.py:84",
            'logger.info("sglang is using nccl==%s", self.nccl.ncclGetVersion())',
        ),
        # tests/fixtures/sglang (see SOURCES.md)
        ex="[2025-09-03 18:32:29 TP0] sglang is using nccl==2.27.3",
    ),
    _p(
        r"NCCL INFO NCCL version (\d+\.\d+\.\d+\S*)",
        S("nccl:src/init.cc:583@v2.28.3-1"),
        S("nccl:src/init.cc:603@v2.28.9-1"),
        ex=(
            # tests/fixtures/sglang/hang_at_dist_init_sglang30609.log
            "bm-220ab4v:175:175 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
            "spark-1:4242:4242 [0] NCCL INFO NCCL version 2.28.3+cuda13.0",
        ),
    ),
    _p(
        r"\bNCCL error\b.*, NCCL version (\d+\.\d+\.\d+)\b",
        S("torch:torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclVersion)"),
        # tests/fixtures/sglang/nccl_no_route_hkproj1.log
        ex="torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1333, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.18.6",
    ),
)

PATTERNS: tuple[tuple[str, Pattern], ...] = (
    *((phase.value, p) for phase, p in _PHASE_PATTERNS),
    *(("failure", p) for p in _GENERIC_FAILURES),
    *((rule.id, p) for rule in _RULES for p in rule.patterns),
    *((f"transport:{kind}", p) for kind, ps in TRANSPORT_PATTERNS.items() for p in ps),
    *(("nccl_version", p) for p in NCCL_VERSION_PATTERNS),
)

#: Seconds without progress after which :func:`hang_signature` calls a phase a hang.
#: STARTING covers imports and tokenizer loading (a minute or two on a Spark);
#: the rendezvous and NCCL init take seconds once every rank is up; after
#: NCCL is ready 'Init torch distributed ends' follows at once; CUDA graph
#: capture takes minutes for the default batch sizes.
HANG_AFTER: Mapping[Phase, float] = MappingProxyType(
    {
        Phase.STARTING: 600.0,
        Phase.DIST_INIT: 300.0,
        Phase.NCCL_READY: 120.0,
        Phase.CUDA_GRAPH: 900.0,
    }
)
_HANG_ID = {
    Phase.STARTING: "dist_init_hang",
    Phase.DIST_INIT: "dist_init_hang",
    Phase.NCCL_READY: "host_ip_hang",
    Phase.CUDA_GRAPH: "cuda_graph_hang",
}

_RANK = re.compile(r"^\[[^\]]*\bTP(\d+)\b|^\[rank(\d+)\]")


def rank_of(line: str) -> int | None:
    """The TP rank a line names in its prefix (``[... TP3]``, ``[rank3]:``), else None."""
    m = _RANK.search(line)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


def _rule_for(line: str) -> _Rule | None:
    for rule in _RULES:
        if rule.matches(line):
            return rule
    return None


def phase_of(line: str) -> Phase | None:
    """The phase a log line announces; ``FAILED`` for a line that ends start-up.

    Warnings (a :class:`Signature` with ``fatal=False``) and ordinary lines,
    e.g. ``NCCL INFO`` chatter or the deprecated-endpoint warning, announce
    nothing and give None.
    """
    rule = _rule_for(line)
    if (rule is not None and rule.fatal) or any(p.search(line) for p in _GENERIC_FAILURES):
        return Phase.FAILED
    for phase, pattern in _PHASE_PATTERNS:
        if pattern.search(line):
            return phase
    return None


def _transport_of(line: str) -> str | None:
    for kind, patterns in TRANSPORT_PATTERNS.items():
        if any(p.search(line) for p in patterns):
            return kind
    return None


def nccl_version(line: str) -> str | None:
    """The NCCL version a log line says the process loaded ("2.28.3+cuda13.0"), or None."""
    for pattern in NCCL_VERSION_PATTERNS:
        m = pattern.compiled.search(line)
        if m is not None:
            return m.group(1)
    return None


def nccl_transport(lines: Iterable[str]) -> str | None:
    """The network NCCL uses, from its INFO lines: ``'socket'`` if any line shows the Socket
    transport (or no IB device), else ``'ib'`` if one shows IB, else None (NCCL_DEBUG below
    INFO, or a line of neither kind). One socket communicator is enough to call it sockets:
    where RDMA is expected, it is the one that makes the group slow."""
    seen: set[str] = set()
    for line in lines:
        kind = _transport_of(line)
        if kind:
            seen.add(kind)
    if "socket" in seen:
        return "socket"
    return "ib" if "ib" in seen else None


def transport_signature(
    transport: str | None, *, expected: str = "ib", rank: int | None = None, line: str = ""
) -> Signature | None:
    """``nccl_socket_transport`` when NCCL uses sockets where ``expected`` is ``'ib'``."""
    if expected == "ib" and transport == "socket":
        return _TRANSPORT_RULE.signature(line, rank)
    return None


@dataclass
class RankLog:
    """One rank's log as it streams in: its phase, the signatures seen so far, and the NCCL
    transport its INFO lines showed.

    Feeding lines one at a time gives the same answer as :func:`match` over
    the whole log, including what only context can tell: a c10d timeout after
    NCCL was up is the message-queue hang (``host_ip_hang``), not an
    unreachable rendezvous.
    """

    rank: int | None = None
    phase: Phase = Phase.STARTING  # furthest phase, FAILED included
    progress: Phase = Phase.STARTING  # furthest phase short of FAILED
    milestones: list[Phase] = field(default_factory=list)
    signatures: list[Signature] = field(default_factory=list)
    transport: str | None = None  # as nccl_transport() over the lines fed so far
    nccl: str | None = None  # the NCCL version the lines name (nccl_version())

    def feed(self, line: str) -> list[Signature]:
        """Take one line; return the signatures it adds (new ids only)."""
        line = line.rstrip("\r\n")
        kind = _transport_of(line)
        if kind and self.transport != "socket":
            self.transport = kind
        version = nccl_version(line)
        # The first version named; NCCL's banner adds its build ("+cuda13.0") to SGLang's.
        if version and (self.nccl is None or version.startswith(f"{self.nccl}+")):
            self.nccl = version
        phase = phase_of(line)
        rule = _rule_for(line)
        if (
            rule is not None
            and rule.id == "dist_init_unreachable"
            and self.progress >= Phase.NCCL_READY
        ):
            rule = _BY_ID["host_ip_hang"]
        if phase is not None and (not self.milestones or phase > self.milestones[-1]):
            self.milestones.append(phase)
        if phase is not None and phase > self.phase:
            self.phase = phase
        if phase is not None and phase is not Phase.FAILED and phase > self.progress:
            self.progress = phase
        if rule is None or any(s.id == rule.id for s in self.signatures):
            return []
        sig = rule.signature(line, self.rank if self.rank is not None else rank_of(line))
        self.signatures.append(sig)
        return [sig]


def match(lines: Iterable[str], *, rank: int | None = None) -> list[Signature]:
    """Every known signature in ``lines``, once per id, with the first line that showed it.

    In order of first appearance. ``rank`` labels every signature; without it
    the rank is read from each line's ``[... TPn]`` prefix where there is one.
    """
    log = RankLog(rank=rank)
    for line in lines:
        log.feed(line)
    return log.signatures


def furthest_phase(lines: Iterable[str]) -> Phase:
    """How far a rank got: the highest phase announced (``STARTING`` if none)."""
    log = RankLog()
    for line in lines:
        log.feed(line)
    return log.phase


def milestones(lines: Iterable[str]) -> list[Phase]:
    """The phases a rank reached, in the order it first reached each new furthest one."""
    log = RankLog()
    for line in lines:
        log.feed(line)
    return log.milestones


def hang_signature(
    last_phase: Phase, seconds: float, *, rank: int | None = None, line: str = ""
) -> Signature | None:
    """What a rank that has made no progress for ``seconds`` in ``last_phase`` is stuck on.

    Before or at the rendezvous (``STARTING``, ``DIST_INIT``): the dist-init
    address, port or firewall. After NCCL init succeeded (``NCCL_READY``):
    the ``SGLANG_HOST_IP`` message-queue hang. During CUDA graph capture: the
    multi-node capture deadlock. None while the wait is still plausible
    (:data:`HANG_AFTER`), and for phases where waiting is normal (a rank other
    than TP0 rests at ``ENGINE_READY``; large models load for long).
    ``line`` is the rank's last log line, kept in the signature.
    """
    limit = HANG_AFTER.get(last_phase)
    if limit is None or seconds < limit:
        return None
    rule = _BY_ID[_HANG_ID[last_phase]]
    where = f"No progress for {seconds:.0f} s in phase {last_phase.value}. "
    return replace(rule.signature(line, rank), explanation=where + rule.explanation)
