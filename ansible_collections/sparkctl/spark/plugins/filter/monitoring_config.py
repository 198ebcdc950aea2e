"""Filters of the monitoring role: Prometheus' configuration from the inventory.

``monitoring_prometheus_config`` turns the inventory's hosts (name, management
address, node_rank, TP group) into the data of ``/etc/prometheus/prometheus.yml``;
the template writes it with ``sparkctl_yaml`` (a dumper, so no value can add a
key). ``monitoring_args`` gives the ``ARGS`` of Debian's
``/etc/default/prometheus`` and ``/etc/default/prometheus-node-exporter``
(their units run ``ExecStart=/usr/bin/prometheus[-node-exporter] $ARGS``).

The scrape jobs (docs/monitoring.md, "Scraping"):

- ``node``: every host's node_exporter. A Spark's target carries ``cluster`` and
  ``node`` (its inventory name), the labels sparkctl's alert rules join on; a
  monitoring host that is not a Spark carries ``cluster`` only, and so do the
  extra exporters (``monitoring_textfile_exporters``: where sparkctl's
  textfiles are written, e.g. the controller's). ``honor_labels: true`` keeps the
  ``node`` label that sparkctl's own textfile series carry.
- ``sglang``: each TP group's head (the member with the lowest node_rank, as the
  sglang role forms groups: plugins/filter/sglang_args.py
  ``sglang_tp_group``), on its API port, labelled ``cluster`` and ``group``.
  SGLang serves ``/metrics`` without the API key (sglang ``srt/utils/auth.py``,
  ``decide_request_auth``: "Health/readiness/metrics endpoints are always allowed"),
  and only TP rank 0 records the scheduler's metrics, so one target a group.

``monitoring_rules`` is sparkctl's rules file (files/sparkctl-rules.yml) as the role
installs it: the file itself, or with the site's own timings (``monitoring_alert_for``,
an alert's ``for:``; ``monitoring_progress_window``, the range SparkctlProgressFrozen
looks back for progress). Only those words of the named alert's block change, so the
installed file keeps its comments, and the result is read back to hold that each alert
has exactly the timing asked for (promtool checks it again before it is installed).

Durations are Prometheus' (``model/duration.go`` ``ParseDuration``:
``1y2w3d4h5m6s7ms`` units, largest first); ``scrape_timeout`` is 10 s,
Prometheus' default, or the scrape interval when that is shorter (a timeout
above the interval is refused by ``promtool check config``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - Ansible is installed wherever the roles run

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


# Prometheus' model/duration.go, ParseDuration (units in this order, each at most once).
_DURATION = re.compile(
    r"(?:(?P<y>[0-9]+)y)?(?:(?P<w>[0-9]+)w)?(?:(?P<d>[0-9]+)d)?(?:(?P<h>[0-9]+)h)?"
    r"(?:(?P<m>[0-9]+)m)?(?:(?P<s>[0-9]+)s)?(?:(?P<ms>[0-9]+)ms)?"
)
_UNIT_MS = {
    "y": 365 * 86_400_000,
    "w": 7 * 86_400_000,
    "d": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1000,
    "ms": 1,
}
_DEFAULT_TIMEOUT_MS = 10_000  # Prometheus' scrape_timeout default (config/config.go)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]{0,252}):(?P<port>[0-9]{1,5})")
_ABS_PATH = re.compile(r"/(?:[A-Za-z0-9_.+@=-]+/?)*")


def duration_ms(value: Any, what: str = "duration") -> int:
    """A Prometheus duration in milliseconds (0 is refused: no interval is 0)."""
    text = value if isinstance(value, str) else ""
    m = _DURATION.fullmatch(text)
    if not text or m is None:
        raise AnsibleFilterError(
            f"{what}: {value!r} is not a Prometheus duration (such as 15s, 1m, 15d)"
        )
    total = sum(int(v) * _UNIT_MS[k] for k, v in m.groupdict().items() if v)
    if total <= 0:
        raise AnsibleFilterError(f"{what}: {value!r} is no time at all")
    return total


def _port(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise AnsibleFilterError(f"{what}: {value!r} is not a TCP port")
    text = str(value)
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise AnsibleFilterError(f"{what}: {value!r} is not a TCP port (1-65535)")
    return int(text)


def _word(value: Any, what: str, pattern: re.Pattern[str] = _NAME) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise AnsibleFilterError(f"{what}: {value!r} is not a plain name")
    return value


def _target(host: Any, port: int, what: str) -> str:
    return f"{_word(host, what, _HOST)}:{port}"


def heads(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each TP group's head (lowest node_rank), groups in their heads' rank order."""
    best: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        group = str(node["group"])
        if group not in best or int(node["node_rank"]) < int(best[group]["node_rank"]):
            best[group] = node
    ordered = sorted(best.items(), key=lambda item: int(item[1]["node_rank"]))
    return [{"group": group, **dict(node)} for group, node in ordered]


