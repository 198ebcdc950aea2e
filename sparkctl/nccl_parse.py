"""Parse nccl-tests output (``all_reduce_perf`` and friends) into typed rows.

One parser for every layout in use, read from the column header rather than
assumed (tests/fixtures/nccl holds a real log of each, SOURCES.md says where
it came from):

- the oldest nccl-tests print header and summary lines without a ``#``;
- nccl-tests before the ``root``/``redop`` columns were common to all tests
  (2019 and older) print only the columns a collective has: ``size count type``
  then ``redop`` (reductions) and/or ``root`` (rooted collectives), and a float
  ``error`` column (the maximum error) where later versions count ``#wrong``;
- later 2.x: ``size count type redop root time algbw busbw #wrong`` twice,
  ``N/A`` where a result is not checked, ``#wrong`` printed with ``%g`` (so a
  large count reads ``2.68435e+08``); 2.17+ adds ``# nccl-tests version``;
- ``-C 1`` names the time columns ``cputime``; the timestamp option adds a
  trailing ``timestamp`` column (date and time); the newest versions can add
  ``#bitdiff`` and per-iteration columns to each half (kept in ``Half.extra``);
- lines may carry an MPI ``--tag-output`` prefix (``[1,0]<stdout>:``) or an
  ``srun --label`` one (``0: ``), and be indented.

A log that has no column header, no rows, a row that does not fit the header,
rows cut out (``...``), a second run, no ``Avg bus bandwidth`` line (the run
was cut short), or an average the rows do not add up to is refused with a
:class:`SparkctlError` naming the line: a partial log must never become a
number. So is a row nccl-tests cannot have printed: a negative or fractional
size, a negative count, a time or bandwidth that is negative, ``nan`` or
``inf``, or a size and type whose element count contradicts an earlier row
(``-N`` cycles repeat rows, with the same counts). ``sparkctl report nccl
LOGFILE`` and ``validate`` use this module.

Besides the table, the parse keeps what says which NCCL ran on which GPUs:
the NCCL library version (``nccl-library=22809`` on the version line of
2.17+, NCCL's own ``NCCL version 2.28.9+cuda13.0`` INFO line with
``NCCL_DEBUG=INFO``) and one :class:`Rank` per ``#  Rank  0 Group  0 Pid ...
on HOST device  0 [BUS] NAME`` line (older layouts have no ``Group``), and the
network NCCL's INFO lines show (``Using network IB`` / ``via NET/Socket``,
:func:`nccl_transport`), which the gate needs where RDMA is expected.

NCCL's own log lines are read here, for nccl-tests logs and for SGLang's ranks alike
(sparkctl/serve/startup/reader.py asks :func:`transport_of` and :func:`nccl_version`
for every journal line): which network a communicator uses (:func:`nccl_transport`,
:func:`transport_signature`) and which NCCL the process loaded (:func:`nccl_version`).
Their patterns are data with their sources, in nccl_parse.yml beside this file, read and
checked as the start-up catalogue is (sparkctl/serve/startup/catalogue.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.serve.startup import catalogue
from sparkctl.serve.startup.catalogue import Pattern, Rule, Signature

# ------------------------------------------------------------ NCCL's own lines
#: nccl_parse.yml's shape (the pattern and rule parts are the start-up catalogue's).
DATA_SCHEMA: Mapping[str, Any] = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "transport": {
                "type": "object",
                "properties": {
                    "ib": {"$ref": "#/$defs/patterns"},
                    "socket": {"$ref": "#/$defs/patterns"},
                },
                "required": ["ib", "socket"],
                "additionalProperties": False,
            },
            "socket_transport": {
                "allOf": [{"$ref": "#/$defs/rule"}, {"not": {"required": ["patterns"]}}]
            },
            "versions": {"$ref": "#/$defs/patterns"},
        },
        "required": ["transport", "socket_transport", "versions"],
        "additionalProperties": False,
    }
)
_DATA = catalogue.read_data("sparkctl", "nccl_parse.yml", DATA_SCHEMA)

#: NCCL's own lines that say which network a communicator uses (NCCL_DEBUG=INFO).
TRANSPORT_PATTERNS: Mapping[str, tuple[Pattern, ...]] = MappingProxyType(
    {kind: tuple(map(catalogue.pattern, ps)) for kind, ps in _DATA["transport"].items()}
)
#: Lines that name the NCCL the process loaded; group 1 is the version as printed.
NCCL_VERSION_PATTERNS: tuple[Pattern, ...] = tuple(map(catalogue.pattern, _DATA["versions"]))
#: ``nccl_socket_transport``: sockets where RDMA is expected.
SOCKET_TRANSPORT_RULE: Rule = catalogue.rule(_DATA["socket_transport"])


def transport_of(line: str) -> str | None:
    """``'ib'`` or ``'socket'`` if the line is one of NCCL's that name the network, else
    None."""
    for kind, patterns in TRANSPORT_PATTERNS.items():
        if any(p.search(line) for p in patterns):
            return kind
    return None


def nccl_version(line: str) -> str | None:
    """The NCCL version a log line says the process loaded ("2.28.3+cuda13.0"), or None."""
    for pattern in NCCL_VERSION_PATTERNS:
        m = pattern.compiled.search(line)
        if m is not None:
            return m.group(1)
    return None


def nccl_transport(lines: Iterable[str]) -> str | None:
    """The network NCCL uses, from its INFO lines: ``'socket'`` if any line shows the Socket
    transport (or no IB device), else ``'ib'`` if one shows IB, else None (NCCL_DEBUG below
    INFO, or a line of neither kind). One socket communicator is enough to call it sockets:
    where RDMA is expected, it is the one that makes the group slow."""
    seen: set[str] = set()
    for line in lines:
        kind = transport_of(line)
        if kind:
            seen.add(kind)
    if "socket" in seen:
        return "socket"
    return "ib" if "ib" in seen else None


def transport_signature(
    transport: str | None, *, expected: str = "ib", rank: int | None = None, line: str = ""
) -> Signature | None:
    """``nccl_socket_transport`` when NCCL uses sockets where ``expected`` is ``'ib'``."""
    if expected == "ib" and transport == "socket":
        return SOCKET_TRANSPORT_RULE.signature(line, rank)
    return None


# ------------------------------------------------------------ nccl-tests' table
_LEAD = ("size", "count", "type")
_TIMES = ("time", "cputime")
_CHECKS = ("#wrong", "error")
_FAILURE = re.compile(
    r"Test NCCL failure|Test CUDA failure|Test failure|Test timeout|"
    r"NCCL WARN|Assertion .* failed|MPI_ABORT|mpirun noticed"
)
# mpirun --tag-output ("[1,0]<stdout>:") and srun --label ("0: ") in front of each line.
_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s))")
_INT = re.compile(r"\d+")
# A first word that is a number but not a byte count: a row, garbled (not chatter).
_NUMERIC = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
# The largest maximum error the error-column versions accept per type
# (DeltaMaxValue in their src/common.cu); a bigger one counted out of bounds.
# "#  Rank  0 Group  0 Pid 548419 on spark-fb97 device  0 [000f:01:00] NVIDIA GB10";
# before 2.x's groups: "Rank  0 Pid 1821213 on AI-A100-Beethoven01 device  0 [0x00] ...".
_RANK = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+"
    r"device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)\Z"
)
# NCCL's own banner (NCCL_DEBUG=INFO): "NCCL version 2.28.9+cuda13.0", with or without
# the "host:pid:tid [dev] NCCL INFO " in front.
_NCCL_BANNER = re.compile(r"(?:^|NCCL INFO )NCCL version (\d+\.\d+\.\d+)")
_ERROR_BOUND = {
    "half": 1e-2,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "float": 1e-5,
    "float32": 1e-5,
    "double": 1e-12,
    "float64": 1e-12,
}


@dataclass(frozen=True)
class Half:
    """One of the out-of-place / in-place measurements of a row."""

    time_us: float  # the CPU time where the log has "cputime" columns (-C 1)
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # #wrong; None where not checked (N/A) or the log has an error column
    error: float | None = None  # the older layout's maximum error
    extra: tuple[tuple[str, float | None], ...] = ()  # further columns (#bitdiff, i_p99, ...)


@dataclass(frozen=True)
class Row:
    size: int  # bytes
    count: int  # elements
    type: str
    redop: str  # "none" where the layout has no redop column (it had one only for reductions)
    root: int | None
    out_of_place: Half
    in_place: Half
    line: int
    timestamp: str | None = None  # "YYYY-MM-DD HH:MM:SS" with the timestamp column


@dataclass(frozen=True)
class Rank:
    """One ``Rank`` line of the header: which process ran on which host and GPU."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str  # "000f:01:00"; "0x01" in older layouts
    name: str  # "NVIDIA GB10"


