"""Rules between variables, each host's values over the roles' defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .common import SPARKS, SWITCHES, Problem, is_int
from .firewall import firewall_problems
from .formats import FORMATS, prom_duration_ms
from .schema import load_defaults
from .topology import uncabled

# ---------------------------------------------------------------- relations
# Rules between variables (each alone may be fine). A variable the inventory does not
# set has its role's default (the literal ones of roles/*/defaults/main.yml).
# takes an unambiguous prefix for a flag (--tp is --tp-size: sglang 0.5.17's parser,
# tests/contract/test_parser.py), so a prefix is refused too.
SGLANG_DERIVED_FLAGS = (
    "--tp-size",
    "--tensor-parallel-size",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--host",
    "--port",
    "--model-path",
    "--served-model-name",
    "--dist-timeout",
    "--mem-fraction-static",
    "--ssl-certfile",
    "--ssl-keyfile",
)
SGLANG_SECRET_FLAGS = ("--api-key", "--admin-api-key")
# The model transfer's lease spans at least this many progress readings (each also
# waits for an Ansible task's round trip): one late reading never stops a live run.
LEASE_READINGS = 3


def _flag_problem(item: Any) -> str | None:
    word = str(item).split("=", 1)[0]
    if not word.startswith("--") or len(word) < 4:
        return None
    for flag in SGLANG_SECRET_FLAGS:
        if flag.startswith(word):
            return (
                f"{word} would put a secret on the command line (the unit's argv is "
                "world-readable in /proc)"
            )
    for flag in SGLANG_DERIVED_FLAGS:
        if flag.startswith(word):
            return f"{word} sets {flag}, which sparkctl derives from the inventory"
    return None


def _alert_timing_problems(host: str, v: Callable[[str], Any]) -> list[Problem]:
    """An alert's hold and the frozen rule's look-back against the scrape interval.

    A hold (``for:``) shorter than two scrapes fires on one late or missed scrape, and on
    a group just restarted with requests waiting: its token counters are then one sample
    old, ``increase()`` has nothing to say (it needs two samples), and the frozen rule
    holds for a scrape (seen in the lab). A look-back shorter than four scrapes leaves
    ``increase()`` too few samples (Grafana's ``$__rate_interval`` is at least four scrape
    intervals, grafana.com/docs/grafana/latest/datasources/prometheus/template-variables/).
    """
    scrape = v("monitoring_scrape_interval")
    scrape_ms = prom_duration_ms(scrape)
    if scrape_ms is None:
        return []
    problems: list[Problem] = []
    alert_for = v("monitoring_alert_for")
    for name, hold in sorted((alert_for or {}).items() if isinstance(alert_for, Mapping) else []):
        hold_ms = prom_duration_ms(hold)
        if hold_ms is not None and hold_ms < 2 * scrape_ms:
            problems.append(
                Problem(
                    host,
                    "monitoring_alert_for",
                    f"{name}: {hold} is under two scrape intervals (monitoring_scrape_interval "
                    f"{scrape}): one late scrape, or a group restarted with requests waiting, "
                    "would fire it",
                    hint=f"hold it for at least {2 * scrape_ms // 1000}s, or scrape more often",
                )
            )
    window = v("monitoring_progress_window")
    window_ms = prom_duration_ms(window)
    if window_ms is not None and window_ms < 4 * scrape_ms:
        problems.append(
            Problem(
                host,
                "monitoring_progress_window",
                f"{window} is under four scrape intervals (monitoring_scrape_interval "
                f"{scrape}): increase() would often have too few samples to see progress",
                hint=f"look back at least {4 * scrape_ms // 1000}s, or scrape more often",
            )
        )
    return problems


def _gateway_problems(host: str, v: Callable[[str], Any], sparks: list[str]) -> list[Problem]:
    """The gateway's host is a Spark, its port is not the API's, and its health check
    answers within its interval (plugins/filter/sglang_gateway.py says why each)."""
    if v("sglang_gateway_enabled") is not True:
        return []
    problems: list[Problem] = []
    where = v("sglang_gateway_host")
    if isinstance(where, str) and where and where not in sparks:
        problems.append(
            Problem(
                host,
                "sglang_gateway_host",
                f"{where!r} is not a Spark of this inventory: the gateway runs on one",
                hint=f"name one of {', '.join(sparks)}, or leave it empty for the first head",
            )
        )
    port, api = v("sglang_gateway_port"), v("sglang_port")
    if is_int(port) and port in (api, v("sglang_gateway_metrics_port")):
        problems.append(
            Problem(
                host,
                "sglang_gateway_port",
                f"{port} is taken on the gateway's host (sglang_port or "
                "sglang_gateway_metrics_port)",
                hint="give the gateway a port of its own, e.g. 30080",
            )
        )
    if v("sglang_tls_certfile"):
        problems.append(
            Problem(
                host,
                "sglang_gateway_enabled",
                "the gateway does not serve TLS yet, and the API here does (sglang_tls_certfile)",
                hint="serve the API over plain http behind the gateway, or leave the gateway off",
            )
        )
    interval, timeout = v("sglang_gateway_health_interval"), v("sglang_gateway_health_timeout")
    if is_int(interval) and is_int(timeout) and timeout >= interval:
        problems.append(
            Problem(
                host,
                "sglang_gateway_health_timeout",
                f"{timeout} s is not shorter than the interval between checks "
                f"(sglang_gateway_health_interval {interval} s): checks would overlap on "
                "a group that does not answer",
                hint="keep the timeout under the interval, e.g. 25 and 30",
            )
        )
    return problems


def _golden_problems(host: str, v: Callable[[str], Any]) -> list[Problem]:
    """Each golden check has a prompt and says what it checks (the schema holds each
    field's type and format; serve upgrade reads them through the plan)."""
    prompts = v("sglang_golden_prompts")
    problems: list[Problem] = []
    if not isinstance(prompts, list):
        return problems
    for i, item in enumerate(prompts):
        if not isinstance(item, dict):
            continue  # the schema's message
        if "prompt" not in item:
            problems.append(
                Problem(
                    host,
                    "sglang_golden_prompts",
                    f"item {i} has no prompt",
                    hint="each item is {prompt: TEXT, contains: [TEXT, ...] and/or same: true}",
                )
            )
        elif not item.get("contains") and item.get("same") is not True:
            problems.append(
                Problem(
                    host,
                    "sglang_golden_prompts",
                    f"item {i} checks nothing: give contains: [...] or same: true",
                    hint="contains lists words a correct answer must hold; same: true holds "
                    "the answer equal to the previous version's",
                )
            )
    return problems


def _relation_problems(
    host: str, v: Callable[[str], Any], is_set: Callable[[str], bool], switched: bool
) -> list[Problem]:
    """One Spark's relations; ``v`` reads a value (the inventory's over the roles'
    literal defaults), ``is_set`` says whether the inventory itself sets a name."""
    problems: list[Problem] = []
    mtu, switch_mtu = v("roce_fabric_mtu"), v("switch_mtu_value")
    if switched and is_int(mtu) and is_int(switch_mtu) and mtu > switch_mtu:
        problems.append(
            Problem(
                host,
                "roce_fabric_mtu",
                f"{mtu} is above the switch ports' "
                f"MTU {switch_mtu} (switch_mtu_value): larger frames are "
                "dropped without a word",
                hint="raise switch_mtu_value or lower roce_fabric_mtu",
            )
        )
    a, b = v("fabric_a_netdev"), v("fabric_b_netdev")
    if a is not None and a == b:
        problems.append(
            Problem(
                host,
                "fabric_b_netdev",
                f"{b!r} is also fabric_a_netdev: the two twins are two ports",
            )
        )
    ia, ib = v("roce_fabric_ibdev_a"), v("roce_fabric_ibdev_b")
    if ia is not None and ia == ib:
        problems.append(
            Problem(
                host,
                "roce_fabric_ibdev_b",
                f"{ib!r} is also roce_fabric_ibdev_a: each twin has its own RoCE device",
            )
        )
    problems += firewall_problems(host, v, is_set)
    problems += _alert_timing_problems(host, v)
    for var in ("sglang_extra_args",):
        for index, item in enumerate(v(var) or []):
            if (wrong := _flag_problem(item)) is not None:
                problems.append(
                    Problem(
                        host,
                        var,
                        f"item {index}: {wrong}",
                        hint="set the inventory variable instead; see docs/inventory.md",
                    )
                )
    cert, key = v("sglang_tls_certfile"), v("sglang_tls_keyfile")
    if bool(cert) != bool(key):
        given, other = (
            ("sglang_tls_certfile", "sglang_tls_keyfile")
            if cert
            else ("sglang_tls_keyfile", "sglang_tls_certfile")
        )
        problems.append(
            Problem(
                host,
                given,
                f"set without {other}: the two go together (TLS on the API) or neither is set",
            )
        )
    low, high = v("validate_nccl_min_bytes"), v("validate_nccl_max_bytes")
    if is_int(low) and is_int(high) and low > high:
        problems.append(
            Problem(
                host, "validate_nccl_min_bytes", f"{low} is above validate_nccl_max_bytes {high}"
            )
        )
    calibrated = v("validate_nccl_calibrated_bytes")
    if is_int(calibrated) and is_int(high) and calibrated > high:
        given = (
            "validate_nccl_calibrated_bytes"
            if is_set("validate_nccl_calibrated_bytes")
            else "validate_nccl_max_bytes"
        )
        problems.append(
            Problem(
                host,
                given,
                f"validate_nccl_max_bytes {high} is below validate_nccl_calibrated_bytes "
                f"{calibrated}, the smallest sweep top the bandwidth gate is calibrated at: "
                "no sweep could reach it, and every run would be not judged",
                hint="raise validate_nccl_max_bytes; lower validate_nccl_calibrated_bytes "
                "only with real runs of this hardware behind it",
            )
        )
    confirm, rollback = v("roce_fabric_confirm_seconds"), v("roce_fabric_rollback_seconds")
    if is_int(confirm) and is_int(rollback) and confirm >= rollback:
        problems.append(
            Problem(
                host,
                "roce_fabric_confirm_seconds",
                f"{confirm} s is not "
                f"below roce_fabric_rollback_seconds {rollback} s: the node "
                "would roll back before sparkctl confirms the change",
            )
        )
    lease, interval = v("model_cache_lease_timeout"), v("model_cache_progress_interval")
    if is_int(lease) and is_int(interval) and lease < LEASE_READINGS * interval:
        problems.append(
            Problem(
                host,
                "model_cache_lease_timeout",
                f"{lease} s is below {LEASE_READINGS} progress readings "
                f"(model_cache_progress_interval {interval} s): the sender would stop "
                "a transfer whose run is only slow to read it",
                hint=f"set model_cache_lease_timeout to {LEASE_READINGS * interval} or more, "
                "or read progress more often",
            )
        )
    problems += _model_source_problems(host, v)
    problems += _model_link_problems(host, v)
    return problems


def _model_source_problems(host: str, v: Callable[[str], Any]) -> list[Problem]:
    source = v("model_cache_source")
    needs = {
        "hf": (("model_cache_hf_repo", "hf_repo"), ("model_cache_hf_revision", "git_sha")),
        "head": (("model_cache_head_dir", "abs_path"),),
        "controller": (("model_cache_controller_dir", "controller_path"),),
    }
    problems: list[Problem] = []
    for var, fmt in needs.get(str(source), ()):
        if not v(var):
            problems.append(
                Problem(
                    host,
                    "model_cache_source",
                    f"{source!r} needs {var} ({FORMATS[fmt][1]}), which is not set",
                )
            )
    return problems


def _model_link_problems(host: str, v: Callable[[str], Any]) -> list[Problem]:
    """model_cache_link inside model_cache_dir: the role makes the link as root with
    ``force``, so a link elsewhere (/etc/passwd) would replace any file of the node."""
    link, root = v("model_cache_link"), v("model_cache_dir")
    if not (isinstance(link, str) and isinstance(root, str)) or "{{" in link + root:
        return []  # unset (the default follows model_cache_dir), or not a path: schema's
    if not (FORMATS["unit_path"][0](link) and FORMATS["unit_path"][0](root)):
        return []  # the format constraint says what is wrong with it
    parts, top = _parts(link), _parts(root)
    if len(parts) > len(top) and parts[: len(top)] == top:
        return []
    return [
        Problem(
            host,
            "model_cache_link",
            f"{link!r} is not inside model_cache_dir {root!r}: the model cache makes this "
            "link as root and replaces whatever is there",
            hint=f"set model_cache_link to a path under {root.rstrip('/')}/, such as "
            f"{root.rstrip('/')}/current, or leave it unset",
        )
    ]


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def check_relations(
    groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]], roles_dir: Path
) -> list[Problem]:
    """Rules between variables, each host's values over the roles' defaults; a problem
    every Spark shares (group_vars) is reported once."""
    sparks = list(groups.get(SPARKS, []))
    # A host in both groups is named by the topology rules (check_names): here it is a
    # Spark, and the switch is the one that is not.
    switches = [h for h in groups.get(SWITCHES, []) if h not in sparks]
    problems: list[Problem] = []
    defaults = load_defaults(roles_dir)
    per_host: dict[str, list[Problem]] = {}
    for host in sparks:
        hv = hostvars[host]
        switch_vars = hostvars[switches[0]] if switches else {}

        def value(
            name: str, hv: Mapping[str, Any] = hv, switch_vars: Mapping[str, Any] = switch_vars
        ) -> Any:
            if name.startswith("switch_mtu_") and name in switch_vars:
                return switch_vars[name]
            return hv.get(name, defaults.get(name))

        per_host[host] = _relation_problems(host, value, hv.__contains__, bool(switches))
        per_host[host] += _gateway_problems(host, value, sparks)
        per_host[host] += _golden_problems(host, value)
    if switches and sparks:
        problems += uncabled(sparks, hostvars)
    seen: set[tuple[str | None, str]] = set()
    for host in sparks:
        for problem in per_host[host]:
            everywhere = all(
                any(q.var == problem.var and q.message == problem.message for q in per_host[h])
                for h in sparks
            )
            key = (None if everywhere else host, problem.message)
            if key not in seen:
                seen.add(key)
                problems.append(replace(problem, host=key[0]))
    return problems
