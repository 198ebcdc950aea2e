"""The one HTTP client of `sparkctl serve` (up, verify, status), and why it cannot reach.

Every request sparkctl makes to a head's API goes through :func:`client`:

- ``trust_env=False``: no HTTP_PROXY/HTTPS_PROXY/ALL_PROXY from the controller's
  environment (nor .netrc). sparkctl reaches the heads' management addresses
  directly, as it reaches them over SSH; a proxy in the environment without a
  NO_PROXY for that network would otherwise turn "the head answers" into "the
  proxy does not", and serve up would restart a cluster that was serving.
- the server's certificate checked as :func:`sparkctl.serve.cluster.tls_context`
  says (the inventory's CA file, else the system's);
- bounded: a connect timeout, a per-read timeout, and a whole-request deadline
  and byte limit however the server sends its answer (:class:`BoundedTransport`).

When the head does not answer, :func:`reach_hints` says what on the controller's
side most likely keeps it from it, from what the controller can see: the proxy
variables that are set (by name: a value may hold ``user:password@``), its own
source address toward the head against ``sglang_api_allowed_cidrs`` (the
firewall's ``sglang_api_v4`` set), or no route at all.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from sparkctl.serve.cluster import tls_context

# Whole-request bounds: httpx's timeouts are per read, so an endpoint that keeps sending
# (an endless stream, a slow trickle) would hold a caller forever, and a huge answer
# would be read into memory whole.
ANSWER_LIMIT = 16 << 20
CONNECT_S = 10.0
# One /health probe: serve up polls every few seconds, status asks once.
HEALTH_S = 10.0
# What httpx would read from the environment with trust_env=True (httpx
# _utils.get_environment_proxies: the scheme proxies and ALL_PROXY, either case).
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


class _BoundedStream(httpx.SyncByteStream):
    def __init__(
        self, inner: httpx.SyncByteStream, url: str, deadline: float, seconds: float, limit: int
    ) -> None:
        self.inner, self.url, self.deadline = inner, url, deadline
        self.seconds, self.limit = seconds, limit

    def __iter__(self) -> Iterator[bytes]:
        total = 0
        for chunk in self.inner:
            total += len(chunk)
            if time.monotonic() > self.deadline:
                raise httpx.ReadTimeout(f"{self.url}: no complete answer within {self.seconds:g} s")
            if total > self.limit:
                raise httpx.ReadError(f"{self.url}: the answer exceeds {self.limit} bytes")
            yield chunk

    def close(self) -> None:
        self.inner.close()


class BoundedTransport(httpx.BaseTransport):
    """An httpx transport whose every response ends by a deadline from the request's
    start and within a byte limit, however the server sends it."""

    def __init__(self, inner: httpx.BaseTransport, seconds: float, limit: int) -> None:
        self.inner, self.seconds, self.limit = inner, seconds, limit

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.seconds
        resp = self.inner.handle_request(request)
        if not isinstance(resp.stream, httpx.SyncByteStream):  # HTTPTransport's always is
            raise TypeError(f"{request.url}: not a synchronous response stream")
        return httpx.Response(
            resp.status_code,
            headers=resp.headers,
            request=request,
            extensions=resp.extensions,
            stream=_BoundedStream(
                resp.stream, str(request.url), deadline, self.seconds, self.limit
            ),
        )

    def close(self) -> None:
        self.inner.close()


def client(ca_file: str | None, seconds: float, limit: int = ANSWER_LIMIT) -> httpx.Client:
    """The httpx client of every serve command: direct (no proxy from the environment),
    the certificate checked against ``ca_file`` (None: the system's CAs), every request
    ended within ``seconds`` and ``limit`` bytes."""
    transport = BoundedTransport(
        httpx.HTTPTransport(verify=tls_context(ca_file), trust_env=False), seconds, limit
    )
    return httpx.Client(
        transport=transport,
        trust_env=False,
        timeout=httpx.Timeout(min(seconds, 120.0), connect=min(seconds, CONNECT_S)),
    )


@dataclass(frozen=True)
class Health:
    """One GET /health: the status it answered, or why there was no answer."""

    url: str
    status: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200

    def __str__(self) -> str:
        if self.status is not None:
            return f"GET {self.url}: HTTP {self.status}"
        return f"GET {self.url}: {self.error}"


def health(base_url: str, ca_file: str | None = None, seconds: float = HEALTH_S) -> Health:
    """GET ``base_url``/health once, through :func:`client`."""
    url = f"{base_url}/health"
    try:
        with client(ca_file, seconds) as http:
            return Health(url, http.get(url).status_code)
    except httpx.HTTPError as exc:
        cause = exc.__cause__ or exc.__context__
        detail = f" ({cause})" if cause is not None and str(cause) not in str(exc) else ""
        return Health(url, None, f"{type(exc).__name__}: {str(exc)[:160]}{detail[:160]}")


def proxy_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names of the proxy variables set in ``environ`` (the process's by default),
    as a client that trusts the environment reads them (httpx with trust_env=True takes
    urllib.request.getproxies(): every ``<scheme>_proxy``, either case, NO_PROXY aside);
    never their values, which may carry a user and password."""
    env = os.environ if environ is None else environ
    return sorted(
        name
        for name, value in env.items()
        if name.lower().endswith("_proxy") and name.lower() != "no_proxy" and value.strip()
    )


def source_address(host: str, port: int) -> str:
    """The controller's own address toward ``host``, as the kernel routes it (a UDP
    socket's connect picks the route and the source address; nothing is sent).
    OSError when there is no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))
        return str(sock.getsockname()[0])


def allowed(address: str, cidrs: Sequence[str]) -> bool | None:
    """Whether ``address`` lies in one of ``cidrs`` (None: not comparable)."""
    try:
        addr = ipaddress.IPv4Address(address)
        return any(addr in ipaddress.IPv4Network(str(c), strict=False) for c in cidrs)
    except ValueError:
        return None


def reach_hints(
    base_url: str, allowed_cidrs: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """What on the controller's side most likely keeps it from ``base_url``: each a
    sentence naming what it saw."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    hints = []
    names = proxy_variables(environ)
    if names:
        hints.append(
            f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} set in this "
            "environment: sparkctl connects to the head directly and ignores "
            f"{'it' if len(names) == 1 else 'them'}; if {host} is reachable only "
            "through that proxy, sparkctl cannot reach it, and your own clients go "
            f"through the proxy unless NO_PROXY lists {host}"
        )
    try:
        source = source_address(host, port)
    except OSError as exc:
        hints.append(f"no route from this controller to {host}: {exc.strerror or exc}")
        return hints
    inside = allowed(source, allowed_cidrs)
    cidrs = ", ".join(allowed_cidrs) or "(none)"
    if inside is False:
        hints.append(
            f"this controller's address toward {host} is {source}, outside "
            f"sglang_api_allowed_cidrs ({cidrs}): the head's firewall drops it; add "
            "the controller's network to sglang_api_allowed_cidrs and provision"
        )
    elif inside:
        hints.append(
            f"this controller's address toward {host} is {source}, inside "
            f"sglang_api_allowed_cidrs ({cidrs}) as it leaves here; a NAT or a "
            "firewall between here and the head may still change or drop it"
        )
    return hints
