"""`sparkctl report nccl --gate -i INVENTORY`: the thresholds of the inventory's plan, which
ansible-playbook computes on a cold plan cache (the log parser's own tests, which need no
Ansible, are tests/unit/test_nccl_parse.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.errors import ExitCode
from tests.unit.test_nccl_parse import FIXTURES, report_gate


def test_report_nccl_gate_with_an_inventory_takes_its_line_rate_and_rdma(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """-i: the thresholds and the RDMA expectation of the inventory's plan (lab.ini is the
    real cluster's form: 25 GB/s, RDMA), as validate computes them."""
    log = str(FIXTURES / "gb10-2.19.6-all-gather.log")
    inv = str(Path(__file__).resolve().parents[2] / "inventory" / "lab.ini")
    code, out, err = report_gate(monkeypatch, capsys, log, "--gate", "-i", inv)
    assert code == ExitCode.NOT_JUDGED, (out, err)
    assert "gate (line rate 25 GB/s, threshold 21.875 GB/s): NOT JUDGED: the log does" in out
    code, out, _ = report_gate(monkeypatch, capsys, log, "--gate", "-i", inv, "--no-rdma")
    assert code == 0 and "PASSED" in out
