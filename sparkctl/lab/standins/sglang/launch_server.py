"""sparkctl's rehearsal-lab stand-in for ``python3 -m sglang.launch_server``.

The lab's simulated Sparks have no GPU. This module takes the real server's
command line and environment and does, over the real fabric, what a
multi-node SGLang start-up does, then serves SGLang's HTTP API with a toy
model whose every token needs every rank:

- argument parsing like SGLang's (argparse over the real flag names; an
  unknown flag ends with ``launch_server.py: error: unrecognized arguments``
  and exit status 2);
- a rendezvous of ``--nnodes`` ranks at ``--dist-init-addr`` (the head
  listens, the others connect and retry until ``--dist-timeout``), then a
  Gloo full mesh on ``GLOO_SOCKET_IFNAME``, NCCL links on
  ``NCCL_SOCKET_IFNAME`` and SGLang's cross-node message queue on
  ``SGLANG_HOST_IP``, each a real TCP connection;
- the model directory must exist on every rank; its config.json (when
  present) gives the architecture, layer count, hidden size and context
  length; weight files are read through;
- on the head, SGLang's endpoints with their response shapes;
- each generated token is a toy tensor-parallel forward pass: per layer the
  head sends a hidden-state-sized vector to every rank and combines their
  partial results (two all-reduces per layer, as Megatron-style TP does), so
  a dead rank or a broken link fails generation and ``/health``; concurrent
  requests share forward passes (continuous batching, up to
  ``--max-running-requests``), so throughput behaves like a bandwidth-bound
  TP group: figures of a toy model, not of SGLang.

Modelled, not real (written where it happens): a node is identified by the
address it reached the rendezvous from, and another node's loopback address
is unreachable from here (a Gloo fallback to 127.0.0.1 fails as it does
between machines); SGLang's message queue is reachable only over the fabric,
so an ``SGLANG_HOST_IP`` that is unset or not an address of
``NCCL_SOCKET_IFNAME`` hangs start-up after NCCL init, as on a real Spark
pair, until ``--dist-timeout`` (the real server hangs for good).

Sources (sgl-project/sglang): flags and defaults ``python/sglang/srt/
server_args.py``; endpoints and status codes ``srt/entrypoints/
http_server.py``; response shapes ``srt/entrypoints/openai/protocol.py`` and
``serving_chat.py``; 401 body ``add_api_key_middleware`` (srt/utils);
metric names docs ``production_metrics``. Log lines are copied from public
SGLang, NCCL and torch logs (issues sglang #3226, #3820; NCCL #1232;
MiaAI-Lab Qwen dual-Spark #3).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import itertools
import json
import os
import queue
import re
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .version import __version__

HEALTH_CHECK_TIMEOUT = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
HOSTNAME = socket.gethostname()
# torch's default process-group timeout, used when --dist-timeout is not given.
DEFAULT_DIST_TIMEOUT = 1800
# NCCL retries a refused or unreachable connect for about this long.
NCCL_CONNECT_RETRY_S = 20.0

# A small fixed vocabulary: tokens are words chosen by hashing, so outputs
# are a deterministic function of the prompt (and of every rank's partial).
_WORDS = """
the a of to and in is for on with as by at from that this it be are was can will
cluster node rank tensor parallel model token fabric switch link port spark memory
unified kernel driver network packet frame route address subnet bridge queue stream
server client request response latency throughput bandwidth gigabit twin device
layer weight bias attention head vector matrix sum reduce gather scatter broadcast
barrier timeout retry error signal start stop ready load save cache page block
time clock second minute hour day light green blue red quiet steady fast slow
river mountain forest field stone cloud rain wind sun moon star sky sea shore
path road bridge tower city market garden house door window table chair book
word line text story answer question reason idea plan test check proof value
"""
VOCAB = tuple(_WORDS.split())
EOS_PERIOD = 48  # one draw in EOS_PERIOD ends a generation without a length cap

_DATA = struct.Struct("!4sBxxxIII")  # magic, op, sequence, layer, payload length
_MAGIC = b"SGL1"
_OP_STEP, _OP_PING, _OP_REPLY = 1, 2, 0x81
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

GLOO_PAIR = "[../third_party/gloo/gloo/transport/tcp/pair.cc:144]"
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B


class Fatal(Exception):
    """Start-up failed; ``lines`` are printed, then the process exits 1."""

    def __init__(self, *lines: str) -> None:
        super().__init__(lines[0] if lines else "fatal")
        self.lines = lines


class Terminated(BaseException):
    """systemd (or a test) asked the process to stop."""


class EngineError(Exception):
    """The tensor-parallel group cannot compute (a rank or a link is gone)."""


# ----------------------------------------------------------------------- logging
_OUT = threading.Lock()


def emit(line: str) -> None:
    """One line to stderr (as Python logging does), flushed for journald."""
    with _OUT:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def log(message: str, tp: int | None = None) -> None:
    """SGLang's format: ``[2025-03-08 12:29:13 TP0] message`` (no TP: the main process)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    emit(f"[{stamp} TP{tp}] {message}" if tp is not None else f"[{stamp}] {message}")


def nccl(level: str, message: str, where: str = "") -> None:
    """NCCL's format: ``host:pid:tid [gpu] [file:line ]NCCL LEVEL message``."""
    emit(f"{HOSTNAME}:{os.getpid()}:{threading.get_native_id()} [0] {where}NCCL {level} {message}")


# ------------------------------------------------------------------------ arguments
def _flag(parser: argparse.ArgumentParser, *flags: str, **kw: Any) -> None:
    parser.add_argument(*flags, **kw)


