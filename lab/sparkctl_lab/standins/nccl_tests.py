#!/usr/bin/python3
"""nccl-tests stand-in for sparkctl rehearsal-lab nodes (no GPU, no NCCL, no RDMA).

Installed by the nccl role as ``all_reduce_perf``, ``all_gather_perf`` and
``reduce_scatter_perf`` in ``<nccl_tests_dir>/build`` (the paths of the real
binaries); the program name picks the collective. Launched like the real
thing, by Open MPI's ``mpirun``, one rank per node over SSH, with the NCCL
environment exported with ``-x``.

What it does for real: the collective itself. Each rank fills buffers of the
requested size, the ranks run MPI Allreduce / Allgather / Reduce_scatter_block
(mpi4py) over Open MPI's TCP transport, the loop is timed with the same
warm-up, iteration, averaging and validation scheme as nccl-tests' common.cu,
and ``-c`` checks every element of the result against the expected values and
counts the wrong ones. The figures printed are those measurements; nothing is
canned, so a slow or broken fabric shows up exactly as it would with NCCL:
slower figures, a hang (or ``-T`` timeout), or an error.

The transport must be the fabric: the stand-in refuses to start unless
``OMPI_MCA_btl_tcp_if_include`` (exported from /etc/sparkctl/nccl.env, or
``--mca btl_tcp_if_include``) names interfaces that carry an IPv4 address on
this node, and, like NCCL's bootstrap, unless ``NCCL_SOCKET_IFNAME`` (when
set) matches an addressed interface. Open MPI then cannot pick the management
network behind anyone's back. Unless the launcher set them, the stand-in asks
Open MPI for its ring algorithms (NCCL's choice at these sizes) and for ranks
that yield while waiting (lab nodes share the host's CPUs); see
RING_ALGORITHMS and YIELD.

What it does not model: GPUs, NCCL's algorithms and RDMA, and reductions on
types MPI has no operation for (half, bfloat16, fp8; avg, mulsum): those are
refused with a message (or skipped, with a ``#`` note, under ``-d all`` /
``-o all``). There is no NCCL, so the version line says ``nccl-headers=0
nccl-library=0`` and one extra ``#`` line says what ran instead.

Output format: that of nccl-tests 2.18/2.19 (util.cu ``writeDeviceReport``,
``writeResultHeader``, ``writeBenchmarkLine*``, ``writeResultFooter``, and
``getFloatStr`` for the number widths), checked against real logs:
  - DGX Spark (GB10) all_gather_perf, nccl-tests 2.19.6 with NCCL 2.28.9:
    "DGX Sparks Clustering - RoCE/RDMA Networking Setup & NCCL Benchmarking"
    (blog post, slug dgx-spark-nccl-roce-benchmarking, 2026-07-21);
  - GH200 all_reduce_perf, nccl-tests 2.18.3 (Sigma2/NRIS Olivia
    documentation, "nccl-tests" job output);
  - NVIDIA/nccl-tests issue #107 and NVIDIA/nccl #1530 for older columns.
Options, defaults and messages follow common.cu (getopt_long table, parsesize,
ncclstringtotype/op, the usage text); an unknown option prints the usage and
exits 0, as the real binary does. Behaviour and exit codes: testResult_t.

Configuration: $SPARKCTL_LAB_HW (default /etc/sparkctl-lab/hardware.json: GPU
name and PCI id for the device lines), $SPARKCTL_LAB_IP_JSON (a file of
``ip -j -4 addr show`` output used instead of running ip; tests),
$SPARKCTL_LAB_MEMINFO (default /proc/meminfo). No numpy: buffers are
bytearrays and array.array, which mpi4py takes as they are.
"""

from __future__ import annotations

import getopt
import io
import ipaddress
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NCCL_TESTS_VERSION = "2.18.3"
STANDIN = "sparkctl lab stand-in"
HW_PATH = Path(os.environ.get("SPARKCTL_LAB_HW", "/etc/sparkctl-lab/hardware.json"))
MEMINFO = Path(os.environ.get("SPARKCTL_LAB_MEMINFO", "/proc/meminfo"))
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
GB = 1 << 30

# testResult_t (common.h): the exit status of a failed run.
TEST_SUCCESS, TEST_INTERNAL_ERROR, TEST_CUDA_ERROR, TEST_NCCL_ERROR = 0, 1, 2, 3
TEST_TIMEOUT, TEST_NOT_IMPLEMENTED, TEST_INVALID_USAGE, TEST_NUM_RESULTS = 4, 5, 6, 7


# ------------------------------------------------------------------ tables
@dataclass(frozen=True)
class DType:
    """An nccl-tests datatype and how the stand-in holds it."""

    name: str
    size: int
    typecode: str  # array.array type code of the same size
    mpi: str  # mpi4py datatype name
    reducible: bool  # MPI has arithmetic for it


# Order and names of common.cu's test_types on NCCL >= 2.24 and sm_90+ (GB10).
DTYPES: tuple[DType, ...] = (
    DType("int8", 1, "b", "INT8_T", True),
    DType("uint8", 1, "B", "UINT8_T", True),
    DType("int32", 4, "i", "INT32_T", True),
    DType("uint32", 4, "I", "UINT32_T", True),
    DType("int64", 8, "q", "INT64_T", True),
    DType("uint64", 8, "Q", "UINT64_T", True),
    DType("half", 2, "H", "UINT16_T", False),
    DType("float", 4, "f", "FLOAT", True),
    DType("double", 8, "d", "DOUBLE", True),
    DType("bfloat16", 2, "H", "UINT16_T", False),
    DType("f8e4m3", 1, "B", "UINT8_T", False),
    DType("f8e5m2", 1, "B", "UINT8_T", False),
)
OPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg", "mulsum")
MPI_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}
REDUCE: dict[str, Callable[[list[int]], int]] = {
    "sum": sum,
    "prod": math.prod,
    "max": max,
    "min": min,
}
FLOAT_NAME, SUM_NAME = "float", "sum"


@dataclass(frozen=True)
class Coll:
    """One collective: buffer sizes (getCollByteCount) and bandwidth (getBw)."""

    program: str
    reduces: bool

    def counts(self, count: int, nranks: int) -> tuple[int, int, int]:
        """(send, recv, param) element counts for ``count`` elements, as nccl-tests."""
        if self.program == "all_reduce_perf":
            return count, count, count
        per = count // nranks
        if self.program == "all_gather_perf":
            return per, per * nranks, per
        return per * nranks, per, per  # reduce_scatter

    def bus_factor(self, nranks: int) -> float:
        """busbw = algbw x this: 2(n-1)/n for all_reduce, (n-1)/n for gather/scatter."""
        if self.program == "all_reduce_perf":
            return 2.0 * (nranks - 1) / nranks
        return (nranks - 1) / nranks

    def alg_bytes(self, param: int, size: int, nranks: int) -> int:
        """Bytes over which algbw is computed (count x typesize [x nranks])."""
        return param * size * (1 if self.program == "all_reduce_perf" else nranks)


