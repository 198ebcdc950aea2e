"""Every validator matches the whole string: ``$`` also matches before a final newline.

``re.match(r"^[a-z]+$", "reboot\\n")`` succeeds, so a "safe value" check written with
``$`` let ``nccl_env_extra: {"reboot\\n": "1"}`` put a bare ``reboot`` line into
nccl.env and an ``sglang_extra_args`` item carrying a newline add an ``ExecStartPre=``
line to the SGLang unit. Validators anchor with ``\\Z`` (or use ``fullmatch``); a
pattern may end in ``$`` only when it is compiled with re.MULTILINE (a parser that
reads lines of a tool's output). This test reads every pattern in sparkctl/ and the
roles (Python, and Jinja ``match`` tests in YAML), and then feeds the validators of
the unit and env-file writers a value with a trailing newline.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
_RE_FUNCS = {"compile", "match", "search", "fullmatch"}


def _python_patterns(path: Path) -> list[tuple[int, str, bool]]:
    """(line, pattern, multiline) of every re.<func>("literal", ...) call in a file."""
    out: list[tuple[int, str, bool]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _RE_FUNCS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        flags = ast.unparse(node.args[-1]) if len(node.args) > 1 else ""
        flags += " ".join(ast.unparse(k.value) for k in node.keywords if k.arg == "flags")
        multiline = "re.M" in flags or "MULTILINE" in flags
        fullmatch = node.func.attr == "fullmatch"
        if not fullmatch:
            out.append((node.lineno, node.args[0].value, multiline))
    return out


def _sources() -> list[Path]:
    files = [
        *(REPO / "sparkctl").rglob("*.py"),
        *(REPO / "lab" / "sparkctl_lab").rglob("*.py"),
        *(REPO / "ansible_collections" / "sparkctl" / "spark" / "roles").rglob("*.py"),
    ]
    # The lab's stand-ins print and parse what the real tools do; not validators of input.
    return sorted(
        p
        for p in files
        if "standins" not in p.parts and not p.is_symlink() and "__pycache__" not in p.parts
    )


def test_no_python_validator_ends_in_a_dollar() -> None:
    found = [
        f"{p.relative_to(REPO)}:{line}: {pattern!r}"
        for p in _sources()
        for line, pattern, multiline in _python_patterns(p)
        if pattern.endswith("$") and not pattern.endswith("\\$") and not multiline
    ]
    assert not found, "anchor with \\Z (or use re.fullmatch):\n" + "\n".join(found)


def test_no_jinja_match_test_ends_in_a_dollar() -> None:
    jinja = re.compile(r"""\bis\s+(?:not\s+)?(?:match|search)\(\s*(['"])(.*?)\1""")
    found = [
        f"{p.relative_to(REPO)}:{n}: {m.group(2)!r}"
        for p in sorted(
            (REPO / "ansible_collections" / "sparkctl" / "spark" / "roles").rglob("*.yml")
        )
        + sorted((REPO / "playbooks").rglob("*.yml"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        for m in jinja.finditer(line)
        if m.group(2).endswith("$")
    ]
    assert not found, "anchor Jinja match tests with \\Z:\n" + "\n".join(found)


def test_the_scan_sees_a_dollar_where_there_is_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'import re\nA = re.compile(r"^[a-z]+$")\nB = re.compile(r"^x$", re.M)\n'
        'C = re.fullmatch(r"[a-z]+$", "a")\n'
    )
    assert [(line, multiline) for line, _, multiline in _python_patterns(sample)] == [
        (2, False),
        (3, True),
    ]


@pytest.fixture(scope="module")
def nccl_env() -> object:
    return load_file(
        "nccl_env_anchor",
        REPO / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "filter" / "nccl_env.py",
    )


@pytest.fixture(scope="module")
def sglang_args() -> object:
    return load_file(
        "sglang_args_anchor",
        REPO
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "plugins"
        / "filter"
        / "sglang_args.py",
    )


def test_nccl_env_refuses_a_key_or_value_with_a_trailing_newline(nccl_env: object) -> None:
    problems = nccl_env.nccl_env_problems  # type: ignore[attr-defined]
    assert problems({"NCCL_IB_HCA": "rocep1s0f1"}) == []
    (only,) = problems({"reboot\n": "1"})
    assert only.startswith("'reboot\\n' is not a variable name"), only
    assert len(problems({"NCCL_IB_HCA": "rocep1s0f1\n"})) == 1


def test_sglang_writers_refuse_a_trailing_newline(sglang_args: object) -> None:
    env_problems = sglang_args.sglang_env_problems  # type: ignore[attr-defined]
    assert env_problems({"SGLANG_X": "1"}) == []
    assert len(env_problems({"SGLANG_X\n": "1"})) == 1
    assert len(env_problems({"SGLANG_X": "1\n"})) == 1
    word = sglang_args._SAFE_WORD  # type: ignore[attr-defined]
    assert word.match("--enable-metrics")
    assert word.match("--enable-metrics\n") is None
    assert word.match("--x\nExecStartPre=/bin/sh") is None
