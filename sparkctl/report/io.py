"""``report.json`` and ``report.html`` in a results directory; a report read back (``--baseline``).

``report.json`` is :meth:`Report.to_dict` (schema: docs/report-schema.md);
:func:`load` reads one back and refuses anything that is not a report this
sparkctl writes, naming the file and the field (the hand-written shape check
:data:`_SPEC` runs before :meth:`Report.from_dict` sees the data).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.report.html import render_html
from sparkctl.report.model import OUTCOMES, SCHEMA, Report

REPORT_JSON = "report.json"
REPORT_HTML = "report.html"


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # same directory: rename is atomic
    try:
        with tmp.open("w", encoding="utf-8") as f:  # mode from the umask, like any other file
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write(report: Report, run_dir: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and then ``report.html`` into ``run_dir``; their paths."""
    json_path, html_path = run_dir / REPORT_JSON, run_dir / REPORT_HTML
    text = json.dumps(report.to_dict(), indent=2) + "\n"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(json_path, text)  # the record first: a broken renderer cannot lose it
        _atomic_write(html_path, render_html(report))
    except OSError as e:
        raise SparkctlError(
            f"cannot write the report into {run_dir}: {e.strerror or e}", ExitCode.ENVIRONMENT
        ) from e
    return json_path, html_path


# The shape load() insists on before Report.from_dict sees the data: a wrong
# type deep inside must be refused with its path, not become a traceback
# later in compare() or the renderer. Specs: a type, a tuple of allowed
# values, [item spec], {key: spec} (keys ending in "?" optional, "*" allows
# other keys), or _Nullable(spec).


class _Nullable:
    def __init__(self, spec: Any) -> None:
        self.spec = spec


_NUM = float  # int or float (not bool) where a number is expected
_HALF = {
    "time_us": _NUM,
    "algbw": _NUM,
    "busbw": _NUM,
    "wrong": _Nullable(int),
    "error?": _Nullable(_NUM),
    "*": None,
}
_ROW = {"size": int, "out_of_place": _HALF, "in_place": _HALF, "*": None}
_NCCL_REPORT = {
    "rows": [_ROW],
    "avg_busbw?": _NUM,
    "oob_values?": _Nullable(int),
    "errors?": [str],
    "wrong?": int,
    "*": None,
}
_FIT = {
    "method": ("fit", "measured"),
    "sizes": [int],
    "busbw": _NUM,
    "algbw": _NUM,
    "latency_us": _NUM,
    "residual": _NUM,
    "factor": _NUM,
    "largest_size": int,
    "largest_busbw": _NUM,
    "busbw_se?": _NUM,
    "latency_constrained?": bool,
    "above_line_rate?": bool,
}
_SPEC: dict[str, Any] = {
    "schema": int,
    "run_id": str,
    "cluster": str,
    "inventory": str,
    "started": str,
    "sparkctl_version": str,
    "hosts": [str],
    "duration_s?": _NUM,
    "verdict?": ("passed", "failed", "not_judged"),
    "notes?": [str],
    "thresholds": {
        "line_rate_gbytes": _NUM,
        "min_fraction": _NUM,
        "judged_sizes": int,
        "baseline_tolerance": _NUM,
        "min_busbw_gbytes?": _NUM,
        "fractions?": {"*": None},
        "floor_ratio?": _NUM,
        "calibrated_bytes?": int,
    },
    "checks": [
        {
            "check": str,
            "host": str,
            "subject": _Nullable(str),
            "outcome": OUTCOMES,
            "message": str,
            "duration_s?": _NUM,
        }
    ],
    "nccl": [
        {
            "collective": str,
            "scope": ("all", "pair"),
            "hosts": [str],
            "outcome": OUTCOMES,
            "message": str,
            "command?": [str],
            "log?": _Nullable(str),
            "report?": _Nullable(_NCCL_REPORT),
            "duration_s?": _NUM,
            "judged?": [{"size": int, "busbw": _NUM, "fraction": _NUM, "wrong": int}],
            "fit?": _Nullable(_FIT),
        }
    ],
    "localisation": [{"host": str, "subject": _Nullable(str), "message": str}],
    "baseline?": _Nullable(
        {
            "path": str,
            "run_id": str,
            "tolerance": _NUM,
            "outcome": OUTCOMES,
            "message": str,
            "items": [
                {
                    "collective": str,
                    "size": int,
                    "baseline_busbw": _NUM,
                    "current_busbw": _NUM,
                    "change": _NUM,
                    "outcome": OUTCOMES,
                }
            ],
        }
    ),
}


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), "?")


def _shape(value: Any, spec: Any, where: str) -> str | None:
    """The first place ``value`` does not fit ``spec``, as a message; None when it fits."""
    if isinstance(spec, _Nullable):
        return None if value is None else _shape(value, spec.spec, where)
    if isinstance(spec, tuple):
        return (
            None
            if value in spec
            else f"{where} is {value!r}, not one of {', '.join(map(str, spec))}"
        )
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where} is {_kind(value)}, not a list"
        return next(
            (p for i, item in enumerate(value) if (p := _shape(item, spec[0], f"{where}[{i}]"))),
            None,
        )
    if isinstance(spec, dict):
        return _shape_object(value, spec, where)
    if spec is _NUM:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, spec) and not (spec is int and isinstance(value, bool))
    return None if ok else f"{where} is {_kind(value)}, not {_kind(spec())}"


def _shape_object(value: Any, spec: dict[str, Any], where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where or 'the file'} is {_kind(value)}, not an object"
    prefix = f"{where}." if where else ""
    for key, sub in spec.items():
        name = key.rstrip("?")
        if key == "*":
            continue
        if name not in value:
            if key.endswith("?"):
                continue
            return f"{prefix}{name} is missing"
        problem = _shape(value[name], sub, prefix + name)
        if problem:
            return problem
    extra = sorted(set(value) - {k.rstrip("?") for k in spec})
    if extra and "*" not in spec and where:  # top level: unknown keys are ignored
        return f"{where} has unknown field(s) {', '.join(extra)}"
    return None


def load(path: Path) -> Report:
    """The report in ``path`` (a results directory or its report.json).

    Anything else (missing, unreadable, not JSON, another schema, another
    shape) is a :class:`SparkctlError` with exit code BAD_INPUT naming the file.
    """
    file = path / REPORT_JSON if path.is_dir() else path
    hint = "pass a results directory of `sparkctl validate` or its report.json"

    def bad(problem: str) -> SparkctlError:
        return SparkctlError(f"{file}: {problem}", ExitCode.BAD_INPUT, hint=hint)

    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise bad(
            "no such file" + (" (not a validate results directory?)" if file is not path else "")
        ) from None
    except UnicodeDecodeError:
        raise bad("not a text file (not UTF-8)") from None
    except OSError as e:
        raise bad(f"cannot read it: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(f"not JSON (line {e.lineno} column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise bad(f"a JSON {_kind(data).split()[-1]}, not a report object")
    if "schema" not in data or "run_id" not in data:
        raise bad("not a sparkctl validate report (no schema/run_id field)")
    if data["schema"] != SCHEMA:
        raise bad(f"report schema {data['schema']!r}; this sparkctl reads schema {SCHEMA}")
    problem = _shape(data, _SPEC, "")
    if problem:
        raise bad(f"not a valid report: {problem}")
    try:
        return Report.from_dict(data)
    except (KeyError, TypeError, ValueError) as e:  # the shape check should have caught it
        raise bad(f"not a valid report: {e}") from None