def build_parser() -> argparse.ArgumentParser:  # noqa: PLR0915 -- one statement per flag
    """SGLang's flags (names, defaults, types) for everything this stand-in accepts."""
    p = argparse.ArgumentParser()
    b = {"action": "store_true"}
    # Model and tokenizer
    _flag(p, "--model-path", "--model", dest="model_path", required=True,
          help="The path of the model weights. This can be a local folder or a Hugging Face "
          "repo ID.")
    _flag(p, "--tokenizer-path", default=None, help="The path of the tokenizer.")
    _flag(p, "--tokenizer-mode", default="auto", choices=["auto", "slow"], help="Tokenizer mode.")
    _flag(p, "--skip-tokenizer-init", **b, help="Skip init tokenizer.")
    _flag(p, "--load-format", default="auto", help="The format of the model weights to load.")
    _flag(p, "--model-loader-extra-config", default="{}", help="Extra config for model loader.")
    _flag(p, "--trust-remote-code", **b, help="Allow custom models defined on the Hub.")
    _flag(p, "--context-length", type=int, default=None, help="The model's maximum context length.")
    _flag(p, "--is-embedding", **b, help="Whether to use a CausalLM as an embedding model.")
    _flag(p, "--revision", default=None, help="The specific model version to use.")
    _flag(p, "--model-impl", default="auto", help="Which implementation of the model to use.")
    _flag(p, "--json-model-override-args", default="{}", help="Override model config (JSON).")
    _flag(p, "--dtype", default="auto",
          choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
          help="Data type for model weights and activations.")
    _flag(p, "--quantization", default=None, help="The quantization method.")
    _flag(p, "--kv-cache-dtype", default="auto", help="Data type for kv cache storage.")
    # Memory and scheduling
    _flag(p, "--mem-fraction-static", type=float, default=None,
          help="The fraction of the memory used for static allocation.")
    _flag(p, "--max-running-requests", type=int, default=None, help="Max running requests.")
    _flag(p, "--max-queued-requests", type=int, default=None, help="Max queued requests.")
    _flag(p, "--max-total-tokens", type=int, default=None, help="Max tokens in the memory pool.")
    _flag(p, "--chunked-prefill-size", type=int, default=None, help="Chunked prefill size.")
    _flag(p, "--max-prefill-tokens", type=int, default=16384, help="Max tokens in a prefill batch.")
    _flag(p, "--schedule-policy", default="fcfs",
          choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"],
          help="The scheduling policy of the requests.")
    _flag(p, "--schedule-conservativeness", type=float, default=1.0,
          help="How conservative the schedule policy is.")
    _flag(p, "--page-size", type=int, default=None, help="The number of tokens in a page.")
    _flag(p, "--disable-radix-cache", **b, help="Disable RadixAttention for prefix caching.")
    _flag(p, "--disable-overlap-schedule", **b, help="Disable the overlap scheduler.")
    _flag(p, "--enable-mixed-chunk", **b, help="Mix prefill and decode in a batch.")
    _flag(p, "--num-continuous-decode-steps", type=int, default=1, help="Continuous decode steps.")
    # Distributed topology and parallelism
    _flag(p, "--nccl-port", type=int, default=None,
          help="The port for NCCL distributed environment setup.")
    _flag(p, "--dist-timeout", type=int, default=None,
          help="Set timeout for torch.distributed initialization.")
    _flag(p, "--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None,
          help="The host address for initializing distributed backend (e.g., `192.168.0.2:25000`).")
    _flag(p, "--nnodes", type=int, default=1, help="The number of nodes.")
    _flag(p, "--node-rank", type=int, default=0, help="The node rank.")
    _flag(p, "--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1,
          help="The tensor parallelism size.")
    _flag(p, "--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1,
          help="The pipeline parallelism size.")
    _flag(p, "--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1,
          help="The data parallelism size.")
    _flag(p, "--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1,
          help="The expert parallelism size.")
    _flag(p, "--enable-dp-attention", **b, help="Data parallelism for attention.")
    _flag(p, "--enable-p2p-check", **b, help="Enable P2P check for GPU access.")
    _flag(p, "--disable-custom-all-reduce", **b, help="Disable the custom all-reduce kernel.")
    _flag(p, "--enable-nccl-nvls", **b, help="Enable NCCL NVLS for prefill heavy requests.")
    _flag(p, "--enable-symm-mem", **b, help="Enable NCCL symmetric memory.")
    # Device and server timeout
    _flag(p, "--device", default=None, help="The device to use.")
    _flag(p, "--base-gpu-id", type=int, default=0, help="The base GPU ID.")
    _flag(p, "--gpu-id-step", type=int, default=1, help="The delta between consecutive GPU IDs.")
    _flag(p, "--random-seed", type=int, default=None, help="The random seed.")
    _flag(p, "--watchdog-timeout", type=float, default=300,
          help="If a forward batch takes longer than this, the server will crash to prevent "
          "hanging.")
    _flag(p, "--download-dir", default=None, help="Model download directory.")
    _flag(p, "--enable-memory-saver", **b, help="Allow saving memory.")
    _flag(p, "--delete-ckpt-after-loading", **b, help="Delete the model checkpoint after loading.")
    # HTTP server
    _flag(p, "--host", default="127.0.0.1", help="The host of the HTTP server.")
    _flag(p, "--port", type=int, default=30000, help="The port of the HTTP server.")
    _flag(p, "--skip-server-warmup", **b, help="If set, skip warmup.")
    _flag(p, "--warmups", default=None, help="Custom warmup functions (csv).")
    # API related
    _flag(p, "--api-key", default=None, help="Set API key of the server.")
    _flag(p, "--admin-api-key", default=None, help="Set admin API key.")
    _flag(p, "--served-model-name", default=None,
          help="Override the model name returned by the v1/models endpoint in OpenAI API server.")
    _flag(p, "--weight-version", default="default", help="Version of the model weights.")
    _flag(p, "--chat-template", default=None, help="The builtin chat template name or path.")
    _flag(p, "--completion-template", default=None, help="The completion template name or path.")
    _flag(p, "--file-storage-path", default="sglang_storage", help="File storage path.")
    _flag(p, "--enable-cache-report", **b, help="Return the number of cached tokens in usage.")
    _flag(p, "--reasoning-parser", default=None, help="The reasoning parser.")
    _flag(p, "--tool-call-parser", default=None, help="The tool call parser.")
    _flag(p, "--preferred-sampling-params", type=json.loads, default=None,
          help="json-formatted sampling settings that will be returned in /get_model_info")
    _flag(p, "--allow-auto-truncate", **b, help="Truncate requests exceeding the input length.")
    _flag(p, "--stream-interval", type=int, default=1, help="The interval for streaming in tokens.")
    _flag(p, "--stream-response-default-include-usage", **b, help="Usage in every stream.")
    # Logging and metrics
    _flag(p, "--log-level", default="info", help="The logging level of all loggers.")
    _flag(p, "--log-level-http", default=None, help="The logging level of HTTP server.")
    _flag(p, "--log-requests", **b, help="Log metadata, inputs, outputs of all requests.")
    _flag(p, "--log-requests-level", type=int, default=2, choices=[0, 1, 2, 3], help="Verbosity.")
    _flag(p, "--show-time-cost", **b, help="Show time cost of custom marks.")
    _flag(p, "--enable-metrics", **b, help="Enable log prometheus metrics.")
    _flag(p, "--enable-metrics-for-all-schedulers", **b, help="Metrics on all TP ranks.")
    _flag(p, "--decode-log-interval", type=int, default=40, help="Decode batches per log line.")
    # Kernel backends and optimisations
    _flag(p, "--attention-backend", default=None, help="Choose the kernels for attention layers.")
    _flag(p, "--sampling-backend", default=None, help="Choose the kernels for sampling layers.")
    _flag(p, "--grammar-backend", default=None, help="Backend for grammar-guided decoding.")
    _flag(p, "--moe-runner-backend", default="auto", help="Choose the runner backend for MoE.")
    _flag(p, "--speculative-algorithm", default=None, help="Speculative algorithm.")
    _flag(p, "--cuda-graph-max-bs", type=int, default=None, help="Max batch size of cuda graphs.")
    _flag(p, "--cuda-graph-bs", type=int, nargs="+", default=None, help="Cuda graph batch sizes.")
    _flag(p, "--disable-cuda-graph", **b, help="Disable cuda graph.")
    _flag(p, "--disable-cuda-graph-padding", **b, help="Disable cuda graph when padding is needed.")
    _flag(p, "--enable-torch-compile", **b, help="Optimize the model with torch.compile.")
    _flag(p, "--torch-compile-max-bs", type=int, default=32, help="Max torch.compile batch size.")
    _flag(p, "--triton-attention-num-kv-splits", type=int, default=8, help="KV splits.")
    _flag(p, "--enable-hierarchical-cache", **b, help="Enable hierarchical cache.")
    _flag(p, "--disable-outlines-disk-cache", **b, help="Disable disk cache of outlines.")
    _flag(p, "--enable-deterministic-inference", **b, help="Deterministic inference.")
    _flag(p, "--disaggregation-mode", default="null", choices=["null", "prefill", "decode"],
          help="PD disaggregation mode.")
    return p


def parse_args(argv: list[str]) -> dict[str, Any]:
    """The server args as SGLang resolves them (unknown flags: argparse error, exit 2)."""
    args = vars(build_parser().parse_args(argv))
    args["tokenizer_path"] = args["tokenizer_path"] or args["model_path"]
    args["served_model_name"] = args["served_model_name"] or args["model_path"]
    if args["random_seed"] is None:
        args["random_seed"] = int.from_bytes(os.urandom(4), "big") >> 2
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = 0.8
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = 4096
    if args["max_running_requests"] is None:
        args["max_running_requests"] = 64
    if args["device"] is None:
        args["device"] = "cuda"
    return args


def check_args(args: dict[str, Any]) -> None:
    """The assertions SGLang makes on a multi-node topology."""
    if args["nnodes"] > 1 and not args["dist_init_addr"]:
        raise Fatal("AssertionError: please provide --dist-init-addr as host:port of head node")
    if args["dist_init_addr"] and len(args["dist_init_addr"].split(":")) != 2:
        raise Fatal("AssertionError: please provide --dist-init-addr as host:port of head node")
    if args["nnodes"] < 1 or not 0 <= args["node_rank"] < args["nnodes"]:
        raise Fatal(f"AssertionError: node_rank {args['node_rank']} is not in "
                    f"[0, nnodes={args['nnodes']})")
    if args["tp_size"] % args["nnodes"]:
        raise Fatal(f"AssertionError: tp_size {args['tp_size']} must be divisible by "
                    f"nnodes {args['nnodes']}")


def args_repr(args: dict[str, Any]) -> str:
    """``ServerArgs(model_path='...', ...)`` as SGLang logs it; the API key is masked here."""
    shown = dict(args)
    for secret in ("api_key", "admin_api_key"):
        if shown.get(secret):
            shown[secret] = "***"
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


# -------------------------------------------------------------------------- network
def iface_ipv4(name: str) -> tuple[str, int] | None:
    """Primary IPv4 address and prefix length of an interface (SIOCGIFADDR), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", name.encode()[:15])
        try:
            addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24])
            mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, req)[20:24])
        except OSError:
            return None
    return addr, ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen


def interfaces() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def bindable(ip: str) -> bool:
    """Whether ``ip`` is an address of this machine."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
    except OSError:
        return False
    return True


def on_interface(ip: str | None, name: str | None) -> bool:
    """``ip`` is an address of this machine inside the subnet of interface ``name``."""
    if not ip or not name:
        return False
    found = iface_ipv4(name)
    try:
        inside = found is not None and ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(
            f"{found[0]}/{found[1]}", strict=False)
    except ValueError:
        return False
    return inside and bindable(ip)


