"""sparkctl.nccl_parse: nccl-tests logs of each layout in use, and the ones refused."""

# ruff: noqa: E501 -- logs are quoted as nccl-tests prints them
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.nccl_parse import parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"

# nccl-tests 2.18 layout (root and #wrong columns), two ranks, as the lab's stand-in prints it
# (written for these tests, not a published log: tests/fixtures/nccl/SOURCES.md).
MODERN = (FIXTURES / "built" / "2.18.3-all-reduce-2ranks.log").read_text()

# The older layout: no root column, a maximum-error column instead of #wrong (written for
# these tests, as above).
OLD = (FIXTURES / "built" / "pre-2.18-error-column.log").read_text()


def test_modern_layout_every_field() -> None:
    report = parse(MODERN)
    assert report.version == "2.18.3" and report.collective == "all_reduce_perf"
    assert [r.size for r in report.rows] == [1048576, 2097152, 4194304]
    last = report.largest()[0]
    assert (last.count, last.type, last.redop, last.root) == (1048576, "float", "sum", -1)
    assert (last.out_of_place.time_us, last.out_of_place.algbw, last.out_of_place.busbw) == (
        350.20,
        11.98,
        11.98,
    )
    assert last.in_place.busbw == 12.02 and last.in_place.wrong == 0
    assert report.avg_busbw == 11.455 and report.oob_values == 0 and report.wrong == 0
    assert report.errors == []


def test_old_layout_without_root_reads_the_error_column() -> None:
    report = parse(OLD)
    assert [r.root for r in report.rows] == [None, None]
    assert report.rows[0].out_of_place.error == 5e-07 and report.rows[0].out_of_place.wrong is None
    assert report.rows[1].in_place.busbw == 168.75
    assert report.avg_busbw == 166.665
    # 5e-07 is float rounding, inside the 1e-5 those versions accepted for float
    # (the real DGX-2 logs print 2e-07 on every row with "0 OK"): not wrong.
    assert report.wrong == 0
    assert parse(OLD.replace("5e-07", "3e-05")).wrong == 2


def test_wrong_counts_and_unchecked_in_place_results() -> None:
    text = MODERN.replace(
        "11.98      0   349.00   12.02   12.02      0",
        "11.98      3   349.00   12.02   12.02    N/A",
    )
    assert text != MODERN
    report = parse(text)
    assert report.wrong == 3
    assert report.largest()[0].in_place.wrong is None


def test_timestamp_column() -> None:
    text = MODERN.replace("busbw #wrong\n#        (B)", "busbw #wrong  timestamp\n#        (B)")
    text = "\n".join(
        line + "  2026-11-30 04:00:00"
        if line.startswith("   ") and line.strip()[0].isdigit()
        else line
        for line in text.splitlines()
    )
    report = parse(text)
    assert [r.timestamp for r in report.rows] == ["2026-11-30 04:00:00"] * 3
    assert report.rows[2].in_place.wrong == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no nccl-tests column header"),
        ("random words\nnot a log\n", "no nccl-tests column header"),
        (
            MODERN.split("# Out of bounds", maxsplit=1)[0],
            "no 'Avg bus bandwidth' line after 3 row(s)",
        ),
        (
            MODERN.replace(
                "     2097152        524288     float     sum      -1   180.33   11.63   11.63      0   179.90   11.66   11.66      0",
                "     2097152        524288     float     sum      -1   180.33   11.6",
            ),
            "fields where the header has 13",
        ),
        (MODERN.replace("98.10   10.69", "98.10   fast"), "are not numbers"),
        (
            MODERN.split("     1048576", maxsplit=1)[0]
            + "spark2: Test NCCL failure common.cu:1080 'unhandled system error'\n",
            "the run failed: spark2: Test NCCL failure",
        ),
        (
            MODERN.replace("# Avg bus bandwidth    : 11.4550", "# Avg bus bandwidth    : nan-ish"),
            "unreadable average",
        ),
        # rows nccl-tests cannot have printed, refused even where the average still adds up
        (
            MODERN.replace("10.69   10.69      0", "10.69     inf      0"),
            "run.log:12: busbw 'inf' is not a measurement",
        ),
        (
            MODERN.replace("10.69   10.69      0", "10.69     nan      0"),
            "run.log:12: busbw 'nan' is not a measurement",
        ),
        (
            MODERN.replace(
                "10.69   10.69      0    97.55   10.75   10.75",
                "10.69  -10.69      0    97.55   10.75   32.13",
            ),
            "run.log:12: busbw '-10.69' is not a measurement",
        ),
        (
            MODERN.replace("    98.10   10.69", "   -98.10   10.69"),
            "run.log:12: time '-98.10' is not a measurement",
        ),
        (
            MODERN.replace("262144     float", "-262144     float"),
            "run.log:12: count -262144 is negative",
        ),
        (
            MODERN.replace(
                "# Out of bounds",
                "    -1048576        262144     float     sum      -1    98.10   10.69   11.455      0    97.55   10.75   11.455      0\n# Out of bounds",
            ),
            "run.log:15: size '-1048576' is not a byte count",
        ),
        (
            MODERN.replace("     1048576        262144", "     1.048e6        262144"),
            "run.log:12: size '1.048e6' is not a byte count",
        ),
        (
            MODERN.replace("     2097152        524288", "     1048576        131072"),
            "run.log:13: 1048576 bytes of float are 131072 elements here and 262144 on line 12: rows that contradict each other",
        ),
        (
            OLD.replace("164.46  5e-07", "164.46    nan"),
            "run.log:6: error column 'nan' is not a maximum error",
        ),
    ],
)
def test_partial_or_garbled_logs_are_refused(text: str, message: str) -> None:
    with pytest.raises(SparkctlError, match=re.escape(message)) as info:
        parse(text, "run.log")
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(info.value).startswith("run.log")


