"""Parse nccl-tests output (``all_reduce_perf`` and friends) into typed rows.

One parser for every layout in use, found from the column header rather than
assumed:

- nccl-tests 2.x before ``root`` (``size count type redop time algbw busbw
  error ...``): the error column is the maximum error as a float;
- later 2.x (``... redop root time algbw busbw #wrong ...``): ``#wrong`` is a
  count, ``N/A`` where in-place results are not checked;
- 2.18 with ``-R``/timestamps: a trailing ``timestamp`` column (date and time).

A log that has no column header, no rows, a row that does not fit the header,
or no ``Avg bus bandwidth`` line (the run was cut short) is refused with a
:class:`SparkctlError` naming the line: a partial log must never become a
number. ``sparkctl report nccl LOGFILE`` and ``validate`` use this module.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError

_HEADER_START = ("size", "count", "type", "redop")
_FAILURE = re.compile(r"Test NCCL failure|Test CUDA failure|Test failure|NCCL WARN|"
                      r"Assertion .* failed|MPI_ABORT|mpirun noticed")


@dataclass(frozen=True)
class Half:
    """One of the out-of-place / in-place measurements of a row."""

    time_us: float
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # #wrong; None where not checked (N/A) or the log has an error column
    error: float | None = None  # the older layout's maximum error


@dataclass(frozen=True)
class Row:
    size: int  # bytes
    count: int  # elements
    type: str
    redop: str
    root: int | None
    out_of_place: Half
    in_place: Half
    line: int


@dataclass(frozen=True)
class NcclReport:
    collective: str | None
    version: str | None
    rows: list[Row]
    avg_busbw: float
    oob_values: int | None
    errors: list[str] = field(default_factory=list)

    @property
    def wrong(self) -> int:
        """Results counted wrong, out-of-place and in-place, over every row."""
        return sum((h.wrong or 0) for r in self.rows for h in (r.out_of_place, r.in_place)) \
            + sum(1 for r in self.rows for h in (r.out_of_place, r.in_place)
                  if h.error is not None and h.error > 0)

    def largest(self, n: int = 1) -> list[Row]:
        """The ``n`` rows of the largest sizes (where busbw means the link, not latency)."""
        return sorted(self.rows, key=lambda r: r.size)[-n:]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "wrong": self.wrong}


def _bad(source: str, line: int | None, problem: str) -> SparkctlError:
    where = f"{source}:{line}" if line else source
    return SparkctlError(f"{where}: {problem}", ExitCode.BAD_INPUT,
                         hint="pass the complete output of one nccl-tests run")


def _half(tokens: list[str], kind: str, source: str, number: int) -> Half:
    try:
        time_us, algbw, busbw = float(tokens[0]), float(tokens[1]), float(tokens[2])
    except ValueError:
        raise _bad(source, number, f"time/algbw/busbw {tokens[:3]} are not numbers") from None
    last = tokens[3]
    if kind == "error":
        try:
            return Half(time_us, algbw, busbw, None, float(last))
        except ValueError:
            raise _bad(source, number, f"error column {last!r} is not a number") from None
    if last == "N/A":
        return Half(time_us, algbw, busbw, None)
    try:
        return Half(time_us, algbw, busbw, int(float(last)))
    except ValueError:
        raise _bad(source, number, f"#wrong {last!r} is not a count") from None


def _row(line: str, columns: list[str], source: str, number: int) -> Row:
    """One result row, read by the header's columns."""
    tokens = line.split()
    has_root = "root" in columns
    kind = "error" if "error" in columns else "#wrong"
    stamped = columns[-1] == "timestamp"
    want = 4 + has_root + 8 + (2 if stamped else 0)
    if len(tokens) != want:
        raise _bad(source, number, f"{len(tokens)} fields where the header has "
                   f"{want}: {line!r} (garbled or cut off)")
    try:
        size, count = int(tokens[0]), int(tokens[1])
        root = int(tokens[4]) if has_root else None
    except ValueError:
        raise _bad(source, number, f"size/count/root are not integers: {line!r}") from None
    rest = tokens[4 + has_root:]
    return Row(size, count, tokens[2], tokens[3], root, _half(rest[0:4], kind, source, number),
               _half(rest[4:8], kind, source, number), number)


def parse(text: str, source: str = "nccl-tests log") -> NcclReport:  # noqa: PLR0912
    """The report in ``text``; a :class:`SparkctlError` (exit 2) for anything partial."""
    lines = text.splitlines()
    columns: list[str] | None = None
    rows: list[Row] = []
    avg: float | None = None
    oob: int | None = None
    version = collective = None
    errors: list[str] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if _FAILURE.search(line):
            errors.append(line)
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            words = body.split()
            if tuple(words[:4]) == _HEADER_START:
                columns = words
            elif body.startswith("nccl-tests version"):
                version = words[2] if len(words) > 2 else None
            elif body.startswith("Collective test concluded:"):
                collective = body.split(":", 1)[1].strip()
            elif body.startswith("Avg bus bandwidth"):
                try:
                    avg = float(body.split(":", 1)[1].split()[0])
                except (IndexError, ValueError):
                    raise _bad(source, number, f"unreadable average: {line!r}") from None
            elif body.startswith("Out of bounds values"):
                try:
                    oob = int(body.split(":", 1)[1].split()[0])
                except (IndexError, ValueError):
                    raise _bad(source, number, f"unreadable out-of-bounds line: {line!r}") from None
            continue
        if columns is None or not line[0].isdigit():
            continue  # banners, device lines, NCCL INFO, mpirun chatter
        rows.append(_row(line, columns, source, number))
    if columns is None:
        raise _bad(source, None, "no nccl-tests column header (# size count type redop ...)")
    if not rows:
        raise _bad(source, None, "a column header but no result rows"
                   + (f"; the run failed: {errors[0]}" if errors else ""))
    if avg is None:
        raise _bad(source, None, f"no 'Avg bus bandwidth' line after {len(rows)} row(s): "
                   "the run did not finish" + (f" ({errors[0]})" if errors else ""))
    return NcclReport(collective, version, rows, avg, oob, errors)