def nccl_version_from_code(code: int) -> str | None:
    """``NCCL_VERSION_CODE`` as a version: 22809 -> 2.28.9 (from 2.9 on it is
    major*10000 + minor*100 + patch; before, major*1000 + minor*100 + patch, nccl.h).
    0 (the lab's stand-in, no NCCL) is None."""
    if code <= 0:
        return None
    if code >= 20900:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


@dataclass(frozen=True)
class NcclReport:
    collective: str | None
    version: str | None
    rows: list[Row]
    avg_busbw: float
    oob_values: int | None
    errors: list[str] = field(default_factory=list)
    oob_verdict: str | None = None  # the word after the out-of-bounds count: "OK" or "FAILED"
    avg_check: str | None = None  # "OK"/"FAILED" against NCCL_TESTS_MIN_BW; None if not set
    bitwise_mismatches: int | None = None  # the newest versions' bitwise-repeatability count
    cputime: bool = False  # the time columns are CPU time (-C 1), not GPU time
    nccl_library: str | None = None  # "2.28.9": the version line's nccl-library= code
    nccl_headers: str | None = None  # the NCCL nccl-tests was compiled against
    nccl_banner: list[str] = field(default_factory=list)  # versions NCCL's INFO lines name
    ranks: list[Rank] = field(default_factory=list)
    # The network NCCL's INFO lines show (nccl_transport): "ib", "socket", or None
    # where the log has no such line (NCCL_DEBUG below INFO).
    transport: str | None = None

    @property
    def nccl_versions(self) -> list[str]:
        """Every NCCL version the log names (library code and INFO banner), in order."""
        seen = ([self.nccl_library] if self.nccl_library else []) + self.nccl_banner
        return list(dict.fromkeys(seen))

    @property
    def hosts(self) -> list[str]:
        """The distinct hosts of the Rank lines, in rank order."""
        return list(dict.fromkeys(r.host for r in self.ranks))

    @property
    def devices(self) -> list[tuple[str, str]]:
        """The distinct GPUs (host, bus id) of the Rank lines."""
        return list(dict.fromkeys((r.host, r.bus_id) for r in self.ranks))

    @property
    def wrong(self) -> int:
        """Results counted wrong, out-of-place and in-place, over every row.

        The #wrong counts where the log has them; with the older error column,
        the halves whose maximum error exceeds what that nccl-tests accepted
        for the type (so float rounding such as ``2e-07`` is not counted).
        """
        total = 0
        for row in self.rows:
            bound = _ERROR_BOUND.get(row.type, 0.0)
            for half in (row.out_of_place, row.in_place):
                total += half.wrong or 0
                if half.error is not None and half.error > bound:
                    total += 1
        return total

    def largest(self, n: int = 1) -> list[Row]:
        """The ``n`` rows of the largest sizes (where busbw means the link, not latency)."""
        return sorted(self.rows, key=lambda r: r.size)[-n:]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a half's further columns become a {name: value} object."""
        data = asdict(self)
        for row in data["rows"]:
            for half in (row["out_of_place"], row["in_place"]):
                half["extra"] = dict(half["extra"])
        return {
            **data,
            "wrong": self.wrong,
            "hosts": self.hosts,
            "devices": [list(d) for d in self.devices],
        }