def local_ip_auto() -> str:
    """SGLang's get_local_ip_auto("0.0.0.0") without the environment override."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("8.8.8.8", 80))  # no packet is sent; picks the default route's source
        return str(s.getsockname()[0])
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(HOSTNAME)
        if ip not in ("127.0.0.1", "0.0.0.0"):  # noqa: S104
            return ip
    return "0.0.0.0"  # noqa: S104


def nccl_interface() -> tuple[str, str]:
    """(name, address) NCCL bootstraps on: NCCL_SOCKET_IFNAME, else the first usable one."""
    spec = os.environ.get("NCCL_SOCKET_IFNAME", "")
    names = interfaces()
    if spec:
        nccl("INFO", f"NCCL_SOCKET_IFNAME set by environment to {spec}")
        exclude = spec.startswith("^")
        patterns = spec.lstrip("^").split(",")

        def wanted(n: str) -> bool:
            hit = any(n == p[1:] if p.startswith("=") else n.startswith(p) for p in patterns if p)
            return hit != exclude
        candidates = [n for n in names if wanted(n)]
    else:
        candidates = sorted((n for n in names if n != "lo" and not n.startswith("docker")),
                            key=lambda n: (not n.startswith("ib"), names.index(n)))
    for name in candidates:
        found = iface_ipv4(name)
        if found:
            return name, found[0]
    nccl("WARN", "Bootstrap : no socket interface found", "misc/socket.cc:384 ")
    raise Fatal("torch.distributed.DistBackendError: NCCL error: internal error - please report "
                "this issue to the NCCL developers, NCCL version 2.27.3",
                "ncclInternalError: Internal check failed.",
                "Last error:",
                "Bootstrap : no socket interface found")


def connect(addr: tuple[str, int], source: str | None, timeout: float) -> socket.socket:
    """A TCP connection to ``addr`` (from ``source`` when given), Nagle off."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        if source:
            sock.bind((source, 0))
        sock.connect(addr)
    except OSError:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def os_errno(err: OSError) -> int:
    return err.errno if err.errno is not None else errno.ETIMEDOUT


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionResetError(errno.ECONNRESET, "Connection closed by remote peer")
        buf += chunk
    return bytes(buf)


def send_json(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def recv_json(sock: socket.socket) -> Any:
    (length,) = struct.unpack("!I", recv_exact(sock, 4))
    if length > 1 << 24:
        raise ValueError("message too large")
    return json.loads(recv_exact(sock, length))


# ---------------------------------------------------------------------------- model
@dataclass
class Model:
    """What the ranks know about the model (from config.json, or toy defaults)."""

    path: str
    architecture: str = "LlamaForCausalLM"
    dtype: str = "bfloat16"
    hidden_size: int = 1024
    num_layers: int = 4
    context_len: int = 8192
    vocab_size: int = 32000
    eos_token_id: int = 2
    weight_bytes: int = 0
    signature: str = "no-config"
    config_found: bool = False

    @property
    def hidden_bytes(self) -> int:
        """Bytes of one token's hidden state in bf16: what a decode all-reduce moves."""
        return self.hidden_size * 2

    @property
    def rounds(self) -> int:
        """All-reduces per forward pass: attention and MLP of every layer."""
        return 2 * self.num_layers


def load_model_config(path: str, context_length: int | None) -> Model:
    """Check the model path, read config.json when present (fails like transformers does)."""
    root = Path(path)
    if not root.is_dir():
        if path.startswith(("/", ".", "~")):
            raise Fatal("huggingface_hub.errors.HFValidationError: Repo id must be in the form "
                        f"'repo_name' or 'namespace/repo_name': '{path}'. Use `repo_type` "
                        "argument if needed.")
        raise Fatal("OSError: We couldn't connect to 'https://huggingface.co' to load the files, "
                    "and couldn't find them in the cached files. (HF_HUB_OFFLINE is set: "
                    f"{path} must be in the local cache)")
    model = Model(path=path)
    config = root / "config.json"
    if config.is_file():
        raw = config.read_bytes()
        try:
            cfg = json.loads(raw)
        except ValueError as err:
            raise Fatal(f"OSError: It looks like the config file at '{config}' is not a valid JSON "
                        f"file. ({err})") from None
        model.config_found = True
        model.signature = hashlib.sha256(raw).hexdigest()[:16]
        model.architecture = (cfg.get("architectures") or [model.architecture])[0]
        model.dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or model.dtype)
        model.hidden_size = max(8, int(cfg.get("hidden_size", model.hidden_size)))
        model.num_layers = max(1, int(cfg.get("num_hidden_layers", model.num_layers)))
        model.context_len = int(cfg.get("max_position_embeddings", model.context_len))
        model.vocab_size = int(cfg.get("vocab_size", model.vocab_size))
        eos = cfg.get("eos_token_id", model.eos_token_id)
        model.eos_token_id = int(eos[0] if isinstance(eos, list) and eos else eos or 2)
    if context_length:
        model.context_len = context_length
    model.weight_bytes = sum(f.stat().st_size for f in root.iterdir()
                             if f.is_file() and f.suffix in (".safetensors", ".bin", ".pt"))
    return model


def read_weights(path: str) -> int:
    """Read every weight file through (the I/O of a real load); returns bytes read."""
    total = 0
    for f in sorted(Path(path).iterdir()):
        if f.is_file() and f.suffix in (".safetensors", ".bin", ".pt"):
            with f.open("rb") as fh:
                while chunk := fh.read(1 << 22):
                    total += len(chunk)
    return total


def mem_available_gb() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1024 * 1024)
    return 0.0


