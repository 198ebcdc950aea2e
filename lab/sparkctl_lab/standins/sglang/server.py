"""TP0's HTTP server (the release's routes and shapes) and the other ranks' health server.

Routes, status codes and bodies are the release's (sglang:srt/entrypoints/
http_server.py, openai/protocol.py, serving_chat.py; the 401 of
srt/utils/auth.py add_api_key_middleware), on the standard library's HTTP
server with uvicorn's start-up lines and access log. ``/server_info`` and
``/model_info`` are the current names; ``/get_server_info``,
``/get_model_info`` and ``/get_load`` answer the same and log the release's
deprecation warning on every call (http_server.py:723-830). Like the
release, ``/server_info`` returns every server argument, ``api_key`` and
``admin_api_key`` included. The warm-up is the release's: HTTP requests to
the server itself (``_execute_server_warmup``, http_server.py:2161).
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import os
import signal
import ssl
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import release as r
from .engine import (
    E2E_BUCKETS,
    REALTIME_MODES,
    TTFT_BUCKETS,
    Engine,
    EngineError,
    Model,
    Sampling,
    tokenize,
)
from .rendezvous import Node, os_errno
from .version import __version__

# LoadSnapshot's flat fields, in its order (sglang 0.5.17 managers/load_snapshot.py:184-207,
# _CORE_KEYS), and the sections /v1/loads?include= takes (VALID_SECTIONS, :214).
LOAD_CORE_KEYS = (
    "timestamp",
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_waiting_uncached_tokens",
    "num_used_tokens",
    "num_total_tokens",
    "num_active_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
    "total_prefill_uncached_tokens",
    "total_prefill_busy_us",
    "decode_moments",
)
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})


def error_body(code: int, message: str, err_type: str) -> dict[str, Any]:
    """protocol.py ErrorResponse."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