@dataclass(frozen=True)
class _Layout:
    """What the column header says a row holds."""

    redop: bool
    root: bool
    half: tuple[str, ...]  # time|cputime, algbw, busbw, #wrong|error, then any extras
    timestamp: bool
    line: int

    @property
    def width(self) -> int:
        return len(_LEAD) + self.redop + self.root + 2 * len(self.half) + 2 * self.timestamp


def _bad(source: str, line: int | None, problem: str) -> SparkctlError:
    where = f"{source}:{line}" if line else source
    return SparkctlError(
        f"{where}: {problem}",
        ExitCode.BAD_INPUT,
        hint="pass the complete output of one nccl-tests run",
    )


def _layout(words: list[str], source: str, number: int) -> _Layout:
    """The layout the header words (without ``#``) describe; refused if not understood."""
    rest = words[len(_LEAD) :]
    redop = bool(rest) and rest[0] == "redop"
    rest = rest[redop:]
    root = bool(rest) and rest[0] == "root"
    rest = rest[root:]
    timestamp = bool(rest) and rest[-1] == "timestamp"
    rest = rest[: len(rest) - timestamp]
    starts = [i for i, word in enumerate(rest) if word in _TIMES]
    if len(starts) == 2 and starts[0] == 0:
        first, second = tuple(rest[: starts[1]]), tuple(rest[starts[1] :])
        if (
            first == second
            and len(first) >= 4
            and first[1:3] == ("algbw", "busbw")
            and first[3] in _CHECKS
        ):
            return _Layout(redop, root, first, timestamp, number)
    raise _bad(
        source,
        number,
        "column header not understood (expected size count type "
        f"[redop] [root], then time algbw busbw #wrong|error twice): {' '.join(words)!r}",
    )


