"""sparkctl.validate.nccl: the launch command, judging a real-format log, runs, localisation."""

# ruff: noqa: E501 -- tool output is quoted as the tools print it
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from sparkctl import nccl_report
from sparkctl.validate import nccl
from sparkctl.validate.model import Finding, Judged, NcclRun, Thresholds

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
# The lab stand-in's output, 4 ranks over 1000 Mbit/s links (SOURCES.md).
LAB_LOG = (FIXTURES / "lab-standin-all-reduce-4ranks.log").read_text()
NODES = ["spark1", "spark2", "spark3", "spark4"]
ADDRESSES = ["192.168.100.11", "192.168.100.12", "192.168.100.13", "192.168.100.14"]
LAB_RATE = 1000 / 8 / 1000  # 1000 Mbit/s in GB/s: 0.125
MiB = 1 << 20

# The rows of the fixture, as they are in it (the in-place 16 MiB time is 273038 us).
ROW_8M = "     8388608       2097152     float     sum      -1   118302    0.07    0.11       0   117228    0.07    0.11       0\n"
ROW_16M = "    16777216       4194304     float     sum      -1   239485    0.07    0.11       0   273038    0.06    0.09       0\n"


def th(min_fraction: float = 0.4, judged_sizes: int = 2, line_rate: float = LAB_RATE) -> Thresholds:
    return Thresholds(line_rate_gbytes=line_rate, min_fraction=min_fraction,
                      judged_sizes=judged_sizes, baseline_tolerance=0.1)


def launch(**changes: object) -> nccl.Launch:
    """The launch nccl_gate builds from the lab's plan (root in the lab, no NCCL build)."""
    base = nccl.Launch(
        collective="all_reduce", hosts=tuple(NODES), addresses=tuple(ADDRESSES),
        tests_dir="/opt/nccl-tests/build", env_file="/etc/sparkctl/nccl.env",
        env_keys=("GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
                  "OMPI_MCA_btl_tcp_if_include"),
        min_bytes=MiB, max_bytes=16 * MiB, iters=5, warmup=2, timeout=600, as_root=True)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_fixture_is_in_place() -> None:
    assert ROW_8M in LAB_LOG and ROW_16M in LAB_LOG


# ---------------------------------------------------------------- factors and sweep


@pytest.mark.parametrize(("collective", "n", "factor"), [
    ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5),
    ("all_gather", 2, 0.5), ("all_gather", 4, 0.75),
    ("reduce_scatter", 2, 0.5), ("reduce_scatter", 4, 0.75),
    ("all_reduce", 1, 1.0), ("all_gather", 1, 1.0),
])
def test_busbw_factor(collective: str, n: int, factor: float) -> None:
    assert nccl.busbw_factor(collective, n) == factor


GiB = 1 << 30


def test_sweep_max_is_a_power_of_two_from_the_tightest_node() -> None:
    # A Spark with ~114 GiB available: 0.5 x 114 / 3 buffers = 19 GiB -> 16 GiB.
    assert nccl.sweep_max([119630012 * 1024] * 4, 0.5, 64 * GiB, MiB) == 16 * GiB
    # The lab's ~22.9 GiB: 3.8 GiB -> 2 GiB; one node with less sets it for all.
    assert nccl.sweep_max([23969596 * 1024, 119630012 * 1024], 0.5, 64 * GiB, MiB) == 2 * GiB
    # Exactly a power of two stays.
    assert nccl.sweep_max([6 * GiB], 0.5, 64 * GiB, MiB) == GiB


def test_sweep_max_cap_and_floor() -> None:
    assert nccl.sweep_max([119630012 * 1024], 0.5, 4 * GiB, MiB) == 4 * GiB
    assert nccl.sweep_max([3 * MiB], 0.5, 4 * GiB, MiB) == MiB  # 512 KiB of room: the floor
    assert nccl.sweep_max([0], 0.5, 4 * GiB, 0) == 1


