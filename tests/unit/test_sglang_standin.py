"""The lab's SGLang stand-in (lab/sparkctl_lab/standins/sglang): ranks, endpoints, failures.

Each test starts real ranks as subprocesses (``python3 -m sglang.launch_server``
with the stand-in on PYTHONPATH, as the unit runs it) on loopback: every
"node" has an address of its own in 127.0.0.0/8 (SGLANG_HOST_IP and --host),
all of them on ``lo`` (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME), with
NCCL_DEBUG=INFO (NCCL prints nothing without it, nccl src/debug.cc:55).
Expected lines and shapes are the pinned release's (SGLang 0.5.17:
``srt/entrypoints/http_server.py``, ``openai/protocol.py``,
``serving_chat.py``; the 401 body of ``add_api_key_middleware``), written
out here, not derived from the code under test. A start-up failure ends a
rank as the release's does: the scheduler's traceback, then SIGKILL from
``kill_process_tree`` (returncode -9). Every process is killed in
``finally``; every wait is bounded.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "lab" / "sparkctl_lab" / "standins"
KEY = "unit-test-key-0123456789"

from sparkctl_lab.standins.sglang import args as ls_args  # noqa: E402
from sparkctl_lab.standins.sglang import launch_server as ls  # noqa: E402
from sparkctl_lab.standins.sglang.version import __version__  # noqa: E402


def _loopback_nodes_work() -> bool:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.3", 0))
    except OSError:
        return False
    return sys.platform.startswith("linux")


needs_loopback = pytest.mark.skipif(
    not _loopback_nodes_work(), reason="needs Linux with all of 127.0.0.0/8 on lo"
)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_model(tmp_path / "model")


def write_model(root: Path) -> Path:
    """A small model directory: a config.json like a Llama's, and one weight file."""
    root.mkdir()
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "max_position_embeddings": 2048,
                "torch_dtype": "bfloat16",
                "eos_token_id": 128009,
                "vocab_size": 128256,
            }
        )
    )
    (root / "model-00001-of-00001.safetensors").write_bytes(os.urandom(4096))
    return root