COLLS = {
    name: Coll(name, reduces)
    for name, reduces in (
        ("all_reduce_perf", True),
        ("all_gather_perf", False),
        ("reduce_scatter_perf", True),
    )
}

# NCCL runs these collectives as rings at the sizes a bandwidth test uses, so
# every rank sends (and receives) the bandwidth-optimal 2(n-1)/n or (n-1)/n of
# the data. Open MPI's own choice for 4 ranks moves more (measured in the lab:
# about half the busbw of its ring), so the stand-in asks Open MPI 4.1's "tuned"
# component for its ring algorithms, unless the launcher chose otherwise.
RING_ALGORITHMS = {
    "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
    "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",  # ring
    "OMPI_MCA_coll_tuned_allgather_algorithm": "4",  # ring
    "OMPI_MCA_coll_tuned_reduce_scatter_algorithm": "3",  # ring
}
# The lab's nodes are containers sharing the host's few CPUs: ranks that
# busy-poll while they wait take the CPU from the rank that has data to move,
# and the test would measure the host's scheduler (1 MiB all_reduce: 124 ms
# polling, 26 ms yielding, in the lab). NCCL's proxy threads sleep too.
YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def mpi_environment(env: dict[str, str]) -> tuple[dict[str, str], str]:
    """(variables to add, algorithm description): rings and yielding, unless already set."""
    extra = {k: v for k, v in YIELD.items() if k not in env}
    if any(key.startswith("OMPI_MCA_coll_tuned_") for key in env):
        return extra, "the algorithms set by OMPI_MCA_coll_tuned_*"
    return {**RING_ALGORITHMS, **extra}, "ring algorithms (as NCCL)"


# ----------------------------------------------------------------- options
@dataclass
class Options:
    """Command line of nccl-tests with common.cu's defaults."""

    nthreads: int = 1
    ngpus: int = 1
    minbytes: int = 32 * 1024 * 1024
    maxbytes: int = 32 * 1024 * 1024
    stepbytes: int = 1024 * 1024
    stepfactor: int = 1
    iters: int = 20
    agg_iters: int = 1
    warmup_iters: int = 1
    run_cycles: int = 1
    parallel_init: int = 0
    datacheck: int = 1
    op: int = 0  # index in OPS, -1 = all
    dtype: int = 7  # index in DTYPES (float), -1 = all
    root: int = 0
    blocking: int = 0
    stream_null: int = 0
    timeout: int = 0
    cudagraph: int = 0
    report_cputime: int = 0
    report_timestamps: int = 0
    output_file: str | None = None
    average: int = 1
    local_register: int = 0
    cta_policy: int = -1
    device_impl: int = 0
    device_cta_count: int = 16
    memory_report: int = 0
    unalign: int = 0


SHORT_OPTS = "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
LONG_OPTS = {
    "nthreads": "t",
    "ngpus": "g",
    "minbytes": "b",
    "maxbytes": "e",
    "stepbytes": "i",
    "stepfactor": "f",
    "iters": "n",
    "agg_iters": "m",
    "warmup_iters": "w",
    "run_cycles": "N",
    "parallel_init": "p",
    "check": "c",
    "op": "o",
    "datatype": "d",
    "root": "r",
    "blocking": "z",
    "stream_null": "y",
    "timeout": "T",
    "cudagraph": "G",
    "report_cputime": "C",
    "report_timestamps": "S",
    "output_file": "J",
    "average": "a",
    "local_register": "R",
    "cta_policy": "x",
    "device_implementation": "D",
    "device_cta_count": "V",
    "memory": "M",
    "memory_report": "M",
    "unalign": "u",
}
_INT_FIELDS = {
    "t": "nthreads",
    "g": "ngpus",
    "f": "stepfactor",
    "n": "iters",
    "m": "agg_iters",
    "w": "warmup_iters",
    "N": "run_cycles",
    "p": "parallel_init",
    "c": "datacheck",
    "r": "root",
    "z": "blocking",
    "y": "stream_null",
    "T": "timeout",
    "G": "cudagraph",
    "C": "report_cputime",
    "S": "report_timestamps",
    "a": "average",
    "R": "local_register",
    "x": "cta_policy",
    "D": "device_impl",
    "V": "device_cta_count",
    "M": "memory_report",
    "u": "unalign",
}
_SIZE_FIELDS = {
    "b": ("minbytes", "minbytes"),
    "e": ("maxbytes", "maxbytes"),
    "i": ("stepbytes", "stepBytes"),
}

USAGE = """USAGE: {prog} \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <gpus per thread>] \n\t\
[-b,--minbytes <min size in bytes>] \n\t[-e,--maxbytes <max size in bytes>] \n\t\
[-i,--stepbytes <increment size>] \n\t[-f,--stepfactor <increment factor>] \n\t\
[-n,--iters <iteration count>] \n\t[-m,--agg_iters <aggregated iteration count>] \n\t\
[-w,--warmup_iters <warmup iteration count>] \n\t\
[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n\t\
[-p,--parallel_init <0/1>] \n\t[-c,--check <check iteration count>] \n\t\
[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n\t[-d,--datatype <nccltype/all>] \n\t\
[-r,--root <root>] \n\t[-z,--blocking <0/1>] \n\t[-y,--stream_null <0/1>] \n\t\
[-T,--timeout <time in seconds>] \n\t[-G,--cudagraph <num graph launches>] \n\t\
[-C,--report_cputime <0/1>] \n\t\
[-S,--report_timestamps <0/1> report timestamps (default 0)] \n\t\
[-J,--output_file <file> write output to filepath, if accessible. Infer type from suffix \
(only json supported presently.)] \n\t\
[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n\t\
[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration on \
send/recv buffers (default: disable (0))] \n\t\
[-x,--cta_policy <0/1/2> set CTA policy (NCCL_CTA_POLICY_DEFAULT (0), \
NCCL_CTA_POLICY_EFFICIENCY (1), NCCL_CTA_POLICY_ZERO (2)) (default: do not set)] \n\t\
[-D,--device_implementation <implementation number> enable device implementation \
(default: 0, use NCCL implementation; requires -R 2 if > 0)] \n\t\
[-V,--device_cta_count <number> set number of CTAs for device implementation \
(default: 16)] \n\t[-M,--memory_report <0/1> enable memory usage report (default: 0)] \n\t\
[-u,--unalign <index of first element>] \n\t[-h,--help]
"""


