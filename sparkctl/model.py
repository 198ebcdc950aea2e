"""``sparkctl model sync``: the model_cache role through the one runner, with transfer progress.

The transfer itself is the role's (roles/model_cache): the holder streams the
model along a chain of nodes over the fabric. The role's progress task reads
the sender's progress file once per retry; each retry reaches the controller
as a runner event, and :func:`transfer_progress` turns its result into one
line per node for the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkctl.runner import RunResult

UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(count: float) -> str:
    value = float(count)
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def transfer_progress(result: Mapping[str, Any] | None) -> dict[str, str]:
    """host -> "bytes of total, rate" from one reading of the progress file (empty if none).

    ``result`` is a sparkctl_probe result whose ``files`` has the progress file's
    text, as the role's "Transfer progress" task registers it.
    """
    if not result:
        return {}
    for info in (result.get("files") or {}).values():
        try:
            board = json.loads(info.get("content") or "")
        except (ValueError, TypeError, AttributeError):
            continue
        if not isinstance(board, dict) or not isinstance(board.get("hosts"), dict):
            continue
        total = int(board.get("total_bytes") or 0)
        lines = {}
        for host, entry in board["hosts"].items():
            text = (
                f"{human_bytes(entry.get('bytes', 0))} of {human_bytes(total)}, "
                f"{human_bytes(entry.get('rate_bps', 0))}/s"
            )
            if entry.get("files"):
                text += f", {entry['files']} file(s) written"
            if entry.get("done"):
                text += ", done"
            lines[str(host)] = text
        return lines
    return {}


def sync(
    inventory_path: Path,
    *,
    full_verify: bool = False,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    tags: Sequence[str] = (),
    as_json: bool = False,
) -> RunResult:
    """Run playbooks/model_cache.yml (validated inventory, cluster lock, live progress)."""
    from sparkctl import inventory  # noqa: PLC0415
    from sparkctl.provision import provision  # noqa: PLC0415 - provision imports this module

    extra = dict(extravars or {})
    inv = inventory.validate(inventory_path)  # exit 2 naming file, host, variable
    source = extra.get("model_cache_source", inv.cluster_var("model_cache_source", "none"))
    if str(source) == "none":
        raise inventory.bad_input(
            inventory_path,
            None,
            "model_cache_source",
            "names no model to sync (none); nothing was contacted",
            hint="set model_cache_source to hf, head or controller in group_vars (with "
            "model_cache_hf_repo and model_cache_hf_revision, model_cache_head_dir or "
            "model_cache_controller_dir), or pass -e model_cache_source=...",
        )
    if full_verify:
        extra["model_cache_full_verify"] = True
    return provision(
        inventory_path,
        limit=limit,
        tags=tags,
        playbook="model_cache.yml",
        extravars=extra,
        as_json=as_json,
        command="model-sync",
    )