def test_sweep_max_without_a_memory_reading() -> None:
    assert nccl.sweep_max([], 0.5, 4 * GiB, MiB) == MiB
    assert nccl.sweep_max([], 0.5, 4 * GiB, 0) == 1


# ---------------------------------------------------------------- the launch


def test_mpirun_argv_as_root_in_the_lab() -> None:
    argv = launch().mpirun_argv()
    assert argv == [
        "mpirun", "-np", "4",
        "-H", "192.168.100.11:1,192.168.100.12:1,192.168.100.13:1,192.168.100.14:1",
        "--mca", "plm_rsh_args", "-o BatchMode=yes -o StrictHostKeyChecking=yes",
        "--allow-run-as-root",
        "-x", "GLOO_SOCKET_IFNAME", "-x", "NCCL_IB_HCA", "-x", "NCCL_SOCKET_IFNAME",
        "-x", "OMPI_MCA_btl_tcp_if_include",
        "/opt/nccl-tests/build/all_reduce_perf", "-b", "1048576", "-e", "16777216",
        "-f", "2", "-g", "1", "-c", "1", "-n", "5", "-w", "2",
    ]


def test_mpirun_argv_one_x_per_variable_and_no_root_flag_for_a_user() -> None:
    argv = launch(as_root=False, collective="all_gather", hosts=("spark1", "spark3"),
                  addresses=("192.168.100.11", "192.168.100.13")).mpirun_argv()
    assert "--allow-run-as-root" not in argv
    assert argv[argv.index("-np") + 1] == "2"
    assert argv[argv.index("-H") + 1] == "192.168.100.11:1,192.168.100.13:1"
    exported = [argv[i + 1] for i, word in enumerate(argv) if word == "-x"]
    assert exported == list(launch().env_keys)
    assert "/opt/nccl-tests/build/all_gather_perf" in argv
    # Host keys are checked: never StrictHostKeyChecking=no, never a password prompt.
    rsh = argv[argv.index("plm_rsh_args") + 1]
    assert "StrictHostKeyChecking=yes" in rsh and "BatchMode=yes" in rsh and "=no" not in rsh


def test_ld_library_path_only_with_an_nccl_build() -> None:
    assert "LD_LIBRARY_PATH" not in launch().mpirun_argv()
    assert "LD_LIBRARY_PATH" not in launch().remote_command()
    argv = launch(nccl_home="/opt/nccl/2.28.9").mpirun_argv()
    assert argv[argv.index("LD_LIBRARY_PATH") - 1] == "-x"
    assert argv.count("-x") == len(launch().env_keys) + 1


def test_remote_command_is_one_sh_c_script() -> None:
    lau = launch()
    words = shlex.split(lau.remote_command())
    assert words[:2] == ["sh", "-c"] and len(words) == 3
    script = words[2]
    assert script.startswith("set -a; . /etc/sparkctl/nccl.env; set +a; exec timeout --kill-after=10 600 ")
    assert shlex.split(script.split("exec timeout --kill-after=10 600 ", 1)[1]) == lau.mpirun_argv()


def test_remote_command_quoting_survives_spaces_and_quotes() -> None:
    lau = launch(env_file="/etc/spark ctl/nccl's.env", nccl_home="/opt/nccl build")
    script = shlex.split(lau.remote_command())[2]
    inner = shlex.split(script.replace(";", " ; "))
    assert inner[:4] == ["set", "-a", ";", "."] and inner[4] == "/etc/spark ctl/nccl's.env"
    assert "LD_LIBRARY_PATH=/opt/nccl build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" in inner
    tail = script.split("exec timeout --kill-after=10 600 ", 1)[1]
    assert shlex.split(tail) == lau.mpirun_argv()