class Exit(Exception):
    """Leave with ``status`` after the messages were printed."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def c_strtol(text: str) -> int:
    """``strtol(text, NULL, 0)``: leading blanks, sign, 0x/0 prefixes; 0 when no digits."""
    match = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if not match:
        return 0
    digits = match.group(2)
    if digits[:2].lower() == "0x":
        value = int(digits, 16)
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits, 8)
    else:
        value = int(digits)
    return -value if match.group(1) == "-" else value


def parse_size(text: str) -> float:
    """common.cu ``parsesize``: a number with an optional K/M/G (binary) suffix; -1 if bad."""
    match = re.match(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S?)", text)
    if not match:
        return -1.0
    units = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}.get(match.group(2).lower())
    if units is None:
        return -1.0
    return float(match.group(1)) * units


def size_sweep(minbytes: int, maxbytes: int, stepfactor: int, stepbytes: int) -> Iterator[int]:
    """The sizes nccl-tests measures: times stepfactor when > 1, else plus stepbytes."""
    size = minbytes
    while size <= maxbytes:
        yield size
        nxt = size * stepfactor if stepfactor > 1 else size + stepbytes
        if nxt <= size:  # 0 x factor or +0 bytes: the real binary would loop forever
            return
        size = nxt


def warmup_sweep(minbytes: int, maxbytes: int) -> Iterator[int]:
    """Warm-up visits every size with a factor of 2 (TimeTest)."""
    return size_sweep(minbytes, maxbytes, 2, 0)


def _lookup(names: list[str], text: str, kind: str, default: str) -> int:
    if text in names:
        return names.index(text)
    if text == "all":
        return -1
    print(f"invalid {kind} {text}, defaulting to {default} .. ")
    return names.index(default)


def _glibc_error(prog: str, err: getopt.GetoptError) -> str:
    """What glibc's getopt_long prints on stderr for the error Python's getopt found."""
    opt = err.opt
    if len(opt) == 1:
        if "requires argument" in err.msg:
            return f"{prog}: option requires an argument -- '{opt}'"
        return f"{prog}: invalid option -- '{opt}'"
    if "requires argument" in err.msg:
        return f"{prog}: option '--{opt}' requires an argument"
    if "not a unique prefix" in err.msg:
        return f"{prog}: option '--{opt}' is ambiguous"
    if "must not have an argument" in err.msg:
        return f"{prog}: option '--{opt}' doesn't allow an argument"
    return f"{prog}: unrecognized option '--{opt}'"


def parse_args(prog: str, argv: list[str]) -> Options:
    """Options as common.cu's getopt_long loop reads them; raises Exit like its returns."""
    longs = [f"{name}=" for name in LONG_OPTS] + ["help"]
    try:
        pairs, _ = getopt.gnu_getopt(argv, SHORT_OPTS, longs)
    except getopt.GetoptError as err:
        sys.stderr.write(_glibc_error(prog, err) + "\n")
        sys.stdout.write("invalid option '?'\n" + USAGE.format(prog=prog))
        raise Exit(0) from None  # the real binary returns 0 here too
    opts = Options()
    for flag, value in pairs:
        key = LONG_OPTS.get(flag[2:], "h") if flag.startswith("--") else flag[1:]
        if key == "h":
            sys.stdout.write(USAGE.format(prog=prog))
            raise Exit(0)
        if key in _SIZE_FIELDS:
            attr, label = _SIZE_FIELDS[key]
            parsed = parse_size(value)
            if parsed < 0:
                sys.stderr.write(f"invalid size specified for '{label}'\n")
                raise Exit(255)
            setattr(opts, attr, int(parsed))
        elif key == "o":
            opts.op = _lookup(list(OPS), value, "op", SUM_NAME)
        elif key == "d":
            opts.dtype = _lookup([t.name for t in DTYPES], value, "type", FLOAT_NAME)
        elif key == "J":
            opts.output_file = value
        else:
            setattr(opts, _INT_FIELDS[key], c_strtol(value))
    return _check_args(opts)


def _check_args(opts: Options) -> Options:
    if opts.minbytes > opts.maxbytes:
        sys.stderr.write(
            f"invalid sizes for 'minbytes' and 'maxbytes': {opts.minbytes} > {opts.maxbytes}\n"
        )
        raise Exit(255)
    if opts.device_impl > 0 and opts.local_register != 2:
        sys.stderr.write(
            "device implementation (-D > 0) requires enabling symmetric memory "
            "registration (-R 2)\n"
        )
        raise Exit(255)
    if opts.device_cta_count <= 0 or opts.device_cta_count > 128:
        sys.stderr.write(
            f"device_cta_count (-V) must be positive and less than 128, got "
            f"{opts.device_cta_count}. Using default value 16.\n"
        )
        opts.device_cta_count = 16
    if opts.stepfactor <= 1 and opts.stepbytes <= 0 and opts.minbytes < opts.maxbytes:
        sys.stderr.write(
            f"{STANDIN}: stepbytes 0 with stepfactor {opts.stepfactor} would "
            "repeat the first size forever; give -i or -f\n"
        )
        raise Exit(255)
    return opts


# ------------------------------------------------------------ formatting
def float_str(value: float, width: int) -> str:
    """util.cu ``getFloatStr``: 2 decimals while they fit, then 1, 0, then exponent."""
    if not math.isfinite(value):
        return f"{value:>{width}}"
    power, val = 0, 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def c_g(value: float) -> str:
    """printf ``%g``."""
    return "%g" % value  # noqa: UP031 (C's %g, which str.format's g matches only mostly)


def header_lines(
    prog: str, opts: Options, transport: str, algorithms: str = "ring algorithms (as NCCL)"
) -> list[str]:
    """writeDeviceReport's lines before the device list (rank 0 prints them)."""
    step = f"{opts.stepfactor}(factor)" if opts.stepfactor > 1 else f"{opts.stepbytes}(bytes)"
    lines = [
        f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers=0 nccl-library=0",
        f"# Collective test starting: {prog}",
        f"# nThread {opts.nthreads} nGpus {opts.ngpus} minBytes {opts.minbytes} maxBytes "
        f"{opts.maxbytes} step: {step} warmup iters: {opts.warmup_iters} iters: {opts.iters} "
        f"agg iters: {opts.agg_iters} validation: {opts.datacheck} graph: {opts.cudagraph} "
        f"unalign: {opts.unalign}",
        f"# {STANDIN}: no GPU and no NCCL here; the collective runs with Open MPI's "
        f"{algorithms} over TCP on {transport}",
    ]
    if opts.blocking == 1:
        lines.append("# Blocking Enabled: wait for completion and barrier after each collective ")
    if opts.blocking > 1:
        lines.append("# Blocking Enabled: wait for completion after each collective (no barrier) ")
    if opts.parallel_init:
        lines.append("# Parallel Init Enabled: threads call into NcclInitRank concurrently ")
    return [*lines, "#", "# Using devices"]


