"""`sparkctl serve verify`: the endpoint end to end, as an application sees it.

Through the OpenAI client (and httpx for SGLang's own endpoints), with the API
key: /health and /health_generate, /server_info (tp size and node count as
the inventory says; /get_server_info for a release that predates the name),
/v1/models lists the model, a chat completion returns
content, a streamed completion streams, and a request without the key is
refused. Then a few timed streamed requests: time to first token, decode
tokens per second (of the tokens the stream's usage counts) and end-to-end
latency. Every rank's unit is checked too, so a stopped rank is named even
when the head only says "unhealthy", and so is every rank's firewall as loaded
now (sparkctl.serve.firewall: a flushed table fails naming the node).

Results are checks in validate's report format (report.json, report.html in
the run's directory). A wrong-shaped or non-JSON answer is a failed check
saying what came back, never a traceback and never a number made up. What
came back passes through the cluster's redaction first: SGLang's /server_info
returns its server args, ``api_key`` and ``admin_api_key`` among them (sglang
0.5.17 ``srt/entrypoints/http_server.py``, the server_info handler).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from sparkctl import __version__
from sparkctl.errors import SparkctlError
from sparkctl.report.model import Check, Report, Thresholds
from sparkctl.serve import firewall, probe
from sparkctl.serve.cluster import Cluster, Group

if TYPE_CHECKING:
    from sparkctl.serve.gateway import Gateway

PROMPT = "In one sentence, what does tensor parallelism split across the ranks?"
# Every request of verify, streams included, goes through serve's one client
# (sparkctl.serve.probe.client: no proxy from the environment) and ends by its
# deadline, reading at most probe.ANSWER_LIMIT bytes.
GET_DEADLINE_S = 60.0
COMPLETION_DEADLINE_S = 300.0
ANSWER_ERRORS = (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError, AttributeError)


def _fail(check: str, host: str, message: str, subject: str | None = None) -> Check:
    return Check(check, host, subject, "failed", message)


def _guard(check: str, host: str, fn: Callable[[], Check]) -> Check:
    """One check; a wrong answer of any kind becomes its failure message."""
    import openai  # noqa: PLC0415

    start = time.monotonic()
    try:
        result = fn()
    except openai.APIStatusError as exc:
        result = _fail(check, host, f"HTTP {exc.status_code}: {str(exc.message)[:200]}")
    except json.JSONDecodeError as exc:  # the OpenAI client's, of a body or a streamed event
        result = _fail(check, host, f"not JSON ({exc.msg}): {exc.doc[:120]!r}")
    except (openai.APIError, *ANSWER_ERRORS) as exc:
        # The client's "Connection error." hides why (refused, timed out, a certificate
        # that the CA does not vouch for): say its cause too.
        cause = (
            f" ({type(exc.__cause__).__name__}: {str(exc.__cause__)[:160]})"
            if isinstance(exc, openai.APIConnectionError) and exc.__cause__
            else ""
        )
        result = _fail(check, host, f"{type(exc).__name__}: {str(exc)[:200]}{cause}")
    return Check(
        result.check,
        result.host,
        result.subject,
        result.outcome,
        result.message,
        round(time.monotonic() - start, 3),
    )


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise ValueError(f"HTTP {resp.status_code}, not JSON: {resp.text[:120]!r}") from None


def _parsed(raw: Any, what: str) -> Any:
    """The OpenAI client's object of a ``with_raw_response`` answer, once it is a JSON object."""
    body = _json(raw.http_response)
    if not isinstance(body, dict):
        raise ValueError(
            f"{what} returned {type(body).__name__}, not an object: "
            f"{raw.http_response.text[:120]!r}"
        )
    return raw.parse()


def _completion_tokens(usage: Any, chunks: int, max_tokens: int) -> int:
    """A stream's ``usage.completion_tokens``, if it is a count its content chunks agree with
    (each chunk carries at least one token, and there are at most max_tokens)."""
    if usage is None:
        raise ValueError(
            "the stream sent no usage (stream_options include_usage): no token "
            "count for a decode rate"
        )
    n = getattr(usage, "completion_tokens", None)
    if type(n) is not int or not chunks <= n <= max_tokens:
        raise ValueError(
            f"usage.completion_tokens {n!r} for {chunks} content chunk(s) and "
            f"max_tokens {max_tokens}: not a token count"
        )
    return int(n)