class BadRequest(Exception):
    def __init__(self, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.err_type = err_type


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    """UsageInfo as UsageProcessor.calculate_token_usage builds it (openai/usage_processor.py:
    95): no prompt_tokens_details without a cached or multimodal count, and the stand-in
    caches nothing (enable_cache_report reports only counts above 0, :13)."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


def _exclude_none(obj: Any) -> Any:
    """``model_dump_json(exclude_none=True)``: every None-valued field dropped, at every depth."""
    if isinstance(obj, dict):
        return {k: _exclude_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_exclude_none(v) for v in obj]
    return obj


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return stop
    raise BadRequest(
        "1 validation error: stop must be a string or a list of strings", "Bad Request"
    )


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
        raise BadRequest(
            "1 validation error for ChatCompletionRequest\nmessages\n  Field required",
            "Bad Request",
        )
    if not messages:
        raise BadRequest("Messages cannot be empty.")
    parts = []
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") not in (
            "system",
            "user",
            "assistant",
            "tool",
            "developer",
            "function",
        ):
            raise BadRequest(
                "1 validation error for ChatCompletionRequest\nmessages: each message "
                "needs a role of system, user, assistant, tool or developer",
                "Bad Request",
            )
        content = msg.get("content") or ""
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{msg['role']}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


class App:
    """Rank 0's HTTP state: the engine, the server args and the model."""

    def __init__(
        self, engine: Engine, args: dict[str, Any], model: Model, available: float
    ) -> None:
        self.engine, self.args, self.model = engine, args, model
        self.name = args["served_model_name"]
        self.api_key = args["api_key"] or None
        self.available = available
        self.tls_client: ssl.SSLContext | None = None  # the warm-up's, once TLS is on

    def model_card(self, name: str) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.model.context_len,
        }

    def server_info(self) -> dict[str, Any]:
        """/server_info (http_server.py:781): every ServerArgs field (dataclasses.asdict,
        :793; args.parse_args gives them all, the keys in clear), the scheduler's init info
        (scheduler.py:1614 get_init_info), the internal state per DP rank, the version."""
        engine, model = self.engine, self.model
        tokens = engine.max_total_tokens
        max_req_len = min(model.context_len - 1, tokens - 1)  # tp_worker.py:509
        scheduler_info = {
            "status": "ready",
            "max_total_num_tokens": tokens,
            "max_req_input_len": max_req_len - 5,
            "startup_time": engine.startup_time,
        }
        kv_gb = tokens * model.kv_bytes_per_token(self.args["tp_size"]) * 2 / 2**30
        internal = {
            **self.args,
            "last_gen_throughput": engine.stats.throughput(),
            "memory_usage": {  # build_memory_usage, scheduler_components/memory_usage.py
                "weight": round(model.weight_bytes / self.args["tp_size"] / 2**30, 3),
                "kvcache": round(kv_gb, 3),
                "startup_available": round(self.available, 3),
                "token_capacity": tokens,
                "token_capacity_swa": None,
                "graph": {},
            },
            "startup_time": engine.startup_time,
            "effective_max_running_requests_per_dp": engine.max_running,
        }
        return {
            **self.args,
            **scheduler_info,
            "startup_time": engine.startup_time,
            "internal_states": [internal],
            "version": __version__,
            "kv_events": None,
        }

    def model_info(self) -> dict[str, Any]:
        """/model_info (http_server.py:733)."""
        return {
            "model_path": self.args["model_path"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": self.args["preferred_sampling_params"],
            "weight_version": self.args["weight_version"],
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model.model_type,
            "architectures": [self.model.architecture],
        }

    def loads(self) -> list[dict[str, Any]]:
        """/get_load: the legacy shim over /v1/loads' core section (http_server.py:809-835)."""
        snap = self.engine.snapshot()
        return [
            {
                "dp_rank": 0,
                "num_reqs": snap["num_running_reqs"] + snap["num_waiting_reqs"],
                "num_waiting_reqs": snap["num_waiting_reqs"],
                "num_tokens": snap["num_total_tokens"],
                "num_pending_tokens": snap["num_total_tokens"] - snap["num_used_tokens"],
                "ts_tic": time.perf_counter(),
            }
        ]

    def v1_loads(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        """/v1/loads (srt/entrypoints/v1_loads.py:93, included by http_server.py:480): one
        LoadSnapshot per DP rank (one here), its ``to_dict(include)``
        (managers/load_snapshot.py:218): the core keys always, each section only when
        included and set. The scheduler sets memory, disaggregation (mode "null") and
        queues; speculative and lora only with those features (load_inquirer.py:133-201).
        ``format=prometheus``: the same numbers as gauges (v1_loads.py:58)."""
        include = query.get("include", [""])[-1]
        wanted = {x.strip() for x in include.split(",")} if include else None
        if wanted is not None and not wanted <= LOAD_SECTIONS:
            detail = (
                f"Invalid include sections: {wanted - LOAD_SECTIONS}. "
                f"Valid options: {sorted(LOAD_SECTIONS)}"
            )
            return 400, {"detail": detail}
        snap = self.engine.snapshot()
        core = {
            "timestamp": time.time(),
            "dp_rank": 0,
            **{k: snap.get(k, 0) for k in LOAD_CORE_KEYS if k not in ("timestamp", "dp_rank")},
            "cache_hit_rate": 0.0,
            "utilization": 0.0,
            "total_prefill_uncached_tokens": 0,
            "total_prefill_busy_us": 0,
            "decode_moments": None,
        }
        info = self.server_info()["internal_states"][0]["memory_usage"]
        sections = {
            "memory": (
                "memory",
                {
                    "weight_gb": info["weight"],
                    "kv_cache_gb": info["kvcache"],
                    "graph_gb": 0.0,
                    "token_capacity": snap["max_total_num_tokens"],
                },
            ),
            "disaggregation": (
                "disagg",
                {
                    "mode": "null",
                    "prefill_bootstrap_queue_reqs": 0,
                    "prefill_inflight_queue_reqs": 0,
                    "decode_prealloc_queue_reqs": 0,
                    "decode_transfer_queue_reqs": 0,
                    "decode_retracted_queue_reqs": 0,
                    "kv_transfer_speed_gb_s": 0.0,
                    "kv_transfer_latency_ms": 0.0,
                },
            ),
            "queues": (
                "queues",
                {
                    "waiting": snap["num_waiting_reqs"],
                    "grammar": 0,
                    "paused": 0,
                    "retracted": 0,
                    "prealloc_ready": 0,
                },
            ),
        }
        load = {k: core[k] for k in LOAD_CORE_KEYS}
        if wanted != {"core"}:
            for field, (name, section) in sections.items():
                if wanted is None or "all" in wanted or name in wanted:
                    load[field] = section
        ranks = query.get("dp_rank", [""])[-1]
        loads = [load] if ranks in ("", "0") else []
        if query.get("format", [""])[-1] == "prometheus":
            prefixes = {"disaggregation": "disagg"}
            lines = []
            for key, value in load.items():
                items = (
                    [(f"sglang_{prefixes.get(key, key)}_{k}", v) for k, v in value.items()]
                    if isinstance(value, dict)
                    else [(f"sglang_{key}", value)]
                )
                for name, v in items:
                    if isinstance(v, (int, float)) and key != "dp_rank":
                        lines += [f"# TYPE {name} gauge", f'{name}{{dp_rank="0"}} {v}']
            return 200, "\n".join(lines) + "\n"
        return 200, {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "version": __version__,
            # get_device_name(): torch's name of the GPU; a Spark's is the GB10
            "accelerator": "NVIDIA GB10",
            "num_accelerators": int(self.args["tp_size"]) * int(self.args["pp_size"]),
            "loads": loads,
        }

    def metric_labels(self) -> tuple[dict[str, str], dict[str, str]]:
        """The tokenizer's and TP0 scheduler's labels (tokenizer_manager.py:681-684,
        metrics_collector.py:1082-1088; engine_type: DisaggregationMode.to_engine_type,
        disaggregation/utils.py:106-111). The priority, dp_rank and extra labels of the
        release are absent with its defaults, which the stand-in does not change."""
        mode = str(self.args.get("disaggregation_mode") or "null")
        engine_type = mode if mode in ("prefill", "decode") else "unified"
        tokenizer = {"model_name": str(self.name), "engine_type": engine_type}
        scheduler = {**tokenizer, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        return tokenizer, scheduler

    def metrics(self) -> str:
        """/metrics as prometheus_client's multiprocess collector writes the release's
        (srt/utils/common.py:2372-2378): a series only once it was set or incremented,
        counters without ``_created``. Names, HELP texts, types and label names are the
        release's (observability/metrics_collector.py); when each moves: engine.py."""
        s = self.engine.stats
        tokenizer, scheduler = self.metric_labels()
        lines: list[str] = []

        def fmt(labels: dict[str, str]) -> str:
            def esc(v: str) -> str:
                return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

            return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"

        def family(name: str, kind: str, helptext: str) -> None:
            lines.extend([f"# HELP {name} {helptext}", f"# TYPE {name} {kind}"])

        def sample(name: str, labels: dict[str, str], value: float) -> None:
            lines.append(f"{name}{fmt(labels)} {_go_float(value)}")

        def histogram(
            name: str, helptext: str, series: dict[str, list[float]], buckets: tuple[float, ...]
        ) -> None:
            if not series:
                return
            family(name, "histogram", helptext)
            for streaming, values in series.items():
                labels = {**tokenizer, "is_streaming": streaming}
                for le in (*buckets, math.inf):
                    n = sum(v <= le for v in values)
                    sample(f"{name}_bucket", {**labels, "le": _go_float(le)}, n)
                sample(f"{name}_count", labels, len(values))
                sample(f"{name}_sum", labels, sum(values))

        with self.engine.cv:
            done = dict(sorted(s.finished.items()))
            counters = (
                (
                    "sglang:prompt_tokens_total",
                    "Number of prefill tokens processed.",
                    "prompt_tokens",
                ),
                (
                    "sglang:generation_tokens_total",
                    "Number of generation tokens processed.",
                    "generation_tokens",
                ),
                ("sglang:num_requests_total", "Number of requests processed.", "requests"),
            )
            ended = {k: f for k, f in done.items() if f.requests}  # ttft may come first
            for name, helptext, attr in counters:
                if ended:
                    family(name, "counter", helptext)
                for streaming, f in ended.items():
                    sample(name, {**tokenizer, "is_streaming": streaming}, getattr(f, attr))
            histogram(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                {k: list(f.ttft) for k, f in done.items() if f.ttft},
                TTFT_BUCKETS,
            )
            histogram(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                {k: list(f.e2e) for k, f in done.items() if f.e2e},
                E2E_BUCKETS,
            )
            realtime = {m: s.realtime[m] for m in REALTIME_MODES if s.realtime.get(m)}
            if realtime:
                family(
                    "sglang:realtime_tokens_total",
                    "counter",
                    "Total number of tokens processed (updated on each log interval). "
                    "mode: prefill_compute, prefill_cache, decode.",
                )
                for m, n in realtime.items():
                    sample("sglang:realtime_tokens_total", {**scheduler, "mode": m}, n)
            g = s.gauges
            if g is not None:
                for name, helptext, value in (
                    ("num_running_reqs", "The number of running requests.", g.running),
                    ("num_queue_reqs", "The number of requests in the waiting queue.", g.queued),
                    ("gen_throughput", "The generation throughput (token/s).", g.gen_throughput),
                    ("cache_hit_rate", "The prefix cache hit rate.", g.cache_hit_rate),
                    ("token_usage", "The token usage.", g.token_usage),
                ):
                    family(f"sglang:{name}", "gauge", helptext)
                    sample(f"sglang:{name}", scheduler, value)
        return "\n".join(lines) + "\n" if lines else ""


def _go_float(value: float) -> str:
    """prometheus_client's floatToGoString: ``1.0``, ``+Inf``."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


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
            choice["delta"] = {
                "role": delta.get("role"),
                "content": delta.get("content"),
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            choice["text"] = delta
        choice.update(
            {
                "logprobs": None,
                "finish_reason": finish["type"] if finish else None,
                "matched_stop": finish.get("matched") if finish else None,
            }
        )
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
        r.log(
            r.UVICORN_ACCESS,
            client=f"{self.client_address[0]}:{self.client_address[1]}",
            method=self.command,
            path=self.path,
            status=status,
            phrase=HTTPStatus(status).phrase,
        )

    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json") -> None:
        self.send_response(status)
        if body or status != 200 or ctype != "application/json":
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        # uvicorn logs the access line on http.response.start, before a byte of the
        # response goes out (uvicorn 0.54.0 protocols/http/httptools_impl.py:482, the
        # write at :524): a client that logs on the answer logs after it.
        self._access(status)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _authorized(self) -> bool:
        key = self.app.api_key
        path = self.path.split("?")[0]
        if not key or self.command == "OPTIONS" or path.startswith(("/health", "/metrics")):
            return True
        if self.headers.get("Authorization") == "Bearer " + key:
            return True
        # The body goes unread with the 401: on a kept-alive connection uvicorn discards
        # it before the next request (httptools parses each request whole); here it would
        # be read as the next request line, so a large one closes the connection instead.
        length = int(self.headers.get("content-length") or 0)
        if 0 < length <= 1 << 20:
            self.rfile.read(length)
        elif length:
            self.close_connection = True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        path = self.path.split("?")[0]
        app = self.app
        deprecated = {
            "/get_model_info": (r.DEPRECATED_MODEL_INFO, "/model_info"),
            "/get_server_info": (r.DEPRECATED_ENDPOINT, "/server_info"),
            "/get_load": (r.DEPRECATED_LOAD, "/v1/loads"),
        }
        if path in deprecated:
            msg, new = deprecated[path]
            r.log(msg, old=path, new=new)
        routes: dict[str, Callable[[], Any]] = {
            "/model_info": app.model_info,
            "/get_model_info": app.model_info,
            "/server_info": app.server_info,
            "/get_server_info": app.server_info,
            "/get_load": app.loads,
            "/v1/models": lambda: {"object": "list", "data": [app.model_card(app.name)]},
        }
        answers: dict[str, Callable[[], None]] = {
            "/health": self._health,
            "/health_generate": self._health,
            "/v1/loads": self._v1_loads,
        }
        if path in answers:
            answers[path]()
        elif path in routes:
            self._json(200, routes[path]())
        elif path.startswith("/v1/models/"):
            name = path[len("/v1/models/") :]
            if name == app.name:
                self._json(200, app.model_card(name))
            else:
                self._json(
                    404,
                    {
                        "error": {
                            "message": f"The model '{name}' does not exist",
                            "type": "invalid_request_error",
                            "param": "model",
                            "code": "model_not_found",
                        }
                    },
                )
        elif path == "/metrics" and app.args["enable_metrics"]:
            self._send(200, app.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/ping":
            self._send(200)
        else:
            self._json(404, {"detail": "Not Found"})

    def _health(self) -> None:
        self._send(200 if self.app.engine.health() else 503)

    def _v1_loads(self) -> None:
        status, body = self.app.v1_loads(parse_qs(urlsplit(self.path).query))
        if isinstance(body, str):
            self._send(status, body.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(status, body)

    def do_POST(self) -> None:
        if not self._authorized():
            return
        path = self.path.split("?")[0]
        routes = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completions,
            "/generate": self._generate,
        }
        if path not in routes:
            get_only = (
                "/health",
                "/health_generate",
                "/model_info",
                "/get_model_info",
                "/server_info",
                "/get_server_info",
                "/get_load",
                "/v1/loads",
                "/v1/models",
                "/metrics",
            )
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
            raise BadRequest(
                "[{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media "
                "Type: Only 'application/json' is allowed\", 'type': 'value_error'}]",
                "Bad Request",
            )
        try:
            body = json.loads(raw or b"{}")
        except ValueError as err:
            raise BadRequest(
                f"[{{'type': 'json_invalid', 'msg': 'JSON decode error', 'ctx': "
                f"{{'error': '{err}'}}}}]",
                "Bad Request",
            ) from None
        if not isinstance(body, dict):
            raise BadRequest("Input should be a valid dictionary", "Bad Request")
        return body

    # -- streaming ------------------------------------------------------------------
    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self._access(200)  # before the headers go out, as in _send
        self.end_headers()

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
            raise BadRequest(
                "1 validation error for CompletionRequest\nprompt\n  Field required", "Bad Request"
            )
        self._openai(body, prompts, chat=False, default_max=16)

    def _openai(
        self, body: dict[str, Any], prompts: list[str], chat: bool, default_max: int | None
    ) -> None:
        app = self.app
        sampling = Sampling(
            max_new=_positive(body, "max_completion_tokens", "max_tokens", default=default_max),
            stops=_stops(body),
            ignore_eos=bool(body.get("ignore_eos")),
        )
        n = _positive(body, "n", default=1) or 1
        for prompt in prompts:
            if len(tokenize(prompt)) >= app.model.context_len:
                raise BadRequest(
                    f"The input ({len(tokenize(prompt))} tokens) is longer than the "
                    f"model's context length ({app.model.context_len} tokens)."
                )
        reply = Reply(
            rid=uuid.uuid4().hex,
            created=int(time.time()),
            chat=chat,
            model=str(body.get("model") or "default"),
            prompt_tokens=sum(len(tokenize(p)) for p in prompts),
        )
        jobs = [(i * n + k, p) for i, p in enumerate(prompts) for k in range(n)]
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(options.get("include_usage")) or bool(
                app.args["stream_response_default_include_usage"]
            )
            self._stream(reply, jobs, sampling, include_usage)
            return
        choices = []
        completion = 0
        for index, prompt in jobs:
            text, finish, count = self._run(prompt, sampling, index)
            completion += count
            choice: dict[str, Any] = {"index": index}
            if chat:
                choice["message"] = {
                    "role": "assistant",
                    "content": text,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
            else:
                choice["text"] = text
            choice.update(
                {
                    "logprobs": None,
                    "finish_reason": finish["type"],
                    "matched_stop": finish.get("matched"),
                }
            )
            choices.append(choice)
        self._json(
            200,
            {
                **reply.head(reply.obj),
                "choices": choices,
                "usage": _usage(reply.prompt_tokens, completion),
                "metadata": {"weight_version": app.args["weight_version"]},
            },
        )

    def _run(self, prompt: str, sampling: Sampling, index: int) -> tuple[str, dict[str, Any], int]:
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

    def _stream(
        self, reply: Reply, jobs: list[tuple[int, str]], sampling: Sampling, include_usage: bool
    ) -> None:
        """SSE as serving_chat.py sends it: role chunk, content chunks, finish chunk,
        optional usage chunk (choices []), then ``data: [DONE]``."""
        completion = 0
        started = False
        try:
            for index, prompt in jobs:
                gen = self.app.engine.generate(prompt, sampling, index, stream=True)
                first = next(gen)  # the prefill runs before any byte is sent
                if not started:
                    self._start_stream()
                    started = True
                if reply.chat:
                    self._sse(reply.chunk(index, {"role": "assistant", "content": ""}))
                for piece, done in itertools.chain([first], gen):
                    if done is None:
                        completion += 1
                        self._sse(
                            reply.chunk(
                                index, {"role": None, "content": piece} if reply.chat else piece
                            )
                        )
                        continue
                    completion += isinstance(done.get("matched"), int)
                    self._sse(
                        reply.chunk(
                            index, {"role": None, "content": None} if reply.chat else "", done
                        )
                    )
            if include_usage:
                usage_chunk = {
                    **reply.head(reply.chunk_obj),
                    "choices": [],
                    "usage": _usage(reply.prompt_tokens, completion),
                }
                # The completions' usage chunk alone is dumped without its null fields
                # (serving_completions.py:460 model_dump_json(exclude_none=True)); the
                # chat's is dumped in full (serving_chat.py:1692), as are the answers
                # that are not streamed (FastAPI's jsonable_encoder, no exclude options).
                self._sse(usage_chunk if reply.chat else _exclude_none(usage_chunk))
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
        sampling = Sampling(
            max_new=_positive(params, "max_new_tokens", default=128),
            stops=_stops(params),
            ignore_eos=bool(params.get("ignore_eos")),
        )
        rid = uuid.uuid4().hex
        began = time.monotonic()
        out, finish, count = self._run(text, sampling, 0)
        self._json(
            200,
            {
                "text": out,
                "meta_info": {
                    "id": rid,
                    "finish_reason": finish,
                    "prompt_tokens": len(tokenize(text)),
                    "weight_version": self.app.args["weight_version"],
                    "completion_tokens": count,
                    "cached_tokens": 0,
                    "e2e_latency": round(time.monotonic() - began, 4),
                },
            },
        )


def serve(node: Node, model: Model, engine: Engine, available: float) -> None:
    """TP0: uvicorn's start-up (uvicorn/server.py), the warm-up thread the lifespan starts
    (http_server.py:411), then requests until the process is stopped."""
    args = node.args
    app = App(engine, args, model, available)
    handler = type("BoundHandler", (Handler,), {"app": app})
    if args["ssl_certfile"]:
        r.log(r.SSL_ENABLED, certfile=args["ssl_certfile"], keyfile=args["ssl_keyfile"])
    r.log(r.UVICORN_STARTED, pid=os.getpid())
    r.log(r.UVICORN_LIFESPAN)
    try:
        server = ThreadingHTTPServer((args["host"], args["port"]), handler)
    except OSError as err:
        code = os_errno(err)
        r.log(r.UVICORN_LIFESPAN_DONE)
        r.log(
            r.UVICORN_BIND_ERROR,
            errno=code,
            host=args["host"],
            port=args["port"],
            message=os.strerror(code).lower(),
        )
        r.log(r.UVICORN_SHUTDOWN)
        r.log(r.UVICORN_SHUTDOWN_DONE)
        raise SystemExit(1) from None
    server.daemon_threads = True
    if args["ssl_certfile"]:
        # uvicorn's TLS (uvicorn/config.py create_ssl_context): the certificate chain and key;
        # the handshake happens on the handler's first read, not in the accept loop.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args["ssl_certfile"], args["ssl_keyfile"], args["ssl_keyfile_password"])
        server.socket = ctx.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    threading.Thread(target=_warmup, args=(app,), daemon=True).start()
    r.log(r.UVICORN_LIFESPAN_DONE)
    r.log(
        r.UVICORN_RUNNING,
        scheme="https" if args["ssl_certfile"] else "http",
        host=args["host"],
        port=args["port"],
    )
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()


def _request(app: App, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    host = app.args["host"]
    host = "127.0.0.1" if host in ("", "0.0.0.0") else host  # noqa: S104 - ServerArgs.url()
    conn: http.client.HTTPConnection
    if app.args["ssl_certfile"]:
        conn = http.client.HTTPSConnection(
            host, app.args["port"], timeout=600, context=app.tls_client
        )
    else:
        conn = http.client.HTTPConnection(host, app.args["port"], timeout=600)
    headers = {"Content-Type": "application/json"}
    if app.api_key:
        headers["Authorization"] = f"Bearer {app.api_key}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _verify_context(app: App) -> ssl.SSLContext:
    """ServerArgs.ssl_verify (server_args.py:8502): the CA file, else no verification (and a
    warning, once)."""
    ctx = ssl.create_default_context(cafile=app.args["ssl_ca_certs"] or None)
    if not app.args["ssl_ca_certs"]:
        r.log(r.SSL_VERIFY_OFF)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _warmup(app: App) -> None:
    """_wait_and_warmup / _execute_server_warmup (http_server.py:2161, :2331)."""
    if app.args["ssl_certfile"]:
        app.tls_client = _verify_context(app)
    if not app.args["skip_server_warmup"]:
        last = ""
        for _ in range(120):
            time.sleep(1)
            try:
                status, _ = _request(app, "GET", "/model_info")
                if status == 200:
                    break
                last = f"AssertionError: res=<Response [{status}]>"
            except OSError:
                last = traceback.format_exc().rstrip()
        else:
            _fail_warmup(last)
            return
        try:
            status, raw = _request(
                app,
                "POST",
                "/generate",
                {
                    "sampling_params": {"temperature": 0, "max_new_tokens": 8},
                    "text": "The capital city of France is",
                },
            )
            if status != 200:
                raise AssertionError(raw.decode(errors="replace"))
        except (OSError, AssertionError):
            _fail_warmup(traceback.format_exc().rstrip())
            return
    app.engine.status = "Up"
    r.log(r.FIRED_UP)


def _fail_warmup(last: str) -> None:
    r.log(r.WARMUP_FAILED, traceback=last)
    kill_process_tree(include_parent=True)


def kill_process_tree(include_parent: bool) -> None:
    """kill_process_tree(os.getpid()) (srt/utils/common.py:2053): logs, then SIGKILL."""
    pid = os.getpid()
    r.log(r.KILL_TREE, parent=pid, include=include_parent, pid=pid)
    if include_parent:
        os.kill(pid, signal.SIGKILL)


class _Health(BaseHTTPRequestHandler):
    """launch_dummy_health_check_server's app (srt/utils/common.py:3107): /ping, /health and
    /health_generate answer 200; uvicorn runs it at log level warning (no access log)."""

    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return "uvicorn"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        ok = self.path.split("?")[0] in ("/ping", "/health", "/health_generate")
        body = b"" if ok else b'{"detail":"Not Found"}'
        self.send_response(200 if ok else 404)
        if not ok:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def dummy_health_server(host: str, port: int) -> None:
    """A rank other than TP0, once its scheduler is up (engine.py:1124)."""

    def run() -> None:
        try:
            server = ThreadingHTTPServer((host, port), _Health)
        except OSError as err:
            code = os_errno(err)
            r.log(
                r.UVICORN_BIND_ERROR_ROOT,
                errno=code,
                host=host,
                port=port,
                message=os.strerror(code).lower(),
            )
            r.log(r.DUMMY_HEALTH_STOPPED, host=host, port=port)
            return
        server.daemon_threads = True
        server.serve_forever(poll_interval=0.5)

    threading.Thread(target=run, name="health-check-server", daemon=True).start()
    r.log(r.DUMMY_HEALTH, host=host, port=port)
