"""A model transfer's progress, as the model_cache role's progress file tells it.

The role's "Transfer progress" task reads the sender's progress file once per
retry (``sparkctl-model-relay watch``, which also renews the transfer's lease);
:class:`sparkctl.playbook.Progress` shows each reading it gets as a runner
event, one line per node, the hop where a stalled transfer stopped marked.
Its own module so that provisioning (which shows it) and ``sparkctl model
sync`` (which runs provisioning) do not import each other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from sparkctl.units import human_bytes

# The sender writes the file on the head, from what every node of the chain
# said: a node (or the head) that lies must not reach the operator's terminal
# with more than a figure. Names are host names, figures non-negative integers.
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MAX_HOSTS = 256


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _board(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The progress file in one reading: the ``board`` of the relay's ``watch`` output
    (the task's stdout), or None."""
    try:
        reading = json.loads(str((result or {}).get("stdout") or ""))
    except ValueError:
        return None
    board = reading.get("board") if isinstance(reading, dict) else None
    return board if isinstance(board, dict) and isinstance(board.get("hosts"), dict) else None


def transfer_progress(result: Mapping[str, Any] | None) -> dict[str, str]:
    """host -> "bytes of total, rate" from one reading of the progress file (empty if none).

    ``result`` is the role's "Transfer progress" task result, whose stdout is the
    relay's ``watch`` output: ``{"board": <the progress file>, "job": ...}``.
    """
    board = _board(result)
    if board is not None:
        total = _count(board.get("total_bytes", 0))
        if total is None:
            return {}
        stalled = {
            s.get("host")
            for s in board.get("stalled") or []
            if isinstance(s, dict) and isinstance(s.get("host"), str)
        }
        lines = {}
        for host, entry in list(board["hosts"].items())[:MAX_HOSTS]:
            if not (isinstance(host, str) and _HOST.fullmatch(host) and isinstance(entry, dict)):
                continue  # not a node's name, or not a reading: nothing of it is shown
            sent, rate, files = (_count(entry.get(k, 0)) for k in ("bytes", "rate_bps", "files"))
            if sent is None or rate is None or files is None:
                continue
            text = (
                f"{human_bytes(sent, decimals=1)} of "
                f"{human_bytes(total, decimals=1)}, "
                f"{human_bytes(rate, decimals=1)}/s"
            )
            if files:
                text += f", {files} file(s) written"
            if entry.get("done") is True:
                text += ", done"
            if host in stalled:
                text += ", stalled here"
            lines[host] = text
        return lines
    return {}
