"""Read an SGLang rank's start-up log: how far it got, and what went wrong.

``sparkctl serve up`` follows every rank's journal
(``journalctl -u sparkctl-sglang.service -o cat -f``) while the
tensor-parallel group starts. Each line may announce a start-up
:class:`Phase` (:func:`phase_of`) and may carry a known failure
:class:`Signature` (:func:`match`): what it means and what to change, in
sparkctl's terms (inventory variables, environment variables, commands).
A rank that stops making progress is diagnosed by :func:`hang_signature`
from the phase it is stuck in, because the worst multi-node failure prints
nothing at all: with ``SGLANG_HOST_IP`` off the fabric, start-up hangs
after NCCL init succeeded, for ever.

Every pattern here was taken from real logs, not guessed; the fixtures in
``tests/fixtures/sglang`` hold the excerpts and ``SOURCES.md`` says where
each one comes from (SGLang, NCCL and PyTorch issues, SGLang's source, and
reports from DGX Spark pairs). The lab's SGLang stand-in
(``sparkctl/lab/standins/sglang``) prints the same lines, plus a few
of its own that are matched here too (noted where they are).

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
    Worker ranks (node rank > 0) end at ``KV_CACHE`` or ``ENGINE_READY``: only
    rank 0 serves HTTP.
    """

    STARTING = "starting"  # server_args logged; imports, tokenizer, config
    DIST_INIT = "dist_init"  # "Init torch distributed begin.": rendezvous, Gloo, NCCL
    NCCL_READY = "nccl_ready"  # NCCL communicator up ("Init COMPLETE", custom allreduce off)
    WEIGHTS_LOADING = "weights_loading"  # "Load weight begin."
    WEIGHTS_LOADED = "weights_loaded"  # "Load weight end."
    KV_CACHE = "kv_cache"  # "KV Cache is allocated.", "Memory pool end."
    CUDA_GRAPH = "cuda_graph"  # "Capture cuda graph begin." (capture in progress)
    ENGINE_READY = "engine_ready"  # "Capture cuda graph end.", "max_total_num_tokens="
    HTTP_READY = "http_ready"  # "Uvicorn running on ..." (rank 0)
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
    themselves (e.g. c10d retrying to reach the rendezvous).
    """

    id: str
    title: str
    explanation: str
    fix: str
    line: str = ""
    rank: int | None = None
    fatal: bool = True


# ------------------------------------------------------------------ phases
_PHASE_PATTERNS: tuple[tuple[Phase, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(pattern)) for phase, pattern in (
        (Phase.READY, r"The server is fired up and ready to roll"),
        (Phase.HTTP_READY, r"Uvicorn running on "),
        (Phase.ENGINE_READY, r"Capture cuda graph end\b|\bmax_total_num_tokens="),
        (Phase.CUDA_GRAPH, r"Capture cuda graph (?:begin|bs)\b|Capturing batches \("),
        (Phase.KV_CACHE, r"KV Cache is allocated\.|Memory pool end\.|Mamba Cache is allocated\."),
        (Phase.WEIGHTS_LOADED, r"Load weight end\."),
        (Phase.WEIGHTS_LOADING, r"Load weight begin\.|Loading safetensors checkpoint shards"),
        (Phase.NCCL_READY, r"Init torch distributed ends\.|Custom (?:quick )?allreduce is "
                           r"disabled|- Init COMPLETE"),
        (Phase.DIST_INIT, r"Init torch distributed begin\.|sglang is using nccl==|"
                          r"NCCL INFO Bootstrap ?: Using|\[Gloo\] Rank \d+ is connected to"),
        (Phase.STARTING, r"server_args=ServerArgs\("),
    )
)

# Lines that end start-up without a signature of their own (the signature, if
# any, is on a nearby line: the exception at the end of the traceback).
_GENERIC_FAILURE = re.compile(
    r"Scheduler hit an exception|Received sigquit from a child process|"
    r"Initialization failed\.|scheduler died|\bDistBackendError\b|"
    r"\bnccl(?:System|Internal|InvalidUsage|Unhandled\w*)Error\b|RuntimeError: NCCL error"
)


# ------------------------------------------------------------- signatures
@dataclass(frozen=True)
class _Rule:
    id: str
    title: str
    explanation: str
    fix: str
    patterns: tuple[re.Pattern[str], ...] = ()
    fatal: bool = True

    def signature(self, line: str = "", rank: int | None = None) -> Signature:
        return Signature(self.id, self.title, self.explanation, self.fix, line, rank, self.fatal)

    def matches(self, line: str) -> bool:
        return any(p.search(line) for p in self.patterns)


def _rule(id_: str, title: str, explanation: str, fix: str, *patterns: str,
          fatal: bool = True) -> _Rule:
    return _Rule(id_, title, " ".join(explanation.split()), " ".join(fix.split()),
                 tuple(re.compile(p) for p in patterns), fatal)


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

_RULES: tuple[_Rule, ...] = (
    _rule(
        "host_ip_hang",
        "Start-up hangs after NCCL init: SGLang's cross-node message queue is off the fabric",
        """NCCL and Gloo came up (NCCL 'Init COMPLETE', 'Custom allreduce is disabled because
        this process group spans across nodes.') but 'Init torch distributed ends' never
        follows. Next SGLang opens a ZeroMQ message queue between the nodes at the address
        get_ip() picks: SGLANG_HOST_IP if set, else the default route's source address, which
        on a Spark is the management NIC or Wi-Fi, not the ConnectX-7 fabric. The other ranks
        cannot reach it and every rank waits in MessageQueue.wait_until_ready() without an
        error (MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks #3, fixed by PR #9). A c10d
        timeout after NCCL was up is the same hang ending at --dist-timeout.""",
        """Set SGLANG_HOST_IP on every node to that node's own fabric address. sparkctl writes
        it from the per-host inventory variable `fabric_a_ip` into /etc/sparkctl/sglang.env
        (sglang role): check `grep SGLANG_HOST_IP /etc/sparkctl/sglang.env` on each node and
        that the address is on `fabric_a_netdev` (`ip -4 addr show dev <fabric_a_netdev>`).
        Correct `fabric_a_ip` (or set SGLANG_HOST_IP in that host's `sglang_env_extra`),
        re-run `sparkctl provision`, and check the fabric with `sparkctl validate`.""",
        # The lab's stand-in ends this hang at --dist-timeout with its own message; the real
        # server prints nothing (see hang_signature).
        r"MessageQueue\.wait_until_ready",
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
        r"Gloo connectFullMesh failed",
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
        r"Unable to find address for: ",
    ),
    _rule(
        "gloo_loopback",
        "Gloo fell back to the loopback address",
        """torch could not resolve this node's hostname to a local address and bound Gloo to
        127.0.0.1; the other nodes will then connect to their own loopback and Gloo
        connectFullMesh fails (wtdcode/vllm-backport #14, aws-samples/aws-do-eks #50).""",
        f"""Set GLOO_SOCKET_IFNAME to the fabric interface on every node. {_FABRIC_IFNAME}""",
        r"Unable to resolve hostname to a \(local\) address",
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
        r"Bootstrap : no (?:NCCL_SOCKET_IFNAME )?(?:socket )?interface found",
        r"is neither AF_INET\(2\) nor AF_INET6\(10\)",
    ),
    _rule(
        "nccl_connect_retrying",
        "NCCL cannot connect to a peer yet and is retrying",
        """NCCL retries a failed socket connect (34 times, about a minute) before it gives up.
        'No route to host' means the socket interface cannot reach the peer's address (wrong
        NCCL_SOCKET_IFNAME); 'Connection refused' that nothing listens there yet or a firewall
        rejects (hiyouga/LlamaFactory #8045).""",
        f"""If it does not clear: NCCL_SOCKET_IFNAME must be the fabric netdev on every node.
        {_FABRIC_IFNAME} Also {_FIREWALL}.""",
        r"socket\w*Connect: connect returned .*retrying",
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
        r"socket\w*Connect: Connect to .*No route to host",
    ),
    _rule(
        "nccl_connect_failed",
        "NCCL could not connect to a peer",
        """A socket connect between ranks failed: 'Connection refused' means nothing listens
        on that port (the peer died, or a firewall rejects); 'Connection timed out' or
        'Software caused connection abort' means packets are dropped on the way (sglang
        #5594).""",
        f"""Look at the peer rank's log first. Then: {_FIREWALL}; NCCL_SOCKET_IFNAME must be
        the fabric netdev ({_FABRIC_IFNAME}); test the links with `sparkctl validate`.""",
        r"socket\w*Connect: Connect to \S+ (?:returned|failed)",
        # the lab's stand-in, on a worker whose NCCL peer never connected
        r"no connection from rank 0 within --dist-timeout",
    ),
    _rule(
        "rendezvous_incomplete",
        "Not every rank joined the rendezvous",
        """The head waited --dist-timeout at --dist-init-addr and only some of the --nnodes
        ranks arrived (sglang #507: '1/4 clients joined'): the others were not started,
        failed early, or cannot reach the head.""",
        f"""Look at the missing ranks' journals (`journalctl -u sparkctl-sglang.service`) for
        their own error. Every host in the `sparks` group must run the unit; the workers must
        reach the head's `fabric_a_ip` on `sglang_dist_port`: {_FIREWALL}. `sparkctl
        validate` tests the fabric; `sglang_dist_timeout` sets how long the head waits.""",
        r"waiting for clients\. \d+/\d+ clients joined",
        r"DistStoreError: \d+/\d+ clients joined",
    ),
    _rule(
        "rank_mismatch",
        "The head refused a rank (different topology or model)",
        """The lab's stand-in checks what real SGLang leaves to fail later: a rank whose
        --nnodes/--tp, node rank or model config.json differ from the head's is refused.""",
        """Every node must run the same `sglang_tp_size` and `sglang_nnodes` and the same model
        (`sparkctl model sync`), with a unique `node_rank` per host; `sparkctl inventory
        check`, then `sparkctl provision`.""",
        r"DistStoreError: the head refused this rank",
    ),
    _rule(
        "rank_rejected",
        "The head rejected a rank that tried to join",
        """The lab's stand-in logs this on the head when a rank with a different topology or
        model tries to join; the head keeps waiting for the right one.""",
        """Every node must run the same `sglang_tp_size` and `sglang_nnodes` and the same model
        (`sparkctl model sync`), with a unique `node_rank` per host.""",
        r"Rejected a rank from ",
        fatal=False,
    ),
    _rule(
        "address_not_local",
        "An address the server binds is not this node's",
        """A bind failed with 'Cannot assign requested address': the address is not configured
        on this node. It is the head's --dist-init-addr (the head's `fabric_a_ip`),
        SGLANG_HOST_IP (ZeroMQ, this node's `fabric_a_ip`; sglang #4877) or --host.""",
        """Check that `ip -4 addr show dev <fabric_a_netdev>` carries this node's `fabric_a_ip`
        (`sparkctl provision` configures the fabric) and that the inventory gives each host
        its own `fabric_a_ip`; the HTTP address is `sglang_host` on the head and
        `sglang_worker_host` elsewhere.""",
        r"[Cc]annot assign requested address",
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
        r"[Aa]ddress already in use",
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
        r"HFValidationError: Repo id must be in the form",
        r"We couldn't connect to 'https://huggingface\.co'",
        r"is not a valid JSON file",
    ),
    _rule(
        "launch_args",
        "SGLang refused its command line",
        """A flag does not exist in the installed SGLang or is misspelt (SGLang's flags use
        dashes: --reasoning-parser, not --reasoning_parser; sglang #12818), or the multi-node
        topology is inconsistent (node rank outside 0..nnodes-1, --tp not a multiple of
        --nnodes, no --dist-init-addr).""",
        """Extra flags come from `sglang_extra_args` (one list item per word): check them
        against `python3 -m sglang.launch_server --help` of the pinned `sglang_version` /
        `sglang_image`. The topology comes from `node_rank` (per host), `sglang_nnodes` and
        `sglang_tp_size`: `sparkctl inventory check`.""",
        r"error: unrecognized arguments",
        r"launch_server\.py: error: ",
        r"please provide --dist-init-addr",
        r"node_rank \d+ is not in \[",
        r"must be divisible by nnodes",
    ),
    _rule(
        "kv_cache_no_memory",
        "No memory left for the KV cache",
        """After the weights are loaded there is no room for the KV cache at this
        --mem-fraction-static. SGLang sizes the cache as total memory x fraction minus what
        is used, so its message says to *increase* the fraction (sglang #4330, PR #23181;
        gpustack #3831). On a Spark the 128 GB are shared with the OS and every other
        process.""",
        """Raise `--mem-fraction-static` through `sglang_extra_args` (e.g. ["--mem-fraction-static",
        "0.85"]), or shrink what the cache must hold (`--context-length`,
        `--max-running-requests`), or serve a smaller / more quantised model; free unified
        memory on the node (other processes, a crashed container that kept its memory).""",
        r"Not enough memory\. Please try to increase --mem-fraction-static",
        r"Not enough memory to allocate KV cache",
    ),
    _rule(
        "cuda_oom",
        "CUDA out of memory",
        """An allocation failed: the static pool (weights + KV cache, --mem-fraction-static)
        left too little for activations or CUDA graph capture (sglang #5285: 'Capture cuda
        graph failed: CUDA out of memory'). On a Spark the GPU shares its 128 GB with the OS
        and every other process on the node.""",
        """Lower the static reservation: add `--mem-fraction-static` with a value below the
        one in the log's server_args (e.g. 0.8) to `sglang_extra_args`; during CUDA graph
        capture also lower `--cuda-graph-max-bs`, or cap `--max-running-requests` /
        `--context-length`. Stop other memory users on the node.""",
        r"CUDA out of memory",
        r"\bOutOfMemoryError\b",
    ),
    _rule(
        "memory_unbalanced",
        "Free memory differs between the ranks",
        """SGLang refuses to start when one rank has noticeably less free memory than the
        others: something else holds memory on that node (sglang #1533). On a Spark a crashed
        or hard-stopped container can keep its unified memory after it exits, so the next
        start fails with this (al-engr.com, 2x DGX Spark).""",
        """On the node with less free memory, stop leftover servers and containers
        (`systemctl status sparkctl-sglang.service`, `docker ps`) and other memory users;
        reboot it if the memory does not come back; then `sparkctl serve up` again.""",
        r"The memory capacity is unbalanced",
    ),
    _rule(
        "unbalanced_loading",
        "Other ranks did not finish loading the weights",
        """This rank loaded its weights, but the others did not reach the barrier in time:
        another rank failed (often out of memory) or is slow, e.g. reading the model from a
        slow disk (sglang #4503, kvcache-ai/ktransformers #1666).""",
        """Look at the other ranks' logs for their own error. Keep the model on local disk of
        every node (`sparkctl model sync`, `sglang_model_path`) and check free memory there.""",
        r"other ranks that didn't finish loading",
        r"rank \d+ did not finish loading",  # the lab's stand-in (its loading barrier)
    ),
    _rule(
        "peer_lost",
        "A peer rank went away (process exit or network error)",
        """A collective lost a peer: another rank exited, or the fabric link between them
        dropped (NCCL 'ncclRemoteError: ... remote process exiting prematurely', 'Connection
        closed by remote peer'; Gloo's monitoredBarrier naming the faulty rank, sglang
        #5602).""",
        """Look at the other ranks' logs first and fix their error. If every rank was healthy,
        test the links with `sparkctl validate` (link speed, MTU, RoCE).""",
        r"\bncclRemoteError\b",
        r"remote process exited or there was a network error",
        r"Connection closed by remote peer",
        r"received errors while waiting for send/recv from rank",
        r"Scheduler watchdog timeout",
    ),
    _rule(
        "warmup_failed",
        "The server's warm-up request failed",
        """Rank 0 serves HTTP, but its own warm-up generation failed (sglang #2468: a 502 to
        the warm-up request): the request did not reach the server (an HTTP proxy from
        http_proxy/https_proxy answered), or the tensor-parallel group could not finish a
        forward pass because a rank or a link is down.""",
        """Look at the other ranks' logs for an error. Keep proxies out of the unit's
        environment or put 127.0.0.1,localhost in NO_PROXY through `sglang_env_extra`; test
        the links with `sparkctl validate`.""",
        r"Initialization failed\. warmup error",
    ),
    _rule(
        "health_check_failed",
        "/health did not get a token in time",
        """The health check's one-token generation did not come back within
        SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default): the server is busy with a long prefill,
        or the tensor-parallel group is stuck (SGLang http_server.py).""",
        """If another rank logged an error, fix that. If the server is only busy, raise
        SGLANG_HEALTH_CHECK_TIMEOUT through `sglang_env_extra`.""",
        r"Health check failed\. Server couldn't get a response from detokenizer",
        fatal=False,
    ),
    _rule(
        "dist_init_unreachable",
        "This rank cannot reach the rendezvous (--dist-init-addr)",
        """torch.distributed gave up connecting to the TCPStore at --dist-init-addr (the
        head's `fabric_a_ip`:`sglang_dist_port`): the head is not running or failed, the
        address is not reachable from this node, or a firewall drops the packets (sglang
        #2561; hpcaitech/Open-Sora #667).""",
        f"""Check that the head's unit runs and printed 'Init torch distributed begin.', and
        that this node reaches the head's `fabric_a_ip` over the fabric (`sparkctl
        validate`). Also: {_FIREWALL}.""",
        r"DistNetworkError: The client socket has timed out",
        r"\[c10d\] The client socket has timed out after",
        r"The client socket has failed to connect to any network address",
        r"TCP client failed to connect/validate to host \S+ - timed out",
        r"DistNetworkError: failed to recv",
        r"\[c10d\] waitForInput: .*timed out after",
    ),
    _rule(
        "dist_init_retrying",
        "This rank cannot reach the rendezvous yet and is retrying",
        """torch.distributed keeps retrying the TCPStore at --dist-init-addr. Normal for a few
        seconds while the head starts (workers start first); a problem if it goes on.""",
        f"""If it does not clear: the head must be running; this node must reach the head's
        `fabric_a_ip` on `sglang_dist_port` over the fabric; {_FIREWALL}.""",
        r"\[c10d\] The client socket has failed to connect to",
        r"TCP client failed to connect/validate to host \S+ - retrying",
        fatal=False,
    ),
)

_HANG_RULES: dict[str, _Rule] = {r.id: r for r in (
    _rule(
        "dist_init_hang",
        "Start-up stalls at the distributed rendezvous",
        """The rank has not got past torch.distributed init: it waits for all --nnodes ranks
        at --dist-init-addr (the head's `fabric_a_ip`:`sglang_dist_port`), or for Gloo/NCCL
        connections that are being dropped. Typical causes: a rank not started or already
        failed, the head's address unreachable from a node, a firewall, or NCCL/Gloo on an
        interface that cannot reach the others (sglang #958: 'stopped at Init nccl begin').""",
        f"""Check that every rank printed 'Init torch distributed begin.' and look at the ones
        that did not. NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME must be the fabric netdev
        ({_FABRIC_IFNAME}); {_FIREWALL}. `sparkctl validate` tests the fabric between all
        nodes.""",
    ),
    _rule(
        "cuda_graph_hang",
        "CUDA graph capture does not finish",
        """No progress since 'Capture cuda graph begin': multi-node CUDA graph capture can
        deadlock on an NCCL collective inside the graph; on 2x DGX Spark both nodes sat at
        0/36 batch sizes after 34 minutes, GPUs spinning (al-engr.com, SGLang v0.5.12, citing
        sglang #19991).""",
        """Add `--disable-cuda-graph` to `sglang_extra_args` (the same report found the
        SGLANG_DISABLE_CUDA_GRAPH environment variable had no effect in v0.5.12), or capture
        fewer batch sizes with a smaller `--cuda-graph-max-bs`.""",
    ),
)}

_BY_ID: dict[str, _Rule] = {r.id: r for r in (*_RULES, *_HANG_RULES.values())}

#: Every signature this module can report, by id (``line`` and ``rank`` empty).
SIGNATURES: Mapping[str, Signature] = MappingProxyType(
    {id_: rule.signature() for id_, rule in _BY_ID.items()})

#: Seconds without progress after which :func:`hang_signature` calls a phase a hang.
#: STARTING covers imports and tokenizer loading (a minute or two on a Spark);
#: the rendezvous and NCCL init take seconds once every rank is up; after
#: NCCL is ready 'Init torch distributed ends' follows at once; CUDA graph
#: capture "can take up to several minutes" (SGLang's own log line).
HANG_AFTER: Mapping[Phase, float] = MappingProxyType({
    Phase.STARTING: 600.0,
    Phase.DIST_INIT: 300.0,
    Phase.NCCL_READY: 120.0,
    Phase.CUDA_GRAPH: 900.0,
})
_HANG_ID = {Phase.STARTING: "dist_init_hang", Phase.DIST_INIT: "dist_init_hang",
            Phase.NCCL_READY: "host_ip_hang", Phase.CUDA_GRAPH: "cuda_graph_hang"}

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
    e.g. ``NCCL INFO`` chatter, announce nothing and give None.
    """
    rule = _rule_for(line)
    if (rule is not None and rule.fatal) or _GENERIC_FAILURE.search(line):
        return Phase.FAILED
    for phase, pattern in _PHASE_PATTERNS:
        if pattern.search(line):
            return phase
    return None


@dataclass
class RankLog:
    """One rank's log as it streams in: its phase and the signatures seen so far.

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

    def feed(self, line: str) -> list[Signature]:
        """Take one line; return the signatures it adds (new ids only)."""
        line = line.rstrip("\r\n")
        phase = phase_of(line)
        rule = _rule_for(line)
        if rule is not None and rule.id == "dist_init_unreachable" \
                and self.progress >= Phase.NCCL_READY:
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


def hang_signature(last_phase: Phase, seconds: float, *, rank: int | None = None,
                   line: str = "") -> Signature | None:
    """What a rank that has made no progress for ``seconds`` in ``last_phase`` is stuck on.

    Before or at the rendezvous (``STARTING``, ``DIST_INIT``): the dist-init
    address, port or firewall. After NCCL init succeeded (``NCCL_READY``):
    the ``SGLANG_HOST_IP`` message-queue hang. During CUDA graph capture: the
    multi-node capture deadlock. None while the wait is still plausible
    (:data:`HANG_AFTER`), and for phases where waiting is normal (a worker
    rank rests at ``KV_CACHE``/``ENGINE_READY``; large models load for long).
    ``line`` is the rank's last log line, kept in the signature.
    """
    limit = HANG_AFTER.get(last_phase)
    if limit is None or seconds < limit:
        return None
    rule = _BY_ID[_HANG_ID[last_phase]]
    where = f"No progress for {seconds:.0f} s in phase {last_phase.value}. "
    return replace(rule.signature(line, rank), explanation=where + rule.explanation)
