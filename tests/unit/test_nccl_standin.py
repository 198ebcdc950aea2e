"""The lab's nccl-tests stand-in (lab/sparkctl_lab/standins/nccl_tests.py).

Expected strings come from real nccl-tests logs, not recomputed with the
code under test:
  - DGX Spark all_gather_perf, nccl-tests 2.19.6 + NCCL 2.28.9 (blog post "DGX
    Sparks Clustering - RoCE/RDMA Networking Setup & NCCL Benchmarking",
    2026-07-21, two GB10 nodes "spark-101"/"spark-102"), read from its copy in
    tests/fixtures/nccl/;
  - GH200 all_reduce_perf, nccl-tests 2.18.3 (Sigma2/NRIS Olivia docs), the
    lines the tests need quoted below.

The controller has no MPI, so the whole program runs here either against a
stub ``mpi4py`` that provides a one-rank world in-process (to check the full
output and the validation path), or with ``mpi4py`` made unimportable (it
must then fail with a clear error and print no figures). With ``mpirun`` and
``mpi4py`` on the controller, a real two-rank run over loopback runs too.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "lab" / "sparkctl_lab" / "standins" / "nccl_tests.py"


def _load() -> ModuleType:
    return load_file("nccl_tests_standin", SCRIPT)


st = _load()
MiB = 1024 * 1024

# Real output, DGX Spark (2 ranks), nccl-tests 2.19.6: the log of the blog post above,
# tests/fixtures/nccl/gb10-2.19.6-all-gather.log (SOURCES.md there).
SPARK_LOG = REPO / "tests" / "fixtures" / "nccl" / "gb10-2.19.6-all-gather.log"
SPARK_LINES = SPARK_LOG.read_text().splitlines()
SPARK_DEVICE_LINE = next(line for line in SPARK_LINES if line.startswith("#  Rank  0 "))
SPARK_NTHREAD_LINE = next(line for line in SPARK_LINES if line.startswith("# nThread "))
SPARK_ROWS = [
    next(line for line in SPARK_LINES if line.split()[:1] == [size])
    for size in ("536870912", "8589934592")
]
# Its footer; the post's copy stops at "concluded", nccl-tests prints a last "#".
SPARK_FOOTER = [*SPARK_LINES[SPARK_LINES.index("# Out of bounds values : 0 OK") :], "#"]
# Real output, GH200, nccl-tests 2.18.3 (trailing blanks as printed).
HEADER_2_18_3 = [
    "#",
    "#                                                              out-of-place"
    "                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    "     time   algbw   busbw  #wrong ",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
    "      (us)  (GB/s)  (GB/s)         ",
]
GH200_ROW = (
    "   134217728     134217728      int8     sum      -1  2309.49   58.12  101.70       0"
    "  2182.20   61.51  107.63       0"
)


# ------------------------------------------------------------ pure parts
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1M", MiB),
        ("64M", 64 * MiB),
        ("16G", 16 * 1024 * MiB),
        ("16g", 16 * 1024 * MiB),
        ("1.5K", 1536),
        ("8", 8),
        (" 512M", 512 * MiB),
        ("1MB", MiB),
        ("abc", -1),
        ("1X", -1),
    ],
)
def test_parse_size_like_parsesize(text: str, value: float) -> None:
    assert st.parse_size(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20", 20),
        ("0x10", 16),
        ("010", 8),
        (" -3", -3),
        ("5abc", 5),
        ("abc", 0),
        ("0", 0),
    ],
)
def test_c_strtol(text: str, value: int) -> None:
    assert st.c_strtol(text) == value


def test_size_sweeps() -> None:
    assert list(st.size_sweep(MiB, 64 * MiB, 2, MiB)) == [MiB << k for k in range(7)]
    assert list(st.size_sweep(32 * MiB, 32 * MiB, 1, MiB)) == [32 * MiB]
    assert list(st.size_sweep(MiB, 3 * MiB, 1, MiB)) == [MiB, 2 * MiB, 3 * MiB]
    assert list(st.size_sweep(0, 8, 2, 0)) == [0]  # the real binary would loop forever
    assert list(st.warmup_sweep(MiB, 5 * MiB)) == [MiB, 2 * MiB, 4 * MiB]


def test_bus_bandwidth_factors() -> None:
    reduce_, gather, scatter = (
        st.COLLS[n] for n in ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf")
    )
    assert reduce_.bus_factor(4) == 1.5
    assert gather.bus_factor(4) == scatter.bus_factor(4) == 0.75
    assert reduce_.bus_factor(2) == 1.0
    assert gather.bus_factor(2) == 0.5


def test_counts_and_bandwidth_reproduce_the_spark_log() -> None:
    """512 MiB all_gather over 2 ranks in 14594.4 us: 36.79 / 18.39 GB/s."""
    gather = st.COLLS["all_gather_perf"]
    send, recv, param = gather.counts(536870912 // 4, 2)
    assert (max(send, recv) * 4, param) == (536870912, 67108864)
    algbw = gather.alg_bytes(param, 4, 2) / 1.0e9 / 14594.4e-6
    assert f"{algbw:.2f}" == "36.79"
    assert f"{algbw * gather.bus_factor(2):.2f}" == "18.39"
    scatter = st.COLLS["reduce_scatter_perf"]
    assert scatter.counts(1000, 4) == (1000, 250, 250)
    assert st.COLLS["all_reduce_perf"].counts(1000, 4) == (1000, 1000, 1000)


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [
        (14594.4, 7, "14594.4"),
        (183338.0, 7, " 183338"),
        (26.95, 7, "  26.95"),
        (2309.49, 7, "2309.49"),
        (36.79, 6, " 36.79"),
        (101.70, 6, "101.70"),
        (0.0, 6, "  0.00"),
        (1945.4, 6, "1945.4"),
        (3.2e9, 7, "3.2e+09"),
    ],
)
def test_float_str_is_getfloatstr(value: float, width: int, text: str) -> None:
    assert st.float_str(value, width) == text


def test_rows_are_the_real_rows() -> None:
    first = (
        st.line_preamble(536870912, 67108864, "float", "none", -1)
        + st.line_body(14594.4, 36.79, 18.39, True, 0)
        + st.line_body(13778.0, 38.97, 19.48, True, 0)
    )
    assert first == SPARK_ROWS[0]
    big = (
        st.line_preamble(8589934592, 1073741824, "float", "none", -1)
        + st.line_body(183338, 46.85, 23.43, True, 0)
        + st.line_body(179211, 47.93, 23.97, True, 0)
    )
    assert big == SPARK_ROWS[1]
    gh200 = (
        st.line_preamble(134217728, 134217728, "int8", "sum", -1)
        + st.line_body(2309.49, 58.12, 101.70, True, 0)
        + st.line_body(2182.20, 61.51, 107.63, True, 0)
    )
    assert gh200 == GH200_ROW
    assert st.line_body(1.0, 1.0, 1.0, False, 0).endswith("    N/A")


def test_header_device_line_and_footer_are_the_real_ones() -> None:
    assert st.result_header(0, 0) == HEADER_2_18_3
    assert (
        st.device_line(0, 1668270, "spark-101", 0, pci=(0xF, 1, 0), name="NVIDIA GB10")
        == SPARK_DEVICE_LINE
    )
    assert st.footer_lines("all_gather_perf", 0, 22.1205, -1) == SPARK_FOOTER
    assert st.footer_lines("x", 2, 1.0, 20.0)[:2] == [
        "# Out of bounds values : 2 FAILED",
        "# Avg bus bandwidth    : 1 FAILED",
    ]


def test_options_and_nthread_line() -> None:
    opts = st.parse_args("all_gather_perf", ["-b", "512M", "-e", "16G", "-f", "2", "-g", "1"])
    lines = st.header_lines("all_gather_perf", opts, "enp1s0f1np1 (192.168.100.11)")
    assert lines[:3] == [
        "# nccl-tests version 2.18.3 nccl-headers=0 nccl-library=0",
        "# Collective test starting: all_gather_perf",
        SPARK_NTHREAD_LINE,
    ]
    assert lines[-2:] == ["#", "# Using devices"]
    longs = st.parse_args(
        "all_reduce_perf",
        [
            "--minbytes=1M",
            "--maxbytes",
            "64M",
            "--iters",
            "5",
            "--warmup_iters=2",
            "--check",
            "0",
            "--datatype",
            "double",
            "--op",
            "max",
            "--average",
            "3",
            "-z",
            "1",
            "-G",
            "2",
            "-t",
            "1",
        ],
    )
    assert (longs.minbytes, longs.maxbytes, longs.iters, longs.warmup_iters) == (
        MiB,
        64 * MiB,
        5,
        2,
    )
    assert (longs.datacheck, longs.average, longs.blocking, longs.cudagraph) == (0, 3, 1, 2)
    assert st.DTYPES[longs.dtype].name == "double" and st.OPS[longs.op] == "max"
    defaults = st.parse_args("all_reduce_perf", [])
    assert (
        defaults.minbytes,
        defaults.maxbytes,
        defaults.stepbytes,
        defaults.iters,
        defaults.warmup_iters,
        defaults.datacheck,
    ) == (32 * MiB, 32 * MiB, MiB, 20, 1, 1)


def _run_parse(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), pytest.raises(st.Exit) as done:
        st.parse_args("all_reduce_perf", argv)
    return done.value.status, out.getvalue(), err.getvalue()


def test_unknown_option_is_rejected_like_the_real_binary() -> None:
    status, out, err = _run_parse(["-b", "1M", "--bogus", "1"])
    assert status == 0  # nccl-tests returns 0 after printing the usage
    assert err == "all_reduce_perf: unrecognized option '--bogus'\n"
    assert out.startswith("invalid option '?'\nUSAGE: all_reduce_perf \n\t[-t,--nthreads")
    status, _, err = _run_parse(["-q"])
    assert err == "all_reduce_perf: invalid option -- 'q'\n"
    _, _, err = _run_parse(["-b"])
    assert err == "all_reduce_perf: option requires an argument -- 'b'\n"


def test_help_bad_sizes_and_bad_names() -> None:
    status, out, _ = _run_parse(["-h"])
    assert status == 0 and "[-d,--datatype <nccltype/all>]" in out
    status, _, err = _run_parse(["-b", "1Q"])
    assert (status, err) == (255, "invalid size specified for 'minbytes'\n")
    status, _, err = _run_parse(["-b", "64M", "-e", "1M"])
    assert status == 255 and "invalid sizes for 'minbytes' and 'maxbytes'" in err
    printed = io.StringIO()
    with redirect_stdout(printed):
        opts = st.parse_args("all_reduce_perf", ["-d", "fp128", "-o", "xor"])
    assert printed.getvalue() == (
        "invalid type fp128, defaulting to float .. \ninvalid op xor, defaulting to sum .. \n"
    )
    assert (st.DTYPES[opts.dtype].name, st.OPS[opts.op]) == ("float", "sum")


def test_plan_refuses_or_skips_what_mpi_cannot_reduce() -> None:
    reduce_ = st.COLLS["all_reduce_perf"]
    opts = st.parse_args("all_reduce_perf", ["-d", "half"])
    runs, notes, refused = st.plan(reduce_, opts)
    assert runs == [] and refused is not None and "no arithmetic on half" in refused
    runs, notes, refused = st.plan(reduce_, st.parse_args("all_reduce_perf", ["-d", "all"]))
    assert refused is None and len(runs) == 8
    assert "# sparkctl lab stand-in: skipping bfloat16 sum" in " ".join(notes)
    gather = st.plan(st.COLLS["all_gather_perf"], st.parse_args("all_gather_perf", ["-d", "half"]))
    assert [(dt.name, label) for dt, _, label in gather[0]] == [("half", "none")]


def _addrs(**ifaces: str) -> dict[str, list[object]]:
    import ipaddress  # noqa: PLC0415

    return {name: [ipaddress.IPv4Interface(a)] for name, a in ifaces.items()}


def test_transport_must_be_the_fabric() -> None:
    fabric = _addrs(enp1s0f1np1="192.168.100.11/24", enP7s7="10.77.0.11/24")
    good = {"OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
    problems, described = st.transport_problems(good, fabric)
    assert problems == [] and described == "enp1s0f1np1 (192.168.100.11)"
    problems, _ = st.transport_problems({}, fabric)
    assert "management network" in problems[0]
    problems, _ = st.transport_problems(good, _addrs(enP7s7="10.77.0.11/24"))
    assert any("no IPv4 address" in p and "roce_fabric" in p for p in problems)
    assert any("Bootstrap : no socket interface found" in p for p in problems)
    assert (
        st.transport_problems({"OMPI_MCA_btl_tcp_if_include": "192.168.100.0/24"}, fabric)[0] == []
    )
    assert st.transport_problems(
        {"OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1", "OMPI_MCA_btl": "self,vader"}, fabric
    )[0]


def _simulate(name: str, op: str, nranks: int, param: int) -> None:
    """Inputs of every rank, combined as the collective does, give the expected values."""
    dt = next(d for d in st.DTYPES if d.name == "float")
    inputs = [
        st.input_values(
            dt, 0, param * (nranks if name == "reduce_scatter_perf" else 1), rank=r, rep=5, op=op
        )
        for r in range(nranks)
    ]
    fold = st.REDUCE[op]
    if name == "all_gather_perf":
        result = [v for block in inputs for v in block]
        expected = st.array("f")
        for r in range(nranks):
            expected.extend(st.input_values(dt, 0, param, rank=r, rep=5, op=op))
        assert list(expected) == result
        return
    reduced = [fold([inp[i] for inp in inputs]) for i in range(len(inputs[0]))]
    for r in range(nranks if name == "reduce_scatter_perf" else 1):
        start = r * param if name == "reduce_scatter_perf" else 0
        want = st.expected_values(dt, start, param, nranks=nranks, rep=5, op=op)
        assert list(want) == reduced[start : start + param]


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("name", ["all_reduce_perf", "reduce_scatter_perf", "all_gather_perf"])
def test_expected_values_match_a_simulated_collective(name: str, op: str) -> None:
    _simulate(name, op, 4, 1000)


def test_count_wrong() -> None:
    dt = next(d for d in st.DTYPES if d.name == "int32")
    want = st.input_values(dt, 0, 200000, rank=1, rep=0, op="sum")
    got = bytearray(want.tobytes())
    assert st.count_wrong(memoryview(got), want) == 0
    got[4 * 7] ^= 0xFF
    got[4 * 150001 + 2] ^= 0x01
    assert st.count_wrong(memoryview(got), want) == 2


def test_memory_cap_follows_common_cu() -> None:
    gib = 1 << 30
    assert st.memory_limited_max(128 * gib, 1) == (128 * gib - 4 * gib - gib) // 3
    assert st.memory_limited_max(8 * gib, 0) == (8 * gib - gib - gib) // 2


# ------------------------------------------------ the whole program, in-process
STUB_MPI = '''
"""Stub mpi4py: a one-rank MPI world in-process (tests only)."""
import os


class _Rc:
    initialize = True
    finalize = True


rc = _Rc()
'''

STUB_MPI_MODULE = '''
"""Stub mpi4py.MPI: one rank; collectives copy like a one-rank MPI would."""
import os

IN_PLACE = object()
SUM, PROD, MAX, MIN = "SUM", "PROD", "MAX", "MIN"
THREAD_FUNNELED = 1
(INT8_T, UINT8_T, INT32_T, UINT32_T, INT64_T, UINT64_T, UINT16_T, FLOAT,
 DOUBLE) = range(9)
_CORRUPT = os.environ.get("STUB_MPI_CORRUPT") == "1"


def Init_thread(level):
    return level


def Finalize():
    pass


def _copy(src, dst):
    n = len(dst[0])
    if src is not IN_PLACE:
        dst[0][:n] = src[0][:n]
    if _CORRUPT and n:
        dst[0][0] ^= 0xFF


class _Comm:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def allgather(self, obj):
        return [obj]

    def gather(self, obj, root=0):
        return [obj]

    def allreduce(self, obj, op=SUM):
        return obj

    def bcast(self, obj, root=0):
        return obj

    def Barrier(self):
        pass

    def Allreduce(self, send, recv, op):
        _copy(send, recv)

    def Allgather(self, send, recv):
        _copy(send, recv)

    def Reduce_scatter(self, send, recv, counts, op):
        _copy(send, recv)


COMM_WORLD = _Comm()
'''


def _node(tmp_path: Path, *, with_stub: bool) -> dict[str, str]:
    """Environment of a fake lab node: hardware.json, addresses, and (or not) mpi4py."""
    lib = tmp_path / "lib"
    (lib / "mpi4py").mkdir(parents=True)
    if with_stub:
        (lib / "mpi4py" / "__init__.py").write_text(STUB_MPI)
        (lib / "mpi4py" / "MPI.py").write_text(STUB_MPI_MODULE)
    else:  # MPI not installed, whatever the controller has
        (lib / "mpi4py" / "__init__.py").write_text("raise ImportError('No module named mpi4py')\n")
    (tmp_path / "hardware.json").write_text(
        json.dumps(
            {"gpu_present": True, "gpu_name": "NVIDIA GB10", "pci_bus_id": "0000000F:01:00.0"}
        )
    )
    (tmp_path / "ip.json").write_text(
        json.dumps(
            [
                {
                    "ifname": "enp1s0f1np1",
                    "addr_info": [{"family": "inet", "local": "192.168.100.11", "prefixlen": 24}],
                }
            ]
        )
    )
    (tmp_path / "meminfo").write_text("MemAvailable:   16000000 kB\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "NCCL_"))}
    env.update(
        PYTHONPATH=str(lib),
        SPARKCTL_LAB_HW=str(tmp_path / "hardware.json"),
        SPARKCTL_LAB_IP_JSON=str(tmp_path / "ip.json"),
        SPARKCTL_LAB_MEMINFO=str(tmp_path / "meminfo"),
        OMPI_MCA_btl_tcp_if_include="enp1s0f1np1",
        NCCL_SOCKET_IFNAME="enp1s0f1np1",
    )
    return env


def _program(tmp_path: Path, name: str) -> Path:
    target = tmp_path / "build" / name
    target.parent.mkdir(exist_ok=True)
    shutil.copy(SCRIPT, target)
    return target


def _run(
    tmp_path: Path,
    name: str,
    args: list[str],
    env: dict[str, str],
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(_program(tmp_path, name)), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


TABLE_ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s+\w+\s+-?\d+\s")


def test_without_mpi_it_fails_clearly_and_prints_no_figures(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=False)
    proc = _run(tmp_path, "all_reduce_perf", ["-b", "1M", "-e", "1M"], env)
    assert proc.returncode == 127
    assert "mpi4py" in proc.stderr and "no figures" in proc.stderr
    assert not [line for line in proc.stdout.splitlines() if TABLE_ROW.match(line)]
    assert "Avg bus bandwidth" not in proc.stdout


def test_one_rank_run_prints_the_nccl_tests_format(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=True)
    proc = _run(tmp_path, "all_reduce_perf", ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "# nccl-tests version 2.18.3 nccl-headers=0 nccl-library=0"
    assert lines[2] == (
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 65536 step: 4(factor) "
        "warmup iters: 1 iters: 3 agg iters: 1 validation: 1 graph: 0 unalign: 0"
    )
    assert lines[3].startswith("# sparkctl lab stand-in: ") and "enp1s0f1np1" in lines[3]
    assert re.fullmatch(
        r"#  Rank  0 Group  0 Pid +\d+ on +\S+ device  0 \[000f:01:00\] "
        r"NVIDIA GB10",
        lines[6],
    )
    assert lines[7:11] == HEADER_2_18_3
    rows = [line for line in lines if TABLE_ROW.match(line)]
    assert [int(r.split()[0]) for r in rows] == [1024, 4096, 16384, 65536]
    assert all(r.split()[2:5] == ["float", "sum", "-1"] for r in rows)
    assert all(r.split()[8] == "0" and r.split()[12] == "0" for r in rows)  # #wrong
    assert all(float(r.split()[7]) == 0.0 for r in rows)  # busbw: 2(n-1)/n = 0 for 1 rank
    assert lines[-6:] == [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 0 ",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
        "",
    ]


def test_wrong_results_are_counted_and_fail_the_run(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=True)
    env["STUB_MPI_CORRUPT"] = "1"
    proc = _run(tmp_path, "reduce_scatter_perf", ["-b", "4K", "-e", "4K", "-n", "2"], env)
    rows = [line for line in proc.stdout.splitlines() if TABLE_ROW.match(line)]
    assert len(rows) == 1 and rows[0].split()[8] == "1" and rows[0].split()[12] == "1"
    assert "# Out of bounds values : 2 FAILED" in proc.stdout
    assert proc.returncode == 7  # testNumResults, like nccl-tests
    assert "Test failure" in proc.stdout


def test_refuses_to_run_off_the_fabric(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=True)
    del env["OMPI_MCA_btl_tcp_if_include"]
    proc = _run(tmp_path, "all_gather_perf", ["-b", "1K", "-e", "1K"], env)
    assert proc.returncode == 3
    assert "refusing to run" in proc.stderr and "management network" in proc.stderr
    assert not [line for line in proc.stdout.splitlines() if TABLE_ROW.match(line)]


def test_second_gpu_per_node_is_invalid_like_on_a_spark(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=True)
    proc = _run(tmp_path, "all_reduce_perf", ["-g", "2", "-b", "1K", "-e", "1K"], env)
    assert proc.returncode == 5
    assert "Invalid number of GPUs: 2 requested but only 1 were found." in proc.stderr


def test_json_output(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=True)
    out = tmp_path / "result.json"
    proc = _run(
        tmp_path, "all_gather_perf", ["-b", "1K", "-e", "2K", "-f", "2", "-J", str(out)], env
    )
    assert proc.returncode == 0, proc.stderr
    assert f"# Writing JSON output to {out}" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["version"] == 2 and doc["config"]["step_factor"] == 2
    assert [r["size"] for r in doc["results"]] == [1024, 2048]
    assert doc["results"][0]["redop"] == "none"
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}


# ------------------------------------------------ real MPI, when the controller has it
def _have_mpi() -> bool:
    if shutil.which("mpirun") is None:
        return False
    probe = subprocess.run(
        [sys.executable, "-c", "import mpi4py"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _have_mpi(), reason="no mpirun and mpi4py on this machine")
def test_two_ranks_over_loopback_with_mpirun(tmp_path: Path) -> None:
    env = _node(tmp_path, with_stub=False)
    env.pop("PYTHONPATH")
    (tmp_path / "ip.json").write_text(
        json.dumps(
            [
                {
                    "ifname": "lo",
                    "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}],
                }
            ]
        )
    )
    env.update(OMPI_MCA_btl_tcp_if_include="lo", NCCL_SOCKET_IFNAME="lo")
    program = _program(tmp_path, "all_reduce_perf")
    cmd = [
        "mpirun",
        "--oversubscribe",
        "-np",
        "2",
        "--mca",
        "btl",
        "tcp,self",
        "-x",
        "OMPI_MCA_btl_tcp_if_include",
        "-x",
        "NCCL_SOCKET_IFNAME",
        "-x",
        "SPARKCTL_LAB_HW",
        "-x",
        "SPARKCTL_LAB_IP_JSON",
        "-x",
        "SPARKCTL_LAB_MEMINFO",
        sys.executable,
        str(program),
        "-b",
        "64K",
        "-e",
        "256K",
        "-f",
        "2",
        "-n",
        "5",
    ]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if TABLE_ROW.match(line)]
    assert [int(r.split()[0]) for r in rows] == [65536, 131072, 262144]
    assert all(r.split()[8] == "0" and r.split()[12] == "0" for r in rows)
    assert all(float(r.split()[7]) > 0 for r in rows)  # busbw = algbw x 2(n-1)/n = algbw


def test_rings_like_nccl_unless_the_launcher_chose_an_algorithm() -> None:
    extra, what = st.mpi_environment({"OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1"})
    assert extra == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",
        "OMPI_MCA_coll_tuned_allgather_algorithm": "4",
        "OMPI_MCA_coll_tuned_reduce_scatter_algorithm": "3",
        "OMPI_MCA_mpi_yield_when_idle": "1",
    }
    assert what == "ring algorithms (as NCCL)"
    chosen = st.mpi_environment(
        {"OMPI_MCA_coll_tuned_allreduce_algorithm": "6", "OMPI_MCA_mpi_yield_when_idle": "0"}
    )
    assert chosen == ({}, "the algorithms set by OMPI_MCA_coll_tuned_*")