def _env(rank: int, **overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "NCCL_", "GLOO_"))}
    env.update(
        {
            "PYTHONPATH": str(STANDIN),
            "PYTHONDONTWRITEBYTECODE": "1",
            "NCCL_SOCKET_IFNAME": "lo",
            "GLOO_SOCKET_IFNAME": "lo",
            "NCCL_DEBUG": "INFO",
            "SGLANG_HOST_IP": f"127.0.0.{rank + 1}",
            "SGLANG_HEALTH_CHECK_TIMEOUT": "5",
        }
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclass
class Cluster:
    """Ranks of one tensor-parallel group on loopback; logs in files."""

    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[int, Path] = field(default_factory=dict)
    port: int = 0

    def log(self, rank: int) -> str:
        """The rank's output as written (bytes decoded: no newline translation of tqdm's \\r)."""
        return self.logs[rank].read_bytes().decode(errors="replace")

    def wait_for(self, rank: int, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log(rank):
                return
            if self.procs[rank].poll() is not None and text not in self.log(rank):
                break
            time.sleep(0.05)
        raise AssertionError(f"rank {rank} did not print {text!r}:\n{self.log(rank)}")

    def wait_exit(self, rank: int, timeout: float) -> int:
        return self.procs[rank].wait(timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = KEY,
        ctype: str = "application/json",
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = ctype
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        status, _, raw = self.request(method, path, body, **kw)
        return status, json.loads(raw) if raw else None


@contextmanager
def cluster(
    tmp_path: Path,
    model: Path,
    nnodes: int,
    *,
    start: list[int] | None = None,
    timeout: int = 20,
    env: dict[int, dict[str, str | None]] | None = None,
    extra: list[str] | None = None,
) -> Iterator[Cluster]:
    """Start ranks (``start``, default all; workers first), kill every one on exit.

    Each rank serves HTTP on its own address (the head the API, the others the
    release's health server, sglang srt/entrypoints/engine.py:1124)."""
    c = Cluster(port=free_port())
    dist = f"127.0.0.1:{free_port()}"
    ranks = start if start is not None else [*range(1, nnodes), 0]
    try:
        for rank in ranks:
            c.logs[rank] = tmp_path / f"rank{rank}.log"
            cmd = [
                sys.executable,
                "-m",
                "sglang.launch_server",
                "--model-path",
                str(model),
                "--tp-size",
                str(nnodes),
                "--nnodes",
                str(nnodes),
                "--node-rank",
                str(rank),
                "--dist-init-addr",
                dist,
                "--host",
                f"127.0.0.{rank + 1}",
                "--port",
                str(c.port),
                "--enable-metrics",
                "--dist-timeout",
                str(timeout),
                "--api-key",
                KEY,
                "--served-model-name",
                "toy",
                *(extra or []),
            ]
            with c.logs[rank].open("wb") as out:
                c.procs[rank] = subprocess.Popen(
                    cmd,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=_env(rank, **(env or {}).get(rank, {})),
                )
        yield c
    finally:
        for proc in c.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in c.procs.values():
            proc.wait(timeout=10)


def _up(c: Cluster) -> None:
    c.wait_for(0, "The server is fired up and ready to roll!", 30)


def _sse(raw: bytes) -> list[str]:
    events = [e for e in raw.decode().split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: ") :] for e in events]


def _chat(c: Cluster, content: str, **extra: Any) -> tuple[int, Any]:
    return c.json(
        "POST",
        "/v1/chat/completions",
        {"model": "toy", "messages": [{"role": "user", "content": content}], **extra},
    )


# ------------------------------------------------------------- command line
def test_unknown_flag_is_rejected_like_sglang(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(tmp_path),
            "--tp-size",
            "4",
            "--no-such-flag",
            "1",
        ],
        env=_env(0),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    # prepare_server_args: argparse.ArgumentParser(prog="sglang serve") (server_args.py:9355)
    usage = proc.stderr[proc.stderr.index("usage: ") :]
    assert usage.startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert proc.stderr.rstrip().endswith(
        "sglang serve: error: unrecognized arguments: --no-such-flag 1"
    )
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(tmp_path),
            "--port",
            "x",
        ],
        env=_env(0),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert bad.returncode == 2
    assert "sglang serve: error: argument --port: invalid int value: 'x'" in bad.stderr


def test_help_shows_the_flags_the_unit_uses() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--help"],
        env=_env(0),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    for flag in (
        "--model-path",
        "--tp-size",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
        "--host",
        "--port",
        "--api-key",
        "--enable-metrics",
        "--dist-timeout",
        "--served-model-name",
        "--trust-remote-code",
        "--mem-fraction-static",
        "--context-length",
    ):
        assert flag in proc.stdout, flag


def test_real_flag_names_and_aliases_parse() -> None:
    args = ls.parse_args(
        [
            "--model",
            "/m",
            "--tp-size",
            "4",
            "--nnodes",
            "4",
            "--node-rank",
            "2",
            "--nccl-init-addr",
            "192.168.100.11:50000",
            "--trust-remote-code",
            "--mem-fraction-static",
            "0.8",
            "--context-length",
            "32768",
            "--enable-metrics",
            "--dist-timeout",
            "3600",
            "--api-key",
            "k",
        ]
    )
    assert (args["model_path"], args["tp_size"], args["nnodes"], args["node_rank"]) == (
        "/m",
        4,
        4,
        2,
    )
    assert args["dist_init_addr"] == "192.168.100.11:50000"
    assert args["trust_remote_code"] and args["enable_metrics"]
    assert (args["mem_fraction_static"], args["context_length"], args["dist_timeout"]) == (
        0.8,
        32768,
        3600,
    )
    # SGLang's defaults when a flag is absent (server_args.py)
    defaults = ls.parse_args(["--model-path", "/m"])
    assert (defaults["host"], defaults["port"], defaults["tp_size"], defaults["nnodes"]) == (
        "127.0.0.1",
        30000,
        1,
        1,
    )
    assert defaults["served_model_name"] == "/m" and defaults["api_key"] is None
    assert ls.parse_args(["--model-path", "/m", "--tensor-parallel-size", "2"])["tp_size"] == 2


def test_topology_is_checked_as_the_release_checks_it() -> None:
    # ServerArgs.check_server_args (server_args.py:8701); the release has no check that a
    # multi-node group was given --dist-init-addr (it meets on host:nccl_port instead).
    ls.check_args(ls.parse_args(["--model-path", "/m", "--tp-size", "2", "--nnodes", "2"]))
    with pytest.raises(AssertionError, match=r"^tp_size must be divisible by number of nodes$"):
        ls.check_args(
            ls.parse_args(
                [
                    "--model-path",
                    "/m",
                    "--tp-size",
                    "3",
                    "--nnodes",
                    "2",
                    "--dist-init-addr",
                    "10.0.0.1:5000",
                ]
            )
        )


def test_deprecated_cuda_graph_flags_warn_and_map_to_the_current_ones() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sglang.args import parse_args; "
            "a = parse_args(sys.argv[1:]); print(a['cuda_graph_max_bs_decode'], "
            "a['disable_cuda_graph'])",
            "--model-path",
            "/m",
            "--cuda-graph-max-bs",
            "16",
            "--disable-cuda-graph",
        ],
        env=_env(0),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert proc.stdout.split() == ["16", "True"]
    # argparse_actions.py print_deprecated_warning (ANSI yellow)
    assert (
        "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-max-bs-decode' instead."
    ) in proc.stderr
    assert (
        "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead."
    ) in proc.stderr
    args = ls.parse_args(
        [
            "--model-path",
            "/m",
            "--cuda-graph-backend-decode",
            "disabled",
            "--cuda-graph-max-bs-decode",
            "8",
        ]
    )
    assert (args["cuda_graph_backend_decode"], args["cuda_graph_max_bs_decode"]) == ("disabled", 8)


def test_server_args_line_is_the_release_repr_with_the_key() -> None:
    # engine.py:1059 logs f"{server_args=}": the dataclass repr, every field in the
    # dataclass's order (sglang 0.5.17 srt/server_args.py:483-517 for the first eight),
    # the ones the stand-in does not parse with their defaults, api_key in clear
    line = ls.server_args_repr(ls.parse_args(["--model-path", "/m", "--api-key", "secret-key"]))
    assert line.startswith(
        "ServerArgs(model_path='/m', tokenizer_path='/m', "
        "tokenizer_mode='auto', tokenizer_backend='huggingface', "
        "tokenizer_worker_num=1, detokenizer_worker_num=1, "
        "skip_tokenizer_init=False, load_format='auto', "
    )
    assert "api_key='secret-key', admin_api_key=None, served_model_name='/m'" in line
    assert ", hicache_ratio=2.0, " in line and ", enable_lora=None, " in line  # :2600, :2761
    assert line.endswith(")") and line.count("=") >= 458


def _release_fields() -> dict[str, Any]:
    """The data file as written by scripts/sglang_server_args.py (held to the release by
    tests/contract/test_server_args_data.py)."""
    fields = json.loads(ls_args.SERVER_ARGS_FILE.read_text())["fields"]
    assert isinstance(fields, dict)
    return fields


def test_parsed_args_are_every_release_field_parsed_or_defaulted() -> None:
    release = _release_fields()
    args = ls.parse_args(
        ["--model-path", "/m", "--tp-size", "2", "--nnodes", "2", "--dist-timeout", "60"]
    )
    assert list(args) == list(release)  # every field, in the dataclass's order
    # the fields the stand-in parses come in the same order as the release has them
    assert [name for name in release if name in ls_args.FIELDS] == list(ls_args.FIELDS)
    assert (args["tp_size"], args["nnodes"], args["dist_timeout"]) == (2, 2, 60)
    unparsed = {name: value for name, value in args.items() if name not in ls_args.FIELDS}
    assert len(unparsed) == len(release) - len(ls_args.FIELDS) > 300
    assert unparsed == {name: release[name] for name in unparsed}
    # sglang 0.5.17 srt/server_args.py:511, :2600, :2761, :1474 (a default_factory)
    assert (args["tokenizer_worker_num"], args["hicache_ratio"], args["enable_lora"]) == (
        1,
        2.0,
        None,
    )
    assert isinstance(args["uvicorn_access_log_exclude_prefixes"], list)


def test_server_args_data_of_another_release_or_shape_is_refused(tmp_path: Path) -> None:
    good = json.loads(ls_args.SERVER_ARGS_FILE.read_text())
    path = tmp_path / "server_args.json"
    with pytest.raises(ls_args.ServerArgsDataError, match="No such file"):
        ls_args.load_release_defaults(path)
    path.write_text(json.dumps({**good, "sglang": "0.4.6"}))
    with pytest.raises(
        ls_args.ServerArgsDataError,
        match=r"the fields of sglang '0\.4\.6', the stand-in answers for ",
    ):
        ls_args.load_release_defaults(path)
    path.write_text(json.dumps({**good, "fields": []}))
    with pytest.raises(ls_args.ServerArgsDataError, match='no "fields" mapping'):
        ls_args.load_release_defaults(path)
    path.write_text(
        json.dumps({**good, "fields": {k: v for k, v in good["fields"].items() if k != "tp_size"}})
    )
    with pytest.raises(ls_args.ServerArgsDataError, match=r"parses \['tp_size'\], which"):
        ls_args.load_release_defaults(path)
    path.write_text("{")
    with pytest.raises(ls_args.ServerArgsDataError, match="regenerate it with scripts/"):
        ls_args.load_release_defaults(path)


def test_version_is_the_roles_pinned_release() -> None:
    defaults = yaml.safe_load(
        (
            REPO
            / "ansible_collections"
            / "sparkctl"
            / "spark"
            / "roles"
            / "sglang"
            / "defaults"
            / "main.yml"
        ).read_text()
    )
    assert __version__ == str(defaults["sglang_version"])


def test_missing_model_path_fails_like_transformers(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp_path / "absent")],
        env=_env(0),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' "
        f"or 'namespace/repo_name': '{tmp_path / 'absent'}'"
    ) in proc.stderr


