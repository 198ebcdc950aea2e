"""Filters of the nccl role: read back the KEY=VALUE files the role writes.

``/etc/nccl.conf`` is parsed by NCCL itself (``setEnvFile`` in NCCL's
``misc/param.cc``: one ``KEY=VALUE`` per line, split at the first ``=``, lines
starting with ``#`` skipped, nothing unquoted) and ``/etc/sparkctl/nccl.env``
by systemd (``EnvironmentFile=``) and by launchers that turn it into
``mpirun -x`` options. The verify step parses both with sparkctl's one
KEY=VALUE reader (``env_file`` of plugins/module_utils/tool_output.py: the common subset of
the three readers) and compares the result with what the inventory implies.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.sparkctl.spark.plugins.filter import sparkctl_sinks
from ansible_collections.sparkctl.spark.plugins.module_utils import tool_output

# sparkctl's one parser of node tool output: the collection's module_utils, which
# the sparkctl package imports by the same name.
TOOL_OUTPUT = tool_output
# The sink filters (the collection's sparkctl_sinks filter plugin): preflight judges
# the environment by the same rules the template writes it with.
SINKS = vars(sparkctl_sinks)
# Who reads the files of templates/nccl-env.j2 (the template says why).
READERS = ("nccl", "systemd", "docker", "sh", "sparkctl")


def nccl_parse_env(text: str) -> dict[str, str]:
    """``text | nccl_parse_env``: the file's KEY=VALUE lines (tool_output.env_file)."""
    return dict(TOOL_OUTPUT.env_file(str(text)))


def nccl_env_problems(env: dict[str, Any]) -> list[str]:
    """Keys or values that one of the readers would take differently from the others
    (what the template's sparkctl_env_line would refuse; no secret's value shown)."""
    return list(SINKS["sparkctl_env_problems"](env, READERS))


def nccl_env_diff(actual: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """How a file's variables differ from what the inventory implies (values compared as text)."""
    actual = {str(k): str(v) for k, v in dict(actual).items()}
    expected = {str(k): str(v) for k, v in dict(expected).items()}
    diff = [
        f"{key} is missing (expected {expected[key]!r})"
        for key in sorted(expected.keys() - actual.keys())
    ]
    diff += [
        f"{key}={actual[key]!r} is not expected here"
        for key in sorted(actual.keys() - expected.keys())
    ]
    diff += [
        f"{key}={actual[key]!r}, expected {expected[key]!r}"
        for key in sorted(expected.keys() & actual.keys())
        if actual[key] != expected[key]
    ]
    return diff


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nccl_verify_problems(read: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Everything verify finds wrong in one sparkctl_probe reading (verify.yml), as messages.

    ``want``: ``files`` (path -> the variables it must hold exactly), ``env_file``
    and ``gid_index`` (the node's RoCE v2 IPv4 GID index, which the environment
    must carry), ``tests_dir`` and ``binaries`` (each must print nccl-tests'
    usage for ``-h``), and for a real build ``lib_path`` and ``nccl_home`` (the
    library that ``ldd`` must resolve libnccl to). An empty list means the
    node is as the inventory says.
    """
    files: dict[str, Any] = read.get("files", {})
    cmds: dict[str, Any] = read.get("commands", {})
    problems: list[str] = []
    parsed: dict[str, dict[str, str]] = {}
    for path, expected in dict(want["files"]).items():
        info = files.get(path) or {"exists": False}
        if not info.get("exists"):
            problems.append(f"{path}: missing")
            continue
        try:
            parsed[path] = nccl_parse_env(info.get("content", ""))
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        problems += [f"{path}: {d}" for d in nccl_env_diff(parsed[path], expected)]

    env_file = want["env_file"]
    if env_file in parsed:
        gid = parsed[env_file].get("NCCL_IB_GID_INDEX", "")
        if not re.fullmatch(r"[0-9]+", gid) or gid != str(want["gid_index"]):
            problems.append(
                f"NCCL_IB_GID_INDEX in {env_file} is {gid or 'missing'}, the node's "
                f"RoCE v2 IPv4 GID index is {want['gid_index']}"
            )

    for name in want["binaries"]:
        path = f"{want['tests_dir']}/build/{name}"
        info = files.get(path) or {"exists": False}
        usage = cmds.get(name) or {"rc": None, "stdout": "", "stderr": "not run"}
        if not (info.get("exists") and info.get("executable")):
            problems.append(f"{path}: missing or not executable")
        elif (
            usage.get("rc") != 0
            or f"USAGE: {name}" not in str(usage.get("stdout", ""))
            or "--minbytes" not in str(usage.get("stdout", ""))
        ):
            problems.append(f"{path} -h: rc {usage.get('rc')}: {_short(usage.get('stderr', ''))}")

    mpirun = cmds.get("mpirun --version") or {"rc": None, "stdout": "", "stderr": "not run"}
    if "Open MPI" not in str(mpirun.get("stdout", "")):
        said = _short(str(mpirun.get("stdout", "")) + str(mpirun.get("stderr", "")), 200)
        problems.append(f"mpirun --version: rc {mpirun.get('rc')}, {said or 'nothing'}")

    if want.get("lib_path"):
        lib_path = str(want["lib_path"])
        ldd = [
            line.strip()
            for line in str((cmds.get("ldd") or {}).get("stdout", "")).splitlines()
            if "libnccl" in line
        ]
        wanted = f"{want['nccl_home']}/lib/libnccl.so.2"
        present = bool((files.get(lib_path) or {}).get("exists"))
        if not present or not any(wanted in line for line in ldd):
            problems.append(
                f"{lib_path} exists: {present}; "
                f"all_reduce_perf resolves libnccl to {', '.join(ldd) or 'nothing'}"
            )
    return problems


class FilterModule:
    """``text | nccl_parse_env``, ``env | nccl_env_problems``, ``a | nccl_env_diff(b)``,
    ``reading | nccl_verify_problems(want)``."""

    def filters(self) -> dict[str, Any]:
        return {
            "nccl_parse_env": nccl_parse_env,
            "nccl_env_problems": nccl_env_problems,
            "nccl_env_diff": nccl_env_diff,
            "nccl_verify_problems": nccl_verify_problems,
        }