def tokenize(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def layer_key(model: Model, rank: int, layer: int) -> int:
    """This rank's shard of layer ``layer``: a fixed pseudo-random vector."""
    seed = f"{model.signature}/{rank}/{layer}".encode()
    return int.from_bytes(hashlib.shake_256(seed).digest(model.hidden_bytes), "big")


def partial(payload: bytes, key: int, key_len: int) -> bytes:
    """A rank's partial result for one all-reduce: its shard applied to the input."""
    reps = max(1, len(payload) // key_len)
    tiled = int.from_bytes(key.to_bytes(key_len, "big") * reps, "big")
    return (int.from_bytes(payload, "big") ^ tiled).to_bytes(len(payload), "big")


# ------------------------------------------------------------------------ the group
@dataclass
class Node:
    """This process: one node of the tensor-parallel group."""

    args: dict[str, Any]
    rank: int
    nnodes: int
    deadline: float
    dist_host: str
    dist_port: int
    nccl_if: str = ""
    nccl_ip: str = ""
    gloo_ip: str = ""
    host_ip: str = ""
    host_on_fabric: bool = False
    source_ip: str | None = None
    listeners: dict[str, socket.socket] = field(default_factory=dict)
    # Failures the real stack only hits after the rendezvous (NCCL bootstrap,
    # Gloo device, ZMQ bind): raised when their phase comes.
    deferred: dict[str, Fatal] = field(default_factory=dict)
    world: dict[int, dict[str, Any]] = field(default_factory=dict)
    links: dict[int, socket.socket] = field(default_factory=dict)

    @property
    def tp(self) -> int:
        """First TP rank on this node (one GPU per Spark: the node rank)."""
        return self.rank * (self.args["tp_size"] // self.nnodes)

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    # -- addresses -------------------------------------------------------------
    def resolve_addresses(self) -> None:
        explicit = os.environ.get("SGLANG_HOST_IP") or os.environ.get("HOST_IP")
        self.host_ip = explicit.strip().strip("[]") if explicit else local_ip_auto()
        try:
            self.nccl_if, self.nccl_ip = nccl_interface()
        except Fatal as err:
            self.deferred["nccl"] = err
        # SGLang's cross-node queue is reachable over the fabric only (modelled):
        # the address must be this node's own on NCCL_SOCKET_IFNAME.
        self.host_on_fabric = on_interface(self.host_ip, self.nccl_if)
        self.source_ip = self.host_ip if self.host_on_fabric else None
        if self.host_on_fabric:
            # An interface with several addresses (the lab's tests put every
            # "node" on lo): this node's is SGLANG_HOST_IP.
            self.nccl_ip = self.host_ip
        if self.nccl_ip:
            nccl("INFO", f"Bootstrap : Using {self.nccl_if}:{self.nccl_ip}<0>")
        try:
            self.gloo_ip = self._gloo_address()
        except Fatal as err:
            self.deferred["gloo"] = err

    def _gloo_address(self) -> str:
        spec = os.environ.get("GLOO_SOCKET_IFNAME", "")
        if spec:
            name = spec.split(",")[0]
            found = iface_ipv4(name)
            if found is None:
                raise Fatal("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/"
                            f"device.cc:83] ifa != nullptr. Unable to find address for: {name}")
            return self.host_ip if on_interface(self.host_ip, name) else found[0]
        ip = None
        with contextlib.suppress(OSError):
            ip = socket.gethostbyname(HOSTNAME)
        if ip is None or ipaddress.IPv4Address(ip).is_loopback or not bindable(ip):
            emit(f"[rank{self.tp}]:[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve "
                 "hostname to a (local) address. Using the loopback address as fallback. Manually "
                 "set the "
                 "network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())")
            return "127.0.0.1"
        return ip

    def open_listeners(self) -> None:
        """Gloo and NCCL endpoints; on the head also the message queue (a ZMQ bind)."""
        for name, ip in (("gloo", self.gloo_ip), ("nccl", self.nccl_ip)):
            if ip:
                self.listeners[name] = socket.create_server((ip, 0), backlog=64)
        if self.rank == 0:
            try:
                self.listeners["mq"] = socket.create_server((self.host_ip, 0), backlog=64)
            except OSError as err:
                self.deferred["mq"] = Fatal(f"zmq.error.ZMQError: {os.strerror(os_errno(err))} "
                                            f"(addr='tcp://{self.host_ip}:0')")

    def endpoint(self, name: str) -> list[Any] | None:
        srv = self.listeners.get(name)
        if srv is None:
            return None
        host, port = srv.getsockname()[:2]
        return [host, port]

    # -- rendezvous --------------------------------------------------------------
    def hello(self, model: Model) -> dict[str, Any]:
        return {"rank": self.rank, "nnodes": self.nnodes, "tp_size": self.args["tp_size"],
                "model": model.signature, "host": HOSTNAME, "gloo": self.endpoint("gloo"),
                "nccl": self.endpoint("nccl"), "mq": self.endpoint("mq"),
                "mq_on_fabric": self.host_on_fabric}

    def rendezvous(self, model: Model) -> None:
        if self.rank == 0:
            self._store_server(model)
        else:
            self._store_client(model)

    def _store_server(self, model: Model) -> None:
        try:
            srv = socket.create_server((self.dist_host, self.dist_port), backlog=64)
        except OSError as err:
            code = os_errno(err)
            raise Fatal("torch.distributed.DistNetworkError: The server socket has failed to "
                        f"listen on any local network address. port: {self.dist_port}, "
                        "useIpv6: false, "
                        f"code: -{code}, name: {errno.errorcode.get(code, '?')}, message: "
                        f"{os.strerror(code).lower()}") from None
        me = self.hello(model)
        me["node"] = self.dist_host
        self.world = {0: me}
        pending: dict[int, socket.socket] = {}
        srv.settimeout(1.0)
        started = time.monotonic()
        next_note = started + 5
        try:
            while len(self.world) < self.nnodes:
                if not self.remaining():
                    raise Fatal(f"torch.distributed.DistStoreError: Timed out after "
                                f"{self.args['dist_timeout'] or DEFAULT_DIST_TIMEOUT} seconds "
                                f"waiting for clients. {len(self.world)}/{self.nnodes} clients "
                                "joined.")
                if time.monotonic() >= next_note:
                    missing = sorted(set(range(self.nnodes)) - set(self.world))
                    log(f"Waiting for node rank(s) {', '.join(map(str, missing))} at "
                        f"{self.dist_host}:{self.dist_port} ({time.monotonic() - started:.0f} s "
                        f"of --dist-timeout)", self.tp)
                    next_note += 10
                try:
                    conn, peer = srv.accept()
                except TimeoutError:
                    continue
                self._admit(conn, peer[0], model, pending)
            for conn in pending.values():
                with contextlib.suppress(OSError):
                    send_json(conn, {"world": {str(r): v for r, v in self.world.items()}})
        finally:
            srv.close()
            for conn in pending.values():
                conn.close()

    def _admit(self, conn: socket.socket, peer: str, model: Model,
               pending: dict[int, socket.socket]) -> None:
        conn.settimeout(10)
        try:
            hello = recv_json(conn)
        except (OSError, ValueError):
            conn.close()
            return
        rank = hello.get("rank")
        problem = None
        if not isinstance(rank, int) or not 0 < rank < self.nnodes:
            problem = f"node rank {rank!r} is outside 1..{self.nnodes - 1}"
        elif rank in self.world:
            problem = f"node rank {rank} has joined already (from {self.world[rank]['node']})"
        elif (hello.get("nnodes"), hello.get("tp_size")) != (self.nnodes, self.args["tp_size"]):
            problem = (f"--nnodes {hello.get('nnodes')} --tp {hello.get('tp_size')} differ from "
                       f"the head's --nnodes {self.nnodes} --tp {self.args['tp_size']}")
        elif hello.get("model") != model.signature:
            problem = "the model's config.json differs from the head's"
        if problem:
            log(f"Rejected a rank from {peer}: {problem}", self.tp)
            with contextlib.suppress(OSError):
                send_json(conn, {"error": problem})
            conn.close()
            return
        hello["node"] = peer
        self.world[rank] = hello
        pending[rank] = conn
        log(f"Node rank {rank} ({hello.get('host')}, {peer}) joined the rendezvous "
            f"({len(self.world)}/{self.nnodes})", self.tp)

    def _store_client(self, model: Model) -> None:
        last_warn = 0.0
        conn = None
        while conn is None:
            if not self.remaining():
                raise Fatal("torch.distributed.DistNetworkError: The client socket has timed out "
                            f"after {self.args['dist_timeout'] or DEFAULT_DIST_TIMEOUT}s while "
                            f"trying to connect to ({self.dist_host}, {self.dist_port}).")
            try:
                conn = connect((self.dist_host, self.dist_port), self.source_ip,
                               min(5.0, self.remaining() or 0.1))
            except OSError as err:
                if time.monotonic() - last_warn >= 10:
                    code = os_errno(err)
                    emit(f"[W socket.cpp:663] [c10d] The client socket has failed to connect to "
                         f"[{self.dist_host}]:{self.dist_port} (errno: {code} - "
                         f"{os.strerror(code)}).")
                    last_warn = time.monotonic()
                time.sleep(1)
        try:
            send_json(conn, self.hello(model))
            conn.settimeout(self.remaining() or 0.1)
            reply = recv_json(conn)
        except (OSError, ValueError) as err:
            raise Fatal(f"torch.distributed.DistNetworkError: failed to recv, got 0 bytes "
                        f"({type(err).__name__}: {err})") from None
        finally:
            conn.close()
        if "error" in reply:
            raise Fatal("torch.distributed.DistStoreError: the head refused this rank: "
                        f"{reply['error']}")
        self.world = {int(r): v for r, v in reply["world"].items()}

    # -- Gloo --------------------------------------------------------------------
    def gloo_mesh(self) -> None:
        if "gloo" in self.deferred:
            raise self.deferred["gloo"]
        peers = sorted(r for r in self.world if r != self.rank)
        accepted: dict[int, socket.socket] = {}
        lower = {r for r in peers if r < self.rank}
        srv = self.listeners["gloo"]

        def accept_lower() -> None:
            srv.settimeout(0.5)
            while lower - set(accepted) and self.remaining():
                try:
                    conn, _ = srv.accept()
                    conn.settimeout(5)
                    accepted[int(recv_json(conn)["rank"])] = conn
                except (OSError, ValueError, KeyError):
                    continue

        acceptor = threading.Thread(target=accept_lower, daemon=True)
        acceptor.start()
        out: list[socket.socket] = []
        try:
            for peer in (r for r in peers if r > self.rank):
                out.append(self._gloo_connect(peer))
            acceptor.join(self.remaining())
            if lower - set(accepted):
                raise Fatal(*self._gloo_failure(f"{GLOO_PAIR} no error"))
            emit(f"[Gloo] Rank {self.tp} is connected to {len(peers)} peer ranks. Expected number "
                 f"of connected peer ranks is : {len(peers)}")
        finally:
            for conn in [*out, *accepted.values()]:
                conn.close()

    def _gloo_connect(self, peer: int) -> socket.socket:
        # A peer without a Gloo device has no endpoint (it is failing): refused.
        node, mine = self.world[peer]["node"], self.world[self.rank]["node"]
        ip, port = self.world[peer]["gloo"] or (node, 0)
        remote_loopback = ipaddress.IPv4Address(ip).is_loopback and node not in (ip, mine)
        code = errno.ETIMEDOUT
        while self.remaining():
            if remote_loopback or not port:
                # Modelled: another node's loopback is this node's own, where
                # nothing listens on that port: refused, as between machines.
                code = errno.ECONNREFUSED
                time.sleep(0.5)
                continue
            try:
                conn = connect((ip, port), None, min(5.0, self.remaining() or 0.1))
                send_json(conn, {"rank": self.rank})
            except OSError as err:
                code = os_errno(err)
                time.sleep(0.5)
                continue
            return conn
        reason = "Connection refused" if code == errno.ECONNREFUSED else os.strerror(code)
        raise Fatal(*self._gloo_failure(f"{GLOO_PAIR} timed out connecting: SO_ERROR: {reason}, "
                                        f"remote=[{ip}]:{port}"))

    def _gloo_failure(self, detail: str) -> tuple[str, str]:
        return (f"[rank{self.tp}]:[E ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with "
                f"{detail}", f"RuntimeError: Gloo connectFullMesh failed with {detail}")

    # -- NCCL --------------------------------------------------------------------
    def nccl_links(self) -> None:
        if "nccl" in self.deferred:
            raise self.deferred["nccl"]
        comm = int.from_bytes(os.urandom(6), "big")
        if self.rank == 0:
            for peer in sorted(r for r in self.world if r):
                self.links[peer] = self._nccl_connect(peer)
        else:
            srv = self.listeners["nccl"]
            srv.settimeout(self.remaining() or 0.1)
            try:
                conn, _ = srv.accept()
                conn.settimeout(30)
                recv_json(conn)
                send_json(conn, {"rank": self.rank})
            except (OSError, ValueError) as err:
                why = os.strerror(os_errno(err)) if isinstance(err, OSError) else str(err)
                nccl("WARN", f"socketProgress: {why}", "misc/socket.cc:49 ")
                raise Fatal(*self._nccl_error(f"no connection from rank 0 within --dist-timeout "
                                              f"({type(err).__name__})")) from None
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(None)
            self.links[0] = conn
        comm_id = int.from_bytes(hashlib.sha256(
            f"{self.dist_host}:{self.dist_port}".encode()).digest()[:8], "big")
        nccl("INFO", f"comm 0x{comm:x} rank {self.tp} nranks {self.args['tp_size']} cudaDev 0 "
             f"nvmlDev 0 busId f01000 commId 0x{comm_id:x} - Init COMPLETE")

    def _nccl_connect(self, peer: int) -> socket.socket:
        # A peer without a socket interface has no endpoint: nothing to connect to.
        ip, port = self.world[peer]["nccl"] or ("0.0.0.0", 0)  # noqa: S104
        give_up = time.monotonic() + min(NCCL_CONNECT_RETRY_S, self.remaining())
        attempt = 0
        while True:
            attempt += 1
            try:
                if not port:
                    raise ConnectionRefusedError(errno.ECONNREFUSED, "no NCCL endpoint")
                conn = connect((ip, port), self.nccl_ip, 5.0)
                send_json(conn, {"rank": 0})
                conn.settimeout(30)
                recv_json(conn)
            except (OSError, ValueError) as err:
                code = os_errno(err) if isinstance(err, OSError) else errno.ECONNRESET
                if time.monotonic() < give_up:
                    wait = min(100 * attempt, 3400)
                    nccl("INFO", f"socketPollConnect: connect returned {os.strerror(code)}, "
                         f"retrying ({attempt}/34) after sleep for {wait} msec")
                    time.sleep(wait / 1000)
                    continue
                nccl("WARN", f"socketPollConnect: Connect to {ip}<{port}> returned {code}"
                     f"({os.strerror(code)}) errno 115(Operation now in progress)",
                     "misc/socket.cc:533 ")
                for where in ("misc/socket.cc:570", "misc/socket.cc:621", "bootstrap.cc:285",
                              "init.cc:1534"):
                    nccl("INFO", f"{where} -> 2")
                raise Fatal(*self._nccl_error(f"socketPollConnect: Connect to {ip}<{port}> "
                                              f"returned {code}({os.strerror(code)})")) from None
            conn.settimeout(None)
            return conn

    def _nccl_error(self, last: str) -> tuple[str, ...]:
        return (f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{self.tp}] Scheduler hit an exception: "
                "torch.distributed.DistBackendError: NCCL error in: "
                "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
                "(run with NCCL_DEBUG=INFO for details)",
                "ncclSystemError: System call (e.g. socket, malloc) or external library call "
                "failed or device error.", f"Last error:\n{last}")

    # -- SGLang's cross-node message queue ----------------------------------------
    def message_queue(self) -> None:
        """Every reader must reach the head's queue; start-up hangs until they do."""
        if self.rank == 0:
            self._mq_writer()
        else:
            self._mq_reader()

    def _mq_writer(self) -> None:
        if "mq" in self.deferred:
            raise self.deferred["mq"]
        srv = self.listeners["mq"]
        readers: dict[int, socket.socket] = {}
        try:
            while len(readers) < self.nnodes - 1:
                srv.settimeout(min(1.0, self.remaining()) or 0.1)
                if not self.remaining():
                    missing = sorted(set(range(1, self.nnodes)) - set(readers))
                    raise Fatal(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{self.tp}] Scheduler hit "
                                "an exception: TimeoutError: MessageQueue.wait_until_ready: "
                                f"readers {missing} did not connect to tcp://{self.host_ip}:"
                                f"{self.endpoint('mq')[1]} within --dist-timeout "
                                "(SGLANG_HOST_IP must be this node's fabric address)")
                try:
                    conn, _ = srv.accept()
                    conn.settimeout(5)
                    rank = int(recv_json(conn)["ready"])
                except (OSError, ValueError, KeyError):
                    continue
                readers[rank] = conn
            for conn in readers.values():
                send_json(conn, {"go": True})
        finally:
            for conn in readers.values():
                conn.close()

    def _mq_reader(self) -> None:
        head = self.world[0]
        # The head could not bind its queue: nothing to connect to.
        ip, port = head["mq"] or ("0.0.0.0", 0)  # noqa: S104
        if not head["mq_on_fabric"] or not self.host_on_fabric or not port:
            # Modelled: the queue's address is off the fabric (the head's), or
            # this node would answer from off the fabric: the packets go
            # nowhere, and the real server waits here for ever.
            while self.remaining():
                time.sleep(min(1.0, self.remaining()))
            raise Fatal(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{self.tp}] Scheduler hit an "
                        f"exception: TimeoutError: MessageQueue.wait_until_ready: no answer from "
                        f"tcp://{ip}:{port} within --dist-timeout (SGLANG_HOST_IP must be each "
                        "node's fabric address)")
        while True:
            try:
                conn = connect((ip, port), self.source_ip, min(5.0, self.remaining() or 0.1))
                send_json(conn, {"ready": self.rank})
                conn.settimeout(self.remaining() or 0.1)
                recv_json(conn)
                conn.close()
                return
            except (OSError, ValueError):
                if not self.remaining():
                    raise Fatal(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{self.tp}] Scheduler hit "
                                "an exception: TimeoutError: MessageQueue.wait_until_ready timed "
                                "out") from None
                time.sleep(0.5)

    def close_listeners(self) -> None:
        for srv in self.listeners.values():
            srv.close()
        self.listeners.clear()


