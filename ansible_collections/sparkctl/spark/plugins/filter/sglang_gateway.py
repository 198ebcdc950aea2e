"""Filters of the sglang role for SGLang's gateway: the router's command line.

The gateway is the Shepherd Model Gateway (PyPI ``smg``; SGLang's ``sglang-router``
stopped at 0.3.2 and its development moved there). One gateway serves one
OpenAI-compatible endpoint in front of every TP group: each group's head
(node rank 0 of the group) is one worker; the other ranks serve no API.

The unit runs the role's launcher (files/sglang_launcher.py) with ``--module
smg.launch_router``: smg takes its data-plane key (``--api-key``: what
clients must present, and what the gateway presents to the heads, smg docs
concepts/security/authentication.md) from its command line only, and ``ps``
shows every command line to every local user. The launcher reads the key from
the secrets file and appends it in memory, exactly as for SGLang.

Health checks tuned for a TP group's head (each value is the role's default,
``sglang_gateway_health``; smg 1.13.0's own defaults in brackets, smg docs
concepts/reliability/health-checks.md):

- ``endpoint /health`` [/health]: on a head it is a one-token generation
  through every rank (sglang 0.5.17 srt/entrypoints/http_server.py:646,
  ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` true by default in
  srt/environ.py), so a dead or frozen rank anywhere in the group fails it.
- ``timeout_secs 25`` [5]: longer than SGLang's own window for that
  generation (``SGLANG_HEALTH_CHECK_TIMEOUT``, 20 s, http_server.py:192), so the
  gateway hears SGLang's verdict (200 at the group's next output, 503 after
  20 s) instead of cutting a busy group's answer short.
- ``interval_secs 30`` [60]: not faster than that 20 s window and longer than
  the timeout, so at most one health generation per group is in flight:
  probes that time out pile up on the server when polled faster (sglang
  #35884).
- ``failure_threshold 2`` [3]: a frozen group leaves rotation after two failed
  checks (docs/benchmarks.md, "Gateway", has the lab's time); sparkctl itself
  takes a group out before it stops or restarts it, so this is the second line,
  for what sparkctl does not see.
- ``success_threshold 2`` [2]: a group that came back is trusted after two
  answers in a row, not one lucky one.

A worker that keeps failing (3 x failure_threshold in a row) is marked Failed
for good; ``serve up`` and the watchdog register a group again after every
restart (sparkctl.serve.gateway), so it is not removed on its own
(no ``--remove-unhealthy-workers``): status shows it as failed until then.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.sparkctl.spark.plugins.filter.sglang_args import (
    API_KEY_REF,
    extra_words,
    refuse_unsafe_words,
)
from ansible_collections.sparkctl.spark.plugins.module_utils.tp_groups import tp_groups

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # unit tests import this file without Ansible installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


MODULE = "smg.launch_router"
# SGLang's window for the health generation (sglang 0.5.17 http_server.py:192).
SGLANG_HEALTH_WINDOW_S = 20
HEALTH_DEFAULTS: dict[str, Any] = {
    "endpoint": "/health",
    "interval_secs": 30,
    "timeout_secs": 25,
    "failure_threshold": 2,
    "success_threshold": 2,
}
# smg 1.13.0 --policy choices (smg/router_args.py); cache_aware is its default.
POLICIES = (
    "random",
    "round_robin",
    "cache_aware",
    "power_of_two",
    "least_load",
    "consistent_hashing",
    "prefix_hash",
)


def _int(value: Any, what: str, low: int, high: int = 65535) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise AnsibleFilterError(f"{what} must be an integer, got {type(value).__name__}")
    try:
        number = int(value)
    except ValueError:
        raise AnsibleFilterError(f"{what} must be an integer, got {value!r}") from None
    if not low <= number <= high:
        raise AnsibleFilterError(f"{what} {number} is outside {low}..{high}")
    return number


def sglang_gateway_health(health: Any) -> dict[str, Any]:
    """The role's health settings over smg's own, checked against SGLang's window."""
    if not isinstance(health, dict):
        raise AnsibleFilterError(
            f"sglang_gateway_health must be a mapping, got {type(health).__name__}"
        )
    unknown = sorted(set(health) - set(HEALTH_DEFAULTS))
    if unknown:
        raise AnsibleFilterError(
            f"sglang_gateway_health has no setting {unknown}; it has {sorted(HEALTH_DEFAULTS)}"
        )
    merged = {**HEALTH_DEFAULTS, **health}
    out: dict[str, Any] = {"endpoint": str(merged["endpoint"])}
    if not re.fullmatch(r"/[A-Za-z0-9_./-]*", out["endpoint"]):
        raise AnsibleFilterError(
            f"sglang_gateway_health.endpoint {out['endpoint']!r} is not a URL path"
        )
    for name in ("interval_secs", "timeout_secs", "failure_threshold", "success_threshold"):
        out[name] = _int(merged[name], f"sglang_gateway_health.{name}", 1, 86400)
    return out