def test_run_cycles_repeat_rows_with_the_same_counts() -> None:
    """``-N 2`` prints the sweep twice under one header; one average over both cycles."""
    rows = [line for line in MODERN.splitlines() if line.startswith("     ")]
    text = MODERN.replace(rows[-1], "\n".join([rows[-1], *rows]))
    report = parse(text)
    assert [r.size for r in report.rows] == [1048576, 2097152, 4194304] * 2
    assert report.avg_busbw == 11.455


def test_a_failure_line_in_a_complete_log_is_reported() -> None:
    report = parse(
        MODERN.replace(
            "# Out of bounds",
            "spark2:4322:4400 [0] NCCL WARN NET/IB : Got completion with error 12\n# Out of bounds",
        )
    )
    assert report.errors and "NCCL WARN" in report.errors[0]


# ---------------------------------------------------------------- real logs
# tests/fixtures/nccl holds published nccl-tests output (SOURCES.md names each
# source). The figures below were read off the logs by eye.


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass(frozen=True)
class Seen:
    rows: int
    first_size: int
    last_size: int
    largest_busbw: tuple[float, float]  # out-of-place, in-place busbw of the largest size
    avg: float
    wrong: int
    oob: tuple[int, str]
    version: str | None
    collective: str | None
    redop: str
    root: int | None


# 2 ranks x (rows 8 B..512 KiB: 4..524288, then the %g-printed counts), both halves.
RTX3090_WRONG = 2 * (
    sum(4 << i for i in range(18))
    + 1048580
    + 2097150
    + 4194300
    + 8388610
    + 16777200
    + 33554400
    + 67108900
    + 134218000
    + 268435000
)

REAL = {
    "dgx2-v100-all-gather-oob-failed.log": Seen(
        31, 0, 8589934560, (73.75, 112.34), 30.2993, 4, (4, "FAILED"), None, None, "none", None
    ),
    "dgx2-v100-broadcast-root.log": Seen(
        31, 8, 8589934592, (122.15, 122.07), 41.2456, 0, (0, "OK"), None, None, "none", 0
    ),
    "v100-pre-hash-all-gather-oob-failed.log": Seen(
        1,
        4294967296,
        4294967296,
        (129.05, 128.84),
        128.942,
        2,
        (2, "FAILED"),
        None,
        None,
        "none",
        None,
    ),
    "gh200-2.17.8-all-reduce-wrong-oob-failed.log": Seen(
        25,
        8,
        134217728,
        (22.87, 22.80),
        4.79995,
        96 + 32,
        (4, "FAILED"),
        "2.17.8",
        "all_reduce_perf",
        "sum",
        -1,
    ),
    "rtx5090-alltoall-inplace-unchecked.log": Seen(
        1, 33554432, 33554432, (0.0, 0.0), 0.0, 0, (0, "OK"), None, None, "none", -1
    ),
    "gb10-2.18.3-all-gather-mpirun-noise.log": Seen(
        3,
        1073741824,
        4294967296,
        (22.14, 22.46),
        21.4033,
        0,
        (0, "OK"),
        "2.18.3",
        "all_gather_perf",
        "none",
        -1,
    ),
    "gb10-2.19.6-all-gather.log": Seen(
        6,
        536870912,
        17179869184,
        (23.74, 24.20),
        22.1205,
        0,
        (0, "OK"),
        "2.19.6",
        "all_gather_perf",
        "none",
        -1,
    ),
    "gb10-2.18.3-all-gather-degraded-direct-cable.log": Seen(
        3,
        1073741824,
        4294967296,
        (2.82, 2.83),
        2.82151,
        0,
        (0, "OK"),
        "2.18.3",
        "all_gather_perf",
        "none",
        -1,
    ),
    "gb10-2.18.5-all-gather-16g-one-size.log": Seen(
        1,
        17179869184,
        17179869184,
        (22.94, 22.98),
        22.9611,
        0,
        (0, "OK"),
        "2.18.5",
        "all_gather_perf",
        "none",
        -1,
    ),
    "p5-h100-all-reduce-mpi-rank-prefix.log": Seen(
        32, 0, 2147483648, (437.79, 437.89), 52.9753, 0, (0, "OK"), None, None, "sum", -1
    ),
    "rtx3090-2node-wrong-exponent-oob-failed.log": Seen(
        27,
        8,
        536870912,
        (7.41, 7.35),
        3.02663,
        RTX3090_WRONG,
        (108, "FAILED"),
        None,
        None,
        "sum",
        -1,
    ),
    # Not published: the sparkctl lab's stand-in, 4 ranks over 1000 Mbit/s links (SOURCES.md).
    "lab-standin-all-reduce-4ranks.log": Seen(
        5,
        1048576,
        16777216,
        (0.11, 0.09),
        0.112002,
        0,
        (0, "OK"),
        "2.18.3",
        "all_reduce_perf",
        "sum",
        -1,
    ),
}

