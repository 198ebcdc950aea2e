"""SGLang's gateway as sparkctl drives it: one worker per TP group's head.

The gateway (the Shepherd Model Gateway, ``smg``, run by the sglang role's
gateway unit) routes the one OpenAI-compatible endpoint to the groups. sparkctl
registers a group's head once the group serves (serve up, the watchdog after a
restart, an upgrade after its checks) and takes it out before it stops the
group, so no request is sent to a group that is going down.

The control plane, as smg 1.13.0 documents it (smg docs, reference/api/admin.md
and extensions.md) and as tests/contract/test_gateway.py holds it against the
pinned wheel:

- ``GET /workers``: ``{"workers": [{"id", "url", "status", "is_healthy",
  "runtime_type", "model_id", "models": [{"id"}]...}], "total": N}``; ``status``
  is ``pending`` (registered, not yet proven), ``ready``, ``not_ready``
  (failing its health checks, no traffic) or ``failed`` (terminal: it must be
  registered again);
- ``POST /workers`` ``{"url", "runtime_type"}``: 202, registration runs in the
  background (model discovery, health) and the worker shows up as it goes;
- ``DELETE /workers/{id}``: 202; the gateway sends it no new request.

Without control-plane keys these routes take the data-plane key (smg docs
concepts/security/authentication.md, "when neither is set, admin routes fall
back to the same --api-key bearer check"), which is the API's key: it travels
in the Authorization header only, never in a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.serve import probe

# One control-plane request; registration itself runs in the gateway's background.
REQUEST_S = 10.0
POLL_S = 0.5
STATUSES = ("pending", "ready", "not_ready", "failed")


@dataclass(frozen=True)
class Worker:
    """One worker as ``GET /workers`` lists it."""

    id: str
    url: str
    status: str
    healthy: bool
    runtime: str
    models: tuple[str, ...]

    @property
    def ready(self) -> bool:
        return self.status == "ready"


def parse_workers(doc: Any) -> list[Worker]:
    """``GET /workers``'s answer; ValueError naming what is not as smg sends it."""
    if not isinstance(doc, dict) or not isinstance(doc.get("workers"), list):
        raise ValueError("GET /workers: no 'workers' list in the answer")
    out = []
    for i, w in enumerate(doc["workers"]):
        if not isinstance(w, dict):
            raise ValueError(f"GET /workers: workers[{i}] is not an object")
        fields: dict[str, str] = {
            k: w[k] for k in ("id", "url", "status", "runtime_type") if isinstance(w.get(k), str)
        }
        bad = sorted({"id", "url", "status", "runtime_type"} - set(fields))
        if bad or not isinstance(w.get("is_healthy"), bool):
            raise ValueError(f"GET /workers: workers[{i}] lacks {bad or ['is_healthy']}")
        models = w.get("models") or []
        if not isinstance(models, list) or not all(
            isinstance(m, dict) and isinstance(m.get("id"), str) for m in models
        ):
            raise ValueError(f"GET /workers: workers[{i}].models is not a list of {{id}}")
        out.append(
            Worker(
                id=fields["id"],
                url=fields["url"].rstrip("/"),
                status=fields["status"].lower(),
                healthy=w["is_healthy"],
                runtime=fields["runtime_type"],
                models=tuple(m["id"] for m in models),
            )
        )
    return out


@dataclass(frozen=True)
class Gateway:
    """The gateway's control plane at ``base_url``, with the API's key."""

    base_url: str
    key: str | None = None
    ca_file: str | None = None

    def _request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        url = self.base_url.rstrip("/") + path
        try:
            with probe.client(self.ca_file, REQUEST_S) as http:
                resp = http.request(method, url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SparkctlError(
                f"gateway {self.base_url}: {method} {path}: {type(exc).__name__}: {str(exc)[:200]}",
                ExitCode.UNREACHABLE,
                hint="is the gateway's unit running (systemctl status sparkctl-gateway) "
                "and its port open to this controller?",
            ) from None
        if resp.status_code in (401, 403):
            raise SparkctlError(
                f"gateway {self.base_url}: {method} {path}: HTTP {resp.status_code}: the "
                "gateway refused the API key",
                hint="the gateway and the API share one key (sglang_api_key); provision "
                "writes it to both",
            )
        if resp.status_code >= 400:
            text = resp.text[:300]
            raise SparkctlError(
                f"gateway {self.base_url}: {method} {path}: HTTP {resp.status_code}: "
                + (text.replace(self.key, "<redacted>") if self.key else text)
            )
        return resp

    def workers(self) -> list[Worker]:
        resp = self._request("GET", "/workers")
        try:
            return parse_workers(resp.json())
        except ValueError as exc:
            raise SparkctlError(f"gateway {self.base_url}: {exc}") from None

    def find(self, url: str) -> Worker | None:
        url = url.rstrip("/")
        return next((w for w in self.workers() if w.url == url), None)

    def register(self, url: str) -> None:
        """Queue the head at ``url`` as one SGLang worker (its models are discovered).

        The key goes in the body as the worker's own ``api_key``: smg 1.13.0 sends the
        data-plane key to a worker's routes, but not to the discovery requests of its
        registration (``/server_info``, ``/model_info``, ``/v1/models`` came 401 from a
        head with a key), which then leave the worker's model "unknown"."""
        body: dict[str, Any] = {"url": url.rstrip("/"), "runtime_type": "sglang"}
        if self.key:
            body["api_key"] = self.key
        self._request("POST", "/workers", body)

    def remove(self, worker: Worker) -> None:
        self._request("DELETE", f"/workers/{worker.id}")

    def wait(
        self, url: str, done: Callable[[Worker | None], bool], timeout: float, what: str
    ) -> Worker | None:
        """Poll ``GET /workers`` until ``done(worker at url, or None)``; SparkctlError
        naming ``what`` and the last state after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            worker = self.find(url)
            if done(worker):
                return worker
            if time.monotonic() > deadline:
                state = "not registered" if worker is None else worker.status
                raise SparkctlError(
                    f"gateway {self.base_url}: {url} is not {what} after {timeout:.0f} s "
                    f"(it is {state})",
                    hint="journalctl -u sparkctl-gateway on the gateway's host says why",
                )
            time.sleep(POLL_S)


def join(gw: Gateway, url: str, timeout: float) -> tuple[Worker, float]:
    """The head at ``url`` in rotation: registered again unless it is ready there now (a
    failed worker is terminal, a not-ready one would wait for its health checks), then
    waited for until ready. The worker and the seconds it took."""
    began = time.monotonic()
    current = gw.find(url)
    if current is not None and current.ready:
        return current, 0.0
    if current is not None:
        gw.remove(current)
        gw.wait(url, lambda w: w is None, timeout, "removed")
    gw.register(url)
    worker = gw.wait(url, lambda w: w is not None and w.ready, timeout, "ready")
    assert worker is not None  # noqa: S101 - wait returned on a ready worker
    return worker, time.monotonic() - began


def leave(gw: Gateway, url: str, timeout: float) -> bool:
    """The head at ``url`` out of rotation: the gateway sends it no new request. Whether
    it was registered."""
    current = gw.find(url)
    if current is None:
        return False
    gw.remove(current)
    gw.wait(url, lambda w: w is None, timeout, "removed")
    return True


def rotation(gw: Gateway, urls: Sequence[str]) -> dict[str, Worker | None]:
    """Each head's worker (None: not registered), for status and verify."""
    listed = {w.url: w for w in gw.workers()}
    return {u: listed.get(u.rstrip("/")) for u in urls}