class Verifier:
    def __init__(self, cluster: Group, key: str | None) -> None:
        """``cluster``: one TP group (its head's endpoint, its members' units)."""
        import openai  # noqa: PLC0415 - heavy, only when verifying

        self.cluster, self.key, self.head = cluster, key, cluster.head
        self.url = cluster.base_url
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        # https: the server's certificate checked against the inventory's CA file.
        self.http = probe.client(cluster.tls_ca_file, GET_DEADLINE_S)
        self.client = openai.OpenAI(
            base_url=f"{self.url}/v1",
            api_key=key or "none",
            timeout=120.0,
            max_retries=0,
            http_client=probe.client(cluster.tls_ca_file, COMPLETION_DEADLINE_S),
        )
        s = cluster.sglang()
        self.tp, self.nnodes = s.tp_size, s.nnodes
        self.requests, self.max_tokens = s.verify_requests, s.verify_max_tokens
        self.figures: dict[str, float] = {}

    def get(self, path: str, *, auth: bool = True, timeout: float = 30.0) -> httpx.Response:
        return self.http.get(
            f"{self.url}{path}", headers=self.headers if auth else {}, timeout=timeout
        )

    def get_current(self, path: str, deprecated: str) -> httpx.Response:
        """``path``, or its deprecated name where the pinned release predates it (404)."""
        resp = self.get(path)
        return self.get(deprecated) if resp.status_code == 404 else resp

    # -------------------------------------------------------------- checks
    def ranks(self) -> list[Check]:
        states = self.cluster.unit_states()
        out = []
        for node in self.cluster.nodes:
            st, rank = states[node], self.cluster.rank(node)
            running = st.get("ActiveState") == "active" and st.get("SubState") == "running"
            out.append(
                Check(
                    "rank_running",
                    node,
                    f"rank {rank}",
                    "passed" if running else "failed",
                    f"{self.cluster.unit} {st.get('ActiveState')}/"
                    f"{st.get('SubState')}" + (f" ({st['error']})" if st.get("error") else ""),
                )
            )
        return out

    def health(self, path: str) -> Check:
        resp = self.get(path, timeout=60.0)
        ok = resp.status_code == 200
        return Check(
            path.strip("/"),
            self.head,
            None,
            "passed" if ok else "failed",
            f"HTTP {resp.status_code}" + ("" if ok else f": {resp.text[:120]!r}"),
        )

    def server_info(self) -> Check:
        resp = self.get_current("/server_info", "/get_server_info")
        info = _json(resp)
        if not isinstance(info, dict):
            raise ValueError(
                f"{resp.url.path} returned {type(info).__name__}, not an object: "
                f"{resp.text[:120]!r}"
            )
        tp, nnodes = info.get("tp_size"), info.get("nnodes")
        # a count, not "4" or 4.0 or true: what came back is shown as it came (repr)
        ok = type(tp) is int and type(nnodes) is int and (tp, nnodes) == (self.tp, self.nnodes)
        return Check(
            "server_info",
            self.head,
            None,
            "passed" if ok else "failed",
            f"tp_size {tp!r}, nnodes {nnodes!r} (want {self.tp}, {self.nnodes}), "
            f"version {str(info.get('version', '?'))[:40]}",
        )

    def models(self) -> Check:
        raw = self.client.models.with_raw_response.list()
        data = _parsed(raw, "/v1/models").data
        if not isinstance(data, list):
            raise ValueError(
                f"/v1/models 'data' is {type(data).__name__}, not a list: "
                f"{raw.http_response.text[:120]!r}"
            )
        ids = [getattr(m, "id", m) for m in data]
        want = self.cluster.model_name
        ok = want in ids
        return Check(
            "models",
            self.head,
            None,
            "passed" if ok else "failed",
            f"/v1/models lists {ids}" + ("" if ok else f", not {want!r}"),
        )

    def chat(self) -> Check:
        raw = self.client.chat.completions.with_raw_response.create(
            model=self.cluster.model_name,
            max_tokens=self.max_tokens,
            messages=[{"role": "user", "content": PROMPT}],
        )
        choices = _parsed(raw, "/v1/chat/completions").choices
        if not isinstance(choices, list) or not choices or not hasattr(choices[0], "message"):
            raise ValueError(f"no choices in the answer: {raw.http_response.text[:120]!r}")
        text = getattr(choices[0].message, "content", None) or ""
        if not isinstance(text, str):
            raise ValueError(
                f"message.content is {type(text).__name__}, not text: "
                f"{raw.http_response.text[:120]!r}"
            )
        ok = bool(text.strip())
        return Check(
            "chat_completion",
            self.head,
            None,
            "passed" if ok else "failed",
            f"{len(text)} characters, finish_reason {choices[0].finish_reason}: {text[:60]!r}",
        )

    def stream(self) -> Check:
        chunks, text = 0, ""
        for chunk in self.client.completions.create(
            model=self.cluster.model_name, prompt=PROMPT, max_tokens=self.max_tokens, stream=True
        ):
            if chunk.choices and chunk.choices[0].text:
                chunks += 1
                text += chunk.choices[0].text
        ok = chunks >= 2
        return Check(
            "streamed_completion",
            self.head,
            None,
            "passed" if ok else "failed",
            f"{chunks} chunks, {len(text)} characters",
        )

    def refused_without_key(self) -> Check:
        if not self.key:
            return Check("api_key", self.head, None, "skipped", "no API key configured")
        resp = self.http.post(
            f"{self.url}/v1/chat/completions",
            timeout=30.0,
            json={
                "model": self.cluster.model_name,
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "hello"}],
            },
        )
        ok = resp.status_code == 401
        return Check(
            "api_key",
            self.head,
            None,
            "passed" if ok else "failed",
            f"without the key: HTTP {resp.status_code}" + ("" if ok else " (want 401)"),
        )

    def timing(self) -> Check:
        ttft, rates, e2e = [], [], []
        for _ in range(self.requests):
            start = time.monotonic()
            first: float | None = None
            chunks, usage = 0, None
            # ignore_eos (an SGLang sampling parameter, as its bench_serving uses): every
            # request decodes max_tokens, so the rate is measured over the same length;
            # the usage chunk (include_usage) says how many tokens that was.
            for chunk in self.client.chat.completions.create(
                model=self.cluster.model_name,
                max_tokens=self.max_tokens,
                stream=True,
                stream_options={"include_usage": True},
                messages=[{"role": "user", "content": PROMPT}],
                extra_body={"ignore_eos": True},
            ):
                if chunk.usage is not None:
                    usage = chunk.usage
                if chunk.choices and chunk.choices[0].delta.content:
                    chunks += 1
                    first = first if first is not None else time.monotonic()
            end = time.monotonic()
            if first is None:
                raise ValueError("a streamed chat completion produced no content")
            tokens = _completion_tokens(usage, chunks, self.max_tokens)
            if tokens < 2 or end <= first:
                raise ValueError(
                    f"a streamed chat completion gave {tokens} token(s) with "
                    f"ignore_eos and max_tokens {self.max_tokens}: no decode rate"
                )
            ttft.append(first - start)
            e2e.append(end - start)
            rates.append((tokens - 1) / (end - first))
        self.figures = {
            "ttft_s": statistics.median(ttft),
            "e2e_s": statistics.median(e2e),
            "decode_tokens_per_s": statistics.median(rates),
        }
        f = self.figures
        return Check(
            "latency",
            self.head,
            None,
            "passed",
            f"median over {self.requests} requests: time to first token "
            f"{f['ttft_s']:.3f} s, decode {f['decode_tokens_per_s']:.1f} tokens/s, "
            f"end to end {f['e2e_s']:.3f} s",
        )

    def run(self) -> list[Check]:
        checks = self.ranks()
        for name, fn in (
            ("health", lambda: self.health("/health")),
            ("health_generate", lambda: self.health("/health_generate")),
            ("server_info", self.server_info),
            ("models", self.models),
            ("chat_completion", self.chat),
            ("streamed_completion", self.stream),
            ("api_key", self.refused_without_key),
        ):
            checks.append(_guard(name, self.head, fn))
        if all(c.ok for c in checks):
            checks.append(_guard("latency", self.head, self.timing))
        else:
            checks.append(
                Check(
                    "latency",
                    self.head,
                    None,
                    "skipped",
                    "not measured: the service is not healthy",
                )
            )
        return checks