def sglang_gateway_host(nodes: list[dict[str, Any]], name: Any = "") -> str:
    """The Spark the gateway runs on: ``name`` (sglang_gateway_host), else the head of
    the first TP group (the groups in the order of their heads, tp_groups)."""
    if name:
        return str(name)
    groups = tp_groups(nodes)
    if not groups:
        raise AnsibleFilterError("no Spark in the inventory: the gateway has no host")
    first = next(iter(groups.values()))
    return str(first[0]["name"])


def sglang_gateway_args(
    port: Any,
    *,
    metrics_port: Any,
    host: str = "0.0.0.0",  # noqa: S104 - the role's firewall guards the port
    metrics_host: str = "0.0.0.0",  # noqa: S104
    policy: str = "cache_aware",
    health: Any = None,
    request_timeout: Any = 1800,
    api_key: bool = False,
    extra_args: list[Any] | None = None,
) -> list[str]:
    """``smg.launch_router`` arguments (without the interpreter and the launcher).

    Workers are not on the command line: sparkctl registers every group's head
    at run time (``POST /workers``) once the group serves, so a group that
    starts later, or again, joins without restarting the gateway."""
    h = sglang_gateway_health(health if health is not None else {})
    if policy not in POLICIES:
        raise AnsibleFilterError(
            f"sglang_gateway_policy {policy!r} is not one of smg's policies {list(POLICIES)}"
        )
    args = [
        "--host",
        str(host),
        "--port",
        str(_int(port, "sglang_gateway_port", 1)),
        "--policy",
        policy,
        "--health-check-endpoint",
        h["endpoint"],
        "--health-check-interval-secs",
        str(h["interval_secs"]),
        "--health-check-timeout-secs",
        str(h["timeout_secs"]),
        "--health-failure-threshold",
        str(h["failure_threshold"]),
        "--health-success-threshold",
        str(h["success_threshold"]),
        "--request-timeout-secs",
        str(_int(request_timeout, "sglang_gateway_request_timeout", 1, 86400)),
        "--prometheus-host",
        str(metrics_host),
        "--prometheus-port",
        str(_int(metrics_port, "sglang_gateway_metrics_port", 1)),
        # An HTTP SGLang head tokenizes for itself; the gateway would otherwise fetch
        # a tokenizer for the model's name at start (smg --disable-tokenizer-autoload),
        # from a hub the lab's nodes must not reach.
        "--disable-tokenizer-autoload",
        # A Failed worker stays listed (status names it) until sparkctl registers its
        # group again; smg's default follows service discovery, which sparkctl does
        # not use, so it is said here.
        "--no-remove-unhealthy-workers",
    ]
    args += extra_words(extra_args, "sglang_gateway_extra_args")
    if api_key:
        args += ["--api-key", API_KEY_REF]
    refuse_unsafe_words(args, "gateway arguments", "systemd or a shell")
    return args


def sglang_gateway_exec_argv(
    args: list[str],
    *,
    python: str,
    launcher: str = "/usr/local/lib/sparkctl/sglang-launcher.py",
    secrets_file: str = "/etc/sparkctl/sglang-secrets.env",
) -> list[str]:
    """The gateway unit's ExecStart argv: the launcher runs ``smg.launch_router``; the
    key marker at the end becomes the launcher's ``--secrets-file``."""
    args = [str(a) for a in args]
    own = ["--module", MODULE]
    if args[-2:] == ["--api-key", API_KEY_REF]:
        args = args[:-2]
        own = ["--secrets-file", str(secrets_file), *own]
    return [str(python), str(launcher), *own, "--", *args]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_gateway_args": sglang_gateway_args,
            "sglang_gateway_exec_argv": sglang_gateway_exec_argv,
            "sglang_gateway_health": sglang_gateway_health,
            "sglang_gateway_host": sglang_gateway_host,
        }