REFUSED = {
    "gh200-2.17.8-cuda-busy-no-table.log": "no nccl-tests column header (# size count type redop ...); the run failed: gpu-1-1: "
    "Test CUDA failure common.cu:1304 'CUDA-capable device(s) is/are busy or unavailable'",
    "rtx5090-header-then-nccl-failure.log": "a column header but no result rows; the run failed: GENOA-06: Test NCCL failure common.cu:392",
    "aws-scatter-srun-label-excerpt.log:6": "rows left out ('...'): an excerpt, not a whole log",
}


def test_every_fixture_is_tested_and_has_its_source_noted() -> None:
    logs = {p.name for p in FIXTURES.glob("*.log")}
    assert logs == set(REAL) | {name.split(":")[0] for name in REFUSED}
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in logs)


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_log(name: str) -> None:
    seen = REAL[name]
    report = parse(fixture(name), name)
    assert len(report.rows) == seen.rows
    assert (report.rows[0].size, report.rows[-1].size) == (seen.first_size, seen.last_size)
    largest = report.largest()[0]
    assert largest.size == max(seen.first_size, seen.last_size)
    assert (largest.out_of_place.busbw, largest.in_place.busbw) == seen.largest_busbw
    assert report.avg_busbw == seen.avg
    assert report.wrong == seen.wrong
    assert (report.oob_values, report.oob_verdict) == seen.oob
    assert (report.version, report.collective) == (seen.version, seen.collective)
    assert {(r.redop, r.root) for r in report.rows} == {(seen.redop, seen.root)}
    assert report.avg_check is None and not report.cputime
    assert report.to_dict()["wrong"] == seen.wrong


# NCCL library (nccl-library= on the version line), and the Rank lines: ranks, distinct
# hosts, distinct GPUs (host, bus id), the GPU's name, as each real log prints them.
WHO_RAN = {
    "gb10-2.18.3-all-gather-mpirun-noise.log": (
        "2.28.9",
        2,
        ["spark-fb97", "spark-4440"],
        2,
        "NVIDIA GB10",
    ),
    "gb10-2.18.3-all-gather-degraded-direct-cable.log": (
        "2.28.9",
        2,
        ["spark-fb97", "spark-4440"],
        2,
        "NVIDIA GB10",
    ),
    "gb10-2.19.6-all-gather.log": ("2.28.9", 2, ["spark-101", "spark-102"], 2, "NVIDIA GB10"),
    "gb10-2.18.5-all-gather-16g-one-size.log": (
        "2.28.9",
        2,
        ["promaxgb10-4c75", "promaxgb10-4c99"],
        2,
        "NVIDIA GB10",
    ),
    "gh200-2.17.8-all-reduce-wrong-oob-failed.log": (
        "2.29.2",
        2,
        ["gpu-1-1", "gpu-1-7"],
        2,
        "NVIDIA GH200 120GB",
    ),
    # The DGX-2 run: 12 ranks in one process group on one host, 12 GPUs by bus id.
    "dgx2-v100-all-gather-oob-failed.log": (None, 12, ["seville"], 12, "Tesla V100-SXM3-32GB"),
    # The lab's stand-in has no NCCL: nccl-library=0.
    "lab-standin-all-reduce-4ranks.log": (
        None,
        4,
        ["spark1", "spark2", "spark3", "spark4"],
        4,
        "NVIDIA GB10",
    ),
    # Starts at the column header: no Rank lines to read.
    "p5-h100-all-reduce-mpi-rank-prefix.log": (None, 0, [], 0, None),
}


@pytest.mark.parametrize("name", sorted(WHO_RAN))
def test_real_log_says_which_nccl_ran_on_which_gpus(name: str) -> None:
    library, ranks, hosts, devices, gpu = WHO_RAN[name]
    report = parse(fixture(name), name)
    assert report.nccl_library == library
    assert (len(report.ranks), report.hosts, len(report.devices)) == (ranks, hosts, devices)
    assert {r.name for r in report.ranks} == ({gpu} if gpu else set())
    assert [r.rank for r in report.ranks] == list(range(ranks))
    data = report.to_dict()
    assert data["hosts"] == hosts and len(data["devices"]) == devices
    assert data["nccl_library"] == library