# --------------------------------------------------------------------------- engine
@dataclass
class Stats:
    """Counters behind /metrics and the batch log lines."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    recent: deque[tuple[float, int]] = field(default_factory=deque)
    forward_steps: int = 0

    def throughput(self, window: float = 10.0) -> float:
        now = time.monotonic()
        while self.recent and now - self.recent[0][0] > window:
            self.recent.popleft()
        if not self.recent:
            return 0.0
        return sum(n for _, n in self.recent) / max(now - self.recent[0][0], 1.0)


@dataclass
class Sampling:
    """The sampling parameters the toy model honours (it is greedy: temperature is moot)."""

    max_new: int | None = None
    stops: list[str] = field(default_factory=list)
    ignore_eos: bool = False


@dataclass
class Seq:
    """One sequence in the running batch; its tokens go to ``out``."""

    state: bytes
    prompt_len: int
    cap: int
    stops: list[str]
    ignore_eos: bool = False
    counted: bool = True  # health checks are not request metrics (log_metrics=False)
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    text: str = ""
    produced: int = 0
    prefilled: bool = False
    done: bool = False
    began: float = field(default_factory=time.monotonic)


class Engine:
    """The head's scheduler: continuous batching, one forward pass per step for every running
    sequence, each pass ``2 x num_hidden_layers`` all-reduces over all ranks."""

    def __init__(self, node: Node, model: Model) -> None:
        self.node, self.model = node, model
        self.cv = threading.Condition()
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.stats = Stats()
        self.broken: str | None = None
        self.status = "Starting"
        self.seq = 0
        self.keys = [layer_key(model, 0, layer) for layer in range(model.rounds)]
        self.watchdog = float(node.args["watchdog_timeout"])
        self.max_running = int(node.args["max_running_requests"])
        self.max_total_tokens = int(node.args["max_total_tokens"] or 20 * model.context_len)

    # -- the group -----------------------------------------------------------------
    def _round(self, payload: bytes, layer: int) -> bytes:
        """One all-reduce: send to every rank, add up every rank's partial result."""
        self.seq += 1
        header = _DATA.pack(_MAGIC, _OP_STEP, self.seq, layer, len(payload))
        peers = sorted(self.node.links)
        total = int.from_bytes(partial(payload, self.keys[layer], self.model.hidden_bytes), "big")
        for peer in peers:
            self._io(peer, lambda s: s.sendall(header + payload))
        for peer in peers:
            reply = self._io(peer, lambda s: recv_exact(s, _DATA.size))
            magic, op, seq, _, length = _DATA.unpack(reply)
            if magic != _MAGIC or op != _OP_REPLY or seq != self.seq or length != len(payload):
                raise self._break(peer, "unexpected reply")
            total += int.from_bytes(self._io(peer, lambda s, n=length: recv_exact(s, n)), "big")
        return (total % (1 << (8 * len(payload)))).to_bytes(len(payload), "big")

    def _io(self, peer: int, action: Any) -> Any:
        sock = self.node.links[peer]
        sock.settimeout(self.watchdog)
        try:
            return action(sock)
        except TimeoutError as err:
            if err.errno is not None:  # ETIMEDOUT from the kernel: TCP gave up on the peer
                raise self._break(peer, os.strerror(err.errno)) from None
            log(f"Scheduler watchdog timeout (self.watchdog_timeout={self.watchdog:g}, "
                "self.soft=False)", self.node.tp)
            raise self._break(peer, "watchdog timeout") from None
        except OSError as err:
            raise self._break(peer, os.strerror(os_errno(err))) from None

    def _break(self, peer: int, why: str) -> EngineError:
        ip, port = self.node.world[peer]["nccl"]
        if self.broken is None:
            self.broken = f"rank {peer} ({self.node.world[peer]['host']}, {ip}): {why}"
            self.status = "UnHealthy"
            nccl("WARN", f"socketProgress: Connection closed by remote peer {ip}<{port}>",
                 "misc/socket.cc:49 ")
            log("Scheduler hit an exception: torch.distributed.DistBackendError: NCCL error in: "
                "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited "
                "or there was a network error", self.node.tp)
            emit("ncclRemoteError: A call failed possibly due to a network error or a remote "
                 f"process exiting prematurely.\nLast error:\nsocketProgress: Connection closed by "
                 f"remote peer {ip}<{port}> ({why})")
        return EngineError(f"NCCL error: remote process exited or there was a network error "
                           f"({self.broken})")

    def forward(self, x: bytes) -> bytes:
        for layer in range(self.model.rounds):
            x = self._round(x, layer)
        return x

    def ping(self) -> None:
        """Barrier over every link: each rank answers once its weights are loaded."""
        self.seq += 1
        header = _DATA.pack(_MAGIC, _OP_PING, self.seq, 0, 0)
        for peer in sorted(self.node.links):
            self.node.links[peer].settimeout(self.node.remaining() or 0.1)
            try:
                self.node.links[peer].sendall(header)
                recv_exact(self.node.links[peer], _DATA.size)
            except OSError as err:
                raise Fatal(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0] Scheduler hit an "
                            f"exception: rank {peer} did not finish loading: "
                            f"{os.strerror(os_errno(err))}") from None
        threading.Thread(target=self._loop, name="scheduler", daemon=True).start()

    # -- the scheduler -------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self.cv:
                while not self.waiting and not self.running:
                    self.cv.wait()
                while self.waiting and len(self.running) < self.max_running:
                    self.running.append(self.waiting.popleft())
                batch = [s for s in self.running if not s.done]
                queued = len(self.waiting)
            if not batch:
                with self.cv:
                    self.running = []
                continue
            new = [s for s in batch if not s.prefilled]
            if new and any(s.counted for s in new):
                log(f"Prefill batch. #new-seq: {len(new)}, #new-token: "
                    f"{sum(s.prompt_len for s in new)}, #cached-token: 0, token usage: 0.00, "
                    f"#running-req: {len(batch) - len(new)}, #queue-req: {queued}", self.node.tp)
            # A prefill moves a slice of the prompt's hidden states, a decode one token's.
            widths = [1 if s.prefilled else min(max(1, s.prompt_len), 32) for s in batch]
            hb = self.model.hidden_bytes
            x = b"".join(hashlib.shake_256(s.state).digest(hb * w) for s, w in zip(
                batch, widths, strict=True))
            try:
                out = self.forward(x)
            except EngineError as err:
                with self.cv:
                    for s in [*self.running, *self.waiting]:
                        s.out.put(err)
                    self.running, self.waiting = [], deque()
                continue
            offset = 0
            for s, w in zip(batch, widths, strict=True):
                self._advance(s, out[offset:offset + 64])
                offset += hb * w
            with self.cv:
                self.running = [s for s in self.running if not s.done]
            self._decode_log(len(batch), queued)

    def _advance(self, s: Seq, head: bytes) -> None:
        """One token of ``s`` from its slice of the last all-reduce."""
        draw = hashlib.blake2b(s.state + head, digest_size=16).digest()
        s.state = draw + s.state[:16]
        s.prefilled = True
        s.produced += 1
        if s.counted:
            with self.cv:
                self.stats.generation_tokens += 1
                self.stats.recent.append((time.monotonic(), 1))
                if s.produced == 1:
                    self.stats.ttft.append(time.monotonic() - s.began)
        eos = int.from_bytes(draw[:4], "big") % EOS_PERIOD == 0
        if eos and s.produced > 1 and not s.ignore_eos:
            self._finish(s, {"type": "stop", "matched": self.model.eos_token_id})
            return
        word = VOCAB[int.from_bytes(draw[4:8], "big") % len(VOCAB)]
        piece = word if not s.text else " " + word
        hit = next((stop for stop in s.stops if stop and stop in s.text + piece), None)
        if hit is not None:
            cut = (s.text + piece).index(hit)
            if cut > len(s.text):
                s.out.put(((s.text + piece)[len(s.text):cut], None))
            self._finish(s, {"type": "stop", "matched": hit})
            return
        s.text += piece
        s.out.put((piece, None))
        if s.produced >= s.cap:
            self._finish(s, {"type": "length", "length": s.produced})

    def _finish(self, s: Seq, reason: dict[str, Any]) -> None:
        s.done = True
        s.out.put(("", reason))
        if s.counted:
            with self.cv:
                self.stats.e2e.append(time.monotonic() - s.began)

    def _decode_log(self, running: int, queued: int) -> None:
        with self.cv:
            self.stats.forward_steps += 1
            steps, tokens = self.stats.forward_steps, self.stats.generation_tokens
        interval = int(self.node.args["decode_log_interval"])
        if interval > 0 and steps % interval == 0:
            log(f"Decode batch. #running-req: {running}, #token: {tokens}, token usage: 0.00, "
                f"cuda graph: False, gen throughput (token/s): {self.stats.throughput():.2f}, "
                f"#queue-req: {queued}", self.node.tp)

    def submit(self, s: Seq) -> None:
        with self.cv:
            if self.broken:
                raise EngineError(f"NCCL communicator was aborted ({self.broken})")
            if s.counted:
                self.stats.requests += 1
                self.stats.prompt_tokens += s.prompt_len
            self.waiting.append(s)
            self.cv.notify()

    @property
    def load(self) -> tuple[int, int]:
        with self.cv:
            return len(self.running), len(self.waiting)

    # -- requests ------------------------------------------------------------------
    def generate(self, prompt: str, sampling: Sampling,
                 index: int = 0) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Yield (text piece, None) per token, then ("", finish_reason)."""
        prompt_len = len(tokenize(prompt))
        limit = self.model.context_len - prompt_len
        max_new = sampling.max_new
        s = Seq(state=hashlib.blake2b(f"{index}\x00{prompt}".encode(), digest_size=32).digest(),
                prompt_len=prompt_len, cap=min(max_new, limit) if max_new else limit,
                stops=sampling.stops, ignore_eos=sampling.ignore_eos)
        self.submit(s)
        try:
            while True:
                item = s.out.get(timeout=self.watchdog + 60)
                if isinstance(item, EngineError):
                    raise item
                yield item
                if item[1] is not None:
                    return
        except queue.Empty:
            raise EngineError("the scheduler did not answer (watchdog)") from None
        finally:
            s.done = True  # a client that went away frees its slot in the batch

    def health(self) -> bool:
        """/health: a one-token generation must finish within SGLANG_HEALTH_CHECK_TIMEOUT."""
        if self.status == "Starting" or self.broken:
            return False
        s = Seq(state=b"HEALTH_CHECK_%d" % time.time_ns(), prompt_len=1, cap=1, stops=[],
                counted=False)
        try:
            self.submit(s)
            item = s.out.get(timeout=HEALTH_CHECK_TIMEOUT)
        except (EngineError, queue.Empty):
            item = None
        finally:
            s.done = True
        if item is None:
            log(f"Health check failed. Server couldn't get a response from detokenizer for last "
                f"{HEALTH_CHECK_TIMEOUT} seconds.")
        return isinstance(item, tuple)


def worker_loop(node: Node, model: Model) -> None:
    """A non-head rank: answer every all-reduce round of the head until it goes away."""
    keys = [layer_key(model, node.rank, layer) for layer in range(model.rounds)]
    conn = node.links[0]
    peer = node.world[0]["nccl"]
    while True:
        try:
            magic, op, seq, layer, length = _DATA.unpack(recv_exact(conn, _DATA.size))
            if magic != _MAGIC:
                raise ConnectionResetError(errno.EPROTO, "protocol error")
            if op == _OP_PING:
                conn.sendall(_DATA.pack(_MAGIC, _OP_REPLY, seq, 0, 0))
                continue
            payload = recv_exact(conn, length)
            reply = partial(payload, keys[layer % len(keys)], model.hidden_bytes)
            conn.sendall(_DATA.pack(_MAGIC, _OP_REPLY, seq, layer, len(reply)) + reply)
        except OSError as err:
            nccl("WARN", f"socketProgress: Connection closed by remote peer {peer[0]}<{peer[1]}>",
                 "misc/socket.cc:49 ")
            raise Fatal(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP{node.tp}] Scheduler hit an "
                        "exception: torch.distributed.DistBackendError: NCCL error: remote process "
                        f"exited or there was a network error ({os.strerror(os_errno(err))})",
                        "ncclRemoteError: A call failed possibly due to a network error or a "
                        "remote process exiting prematurely.") from None


# ----------------------------------------------------------------------------- HTTP
def error_body(code: int, message: str, err_type: str) -> dict[str, Any]:
    """protocol.py ErrorResponse."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