def device_line(
    rank: int, pid: int, host: str, dev: int, *, pci: tuple[int, int, int], name: str
) -> str:
    """``#  Rank  0 Group  0 Pid 1668270 on  spark-101 device  0 [000f:01:00] NVIDIA GB10``."""
    return (
        f"#  Rank {rank:2d} Group {0:2d} Pid {pid:6d} on {host:>10s} device {dev:2d} "
        f"[{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}] {name}"
    )


def result_header(report_cputime: int, report_timestamps: int) -> list[str]:
    """writeResultHeader: the three column heading lines after a lone ``#``."""
    time_str = "cputime" if report_cputime else "time"
    pad, label, fmt = (19, "timestamp", "%Y-%m-%d %H:%M:%S") if report_timestamps else (0, "", "")
    blank = ""
    first = (
        f"# {blank:>10s}  {blank:>12s}  {blank:>8s}  {blank:>6s}  {blank:>6s}           "
        "out-of-place                       in-place          "
    )
    cols = (
        "size",
        "count",
        "type",
        "redop",
        "root",
        time_str,
        "algbw",
        "busbw",
        "#wrong",
        time_str,
        "algbw",
        "busbw",
        "#wrong",
    )
    units = (
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
    )

    def row(v: tuple[str, ...], last: str) -> str:
        text = (
            f"# {v[0]:>10s}  {v[1]:>12s}  {v[2]:>8s}  {v[3]:>6s}  {v[4]:>6s}  {v[5]:>7s}  "
            f"{v[6]:>6s}  {v[7]:>6s}  {v[8]:>6s}  {v[9]:>7s}  {v[10]:>6s}  {v[11]:>6s}  "
            f"{v[12]:>6s} "
        )
        return text + (f"{last:>{pad}s}" if pad else "")

    return ["#", first, row(cols, label), row(units, fmt)]


def line_preamble(nbytes: int, count: int, type_name: str, op_name: str, root: int) -> str:
    """writeBenchmarkLinePreamble."""
    return f"{nbytes:12d}  {count:12d}  {type_name:>8s}  {op_name:>6s}  {root:6d}"


def line_body(usec: float, algbw: float, busbw: float, report_errors: bool, wrong: int) -> str:
    """writeBenchmarkLineBody (one of out-of-place / in-place)."""
    body = f"  {float_str(usec, 7):>7s}  {float_str(algbw, 6):>6s}  {float_str(busbw, 6):>6s}"
    return body + (f"  {c_g(float(wrong)):>6s}" if report_errors else "    N/A")


def footer_lines(prog: str, oob_errors: int, avg_bw: float, check_bw: float) -> list[str]:
    """writeResultFooter + finalizeFooter."""
    verdict = "" if check_bw == -1 else ("FAILED" if avg_bw < check_bw * 0.9 else "OK")
    return [
        f"# {'Out of bounds values':<20s} : {oob_errors} {'FAILED' if oob_errors else 'OK'}",
        f"# {'Avg bus bandwidth':<20s} : {c_g(avg_bw)} {verdict}",
        "#",
        f"# Collective test concluded: {prog}",
        "#",
    ]


def mem_string(amount: float) -> str:
    """util.cu getMemString."""
    postfix = " B"
    for limit, name in ((GB, " GB"), (1024**2, " MB"), (1024, " KB")):
        if abs(amount) >= limit:
            amount, postfix = amount / limit, name
            break
    precision = 2 if abs(amount) < 10 else (1 if abs(amount) < 100 else 0)
    return f"{amount:.{precision}f}{postfix}"


# ----------------------------------------------------------- node state
def read_hardware() -> dict[str, Any]:
    """The lab node's hardware.json ({} when missing: then there is no GPU)."""
    try:
        data = json.loads(HW_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def gpu_info(hw: dict[str, Any]) -> tuple[int, str, tuple[int, int, int]]:
    """(GPU count, name, (pci domain, bus, device)) from hardware.json."""
    if not hw.get("gpu_present", False):
        return 0, "", (0, 0, 0)
    match = re.match(
        r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)",
        str(hw.get("pci_bus_id", "0000000F:01:00.0")),
    )
    pci = tuple(int(g, 16) for g in match.groups()) if match else (0xF, 1, 0)
    return 1, str(hw.get("gpu_name", "NVIDIA GB10")), (pci[0], pci[1], pci[2])