def _number(token: str, what: str, source: str, number: int) -> float:
    try:
        return float(token)
    except ValueError:
        raise _bad(source, number, f"{what} {token!r} is not a number") from None


def _half(tokens: list[str], layout: _Layout, source: str, number: int) -> Half:
    try:
        time_us, algbw, busbw = float(tokens[0]), float(tokens[1]), float(tokens[2])
    except ValueError:
        raise _bad(source, number, f"time/algbw/busbw {tokens[:3]} are not numbers") from None
    for name, token, value in zip(layout.half[:3], tokens, (time_us, algbw, busbw), strict=False):
        if not (math.isfinite(value) and value >= 0):
            raise _bad(
                source,
                number,
                f"{name} {token!r} is not a measurement (negative, nan or inf): a garbled row",
            )
    extra = tuple(
        (name, None if tok == "N/A" else _number(tok, name, source, number))
        for name, tok in zip(layout.half[4:], tokens[4:], strict=True)
    )
    check = tokens[3]
    if layout.half[3] == "error":
        error = _number(check, "error column", source, number)
        if not error >= 0:  # inf is a (very) wrong result; nan or below 0 is no maximum error
            raise _bad(source, number, f"error column {check!r} is not a maximum error")
        return Half(time_us, algbw, busbw, None, error, extra)
    if check == "N/A":
        return Half(time_us, algbw, busbw, None, extra=extra)
    wrong = _number(check, "#wrong", source, number)
    if not (math.isfinite(wrong) and wrong >= 0):
        raise _bad(source, number, f"#wrong {check!r} is not a count")
    return Half(time_us, algbw, busbw, round(wrong), extra=extra)


