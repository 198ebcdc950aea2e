"""Questions put to the installed SGLang release, answered as JSON (run inside its venv).

``python release_probe.py REQUEST.json`` runs in the contract venv (the
``sglang_release`` fixture) and prints one JSON document. The module imports
nothing but the standard library at the top, so the tests also import it for
:func:`describe_parser` and :func:`plain` and apply them to the lab stand-in's
parser in their own interpreter: both sides are described by the same code.

The request (all keys optional):

``parse``
    ``{label: argv}``: each argv parsed by the release's own parser, built as
    ``prepare_server_args`` builds it (sglang/srt/server_args.py:9355-9356 in
    0.5.17: ``argparse.ArgumentParser(prog="sglang serve")`` then
    ``ServerArgs.add_cli_args(parser)``; the parse itself is line 9367).
    Answers the namespace, everything the release logged or warned while
    parsing (its deprecated flags log through ``print_deprecated_warning``,
    sglang/srt/arg_groups/argparse_actions.py:28), argparse's error, and the
    words that argparse accepted only as abbreviations of a longer option.
``actions``
    true: every action of that parser (:func:`describe_parser`).
``ports``
    ``{label: argv}``: the endpoints ``PortArgs.init_new`` (server_args.py:9423)
    computes for the parsed namespace, as parsed and with
    ``enable_dp_attention`` set, and the rendezvous address the ranks use
    (``_resolve_dist_init_method``, sglang/srt/distributed/bootstrap.py:145).
``protocol``
    ``[[model_name, json_text, dump_options?], ...]``: each text validated by
    the release's pydantic model of that name in
    sglang/srt/entrypoints/openai/protocol.py (``model_validate_json``), and
    the validated object serialized back as the release serializes it
    (``model_dump_json(**dump_options)``): what the release would have sent.
``server_args_fields``
    true: the names of ``dataclasses.fields(ServerArgs)``.
``tmpdir``
    where the temporary files PortArgs.init_new creates go.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
from typing import Any

_SIMPLE = (type(None), bool, int, float, str)


def plain(value: Any) -> Any:  # noqa: PLR0911 -- one return per kind of value
    """A JSON value standing for ``value`` (enums by value, other objects by repr)."""
    if isinstance(value, _SIMPLE):
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if callable(value):
        return f"<callable {getattr(value, '__qualname__', repr(value))}>"
    return repr(value)


def describe_action(action: argparse.Action) -> dict[str, Any]:
    """What decides how argparse reads a flag: everything but its help text."""
    kind = type(action).__name__
    typ = action.type
    return {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "kind": kind,
        "type": None if typ is None else getattr(typ, "__qualname__", repr(typ)),
        "default": plain(action.default),
        # Order only changes --help; argparse tests membership.
        "choices": None
        if action.choices is None
        else sorted((plain(c) for c in action.choices), key=repr),
        "nargs": action.nargs,
        "const": plain(action.const),
        "required": action.required,
    }


def describe_parser(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    return [
        describe_action(a)
        for a in parser._actions  # argparse has no public API for these
        if not isinstance(a, argparse._HelpAction)
    ]


def inexact_flags(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, list[str]]:
    """Words of ``argv`` that name an option only as a prefix (argparse's allow_abbrev)."""
    known = parser._option_string_actions
    out: dict[str, list[str]] = {}
    for word in argv:
        if not word.startswith("--") or word == "--":
            continue
        flag = word.split("=", 1)[0]
        if flag not in known:
            out[flag] = sorted(o for o in known if o.startswith(flag))
    return out


def release_parser() -> argparse.ArgumentParser:
    """The parser of ``sglang serve`` / ``python -m sglang.launch_server``, as the release builds
    it (sglang/srt/server_args.py:9355-9356, prepare_server_args)."""
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415 -- only inside the venv

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def parse(argv: list[str]) -> dict[str, Any]:
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415
    import logging  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(f"{record.name}: {record.getMessage()}")

    parser = release_parser()
    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    stderr = io.StringIO()
    namespace: dict[str, Any] | None = None
    error = None
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stderr):
            warnings.simplefilter("always")
            try:
                namespace = {k: plain(v) for k, v in vars(parser.parse_args(argv)).items()}
            except SystemExit as exc:
                error = f"exit {exc.code}: {stderr.getvalue().strip()}"
    finally:
        root.removeHandler(handler)
    return {
        "namespace": namespace,
        "error": error,
        "logged": handler.messages + [f"{w.category.__name__}: {w.message}" for w in caught],
        "stderr": stderr.getvalue(),
        "inexact": inexact_flags(parser, argv),
    }