def test_rank_lines_of_the_layout_without_groups_and_nccl_banner() -> None:
    # NVIDIA/nccl #583 (2021): "Rank  0 Pid ... on HOST device  0 [0x00] NAME", no Group;
    # NCCL's INFO banner as a run with NCCL_DEBUG=INFO prints it (tests/fixtures/sglang).
    text = MODERN.replace(
        "# Using devices\n",
        "# Using devices\n"
        "   Rank  0 Pid 1821213 on AI-A100-Beethoven01 device  0 [0x00] NVIDIA A100-SXM4-40GB\n"
        "bm-220ab4v:175:175 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n",
    )
    assert text != MODERN
    report = parse(text)
    assert report.ranks[0].group is None and report.ranks[0].bus_id == "0x00"
    assert report.ranks[0].host == "AI-A100-Beethoven01"
    assert "2.28.9" in report.nccl_versions


@pytest.mark.parametrize(
    ("code", "version"),
    [
        (22809, "2.28.9"),
        (23102, "2.31.2"),
        (22902, "2.29.2"),
        (21003, "2.10.3"),
        (2804, "2.8.4"),
        (2708, "2.7.8"),
        (0, None),
    ],
)
def test_nccl_version_code(code: int, version: str | None) -> None:
    # nccl.h: NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z from 2.9 on, X*1000+Y*100+Z before.
    from sparkctl.nccl_parse import nccl_version_from_code  # noqa: PLC0415

    assert nccl_version_from_code(code) == version


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_real_failed_or_partial_log_is_refused(name: str) -> None:
    path = name.split(":", maxsplit=1)[0]
    with pytest.raises(SparkctlError) as info:
        parse(fixture(path), path)
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(info.value).startswith(f"{name}: {REFUSED[name]}")


def test_real_failures_that_complete_show_where() -> None:
    gh200 = parse(fixture("gh200-2.17.8-all-reduce-wrong-oob-failed.log"))
    bad = [r for r in gh200.rows if r.out_of_place.wrong or r.in_place.wrong]
    assert [(r.size, r.out_of_place.wrong, r.in_place.wrong) for r in bad] == [(1048576, 96, 32)]
    assert gh200.errors == [
        ".. gpu-1-1 pid 662195: Test failure common.cu:1189",
        ".. gpu-1-7 pid 2448661: Test failure common.cu:1189",
    ]
    dgx2 = parse(fixture("dgx2-v100-all-gather-oob-failed.log"))
    assert [
        (r.size, r.out_of_place.error, r.in_place.error) for r in dgx2.rows if r.out_of_place.error
    ] == [(4294967280, 1.0, 1.0), (8589934560, 1.0, 1.0)]
    assert dgx2.rows[0].out_of_place.wrong is None and dgx2.errors == []
    rtx = parse(fixture("rtx3090-2node-wrong-exponent-oob-failed.log"))
    assert rtx.rows[18].size == 2097152 and rtx.rows[18].in_place.wrong == 1048580  # "1.04858e+06"
    alltoall = parse(fixture("rtx5090-alltoall-inplace-unchecked.log")).rows[0]
    assert (alltoall.out_of_place.wrong, alltoall.in_place.wrong) == (0, None)


def test_real_logs_keep_their_lines_and_times() -> None:
    gb10 = parse(fixture("gb10-2.18.3-all-gather-mpirun-noise.log"))
    assert [r.line for r in gb10.rows] == [33, 34, 35]
    assert gb10.rows[0].out_of_place.time_us == 27211.0 and gb10.rows[0].count == 134217728
    p5 = parse(fixture("p5-h100-all-reduce-mpi-rank-prefix.log"))
    assert p5.rows[2].size == 4 and p5.rows[2].out_of_place.time_us == 202.2


# ------------------------------------------- real logs damaged in known ways


def test_a_real_log_cut_short_is_refused() -> None:
    lines = fixture("gb10-2.19.6-all-gather.log").splitlines(keepends=True)
    with pytest.raises(
        SparkctlError, match=re.escape("run.log: no 'Avg bus bandwidth' line after 4 row(s)")
    ):
        parse("".join(lines[:15]), "run.log")
    with pytest.raises(
        SparkctlError, match=re.escape("run.log:15: 6 fields where the header has 13")
    ):
        parse("".join(lines[:14]) + lines[14][:60] + "\n", "run.log")


def test_a_real_log_with_a_row_missing_is_refused() -> None:
    text = fixture("dgx2-v100-broadcast-root.log")
    row = "  4294967296    1073741824   float       0    35198  122.02  122.02  0e+00    35192  122.05  122.05  0e+00\n"
    assert row in text
    with pytest.raises(
        SparkctlError,
        match=r"run.log:52: the 'Avg bus bandwidth' 41.2456 is not the mean of the 30 row\(s\)",
    ) as info:
        parse(text.replace(row, ""), "run.log")
    assert info.value.code == ExitCode.BAD_INPUT