def monitoring_prometheus_config(
    nodes: Sequence[Mapping[str, Any]],
    cluster: str,
    *,
    node_exporter_port: Any,
    scrape_interval: str,
    evaluation_interval: str,
    rule_files: Sequence[str],
    sglang_metrics: bool = True,
    servers: Sequence[Mapping[str, Any]] = (),
    textfile_exporters: Sequence[str] = (),
    gateway: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """prometheus.yml's data. ``nodes``: the Sparks, each ``{name, address, node_rank,
    group, sglang_port}`` (a group's target is its head's address and API port);
    ``servers``: the monitoring hosts (``{name, address}``), whose own exporters are
    scraped too; ``textfile_exporters``: more exporters (host:port); ``gateway``: SGLang's
    gateway (``{address, port}``, its metrics port), or empty."""
    cluster = _word(cluster, "cluster_name")
    exporter_port = _port(node_exporter_port, "monitoring_node_exporter_port")
    interval_ms = duration_ms(scrape_interval, "monitoring_scrape_interval")
    duration_ms(evaluation_interval, "monitoring_evaluation_interval")
    spark_names = {str(n["name"]) for n in nodes}
    node_targets: list[dict[str, Any]] = [
        {
            "targets": [_target(n["address"], exporter_port, f"{n['name']}: ansible_host")],
            "labels": {"cluster": cluster, "node": _word(n["name"], "a Spark's name")},
        }
        for n in sorted(nodes, key=lambda n: int(n["node_rank"]))
    ]
    others = [
        _target(s["address"], exporter_port, f"{s['name']}: ansible_host")
        for s in servers
        if str(s["name"]) not in spark_names
    ]
    for i, item in enumerate(textfile_exporters):
        m = _HOST_PORT.fullmatch(item) if isinstance(item, str) else None
        if m is None:
            raise AnsibleFilterError(
                f"monitoring_textfile_exporters[{i}]: {item!r} is not host:port"
            )
        others.append(_target(m["host"], _port(m["port"], "its port"), "its host"))
    if others:
        node_targets.append({"targets": sorted(set(others)), "labels": {"cluster": cluster}})
    jobs: list[dict[str, Any]] = [
        {"job_name": "node", "honor_labels": True, "static_configs": node_targets}
    ]
    if sglang_metrics and nodes:
        jobs.append(
            {
                "job_name": "sglang",
                "static_configs": [
                    {
                        "targets": [
                            _target(
                                h["address"],
                                _port(h.get("sglang_port", 30000), f"{h['name']}: sglang_port"),
                                f"{h['name']}: ansible_host",
                            )
                        ],
                        "labels": {
                            "cluster": cluster,
                            "group": _word(h["group"], "sglang_group"),
                        },
                    }
                    for h in heads(nodes)
                ],
            }
        )
    if gateway:
        jobs.append(
            {
                "job_name": "gateway",
                "static_configs": [
                    {
                        "targets": [
                            _target(
                                gateway["address"],
                                _port(gateway["port"], "sglang_gateway_metrics_port"),
                                "the gateway's host: ansible_host",
                            )
                        ],
                        "labels": {"cluster": cluster},
                    }
                ],
            }
        )
    timeout_ms = min(_DEFAULT_TIMEOUT_MS, interval_ms)
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": f"{timeout_ms}ms" if timeout_ms % 1000 else f"{timeout_ms // 1000}s",
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": [_word(p, "a rule file", _ABS_PATH) for p in rule_files],
        "scrape_configs": jobs,
    }


def monitoring_args(options: Mapping[str, Any]) -> str:
    """``--name=value`` words of a Debian ``ARGS=`` line, in order; each value one word
    of plain characters (systemd splits ``$ARGS`` at blanks, and takes no quotes there)."""
    words = []
    for name, value in options.items():
        text = str(value)
        if isinstance(value, bool) or not re.fullmatch(r"[A-Za-z0-9_.,:/=@+-]+", text):
            raise AnsibleFilterError(f"--{name}: {value!r} is not one plain word")
        words.append(f"--{name}={text}")
    return " ".join(words)


_ALERT = re.compile(r"^ +- alert: (?P<name>[A-Za-z0-9_]+)[ \t]*$", re.MULTILINE)
_FOR = re.compile(r"^(?P<indent> +)for: (?P<value>[0-9a-z]+)[ \t]*$", re.MULTILINE)
_RANGE = re.compile(r"\[(?P<value>[0-9][0-9a-z]*)\]")
# The alert whose expression looks back over monitoring_progress_window.
PROGRESS_ALERT = "SparkctlProgressFrozen"


def alert_names(text: str) -> list[str]:
    """The alerts of a rules file's text, in order (one ``- alert: NAME`` line each)."""
    return [m.group("name") for m in _ALERT.finditer(text)]


def _alert_blocks(text: str) -> dict[str, tuple[int, int]]:
    """Each alert's name -> the span of its block: from its ``- alert:`` line to the next
    alert's, or the next rule group's, or the end."""
    starts = list(_ALERT.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    blocks = {}
    for m, end in zip(starts, ends, strict=True):
        group = text.find("\n  - name:", m.end(), end)
        blocks[m.group("name")] = (m.start(), end if group < 0 else group + 1)
    return blocks


def monitoring_rules(
    text: str, alert_for: Mapping[str, Any] | None = None, progress_window: Any = ""
) -> str:
    """The rules file ``text`` with each alert of ``alert_for`` firing after its own
    duration, and SparkctlProgressFrozen's look-back range ``progress_window`` ("": the
    file's own). An alert the file does not have, a duration Prometheus would not take
    (zero included) or a block of an unexpected shape is refused, naming the variable."""
    if not isinstance(text, str):
        raise AnsibleFilterError("monitoring_rules: the rules file's text is not a string")
    if not isinstance(alert_for or {}, Mapping):
        raise AnsibleFilterError(f"monitoring_alert_for: {alert_for!r} is not a mapping")
    wanted = {str(name): hold for name, hold in (alert_for or {}).items()}
    blocks = _alert_blocks(text)
    unknown = sorted(name for name in wanted if name not in blocks)
    if unknown:
        raise AnsibleFilterError(
            f"monitoring_alert_for: {', '.join(unknown)}: no such alert in sparkctl's rules "
            f"(they are {', '.join(sorted(blocks))})"
        )
    window = "" if progress_window in ("", None) else progress_window
    out = text
    # From the end, so that each edit leaves the spans before it where they were.
    for name, (start, end) in sorted(blocks.items(), key=lambda kv: -kv[1][0]):
        block = out[start:end]
        if name in wanted:
            value = wanted[name]
            duration_ms(value, f"monitoring_alert_for.{name}")  # refused unless a duration
            block, n = _FOR.subn(rf"\g<indent>for: {value}", block)
            if n != 1:
                raise AnsibleFilterError(f"monitoring_rules: {name} has {n} 'for:' lines")
        if name == PROGRESS_ALERT and window:
            duration_ms(window, "monitoring_progress_window")
            block, n = _RANGE.subn(f"[{window}]", block)
            if n == 0:
                raise AnsibleFilterError(f"monitoring_rules: {name} has no range to set")
        out = out[:start] + block + out[end:]
    rules = {
        r["alert"]: r
        for g in (yaml.safe_load(out) or {}).get("groups", [])
        for r in g.get("rules", [])
        if "alert" in r
    }
    for name, value in wanted.items():
        if str(rules[name].get("for")) != str(value):
            raise AnsibleFilterError(f"monitoring_rules: {name} did not take for: {value}")
    if window and f"[{window}]" not in rules[PROGRESS_ALERT]["expr"]:
        raise AnsibleFilterError(f"monitoring_rules: {PROGRESS_ALERT} did not take [{window}]")
    return out


class FilterModule:
    """The monitoring role's filters (module docstring)."""

    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_prometheus_config": monitoring_prometheus_config,
            "monitoring_args": monitoring_args,
            "monitoring_duration_ms": duration_ms,
            "monitoring_rules": monitoring_rules,
        }