def verify(cluster: Cluster, started: str) -> Report:
    """Every TP group's endpoint (one per sglang_group), each with its own ranks."""
    key = cluster.api_key()
    t0 = time.monotonic()
    report = Report(
        run_id=cluster.run_dir.name,
        cluster=cluster.inv.cluster,
        inventory=str(cluster.inv.path),
        started=started,
        sparkctl_version=__version__,
        hosts=cluster.nodes,
        thresholds=Thresholds(0.0, 0.0, 0, 0.0),
    )
    groups = cluster.groups()
    for group in groups:
        verifier = Verifier(group, key)
        report.checks += [replace(c, message=cluster.redact(c.message)) for c in verifier.run()]
        name = f"group {group.name}: " if len(groups) > 1 else ""
        report.notes.append(
            f"{name}endpoint {group.base_url}/v1, model {group.model_name}, "
            f"TP={verifier.tp} over {verifier.nnodes} nodes"
        )
        if verifier.figures:
            report.notes.append(
                f"{name}serving figures: "
                + ", ".join(f"{k} {v:.3f}" for k, v in verifier.figures.items())
            )
    gw = cluster.gateway()
    if gw is not None:
        report.checks += [
            replace(c, message=cluster.redact(c.message)) for c in gateway_checks(cluster, gw, key)
        ]
        report.notes.append(f"gateway {gw.base_url}/v1 in front of {len(groups)} group(s)")
    # Every rank's firewall as loaded now: a flushed ruleset leaves its unit "active".
    report.checks += [
        replace(c, message=cluster.redact(c.message)) for c in firewall.checks(cluster)
    ]
    report.duration_s = time.monotonic() - t0
    return report