def test_two_real_runs_in_one_log_are_refused() -> None:
    text = fixture("dgx2-v100-all-gather-oob-failed.log") + fixture("dgx2-v100-broadcast-root.log")
    with pytest.raises(
        SparkctlError,
        match=re.escape("run.log:73: a second column header (the first is on line 19)"),
    ):
        parse(text, "run.log")
    two_avgs = fixture("rtx5090-alltoall-inplace-unchecked.log") + "# Avg bus bandwidth    : 0 \n"
    with pytest.raises(SparkctlError, match="a second 'Avg bus bandwidth' line"):
        parse(two_avgs, "run.log")
    late_row = (
        fixture("gb10-2.19.6-all-gather.log")
        + "   536870912      67108864     float    none      -1  14594.4   36.79   18.39       0  13778.0   38.97   19.48       0\n"
    )
    with pytest.raises(SparkctlError, match="a result row after the 'Avg bus bandwidth' line 19"):
        parse(late_row, "run.log")


def test_srun_labels_and_indentation_are_read_through() -> None:
    plain = parse(fixture("gb10-2.19.6-all-gather.log"))
    labelled = parse(
        "".join(
            f"0: {line}" for line in fixture("gb10-2.19.6-all-gather.log").splitlines(keepends=True)
        )
    )
    assert labelled == plain


# ---------------------------------- layouts seen only in the nccl-tests source
# No published log with these was found (SOURCES.md); the lines below follow
# writeResultHeader/writeResultFooter in nccl-tests' src/util.cu.


def test_cputime_columns() -> None:
    text = MODERN.replace("     time   algbw", "  cputime   algbw")
    assert "cputime" in text
    report = parse(text)
    assert report.cputime and report.rows[0].out_of_place.time_us == 98.10


def test_bitwise_columns_and_summary() -> None:
    text = MODERN.replace("busbw #wrong", "busbw #wrong #bitdiff")
    text = "\n".join(
        line.replace("      0   ", "      0         0   ") + "         7"
        if line.startswith("     ")
        else line
        for line in text.splitlines()
    )
    text = text.replace(
        "# Avg bus bandwidth", "# Bitwise mismatches   : 3 FAILED\n# Avg bus bandwidth"
    )
    report = parse(text)
    assert report.rows[2].out_of_place.extra == (("#bitdiff", 0.0),)
    assert report.rows[2].in_place.extra == (("#bitdiff", 7.0),)
    assert report.to_dict()["rows"][2]["in_place"]["extra"] == {"#bitdiff": 7.0}
    assert report.bitwise_mismatches == 3 and report.wrong == 0


def test_average_checked_against_a_minimum() -> None:
    report = parse(
        MODERN.replace("# Avg bus bandwidth    : 11.4550", "# Avg bus bandwidth    : 11.455 FAILED")
    )
    assert report.avg_check == "FAILED"


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            "#       size         count      type   redop    root     time   algbw   busbw",
            "column header not understood",
        ),
        (
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   #wrong   busbw",
            "column header not understood",
        ),
        (
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     cputime   algbw   busbw #wrong",
            "column header not understood",
        ),
    ],
)
def test_headers_that_are_not_understood_are_refused(header: str, message: str) -> None:
    text = MODERN.replace(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        header,
    )
    assert text != MODERN
    with pytest.raises(SparkctlError, match=re.escape(f"run.log:10: {message}")):
        parse(text, "run.log")


# ------------------------------------------------ sparkctl report nccl FILE
# The command as typed (sparkctl.cli.main, its error handling and exit codes),
# on every fixture and on logs broken in ways the cases above do not cover end
# to end. test_cli.py already runs it on an empty file, binary garbage, a
# header it does not understand and a missing file.


def report_nccl(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path
) -> tuple[int, str, str]:
    from sparkctl import cli  # noqa: PLC0415

    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["sparkctl", "report", "nccl", str(path)])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return code, out, err


