"""Write the pinned SGLang release's ServerArgs fields and defaults for the lab's stand-in.

The release's ``/server_info`` sends every ``ServerArgs`` field
(``dataclasses.asdict(server_args)``, sglang 0.5.17
srt/entrypoints/http_server.py:793) and logs the dataclass repr at start-up
(srt/entrypoints/engine.py:1059). The stand-in parses only the flags the
roles use (lab/sparkctl_lab/standins/sglang/args.py ``FIELDS``); every other
field it takes from a data file written by this script from the release's
own dataclass, in the dataclass's order:

    lab/sparkctl_lab/standins/sglang/server_args_<version with _>.json

Regenerate when the pin (the sglang role's defaults/main.yml ``sglang_version``)
moves, after updating lab/sparkctl_lab/standins/sglang/version.py:

    .venv/bin/python scripts/sglang_server_args.py

That builds (or reuses) the contract suite's venv of the pinned release
(tests/contract/conftest.py), runs this file inside it with ``--dump`` and
writes the data file; remove the previous release's file by hand. The
contract test tests/contract/test_server_args_data.py fails, naming every
added, removed, reordered or changed field, until the file is regenerated.

``--dump`` alone (in an interpreter where ``import sglang`` is the release)
prints the document as one JSON line. Only the standard library is imported
at the top: the same file runs in both interpreters.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import json
import sys
from pathlib import Path
from typing import Any


def repo() -> Path:
    """The checkout (not known in the release's venv, where this runs as ``python -c``)."""
    return Path(__file__).resolve().parents[1]


def standin_dir() -> Path:
    return repo() / "lab" / "sparkctl_lab" / "standins" / "sglang"


def data_file(version: str) -> Path:
    """Where the stand-in reads the defaults of ``version`` (args.py ``SERVER_ARGS_FILE``)."""
    return standin_dir() / f"server_args_{version.replace('.', '_')}.json"


class NotJSON(Exception):
    """A default that /server_info could not send as the release sends it."""


def _json_value(value: Any, where: str) -> Any:
    """``value`` as the release's /server_info sends it (msgspec_to_builtins, then JSON:
    tuples as lists, enums by value); anything else is refused, naming the field."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return _json_value(value.value, where)
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v, f"{where}.{k}") for k, v in value.items()}
    raise NotJSON(
        f"{where}: default {value!r} ({type(value).__name__}) has no JSON form; "
        "teach scripts/sglang_server_args.py how the release sends it"
    )


def release_document() -> dict[str, Any]:
    """The installed release's ServerArgs: every field in order, its default, the required."""
    metadata = importlib.import_module("importlib.metadata")
    server_args = importlib.import_module("sglang.srt.server_args")
    fields: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(server_args.ServerArgs):
        if f.default is not dataclasses.MISSING:
            fields[f.name] = _json_value(f.default, f.name)
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = _json_value(f.default_factory(), f.name)
        else:  # model_path: argparse makes the flag required (server_args.py add_cli_args)
            fields[f.name] = None
            required.append(f.name)
    return {
        "sglang": metadata.version("sglang"),
        "source": "dataclasses.fields(sglang.srt.server_args.ServerArgs)",
        "generated_by": "scripts/sglang_server_args.py",
        "required": required,
        "fields": fields,
    }


def render(document: dict[str, Any]) -> str:
    """The data file's text: one field per line, so a moved pin diffs field by field."""
    head = {k: v for k, v in document.items() if k != "fields"}
    lines = ["{"]
    lines += [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(' "fields": {')
    items = list(document["fields"].items())
    lines += [
        f"  {json.dumps(k)}: {json.dumps(v)}{',' if i < len(items) - 1 else ''}"
        for i, (k, v) in enumerate(items)
    ]
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def _generate() -> int:
    sys.path.insert(0, str(repo()))
    contract = importlib.import_module("tests.contract.conftest")
    pin = contract.sglang_pin()
    print(f"sglang {pin}: building or reusing the contract venv ...", file=sys.stderr)
    release = contract.release_from(contract.ensure_venv(pin))
    proc = release.run(Path(__file__).read_text(), "--dump")
    if proc.returncode != 0:
        print(
            f"the dump in {release.venv} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}",
            file=sys.stderr,
        )
        return 1
    document = json.loads(proc.stdout.strip().splitlines()[-1])
    if document["sglang"] != pin:
        print(
            f"{release.venv} holds sglang {document['sglang']}, the role pins {pin}",
            file=sys.stderr,
        )
        return 1
    out = data_file(pin)
    out.write_text(render(document))
    print(f"wrote {out.relative_to(repo())}: {len(document['fields'])} fields", file=sys.stderr)
    for stale in sorted(standin_dir().glob("server_args_*.json")):
        if stale != out:
            print(f"remove {stale.relative_to(repo())} (another release's)", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="sglang_server_args.py",
        description="Write the pinned SGLang release's ServerArgs defaults for the stand-in.",
    )
    parser.add_argument(
        "--dump",
        action="store_true",
        help="print the document of the sglang importable here (one JSON line)",
    )
    opts = parser.parse_args(argv)
    if not opts.dump:
        return _generate()
    try:
        document = release_document()
    except NotJSON as err:
        print(f"sglang_server_args: {err}", file=sys.stderr)
        return 1
    print()
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
