"""sparkctl's rehearsal-lab stand-in for ``python3 -m sglang.launch_server`` (SGLang 0.5.17).

The lab's simulated Sparks have no GPU. This package takes the real
server's command line and environment and does, over the real fabric, what
a multi-node SGLang start-up does, printing what the release prints in the
order it prints it, then serves SGLang's HTTP API with a toy model whose
every token needs every rank. It runs as ``python3 -m sglang.launch_server``
and as ``runpy.run_module('sglang.launch_server', run_name='__main__')``
(the unit's launcher), and is importable as ``sparkctl_lab.standins.sglang``.

- args.py: the release's parser and ServerArgs (prog ``sglang serve``);
- rendezvous.py: TCPStore, Gloo, NCCL, the TP message queue, real sockets;
- engine.py: weights, KV pool, CUDA graph capture, the toy forward passes;
- server.py: TP0's HTTP server and warm-up, the other ranks' health server;
- release.py: every string printed, with its source in the release.

One process plays the release's main process and its scheduler: scheduler
lines carry the `` TP<n>`` prefix, and a scheduler exception ends the rank
as the release's does (the traceback, SIGQUIT to the main process, which
kills the process tree, itself with SIGKILL).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
import warnings
from types import FrameType
from typing import Any

from . import release as r
from .args import build_parser, check_args, parse_args, server_args_repr
from .engine import (
    VOCAB,
    Engine,
    EngineError,
    Model,
    alloc_memory_pool,
    capture_cuda_graphs,
    layer_key,
    load_model_config,
    load_weights,
    max_running_requests,
    mem_available_gb,
    partial,
    worker_loop,
)
from .rendezvous import DEFAULT_DIST_TIMEOUT, Node, bindable, recv_exact
from .server import dummy_health_server, kill_process_tree, serve

__all__ = [
    "VOCAB",
    "Engine",
    "EngineError",
    "Model",
    "bindable",
    "build_parser",
    "check_args",
    "layer_key",
    "load_model_config",
    "main",
    "parse_args",
    "partial",
    "recv_exact",
    "server_args_repr",
]


def make_node(args: dict[str, Any]) -> Node:
    """The rank and where it meets the others: --dist-init-addr, else (one node, or a group
    started without it) ``host:nccl_port`` on this machine (bootstrap.py:174)."""
    nccl_port = args["nccl_port"] or 0
    addr = str(args["dist_init_addr"] or f"{args['host'] or '127.0.0.1'}:{nccl_port}")
    host, _, port = addr.rpartition(":")
    timeout = float(args["dist_timeout"] or DEFAULT_DIST_TIMEOUT)
    return Node(
        args=args,
        rank=int(args["node_rank"]),
        nnodes=int(args["nnodes"]),
        dist_host=host.strip("[]"),
        dist_port=int(port),
        timeout=timeout,
    )


def scheduler(node: Node, model: Model) -> tuple[Engine | None, float]:
    """Scheduler.__init__ of this rank (ModelRunner: distributed init, weights, memory pool,
    CUDA graphs), in the release's order. Returns TP0's engine."""
    began = time.monotonic()
    before = mem_available_gb()
    r.log(r.INIT_DIST_BEGIN, node.prefix)
    node.resolve_addresses()
    node.open_listeners()
    node.rendezvous()
    if node.nnodes > 1:
        node.gloo_mesh()
        node.nccl_init()
        r.log(r.CUSTOM_AR_CROSS_NODE, node.prefix)
        node.message_queue()
    node.close_listeners()
    r.log(
        r.INIT_DIST_END,
        node.prefix,
        elapsed=time.monotonic() - began,
        mem=max(0.0, before - mem_available_gb()),
    )
    load_weights(node, model)
    tokens = alloc_memory_pool(node, model)
    capture_cuda_graphs(node, model)
    available = mem_available_gb()
    if node.tp == 0:
        args = node.args
        r.log(
            r.MAX_TOTAL_TOKENS,
            node.prefix,
            tokens=tokens,
            chunked=args["chunked_prefill_size"],
            prefill=args["max_prefill_tokens"],
            running=max_running_requests(args),
            context=model.context_len,
            avail=available,
        )
    if node.rank:
        return None, available
    engine = Engine(node, model, tokens)
    engine.start()
    return engine, available


def _graceful(signum: int, frame: FrameType | None) -> None:
    """TokenizerManager's SIGTERM handler and its drain (tokenizer_manager.py:3747, :3090)."""
    r.log(r.SIGTERM_RECEIVED)
    r.log(r.GRACEFUL_EXIT, n=0, rids=[])
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """prepare_server_args, then the launch; errors of the main process propagate (Python
    prints them, exit 1), a scheduler's end the rank by SIGKILL as in the release."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    r.configure(str(args["log_level"]))
    model = load_model_config(str(args["model_path"]), args["context_length"])
    check_args(args)
    r.log(r.SERVER_ARGS, server_args=server_args_repr(args))
    node = make_node(args)
    try:
        engine, available = scheduler(node, model)
    except Exception:
        r.log(r.SCHEDULER_EXCEPTION, node.prefix, traceback=traceback.format_exc())
        r.log(r.SIGQUIT_CHILD)
        kill_process_tree(include_parent=True)
        return 1
    if engine is None:
        dummy_health_server(str(args["host"]), int(args["port"]))
        worker_loop(node, model)
        return 0
    signal.signal(signal.SIGTERM, _graceful)
    try:
        serve(node, model, engine, available)
    finally:
        r.log(r.KILL_TREE, parent=os.getpid(), include=False, pid=os.getpid())
    return 0


if __name__ == "__main__":
    warnings.warn(
        r.LAUNCH_DEPRECATED(),
        UserWarning,
        stacklevel=1,
    )
    sys.exit(main())