def ports(argv: list[str]) -> dict[str, Any]:
    """PortArgs.init_new's endpoints for ``argv``, as given and with DP attention on.

    init_new only CHECKS that the ports it derives are free on this machine
    (wait_port_available, sglang/srt/utils/network.py:56) before returning them;
    the check is replaced here by one that records the port, since this machine
    is not the Spark the ports are for."""
    import dataclasses  # noqa: PLC0415

    import sglang.srt.server_args as sa  # noqa: PLC0415

    checked: list[list[Any]] = []

    def record(port: int, name: str, *a: Any, **k: Any) -> bool:
        checked.append([name, port])
        return True

    sa.wait_port_available = record
    # ServerArgs with the parsed values, without __post_init__: that needs an
    # accelerator (server_args.py:4066 get_device raises "No accelerator" here)
    # and changes none of the fields init_new reads for these flags (it sets
    # enable_dp_attention only for DWDP, server_args.py:6412). The properties
    # init_new uses (is_ep_joiner, server_args.py:8494) are the class's own.
    ns = object.__new__(sa.ServerArgs)
    ns.__dict__.update(vars(release_parser().parse_args(argv)))
    out: dict[str, Any] = {}
    for label, dp_attention in (("as_given", ns.enable_dp_attention), ("dp_attention", True)):
        checked.clear()
        ns.enable_dp_attention = dp_attention
        port_args = sa.PortArgs.init_new(ns)
        out[label] = {
            "endpoints": plain(dataclasses.asdict(port_args)),
            "checked": [list(c) for c in checked],
        }
    out["dist_init_method"] = release_function(
        "srt/distributed/bootstrap.py", "_resolve_dist_init_method"
    )(server_args=ns, dist_port=port_args.nccl_port)
    return out


def release_function(path: str, name: str) -> Any:
    """A top-level function of the release, compiled from its own source file alone.

    For modules whose imports need a GPU stack (sglang/srt/distributed/bootstrap.py
    imports the model runner's world): the function's text is the release's, its
    globals the few names it uses, taken from the modules it imports them from."""
    import ast  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from sglang.srt.environ import envs  # noqa: PLC0415
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415
    from sglang.srt.utils.network import NetworkAddress  # noqa: PLC0415

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).parent / path
    tree = ast.parse(source.read_text(), str(source))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    namespace: dict[str, Any] = {
        "envs": envs,
        "NetworkAddress": NetworkAddress,
        "ServerArgs": ServerArgs,
    }
    exec(  # noqa: S102
        compile(ast.Module(body=[node], type_ignores=[]), str(source), "exec"),
        namespace,
    )
    return namespace[name]


def validate(pairs: list[list[Any]]) -> list[dict[str, Any]]:
    """Each pair is [model name, JSON text] or [model name, JSON text, model_dump_json options]."""
    from pydantic import ValidationError  # noqa: PLC0415
    from sglang.srt.entrypoints.openai import protocol  # noqa: PLC0415

    results = []
    for name, text, *options in pairs:
        model = getattr(protocol, name)
        try:
            parsed = model.model_validate_json(text)
        except ValidationError as exc:
            results.append(
                {"model": name, "errors": plain(exc.errors(include_url=False)), "dumped": None}
            )
            continue
        # What the release would send for the same content: its own serialization,
        # with the options the release uses for this answer (``options[0]``).
        dumped = json.loads(parsed.model_dump_json(**(options[0] if options else {})))
        results.append({"model": name, "errors": [], "dumped": dumped})
    return results


def main(request_file: str) -> None:
    with open(request_file) as handle:  # noqa: PTH123 -- stdlib only, as the venv may be older
        request = json.load(handle)
    if "tmpdir" in request:  # PortArgs.init_new names its IPC sockets with temporary files
        import tempfile  # noqa: PLC0415

        tempfile.tempdir = request["tmpdir"]
    answer: dict[str, Any] = {}
    if request.get("actions"):
        answer["actions"] = describe_parser(release_parser())
    if "parse" in request:
        answer["parse"] = {label: parse(argv) for label, argv in request["parse"].items()}
    if "ports" in request:
        answer["ports"] = {label: ports(argv) for label, argv in request["ports"].items()}
    if "protocol" in request:
        answer["protocol"] = validate(request["protocol"])
    if request.get("server_args_fields"):
        import dataclasses  # noqa: PLC0415

        from sglang.srt.server_args import ServerArgs  # noqa: PLC0415

        answer["server_args_fields"] = [f.name for f in dataclasses.fields(ServerArgs)]
    print()
    print(json.dumps(answer))


if __name__ == "__main__":
    main(sys.argv[1])
