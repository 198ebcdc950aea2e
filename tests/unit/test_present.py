"""sparkctl.present and the layers it gives: the core returns results and prints nothing,
the CLI checks the inventory once and shows what the core returned."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkctl import cli, inventory
from sparkctl.inventory import Inventory
from sparkctl.playbook import PlaybookRun
from sparkctl.report.model import Report, Thresholds
from sparkctl.runner import HostStats, RunResult
from sparkctl.serve.service import Verified
from sparkctl.serve.up import UpResult

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sparkctl"
SIM = REPO / "inventory" / "sim.ini"
# Where results may be printed: the presentation, the click layer (cli.py, commands/), the consoles
# themselves, and the lab (a separate user feature with its own output).
PRINTERS = {"present", "cli.py", "commands", "console.py", "lab"}


def _core_modules() -> list[Path]:
    return [
        p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in PRINTERS
    ]


def _printing(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "print":
                found.append(f"line {node.lineno}: print(")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "out"
            and isinstance(node.value, ast.Name)
            and node.value.id == "console"
        ):
            found.append(f"line {node.lineno}: console.out")  # printing it, or an alias of it
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            if "as_json" in names:
                found.append(f"line {node.lineno}: {node.name}(as_json)")
    return found


def test_the_core_prints_no_result_and_takes_no_as_json() -> None:
    offenders = {
        str(path.relative_to(REPO)): bad
        for path in _core_modules()
        if (bad := _printing(ast.parse(path.read_text())))
    }
    assert not offenders, offenders


def test_the_check_sees_what_it_forbids() -> None:
    tree = ast.parse(
        "from sparkctl import console\n"
        "def f(x, *, as_json=False):\n"
        "    print(x)\n"
        "    console.out.print(x)\n"
    )
    assert [b.split(": ", 1)[1] for b in _printing(tree)] == [
        "f(as_json)",
        "print(",
        "console.out",
    ]
    assert {p.relative_to(PACKAGE).parts[0] for p in _core_modules()} >= {
        "playbook.py",
        "trust.py",
        "serve",
        "whole_job.py",
        "model_sync.py",
        "report",
        "validate",
    }


def _passed_report(inv: Inventory) -> Report:
    return Report(
        run_id="20261130T070000Z-validate",
        cluster=inv.cluster,
        inventory=str(inv.path),
        started="2026-11-30T07:00:00Z",
        sparkctl_version="0.1.0",
        hosts=[n.name for n in inv.nodes],
        thresholds=Thresholds(
            line_rate_gbytes=0.125, min_fraction=0.875, judged_sizes=2, baseline_tolerance=0.1
        ),
    )


def test_sparkctl_up_checks_the_inventory_once_and_hands_it_to_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole job with its four steps faked: one inventory.validate, the same
    Inventory in each step, each step's result shown as its own command shows it."""
    from sparkctl import playbook  # noqa: PLC0415
    from sparkctl.serve import service, up  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    checked: list[Inventory] = []
    real_validate = inventory.validate

    def counting_validate(path: Path, extra: Mapping[str, Any] | None = None) -> Inventory:
        checked.append(real_validate(path, extra))
        return checked[-1]

    monkeypatch.setattr(inventory, "validate", counting_validate)
    steps: list[tuple[str, Inventory]] = []

    def fake_provision(inv: Inventory, **_: Any) -> PlaybookRun:
        steps.append(("provision", inv))
        stats = {"spark1": HostStats(ok=3, changed=1)}
        return PlaybookRun(
            RunResult("successful", 0, tmp_path / "artifacts", 1.0, stats), ["spark1"]
        )

    def fake_validate(opts: run.Options) -> tuple[Report, Path]:
        steps.append(("validate", opts.inventory))
        return _passed_report(opts.inventory), tmp_path / "validate"

    def fake_up(inv: Inventory, *, restart: bool = False, **_: Any) -> UpResult:
        steps.append((f"serve up (restart {restart})", inv))
        return UpResult(True, 2.0, {}, "ready", model_name="synthetic", endpoints="http://x/v1")

    def fake_verify(inv: Inventory, *, extravars: Mapping[str, Any] | None = None) -> Verified:
        steps.append(("serve verify", inv))
        return Verified(_passed_report(inv), tmp_path / "verify", inv.path)

    monkeypatch.setattr(playbook, "run", fake_provision)
    monkeypatch.setattr(run, "validate", fake_validate)
    monkeypatch.setattr(up, "up", fake_up)
    monkeypatch.setattr(service, "verify_command", fake_verify)
    monkeypatch.setattr(sys, "argv", ["sparkctl", "up", str(SIM)])
    code: int | str | None = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, None), err
    assert len(checked) == 1, "sparkctl up validated the inventory more than once"
    assert [name for name, _ in steps] == [
        "provision",
        "validate",
        "serve up (restart True)",
        "serve verify",
    ]
    assert all(inv is checked[0] for _, inv in steps)
    assert "successful in 1 s" in out  # provision's table, plain lines when not a terminal
    assert "┃" not in out
    assert "PASSED sim" in out  # validate's and verify's summaries
    assert "serving synthetic" in out
    assert "up 4/4: serve verify" in err


def test_a_failed_provision_is_shown_then_stops_sparkctl_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkctl import playbook  # noqa: PLC0415
    from sparkctl.validate import run  # noqa: PLC0415

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)

    def failed(inv: Inventory, **_: Any) -> PlaybookRun:
        stats = {"spark2": HostStats(ok=1, failed=1)}
        return PlaybookRun(RunResult("failed", 2, tmp_path / "artifacts", 1.0, stats), ["spark2"])

    def not_reached(*_: Any, **__: Any) -> Any:
        raise AssertionError("validate ran after a failed provision")

    monkeypatch.setattr(playbook, "run", failed)
    monkeypatch.setattr(run, "validate", not_reached)
    monkeypatch.setattr(sys, "argv", ["sparkctl", "up", str(SIM)])
    code: int | str | None = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "failed in 1 s" in out
    assert "error: provision failed" in err


def test_the_provision_table_is_boxed_on_a_terminal_and_plain_lines_in_a_log(
    tmp_path: Path,
) -> None:
    import io  # noqa: PLC0415

    from rich.console import Console  # noqa: PLC0415

    from sparkctl import present  # noqa: PLC0415

    stats = {"spark1": HostStats(ok=3, changed=1), "spark2": HostStats(ok=2, unreachable=1)}
    result = RunResult("failed", 4, tmp_path, 12.0, stats)

    def text(terminal: bool) -> str:
        buf = io.StringIO()
        table = present.provision_table(result, ["spark1", "spark2", "spark3"], terminal=terminal)
        Console(file=buf, width=100).print(table)
        return buf.getvalue()

    plain = text(terminal=False)
    assert [ln.split() for ln in plain.splitlines()] == [
        ["failed", "in", "12", "s"],
        ["host", "ok", "changed", "failed", "unreachable", "skipped"],
        ["spark1", "3", "1", "0", "0", "0"],
        ["spark2", "2", "0", "0", "1", "0"],
        ["spark3", "-", "-", "-", "-", "-"],
    ]
    assert "┃" in text(terminal=True)
