"""sparkctl.nccl_report: nccl-tests logs of each layout in use, and the ones refused."""

# ruff: noqa: E501 -- logs are quoted as nccl-tests prints them
from __future__ import annotations

import re

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.nccl_report import parse

# nccl-tests 2.18 layout (root and #wrong columns), two ranks, as the lab's stand-in prints it.
MODERN = """\
# nccl-tests version 2.18.3 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4321 on     spark1 device  0 [000f:01:00] NVIDIA GB10
#  Rank  1 Group  0 Pid   4322 on     spark2 device  0 [000f:01:00] NVIDIA GB10
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    98.10   10.69   10.69      0    97.55   10.75   10.75      0
     2097152        524288     float     sum      -1   180.33   11.63   11.63      0   179.90   11.66   11.66      0
     4194304       1048576     float     sum      -1   350.20   11.98   11.98      0   349.00   12.02   12.02      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 11.4550
#
# Collective test concluded: all_reduce_perf
#
"""

# The older layout: no root column, a maximum-error column instead of #wrong.
OLD = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
    67108864      16777216   float     sum    714.1   93.98  164.46  5e-07    712.3   94.22  164.88  5e-07
   134217728      33554432   float     sum   1393.4   96.32  168.57  0e+00   1391.9   96.43  168.75  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 166.665
"""


def test_modern_layout_every_field() -> None:
    report = parse(MODERN)
    assert report.version == "2.18.3" and report.collective == "all_reduce_perf"
    assert [r.size for r in report.rows] == [1048576, 2097152, 4194304]
    last = report.largest()[0]
    assert (last.count, last.type, last.redop, last.root) == (1048576, "float", "sum", -1)
    assert (last.out_of_place.time_us, last.out_of_place.algbw, last.out_of_place.busbw) == (350.20, 11.98, 11.98)
    assert last.in_place.busbw == 12.02 and last.in_place.wrong == 0
    assert report.avg_busbw == 11.455 and report.oob_values == 0 and report.wrong == 0
    assert report.errors == []


def test_old_layout_without_root_reads_the_error_column() -> None:
    report = parse(OLD)
    assert [r.root for r in report.rows] == [None, None]
    assert report.rows[0].out_of_place.error == 5e-07 and report.rows[0].out_of_place.wrong is None
    assert report.rows[1].in_place.busbw == 168.75
    assert report.avg_busbw == 166.665
    assert report.wrong == 2  # a nonzero maximum error in both halves of the first row


def test_wrong_counts_and_unchecked_in_place_results() -> None:
    text = MODERN.replace("11.98      0   349.00   12.02   12.02      0",
                          "11.98      3   349.00   12.02   12.02    N/A")
    assert text != MODERN
    report = parse(text)
    assert report.wrong == 3
    assert report.largest()[0].in_place.wrong is None


def test_timestamp_column() -> None:
    text = MODERN.replace("busbw #wrong\n#        (B)", "busbw #wrong  timestamp\n#        (B)")
    text = "\n".join(line + "  2026-11-30 04:00:00" if line.startswith("   ") and line.strip()[0].isdigit() else line
                     for line in text.splitlines())
    assert len(parse(text).rows) == 3


@pytest.mark.parametrize(("text", "message"), [
    ("", "no nccl-tests column header"),
    ("random words\nnot a log\n", "no nccl-tests column header"),
    (MODERN.split("# Out of bounds", maxsplit=1)[0], "no 'Avg bus bandwidth' line after 3 row(s)"),
    (MODERN.replace("     2097152        524288     float     sum      -1   180.33   11.63   11.63      0   179.90   11.66   11.66      0",
                    "     2097152        524288     float     sum      -1   180.33   11.6"), "fields where the header has 13"),
    (MODERN.replace("98.10   10.69", "98.10   fast"), "are not numbers"),
    (MODERN.split("     1048576", maxsplit=1)[0] + "spark2: Test NCCL failure common.cu:1080 'unhandled system error'\n",
     "the run failed: spark2: Test NCCL failure"),
    (MODERN.replace("# Avg bus bandwidth    : 11.4550", "# Avg bus bandwidth    : nan-ish"), "unreadable average"),
])
def test_partial_or_garbled_logs_are_refused(text: str, message: str) -> None:
    with pytest.raises(SparkctlError, match=re.escape(message)) as info:
        parse(text, "run.log")
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(info.value).startswith("run.log")


def test_a_failure_line_in_a_complete_log_is_reported() -> None:
    report = parse(MODERN.replace("# Out of bounds", "spark2:4322:4400 [0] NCCL WARN NET/IB : Got completion with error 12\n# Out of bounds"))
    assert report.errors and "NCCL WARN" in report.errors[0]