# Chat completions through the gateway: two a group, so its policy spreads them.
GATEWAY_CHATS_PER_GROUP = 2


def gateway_checks(cluster: Cluster, gw: Gateway, key: str | None) -> list[Check]:
    """The one endpoint in front of the groups (sparkctl.serve.gateway): every group's
    head ready in its rotation, chat completions through it answered (the model's
    name routed to a group), and a request without the key refused."""
    from sparkctl.serve import gateway  # noqa: PLC0415

    host = cluster.sglang().gateway_host
    groups = cluster.groups()
    checks: list[Check] = []

    def rotation() -> list[Check]:
        where = gateway.rotation(gw, [g.base_url for g in groups])
        out = []
        for g in groups:
            w = where[g.base_url]
            state = "not registered" if w is None else w.status
            out.append(
                Check(
                    "gateway_rotation",
                    host,
                    f"group {g.name}",
                    "passed" if w is not None and w.ready else "failed",
                    f"{g.base_url} is {state}"
                    + (f" ({w.runtime}, serving {', '.join(w.models)})" if w else ""),
                )
            )
        return out

    try:
        checks += rotation()
    except SparkctlError as exc:
        checks.append(_fail("gateway_rotation", host, exc.message))
    url = gw.base_url + "/v1/chat/completions"
    body = {
        "model": cluster.model_name,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    def chats() -> Check:
        n = GATEWAY_CHATS_PER_GROUP * len(groups)
        with probe.client(None, COMPLETION_DEADLINE_S) as http:
            answers = [http.post(url, json=body, headers=headers) for _ in range(n)]
        bad = [r for r in answers if r.status_code != 200]
        texts = [] if bad else [_json(r)["choices"][0]["message"]["content"] for r in answers]
        ok = not bad and all(isinstance(t, str) and t for t in texts)
        return Check(
            "gateway_chat",
            host,
            None,
            "passed" if ok else "failed",
            f"{n - len(bad)} of {n} chat completions through the gateway answered"
            + (f"; HTTP {bad[0].status_code}: {bad[0].text[:120]!r}" if bad else ""),
        )

    def refused() -> Check:
        with probe.client(None, GET_DEADLINE_S) as http:
            resp = http.post(url, json=body)
        ok = resp.status_code == 401
        return Check(
            "gateway_api_key",
            host,
            None,
            "passed" if ok else "failed",
            f"without the key: HTTP {resp.status_code}" + ("" if ok else " (want 401)"),
        )

    checks.append(_guard("gateway_chat", host, chats))
    if key:
        checks.append(_guard("gateway_api_key", host, refused))
    return checks