FIGURE = re.compile(r"\d+(?:\.\d+)?\s*GB/s|average bus bandwidth \d")


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.log")))
def test_report_nccl_on_every_fixture(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, out, err = report_nccl(monkeypatch, capsys, FIXTURES / name)
    if name in REAL:
        seen = REAL[name]
        # A log with wrong results or out-of-bounds values is a failed run: exit 1, FAILED.
        failed = bool(seen.wrong or seen.oob[0])
        assert code == (ExitCode.CHECKS_FAILED if failed else 0), err
        assert f"average bus bandwidth {seen.avg:g} GB/s; wrong results {seen.wrong}" in out
        assert f"{max(seen.largest_busbw):g}" in out  # the largest size's row is in the table
        assert ("FAILED: " in out and f"{FIXTURES / name}: FAILED: " in err) == failed
        assert not re.search(r"\de[+-]\d", out), out  # every count and time printed exactly
        return
    refused = next(key for key in REFUSED if key.split(":")[0] == name)
    assert code == ExitCode.BAD_INPUT
    assert f"error: {FIXTURES / refused}: {REFUSED[refused][:40]}" in err, err
    assert not FIGURE.search(out + err), out


ROWS = [line for line in MODERN.splitlines() if line.startswith("     ")]

# name: (the log, "FILE" or "FILE:line" in the message, what the message says)
BROKEN: dict[str, tuple[str, str, str]] = {
    "header-but-no-rows": (
        MODERN.replace("\n".join(ROWS) + "\n", ""),
        "FILE",
        "a column header but no result rows",
    ),
    "time-not-a-number": (
        MODERN.replace("   180.33   11.63", "   fast   11.63"),
        "FILE:13",
        "time/algbw/busbw ['fast', '11.63', '11.63'] are not numbers",
    ),
    "row-with-fewer-columns": (
        MODERN.replace(ROWS[1], ROWS[1].rsplit(None, 4)[0]),
        "FILE:13",
        "9 fields where the header has 13 (line 10)",
    ),
    "busbw-nan": (
        MODERN.replace("11.98   11.98", "11.98     nan"),
        "FILE:14",
        "busbw 'nan' is not a measurement",
    ),
    "busbw-inf": (
        MODERN.replace("12.02   12.02", "12.02     inf"),
        "FILE:14",
        "busbw 'inf' is not a measurement",
    ),
    "busbw-negative": (
        MODERN.replace("10.69   10.69", "10.69  -10.69"),
        "FILE:12",
        "busbw '-10.69' is not a measurement",
    ),
    "size-negative": (
        MODERN.replace("     1048576        262144", "    -1048576        262144"),
        "FILE:12",
        "size '-1048576' is not a byte count",
    ),
    "cut-mid-row": (
        MODERN[: MODERN.index(ROWS[1]) + 60],
        "FILE:13",
        "6 fields where the header has 13",
    ),
    "same-size-other-count": (
        MODERN.replace(ROWS[1], ROWS[1] + "\n" + ROWS[1].replace("524288", "524289")),
        "FILE:14",
        "2097152 bytes of float are 524289 elements here and "
        "524288 on line 13: rows that contradict each other",
    ),
    "same-size-other-busbw": (
        MODERN.replace(ROWS[1], ROWS[1] + "\n" + ROWS[1].replace("11.63   11.63", "11.63   99.99")),
        "FILE:17",
        "the 'Avg bus bandwidth' 11.455 is not the mean of the 4 row(s)",
    ),
    "utf16-log": (MODERN, "FILE", "no nccl-tests column header"),  # written UTF-16 below
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_report_nccl_refuses_a_broken_log_naming_where(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    text, where, says = BROKEN[case]
    log = tmp_path / f"{case}.log"
    if case == "utf16-log":
        log.write_bytes(text.encode("utf-16"))
    else:
        log.write_text(text)
    assert case == "utf16-log" or text != MODERN
    code, out, err = report_nccl(monkeypatch, capsys, log)
    assert code == ExitCode.BAD_INPUT, (out, err)
    assert f"error: {where.replace('FILE', str(log))}: {says}" in err, err
    assert not FIGURE.search(out), out


def test_report_nccl_refuses_a_directory(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    logs = tmp_path / "logs.d"
    logs.mkdir()
    (logs / "run.log").write_text(MODERN)
    code, out, err = report_nccl(monkeypatch, capsys, logs)
    assert code == ExitCode.BAD_INPUT
    assert f"'{logs}' is a directory" in err, err
    assert not FIGURE.search(out)


# ------------------------------------------------ sparkctl report nccl FILE --gate
def report_gate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    from tests.unit.test_cli import run_main  # noqa: PLC0415

    return run_main(monkeypatch, capsys, "report", "nccl", *args)


# NCCL's INFO lines over RDMA, real ones (tests/fixtures/sglang/SOURCES.md: NVIDIA/nccl
# #707), as NCCL_DEBUG=INFO prints them into an nccl-tests log before its table.
IB_INFO = (FIXTURES.parent / "sglang" / "nccl_ib_transport_nccl707.log").read_text()
SOCKET_INFO = (FIXTURES.parent / "sglang" / "nccl_via_socket_nccl952.log").read_text()


def _with_info(text: str, info: str) -> str:
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "out-of-place" in line)
    return "".join(lines[:at]) + info + "".join(lines[at:])


def _cut(name: str, top: int, info: str = IB_INFO) -> str:
    """The log as a sweep that stopped at ``top`` would have printed it: the rows above
    gone, the average the rows left (nccl-tests' mean of every busbw printed); with
    ``info`` (NCCL's INFO lines) where NCCL_DEBUG=INFO prints them."""
    text = fixture(name)
    keep = [
        ln
        for ln in text.splitlines(keepends=True)
        if not (ln.strip()[:1].isdigit() and int(ln.split()[0]) > top)
    ]
    rows = [r for r in parse(text).rows if r.size <= top]
    mean = sum(h.busbw for r in rows for h in (r.out_of_place, r.in_place)) / (2 * len(rows))
    cut = re.sub(
        r"# Avg bus bandwidth    : [\d.]+", f"# Avg bus bandwidth    : {mean:.6g}", "".join(keep)
    )
    return _with_info(cut, info) if info else cut


@pytest.mark.parametrize(
    "case",
    [
        ("gb10-2.19.6-all-gather.log", 16 << 30, 0),
        ("gb10-2.19.6-all-gather.log", 4 << 30, 0),
        ("gb10-2.19.6-all-gather.log", 1 << 30, 0),
        ("gb10-2.18.3-all-gather-mpirun-noise.log", 4 << 30, 0),
        ("gb10-2.18.3-all-gather-mpirun-noise.log", 2 << 30, 0),
        ("gb10-2.18.5-all-gather-16g-one-size.log", 16 << 30, 0),
        ("gb10-2.18.3-all-gather-degraded-direct-cable.log", 4 << 30, 1),
        ("gb10-2.18.3-all-gather-degraded-direct-cable.log", 1 << 30, 1),
        # below the 1 GiB the gate is calibrated at: no verdict, exit 8
        ("gb10-2.19.6-all-gather.log", 512 << 20, 8),
    ],
)
def test_report_nccl_gate_on_real_gb10_logs(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    case: tuple[str, int, int],
) -> None:
    name, top, code = case
    log = tmp_path / name
    log.write_text(_cut(name, top))
    got, out, err = report_gate(monkeypatch, capsys, str(log), "--gate", "--line-rate", "25")
    outcome = {0: "passed", 1: "failed", 8: "not_judged"}[code]
    word = outcome.replace("_", " ").upper()
    assert got == code, (out, err)
    assert "gate (line rate 25 GB/s, threshold 21.875 GB/s): " in out
    assert word in out
    if code:
        assert f"{log}: gate {word}: " in err
    got, out, _ = report_gate(
        monkeypatch, capsys, str(log), "--gate", "--line-rate", "25", "--json"
    )
    data = json.loads(out)
    assert got == code and data["gate"]["outcome"] == outcome
    assert data["gate"]["thresholds"]["fractions"]["all_gather"] == 0.875
    assert data["gate"]["fit"]["largest_size"] == min(top, data["rows"][-1]["size"])


def test_report_nccl_gate_is_validate_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkctl.validate import nccl_judge  # noqa: PLC0415

    name = "gb10-2.19.6-all-gather.log"
    _, out, _ = report_gate(
        monkeypatch, capsys, str(FIXTURES / name), "--gate", "--line-rate", "25", "--json"
    )
    rep = parse(fixture(name))
    outcome, message, _, model = nccl_judge.judge(
        rep, "all_gather", 2, nccl_judge.role_thresholds(25.0)
    )
    gate = json.loads(out)["gate"]
    assert (gate["outcome"], gate["message"]) == nccl_judge.settle(
        outcome, message, rep.transport, True
    )
    assert gate["fit"]["busbw"] == model.busbw


def test_report_nccl_gate_at_a_lower_line_rate_passes_the_degraded_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The line rate is an input: at 3 GB/s the degraded run is 94% of it.
    code, out, _ = report_gate(
        monkeypatch,
        capsys,
        str(FIXTURES / "gb10-2.18.3-all-gather-degraded-direct-cable.log"),
        "--gate",
        "--line-rate",
        "3",
        "--no-rdma",  # its transport is not in the log: the bandwidth alone
    )
    assert code == 0 and "PASSED" in out


def test_report_nccl_with_wrong_results_exits_1_through_the_cli(tmp_path: Path) -> None:
    """As typed in a shell: a log with #wrong and out-of-bounds values exits 1, FAILED."""
    log = FIXTURES / "gh200-2.17.8-all-reduce-wrong-oob-failed.log"
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", "report", "nccl", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 1, proc.stderr
    assert "FAILED: 128 wrong result(s) (#wrong); 4 out-of-bounds value(s)" in proc.stdout
    assert f"{log}: FAILED: 128 wrong result(s)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--line-rate", "25"],
        ["--gate"],
        ["--gate", "--line-rate", "25", "-i", "inventory/lab.ini"],
        ["--gate", "--line-rate", "0"],
    ],
)
def test_report_nccl_gate_options_misused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, _, _ = report_gate(
        monkeypatch, capsys, str(FIXTURES / "gb10-2.19.6-all-gather.log"), *args
    )
    assert code == ExitCode.BAD_INPUT