def test_config_json_gives_the_model_shape(model_dir: Path) -> None:
    model = ls.load_model_config(str(model_dir), None)
    assert (model.architecture, model.num_layers, model.hidden_size, model.context_len) == (
        "LlamaForCausalLM",
        2,
        64,
        2048,
    )
    assert model.rounds == 4 and model.hidden_bytes == 128 and model.eos_token_id == 128009
    assert model.weight_bytes == 4096
    assert ls.load_model_config(str(model_dir), 512).context_len == 512


def test_partial_results_depend_on_every_rank(model_dir: Path) -> None:
    model = ls.load_model_config(str(model_dir), None)
    x = bytes(range(128))
    parts = [ls.partial(x, ls.layer_key(model, r, 0), model.hidden_bytes) for r in range(4)]
    assert len(set(parts)) == 4 and all(len(p) == 128 for p in parts)
    assert ls.partial(parts[1], ls.layer_key(model, 1, 0), 128) == x
    wide = ls.partial(x * 3, ls.layer_key(model, 2, 1), 128)
    assert len(wide) == 384 and wide[:128] == wide[128:256]


# ---------------------------------------------------------- a running group
@needs_loopback
def test_four_ranks_meet_and_serve_sglangs_endpoints(tmp_path: Path, model_dir: Path) -> None:
    with cluster(tmp_path, model_dir, 4) as c:
        _up(c)
        head = c.log(0)
        # the release's lines, in its order (srt/distributed/bootstrap.py, model_runner.py,
        # mem_cache, cuda_graph_setup.py, scheduler.py, uvicorn, http_server.py)
        order = [
            "UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang "
            "serve' is the recommended entrypoint.",
            "server_args=ServerArgs(",
            " TP0] Init torch distributed begin.",
            "[Gloo] Rank 0 is connected to 3 peer ranks.",
            " TP0] sglang is using nccl==",
            "NCCL INFO Bootstrap: Using lo:127.0.0.1<0>",
            "NCCL INFO Using network Socket",
            "- Init COMPLETE",
            " TP0] CustomAllreduce is disabled because this process group spans across nodes.",
            " TP0] Init torch distributed ends. elapsed=",
            " TP0] Load weight begin. avail mem=",
            "Multi-thread loading shards: 100% Completed | 1/1",
            " TP0] Load weight end. elapsed=",
            "type=LlamaForCausalLM, avail mem=",
            " TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
            " TP0] Memory pool end. avail mem=",
            " TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=",
            " TP0] Capture target prefill CUDA graph end. elapsed=",
            " TP0] Capture target decode CUDA graph begin. backend=full, "
            "num_tokens_per_req=1, bs=[1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64], "
            "avail mem=",
            "\rCapturing batches (bs=64 avail_mem=",
            "Capturing batches (bs=1 avail_mem=",
            "100%|██████████| 12/12 [",
            " TP0] Capture target decode CUDA graph end. elapsed=",
            " TP0] max_total_num_tokens=",
            "] INFO:     Started server process [",
            "] INFO:     Waiting for application startup.",
            "] INFO:     Application startup complete.",
            f"] INFO:     Uvicorn running on http://127.0.0.1:{c.port} (Press CTRL+C to quit)",
            '"GET /model_info HTTP/1.1" 200 OK',
            '"POST /generate HTTP/1.1" 200 OK',
            "] The server is fired up and ready to roll!",
        ]
        at = [head.find(piece) for piece in order]
        assert -1 not in at, [p for p, i in zip(order, at, strict=True) if i < 0]
        assert at == sorted(at), order
        # the capture bar is TP0's only, carriage returns and one newline at its end
        bar = head[head.index("\rCapturing batches (bs=64") :]
        assert "\n" not in bar[: bar.index("12/12")] and bar.count("\r") >= 12
        for rank in (1, 2, 3):
            c.wait_for(
                rank,
                "Dummy health check server started in background thread at "
                f"127.0.0.{rank + 1}:{c.port}",
                10,
            )
            log = c.log(rank)
            assert f"NCCL INFO Bootstrap: Using lo:127.0.0.{rank + 1}<0>" in log
            assert f"[Gloo] Rank {rank} is connected to 3 peer ranks." in log
            assert f"rank {rank} nranks 4 cudaDev 0" in log and "- Init COMPLETE" in log
            assert (
                f" TP{rank}] CustomAllreduce is disabled because this process group spans "
                "across nodes." in log
            )
            assert f" TP{rank}] Capture target decode CUDA graph end." in log
            assert "Capturing batches" not in log and "Uvicorn" not in log
            assert "sglang is using nccl==" not in log  # pynccl.py:84 logs on rank 0 only
            # the workers' health server (launch_dummy_health_check_server)
            worker = http.client.HTTPConnection(f"127.0.0.{rank + 1}", c.port, timeout=10)
            try:
                worker.request("GET", "/health")
                assert worker.getresponse().status == 200
            finally:
                worker.close()
        # the server args as the release logs them: the key in clear (engine.py:1059)
        assert f"api_key='{KEY}', admin_api_key=None, served_model_name='toy'" in head

        # /health: 200 with an empty body, no key needed (the middleware skips /health*)
        status, headers, raw = c.request("GET", "/health", key=None)
        assert (status, raw, headers["content-length"]) == (200, b"", "0")
        assert c.request("GET", "/health_generate", key=None)[0] == 200

        # --api-key: 401 {"error": "Unauthorized"} without or with a wrong bearer token
        assert c.json("GET", "/v1/models", key=None) == (401, {"error": "Unauthorized"})
        assert c.json("GET", "/v1/models", key="wrong")[0] == 401
        assert c.json("POST", "/v1/chat/completions", {"messages": []}, key=None)[0] == 401

        status, models = c.json("GET", "/v1/models")
        assert status == 200 and models["object"] == "list" and len(models["data"]) == 1
        card = models["data"][0]
        assert set(card) == {
            "id",
            "object",
            "created",
            "owned_by",
            "root",
            "parent",
            "max_model_len",
        }
        assert (
            card["id"],
            card["object"],
            card["owned_by"],
            card["root"],
            card["parent"],
            card["max_model_len"],
        ) == ("toy", "model", "sglang", "toy", None, 2048)
        assert c.json("GET", "/v1/models/toy")[1]["id"] == "toy"
        status, missing = c.json("GET", "/v1/models/other")
        assert status == 404 and missing["error"]["code"] == "model_not_found"

        # /model_info (http_server.py:733); /get_model_info answers the same and warns
        model_info = {
            "model_path": str(model_dir),
            "tokenizer_path": str(model_dir),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
        }
        assert c.json("GET", "/model_info") == (200, model_info)
        assert "Endpoint '/get_model_info' is deprecated" not in c.log(0)
        assert c.json("GET", "/get_model_info") == (200, model_info)
        assert (
            "] Endpoint '/get_model_info' is deprecated and will be removed in a future "
            "version. Please use '/model_info' instead."
        ) in c.log(0)

        # /server_info (http_server.py:781): every server arg, the keys included
        status, server = c.json("GET", "/server_info")
        assert status == 200
        assert (
            server["tp_size"],
            server["nnodes"],
            server["node_rank"],
            server["port"],
            server["model_path"],
            server["served_model_name"],
            server["dist_timeout"],
        ) == (4, 4, 0, c.port, str(model_dir), "toy", 20)
        assert server["api_key"] == KEY and "admin_api_key" in server
        # every ServerArgs field; the unparsed ones with the release's defaults
        # (srt/server_args.py:511 and :2600), the scheduler's and the handler's own keys
        release = _release_fields()
        assert set(server) == set(release) | {
            "status",
            "max_total_num_tokens",
            "max_req_input_len",
            "startup_time",
            "internal_states",
            "version",
            "kv_events",
        }
        assert (server["tokenizer_worker_num"], server["hicache_ratio"]) == (1, 2.0)
        assert all(server[k] == v for k, v in release.items() if k not in ls_args.FIELDS)
        assert server["admin_api_key"] is None
        assert server["dist_init_addr"].startswith("127.0.0.1:")
        assert server["enable_metrics"] is True and server["version"] == __version__
        assert server["status"] == "ready" and server["max_total_num_tokens"] > 0
        assert server["max_req_input_len"] == 2048 - 1 - 5
        (state,) = server["internal_states"]
        assert set(state["memory_usage"]) == {
            "weight",
            "kvcache",
            "startup_available",
            "token_capacity",
            "token_capacity_swa",
            "graph",
        }
        assert state["effective_max_running_requests_per_dp"] > 0 and state["tp_size"] == 4
        assert "Endpoint '/get_server_info' is deprecated" not in c.log(0)
        status, old = c.json("GET", "/get_server_info")
        assert status == 200 and set(old) == set(server) and old["api_key"] == KEY
        assert (
            "] Endpoint '/get_server_info' is deprecated and will be removed in a future "
            "version. Please use '/server_info' instead."
        ) in c.log(0)

        # chat, not streamed: ChatCompletionResponse
        status, chat = _chat(c, "How is the fabric today?", max_tokens=12, ignore_eos=True)
        assert status == 200
        assert set(chat) == {"id", "object", "created", "model", "choices", "usage", "metadata"}
        assert chat["object"] == "chat.completion" and chat["model"] == "toy"
        assert chat["metadata"] == {"weight_version": "default"}
        choice = chat["choices"][0]
        assert set(choice) == {"index", "message", "logprobs", "finish_reason", "matched_stop"}
        assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
        words = choice["message"]["content"].split()
        assert len(words) == 12 and all(w in ls.VOCAB for w in words)
        usage = chat["usage"]
        assert usage["completion_tokens"] == 12
        assert usage["total_tokens"] == usage["prompt_tokens"] + 12
        assert set(usage) == {
            "prompt_tokens",
            "total_tokens",
            "completion_tokens",
            "prompt_tokens_details",
            "reasoning_tokens",
        }
        # deterministic in the prompt
        again = _chat(c, "How is the fabric today?", max_tokens=12, ignore_eos=True)[1]
        assert again["choices"][0]["message"]["content"] == choice["message"]["content"]
        other = _chat(c, "Something else entirely", max_tokens=12, ignore_eos=True)[1]
        assert other["choices"][0]["message"]["content"] != choice["message"]["content"]

        # chat, streamed: role chunk, content chunks, finish chunk, usage chunk, [DONE]
        status, headers, raw = c.request(
            "POST",
            "/v1/chat/completions",
            {
                "model": "toy",
                "messages": [{"role": "user", "content": "How is the fabric today?"}],
                "max_tokens": 12,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        events = _sse(raw)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
        assert len({ch["id"] for ch in chunks}) == 1
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[0]["choices"][0]["delta"]["content"] == ""
        content = [ch["choices"][0]["delta"]["content"] for ch in chunks[1:-2]]
        assert "".join(content) == choice["message"]["content"]
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == usage

        # completions: max_tokens defaults to 16; stop strings end with finish_reason stop
        status, comp = c.json(
            "POST", "/v1/completions", {"model": "toy", "prompt": "Once upon", "ignore_eos": True}
        )
        assert status == 200 and comp["object"] == "text_completion"
        assert comp["usage"]["completion_tokens"] == 16
        assert set(comp["choices"][0]) == {
            "index",
            "text",
            "logprobs",
            "finish_reason",
            "matched_stop",
        }
        stop_word = comp["choices"][0]["text"].split()[3]
        stopped = c.json(
            "POST",
            "/v1/completions",
            {"prompt": "Once upon", "stop": [stop_word], "ignore_eos": True},
        )[1]["choices"][0]
        assert stopped["finish_reason"] == "stop" and stopped["matched_stop"] == stop_word
        assert stop_word not in stopped["text"].split()[3:]
        status, _, raw = c.request(
            "POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 3, "stream": True}
        )
        events = _sse(raw)
        assert events[-1] == "[DONE]" and json.loads(events[0])["object"] == "text_completion"
        # the completions' usage chunk goes out without its null fields
        # (serving_completions.py:460 exclude_none=True); the chat's above keeps them
        raw = c.request(
            "POST",
            "/v1/completions",
            {
                "prompt": "Once upon",
                "max_tokens": 3,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )[2]
        final = json.loads(_sse(raw)[-2])
        assert final["choices"] == [] and "sglext" not in final
        assert final["usage"] == {
            "prompt_tokens": final["usage"]["prompt_tokens"],
            "total_tokens": final["usage"]["prompt_tokens"] + 3,
            "completion_tokens": 3,
            "reasoning_tokens": 0,
        }
        assert "prompt_tokens_details" in usage and usage["prompt_tokens_details"] is None

        # SGLang's native /generate
        status, gen = c.json(
            "POST",
            "/generate",
            {"text": "Hello", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}},
        )
        assert status == 200 and gen["meta_info"]["completion_tokens"] == 5
        assert gen["meta_info"]["finish_reason"] == {"type": "length", "length": 5}

        # request errors: ErrorResponse with code 400
        status, err = c.json("POST", "/v1/chat/completions", b"{}", ctype="text/plain")
        assert status == 400 and err["object"] == "error" and err["code"] == 400
        assert "Only 'application/json' is allowed" in err["message"]
        status, err = c.json("POST", "/v1/chat/completions", {"messages": []})
        assert (status, err["message"], err["type"]) == (
            400,
            "Messages cannot be empty.",
            "BadRequestError",
        )
        assert (
            c.json(
                "POST",
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            )[0]
            == 400
        )
        assert c.json("GET", "/no/such/route") == (404, {"detail": "Not Found"})

        # /metrics: Prometheus text, counters of what was served
        status, headers, raw = c.request("GET", "/metrics", key=None)
        text = raw.decode()
        assert status == 200 and headers["content-type"].startswith("text/plain")
        assert "# TYPE sglang:generation_tokens_total counter" in text
        values: dict[str, float] = {}  # each name summed over its series (is_streaming)
        for line in text.splitlines():
            if line.startswith("sglang:") and 'model_name="toy"' in line:
                name = line.split("{")[0]
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        assert values["sglang:generation_tokens_total"] >= 12 * 3 + 16
        assert values["sglang:prompt_tokens_total"] > 0
        assert values["sglang:num_running_reqs"] == 0
        assert "sglang:time_to_first_token_seconds_bucket" in text


@needs_loopback
def test_concurrent_requests_share_forward_passes(tmp_path: Path, model_dir: Path) -> None:
    with cluster(tmp_path, model_dir, 2) as c:
        _up(c)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(
                pool.map(
                    lambda i: _chat(c, f"request {i}", max_tokens=20, ignore_eos=True), range(4)
                )
            )
        assert all(status == 200 and r["usage"]["completion_tokens"] == 20 for status, r in results)
        assert "#new-seq:" in c.log(0)


@needs_loopback
def test_stream_is_sent_while_generating(tmp_path: Path, model_dir: Path) -> None:
    """Chunks leave as tokens are made (not at the end), and a client that leaves frees its slot.
    The running gauge is the scheduler's report, every decode_log_interval-th decode step
    (sglang 0.5.17 srt/managers/scheduler_components/metrics_reporter.py:728): 1 here."""
    running = re.compile(r'^sglang:num_running_reqs\{model_name="toy",[^}]*\} ([0-9.]+)$', re.M)
    with cluster(tmp_path, model_dir, 2, extra=["--decode-log-interval", "1"]) as c:
        _up(c)
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=30)
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(
                {
                    "messages": [{"role": "user", "content": "a long answer"}],
                    "max_tokens": 1900,
                    "ignore_eos": True,
                    "stream": True,
                }
            ),
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        events: list[dict[str, Any]] = []
        while len(events) < 4:  # role, the prefill's token, two decode steps (the first reported)
            line = resp.fp.readline().decode()
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
        assert events[1]["choices"][0]["delta"]["content"]
        metrics = c.request("GET", "/metrics", key=None)[2].decode()
        assert running.findall(metrics) == ["1.0"], metrics
        conn.close()
        deadline = time.monotonic() + 15
        while running.findall(c.request("GET", "/metrics", key=None)[2].decode()) != ["0.0"]:
            assert time.monotonic() < deadline, "the abandoned stream kept its slot"
            time.sleep(0.1)


@needs_loopback
def test_a_dead_rank_fails_generation_and_health(tmp_path: Path, model_dir: Path) -> None:
    with cluster(tmp_path, model_dir, 3) as c:
        _up(c)
        assert _chat(c, "before", max_tokens=3)[0] == 200
        c.procs[2].send_signal(signal.SIGKILL)
        c.procs[2].wait(timeout=10)
        status, err = _chat(c, "after", max_tokens=3)
        assert status == 500
        assert set(err) == {"object", "message", "type", "param", "code"}
        assert (err["object"], err["type"], err["code"]) == ("error", "InternalServerError", 500)
        assert "rank 2" in err["message"]
        assert c.request("GET", "/health", key=None)[0] == 503
        assert _chat(c, "again", max_tokens=3)[0] == 500  # no silent recovery
        head = c.log(0)
        # nccl src/misc/socket.cc:71, and the pynccl error (pynccl_wrapper.py:461)
        assert "NCCL WARN socketProgress: Connection closed by remote peer 127.0.0.3<" in head
        assert "NCCL error: remote process exited or there was a network error" in err["message"]
        # the surviving worker is still there, as NCCL would leave it
        assert c.procs[1].poll() is None


# ------------------------------------------------------ start-up failures
def _killed(c: Cluster, rank: int) -> str:
    """The rank ended as the release's does after a scheduler exception: its traceback, the
    main process' SIGQUIT handler, kill_process_tree, SIGKILL (engine.py:1651, common.py:2067)."""
    assert c.wait_exit(rank, 30) == -signal.SIGKILL
    log = c.log(rank)
    prefix = f" TP{rank}] Scheduler hit an exception: Traceback (most recent call last):"
    assert prefix in log
    tail = log[log.index(prefix) :]
    assert "] Received sigquit from a child process. It usually means the child failed." in tail
    assert "] kill_process_tree called: parent_pid=" in tail and "include_parent=True" in tail
    return tail


@needs_loopback
def test_a_missing_rank_keeps_the_others_waiting(tmp_path: Path, model_dir: Path) -> None:
    # The timeouts here are a few seconds: long enough for every started rank to come up on
    # a busy machine (about half a second each), short enough not to idle the suite.
    with cluster(tmp_path, model_dir, 3, start=[0, 1], timeout=4) as c:
        time.sleep(2)
        assert c.procs[0].poll() is None and c.procs[1].poll() is None
        # torch TCPStore::waitForWorkers: whole seconds, past the timeout
        assert (
            "torch.distributed.DistStoreError: Timed out after 5 seconds waiting for clients. "
            "2/3 clients joined."
        ) in _killed(c, 0)
        # the head's store went away under the waiting worker (torch c10d Utils.hpp recvBytes)
        assert (
            "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was "
            "likely closed. Did the remote server shutdown or crash?"
        ) in _killed(c, 1)
        assert "Init torch distributed ends." not in c.log(1)


@needs_loopback
def test_worker_retries_until_the_head_listens(tmp_path: Path, model_dir: Path) -> None:
    # torch's socket.cpp retries a refused connect without a word until the timeout
    with cluster(tmp_path, model_dir, 2, start=[1], timeout=4) as c:
        c.wait_for(1, " TP1] Init torch distributed begin.", 10)
        time.sleep(2)
        assert c.procs[1].poll() is None and "[c10d]" not in c.log(1)
        tail = _killed(c, 1)
        assert (
            "[c10d] The client socket has timed out after 4000ms while trying to connect to "
            "(127.0.0.1, " in c.log(1)
        )
        assert (
            "torch.distributed.DistNetworkError: The client socket has timed out after "
            "4000ms while trying to connect to (127.0.0.1, " in tail
        )


@needs_loopback
def test_head_sglang_host_ip_off_the_fabric_hangs_after_nccl_init(
    tmp_path: Path, model_dir: Path
) -> None:
    """The message queue's address is TP0's get_local_ip_auto() (shm_broadcast.py:196):
    unset, it is the default route's address, not on the fabric; every rank waits for ever."""
    with cluster(tmp_path, model_dir, 2, timeout=3, env={0: {"SGLANG_HOST_IP": None}}) as c:
        for rank in (0, 1):
            c.wait_for(rank, "- Init COMPLETE", 10)
            c.wait_for(
                rank,
                "CustomAllreduce is disabled because this process group spans across nodes.",
                10,
            )
        time.sleep(4)  # past --dist-timeout: the release has no timeout here
        assert all("Init torch distributed ends" not in c.log(r) for r in (0, 1))
        assert c.procs[0].poll() is None and c.procs[1].poll() is None  # hanging, not failing
        assert all("Scheduler hit an exception" not in c.log(r) for r in (0, 1))


@needs_loopback
def test_a_worker_sglang_host_ip_does_not_matter(tmp_path: Path, model_dir: Path) -> None:
    """Only the writer's address is used by the message queue (shm_broadcast.py:196)."""
    with cluster(tmp_path, model_dir, 2, env={1: {"SGLANG_HOST_IP": None}}) as c:
        _up(c)
        c.wait_for(1, " TP1] Init torch distributed ends.", 10)


@needs_loopback
def test_gloo_interface_that_does_not_exist(tmp_path: Path, model_dir: Path) -> None:
    with cluster(
        tmp_path, model_dir, 2, timeout=4, env={1: {"GLOO_SOCKET_IFNAME": "sparkctl-no0"}}
    ) as c:
        assert (
            "RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/"
            "device.cc:84] ifa != nullptr. Unable to find address for: sparkctl-no0"
        ) in _killed(c, 1)
        assert (
            "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/"
            "transport/tcp/pair.cc:144]" in _killed(c, 0)
        )


@needs_loopback
def test_gloo_loopback_fallback_fails_between_nodes(tmp_path: Path, model_dir: Path) -> None:
    try:
        own = socket.gethostbyname(socket.gethostname())
    except OSError:
        own = "127.0.0.1"
    if not own.startswith("127.") and ls.bindable(own):
        pytest.skip("this machine's hostname resolves to a local address: Gloo would use it")
    with cluster(tmp_path, model_dir, 2, timeout=4, env={1: {"GLOO_SOCKET_IFNAME": None}}) as c:
        assert (
            "Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/"
            "pair.cc:144] timed out connecting: SO_ERROR: Connection refused, "
            "remote=[127.0.0.1]:"
        ) in _killed(c, 0)
        _killed(c, 1)
        assert (
            "Warning: Unable to resolve hostname to a (local) address. Using the loopback "
            "address as fallback. Manually set the network interface to bind to with "
            "GLOO_SOCKET_IFNAME."
        ) in c.log(1)


@needs_loopback
def test_tls_serves_https_and_the_warm_up_goes_over_it(tmp_path: Path, model_dir: Path) -> None:
    """--ssl-certfile/--ssl-keyfile: uvicorn's TLS on TP0 (http_server.py:2538), the warm-up
    over https without verification when no --ssl-ca-certs is given (server_args.py:8502)."""
    crt, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(crt),
        ],
        capture_output=True,
        timeout=60,
        check=True,
    )
    with cluster(
        tmp_path, model_dir, 2, extra=["--ssl-certfile", str(crt), "--ssl-keyfile", str(key)]
    ) as c:
        _up(c)
        head = c.log(0)
        assert f"] SSL enabled: certfile={crt}, keyfile={key}" in head
        assert f"] INFO:     Uvicorn running on https://127.0.0.1:{c.port}" in head
        assert "] SSL is enabled but --ssl-ca-certs was not provided." in head
        assert '"POST /generate HTTP/1.1" 200 OK' in head
        ctx = ssl.create_default_context(cafile=str(crt))
        conn = http.client.HTTPSConnection("127.0.0.1", c.port, timeout=30, context=ctx)
        try:
            conn.request("GET", "/server_info", headers={"Authorization": f"Bearer {KEY}"})
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["ssl_certfile"] == str(crt)
        finally:
            conn.close()
        # plain http to the TLS port gets no answer from SGLang
        assert b"HTTP/1.1 200" not in _plain_request(c.port)
        # the other ranks' health server stays plain http (common.py:3107)
        worker = http.client.HTTPConnection("127.0.0.2", c.port, timeout=10)
        try:
            worker.request("GET", "/health")
            assert worker.getresponse().status == 200
        finally:
            worker.close()