class BadRequest(Exception):
    def __init__(self, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.err_type = err_type


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion, "prompt_tokens_details": None, "reasoning_tokens": 0}


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise BadRequest("1 validation error: stop must be a string or a list of strings",
                     "Bad Request")


def _positive(body: dict[str, Any], *names: str, default: int | None) -> int | None:
    for name in names:
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BadRequest(f"{name} must be positive", "Bad Request")
            return value
    return default


def chat_prompt(messages: Any) -> str:
    """The conversation as a chat template renders it (the tokens usage counts)."""
    if not isinstance(messages, list):
        raise BadRequest("1 validation error for ChatCompletionRequest\nmessages\n  Field required",
                         "Bad Request")
    if not messages:
        raise BadRequest("Messages cannot be empty.")
    parts = []
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") not in (
                "system", "user", "assistant", "tool", "developer", "function"):
            raise BadRequest("1 validation error for ChatCompletionRequest\nmessages: each message "
                             "needs a role of system, user, assistant, tool or developer",
                             "Bad Request")
        content = msg.get("content") or ""
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{msg['role']}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


class App:
    """Rank 0's HTTP state: the engine, the server args and the model."""

    def __init__(self, engine: Engine, args: dict[str, Any], model: Model) -> None:
        self.engine, self.args, self.model = engine, args, model
        self.name = args["served_model_name"]
        self.api_key = args["api_key"] or None

    def model_card(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                "root": name, "parent": None, "max_model_len": self.model.context_len}

    def server_info(self) -> dict[str, Any]:
        stats = self.engine.stats
        scheduler = {"max_total_num_tokens": self.engine.max_total_tokens,
                     "max_req_input_len": self.model.context_len - 5}
        weight_gb = round(self.model.weight_bytes / self.args["tp_size"] / 2**30, 2)
        internal = [{"last_gen_throughput": round(stats.throughput(), 2),
                     "memory_usage": {"weight": weight_gb, "kvcache": 0.0,
                                      "token_capacity": self.engine.max_total_tokens},
                     "status": self.engine.status}]
        return {**self.args, **scheduler, "internal_states": internal, "version": __version__}

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.args["model_path"],
                "tokenizer_path": self.args["tokenizer_path"], "is_generation": True,
                "preferred_sampling_params": self.args["preferred_sampling_params"],
                "weight_version": self.args["weight_version"]}

    def metrics(self) -> str:
        s = self.engine.stats
        escaped = self.name.replace("\\", "\\\\").replace('"', '\\"')
        label = f'{{model_name="{escaped}"}}'
        lines = []

        def metric(name: str, kind: str, helptext: str, value: float) -> None:
            lines.extend([f"# HELP sglang:{name} {helptext}", f"# TYPE sglang:{name} {kind}",
                          f"sglang:{name}{label} {float(value)}"])

        def histogram(name: str, helptext: str, values: list[float]) -> None:
            lines.extend([f"# HELP sglang:{name} {helptext}", f"# TYPE sglang:{name} histogram"])
            inner = label[1:-1]
            for le in (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0):
                lines.append(f'sglang:{name}_bucket{{{inner},le="{le}"}} '
                             f"{float(sum(v <= le for v in values))}")
            lines.append(f'sglang:{name}_bucket{{{inner},le="+Inf"}} {float(len(values))}')
            lines.append(f"sglang:{name}_sum{label} {sum(values)}")
            lines.append(f"sglang:{name}_count{label} {float(len(values))}")

        running, queued = self.engine.load
        with self.engine.cv:
            metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                   s.prompt_tokens)
            metric("generation_tokens_total", "counter", "Number of generation tokens processed.",
                   s.generation_tokens)
            metric("num_requests_total", "counter", "Number of requests processed.", s.requests)
            metric("num_running_reqs", "gauge", "The number of running requests", running)
            metric("num_queue_reqs", "gauge", "The number of requests in the waiting queue", queued)
            metric("gen_throughput", "gauge", "The generate throughput (token/s)", s.throughput())
            metric("token_usage", "gauge", "The token usage", 0.0)
            metric("cache_hit_rate", "gauge", "The prefix cache hit rate", 0.0)
            histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                      list(s.ttft))
            histogram("e2e_request_latency_seconds",
                      "Histogram of End-to-end request latency in seconds", list(s.e2e))
        return "\n".join(lines) + "\n"


