"""A model transfer's progress, as the model_cache role's progress file tells it.

The role's "Transfer progress" task reads the sender's progress file once per
retry; :class:`sparkctl.provision.Progress` shows each reading it gets as a
runner event, one line per node. Its own module so that provisioning (which
shows it) and ``sparkctl model sync`` (which runs provisioning) do not import
each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sparkctl.units import human_bytes


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
                f"{human_bytes(entry.get('bytes', 0), decimals=1)} of "
                f"{human_bytes(total, decimals=1)}, "
                f"{human_bytes(entry.get('rate_bps', 0), decimals=1)}/s"
            )
            if entry.get("files"):
                text += f", {entry['files']} file(s) written"
            if entry.get("done"):
                text += ", done"
            lines[str(host)] = text
        return lines
    return {}