def _row(line: str, layout: _Layout, source: str, number: int) -> Row:
    """One result row, read by the header's columns."""
    tokens = line.split()
    if len(tokens) != layout.width:
        raise _bad(
            source,
            number,
            f"{len(tokens)} fields where the header has {layout.width}"
            f" (line {layout.line}): {line!r} (garbled or cut off)",
        )
    lead = len(_LEAD) + layout.redop + layout.root
    try:
        size, count = int(tokens[0]), int(tokens[1])
        root = int(tokens[lead - 1]) if layout.root else None
    except ValueError:
        raise _bad(source, number, f"size/count/root are not integers: {line!r}") from None
    if count < 0:
        raise _bad(source, number, f"count {count} is negative: {line!r}")
    redop = tokens[3] if layout.redop else "none"
    n = len(layout.half)
    stamp = " ".join(tokens[-2:]) if layout.timestamp else None
    return Row(
        size,
        count,
        tokens[2],
        redop,
        root,
        _half(tokens[lead : lead + n], layout, source, number),
        _half(tokens[lead + n : lead + 2 * n], layout, source, number),
        number,
        stamp,
    )


def _summary_count(body: str, line: str, source: str, number: int) -> tuple[int, str | None]:
    """``Out of bounds values : 4 FAILED`` (or Bitwise mismatches): the count and the verdict."""
    words = body.split(":", 1)[1].split()
    try:
        return int(words[0]), (words[1] if len(words) > 1 else None)
    except (IndexError, ValueError):
        raise _bad(source, number, f"unreadable summary line: {line!r}") from None


def _half_ulp(token: str) -> float:
    """Half a unit in the last printed place of ``token`` (its rounding)."""
    try:
        exponent = Decimal(token).as_tuple().exponent
    except InvalidOperation:
        return math.inf
    return 0.5 * 10.0**exponent if isinstance(exponent, int) else math.inf


def _check_average(
    rows: list[Row], tokens: list[str], avg: float, source: str, number: int
) -> None:
    """nccl-tests averages the busbw of every half it printed: the rows must add up to it."""
    mean = sum(h.busbw for r in rows for h in (r.out_of_place, r.in_place)) / (2 * len(rows))
    slack = max(_half_ulp(t) for t in tokens) + 5e-6 * abs(avg) + 1e-9
    if not abs(mean - avg) <= slack:
        raise _bad(
            source,
            number,
            f"the 'Avg bus bandwidth' {avg:g} is not the mean of the "
            f"{len(rows)} row(s) above it ({mean:.6g}): rows are missing or garbled",
        )


# What one parse keeps of lines it does not need whole: a log is a page, but a broken
# or hostile one can be gigabytes of noise (read line by line, never held whole).
_KEEP = 100
_MAX_RANKS = 4096


