"""The start-up markers and failure signatures, and the stand-in's lines, against the release.

``sparkctl serve up`` reads every rank's journal with sparkctl/serve/startup
(catalogue.yml, and sparkctl/nccl_parse.yml for NCCL's own lines);
the lab's SGLang stand-in prints the lines it reads from
lab/sparkctl_lab/standins/sglang/release.py. Both carry their sources as data.
Here every ``sglang:<path>:<line>`` citation is looked up in the installed
release (the session fixture ``sglang_release``, tests/contract/conftest.py):
the file must exist and each literal text piece must occur within
``WINDOW`` lines of the cited line. Every other citation must name a known
origin. Then two real stand-in groups run on loopback (a healthy one and one
whose start-up fails) and every line they print must be one of the
catalogue's templates, so nothing the stand-in says is missing a source.

When the pin moves, a failure lists each citation that no longer holds and
where the text is found in the new release, if anywhere.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl.serve.startup import reader as logs
from sparkctl_lab.standins.sglang import release as rel
from tests.contract.conftest import SGLangRelease
from tests.unit.test_sglang_standin import Cluster, _up, cluster, model_dir, needs_loopback

__all__ = ["model_dir"]  # the fixture, imported for pytest

pytestmark = pytest.mark.contract

WINDOW = 15  # lines either side of the cited one
# Origins a citation may name besides the release (see catalogue.yml and release.py).
OTHER_ORIGINS = {
    "sglang@0.4.6",
    "nccl",
    "torch",
    "gloo",
    "uvicorn",
    "tqdm",
    "transformers",
    "huggingface_hub",
    "linux",
    "python",
    "zmq",
    "issue",
    "fixture",
    # the container around the server (docker CLI and moby daemon) and
    # sparkctl's own launcher inside it (roles/sglang/files/sglang_launcher.py)
    "docker",
    "sparkctl",
}


def _citations() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(what cites, the reference, the text pieces) for the catalogue and release.py."""
    for owner, pattern in logs.PATTERNS:
        for source in pattern.sources:
            yield f"catalogue {owner} {pattern.regex!r}", source.ref, source.text
    for name, msg in rel.messages().items():
        yield f"release.py {name}", msg.source.split(" ", 1)[0], msg.text


def _where(package: Path, text: str) -> list[str]:
    """file:line of every occurrence of ``text`` in the release (for the failure message)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if text in line:
                found.append(f"{path.relative_to(package)}:{number}")
    return found[:5]


def _check(package: Path, ref: str, texts: tuple[str, ...]) -> list[str]:
    path, _, number = ref.removeprefix("sglang:").rpartition(":")
    source = package / path
    if not path or not number.isdigit():
        return [f"{ref}: not sglang:<path>:<line>"]
    if not source.is_file():
        return [f"{ref}: {path} is not in the release"]
    lines = source.read_text(errors="replace").splitlines()
    line = int(number)
    if not 1 <= line <= len(lines):
        return [f"{ref}: {path} has {len(lines)} lines"]
    if not texts:
        return [f"{ref}: no text to look for"]
    near = "\n".join(lines[max(0, line - 1 - WINDOW) : line + WINDOW])
    return [
        f"{ref}: {text!r} is not within {WINDOW} lines (now at: "
        f"{', '.join(_where(package, text)) or 'nowhere'})"
        for text in texts
        if text not in near
    ]


def test_every_sglang_citation_holds_in_the_installed_release(
    sglang_release: SGLangRelease,
) -> None:
    package = sglang_release.package_dir
    assert (package / "srt" / "server_args.py").is_file(), package
    problems, checked = [], 0
    for who, ref, texts in _citations():
        origin = ref.split(":", 1)[0]
        if origin != "sglang":
            assert origin in OTHER_ORIGINS, f"{who}: unknown origin in {ref!r}"
            continue
        checked += 1
        problems += [f"{who}: {p}" for p in _check(package, ref, texts)]
    assert checked > 60, checked  # the release's own strings are most of them
    assert problems == [], f"against sglang {sglang_release.version}:\n" + "\n".join(problems)


def test_every_pattern_and_message_has_a_source() -> None:
    for owner, pattern in logs.PATTERNS:
        assert pattern.sources, (owner, pattern.regex)
        assert any(pattern.search(example) for example in pattern.examples), (owner, pattern)
    for name, msg in rel.messages().items():
        assert msg.source and msg.source.split(":", 1)[0] in {"sglang", *OTHER_ORIGINS}, name
        if msg.source.startswith("sglang:"):
            assert msg.text, name


# ------------------------------------------------- what a running stand-in prints
# The prefixes the programs put before a message (release.py): SGLang's logging,
# NCCL's INFO and WARN, torch's c10d.
_PREFIXES = (
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: TP\d+)?\] "),
    re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO "),
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \S+:\d+:\d+ \[\d+\] \S+:\d+ NCCL WARN "),
    re.compile(r"^(?:\[rank\d+\]:)?\[[WE]\d{4} \d\d:\d\d:\d\d\.\d{9} \S+:\d+\] "),
)


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{[^{}]*\}", template.replace("{{", "\0").replace("}}", "\1"))
    body = ".+?".join(re.escape(p).replace("\0", "{").replace("\1", "}") for p in parts)
    return re.compile(body + r"\Z", re.DOTALL)


def _templates() -> list[tuple[str, re.Pattern[str]]]:
    out = []
    for name, msg in rel.messages().items():
        if name == "TRACEBACK_LAST":
            continue  # checked below: the exception's message must be a template itself
        out += [(name, _template_regex(line)) for line in msg.template.split("\n") if line]
    return out


def _unexplained(text: str) -> list[str]:
    """The printed lines (and tqdm's \\r segments) no release.py template accounts for."""
    templates = _templates()

    def known(message: str) -> bool:
        if any(regex.match(message) for _, regex in templates):
            return True
        exc = re.match(r"^[\w.]+(?:Error|Exception): (.+)$", message)  # a traceback's last line
        return exc is not None and any(regex.match(exc.group(1)) for _, regex in templates)

    bad = []
    for raw in text.split("\n"):
        for segment in raw.split("\r"):
            message = segment
            for prefix in _PREFIXES:
                message = prefix.sub("", message, count=1)
            if message.strip() and not known(message):
                bad.append(segment)
    return bad


@needs_loopback
def test_a_healthy_standin_group_prints_only_catalogued_lines(
    tmp_path: Path, model_dir: Path
) -> None:
    with cluster(tmp_path, model_dir, 2) as c:
        _up(c)
        for path in ("/get_server_info", "/get_model_info", "/get_load", "/server_info"):
            assert c.request("GET", path)[0] == 200
        assert (
            c.json(
                "POST",
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
            )[0]
            == 200
        )
        c.wait_for(1, "Dummy health check server started", 10)
        logs_ = {rank: c.log(rank) for rank in (0, 1)}
    for rank, text in logs_.items():
        assert _unexplained(text) == [], f"rank {rank}"


@needs_loopback
def test_a_failing_standin_start_up_prints_only_catalogued_lines(
    tmp_path: Path, model_dir: Path
) -> None:
    # one rank of two: the rendezvous times out, a traceback, the release's kill path
    with cluster(tmp_path, model_dir, 2, start=[1], timeout=3) as c:
        _wait_killed(c, 1)
        text = c.log(1)
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert _unexplained(text) == []


def _wait_killed(c: Cluster, rank: int) -> None:
    deadline = time.monotonic() + 30
    while c.procs[rank].poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert c.procs[rank].poll() is not None, c.log(rank)