def ipv4_by_interface() -> dict[str, list[ipaddress.IPv4Interface]]:
    """ifname -> IPv4 addresses, from ``ip -j -4 addr show`` (or $SPARKCTL_LAB_IP_JSON)."""
    ip_json = os.environ.get("SPARKCTL_LAB_IP_JSON")
    try:
        if ip_json:
            text = Path(ip_json).read_text(encoding="utf-8")
        else:
            text = subprocess.run(
                ["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True
            ).stdout
        entries = json.loads(text or "[]")
    except (OSError, ValueError, subprocess.CalledProcessError):
        return {}
    found: dict[str, list[ipaddress.IPv4Interface]] = {}
    for entry in entries if isinstance(entries, list) else []:
        for addr in entry.get("addr_info", []) if isinstance(entry, dict) else []:
            if addr.get("family", "inet") == "inet" and addr.get("local"):
                found.setdefault(str(entry.get("ifname")), []).append(
                    ipaddress.IPv4Interface(f"{addr['local']}/{addr.get('prefixlen', 32)}")
                )
    return found


def transport_problems(
    env: dict[str, str], addrs: dict[str, list[ipaddress.IPv4Interface]]
) -> tuple[list[str], str]:
    """(problems, description) of the TCP transport the MPI environment selects."""
    problems: list[str] = []
    include = env.get("OMPI_MCA_btl_tcp_if_include", "").strip()
    if not include:
        problems.append(
            "OMPI_MCA_btl_tcp_if_include is not set, so Open MPI would carry the "
            "collective over any interface, the management network included; "
            "export it from /etc/sparkctl/nccl.env (mpirun -x "
            "OMPI_MCA_btl_tcp_if_include) or pass --mca btl_tcp_if_include "
            "<fabric netdev>"
        )
    if env.get("OMPI_MCA_btl_tcp_if_exclude"):
        problems.append(
            "OMPI_MCA_btl_tcp_if_exclude is set too; Open MPI takes one of "
            "btl_tcp_if_include / btl_tcp_if_exclude"
        )
    btl = env.get("OMPI_MCA_btl", "")
    if btl and not btl.startswith("^") and "tcp" not in btl.split(","):
        problems.append(f"OMPI_MCA_btl={btl} leaves out tcp, the only transport between lab nodes")
    for item in filter(None, (part.strip() for part in include.split(","))):
        if "/" in item:
            try:
                net = ipaddress.IPv4Network(item, strict=False)
            except ValueError:
                problems.append(
                    f"btl_tcp_if_include entry {item!r} is not an interface name or IPv4 subnet"
                )
                continue
            if not any(a.ip in net for lst in addrs.values() for a in lst):
                problems.append(f"no address of this node lies in {item} (btl_tcp_if_include)")
        elif not addrs.get(item):
            problems.append(
                f"interface {item} (btl_tcp_if_include) has no IPv4 address on "
                "this node: the fabric is not configured (run the roce_fabric "
                "role) or the name is wrong"
            )
    described = ", ".join(
        f"{name} ({', '.join(str(a.ip) for a in addrs.get(name, []))})"
        for name in include.split(",")
        if name.strip()
    )
    return problems + _socket_ifname_problems(env, addrs), described or "no interface"


def _socket_ifname_problems(
    env: dict[str, str], addrs: dict[str, list[ipaddress.IPv4Interface]]
) -> list[str]:
    """NCCL's bootstrap fails without an addressed interface matching NCCL_SOCKET_IFNAME."""
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if not spec or spec.startswith("^"):
        return []
    exact = spec.startswith("=")
    names = [n.strip() for n in spec.lstrip("=").split(",") if n.strip()]
    ok = any(
        (name == want) if exact else name.startswith(want)
        for name in addrs
        for want in names
        if addrs[name]
    )
    return (
        []
        if ok
        else [
            f"NCCL_SOCKET_IFNAME={spec} matches no interface with an IPv4 "
            "address (NCCL: 'Bootstrap : no socket interface found')"
        ]
    )


def host_memory() -> int:
    """Bytes this rank may use: MemAvailable (the lab's 'unified memory')."""
    try:
        text = MEMINFO.read_text(encoding="utf-8")
    except OSError:
        return 8 * GB
    match = re.search(r"^MemAvailable:\s+(\d+)\s+kB", text, re.M)
    return int(match.group(1)) * 1024 if match else 8 * GB


def memory_limited_max(max_mem: int, datacheck: int) -> int:
    """common.cu run(): reserve 1 GiB per 16 GiB (max 4), 1 GiB more, / 3 buffers (2 if no -c)."""
    reserve = min(-(-max_mem // (16 * GB)) * GB, 4 * GB)
    return max(0, (max_mem - reserve - GB) // (3 if datacheck else 2))


# --------------------------------------------------------------- data
def period_of(op: str) -> int:
    """Values repeat with this period: 1..7 (1..2 for prod, so products stay exact)."""
    return 2 if op == "prod" else 7


def value_at(index: int, rank: int, rep: int, op: str) -> int:
    """Element ``index`` of rank ``rank``'s input in repetition ``rep``."""
    return (index + 3 * rank + rep) % period_of(op) + 1


def tiled(typecode: str, period: list[int], start: int, count: int) -> array[Any]:
    """``count`` elements of the periodic sequence ``period``, beginning at index ``start``."""
    if count <= 0:
        return array(typecode)
    p = len(period)
    shift = start % p
    block = array(typecode, period[shift:] + period[:shift])
    return (block * (count // p + 1))[:count]


def input_values(dt: DType, start: int, count: int, *, rank: int, rep: int, op: str) -> array[Any]:
    """A rank's input elements ``start .. start+count``."""
    p = period_of(op)
    return tiled(dt.typecode, [value_at(j, rank, rep, op) for j in range(p)], start, count)


def expected_values(
    dt: DType, start: int, count: int, *, nranks: int, rep: int, op: str
) -> array[Any]:
    """Reduction over all ranks of elements ``start .. start+count``."""
    p = period_of(op)
    fold = REDUCE[op]
    period = [fold([value_at(j, r, rep, op) for r in range(nranks)]) for j in range(p)]
    return tiled(dt.typecode, period, start, count)


def count_wrong(result: memoryview, expected: array[Any]) -> int:
    """Elements of ``result`` (raw bytes) that differ from ``expected``."""
    want = memoryview(expected).cast("B")
    if result.nbytes != want.nbytes:
        return max(result.nbytes, want.nbytes) // max(expected.itemsize, 1)
    if result.tobytes() == want.tobytes():
        return 0
    size, wrong, chunk = expected.itemsize, 0, 1 << 16
    for off in range(0, want.nbytes, chunk * size):
        got_chunk, want_chunk = result[off : off + chunk * size], want[off : off + chunk * size]
        if got_chunk.tobytes() != want_chunk.tobytes():
            got_b, want_b = got_chunk.tobytes(), want_chunk.tobytes()
            wrong += sum(
                got_b[i : i + size] != want_b[i : i + size] for i in range(0, len(want_b), size)
            )
    return wrong


# --------------------------------------------------------------- running
@dataclass
class Run:
    """One launch: MPI, the options and the buffers shared by every measurement."""

    mpi: Any
    comm: Any
    prog: str
    coll: Coll
    opts: Options
    sendbuf: bytearray
    recvbuf: bytearray
    rank: int = 0
    nranks: int = 1
    host: str = ""
    deadline: float = 0.0
    rep: int = 0
    oob_errors: int = 0
    bw_sum: float = 0.0
    bw_count: int = 0
    json_results: list[dict[str, Any]] = field(default_factory=list)

    def out(self, text: str) -> None:
        if self.rank == 0:
            sys.stdout.write(text + "\n")

    # ---- one collective call
    def collective(self, dt: DType, op: str, param: int, in_place: bool) -> None:
        mpi, size = self.mpi, dt.size
        mtype = getattr(mpi, dt.mpi)
        send, recv = memoryview(self.sendbuf), memoryview(self.recvbuf)
        self.deadline = time.monotonic() + self.opts.timeout if self.opts.timeout > 0 else 0.0
        if self.coll.program == "all_reduce_perf":
            nbytes = param * size
            if in_place:
                self.comm.Allreduce(mpi.IN_PLACE, [recv[:nbytes], mtype], getattr(mpi, MPI_OPS[op]))
            else:
                self.comm.Allreduce(
                    [send[:nbytes], mtype], [recv[:nbytes], mtype], getattr(mpi, MPI_OPS[op])
                )
        elif self.coll.program == "all_gather_perf":
            per, total = param * size, param * size * self.nranks
            if in_place:
                self.comm.Allgather(mpi.IN_PLACE, [recv[:total], mtype])
            else:
                self.comm.Allgather([send[:per], mtype], [recv[:total], mtype])
        else:
            per, total = param * size, param * size * self.nranks
            counts = [param] * self.nranks
            if in_place:
                self.comm.Reduce_scatter(
                    mpi.IN_PLACE, [recv[:total], mtype], counts, getattr(mpi, MPI_OPS[op])
                )
            else:
                self.comm.Reduce_scatter(
                    [send[:total], mtype], [recv[:per], mtype], counts, getattr(mpi, MPI_OPS[op])
                )
        self.deadline = 0.0
        if self.opts.blocking == 1:
            self.comm.Barrier()

    # ---- data
    def init_data(self, dt: DType, op: str, param: int, in_place: bool) -> array[Any]:
        """Fill this rank's input; return the result expected at the start of recvbuf."""
        n, rank, size, rep = self.nranks, self.rank, dt.size, self.rep
        prog = self.coll.program
        if prog == "all_reduce_perf":
            data = input_values(dt, 0, param, rank=rank, rep=rep, op=op)
            target = self.recvbuf if in_place else self.sendbuf
            self.recvbuf[: param * size] = bytes(param * size)
            target[: param * size] = data.tobytes()
            return expected_values(dt, 0, param, nranks=n, rep=rep, op=op)
        if prog == "all_gather_perf":
            self.recvbuf[: param * size * n] = bytes(param * size * n)
            chunk = input_values(dt, 0, param, rank=rank, rep=rep, op=op).tobytes()
            if in_place:
                self.recvbuf[rank * param * size : (rank + 1) * param * size] = chunk
            else:
                self.sendbuf[: param * size] = chunk
            expected = array(dt.typecode)
            for r in range(n):
                expected.extend(input_values(dt, 0, param, rank=r, rep=rep, op=op))
            return expected
        block = input_values(dt, 0, param * n, rank=rank, rep=rep, op=op).tobytes()
        (self.recvbuf if in_place else self.sendbuf)[: param * size * n] = block
        if not in_place:
            self.recvbuf[: param * size] = bytes(param * size)
        return expected_values(dt, rank * param, param, nranks=n, rep=rep, op=op)

    def check(self, dt: DType, op: str, param: int, in_place: bool) -> int:
        """nccl-tests' validation: fresh data, one collective, count wrong elements."""
        wrong = 0
        for _ in range(self.opts.datacheck):
            expected = self.init_data(dt, op, param, in_place)
            self.collective(dt, op, param, in_place)
            result = memoryview(self.recvbuf)[: len(expected) * dt.size]
            local = count_wrong(result, expected)
            if local:
                self.oob_errors += 1
            wrong = int(self.comm.allreduce(local, op=self.mpi.SUM))
            if wrong:
                break
        return wrong

    # ---- timing
    def bench(self, dt: DType, op: str, param: int, in_place: bool) -> tuple[str, dict[str, Any]]:
        """BenchTime: sync, timed loop, averaged time, bandwidth, then validation."""
        opts = self.opts
        if opts.datacheck:
            self.rep, saved = 99, self.rep
            self.init_data(dt, op, param, in_place)
            self.rep = saved
        self.collective(dt, op, param, in_place)
        self.comm.Barrier()
        launches = max(1, opts.cudagraph)
        calls = opts.iters * opts.agg_iters * launches
        start = time.perf_counter()
        for _ in range(calls):
            self.collective(dt, op, param, in_place)
        elapsed = time.perf_counter() - start
        cpu_sec = elapsed / max(calls, 1)
        sec = self.average_time(cpu_sec)
        moved = self.coll.alg_bytes(param, dt.size, self.nranks)
        algbw = moved / 1.0e9 / sec if sec > 0 else 0.0
        busbw = algbw * self.coll.bus_factor(self.nranks)
        self.comm.Barrier()
        self.rep += 1
        wrong = self.check(dt, op, param, in_place) if opts.datacheck else 0
        usec = (cpu_sec if opts.report_cputime else sec) * 1.0e6
        self.bw_sum += busbw
        self.bw_count += 1
        record = {
            ("cpu_time" if opts.report_cputime else "time"): usec,
            "alg_bw": algbw,
            "bus_bw": busbw,
            "nwrong": float(wrong) if opts.datacheck else None,
        }
        return line_body(usec, algbw, busbw, bool(opts.datacheck), wrong), record

    def average_time(self, sec: float) -> float:
        """-a: 0 rank 0's time, 1 mean, 2 min, 3 max over the ranks."""
        mode = self.opts.average
        if mode == 0:
            return float(self.comm.bcast(sec, root=0))
        mpi_op = {2: self.mpi.MIN, 3: self.mpi.MAX}.get(mode, self.mpi.SUM)
        total = float(self.comm.allreduce(sec, op=mpi_op))
        return total / self.nranks if mode not in (2, 3) else total

    def counts_for(self, size: int, dt: DType) -> tuple[int, int]:
        """(size column, param count) for a requested size in bytes (setupArgs)."""
        send, recv, param = self.coll.counts(size // dt.size, self.nranks)
        return max(send, recv) * dt.size, param

    def time_test(self, dt: DType, op: str, op_label: str) -> None:
        """TimeTest: warm-up over all sizes, then each size out-of-place and in-place."""
        opts = self.opts
        self.comm.Barrier()
        for size in warmup_sweep(opts.minbytes, opts.maxbytes):
            _, param = self.counts_for(size, dt)
            for _ in range(opts.warmup_iters):
                self.collective(dt, op, param, False)
        cycle = 0
        while opts.run_cycles == 0 or cycle < opts.run_cycles:
            cycle += 1
            for size in size_sweep(opts.minbytes, opts.maxbytes, opts.stepfactor, opts.stepbytes):
                nbytes, param = self.counts_for(size, dt)
                line = line_preamble(nbytes, param, dt.name, op_label, -1)
                oop_text, oop = self.bench(dt, op, param, False)
                ip_text, inp = self.bench(dt, op, param, True)
                stamp = (
                    f"{time.strftime('%Y-%m-%d %H:%M:%S'):>21s}" if opts.report_timestamps else ""
                )
                self.out(line + oop_text + ip_text + stamp)
                self.json_results.append(
                    {
                        "size": nbytes,
                        "count": param,
                        "type": dt.name,
                        "redop": op_label,
                        "root": f"{-1:6d}",
                        "out_of_place": oop,
                        "in_place": inp,
                        "actual_iterations": opts.iters,
                        "experiment_name": "",
                    }
                )


def plan(coll: Coll, opts: Options) -> tuple[list[tuple[DType, str, str]], list[str], str | None]:
    """(type, op, label) combinations to run, notes for skipped ones, error for a refused one."""
    types = list(DTYPES) if opts.dtype == -1 else [DTYPES[opts.dtype]]
    ops = list(OPS) if opts.op == -1 else [OPS[opts.op]]
    if not coll.reduces:  # all_gather: no reduction, the op is ignored and printed "none"
        return [(dt, SUM_NAME, "none") for dt in types], [], None
    runs, notes = [], []
    for dt in types:
        for op in ops:
            if dt.reducible and op in MPI_OPS:
                runs.append((dt, op, op))
                continue
            why = (
                f"MPI has no {op} reduction"
                if op not in MPI_OPS
                else f"MPI has no arithmetic on {dt.name}"
            )
            if opts.dtype != -1 and opts.op != -1:
                return (
                    [],
                    [],
                    (
                        f"{coll.program} -d {dt.name} -o {op}: {why}, so the "
                        f"{STANDIN} cannot run it (the real binary can)"
                    ),
                )
            notes.append(f"# {STANDIN}: skipping {dt.name} {op} ({why})")
    return runs, notes, None


# ------------------------------------------------------------------ main
def fail(host: str, message: str, status: int, detail: str = "") -> Exit:
    """Print a failure the way nccl-tests' TESTCHECK does, plus the stand-in's reason."""
    if detail:
        sys.stderr.write(f"{detail}\n")
    if message:
        sys.stdout.write(f"{message}\n")
    sys.stdout.write(f" .. {host} pid {os.getpid()}: Test failure nccl_tests_standin.py\n")
    sys.stdout.flush()
    return Exit(status)


def load_mpi(prog: str) -> Any:
    """mpi4py's MPI module without initialising MPI (the dynamic loader's step)."""
    try:
        import mpi4py  # type: ignore[import-not-found]  # noqa: PLC0415 (a failure is reported)

        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
        from mpi4py import MPI  # noqa: PLC0415
    except ImportError as exc:
        sys.stderr.write(
            f"{prog}: error while loading shared libraries: libmpi (mpi4py): {exc}\n"
            f"{prog} ({STANDIN}): the stand-in runs the collective with MPI "
            "(python3-mpi4py and Open MPI) and there is none here, so there are no figures "
            "to print; lab nodes have it (sparkctl lab image), launch it there with mpirun\n"
        )
        raise Exit(127) from exc
    return MPI


def watchdog(run: Run) -> None:
    """-T: like testStreamSynchronize, give up on a collective that takes too long."""
    while True:
        time.sleep(0.2)
        if run.deadline and time.monotonic() > run.deadline:
            sys.stdout.write(
                f"{run.host}: Test timeout ({run.opts.timeout}s) "
                f"nccl_tests_standin.py\n .. {run.host} pid {os.getpid()}: Test "
                "failure nccl_tests_standin.py\n"
            )
            sys.stdout.flush()
            os._exit(TEST_TIMEOUT)


def host_identity(comm: Any) -> tuple[str, int]:
    """(short hostname, local rank): ranks that share hostname and boot id share a node."""
    host = socket.gethostname().split(".")[0]
    try:
        boot = BOOT_ID.read_text(encoding="utf-8").strip()
    except OSError:
        boot = ""
    everyone = comm.allgather(host + boot)
    rank = comm.Get_rank()
    return host, sum(1 for other in everyone[:rank] if other == host + boot)


def device_report(run: Run, local_rank: int, transport: str, algorithms: str) -> None:
    """writeDeviceReport: header, then each rank's device line in rank order."""
    opts = run.opts
    for line in header_lines(run.prog, opts, transport, algorithms):
        run.out(line)
    ngpus, name, pci = gpu_info(read_hardware())
    first = int(os.environ.get("NCCL_TESTS_DEVICE", "-1") or "-1")
    lines = []
    for i in range(opts.nthreads * opts.ngpus):
        dev = (first if first != -1 else local_rank * opts.nthreads * opts.ngpus) + i
        if dev >= ngpus:
            sys.stdout.flush()
            sys.stderr.write(
                f"Invalid number of GPUs: {dev + 1} requested but only {ngpus} "
                "were found.\nPlease check the number of processes and GPUs per "
                "process.\n"
            )
            raise fail(run.host, "", TEST_NOT_IMPLEMENTED)
        lines.append(
            device_line(
                run.rank * opts.nthreads * opts.ngpus + i,
                os.getpid(),
                run.host,
                dev,
                pci=pci,
                name=name,
            )
        )
    gathered = run.comm.gather("\n".join(lines), root=0)
    info = run.comm.gather("\n".join(nccl_info_lines(run, local_rank)), root=0)
    if run.rank == 0:
        for block in gathered:
            sys.stdout.write(block + "\n")
        for block in info:
            if block:
                sys.stdout.write(block + "\n")


def nccl_info_lines(run: Run, local_rank: int) -> list[str]:
    """What NCCL prints of its network choice at NCCL_DEBUG=INFO (INIT and NET subsystems):
    a lab node has no RDMA device, so NCCL takes sockets, as the stand-in does.

    Format strings of NCCL v2.28.9-1 (NVIDIA/nccl): the prefix "%s:%d:%d [%d] NCCL INFO "
    (src/debug.cc: hostname, pid, tid, cudaDev); "NET/IB : No device found."
    (src/transport/net_ib.cc:826); "NET/Socket : Using%s" with " [%d]%s:%s" entries
    (src/transport/net_socket.cc:76); "Using network %s" (src/init.cc:428); "Channel %02d/%d
    : %d[%d] -> %d[%d] [send] via NET/%s/%d" (src/transport/net.cc:313)."""
    if os.environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    subsys = {s.strip().upper() for s in os.environ.get("NCCL_DEBUG_SUBSYS", "INIT").split(",")}
    if not subsys & {"INIT", "NET", "ALL"}:
        return []
    pid = os.getpid()
    prefix = f"{run.host}:{pid}:{pid} [{local_rank}] NCCL INFO "
    want = os.environ.get("NCCL_SOCKET_IFNAME", "").lstrip("=").split(",")[0]
    addrs = ipv4_by_interface()
    name = next((n for n in addrs if want and n.startswith(want) and addrs[n]), None)
    using = f" [0]{name}:{addrs[name][0].ip}<0>" if name else ""
    n = run.comm.Get_size()
    peer = (run.rank + 1) % n
    lines = ["NET/IB : No device found.", f"NET/Socket : Using{using}", "Using network Socket"]
    if n > 1:
        lines.append(
            f"Channel 00/0 : {run.rank}[{local_rank}] -> {peer}[0] [send] via NET/Socket/0"
        )
    return [prefix + line for line in lines]


def execute(run: Run, runs: list[tuple[DType, str, str]], notes: list[str]) -> int:
    """All measurements, the footer; returns the exit status."""
    opts = run.opts
    for line in result_header(opts.report_cputime, opts.report_timestamps):
        run.out(line)
    for note in notes:
        run.out(note)
    for dt, op, label in runs:
        run.time_test(dt, op, label)
    oob = int(run.comm.allreduce(run.oob_errors, op=run.mpi.SUM))
    avg = run.bw_sum / run.bw_count if run.bw_count else 0.0
    check_bw = float(os.environ.get("NCCL_TESTS_MIN_BW", "-1") or "-1")
    for line in footer_lines(run.prog, oob, avg, check_bw):
        run.out(line)
    if opts.memory_report:
        used = len(run.sendbuf) + len(run.recvbuf) * (2 if opts.datacheck else 1)
        run.out(
            f"# {'GPU memory usage':<20s} : Initialization {mem_string(0)} | User-Allocated "
            f"{mem_string(used)} | Collective {mem_string(0)} | Total  {mem_string(used)}"
        )
    write_json(run, oob, avg, check_bw)
    sys.stdout.flush()
    failed = oob or (check_bw != -1 and avg < check_bw * 0.9)
    return TEST_NUM_RESULTS if failed else TEST_SUCCESS


def open_json(run: Run) -> Path | None:
    """-J: the file the real binary would pick (name, name.0, name.1 ... if taken)."""
    if not run.opts.output_file or run.rank != 0:
        return None
    if not run.opts.output_file.lower().endswith(".json"):
        return None
    path, tries = Path(run.opts.output_file), 0
    while path.exists():
        path, tries = Path(f"{run.opts.output_file}.{tries}"), tries + 1
    try:
        path.touch(exist_ok=False)
    except OSError:
        run.out(f"# skipping json output; {path} not accessible")
        return None
    run.out(f"# Writing JSON output to {path}")
    return path


@dataclass
class JsonState:
    """Where -J writes and when the run started."""

    path: Path | None = None
    start: str = ""


JSON_STATE = JsonState()


def write_json(run: Run, oob: int, avg: float, check_bw: float) -> None:
    """The -J document (util.cu's keys, version 2)."""
    if JSON_STATE.path is None:
        return
    opts = run.opts
    step = (
        {"step_factor": opts.stepfactor} if opts.stepfactor > 1 else {"step_bytes": opts.stepbytes}
    )
    doc = {
        "version": 2,
        "start_time": JSON_STATE.start,
        "args": sys.argv,
        "env": [f"{k}={v}" for k, v in os.environ.items()],
        "nccl_version": 0,
        "config": {
            "nthreads": opts.nthreads,
            "ngpus": opts.ngpus,
            "minimum_bytes": opts.minbytes,
            "maximum_bytes": opts.maxbytes,
            **step,
            "warmup_iters": opts.warmup_iters,
            "iterations": opts.iters,
            "aggregated_iterations": opts.agg_iters,
            "validation": opts.datacheck,
            "graph": opts.cudagraph,
            "blocking_collectives": "true" if opts.blocking else "false",
            "parallel_init": "true" if opts.parallel_init else "false",
        },
        "results": run.json_results,
        "out_of_bounds": {"count": oob, "okay": "true" if oob == 0 else "false"},
        "average_bus_bandwidth": {
            "bandwidth": avg,
            "okay": "unchecked"
            if check_bw == -1
            else ("true" if avg >= check_bw * 0.9 else "false"),
        },
        "errors": [],
        "end_time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    JSON_STATE.path.write_text(json.dumps(doc) + "\n", encoding="utf-8")


def start(prog: str, opts: Options, mpi: Any) -> int:
    """MPI up, checks, device report, buffers, measurements (common.cu run())."""
    host = socket.gethostname().split(".")[0]
    problems, transport = transport_problems(dict(os.environ), ipv4_by_interface())
    if problems:
        raise fail(
            host,
            f"{host}: Test NCCL failure nccl_tests_standin.py 'invalid usage "
            f"(run with NCCL_DEBUG=WARN for details)'",
            TEST_NCCL_ERROR,
            f"{prog} ({STANDIN}): refusing to run: " + "; ".join(problems),
        )
    coll = COLLS[prog]
    runs, notes, refused = plan(coll, opts)
    if refused:
        raise fail(
            host,
            f"{host}: Test NCCL failure nccl_tests_standin.py 'invalid usage'",
            TEST_INVALID_USAGE,
            refused,
        )
    if opts.device_impl > 0:
        raise fail(
            host,
            "",
            TEST_NOT_IMPLEMENTED,
            f"Device implementation {opts.device_impl} is not supported by this test "
            f"({STANDIN}: no GPU)",
        )
    extra, algorithms = mpi_environment(dict(os.environ))
    os.environ.update(extra)  # read by Open MPI in MPI_Init
    mpi.Init_thread(mpi.THREAD_FUNNELED)
    comm = mpi.COMM_WORLD
    JSON_STATE.start = time.strftime("%Y-%m-%d %H:%M:%S")
    run = Run(
        mpi,
        comm,
        prog,
        coll,
        opts,
        bytearray(),
        bytearray(),
        rank=comm.Get_rank(),
        nranks=comm.Get_size(),
    )
    run.host, local_rank = host_identity(comm)
    JSON_STATE.path = open_json(run)
    if opts.timeout > 0:
        threading.Thread(target=watchdog, args=(run,), daemon=True).start()
    device_report(run, local_rank, transport, algorithms)
    allocate(run, local_rank)
    status = execute(run, runs, notes)
    comm.Barrier()
    mpi.Finalize()
    run.out("")  # writeErrors: an empty line when NCCL reported no error
    if status != TEST_SUCCESS:  # main()'s TESTCHECK(result), on every rank
        sys.stdout.write(f" .. {run.host} pid {os.getpid()}: Test failure nccl_tests_standin.py\n")
    return status


def allocate(run: Run, local_rank: int) -> None:
    """Cap maxBytes by memory (shared by the ranks on one kernel), then allocate.

    The real binary caps by the GPU's memory; a lab node's "GPU memory" is the
    host's RAM, which every rank on the host shares, so the budget is
    MemAvailable divided by the most ranks any host carries.
    """
    opts = run.opts
    per_node = int(run.comm.allreduce(local_rank, op=run.mpi.MAX)) + 1
    budget = int(run.comm.allreduce(host_memory() // per_node, op=run.mpi.MIN))
    limit = memory_limited_max(budget, opts.datacheck)
    if opts.maxbytes > limit:
        opts.maxbytes = limit
        opts.minbytes = min(opts.minbytes, limit)
        run.out(f"#\n# Reducing maxBytes to {limit} due to memory limitation")
    # Every collective's send and receive buffers fit in maxBytes (getCollByteCount).
    run.sendbuf = bytearray(opts.maxbytes)
    run.recvbuf = bytearray(opts.maxbytes)


def main(argv: list[str]) -> int:
    prog = Path(argv[0]).name
    if prog not in COLLS:
        sys.stderr.write(
            f"{prog} ({STANDIN}): install me as one of {', '.join(COLLS)}; the "
            "program name picks the collective\n"
        )
        return TEST_INVALID_USAGE
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    try:
        mpi = load_mpi(prog)
        opts = parse_args(prog, argv[1:])
        return start(prog, opts, mpi)
    except Exit as done:
        return done.status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