def _plain_request(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            return s.recv(4096)
        except (TimeoutError, ConnectionResetError):
            return b""


@pytest.mark.parametrize(
    ("n", "total", "elapsed"),
    [(0, 12, 0.0), (1, 12, 0.4), (5, 58, 3.2), (12, 12, 2.9), (3, 7, 95.0), (2, 3, 7300.0)],
)
def test_the_progress_bar_is_tqdms(n: int, total: int, elapsed: float) -> None:
    """The stand-in draws tqdm's meter without importing tqdm (the nodes' Python has none):
    the same text as tqdm.format_meter, for the default bar and SGLang's BAR_FORMAT
    (sglang srt/utils/common.py:1234)."""
    tqdm = pytest.importorskip("tqdm")
    from sparkctl_lab.standins.sglang import release  # noqa: PLC0415

    desc = "Capturing batches (bs=64 avail_mem=99.80 GB)"
    assert release.meter(n, total, elapsed, desc) == tqdm.tqdm.format_meter(
        n, total, elapsed, prefix=desc
    )
    assert release.meter(n, total, elapsed) == tqdm.tqdm.format_meter(n, total, elapsed)
    bar_format = (
        "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} "
        "[{elapsed}<{remaining}, {rate_fmt}]"
    )
    assert release.meter(
        n, total, elapsed, "Multi-thread loading shards", sglang_format=True
    ) == tqdm.tqdm.format_meter(
        n, total, elapsed, prefix="Multi-thread loading shards", bar_format=bar_format
    )
