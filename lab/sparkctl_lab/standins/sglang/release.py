"""Every string the stand-in prints, as the pinned release (and what it runs on) prints it.

One :class:`Msg` per message: its ``template`` (``str.format`` fields where
the real program puts values), its ``source`` and, for SGLang's own
strings, the literal ``text`` pieces that occur at the cited place of the
0.5.17 wheel. ``tests/contract/test_release_logs.py`` checks every
``sglang:`` citation against the installed release and every line a
running stand-in prints against these templates, so a line printed here
and nowhere in the release fails there.

Sources are written ``origin:path[:line][@version]``:

- ``sglang:`` the pinned wheel's ``sglang`` package (paths below it);
- ``torch:`` pytorch/pytorch, ``nccl:`` NVIDIA/nccl (tag v2.28.9-1, the
  nccl role's pin; lines of that tag), ``gloo:`` pytorch/gloo,
  ``uvicorn:`` encode/uvicorn, ``tqdm:`` tqdm/tqdm, ``transformers:``
  huggingface/transformers, ``huggingface_hub:`` huggingface/huggingface_hub,
  ``python:`` CPython's standard library, ``zmq:`` zeromq/pyzmq;
- ``fixture:`` a real log excerpt in tests/fixtures/sglang (SOURCES.md).

Also here, because they decide how those strings look on the journal:
SGLang's log prefix (``[%(asctime)s{prefix}] %(message)s`` with `` TP<n>`` in
a scheduler when tp_size > 1, ``sglang:srt/utils/common.py:2173`` and
``sglang:srt/managers/scheduler.py:4853``), NCCL's debug format and its
NCCL_DEBUG levels (``nccl:src/debug.cc``), torch's c10d prefix, and tqdm's
progress bar (``tqdm:tqdm/std.py`` ``format_meter``), which SGLang draws on
the TP0 scheduler only, with carriage returns and one newline at the end.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass

from .version import __version__

# The NCCL version the stand-in reports: the nccl role's pin (v2.28.9-1). The
# release gets its NCCL from torch's wheel; the image's may differ.
NCCL_VERSION = "2.28.9"
NCCL_VERSION_CODE = 22809


@dataclass(frozen=True)
class Msg:
    """One message: how it is rendered and where it comes from."""

    template: str
    source: str
    text: tuple[str, ...] = ()
    level: int = logging.INFO

    def __call__(self, **fields: object) -> str:
        return self.template.format(**fields)


# ------------------------------------------------------------------ start-up
# sglang/launch_server.py:56: warnings.warn(..., UserWarning, stacklevel=1),
# printed by Python's warnings module (python:Lib/warnings.py _formatwarnmsg_impl).
LAUNCH_DEPRECATED = Msg(
    "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
    "recommended entrypoint.\n  Example: sglang serve --model-path <model> [options]",
    "sglang:launch_server.py:56",
    (
        "'python -m sglang.launch_server' is still supported, but ",
        "'sglang serve' is the recommended entrypoint.\\n",
        "  Example: sglang serve --model-path <model> [options]",
    ),
)
PY_WARNING = Msg(
    "{filename}:{lineno}: {category}: {message}\n  {line}",
    "python:Lib/warnings.py (_formatwarnmsg_impl)",
)
# Deprecated flags: printed while argparse runs, before logging is configured,
# so logging's last-resort handler prints the bare message (ANSI yellow).
DEPRECATED_FLAG = Msg(
    "\033[1;33m'{option}' is deprecated and will be removed in a future release."
    "{replacement}\033[0m",
    "sglang:srt/arg_groups/argparse_actions.py:64",
    (
        "is deprecated and will be removed in a future release.{replacement}",
        " Use '{self.new_flag}' instead.",
    ),
    logging.WARNING,
)
SERVER_ARGS = Msg(
    "server_args={server_args}",
    "sglang:srt/entrypoints/engine.py:1059",
    ('logger.info(f"{server_args=}")',),
)

# ------------------------------------------------ torch.distributed rendezvous
INIT_DIST_BEGIN = Msg(
    "Init torch distributed begin.",
    "sglang:srt/distributed/bootstrap.py:62",
    ("Init torch distributed begin.",),
)
INIT_DIST_END = Msg(
    "Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={mem:.2f} GB",
    "sglang:srt/distributed/bootstrap.py:127",
    ("Init torch distributed ends. elapsed=", " s, ", "mem usage=", " GB"),
)
# torch's TCPStore / socket layer (torch:torch/csrc/distributed/c10d/socket.cpp
# SocketConnectOp::tryConnect): refused and reset connects are retried without
# a word; other errors are warned about and retried until the timeout.
C10D_CONNECT_FAILED = Msg(
    "[c10d] The client socket has failed to connect to [{host}]:{port} (errno: {errno} - "
    "{strerror}).",
    "torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::tryConnect)",
    level=logging.WARNING,
)
C10D_CONNECT_TIMEOUT = Msg(
    "[c10d] The client socket has timed out after {ms}ms while trying to connect to ({host}, "
    "{port}).",
    "torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::throwTimeoutError)",
    level=logging.ERROR,
)
DIST_CLIENT_TIMEOUT = Msg(
    "The client socket has timed out after {ms}ms while trying to connect to ({host}, {port}).",
    "torch:torch/csrc/distributed/c10d/socket.cpp (SocketConnectOp::throwTimeoutError)",
)
DIST_LISTEN_FAILED = Msg(
    "The server socket has failed to listen on any local network address. port: {port}, "
    "useIpv6: false, code: -{code}, name: {name}, message: {message}",
    "torch:torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp (fixture: "
    "port_in_use_dist_port_tgi1156.log has the older socket.cpp form)",
)
DIST_CLIENTS_JOINED = Msg(
    "Timed out after {seconds} seconds waiting for clients. {joined}/{world} clients joined.",
    "torch:torch/csrc/distributed/c10d/TCPStore.cpp (TCPStore::waitForWorkers)",
)
DIST_RECV_CLOSED = Msg(
    "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown "
    "or crash?",
    "torch:torch/csrc/distributed/c10d/Utils.hpp (recvBytes)",
)

# -------------------------------------------------------------------- Gloo
GLOO_CONNECTED = Msg(
    "[Gloo] Rank {rank} is connected to {peers} peer ranks. Expected number of connected peer "
    "ranks is : {peers}",
    "gloo:gloo/rendezvous/context.cc (Context::connectFullMesh)",
)
GLOO_LOOPBACK = Msg(
    "Warning: Unable to resolve hostname to a (local) address. Using the loopback address as "
    "fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. "
    "(function operator())",
    "torch:torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (fixture: "
    "gloo_loopback_vllm_backport14.log)",
    level=logging.WARNING,
)
GLOO_NO_ADDRESS = Msg(
    "[enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. "
    "Unable to find address for: {name}",
    "gloo:gloo/transport/tcp/device.cc:84 (fixture: gloo_no_address_awsdoeks51.log)",
)
# Recent torch wheels print third_party paths as /pytorch/third_party/... (the
# fixtures, from older wheels, have ../third_party/...); line numbers as there.
GLOO_PEER_CLOSED = Msg(
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[{ip}]:{port}",
    "gloo:gloo/transport/tcp/pair.cc (Pair::read)",
)
GLOO_FULL_MESH = Msg(
    "Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:144] "
    "{detail}",
    "torch:torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (fixture: "
    "gloo_connectfullmesh_sglang3226.log)",
    level=logging.ERROR,
)

# -------------------------------------------------------------------- NCCL
SGLANG_NCCL = Msg(
    "sglang is using nccl=={version}",
    "sglang:srt/distributed/device_communicators/pynccl.py:84",
    ('"sglang is using nccl==%s"',),
)
NCCL_IFNAME_ENV = Msg(
    "NCCL_SOCKET_IFNAME set by environment to {spec}", "nccl:src/misc/socket.cc:364@v2.28.9-1"
)
NCCL_BOOTSTRAP = Msg("Bootstrap: Using {ifname}:{ip}<0>", "nccl:src/bootstrap.cc:121@v2.28.9-1")
NCCL_NO_IFACE = Msg("Bootstrap : no socket interface found", "nccl:src/bootstrap.cc:114@v2.28.9-1")
NCCL_VERSION_LINE = Msg("NCCL version {version}+cuda13.0", "nccl:src/init.cc:603@v2.28.9-1")
NCCL_IB_NONE = Msg("NET/IB : No device found.", "nccl:src/transport/net_ib.cc:826@v2.28.9-1")
NCCL_PLUGIN_FAILED = Msg(
    "Failed to initialize NET plugin {name}", "nccl:src/plugin/net.cc:225@v2.28.9-1"
)
NCCL_SOCKET_USING = Msg(
    "NET/Socket : Using [0]{ifname}:{ip}<0>", "nccl:src/transport/net_socket.cc:76@v2.28.9-1"
)
NCCL_PLUGIN_INIT = Msg("Initialized NET plugin {name}", "nccl:src/plugin/net.cc:187@v2.28.9-1")
NCCL_PLUGIN_ASSIGNED = Msg(
    "Assigned NET plugin {name} to comm", "nccl:src/plugin/net.cc:244@v2.28.9-1"
)
NCCL_USING_NETWORK = Msg("Using network {name}", "nccl:src/init.cc:428@v2.28.9-1")
NCCL_CHANNEL = Msg(
    "Channel {channel:02d}/0 : {src}[0] -> {dst}[0] [{way}] via NET/{name}/0",
    "nccl:src/transport/net.cc:313@v2.28.9-1",
)
NCCL_INIT_COMPLETE = Msg(
    "ncclCommInitRank comm 0x{comm:x} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId "
    "f01000 commId 0x{comm_id:x} - Init COMPLETE",
    "nccl:src/init.cc:1598@v2.28.9-1",
)
NCCL_CONNECT_RETRY = Msg(
    "socketPollConnect: connect to {addr} returned {strerror}, retrying ({n}/34) after sleep "
    "for {ms} msec",
    "nccl:src/misc/socket.cc:587@v2.28.9-1",
)
NCCL_CONNECT_EXCEEDED = Msg(
    "socketPollConnect: connect to {addr} returned {strerror}, exceeded error retry count after "
    "{n} attempts",
    "nccl:src/misc/socket.cc:582@v2.28.9-1",
)
NCCL_CONNECT_FAILED = Msg(
    "socketPollConnect: connect to {addr} failed : {strerror}",
    "nccl:src/misc/socket.cc:596@v2.28.9-1",
)
NCCL_PEER_CLOSED = Msg(
    "socketProgress: Connection closed by remote peer {addr}",
    "nccl:src/misc/socket.cc:71@v2.28.9-1",
)
NCCL_UNWIND = Msg("{where} -> {code}", "nccl:src/include/checks.h (NCCLCHECK unwinding)")
# ncclGetErrorString (nccl:src/init.cc:2687-2691@v2.28.9-1) inside SGLang's
# pynccl NCCL_CHECK: RuntimeError(f"NCCL error: {error_str}").
NCCL_ERROR = Msg(
    "NCCL error: {error}",
    "sglang:srt/distributed/device_communicators/pynccl_wrapper.py:461",
    ('raise RuntimeError(f"NCCL error: {error_str}")',),
)
NCCL_SYSTEM_ERROR = "unhandled system error (run with NCCL_DEBUG=INFO for details)"
NCCL_REMOTE_ERROR = "remote process exited or there was a network error"
NCCL_INVALID_USAGE = "invalid usage (run with NCCL_DEBUG=WARN for details)"

CUSTOM_AR_CROSS_NODE = Msg(
    "CustomAllreduce is disabled because this process group spans across nodes.",
    "sglang:srt/distributed/device_communicators/custom_all_reduce_utils.py:482",
    ('f"{cls_name} is disabled because this process group" " spans across nodes."',),
    logging.WARNING,
)

# ------------------------------------------------------------ weights, memory
LOAD_BEGIN = Msg(
    "Load weight begin. avail mem={avail:.2f} GB",
    "sglang:srt/model_executor/model_runner.py:1012",
    ('f"Load weight begin. avail mem=',),
)
LOAD_SHARDS = Msg(
    "Multi-thread loading shards",
    "sglang:srt/model_loader/weight_utils.py:1088",
    ('desc="Multi-thread loading shards"',),
)
LOAD_END = Msg(
    "Load weight end. elapsed={elapsed:.2f} s, type={arch}, avail mem={avail:.2f} GB, "
    "mem usage={usage:.2f} GB.",
    "sglang:srt/model_executor/model_runner.py:1100",
    (
        'f"Load weight end. "',
        'f"elapsed={self.weight_load_time:.2f} s, "',
        'f"type={type(self.model).__name__}, "',
        'f"avail mem={after_avail_memory:.2f} GB, "',
        'f"mem usage={self.weight_load_mem_usage:.2f} GB."',
    ),
)
UNBALANCED_LOADING = Msg(
    "TP rank {tp_rank} could finish the model loading, but there are other ranks that didn't "
    "finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node.",
    "sglang:srt/model_executor/model_runner_components/load_model_utils.py:335",
    ("could finish the model loading, but there are other ranks that didn't finish loading.",),
)
MONITORED_BARRIER_PEER = Msg(
    "Rank {rank} successfully reached monitoredBarrier, but received errors while waiting for "
    "send/recv from rank 0. Please check rank 0 logs for faulty rank.",
    "torch:torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier; fixture: "
    "peer_lost_sglang5602.log)",
)
KV_ALLOCATED = Msg(
    "KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, K size: {k:.2f} GB, "
    "V size: {v:.2f} GB",
    "sglang:srt/mem_cache/memory_pool.py:1670",
    (
        'else "KV Cache"',
        'f"{cache_name} is allocated. dtype: {self.dtype}, "',
        'f"#tokens: {num_tokens}, K size: {k_size_GB:.2f} GB, "',
        'f"V size: {v_size_GB:.2f} GB"',
    ),
)
MEMORY_POOL_END = Msg(
    "Memory pool end. avail mem={avail:.2f} GB",
    "sglang:srt/mem_cache/kv_cache_configurator.py:258",
    ('f"Memory pool end. "', 'f"avail mem='),
)

# ------------------------------------------------------------ CUDA graphs
CAPTURE_PREFILL_BEGIN = Msg(
    "Capture target prefill CUDA graph begin. backend={backend}, num_tokens={num_tokens}, "
    "avail mem={avail:.2f} GB",
    "sglang:srt/model_executor/model_runner_components/cuda_graph_setup.py:363",
    (
        'capture_name = f"{role} prefill"',
        'f"Capture {capture_name} CUDA graph begin. "',
        'f"backend={prefill_backend}, num_tokens={capture_num_tokens}, "',
    ),
)
CAPTURE_PREFILL_END = Msg(
    "Capture target prefill CUDA graph end. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB, "
    "avail mem={avail:.2f} GB.",
    "sglang:srt/model_executor/model_runner_components/cuda_graph_setup.py:374",
    (
        'f"Capture {capture_name} CUDA graph end. "',
        'f"elapsed={capture_time:.2f} s, "',
        'f"mem usage={mem_usage:.2f} GB, avail mem={after_mem:.2f} GB."',
    ),
)
CAPTURE_DECODE_BEGIN = Msg(
    "Capture target decode CUDA graph begin. backend={backend}, num_tokens_per_req=1, bs={bs}, "
    "avail mem={avail:.2f} GB",
    "sglang:srt/model_executor/model_runner_components/cuda_graph_setup.py:430",
    (
        'capture_name = f"{role} decode"',
        'f"Capture {capture_name} {graph_backend[model_runner.device]} begin. "',
        'f"backend={decode_backend}, num_tokens_per_req={num_tokens_per_req}, "',
    ),
)
CAPTURE_DECODE_END = Msg(
    "Capture target decode CUDA graph end. elapsed={elapsed:.2f} s, mem usage={usage:.2f} GB, "
    "avail mem={avail:.2f} GB.",
    "sglang:srt/model_executor/model_runner_components/cuda_graph_setup.py:453",
    (
        'f"Capture {capture_name} {graph_backend[model_runner.device]} end. "',
        'f"elapsed={capture_time:.2f} s, "',
    ),
)
CAPTURING_NUM_TOKENS = Msg(
    "Capturing num tokens (num_tokens={num_tokens} avail_mem={avail:.2f} GB)",
    "sglang:srt/model_executor/runner/prefill_cuda_graph_runner.py:1327",
    ('f"Capturing num tokens ({num_tokens=} {avail_mem=:.2f} GB)"',),
)
CAPTURING_BATCHES = Msg(
    "Capturing batches (bs={bs} avail_mem={avail:.2f} GB)",
    "sglang:srt/model_executor/runner/decode_cuda_graph_runner.py:904",
    ('f"Capturing batches ({bs=} {avail_mem=:.2f} GB)"',),
)
# tqdm's meter: the default bar ('{l_bar}{bar}{r_bar}') and SGLang's BAR_FORMAT.
TQDM_BAR = Msg(
    "{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]",
    "tqdm:tqdm/std.py (tqdm.format_meter, default bar_format)",
)
TQDM_BAR_NO_DESC = Msg(
    "{percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]",
    "tqdm:tqdm/std.py (tqdm.format_meter, before set_description)",
)
SGLANG_BAR = Msg(
    "{desc}: {percentage:3.0f}% Completed | {n}/{total} [{elapsed}<{remaining}, {rate}]",
    "sglang:srt/utils/common.py:1234",
    (
        'BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} '
        '[{elapsed}<{remaining}, {rate_fmt}]"',
    ),
)

MAX_TOTAL_TOKENS = Msg(
    "max_total_num_tokens={tokens}, chunked_prefill_size={chunked}, max_prefill_tokens="
    "{prefill}, max_running_requests={running}, context_len={context}, available_gpu_mem="
    "{avail:.2f} GB",
    "sglang:srt/managers/scheduler.py:1069",
    (
        'f"max_total_num_tokens={self.max_total_num_tokens}, "',
        'f"chunked_prefill_size={get_schedule().chunked_prefill_size}, "',
        'f"max_prefill_tokens={self.max_prefill_tokens}, "',
        'f"max_running_requests={self.max_running_requests}, "',
        'f"context_len={self.model_config.context_len}, "',
        "'available_gpu_mem'",
    ),
)
DUMMY_HEALTH = Msg(
    "Dummy health check server started in background thread at {host}:{port}",
    "sglang:srt/utils/common.py:3166",
    ('f"Dummy health check server started in background thread at ',),
)

# ------------------------------------------------------------------ failures
SCHEDULER_EXCEPTION = Msg(
    "Scheduler hit an exception: {traceback}",
    "sglang:srt/managers/scheduler.py:4951",
    ('logger.error(f"Scheduler hit an exception: {traceback}")',),
    logging.ERROR,
)
SIGQUIT_CHILD = Msg(
    "Received sigquit from a child process. It usually means the child failed.",
    "sglang:srt/entrypoints/engine.py:1651",
    ('"Received sigquit from a child process. It usually means the child failed."',),
    logging.ERROR,
)
KILL_TREE = Msg(
    "kill_process_tree called: parent_pid={parent}, include_parent={include}, pid={pid}",
    "sglang:srt/utils/common.py:2067",
    (
        'f"kill_process_tree called: parent_pid={parent_pid}, "',
        'f"include_parent={include_parent}, pid={os.getpid()}"',
    ),
)
TP_NODES = Msg(
    "tp_size must be divisible by number of nodes",
    "sglang:srt/server_args.py:8704",
    ('"tp_size must be divisible by number of nodes"',),
)
# Python's own traceback lines (python:Lib/traceback.py): the stand-in raises
# the real exception types by their qualified names (below) and lets Python
# format them, as the release's get_exception_traceback() does.
TRACEBACK_HEAD = Msg("Traceback (most recent call last):", "python:Lib/traceback.py")
TRACEBACK_FRAME = Msg('  File "{file}", line {line}, in {func}', "python:Lib/traceback.py")
TRACEBACK_CODE = Msg("    {code}", "python:Lib/traceback.py")
TRACEBACK_CARET = Msg("    {carets}", "python:Lib/traceback.py (3.11 position carets)")
TRACEBACK_LAST = Msg("{exc_type}: {message}", "python:Lib/traceback.py")

# --------------------------------------------------------------- model files
HF_REPO_ID = Msg(
    "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{path}'. Use "
    "`repo_type` argument if needed.",
    "huggingface_hub:src/huggingface_hub/utils/_validators.py (validate_repo_id; fixture: "
    "model_not_found_ttrl25.log)",
)
HF_OFFLINE = Msg(
    "We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
    "cached files and it looks like {path} is not the path to a directory containing a file "
    "named config.json.\nCheckout your internet connection or see how to run the library in "
    "offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'.",
    "transformers:src/transformers/utils/hub.py (cached_files)",
)
HF_BAD_JSON = Msg(
    "It looks like the config file at '{path}' is not a valid JSON file.",
    "transformers:src/transformers/configuration_utils.py (_dict_from_json_file)",
)

# --------------------------------------------------------------- HTTP server
UVICORN_STARTED = Msg(
    "INFO:     Started server process [{pid}]", "uvicorn:uvicorn/server.py (Server._serve)"
)
UVICORN_LIFESPAN = Msg(
    "INFO:     Waiting for application startup.",
    "uvicorn:uvicorn/lifespan/on.py (LifespanOn.startup)",
)
UVICORN_LIFESPAN_DONE = Msg(
    "INFO:     Application startup complete.", "uvicorn:uvicorn/lifespan/on.py (LifespanOn.startup)"
)
SSL_ENABLED = Msg(
    "SSL enabled: certfile={certfile}, keyfile={keyfile}",
    "sglang:srt/entrypoints/http_server.py:2540",
    ('f"SSL enabled: certfile={server_args.ssl_certfile}, "',),
)
SSL_VERIFY_OFF = Msg(
    "SSL is enabled but --ssl-ca-certs was not provided. Certificate verification is DISABLED "
    "for internal health checks. For production deployments, provide --ssl-ca-certs or use "
    "CA-signed certificates.",
    "sglang:srt/server_args.py:8518",
    ('"SSL is enabled but --ssl-ca-certs was not provided. "',),
    logging.WARNING,
)
UVICORN_RUNNING = Msg(
    "INFO:     Uvicorn running on {scheme}://{host}:{port} (Press CTRL+C to quit)",
    "uvicorn:uvicorn/server.py (Server._log_started_message)",
)
UVICORN_BIND_ERROR = Msg(
    "ERROR:    [Errno {errno}] error while attempting to bind on address ('{host}', {port}): "
    "{message}",
    "uvicorn:uvicorn/server.py (Server.startup; fixture: port_in_use_uvicorn_openui226.log)",
    level=logging.ERROR,
)
UVICORN_SHUTDOWN = Msg(
    "INFO:     Waiting for application shutdown.",
    "uvicorn:uvicorn/lifespan/on.py (LifespanOn.shutdown)",
)
UVICORN_SHUTDOWN_DONE = Msg(
    "INFO:     Application shutdown complete.",
    "uvicorn:uvicorn/lifespan/on.py (LifespanOn.shutdown)",
)
# The workers' health server runs uvicorn with log_config=None (common.py:3143):
# its error goes through SGLang's root format, without uvicorn's level prefix.
UVICORN_BIND_ERROR_ROOT = Msg(
    "[Errno {errno}] error while attempting to bind on address ('{host}', {port}): {message}",
    "uvicorn:uvicorn/server.py (Server.startup)",
    level=logging.ERROR,
)
DUMMY_HEALTH_STOPPED = Msg(
    "Dummy health check server stopped at {host}:{port}",
    "sglang:srt/utils/common.py:3158",
    ('f"Dummy health check server stopped at ',),
)
UVICORN_ACCESS = Msg(
    'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}',
    "uvicorn:uvicorn/logging.py (AccessFormatter)",
)
DEPRECATED_ENDPOINT = Msg(
    "Endpoint '{old}' is deprecated and will be removed in a future version. Please use "
    "'{new}' instead.",
    "sglang:srt/entrypoints/http_server.py:775",
    (
        "\"Endpoint '/get_server_info' is deprecated and will be removed in a future version. \"",
        "\"Please use '/server_info' instead.\"",
    ),
    logging.WARNING,
)
DEPRECATED_MODEL_INFO = Msg(
    DEPRECATED_ENDPOINT.template,
    "sglang:srt/entrypoints/http_server.py:727",
    (
        "\"Endpoint '/get_model_info' is deprecated and will be removed in a future version. \"",
        "\"Please use '/model_info' instead.\"",
    ),
    logging.WARNING,
)
DEPRECATED_LOAD = Msg(
    DEPRECATED_ENDPOINT.template,
    "sglang:srt/entrypoints/http_server.py:818",
    (
        "\"Endpoint '/get_load' is deprecated and will be removed in a future version. \"",
        "\"Please use '/v1/loads' instead.\"",
    ),
    logging.WARNING,
)
FIRED_UP = Msg(
    "The server is fired up and ready to roll!",
    "sglang:srt/entrypoints/http_server.py:2355",
    ('logger.info("The server is fired up and ready to roll!")',),
)
WARMUP_FAILED = Msg(
    "Initialization failed. warmup error: {traceback}",
    "sglang:srt/entrypoints/http_server.py:2324",
    ('logger.error(f"Initialization failed. warmup error: {last_traceback}")',),
    logging.ERROR,
)
HEALTH_FAILED = Msg(
    "Health check failed. Server couldn't get a response from detokenizer for last {timeout} "
    "seconds. tic start time: {tic}. last_heartbeat time: {last}",
    "sglang:srt/entrypoints/http_server.py:714",
    (
        'f"Health check failed. Server couldn\'t get a response from detokenizer for last "',
        'f"{HEALTH_CHECK_TIMEOUT} seconds. tic start time: {tic_time}. "',
        'f"last_heartbeat time: {last_receive_time}"',
    ),
    logging.ERROR,
)
PREFILL_BATCH = Msg(
    "Prefill batch, #new-seq: {new}, #new-token: {tokens}, #cached-token: 0, token usage: "
    "{usage:.2f}, #running-req: {running}, #queue-req: {queued}, #pending-token: 0, cuda graph: "
    "False, input throughput (token/s): {throughput:.2f}",
    "sglang:srt/managers/scheduler_components/metrics_reporter.py:562",
    (
        'f"Prefill batch{iter_msg}, "',
        'f"#new-seq: {prefill_stats.num_new_seqs}, "',
        'f"#new-token: {prefill_stats.log_input_tokens}, "',
        'f"#cached-token: ',
    ),
)
DECODE_BATCH = Msg(
    "Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, cuda "
    "graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}",
    "sglang:srt/managers/scheduler_components/metrics_reporter.py:757",
    ('msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"',),
)
SIGTERM_RECEIVED = Msg(
    "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
    "sglang:srt/managers/tokenizer_manager.py:3749",
    ('f"SIGTERM received. {signum=} {frame=}. Draining requests and shutting down..."',),
    logging.WARNING,
)
GRACEFUL_EXIT = Msg(
    "Gracefully exiting... Remaining number of requests {n}. Remaining requests "
    "remaining_rids={rids}.",
    "sglang:srt/managers/tokenizer_manager.py:3115",
    (
        'f"Gracefully exiting... Remaining number of requests {remain_num_req}. Remaining '
        'requests {remaining_rids=}."',
    ),
)
WATCHDOG_TIMEOUT = Msg(
    "Scheduler watchdog timeout (self.watchdog_timeout={timeout}, self.soft=False)",
    "sglang:srt/utils/watchdog.py:154",
    ('f"{self.debug_name} watchdog timeout "', 'f"({self.watchdog_timeout=}, {self.soft=})"'),
    logging.ERROR,
)


def messages() -> dict[str, Msg]:
    """Every message of this module by name (for the contract test)."""
    return {name: value for name, value in globals().items() if isinstance(value, Msg)}


# ------------------------------------------------- the exceptions, by their names
# Python prints an exception as module.qualname: these carry the real names so
# a traceback ends in the line the real stack prints.
def _named(module: str, name: str, base: type[Exception] = Exception) -> type[Exception]:
    return type(name, (base,), {"__module__": module, "__qualname__": name})


DistError = _named("torch.distributed", "DistError", RuntimeError)
DistBackendError = _named("torch.distributed", "DistBackendError", DistError)
DistNetworkError = _named("torch.distributed", "DistNetworkError", DistError)
DistStoreError = _named("torch.distributed", "DistStoreError", DistError)
HFValidationError = _named("huggingface_hub.errors", "HFValidationError", ValueError)
ZMQError = _named("zmq.error", "ZMQError")


# ------------------------------------------------------------------- writers
_OUT = threading.Lock()
HOSTNAME = socket.gethostname()


def write(line: str, stream: str = "stderr") -> None:
    """One line to stderr (Python logging, tqdm, torch) or stdout (NCCL, Gloo), flushed."""
    fp = sys.stdout if stream == "stdout" else sys.stderr
    with _OUT:
        fp.write(line + "\n")
        fp.flush()


def write_raw(text: str) -> None:
    """Text without a newline (tqdm's carriage-return updates)."""
    with _OUT:
        sys.stderr.write(text)
        sys.stderr.flush()


@dataclass
class _Config:
    level: int = logging.INFO
    log_ms: bool = False


CONFIG = _Config()


def configure(log_level: str) -> None:
    """--log-level and SGLANG_LOG_MS as configure_logger applies them (srt/utils/common.py:2161)."""
    CONFIG.level = getattr(logging, log_level.upper(), logging.INFO)
    CONFIG.log_ms = os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes")


def stamp() -> str:
    now = time.time()
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    return f"{text}.{int(now * 1000) % 1000:03d}" if CONFIG.log_ms else text


def log(msg: Msg, prefix: str = "", **fields: object) -> None:
    """``[2026-03-08 12:29:13 TP1] message``: SGLang's format; ``prefix`` is `` TP1`` or ''."""
    if msg.level < CONFIG.level:
        return
    text = msg(**fields)
    write(f"[{stamp()}{prefix}] {text}")


def tp_prefix(tp_rank: int, tp_size: int) -> str:
    """The scheduler's prefix: `` TP<rank>`` when tp_size > 1 (srt/managers/scheduler.py:4853)."""
    return f" TP{tp_rank}" if tp_size > 1 else ""


# -------------------------------------------------------------------- NCCL
_NCCL_LEVELS = {"VERSION": 1, "WARN": 2, "INFO": 3, "ABORT": 2, "TRACE": 4}
_NCCL_SUBSYS = {"INIT", "BOOTSTRAP", "ENV"}  # debug.cc:48, the default mask


def _nccl_level() -> int:
    return _NCCL_LEVELS.get(os.environ.get("NCCL_DEBUG", "").upper(), 0)


def _nccl_subsys() -> set[str]:
    spec = os.environ.get("NCCL_DEBUG_SUBSYS", "")
    if not spec:
        return set(_NCCL_SUBSYS)
    names = {s.strip().upper() for s in spec.lstrip("^").split(",") if s.strip()}
    if spec.startswith("^"):
        return {
            "INIT",
            "COLL",
            "P2P",
            "SHM",
            "NET",
            "GRAPH",
            "TUNING",
            "ENV",
            "ALLOC",
            "CALL",
            "PROXY",
            "NVLS",
            "BOOTSTRAP",
            "REG",
            "PROFILE",
            "RAS",
        } - names
    return (
        {
            "INIT",
            "COLL",
            "P2P",
            "SHM",
            "NET",
            "GRAPH",
            "TUNING",
            "ENV",
            "ALLOC",
            "CALL",
            "PROXY",
            "NVLS",
            "BOOTSTRAP",
            "REG",
            "PROFILE",
            "RAS",
        }
        if "ALL" in names
        else names
    )


def nccl_info(msg: Msg, subsys: tuple[str, ...] = ("INIT",), **fields: object) -> None:
    """``host:pid:tid [0] NCCL INFO message``, printed only with NCCL_DEBUG=INFO and one of
    the message's subsystems in NCCL_DEBUG_SUBSYS (nccl:src/debug.cc:290 and :363)."""
    if _nccl_level() < _NCCL_LEVELS["INFO"] or (
        "ALL" not in subsys and not set(subsys) & _nccl_subsys()
    ):
        return
    write(
        f"{HOSTNAME}:{os.getpid()}:{threading.get_native_id()} [0] NCCL INFO {msg(**fields)}",
        "stdout",
    )


def nccl_warn(msg: Msg, where: str, **fields: object) -> None:
    """NCCL's WARN: a blank line, a timestamp, ``file:line NCCL WARN`` (debug.cc:310-360)."""
    if _nccl_level() < _NCCL_LEVELS["WARN"]:
        return
    ts = time.strftime("[%Y-%m-%d %H:%M:%S] ")
    write(
        f"\n{ts}{HOSTNAME}:{os.getpid()}:{threading.get_native_id()} [0] {where} NCCL WARN "
        f"{msg(**fields)}",
        "stdout",
    )


def c10d(level: str, msg: Msg, where: str, rank: int | None = None, **fields: object) -> None:
    """torch's c10d logging: ``[rank1]:[W0308 12:29:13.123456789 socket.cpp:1011] message``
    (fixtures dist_init_timeout_sglang2561.log, gloo_loopback_vllm_backport14.log)."""
    now = time.time()
    ts = time.strftime("%m%d %H:%M:%S", time.localtime(now))
    ns = int((now % 1) * 1e9)
    head = f"[rank{rank}]:" if rank is not None else ""
    write(f"{head}[{level}{ts}.{ns:09d} {where}] {msg(**fields)}")


# --------------------------------------------------------------------- tqdm
_UTF = " " + "".join(map(chr, range(0x258F, 0x2587, -1)))


def _interval(t: float) -> str:
    mins, s = divmod(abs(int(t)), 60)
    h, m = divmod(mins, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def meter(n: int, total: int, elapsed: float, desc: str = "", sglang_format: bool = False) -> str:
    """tqdm.format_meter for a known total, without smoothing (tqdm:tqdm/std.py)."""
    rate = n / elapsed if elapsed and n else None
    inv = 1 / rate if rate else None
    rate_fmt = f"{inv:5.2f}s/it" if inv and inv > 1 else (f"{rate:5.2f}it/s" if rate else "?it/s")
    remaining = _interval((total - n) / rate) if rate else "?"
    frac = n / total if total else 0.0
    fields = {
        "percentage": frac * 100,
        "n": n,
        "total": total,
        "elapsed": _interval(elapsed),
        "remaining": remaining,
        "rate": rate_fmt,
        "desc": desc,
    }
    if sglang_format:
        return SGLANG_BAR(**fields)
    whole, part = divmod(int(frac * 10 * 8), 8)
    bar = _UTF[-1] * whole + ((_UTF[part] + " " * (10 - whole - 1)) if whole < 10 else "")
    return (TQDM_BAR if desc else TQDM_BAR_NO_DESC)(bar=bar, **fields)


class Progress:
    """A tqdm bar on stderr: '\\r' before every redraw, a newline when it closes."""

    def __init__(
        self, total: int, sglang_format: bool = False, desc: str = "", mininterval: float = 0.1
    ) -> None:
        self.total, self.sglang_format, self.desc = total, sglang_format, desc
        self.n, self.started, self.last = 0, time.monotonic(), 0.0
        self.mininterval = mininterval
        self._draw()

    def _draw(self) -> None:
        self.last = time.monotonic()
        write_raw(
            "\r"
            + meter(self.n, self.total, self.last - self.started, self.desc, self.sglang_format)
        )

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._draw()

    def update(self) -> None:
        self.n += 1
        if time.monotonic() - self.last >= self.mininterval:
            self._draw()

    def close(self) -> None:
        self._draw()
        write_raw("\n")


__all__ = ["NCCL_VERSION", "Msg", "__version__", "messages"]
