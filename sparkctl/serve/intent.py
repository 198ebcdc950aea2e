"""What the operator last asked of the service: ``serve down`` says stopped, ``serve up``
says serving. The watchdog leaves a service stopped on purpose alone (it would otherwise
read every stopped rank as dead and start the group again), and ``status`` says why the
service does not answer.

Kept beside validate's ``last-good`` in ``results/<cluster>/serve-intent.json``, written
whole and renamed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from sparkctl.paths import state_dir, write_atomic

FILE = "serve-intent.json"


@dataclass(frozen=True)
class Intent:
    serving: bool
    at: str  # ISO 8601, UTC
    by: str  # the command that said so


def path(cluster: str) -> Path:
    return state_dir() / "results" / cluster / FILE


def record(cluster: str, *, serving: bool, by: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_atomic(path(cluster), json.dumps({"serving": serving, "at": stamp, "by": by}) + "\n")


def load(cluster: str) -> Intent | None:
    """The last intent recorded; None when none was (the watchdog then watches)."""
    try:
        data = json.loads(path(cluster).read_text())
        return Intent(bool(data["serving"]), str(data["at"]), str(data["by"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stopped_on_purpose(cluster: str) -> Intent | None:
    """The intent when it is "stopped", else None."""
    got = load(cluster)
    return got if got is not None and not got.serving else None
