"""Filters of the nccl role: read back the KEY=VALUE files the role writes.

``/etc/nccl.conf`` is parsed by NCCL itself (``setEnvFile`` in NCCL's
``misc/param.cc``: one ``KEY=VALUE`` per line, split at the first ``=``, lines
starting with ``#`` skipped, nothing unquoted) and ``/etc/sparkctl/nccl.env``
by systemd (``EnvironmentFile=``) and by launchers that turn it into
``mpirun -x`` options. The verify step parses both with the rule below, which
is the common subset of the three readers, and compares the result with what
the inventory implies.
"""

from __future__ import annotations

import re
from typing import Any

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters a value may carry unquoted in all three readers (no blanks,
# quotes, backslashes, $ or #). NCCL_IB_HCA may start with = or ^.
SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=@^+%-]*$")


def nccl_parse_env(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines -> dict; comments and blank lines skipped, bad lines an error."""
    env: dict[str, str] = {}
    for number, raw in enumerate(str(text).splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not _KEY.match(key):
            raise ValueError(f"line {number} is not KEY=VALUE: {line!r}")
        if key in env:
            raise ValueError(f"line {number}: {key} is set twice")
        env[key] = value
    return env


def nccl_env_problems(env: dict[str, Any]) -> list[str]:
    """Keys or values that one of the readers would take differently from the others."""
    problems = []
    for key, value in dict(env).items():
        if not _KEY.match(str(key)):
            problems.append(f"{key!r} is not a valid variable name")
        elif isinstance(value, (dict, list, bool)) or value is None:
            problems.append(f"{key}: {value!r} must be a string or a number")
        elif not SAFE_VALUE.match(str(value)):
            problems.append(f"{key}: {value!r} has characters that systemd, a shell and "
                            "NCCL's nccl.conf reader would not read alike (blanks, quotes, "
                            "backslash, $ or #)")
    return problems


def nccl_env_diff(actual: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """How a file's variables differ from what the inventory implies (values compared as text)."""
    actual = {str(k): str(v) for k, v in dict(actual).items()}
    expected = {str(k): str(v) for k, v in dict(expected).items()}
    diff = [f"{key} is missing (expected {expected[key]!r})"
            for key in sorted(expected.keys() - actual.keys())]
    diff += [f"{key}={actual[key]!r} is not expected here"
             for key in sorted(actual.keys() - expected.keys())]
    diff += [f"{key}={actual[key]!r}, expected {expected[key]!r}"
             for key in sorted(expected.keys() & actual.keys()) if actual[key] != expected[key]]
    return diff


class FilterModule:
    """``text | nccl_parse_env``, ``env | nccl_env_problems``, ``a | nccl_env_diff(b)``."""

    def filters(self) -> dict[str, Any]:
        return {"nccl_parse_env": nccl_parse_env, "nccl_env_problems": nccl_env_problems,
                "nccl_env_diff": nccl_env_diff}