def test_report_nccl_gate_refuses_a_collective_it_does_not_judge(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = report_gate(
        monkeypatch,
        capsys,
        str(FIXTURES / "dgx2-v100-broadcast-root.log"),
        "--gate",
        "--line-rate",
        "25",
    )
    assert code == ExitCode.BAD_INPUT and "the gate judges all_reduce, all_gather" in err


@pytest.mark.parametrize(
    "name",
    [
        "rtx3090-2node-wrong-exponent-oob-failed.log",
        "dgx2-v100-all-gather-oob-failed.log",
        "v100-pre-hash-all-gather-oob-failed.log",
        "gh200-2.17.8-all-reduce-wrong-oob-failed.log",
    ],
)
def test_report_nccl_gate_wrong_data_fails_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Real logs with #wrong or out-of-bounds values, three of them printing no collective
    name (older nccl-tests, or output cut before it): FAILED (exit 1) for the data, never
    exit 2 for the name the gate could not read."""
    log = str(FIXTURES / name)
    code, out, err = report_gate(monkeypatch, capsys, log, "--gate", "--line-rate", "25")
    assert code == ExitCode.CHECKS_FAILED, (out, err)
    assert f"{log}: FAILED: " in err and "no named collective" not in err
    assert "out-of-bounds value(s)" in err
    code, out, _ = report_gate(monkeypatch, capsys, log, "--gate", "--line-rate", "25", "--json")
    gate = json.loads(out)["gate"]
    assert code == ExitCode.CHECKS_FAILED and gate["outcome"] == "failed"
    assert "the data did not arrive intact" in gate["message"]


def _unnamed(name: str) -> str:
    """A real log without its '# Collective test ...' lines, as a log cut at its table."""
    return "".join(
        ln for ln in fixture(name).splitlines(keepends=True) if "Collective test" not in ln
    )


def test_report_nccl_gate_collective_names_a_log_that_does_not(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "all_gather.log"
    log.write_text(_unnamed("gb10-2.19.6-all-gather.log"))
    code, _, err = report_gate(monkeypatch, capsys, str(log), "--gate", "--line-rate", "25")
    assert code == ExitCode.BAD_INPUT and "of no named collective" in err
    assert "--collective all_gather" in err  # the hint
    args = (str(log), "--gate", "--line-rate", "25", "--collective", "all_gather", "--json")
    code, out, _ = report_gate(monkeypatch, capsys, *args)
    named = json.loads(out)["gate"]
    _, out, _ = report_gate(
        monkeypatch,
        capsys,
        str(FIXTURES / "gb10-2.19.6-all-gather.log"),
        "--gate",
        "--line-rate",
        "25",
        "--json",
    )
    assert named == json.loads(out)["gate"]  # judged as the log that names itself


@pytest.mark.parametrize(
    "args",
    [
        # A log that names all_gather is not judged as another collective.
        [
            str(FIXTURES / "gb10-2.19.6-all-gather.log"),
            "--gate",
            "--line-rate",
            "25",
            "--collective",
            "all_reduce",
        ],
        # --collective is the gate's.
        [str(FIXTURES / "gb10-2.19.6-all-gather.log"), "--collective", "all_gather"],
        [
            str(FIXTURES / "gb10-2.19.6-all-gather.log"),
            "--gate",
            "--line-rate",
            "25",
            "--collective",
            "broadcast",
        ],
    ],
)
def test_report_nccl_gate_collective_misused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, _, _ = report_gate(monkeypatch, capsys, *args)
    assert code == ExitCode.BAD_INPUT


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("gb10-2.19.6-all-gather.log", "NOT JUDGED"),
        ("gb10-2.18.3-all-gather-mpirun-noise.log", "NOT JUDGED"),
        # Failing bandwidth fails, whatever the transport; the hint is added.
        ("gb10-2.18.3-all-gather-degraded-direct-cable.log", "FAILED"),
    ],
)
def test_report_nccl_gate_a_log_without_its_transport_is_not_judged(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    says: str,
) -> None:
    """The public GB10 logs print no NCCL INFO lines: 'via NET/IB' cannot be told from a
    silent fallback to sockets, so a passing bandwidth is not a pass."""
    log = str(FIXTURES / name)
    got, out, err = report_gate(monkeypatch, capsys, log, "--gate", "--line-rate", "25")
    # not judged: exit 8 (nothing failed, nothing vouched for); failed: exit 1
    assert got == (ExitCode.NOT_JUDGED if says == "NOT JUDGED" else 1), (out, err)
    assert f"{log}: gate {says}: " in err
    assert "NCCL_DEBUG=INFO" in err and "does not show which network NCCL used" in err
    _, out, _ = report_gate(monkeypatch, capsys, log, "--gate", "--line-rate", "25", "--json")
    assert json.loads(out)["gate"]["outcome"] == (
        "not_judged" if says == "NOT JUDGED" else "failed"
    )
    # With the INFO lines over RDMA, the bandwidth decides; over sockets, it fails.
    with_ib = tmp_path / "ib.log"
    with_ib.write_text(_with_info(fixture(name), IB_INFO))
    got, out, _ = report_gate(monkeypatch, capsys, str(with_ib), "--gate", "--line-rate", "25")
    assert got == (0 if says == "NOT JUDGED" else 1) and "NCCL_DEBUG=INFO" not in out
    on_sockets = tmp_path / "socket.log"
    on_sockets.write_text(_with_info(fixture(name), SOCKET_INFO))
    got, _, err = report_gate(monkeypatch, capsys, str(on_sockets), "--gate", "--line-rate", "25")
    assert got == 1 and "NCCL used the Socket transport, not RDMA" in err
    # Where the cluster has no RDMA (--no-rdma: the lab), the transport is not judged.
    got, _, _ = report_gate(monkeypatch, capsys, log, "--gate", "--line-rate", "25", "--no-rdma")
    assert got == (0 if says == "NOT JUDGED" else 1)


def test_parse_reads_the_transport_from_nccls_info_lines() -> None:
    text = fixture("gb10-2.19.6-all-gather.log")
    assert parse(text).transport is None
    assert parse(_with_info(text, IB_INFO)).transport == "ib"
    assert parse(_with_info(text, SOCKET_INFO)).transport == "socket"
    # One socket communicator among IB ones is enough: it is what makes the run slow.
    assert parse(_with_info(text, IB_INFO + SOCKET_INFO)).transport == "socket"