def test_remote_command_runs_under_sh(tmp_path: Path) -> None:
    """What the head runs, run by sh here with an mpirun that reports what it got."""
    env_file = tmp_path / "nccl env" / "nccl.env"
    env_file.parent.mkdir()
    env_file.write_text("# Managed by sparkctl\nNCCL_SOCKET_IFNAME=enp1s0f1np1\n"
                        "NCCL_IB_HCA=rocep1s0f0,rocep1s0f1\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "mpirun"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "print(json.dumps({'argv': sys.argv[1:], 'ifname': os.environ.get('NCCL_SOCKET_IFNAME'),"
                    " 'hca': os.environ.get('NCCL_IB_HCA'), 'ld': os.environ.get('LD_LIBRARY_PATH')}))\n")
    fake.chmod(0o755)
    lau = launch(env_file=str(env_file), nccl_home=str(tmp_path / "nccl 2.28"), timeout=20)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "LD_LIBRARY_PATH": "/usr/local/lib"}
    words = shlex.split(lau.remote_command())
    proc = subprocess.run(words, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == lau.mpirun_argv()[1:]
    assert (seen["ifname"], seen["hca"]) == ("enp1s0f1np1", "rocep1s0f0,rocep1s0f1")  # exported
    assert seen["ld"] == f"{tmp_path / 'nccl 2.28'}/lib:/usr/local/lib"


# ---------------------------------------------------------------- judging the lab log


def test_precise_busbw_from_size_and_time() -> None:
    rep = nccl_report.parse(LAB_LOG)
    row = rep.largest()[0]
    assert row.size == 16 * MiB and row.in_place.busbw == 0.09
    # in-place: 16 MiB in 0.273038 s, x 2(n-1)/n = 1.5 for 4 ranks; the printed 0.09 is rounded.
    assert nccl._precise(row, "all_reduce", 4) == pytest.approx(16777216 / 0.273038 / 1e9 * 1.5)
    assert nccl._precise(row, "all_reduce", 4) == pytest.approx(0.0922, abs=5e-5)


def test_precise_falls_back_to_the_printed_figure_when_they_disagree() -> None:
    # An in-place time that does not fit the printed busbw (0.145 computed vs 0.09 printed):
    # the printed 0.09, lower than the out-of-place 0.105 computed.
    rep = nccl_report.parse(LAB_LOG.replace("   273038    0.06    0.09", "   173038    0.06    0.09"))
    row = rep.largest()[0]
    assert nccl._precise(row, "all_reduce", 4) == 0.09
    rep = nccl_report.parse(LAB_LOG.replace("   239485    0.07    0.11", "   139485    0.07    0.11"))
    row = rep.largest()[0]
    # out-of-place 0.180 computed vs 0.11 printed: the printed 0.11, then the in-place 0.0922 is lower.
    assert nccl._precise(row, "all_reduce", 4) == pytest.approx(0.0922, abs=5e-5)
    rep = nccl_report.parse(LAB_LOG.replace("   273038    0.06    0.09", "   373038    0.06    0.09"))
    # 0.0675 computed vs 0.09 printed: beyond rounding, the printed figure.
    assert nccl._precise(rep.largest()[0], "all_reduce", 4) == 0.09


def test_judge_passes_the_lab_log_at_40_percent() -> None:
    rep = nccl_report.parse(LAB_LOG)
    outcome, message, judged = nccl.judge(rep, "all_reduce", 4, th(0.4))
    assert outcome == "passed"
    assert message == "busbw 0.092 GB/s at 16 MiB = 74% of the line rate (threshold 40%)"
    assert [j.size for j in judged] == [8 * MiB, 16 * MiB]
    assert judged[0] == Judged(size=8 * MiB, busbw=0.106363, fraction=0.8509, wrong=0)
    assert judged[1] == Judged(size=16 * MiB, busbw=0.09217, fraction=0.7374, wrong=0)


def test_judge_fails_the_lab_log_at_90_percent_naming_size_and_percentages() -> None:
    rep = nccl_report.parse(LAB_LOG)
    outcome, message, judged = nccl.judge(rep, "all_reduce", 4, th(0.9))
    assert outcome == "failed"
    assert message == ("busbw 0.092 GB/s at 16 MiB is 74% of the line rate 0.125 GB/s "
                       "(threshold 90% = 0.113 GB/s)")
    assert len(judged) == 2


def test_judge_only_the_largest_sizes() -> None:
    rep = nccl_report.parse(LAB_LOG)
    # 80%: the 8 MiB row (85%) would pass, the 16 MiB row (74%) fails.
    assert nccl.judge(rep, "all_reduce", 4, th(0.8, judged_sizes=1))[0] == "failed"
    assert [j.size for j in nccl.judge(rep, "all_reduce", 4, th(0.8, judged_sizes=5))[2]] == \
        [MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB]
    # 70%: both judged rows pass.
    assert nccl.judge(rep, "all_reduce", 4, th(0.7))[0] == "passed"


def test_judge_fails_on_wrong_results_whatever_the_bandwidth() -> None:
    text = LAB_LOG.replace("0.11       0   273038", "0.11       3   273038")
    rep = nccl_report.parse(text)
    outcome, message, judged = nccl.judge(rep, "all_reduce", 4, th(0.1))
    assert outcome == "failed"
    assert message == "3 wrong result(s) (#wrong): the data did not arrive intact"
    assert judged[-1].wrong == 3 and judged[0].wrong == 0


def test_judge_fails_on_out_of_bounds_values() -> None:
    text = LAB_LOG.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED")
    outcome, message, _ = nccl.judge(nccl_report.parse(text), "all_reduce", 4, th(0.1))
    assert (outcome, message) == ("failed", "2 out-of-bounds value(s)")


def test_human_sizes() -> None:
    assert [nccl.human(s) for s in (16 * MiB, 4 * GiB, 512 << 10, 1000, 3 * MiB + 1)] == \
        ["16 MiB", "4 GiB", "512 KiB", "1000 B", "3145729 B"]


# ---------------------------------------------------------------- a run


class FakeRunner:
    """Stands in for ssh: records the calls, answers from a table (thread-safe)."""

    def __init__(self, answer: tuple[int, str] | None = None,
                 by_hosts: dict[str, tuple[int, str]] | None = None) -> None:
        self.answer = answer
        self.by_hosts = by_hosts or {}
        self.calls: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()

    def __call__(self, host: str, command: str, timeout: int) -> tuple[int, str]:
        with self._lock:
            self.calls.append((host, command, timeout))
        for hosts, answer in self.by_hosts.items():
            if f"-H {hosts}" in command.replace("'", ""):
                return answer
        assert self.answer is not None, f"no answer for {command}"
        return self.answer


def test_run_a_complete_log_passes_with_its_rows(tmp_path: Path) -> None:
    runner = FakeRunner((0, LAB_LOG))
    lau = launch()
    result = nccl.run(lau, runner, th(0.4), tmp_path / "nccl-all_reduce.log")
    assert runner.calls == [("spark1", lau.remote_command(), 600)]
    assert result.outcome == "passed" and result.scope == "all" and result.hosts == NODES
    assert result.message.startswith("busbw 0.092 GB/s at 16 MiB")
    assert result.command == lau.mpirun_argv() and result.log == "nccl-all_reduce.log"
    assert result.report is not None and len(result.report["rows"]) == 5
    assert result.report["avg_busbw"] == 0.112002 and result.report["wrong"] == 0
    assert [j.size for j in result.judged] == [8 * MiB, 16 * MiB]
    assert result.busbw_by_size()[16 * MiB] == 0.09
    assert (tmp_path / "nccl-all_reduce.log").read_text() == LAB_LOG
    assert result.duration_s >= 0


SGLANG_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"


def _with_nccl_info(log: str, fixture: str) -> str:
    """The lab log with NCCL's INFO lines (real ones, tests/fixtures/sglang/SOURCES.md) where
    NCCL_DEBUG=INFO prints them: after the header, before the table."""
    lines = log.splitlines(keepends=True)
    info = (SGLANG_FIXTURES / fixture).read_text()
    at = next(i for i, line in enumerate(lines) if "out-of-place" in line)
    return "".join(lines[:at]) + info + "".join(lines[at:])


@pytest.mark.parametrize(("fixture", "rdma", "outcome"), [
    ("nccl_via_socket_nccl952.log", True, "failed"),
    ("nccl_ib_transport_nccl707.log", True, "passed"),
    ("nccl_via_socket_nccl952.log", False, "passed"),  # the lab: no RDMA, sockets expected
])
def test_sockets_where_rdma_is_expected_fail_the_gate(tmp_path: Path, fixture: str, rdma: bool,
                                                      outcome: str) -> None:
    output = _with_nccl_info(LAB_LOG, fixture)
    result = nccl.run(launch(), FakeRunner((0, output)), th(0.4), tmp_path / "x.log",
                      rdma_expected=rdma)
    assert result.outcome == outcome, result.message
    assert result.report is not None and len(result.report["rows"]) == 5  # INFO lines skipped
    if outcome == "failed":
        assert result.message.startswith("NCCL used the Socket transport, not RDMA")
        assert "busbw 0.092 GB/s at 16 MiB" in result.message


def test_run_a_complete_log_with_a_bad_exit_status_fails(tmp_path: Path) -> None:
    result = nccl.run(launch(), FakeRunner((1, LAB_LOG)), th(0.4), tmp_path / "x.log")
    assert result.outcome == "failed"
    assert result.message.startswith("exit status 1 after a complete log: busbw 0.092 GB/s")


def _truncated() -> str:
    lines = LAB_LOG.splitlines(keepends=True)
    return "".join(lines[:17])  # header and three rows: cut off in the 8 MiB step


def test_run_a_truncated_log_fails_with_a_reason_and_keeps_the_log(tmp_path: Path) -> None:
    # timeout's --kill-after: mpirun did not stop on TERM and was killed (128 + 9).
    output = _truncated()
    result = nccl.run(launch(), FakeRunner((137, output)), th(0.4), tmp_path / "nccl-all_reduce.log")
    assert result.outcome == "failed"
    assert result.message.startswith("killed (exit 137)")
    assert result.report is None and result.judged == []
    assert (tmp_path / "nccl-all_reduce.log").read_text() == output
    assert result.log == "nccl-all_reduce.log" and result.command == launch().mpirun_argv()


def test_run_a_truncated_log_names_the_last_line_printed(tmp_path: Path) -> None:
    output = _truncated() + "spark3:649:702 [0] NCCL WARN Net : Connection closed by remote peer\n"
    result = nccl.run(launch(), FakeRunner((1, output)), th(0.4), tmp_path / "x.log")
    assert result.outcome == "failed"
    assert result.message.startswith("exit status 1")
    assert "spark3:649:702 [0] NCCL WARN Net : Connection closed by remote peer" in result.message


# Open MPI 4 wraps its abort notice in dashed lines.
MPIRUN_ABORT = """\
spark3: Test NCCL failure common.cu:1279 'remote process exited or there was a network error / '
 .. spark3 pid 649: Test failure common.cu:1189
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[43655,1],2]
  Exit code:    3
--------------------------------------------------------------------------
"""


@pytest.mark.parametrize(("rc", "output", "want"), [
    (0, "cut", "did not finish"),
    (3, "abort", "Test NCCL failure common.cu:1279"),
    (1, "gh200", "CUDA-capable device(s) is/are busy or unavailable"),
], ids=["exit-0-cut-short", "mpirun-abort", "real-gh200-cuda-busy"])
def test_run_an_incomplete_log_names_the_first_failure(tmp_path: Path, rc: int, output: str,
                                                       want: str) -> None:
    text = {"cut": _truncated(), "abort": _truncated() + MPIRUN_ABORT,
            "gh200": (FIXTURES / "gh200-2.17.8-cuda-busy-no-table.log").read_text()}[output]
    result = nccl.run(launch(), FakeRunner((rc, text)), th(0.4), tmp_path / "x.log")
    assert result.outcome == "failed"
    assert want in result.message


def test_run_timeout_is_no_result_within_the_time_limit(tmp_path: Path) -> None:
    result = nccl.run(launch(), FakeRunner((124, _truncated())), th(0.4), tmp_path / "x.log")
    assert result.outcome == "failed"
    assert result.message == ("no result within the time limit (a hang: a link or interface "
                              "that drops traffic?)")
    # The ssh runner's own time limit says so in the output.
    late = nccl.run(launch(), FakeRunner((124, "\nsparkctl: no answer from spark1 within 630 s\n")),
                    th(0.4), tmp_path / "y.log")
    assert late.message.startswith("no result within the time limit")


def test_run_connection_failures_name_the_line(tmp_path: Path) -> None:
    refused = "ssh: connect to host 192.168.100.13 port 22: No route to host\n"
    result = nccl.run(launch(), FakeRunner((255, refused)), th(0.4), tmp_path / "x.log")
    assert result.message == "ssh: connect to host 192.168.100.13 port 22: No route to host"
    keys = "Host key verification failed.\r\n"
    assert nccl.run(launch(), FakeRunner((255, keys)), th(0.4), tmp_path / "x.log").message == \
        "Host key verification failed."
    assert nccl.run(launch(), FakeRunner((1, "")), th(0.4), tmp_path / "x.log").message \
        .startswith("exit status 1")


# ---------------------------------------------------------------- pairs


def _pairs(rounds: list[list[tuple[str, str]]]) -> list[frozenset[str]]:
    return [frozenset(p) for r in rounds for p in r]


def test_pair_rounds_for_four_nodes() -> None:
    rounds = nccl.pair_rounds(NODES)
    assert len(rounds) == 3 and all(len(r) == 2 for r in rounds)
    for round_ in rounds:  # disjoint: no node twice in a round
        assert len({n for pair in round_ for n in pair}) == 4
    pairs = _pairs(rounds)
    assert len(pairs) == len(set(pairs)) == 6
    assert set(pairs) == {frozenset((a, b)) for a in NODES for b in NODES if a < b}
    assert rounds[0] == [("spark1", "spark4"), ("spark2", "spark3")]


def test_pair_rounds_for_five_nodes_one_sits_out_each_round() -> None:
    nodes = [*NODES, "spark5"]
    rounds = nccl.pair_rounds(nodes)
    assert len(rounds) == 5 and all(len(r) == 2 for r in rounds)
    pairs = _pairs(rounds)
    assert len(pairs) == len(set(pairs)) == 10
    resting = [set(nodes) - {n for pair in r for n in pair} for r in rounds]
    assert all(len(r) == 1 for r in resting)
    assert sorted(n for r in resting for n in r) == sorted(nodes)


def test_pair_rounds_small() -> None:
    assert nccl.pair_rounds(["spark1", "spark2"]) == [[("spark1", "spark2")]]
    assert nccl.pair_rounds(["spark1"]) == [[]]
    assert nccl.pair_rounds([]) == []


def test_run_pairs_round_by_round_with_a_log_each(tmp_path: Path) -> None:
    two = LAB_LOG  # the rows do not depend on the rank count for the parser
    runner = FakeRunner((0, two), by_hosts={"192.168.100.13:1,192.168.100.14:1": (1, "")})
    addr = dict(zip(NODES, ADDRESSES, strict=True))

    def make(pair: tuple[str, str]) -> nccl.Launch:
        return launch(hosts=pair, addresses=tuple(addr[n] for n in pair), max_bytes=4 * MiB)

    results = nccl.run_pairs(make, runner, th(0.1), tmp_path, NODES)
    assert [r.hosts for r in results] == [["spark1", "spark4"], ["spark2", "spark3"],
                                          ["spark1", "spark3"], ["spark4", "spark2"],
                                          ["spark1", "spark2"], ["spark3", "spark4"]]
    assert all(r.scope == "pair" for r in results)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"nccl-all_reduce-{'-'.join(r.hosts)}.log" for r in results)
    by = {frozenset(r.hosts): r for r in results}
    assert by[frozenset(("spark3", "spark4"))].outcome == "failed"
    assert by[frozenset(("spark3", "spark4"))].message.startswith("exit status 1")
    assert sum(r.outcome == "passed" for r in results) == 5
    assert {c[0] for c in runner.calls} == {"spark1", "spark2", "spark3", "spark4"}


# ---------------------------------------------------------------- localisation


def pair_run(a: str, b: str, busbw: float | None, outcome: str = "passed",
             message: str = "") -> NcclRun:
    judged = [] if busbw is None else [Judged(size=4 * MiB, busbw=busbw,
                                              fraction=round(busbw / LAB_RATE, 4), wrong=0)]
    return NcclRun(collective="all_reduce", scope="pair", hosts=[a, b],
                   outcome=outcome, message=message or f"busbw {busbw}", judged=judged)  # type: ignore[arg-type]


def all_pairs(busbw: Mapping[frozenset[str], tuple[float | None, str]]) -> list[NcclRun]:
    runs = []
    for round_ in nccl.pair_rounds(NODES):
        for a, b in round_:
            value, outcome = busbw[frozenset((a, b))]
            runs.append(pair_run(a, b, value, outcome))
    return runs


def where(node: str) -> str:
    return f"enp1s0f1np1 (switch port swp{node[-1]})"


def test_implicated_node_every_pair_fails() -> None:
    ok = {frozenset(p): "spark3" not in p for r in nccl.pair_rounds(NODES) for p in r}
    assert nccl.implicated(ok, NODES) == ["spark3"]
    assert nccl.implicated(dict.fromkeys(ok, True), NODES) == []
    assert nccl.implicated(dict.fromkeys(ok, False), NODES) == []  # nothing to compare with


def test_implicated_two_bad_nodes() -> None:
    ok = {frozenset(p): not ({"spark2", "spark3"} & set(p)) for r in nccl.pair_rounds(NODES) for p in r}
    assert nccl.implicated(ok, NODES) == ["spark2", "spark3"]


def test_localise_one_slow_node_among_four() -> None:
    values = {frozenset(p): ((0.016, "failed") if "spark3" in p else (0.065, "passed"))
              for r in nccl.pair_rounds(NODES) for p in r}
    findings = nccl.localise(all_pairs(values), NODES, where)
    assert findings == [Finding(
        "spark3", "enp1s0f1np1 (switch port swp3)",
        "every pair with spark3 fails or is slow (0.016 GB/s) while pairs without it reach "
        "0.065 GB/s: look at spark3's fabric link, enp1s0f1np1 (switch port swp3)")]


def test_localise_without_a_place_or_a_measurement() -> None:
    runs = [pair_run(*p, None, "failed", "no result within the time limit") if "spark3" in p
            else pair_run(*p, 0.065) for r in nccl.pair_rounds(NODES) for p in r]
    findings = nccl.localise(runs, NODES, lambda _node: None)
    assert len(findings) == 1 and findings[0].host == "spark3" and findings[0].subject is None
    assert findings[0].message == (
        "every pair with spark3 fails or is slow (no result within the time limit) while pairs "
        "without it reach 0.065 GB/s: look at spark3's fabric link")


def test_localise_every_pair_slow_is_the_cluster() -> None:
    values = {frozenset(p): (0.016, "failed") for r in nccl.pair_rounds(NODES) for p in r}
    assert nccl.localise(all_pairs(values), NODES, where) == [Finding(
        "cluster", None, "all 6 pairs fail or are slow: a cause common to every node (switch, "
        "MTU, NCCL environment), not one node")]


def test_localise_relative_slowness_counts_as_slow() -> None:
    # Every pair passes the absolute threshold, but spark2's are below 0.7 x the best pair.
    values = {frozenset(p): ((0.040, "passed") if "spark2" in p else (0.065, "passed"))
              for r in nccl.pair_rounds(NODES) for p in r}
    findings = nccl.localise(all_pairs(values), NODES, where)
    assert [f.host for f in findings] == ["spark2"]
    assert "(0.040 GB/s) while pairs without it reach 0.065 GB/s" in findings[0].message
    # Just above 0.7 x best is not slow.
    values = {frozenset(p): ((0.046, "passed") if "spark2" in p else (0.065, "passed"))
              for r in nccl.pair_rounds(NODES) for p in r}
    assert nccl.localise(all_pairs(values), NODES, where)[0].host == "cluster"


def test_localise_every_pair_passes() -> None:
    values = {frozenset(p): (0.065, "passed") for r in nccl.pair_rounds(NODES) for p in r}
    assert nccl.localise(all_pairs(values), NODES, where) == [Finding(
        "cluster", None, "every pair passes on its own: the all-node run fails only with all "
        "ranks (switch capacity, or a collective-specific problem)")]


def test_localise_one_bad_pair_names_the_pair() -> None:
    values = {frozenset(p): (0.065, "passed") for r in nccl.pair_rounds(NODES) for p in r}
    values[frozenset(("spark2", "spark3"))] = (0.016, "failed")
    findings = nccl.localise(all_pairs(values), NODES, where)
    assert findings == [Finding("spark2", "spark2-spark3", "pair spark2 - spark3: busbw 0.016")]


# ---------------------------------------------------------------- perftest

# ib_write_bw between two DGX Sparks as published in a "DGX Spark Networking" guide
# (a Markdown file in the stored GitHub index, repository not named by the index; found
# with the search tool, corpus code, "ib_write_bw --report_gbits ... BW average[Gb/sec]"):
# `ib_write_bw 192.168.177.12 -d rocep1s0f1 --report_gbits -q 4 -R --force-link IB`.
IB_WRITE_BW = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : rocep1s0f1
 Number of qps   : 4            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : ON
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 1024[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs     : ON
 Data ex. method : rdma_cm
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x03ec PSN 0xb680ae
 local address: LID 0000 QPN 0x03ed PSN 0x808800
 local address: LID 0000 QPN 0x03ee PSN 0x5b694a
 local address: LID 0000 QPN 0x03ef PSN 0xe2efd1
 remote address: LID 0000 QPN 0x03eb PSN 0x75f6ee
 remote address: LID 0000 QPN 0x03ec PSN 0x436140
 remote address: LID 0000 QPN 0x03ed PSN 0x81698a
 remote address: LID 0000 QPN 0x03ee PSN 0x4a8b11
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      20000            111.72             111.71             0.213070
---------------------------------------------------------------------------------------
"""

# The same table with -a (every size), as another published RoCE run prints it (same
# search): the last row is the largest size.
IB_WRITE_BW_SWEEP = """\
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 2          5000             0.11               0.11               6.897101
 4          5000             0.22               0.22               6.995646
 1024       5000             59.65              58.81              7.178529
 2048       5000             91.53              91.47              5.582931
 4096       5000             92.13              92.06              2.809574
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_average() -> None:
    assert nccl.ib_write_bw_average(IB_WRITE_BW) == 111.71
    assert nccl.ib_write_bw_average(IB_WRITE_BW_SWEEP) == 92.06


def test_ib_write_bw_without_a_result_row() -> None:
    failed = (" Couldn't connect to 192.168.177.12:18515\n"
              "Unable to perform rdma_client function\n")
    with pytest.raises(ValueError, match=r"no ib_write_bw result row \(#bytes #iterations BW peak BW average"):
        nccl.ib_write_bw_average(failed)
    with pytest.raises(ValueError, match="no ib_write_bw result row"):
        nccl.ib_write_bw_average(IB_WRITE_BW.split(" 65536", maxsplit=1)[0])
