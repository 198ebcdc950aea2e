"""The lab stand-in's HTTP answers are the pinned release's, as its own models say.

Real stand-in ranks are started with the stand-in's own test harness
(tests/unit/test_sglang_standin.py: ``cluster``, ``_up``, ``_sse``, ``_chat``,
``model_dir``), and every answer a client of sparkctl meets is collected:
/v1/models, /v1/chat/completions (plain and streamed), /v1/completions
(plain and streamed), request errors (400) and the API key's refusal (401),
/health, /server_info and /model_info (the release's current names; the
/get_* ones are deprecated, sglang 0.5.17 srt/entrypoints/http_server.py:723,771).

Inside the release's venv each OpenAI answer is validated with the release's
pydantic model (srt/entrypoints/openai/protocol.py) and serialized back as
the release serializes that answer (release_probe.validate); the stand-in's
JSON must be exactly that: a key the release would not send, a key it would
send and the stand-in does not, or a value the model had to coerce is a
mismatch, named with its path. The endpoints without a model are checked
against keys read from the release's code (:func:`server_info_keys`,
:func:`model_info_keys`, each naming its file:line).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from tests.contract import release_probe
from tests.contract.conftest import SGLangRelease
from tests.unit.test_sglang_standin import (  # the stand-in's own harness
    Cluster,
    _chat,
    _sse,
    _up,
    cluster,
    model_dir,  # noqa: F401 -- a fixture, used by name
    needs_loopback,
)

pytestmark = pytest.mark.contract


# ------------------------------------------------ keys from the release's code
def _function(path: Path, name: str) -> ast.AsyncFunctionDef | ast.FunctionDef:
    tree = ast.parse(path.read_text(), str(path))
    found = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
    ]
    assert len(found) == 1, f"{path}: {len(found)} functions named {name}"
    return found[0]


def _dict_literals(node: ast.AST) -> list[ast.Dict]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Dict)]


def _literal_keys(d: ast.Dict) -> list[str]:
    return [k.value for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def server_info_keys(package_dir: Path, server_args_fields: list[str]) -> dict[str, str]:
    """Key -> where the release puts it into /server_info.

    http_server.py ``server_info`` returns one dict: ``**resolved_config_dict(
    dataclasses.asdict(server_args))`` (every ServerArgs field;
    tokenizer_manager.py ``resolved_config_dict`` only updates values),
    ``**_global_state.scheduler_info`` (the scheduler's handshake,
    managers/scheduler.py ``get_init_info``), and its literal keys."""
    http = package_dir / "srt" / "entrypoints" / "http_server.py"
    func = _function(http, "server_info")
    (outer,) = [d for d in _dict_literals(func) if None in d.keys]  # the one with ** spreads
    spreads = [ast.unparse(v) for k, v in zip(outer.keys, outer.values, strict=True) if k is None]
    assert spreads == [
        "_global_state.tokenizer_manager.resolved_config_dict(dataclasses.asdict(server_args))",
        "_global_state.scheduler_info",
    ], spreads
    keys = dict.fromkeys(server_args_fields, f"ServerArgs field ({http.name}:{outer.lineno})")
    scheduler = package_dir / "srt" / "managers" / "scheduler.py"
    init_info = _function(scheduler, "get_init_info")
    (info,) = _dict_literals(init_info)
    keys.update(dict.fromkeys(_literal_keys(info), f"{scheduler.name}:{info.lineno}"))
    for key, value in zip(outer.keys, outer.values, strict=True):
        if isinstance(key, ast.Constant):
            keys[str(key.value)] = f"{http.name}:{value.lineno}"
    return keys


def model_info_keys(package_dir: Path) -> dict[str, str]:
    """Key -> file:line of http_server.py ``model_info``'s result dict (``embedding`` is
    added only for embedding models; the stand-in serves a generation model)."""
    http = package_dir / "srt" / "entrypoints" / "http_server.py"
    func = _function(http, "model_info")
    (result,) = _dict_literals(func)
    return {
        k: f"{http.name}:{v.lineno}"
        for k, v in zip(_literal_keys(result), result.values, strict=True)
    }


def test_the_release_code_gives_the_info_keys(sglang_release: SGLangRelease) -> None:
    """The readers above find what the release's source holds (0.5.17: http_server.py:781
    server_info, :733 model_info; scheduler.py:1607 get_init_info)."""
    fields = sglang_release.json(
        "import dataclasses, json; from sglang.srt.server_args import ServerArgs; "
        "print(json.dumps([f.name for f in dataclasses.fields(ServerArgs)]))"
    )
    keys = server_info_keys(sglang_release.package_dir, fields)
    assert {"tp_size", "nnodes", "dist_init_addr", "api_key"} <= set(fields)
    assert set(fields) <= set(keys)
    assert set(keys) - set(fields) == {
        "status",
        "max_total_num_tokens",
        "max_req_input_len",
        "startup_time",
        "internal_states",
        "version",
        "kv_events",
    }
    model = model_info_keys(sglang_release.package_dir)
    assert {"model_path", "is_generation", "weight_version", "architectures"} <= set(model)


# ------------------------------------------------------------ comparing JSON
def json_differences(sent: Any, release: Any, path: str = "$") -> list[str]:
    """Every place where ``sent`` is not ``release``, as ``path: what``."""
    if isinstance(sent, dict) and isinstance(release, dict):
        out = [
            f"{path}.{k}: sent, the release does not send it"
            for k in sorted(sent.keys() - release.keys())
        ]
        out += [
            f"{path}.{k}: the release sends it ({release[k]!r}), the stand-in does not"
            for k in sorted(release.keys() - sent.keys())
        ]
        for k in sorted(sent.keys() & release.keys()):
            out += json_differences(sent[k], release[k], f"{path}.{k}")
        return out
    if isinstance(sent, list) and isinstance(release, list) and len(sent) == len(release):
        return [
            d
            for i, (a, b) in enumerate(zip(sent, release, strict=True))
            for d in json_differences(a, b, f"{path}[{i}]")
        ]
    if sent != release or type(sent) is not type(release):
        return [f"{path}: sent {sent!r}, the release's model makes it {release!r}"]
    return []


def test_json_differences_names_each_place() -> None:
    assert json_differences({"a": 1, "b": [1, {"c": None}]}, {"a": 1, "b": [1, {"c": None}]}) == []
    assert json_differences(
        {"a": 1, "x": 2, "b": [{"c": "1"}]}, {"a": 1.0, "y": None, "b": [{"c": 1}]}
    ) == [
        "$.x: sent, the release does not send it",
        "$.y: the release sends it (None), the stand-in does not",
        "$.a: sent 1, the release's model makes it 1.0",
        "$.b[0].c: sent '1', the release's model makes it 1",
    ]


# ----------------------------------------------------------- the stand-in
def _collect(c: Cluster) -> dict[str, Any]:
    """Every answer the test checks: (status, headers, raw bytes) by name."""
    got: dict[str, Any] = {}
    chat = {
        "model": "toy",
        "messages": [{"role": "user", "content": "How is the fabric?"}],
        "max_tokens": 8,
        "ignore_eos": True,
    }
    for name, method, path, body in (
        ("models", "GET", "/v1/models", None),
        ("chat", "POST", "/v1/chat/completions", chat),
        (
            "chat_stream",
            "POST",
            "/v1/chat/completions",
            {**chat, "stream": True, "stream_options": {"include_usage": True}},
        ),
        (
            "completion",
            "POST",
            "/v1/completions",
            {"model": "toy", "prompt": "Once upon", "max_tokens": 6, "ignore_eos": True},
        ),
        (
            "completion_stream",
            "POST",
            "/v1/completions",
            {
                "model": "toy",
                "prompt": "Once upon",
                "max_tokens": 4,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
        ("error_empty_messages", "POST", "/v1/chat/completions", {"messages": []}),
        ("server_info", "GET", "/server_info", None),
        ("model_info", "GET", "/model_info", None),
    ):
        got[name] = c.request(method, path, body)
    got["error_content_type"] = c.request("POST", "/v1/chat/completions", b"{}", ctype="text/plain")
    got["unauthorized"] = c.request("GET", "/v1/models", key=None)
    got["health"] = c.request("GET", "/health", key=None)
    assert _chat(c, "still serving", max_tokens=2)[0] == 200
    return got


def _probe(sglang_release: SGLangRelease, work: Path, request: dict[str, Any]) -> Any:
    (work / "request.json").write_text(json.dumps(request))
    return sglang_release.json(Path(release_probe.__file__).read_text(), str(work / "request.json"))


@needs_loopback
def test_standin_answers_are_what_the_release_sends(
    tmp_path: Path,
    model_dir: Path,  # noqa: F811
    sglang_release: SGLangRelease,
) -> None:
    with cluster(tmp_path, model_dir, 2) as c:
        _up(c)
        got = _collect(c)
    problems: list[str] = []

    def status(name: str, want: int) -> None:
        if got[name][0] != want:
            problems.append(f"{name}: HTTP {got[name][0]}, want {want}: {got[name][2][:300]!r}")

    for name in (
        "models",
        "chat",
        "chat_stream",
        "completion",
        "completion_stream",
        "server_info",
        "model_info",
        "health",
    ):
        status(name, 200)
    status("error_empty_messages", 400)
    status("error_content_type", 400)
    status("unauthorized", 401)

    # (label, model, JSON text, the release's dump options for that answer)
    checks: list[tuple[str, str, str, dict[str, Any]]] = [
        ("/v1/models", "ModelList", got["models"][2].decode(), {}),
        ("/v1/chat/completions", "ChatCompletionResponse", got["chat"][2].decode(), {}),
        ("/v1/completions", "CompletionResponse", got["completion"][2].decode(), {}),
        # serving_base.py:225 create_error_response; http_server.py:581 for the content type
        ("400 messages", "ErrorResponse", got["error_empty_messages"][2].decode(), {}),
        ("400 content type", "ErrorResponse", got["error_content_type"][2].decode(), {}),
    ]
    for stream, model in (
        ("chat_stream", "ChatCompletionStreamResponse"),
        ("completion_stream", "CompletionStreamResponse"),
    ):
        headers, events = got[stream][1], _sse(got[stream][2])
        if not headers.get("content-type", "").startswith("text/event-stream"):
            problems.append(f"{stream}: content-type {headers.get('content-type')!r}")
        if events[-1:] != ["[DONE]"]:
            problems.append(f"{stream}: does not end with data: [DONE]")
        for i, event in enumerate(events[:-1]):
            chunk = json.loads(event)
            # The completions' usage chunk is dumped with exclude_none=True
            # (serving_completions.py:460); every other chunk in full
            # (serving_completions.py:390, serving_chat.py:1692 and :2416).
            final_usage = stream == "completion_stream" and chunk.get("choices") == []
            checks.append(
                (f"{stream} chunk {i}", model, event, {"exclude_none": True} if final_usage else {})
            )
        if not any(
            json.loads(e).get("choices") == [] and json.loads(e).get("usage") for e in events[:-1]
        ):
            problems.append(f"{stream}: no usage chunk although include_usage was asked for")

    work = tmp_path / "probe"
    work.mkdir()
    answer = _probe(
        sglang_release,
        work,
        {"protocol": [[m, t, o] for _, m, t, o in checks], "server_args_fields": True},
    )
    for (label, model, text, _), result in zip(checks, answer["protocol"], strict=True):
        if result["errors"]:
            problems += [
                f"{label}: not a valid {model}: {e['loc']}: {e['msg']}" for e in result["errors"]
            ]
            continue
        problems += [
            f"{label} ({model}) {d}" for d in json_differences(json.loads(text), result["dumped"])
        ]

    # 401: add_api_key_middleware's own body (srt/utils/auth.py:187-196), no model.
    if json.loads(got["unauthorized"][2] or b"null") != {"error": "Unauthorized"}:
        problems.append(
            f'401: body {got["unauthorized"][2]!r}, the release sends {{"error": "Unauthorized"}}'
        )
    # /health: an empty 200 Response (http_server.py:646-667), generation or not.
    if got["health"][2] != b"":
        problems.append(f"/health: body {got['health'][2]!r}, the release's is empty")

    pkg = sglang_release.package_dir
    for name, want in (
        ("server_info", server_info_keys(pkg, answer["server_args_fields"])),
        ("model_info", model_info_keys(pkg)),
    ):
        sent = json.loads(got[name][2]) if got[name][0] == 200 else {}
        extra = sorted(set(sent) - set(want))
        missing = sorted(set(want) - set(sent))
        if extra:
            problems.append(f"/{name}: {len(extra)} keys the release does not send: {extra}")
        if missing:
            wheres = sorted({want[k] for k in missing})
            problems.append(
                f"/{name}: {len(missing)} keys the release sends ({', '.join(wheres)})"
                f" missing: {missing}"
            )
    assert problems == [], "\n".join(
        ["the lab stand-in's answers differ from sglang's:", *problems]
    )