@dataclass
class Reply:
    """What every object of one OpenAI response (or stream) shares."""

    rid: str
    created: int
    model: str
    chat: bool
    prompt_tokens: int

    @property
    def obj(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    @property
    def chunk_obj(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def head(self, obj: str) -> dict[str, Any]:
        """Fields in protocol.py's order: id, object, created, model."""
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model}

    def chunk(self, index: int, delta: Any, finish: dict[str, Any] | None = None) -> dict[str, Any]:
        """ChatCompletionStreamResponse / CompletionStreamResponse with one choice."""
        choice: dict[str, Any] = {"index": index}
        if self.chat:
            choice["delta"] = {"role": delta.get("role"), "content": delta.get("content"),
                               "reasoning_content": None, "tool_calls": None}
        else:
            choice["text"] = delta
        choice.update({"logprobs": None, "finish_reason": finish["type"] if finish else None,
                       "matched_stop": finish.get("matched") if finish else None})
        return {**self.head(self.chunk_obj), "choices": [choice], "usage": None}


class Handler(BaseHTTPRequestHandler):
    """SGLang's routes on the stdlib server (uvicorn's headers and access log)."""

    protocol_version = "HTTP/1.1"
    app: App  # set on the subclass made in serve()

    def version_string(self) -> str:
        return "uvicorn"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _access(self, status: int) -> None:
        phrase = HTTPStatus(status).phrase
        log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} '
            f'{self.path} HTTP/1.1" {status} {phrase}')

    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response(status)
        if body or status != 200 or ctype != "application/json":
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _authorized(self) -> bool:
        key = self.app.api_key
        path = self.path.split("?")[0]
        if not key or self.command == "OPTIONS" or path.startswith(("/health", "/metrics")):
            return True
        if self.headers.get("Authorization") == "Bearer " + key:
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        path = self.path.split("?")[0]
        app = self.app
        if path in ("/health", "/health_generate"):
            self._send(200 if app.engine.health() else 503)
        elif path == "/get_model_info":
            self._json(200, app.model_info())
        elif path == "/get_server_info":
            self._json(200, app.server_info())
        elif path == "/get_load":
            running, queued = app.engine.load
            self._json(200, [{"num_reqs": running, "num_waiting_reqs": queued}])
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [app.model_card(app.name)]})
        elif path.startswith("/v1/models/"):
            name = path[len("/v1/models/"):]
            if name == app.name:
                self._json(200, app.model_card(name))
            else:
                self._json(404, {"error": {"message": f"The model '{name}' does not exist",
                                           "type": "invalid_request_error", "param": "model",
                                           "code": "model_not_found"}})
        elif path == "/metrics" and app.args["enable_metrics"]:
            self._send(200, app.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/ping":
            self._send(200)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if not self._authorized():
            return
        path = self.path.split("?")[0]
        routes = {"/v1/chat/completions": self._chat, "/v1/completions": self._completions,
                  "/generate": self._generate}
        if path not in routes:
            get_only = ("/health", "/health_generate", "/get_model_info", "/get_server_info",
                        "/v1/models", "/metrics")
            if path in get_only:
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})
            return
        try:
            body = self._body(json_only=path.startswith("/v1/"))
            routes[path](body)
        except BadRequest as err:
            self._json(400, error_body(400, str(err), err.err_type))
        except EngineError as err:
            self._json(500, error_body(500, str(err), "InternalServerError"))
        except (BrokenPipeError, ConnectionResetError):
            return

    def _body(self, json_only: bool) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        media = (self.headers.get("content-type") or "").split(";")[0].strip().lower()
        if json_only and media != "application/json":
            raise BadRequest("[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media "
                             "Type: Only 'application/json' is allowed\", 'type': 'value_error'}]",
                             "Bad Request")
        try:
            body = json.loads(raw or b"{}")
        except ValueError as err:
            raise BadRequest(f"[{{'type': 'json_invalid', 'msg': 'JSON decode error', 'ctx': "
                             f"{{'error': '{err}'}}}}]", "Bad Request") from None
        if not isinstance(body, dict):
            raise BadRequest("Input should be a valid dictionary", "Bad Request")
        return body

    # -- streaming ------------------------------------------------------------------
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)

    def _chunk(self, data: str) -> None:
        raw = data.encode()
        self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _sse(self, obj: Any) -> None:
        self._chunk("data: " + json.dumps(obj) + "\n\n")

    # -- endpoints --------------------------------------------------------------------
    def _chat(self, body: dict[str, Any]) -> None:
        prompt = chat_prompt(body.get("messages"))
        self._openai(body, [prompt], chat=True, default_max=None)

    def _completions(self, body: dict[str, Any]) -> None:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = prompt
        elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            prompts = [" ".join(map(str, prompt))]
        else:
            raise BadRequest("1 validation error for CompletionRequest\nprompt\n  Field required",
                             "Bad Request")
        self._openai(body, prompts, chat=False, default_max=16)

    def _openai(self, body: dict[str, Any], prompts: list[str], chat: bool,
                default_max: int | None) -> None:
        app = self.app
        sampling = Sampling(
            max_new=_positive(body, "max_completion_tokens", "max_tokens", default=default_max),
            stops=_stops(body), ignore_eos=bool(body.get("ignore_eos")))
        n = _positive(body, "n", default=1) or 1
        for prompt in prompts:
            if len(tokenize(prompt)) >= app.model.context_len:
                raise BadRequest(f"The input ({len(tokenize(prompt))} tokens) is longer than the "
                                 f"model's context length ({app.model.context_len} tokens).")
        reply = Reply(rid=uuid.uuid4().hex, created=int(time.time()), chat=chat,
                      model=str(body.get("model") or "default"),
                      prompt_tokens=sum(len(tokenize(p)) for p in prompts))
        jobs = [(i * n + k, p) for i, p in enumerate(prompts) for k in range(n)]
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(options.get("include_usage")) or bool(
                app.args["stream_response_default_include_usage"])
            self._stream(reply, jobs, sampling, include_usage)
            return
        choices = []
        completion = 0
        for index, prompt in jobs:
            text, finish, count = self._run(prompt, sampling, index)
            completion += count
            choice: dict[str, Any] = {"index": index}
            if chat:
                choice["message"] = {"role": "assistant", "content": text,
                                     "reasoning_content": None, "tool_calls": None}
            else:
                choice["text"] = text
            choice.update({"logprobs": None, "finish_reason": finish["type"],
                           "matched_stop": finish.get("matched")})
            choices.append(choice)
        self._json(200, {**reply.head(reply.obj), "choices": choices,
                         "usage": _usage(reply.prompt_tokens, completion),
                         "metadata": {"weight_version": app.args["weight_version"]}})

    def _run(self, prompt: str, sampling: Sampling,
             index: int) -> tuple[str, dict[str, Any], int]:
        """Text, finish reason and completion tokens (the EOS token counts, as in SGLang)."""
        text, count, finish = "", 0, {"type": "length"}
        for piece, done in self.app.engine.generate(prompt, sampling, index):
            if done is None:
                text += piece
                count += 1
            else:
                finish = done
                count += isinstance(done.get("matched"), int)
        return text, finish, count

    def _stream(self, reply: Reply, jobs: list[tuple[int, str]], sampling: Sampling,
                include_usage: bool) -> None:
        """SSE as serving_chat.py sends it: role chunk, content chunks, finish chunk,
        optional usage chunk (choices []), then ``data: [DONE]``."""
        completion = 0
        started = False
        try:
            for index, prompt in jobs:
                gen = self.app.engine.generate(prompt, sampling, index)
                first = next(gen)  # the prefill runs before any byte is sent
                if not started:
                    self._start_stream()
                    started = True
                if reply.chat:
                    self._sse(reply.chunk(index, {"role": "assistant", "content": ""}))
                for piece, done in itertools.chain([first], gen):
                    if done is None:
                        completion += 1
                        self._sse(reply.chunk(index, {"role": None, "content": piece}
                                              if reply.chat else piece))
                        continue
                    completion += isinstance(done.get("matched"), int)
                    self._sse(reply.chunk(index, {"role": None, "content": None}
                                          if reply.chat else "", done))
            if include_usage:
                self._sse({**reply.head(reply.chunk_obj), "choices": [],
                           "usage": _usage(reply.prompt_tokens, completion)})
        except EngineError as err:
            if not started:
                raise
            self._sse({"error": error_body(500, str(err), "InternalServerError")})
        self._end_stream()

    def _generate(self, body: dict[str, Any]) -> None:
        """SGLang's native /generate (what its own warm-up sends)."""
        text = body.get("text")
        if not isinstance(text, str):
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        params = body.get("sampling_params") or {}
        sampling = Sampling(max_new=_positive(params, "max_new_tokens", default=128),
                            stops=_stops(params), ignore_eos=bool(params.get("ignore_eos")))
        rid = uuid.uuid4().hex
        began = time.monotonic()
        out, finish, count = self._run(text, sampling, 0)
        self._json(200, {"text": out, "meta_info": {
            "id": rid, "finish_reason": finish, "prompt_tokens": len(tokenize(text)),
            "weight_version": self.app.args["weight_version"], "completion_tokens": count,
            "cached_tokens": 0, "e2e_latency": round(time.monotonic() - began, 4)}})


