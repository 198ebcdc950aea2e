"""The model side of a rank: config, weights, memory pool, CUDA graph capture, forward passes.

The lab's Sparks have no GPU, so the model is a toy whose every token needs
every rank: per layer TP0 sends a hidden-state-sized vector to every rank
and combines their partial results (two all-reduces per layer, as
Megatron-style TP does), so a dead rank or a broken link fails generation
and ``/health``, and a stopped one (SIGSTOP) stops every step of the group.
Concurrent requests share forward passes (continuous batching up to
``--max-running-requests``; a prefill batch of the new requests first, else a
decode step of the running ones, the release's order): figures of a toy
model, not of SGLang. What the rank logs on the way (weights, KV cache,
capture) is the release's, in the release's order (release.py); the
progress metrics move at the release's points of a request's life (see "the
engine" below).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import args as server_args
from . import release as r
from .rendezvous import (
    FRAME_SIZE,
    MAGIC,
    OP_PING,
    OP_REPLY,
    OP_STEP,
    Node,
    frame,
    os_errno,
    recv_exact,
    unframe,
)

HEALTH_CHECK_TIMEOUT = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
GB = 1 << 30

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
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


class EngineError(Exception):
    """The tensor-parallel group cannot compute (a rank or a link is gone)."""


# ---------------------------------------------------------------------- model
@dataclass
class Model:
    """What the ranks know about the model (from config.json, or toy defaults)."""

    path: str
    architecture: str = "LlamaForCausalLM"
    model_type: str | None = None
    dtype: str = "bfloat16"
    hidden_size: int = 1024
    num_layers: int = 4
    num_heads: int = 8
    num_kv_heads: int = 8
    context_len: int = 8192
    vocab_size: int = 32000
    eos_token_id: int = 2
    weight_bytes: int = 0
    weight_files: int = 0
    signature: str = "no-config"

    @property
    def hidden_bytes(self) -> int:
        """Bytes of one token's hidden state in bf16: what a decode all-reduce moves."""
        return self.hidden_size * 2

    @property
    def rounds(self) -> int:
        """All-reduces per forward pass: attention and MLP of every layer."""
        return 2 * self.num_layers

    def kv_bytes_per_token(self, tp_size: int) -> int:
        """K (or V) bytes per token on one rank: layers x local KV heads x head dim x 2 bytes."""
        head_dim = max(1, self.hidden_size // max(1, self.num_heads))
        return self.num_layers * max(1, self.num_kv_heads // tp_size) * head_dim * 2


def load_model_config(path: str, context_length: int | None) -> Model:
    """Check the model path and read config.json, failing as transformers does."""
    root = Path(path)
    if not root.is_dir():
        if path.startswith(("/", ".", "~")):
            raise r.HFValidationError(r.HF_REPO_ID(path=path))
        raise OSError(r.HF_OFFLINE(path=path))
    model = Model(path=path)
    config = root / "config.json"
    if config.is_file():
        raw = config.read_bytes()
        try:
            cfg = json.loads(raw)
        except ValueError:
            raise OSError(r.HF_BAD_JSON(path=config)) from None
        model.signature = hashlib.sha256(raw).hexdigest()[:16]
        model.architecture = (cfg.get("architectures") or [model.architecture])[0]
        model.model_type = cfg.get("model_type")
        model.dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or model.dtype)
        model.hidden_size = max(8, int(cfg.get("hidden_size", model.hidden_size)))
        model.num_layers = max(1, int(cfg.get("num_hidden_layers", model.num_layers)))
        model.num_heads = max(1, int(cfg.get("num_attention_heads", model.num_heads)))
        model.num_kv_heads = max(1, int(cfg.get("num_key_value_heads", model.num_heads)))
        model.context_len = int(cfg.get("max_position_embeddings", model.context_len))
        model.vocab_size = int(cfg.get("vocab_size", model.vocab_size))
        eos = cfg.get("eos_token_id", model.eos_token_id)
        model.eos_token_id = int(eos[0] if isinstance(eos, list) and eos else eos or 2)
    if context_length:
        model.context_len = context_length
    files = [f for f in root.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES]
    model.weight_bytes = sum(f.stat().st_size for f in files)
    model.weight_files = len(files)
    return model


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


# ------------------------------------------------------------- start-up steps
def load_weights(node: Node, model: Model) -> None:
    """ModelRunner.load_model: read every weight file through (the I/O of a real load), with
    the multi-thread loader's bar on global rank 0 (weight_utils.py:1084), then the barrier."""
    args = node.args
    began = time.monotonic()
    before = mem_available_gb()
    r.log(r.LOAD_BEGIN, node.prefix, avail=before)
    files = sorted(
        f for f in Path(model.path).iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES
    )
    bar = (
        r.Progress(len(files), sglang_format=True, desc=r.LOAD_SHARDS())
        if node.rank == 0 and files
        else None
    )
    for f in files:
        with f.open("rb") as fh:
            while fh.read(1 << 22):
                pass
        if bar:
            bar.update()
    if bar:
        bar.close()
    shard = model.weight_bytes / args["tp_size"] / GB
    r.log(
        r.LOAD_END,
        node.prefix,
        elapsed=time.monotonic() - began,
        arch=model.architecture,
        avail=mem_available_gb(),
        usage=shard,
    )
    node.barrier_after_load()


def max_total_tokens(args: dict[str, Any], model: Model) -> int:
    return int(args["max_total_tokens"] or 20 * model.context_len)


def max_running_requests(args: dict[str, Any]) -> int:
    return int(args["max_running_requests"] or 64)


def alloc_memory_pool(node: Node, model: Model) -> int:
    """The KV pool's two log lines (memory_pool.py:1670, kv_cache_configurator.py:258)."""
    tokens = max_total_tokens(node.args, model)
    size_gb = tokens * model.kv_bytes_per_token(node.args["tp_size"]) / GB
    r.log(
        r.KV_ALLOCATED,
        node.prefix,
        dtype=f"torch.{model.dtype}",
        tokens=tokens,
        k=size_gb,
        v=size_gb,
    )
    r.log(r.MEMORY_POOL_END, node.prefix, avail=mem_available_gb())
    return tokens


def capture_cuda_graphs(node: Node, model: Model) -> None:
    """capture_cuda_graphs (cuda_graph_setup.py:104): prefill (breakable, the CUDA default),
    then decode (full), each with its begin/end lines on every rank and the tqdm bar on TP0.
    Each shape runs one toy forward of that many tokens on this rank."""
    args = node.args
    if args["disable_cuda_graph"]:
        return
    runs = max_running_requests(args)
    prefill_backend = args["cuda_graph_backend_prefill"] or "breakable"
    if args["disable_prefill_cuda_graph"]:
        prefill_backend = "disabled"
    decode_backend = args["cuda_graph_backend_decode"] or "full"
    if args["disable_decode_cuda_graph"]:
        decode_backend = "disabled"
    if prefill_backend != "disabled":
        sizes = args["cuda_graph_bs_prefill"] or server_args.prefill_capture_sizes(
            args["cuda_graph_max_bs_prefill"] or args["chunked_prefill_size"]
        )
        sizes = sorted(s for s in sizes if s <= runs * model.context_len)
        _capture(node, model, sizes, prefill=True, backend=prefill_backend)
    if decode_backend != "disabled":
        max_bs = args["cuda_graph_max_bs_decode"] or (512 if args["tp_size"] >= 4 else 256)
        sizes = args["cuda_graph_bs_decode"] or server_args.decode_capture_sizes(max_bs)
        sizes = sorted({*(s for s in sizes if s <= runs), *([runs] if max(sizes) > runs else [])})
        _capture(node, model, sizes, prefill=False, backend=decode_backend)


def _capture(node: Node, model: Model, sizes: list[int], prefill: bool, backend: str) -> None:
    began, before = time.monotonic(), mem_available_gb()
    if prefill:
        r.log(r.CAPTURE_PREFILL_BEGIN, node.prefix, backend=backend, num_tokens=sizes, avail=before)
    else:
        r.log(r.CAPTURE_DECODE_BEGIN, node.prefix, backend=backend, bs=sizes, avail=before)
    # tqdm on TP rank 0 only (decode_cuda_graph_runner.py:886); largest shape first.
    bar = r.Progress(len(sizes)) if node.tp == 0 else None
    key = layer_key(model, node.rank, 0)
    for size in reversed(sizes):
        if bar:
            avail = mem_available_gb()
            bar.set_description(
                r.CAPTURING_NUM_TOKENS(num_tokens=size, avail=avail)
                if prefill
                else r.CAPTURING_BATCHES(bs=size, avail=avail)
            )
        partial(bytes(model.hidden_bytes * min(size, 64)), key, model.hidden_bytes)
        if bar:
            bar.update()
    if bar:
        bar.close()
    after = mem_available_gb()
    msg = r.CAPTURE_PREFILL_END if prefill else r.CAPTURE_DECODE_END
    r.log(
        msg,
        node.prefix,
        elapsed=time.monotonic() - began,
        usage=max(0.0, before - after),
        avail=after,
    )


# ---------------------------------------------------------------- the engine
# What /metrics shows moves where sglang 0.5.17 moves it (paths under sglang/srt/):
# - the tokenizer side (observability/metrics_collector.py:1448 TokenizerMetricsCollector,
#   labels model_name and engine_type, tokenizer_manager.py:681-684): prompt_tokens_total,
#   generation_tokens_total and num_requests_total (+ is_streaming) and the e2e latency
#   grow once, when a request FINISHES (observe_one_finished_request,
#   metrics_collector.py:1708-1725, called from tokenizer_manager.py:2882); the time to
#   first token at its first output (tokenizer_manager.py:2849). Requests with
#   log_metrics=False (/health's, http_server.py:679) are not counted
#   (tokenizer_manager.py:2470).
# - the scheduler side (metrics_collector.py:238 SchedulerMetricsCollector, labels
#   model_name, engine_type, tp_rank, pp_rank, moe_ep_rank, metrics_collector.py:1082-1088):
#   realtime_tokens_total{mode} grows after EVERY forward step: prefill_compute by the
#   batch's input tokens after a prefill (scheduler_components/metrics_reporter.py:615-619,
#   called from batch_result_processor.py:368), decode by the batch size after a decode
#   step (metrics_reporter.py:704-709, batch_result_processor.py:906-913); a series exists
#   from its first increment (metrics_collector.py:1240-1243). The gauges (num_running_reqs,
#   num_queue_reqs, gen_throughput, token_usage, cache_hit_rate) are written only by
#   log_stats (metrics_collector.py:1286): after each prefill, running = the running batch
#   WITHOUT the new requests (PrefillStats.from_adder(adder, running_batch.reqs),
#   scheduler.py:3320-3322; metrics_reporter.py:652-656); every decode_log_interval-th
#   decode step (metrics_reporter.py:728, :867-872); and when idle, at once if the running
#   gauge is stale, else every 30 s (metrics_reporter.py:1104-1160, scheduler.py:3953).
# health checks run through the scheduler as any request: they count on its side only.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
# the default buckets of metrics_collector.py:1591-1611 and :1613-1637
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
REALTIME_MODES = ("prefill_compute", "prefill_cache", "decode")  # metrics_collector.py:1234-1237
IDLE_LOG_S = 30.0  # metrics_reporter.py:1123


@dataclass
class Finished:
    """observe_one_finished_request's counters for one value of is_streaming."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0
    e2e: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)


@dataclass
class Gauges:
    """SchedulerStats as log_stats last wrote it (metrics_collector.py:1286-1293)."""

    running: int = 0
    queued: int = 0
    gen_throughput: float = 0.0
    token_usage: float = 0.0
    cache_hit_rate: float = 0.0


@dataclass
class Stats:
    """Counters behind /metrics and the batch log lines."""

    # tokenizer side, by is_streaming ("false"/"true"): a series from its first request
    finished: dict[str, Finished] = field(default_factory=dict)
    # scheduler side
    realtime: dict[str, int] = field(default_factory=dict)
    gauges: Gauges | None = None  # None: log_stats has not run yet
    last_log: float = field(default_factory=time.monotonic)
    recent: deque[tuple[float, int]] = field(default_factory=deque)
    forward_steps: int = 0
    decode_steps: int = 0
    last_receive: float = field(default_factory=time.time)

    def throughput(self, window: float = 10.0) -> float:
        now = time.monotonic()
        while self.recent and now - self.recent[0][0] > window:
            self.recent.popleft()
        if not self.recent:
            return 0.0
        return sum(n for _, n in self.recent) / max(now - self.recent[0][0], 1.0)

    def of(self, stream: bool) -> Finished:
        return self.finished.setdefault("true" if stream else "false", Finished())


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
    stream: bool = False  # the is_streaming label (tokenizer_manager.py:2891)
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    text: str = ""
    produced: int = 0
    prefilled: bool = False
    done: bool = False
    began: float = field(default_factory=time.monotonic)


class Engine:
    """TP0's scheduler: continuous batching, one forward pass per step for every running
    sequence, each pass ``2 x num_hidden_layers`` all-reduces over all ranks."""

    def __init__(self, node: Node, model: Model, total_tokens: int) -> None:
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
        self.max_running = max_running_requests(node.args)
        self.max_total_tokens = total_tokens
        self.startup_time = time.time()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="scheduler", daemon=True).start()

    # -- the group -----------------------------------------------------------------
    def _round(self, payload: bytes, layer: int) -> bytes:
        """One all-reduce: send to every rank, add up every rank's partial result."""
        self.seq += 1
        header = frame(OP_STEP, self.seq, layer, len(payload))
        peers = sorted(self.node.links)
        total = int.from_bytes(partial(payload, self.keys[layer], self.model.hidden_bytes), "big")
        for peer in peers:
            self._io(peer, lambda s: s.sendall(header + payload))
        for peer in peers:
            reply = self._io(peer, lambda s: recv_exact(s, FRAME_SIZE))
            magic, op, seq, _, length = unframe(reply)
            if magic != MAGIC or op != OP_REPLY or seq != self.seq or length != len(payload):
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
            r.log(r.WATCHDOG_TIMEOUT, self.node.prefix, timeout=self.watchdog)
            raise self._break(peer, "watchdog timeout") from None
        except OSError as err:
            raise self._break(peer, os.strerror(os_errno(err))) from None

    def _break(self, peer: int, why: str) -> EngineError:
        ip, port = self.node.world[peer]["nccl"]
        if self.broken is None:
            self.broken = f"rank {peer} ({self.node.world[peer]['host']}, {ip}): {why}"
            self.status = "UnHealthy"
            r.nccl_warn(r.NCCL_PEER_CLOSED, "misc/socket.cc:71", addr=f"{ip}<{port}>")
        return EngineError(f"{r.NCCL_ERROR(error=r.NCCL_REMOTE_ERROR)} ({self.broken})")

    def forward(self, x: bytes) -> bytes:
        for layer in range(self.model.rounds):
            x = self._round(x, layer)
        return x

    # -- the scheduler -------------------------------------------------------------
    def _loop(self) -> None:
        """The release's event loop (scheduler.py:1694-1708): a prefill batch of the waiting
        requests when there are any (get_next_batch_to_run), else one decode step of the
        running batch, else idle housekeeping (on_idle, scheduler.py:3925)."""
        while True:
            with self.cv:
                self.running = [s for s in self.running if not s.done]
                while not self.waiting and not self.running:
                    self._idle_metrics()
                    self.cv.wait(timeout=IDLE_LOG_S)
                    self.running = [s for s in self.running if not s.done]
                room = self.max_running - len(self.running)
                new: list[Seq] = []
                while self.waiting and len(new) < room:
                    s = self.waiting.popleft()
                    if not s.done:  # a client that left before its prefill
                        new.append(s)
                before = len(self.running)
                batch = new or list(self.running)
            if not batch:
                continue
            try:
                if new:
                    self._prefill(new, before)
                else:
                    self._decode(batch)
            except EngineError as err:
                with self.cv:
                    for s in [*self.running, *self.waiting, *new]:
                        s.out.put(err)
                    self.running, self.waiting = [], deque()
                    self.cv.notify_all()

    def _step(self, batch: list[Seq], widths: list[int]) -> None:
        """One forward pass of ``batch`` over every rank (each all-reduce needs each rank's
        reply: a stopped rank stops the step), then one token for each sequence."""
        hb = self.model.hidden_bytes
        x = b"".join(
            hashlib.shake_256(s.state).digest(hb * w) for s, w in zip(batch, widths, strict=True)
        )
        out = self.forward(x)
        self.stats.last_receive = time.time()
        offset = 0
        for s, w in zip(batch, widths, strict=True):
            self._advance(s, out[offset : offset + 64])
            offset += hb * w
        with self.cv:
            self.stats.forward_steps += 1
            self.cv.notify_all()  # a health check waiting for the next batch

    def _prefill(self, new: list[Seq], running_before: int) -> None:
        """A prefill batch (a slice of each prompt's hidden states; the first output token),
        then report_prefill_stats (metrics_reporter.py:530) after its result is processed
        (batch_result_processor.py:368)."""
        started = time.monotonic()
        self._step(new, [min(max(1, s.prompt_len), 32) for s in new])
        tokens = sum(s.prompt_len for s in new)
        with self.cv:
            self.stats.realtime["prefill_compute"] = (
                self.stats.realtime.get("prefill_compute", 0) + tokens
            )
            queued = len(self.waiting)
            self.running.extend(s for s in new if not s.done)
            self._log_stats(running_before, queued)
        if any(s.counted for s in new):
            r.log(
                r.PREFILL_BATCH,
                self.node.prefix,
                new=len(new),
                tokens=tokens,
                usage=self._usage(),
                running=running_before,
                queued=queued,
                throughput=tokens / max(time.monotonic() - started, 1e-6),
            )

    def _decode(self, batch: list[Seq]) -> None:
        """A decode step of the running batch, then report_decode_stats
        (metrics_reporter.py:695): realtime decode tokens every step, the log line and the
        gauges every decode_log_interval-th step (batch_result_processor.py:906-913)."""
        self._step(batch, [1] * len(batch))
        interval = int(self.node.args["decode_log_interval"])
        with self.cv:
            self.stats.realtime["decode"] = self.stats.realtime.get("decode", 0) + len(batch)
            self.stats.decode_steps = (self.stats.decode_steps + 1) % (1 << 30)
            if interval <= 0 or self.stats.decode_steps % interval:
                return
            queued = len(self.waiting)
            tokens = sum(s.prompt_len + s.produced for s in self.running)
            self._log_stats(len(batch), queued)
        r.log(
            r.DECODE_BATCH,
            self.node.prefix,
            running=len(batch),
            tokens=tokens,
            usage=tokens / max(1, self.max_total_tokens),
            throughput=self.stats.throughput(),
            queued=queued,
        )

    def _log_stats(self, running: int, queued: int, throughput: float | None = None) -> None:
        """SchedulerMetricsCollector.log_stats (metrics_collector.py:1286): the gauges. Called
        with ``self.cv`` held."""
        used = sum(s.prompt_len + s.produced for s in self.running)
        self.stats.gauges = Gauges(
            running=running,
            queued=queued,
            gen_throughput=self.stats.throughput() if throughput is None else throughput,
            token_usage=used / max(1, self.max_total_tokens),
        )
        self.stats.last_log = time.monotonic()

    def _idle_metrics(self) -> None:
        """_maybe_log_idle_metrics (metrics_reporter.py:1104): with nothing to run, the gauges
        are written at once when the running gauge is stale, else every 30 s. Called with
        ``self.cv`` held."""
        g = self.stats.gauges
        stale = g is not None and g.running != len(self.running)
        if stale or time.monotonic() > self.stats.last_log + IDLE_LOG_S:
            self._log_stats(len(self.running), len(self.waiting), throughput=0.0)

    def _usage(self) -> float:
        with self.cv:
            used = sum(s.prompt_len + s.produced for s in self.running)
        return used / max(1, self.max_total_tokens)

    def _advance(self, s: Seq, head: bytes) -> None:
        """One token of ``s`` from its slice of the last all-reduce."""
        if s.done:  # its client left during the step: the token goes nowhere
            return
        draw = hashlib.blake2b(s.state + head, digest_size=16).digest()
        s.state = draw + s.state[:16]
        s.prefilled = True
        s.produced += 1
        if s.counted:
            with self.cv:
                self.stats.recent.append((time.monotonic(), 1))
                if s.produced == 1:  # the first output (tokenizer_manager.py:2843-2853)
                    self.stats.of(s.stream).ttft.append(time.monotonic() - s.began)
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
                s.out.put(((s.text + piece)[len(s.text) : cut], None))
            self._finish(s, {"type": "stop", "matched": hit})
            return
        s.text += piece
        s.out.put((piece, None))
        if s.produced >= s.cap:
            self._finish(s, {"type": "length", "length": s.produced})

    def _finish(self, s: Seq, reason: dict[str, Any]) -> None:
        """The request's last output: the tokenizer counts it (observe_one_finished_request,
        metrics_collector.py:1708; tokenizer_manager.py:2882) before its answer goes out
        (tokenizer_manager.py:2460-2470). A request that is abandoned never counts here."""
        s.done = True
        if s.counted:
            with self.cv:
                done = self.stats.of(s.stream)
                done.prompt_tokens += s.prompt_len
                done.generation_tokens += s.produced  # completion_tokens: EOS included
                done.requests += 1
                done.e2e.append(time.monotonic() - s.began)
        s.out.put(("", reason))

    def submit(self, s: Seq) -> None:
        """The request reaches the scheduler's waiting queue; no metric moves on arrival."""
        with self.cv:
            if self.broken:
                raise EngineError(f"{r.NCCL_ERROR(error=r.NCCL_REMOTE_ERROR)} ({self.broken})")
            self.waiting.append(s)
            self.cv.notify()

    @property
    def load(self) -> tuple[int, int]:
        with self.cv:
            return len(self.running), len(self.waiting)

    def snapshot(self) -> dict[str, Any]:
        """The scheduler's load snapshot (sglang 0.5.17 scheduler_components/
        load_inquirer.py get_loads): requests running and waiting, the KV tokens the
        running ones hold, and those plus the waiting ones' prompts."""
        with self.cv:
            used = sum(s.prompt_len + s.produced for s in self.running)
            pending = sum(s.prompt_len for s in self.waiting)
            return {
                "num_running_reqs": len(self.running),
                "num_waiting_reqs": len(self.waiting),
                "num_waiting_uncached_tokens": pending,
                "num_used_tokens": used,
                "num_total_tokens": used + pending,
                "num_active_tokens": used + pending,
                "max_total_num_tokens": self.max_total_tokens,
                "max_running_requests": self.max_running,
                "token_usage": round(used / max(1, self.max_total_tokens), 4),
                "gen_throughput": round(self.stats.throughput(), 2),
            }

    # -- requests ------------------------------------------------------------------
    def generate(
        self, prompt: str, sampling: Sampling, index: int = 0, stream: bool = False
    ) -> Generator[tuple[str, dict[str, Any] | None], None, None]:
        """Yield (text piece, None) per token, then ("", finish_reason)."""
        prompt_len = len(tokenize(prompt))
        limit = self.model.context_len - prompt_len
        max_new = sampling.max_new
        s = Seq(
            state=hashlib.blake2b(f"{index}\x00{prompt}".encode(), digest_size=32).digest(),
            prompt_len=prompt_len,
            cap=min(max_new, limit) if max_new else limit,
            stops=sampling.stops,
            ignore_eos=sampling.ignore_eos,
            stream=stream,
        )
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
        tic = time.time()
        with self.cv:
            busy = bool(self.running or self.waiting)
            steps = self.stats.forward_steps
            if busy:
                # A busy scheduler does not run the health request: its answer goes out
                # after the next batch (scheduler.py:1843-1849, :3844, :3874-3883).
                stepped = self.cv.wait_for(
                    lambda: self.stats.forward_steps > steps or self.broken is not None,
                    timeout=HEALTH_CHECK_TIMEOUT,
                )
                item: Any = ("", None) if stepped and not self.broken else None
        if not busy:
            s = Seq(
                state=b"HEALTH_CHECK_%d" % time.time_ns(),
                prompt_len=1,
                cap=1,
                stops=[],
                counted=False,
            )
            try:
                self.submit(s)
                item = s.out.get(timeout=HEALTH_CHECK_TIMEOUT)
            except (EngineError, queue.Empty):
                item = None
            finally:
                s.done = True
        if not isinstance(item, tuple):
            r.log(
                r.HEALTH_FAILED,
                timeout=HEALTH_CHECK_TIMEOUT,
                tic=time.strftime("%H:%M:%S", time.localtime(tic)),
                last=time.strftime("%H:%M:%S", time.localtime(self.stats.last_receive)),
            )
            self.status = "UnHealthy"
            return False
        self.status = "Up"
        return True


def worker_loop(node: Node, model: Model) -> None:
    """A rank other than TP0: answer every all-reduce round of TP0. When TP0 goes away the
    rank stays where the release's does: waiting for TP0's next broadcast, for ever."""
    keys = [layer_key(model, node.rank, layer) for layer in range(model.rounds)]
    conn = node.links[0]
    while True:
        try:
            magic, op, seq, layer, length = unframe(recv_exact(conn, FRAME_SIZE))
            if magic != MAGIC:
                raise ConnectionResetError(errno.EPROTO, "protocol error")
            if op == OP_PING:
                conn.sendall(frame(OP_REPLY, seq))
                continue
            payload = recv_exact(conn, length)
            reply = partial(payload, keys[layer % len(keys)], model.hidden_bytes)
            conn.sendall(frame(OP_REPLY, seq, layer, len(reply)) + reply)
        except OSError:
            break
    while True:
        time.sleep(3600)
