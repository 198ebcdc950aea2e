"""The stand-in's ServerArgs data file is what the pinned release's dataclass gives.

The lab's SGLang stand-in answers ``/server_info`` and logs ``server_args=``
with every field of the release's ``ServerArgs``: the ones it parses with the
parsed value, all others with the defaults in
lab/sparkctl_lab/standins/sglang/server_args_<version>.json, which
scripts/sglang_server_args.py writes from the release's dataclass. Here the
same script runs inside the release's venv (``sglang_release``) and its
document must be the file's, field for field and in the same order, written
in the same text. When the pin moves, the failure names every field added,
removed or whose default changed, and says how to regenerate the file.
"""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import pytest

from sparkctl_lab.standins.sglang import args as standin_args
from sparkctl_lab.standins.sglang.version import __version__
from tests.contract.conftest import REPO, SGLangRelease, sglang_pin

pytestmark = pytest.mark.contract

GENERATOR = REPO / "scripts" / "sglang_server_args.py"
REGENERATE = f"regenerate with: .venv/bin/python {GENERATOR.relative_to(REPO)}"


def _generator() -> ModuleType:
    """scripts/sglang_server_args.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("sglang_server_args", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def field_differences(data: dict[str, Any], release: dict[str, Any]) -> list[str]:
    """What the data file says that the release's dataclass does not, field by field."""
    out = [
        f"{name}: the release {release['sglang']} has it (default {release['fields'][name]!r}"
        "), the data file does not"
        for name in release["fields"]
        if name not in data["fields"]
    ]
    out += [
        f"{name}: in the data file, not a field of the release {release['sglang']}"
        for name in data["fields"]
        if name not in release["fields"]
    ]
    out += [
        f"{name}: default {data['fields'][name]!r} in the data file, the release's is "
        f"{release['fields'][name]!r}"
        for name in release["fields"]
        if name in data["fields"]
        and (
            data["fields"][name] != release["fields"][name]
            or type(data["fields"][name]) is not type(release["fields"][name])
        )
    ]
    if [n for n in data["fields"] if n in release["fields"]] != [
        n for n in release["fields"] if n in data["fields"]
    ]:
        out.append("the fields are in another order than the dataclass's")
    out += [
        f"{key}: {data.get(key)!r} in the data file, the release's {release[key]!r}"
        for key in release
        if key != "fields" and data.get(key) != release[key]
    ]
    return out


def test_field_differences_names_each_field() -> None:
    base = {"sglang": "1", "required": ["a"], "fields": {"a": None, "b": 1, "c": 1.0}}
    assert field_differences(base, base) == []
    assert field_differences(
        {**base, "fields": {"a": None, "b": 2, "c": 1, "z": False}},
        {**base, "sglang": "2", "fields": {"a": None, "b": 1, "c": 1.0, "d": []}},
    ) == [
        "d: the release 2 has it (default []), the data file does not",
        "z: in the data file, not a field of the release 2",
        "b: default 2 in the data file, the release's is 1",
        "c: default 1 in the data file, the release's is 1.0",
        "sglang: '1' in the data file, the release's '2'",
    ]
    assert field_differences({**base, "fields": {"b": 1, "a": None, "c": 1.0}}, base) == [
        "the fields are in another order than the dataclass's"
    ]


def test_data_file_is_the_pinned_releases_server_args(sglang_release: SGLangRelease) -> None:
    generator = _generator()
    pin = sglang_pin()
    path = generator.data_file(pin)
    # The stand-in reads the file of its own version, which is the role's pin.
    assert (standin_args.SERVER_ARGS_FILE, __version__) == (path, pin), REGENERATE
    stale = sorted(p.name for p in path.parent.glob("server_args_*.json") if p != path)
    assert stale == [], f"data files of other releases beside {path.name}: {stale}"
    assert path.is_file(), f"{path.relative_to(REPO)} is missing; {REGENERATE}"

    proc = sglang_release.run(GENERATOR.read_text(), "--dump")
    assert proc.returncode == 0, proc.stderr[-4000:]
    release = json.loads(proc.stdout.strip().splitlines()[-1])
    data = json.loads(path.read_text())
    problems = field_differences(data, release)
    assert problems == [], "\n".join(
        [f"{path.relative_to(REPO)} is not sglang {pin}'s ServerArgs ({REGENERATE}):", *problems]
    )
    # Byte for byte what the generator writes (one field per line, for reviewable diffs).
    assert path.read_text() == generator.render(release), REGENERATE
    # What the stand-in's /server_info relies on: model_path has no default (argparse
    # requires --model-path); the API key is a field, sent in clear as the release does.
    assert release["required"] == ["model_path"]
    assert {"api_key", "admin_api_key", "tp_size", "nnodes"} <= set(release["fields"])
    assert standin_args.load_release_defaults() == release["fields"]