def serve(node: Node, model: Model, engine: Engine) -> None:
    """Rank 0: uvicorn's start-up lines, the warm-up, then requests until SIGTERM."""
    args = node.args
    app = App(engine, args, model)
    handler = type("BoundHandler", (Handler,), {"app": app})
    try:
        server = ThreadingHTTPServer((args["host"], args["port"]), handler)
    except OSError as err:
        code = os_errno(err)
        raise Fatal(f"[Errno {code}] error while attempting to bind on address "
                    f"('{args['host']}', {args['port']}): {os.strerror(code).lower()}") from None
    server.daemon_threads = True
    log(f"Started server process [{os.getpid()}]")
    log("Waiting for application startup.")
    log("Application startup complete.")
    log(f"Uvicorn running on http://{args['host']}:{args['port']} (Press CTRL+C to quit)")

    def warmup() -> None:
        if not args["skip_server_warmup"]:
            try:
                for _ in engine.generate("The capital city of France is", Sampling(max_new=8)):
                    pass
            except EngineError as err:
                log(f"Initialization failed. warmup error: {err}")
                engine.status = "UnHealthy"
                return
        engine.status = "Up"
        log("The server is fired up and ready to roll!")

    threading.Thread(target=warmup, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()


# ----------------------------------------------------------------------------- main
def _terminate(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def run(argv: list[str]) -> int:
    args = parse_args(argv)  # argparse exits 2 on an unknown flag, as SGLang does
    log(f"server_args={args_repr(args)}")
    check_args(args)
    model = load_model_config(args["model_path"], args["context_length"])
    nnodes, rank = args["nnodes"], args["node_rank"]
    addr = args["dist_init_addr"] or f"127.0.0.1:{args['nccl_port'] or 0}"
    host, _, port = addr.rpartition(":")
    node = Node(args=args, rank=rank, nnodes=nnodes, dist_host=host, dist_port=int(port),
                deadline=time.monotonic() + (args["dist_timeout"] or DEFAULT_DIST_TIMEOUT))
    began = time.monotonic()
    log("Init torch distributed begin.", node.tp)
    node.resolve_addresses()
    node.open_listeners()
    if nnodes > 1:
        node.rendezvous(model)
        node.gloo_mesh()
        node.nccl_links()
        log("Custom allreduce is disabled because this process group spans across nodes.", node.tp)
        node.message_queue()
    else:
        node.world = {0: {**node.hello(model), "node": host}}
        emit(f"[Gloo] Rank {node.tp} is connected to 0 peer ranks. Expected number of connected "
             "peer ranks is : 0")
    node.close_listeners()
    log(f"Init torch distributed ends. elapsed={time.monotonic() - began:.2f} s, "
        "mem usage=0.00 GB", node.tp)
    log(f"Load weight begin. avail mem={mem_available_gb():.2f} GB", node.tp)
    t0 = time.monotonic()
    read_weights(args["model_path"])
    shard = model.weight_bytes / args["tp_size"] / 2**30
    log(f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type={model.architecture}, "
        f"dtype=torch.{model.dtype}, avail mem={mem_available_gb():.2f} GB, "
        f"mem usage={shard:.2f} GB.", node.tp)
    if rank:
        log(f"KV Cache is allocated. #tokens: {20 * model.context_len}, K size: 0.00 GB, "
            "V size: 0.00 GB", node.tp)
        worker_loop(node, model)
        return 0
    engine = Engine(node, model)
    engine.ping()
    log(f"KV Cache is allocated. #tokens: {engine.max_total_tokens}, K size: 0.00 GB, "
        "V size: 0.00 GB", node.tp)
    log(f"max_total_num_tokens={engine.max_total_tokens}, chunked_prefill_size="
        f"{args['chunked_prefill_size']}, max_prefill_tokens={args['max_prefill_tokens']}, "
        f"max_running_requests={args['max_running_requests']}, context_len={model.context_len}, "
        f"available_gpu_mem={mem_available_gb():.2f} GB", node.tp)
    serve(node, model, engine)
    return 0


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except Fatal as err:
        for line in err.lines:
            emit(line)
        return 1
    except (Terminated, KeyboardInterrupt):
        log("Received sigterm; shutting down.")
        return 0


if __name__ == "__main__":
    sys.exit(main())