def parse(  # noqa: PLR0912, PLR0915
    text: str | Iterable[str],
    source: str = "nccl-tests log",
) -> NcclReport:
    """The report in ``text`` (the log, or its lines as a file yields them: memory stays
    bounded by the rows, whatever the log's size); a :class:`SparkctlError` (exit 2) for
    anything partial."""
    layout: _Layout | None = None
    rows: list[Row] = []
    busbw_tokens: list[str] = []
    avg: float | None = None
    avg_line = 0
    avg_check: str | None = None
    oob: int | None = None
    oob_verdict: str | None = None
    bitwise: int | None = None
    counts: dict[tuple[int, str, str, int | None], Row] = {}
    version = collective = None
    library = headers = None
    banner: list[str] = []
    ranks: list[Rank] = []
    errors: list[str] = []
    transports: set[str] = set()
    lines = text.splitlines() if isinstance(text, str) else text
    for number, raw in enumerate(lines, start=1):
        line = _PREFIX.sub("", raw, count=1).strip()
        if not line:
            continue
        if _FAILURE.search(line) and len(errors) < _KEEP:
            errors.append(line[:500])
        if (found := _NCCL_BANNER.search(line)) and len(banner) < _KEEP:
            banner.append(found.group(1)[:500])
        if "NCCL" in line and (kind := nccl_transport((line,))):
            transports.add(kind)
        body = line.lstrip("#").strip()
        words = body.split()
        if tuple(words[:3]) == _LEAD:
            if layout is not None:
                raise _bad(
                    source,
                    number,
                    f"a second column header (the first is on line "
                    f"{layout.line}): the log holds more than one run",
                )
            layout = _layout(words, source, number)
        elif body.startswith("nccl-tests version"):
            version = words[2] if len(words) > 2 else None
            codes = dict(w.split("=", 1) for w in words if "=" in w)
            library = _version_code(codes.get("nccl-library"))
            headers = _version_code(codes.get("nccl-headers"))
        elif layout is None and len(ranks) < _MAX_RANKS and (rank := _RANK.match(body)):
            ranks.append(
                Rank(
                    int(rank.group(1)),
                    int(rank.group(2)) if rank.group(2) else None,
                    int(rank.group(3)),
                    rank.group(4),
                    int(rank.group(5)),
                    rank.group(6),
                    rank.group(7).strip(),
                )
            )
        elif body.startswith(("Collective test concluded:", "Collective test starting:")):
            collective = body.split(":", 1)[1].strip() or collective
        elif body.startswith("Avg bus bandwidth"):
            if avg is not None:
                raise _bad(
                    source,
                    number,
                    f"a second 'Avg bus bandwidth' line (the first is on "
                    f"line {avg_line}): the log holds more than one run",
                )
            parts = body.split(":", 1)[1].split() if ":" in body else []
            try:
                avg = float(parts[0])
            except (IndexError, ValueError):
                raise _bad(source, number, f"unreadable average: {line!r}") from None
            if not math.isfinite(avg):
                raise _bad(source, number, f"unreadable average: {line!r}")
            avg_line, avg_check = number, (parts[1] if len(parts) > 1 else None)
        elif body.startswith("Out of bounds values"):
            oob, oob_verdict = _summary_count(body, line, source, number)
        elif body.startswith("Bitwise mismatches"):
            bitwise, _ = _summary_count(body, line, source, number)
        elif layout is not None and not line.startswith("#"):
            if line == "...":
                raise _bad(source, number, "rows left out ('...'): an excerpt, not a whole log")
            if not _INT.fullmatch(words[0]):
                if _NUMERIC.fullmatch(words[0]):
                    raise _bad(source, number, f"size {words[0]!r} is not a byte count: {line!r}")
                continue  # NCCL INFO/WARN lines, failure lines, mpirun chatter
            if avg is not None:
                raise _bad(
                    source,
                    number,
                    f"a result row after the 'Avg bus bandwidth' line {avg_line}: {line!r}",
                )
            row = _row(line, layout, source, number)
            earlier = counts.setdefault((row.size, row.type, row.redop, row.root), row)
            if earlier.count != row.count:
                raise _bad(
                    source,
                    number,
                    f"{row.size} bytes of {row.type} are {row.count} "
                    f"elements here and {earlier.count} on line {earlier.line}: rows "
                    "that contradict each other",
                )
            rows.append(row)
            n = len(layout.half)
            lead = len(_LEAD) + layout.redop + layout.root
            busbw_tokens += [words[lead + 2], words[lead + n + 2]]
    if layout is None:
        raise _bad(
            source,
            None,
            "no nccl-tests column header (# size count type redop ...)"
            + (f"; the run failed: {errors[0]}" if errors else ""),
        )
    if not rows:
        raise _bad(
            source,
            None,
            "a column header but no result rows"
            + (f"; the run failed: {errors[0]}" if errors else ""),
        )
    if avg is None:
        raise _bad(
            source,
            None,
            f"no 'Avg bus bandwidth' line after {len(rows)} row(s): "
            "the run did not finish" + (f" ({errors[0]})" if errors else ""),
        )
    _check_average(rows, busbw_tokens, avg, source, avg_line)
    return NcclReport(
        collective,
        version,
        rows,
        avg,
        oob,
        errors,
        oob_verdict,
        avg_check,
        bitwise,
        layout.half[0] == "cputime",
        library,
        headers,
        list(dict.fromkeys(banner)),
        ranks,
        # One socket communicator is enough to call the run sockets (nccl_transport's rule).
        transport="socket" if "socket" in transports else "ib" if "ib" in transports else None,
    )


def _version_code(token: str | None) -> str | None:
    return nccl_version_from_code(int(token)) if token and token.isdigit() else None
