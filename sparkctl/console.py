"""Terminal output: rich on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape

# Data (--json) goes to stdout; progress and messages to stderr so that
# `sparkctl ... --json | jq` always gets clean JSON.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def progress(message: str) -> None:
    """One progress line: dim on a terminal, a plain line in logs."""
    if err.is_terminal:
        err.print(f"[dim]·[/dim] {escape(message)}", highlight=False)
    else:
        print(f"sparkctl: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """One line the operator should read (an accepted risk): yellow on a terminal."""
    if err.is_terminal:
        err.print(f"[yellow]![/yellow] {escape(message)}", highlight=False)
    else:
        print(f"sparkctl: warning: {message}", file=sys.stderr, flush=True)
