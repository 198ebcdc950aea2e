"""The start-up catalogue (catalogue.yml), read once and typed.

catalogue.yml is data: the start-up phases' patterns, the generic failures, the
failure rules (title, explanation, fix, patterns, the phases in which silence is
their hang) and the snippets their texts share. This module checks its shape with a
JSON Schema (``jsonschema``, already the project's validator for the inventory:
sparkctl/rules/jsonschema_core.py says why), compiles every regular expression, and
builds the frozen dataclasses the reader uses. A file that does not hold fails at
import, naming the file, the rule id (or section) and what is wrong: a missing key,
an unknown phase, a regex that does not compile, an unknown ``{snippet}``, an id or a
hang phase given twice.

The same reading serves sparkctl/nccl_parse.yml, NCCL's own lines (:func:`read_data`,
:func:`pattern`, :func:`rule` and the shared :data:`DEFS`).

:class:`Phase` stays here in Python: code compares phases, and their order is the
order of start-up. The data names them (``READY``, ``DIST_INIT`` ...).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

_PACKAGE = "sparkctl.serve.startup"
# libyaml's safe loader where PyYAML has it: ten times faster on these files at import.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CATALOGUE_FILE = "catalogue.yml"


@functools.total_ordering
class Phase(Enum):
    """Start-up phases of one rank, in the order a healthy rank goes through them.

    Members compare by that order (``Phase.DIST_INIT < Phase.NCCL_READY``);
    ``FAILED`` sorts after everything, so "furthest phase" is simply ``max``.
    Ranks other than TP0 end at ``ENGINE_READY`` (their health server is up):
    only TP0 serves the API.
    """

    STARTING = "starting"  # server_args logged; imports, tokenizer, config
    DIST_INIT = "dist_init"  # "Init torch distributed begin.": rendezvous, Gloo, NCCL
    NCCL_READY = "nccl_ready"  # NCCL communicator up ("Init COMPLETE", CustomAllreduce off)
    WEIGHTS_LOADING = "weights_loading"  # "Load weight begin."
    WEIGHTS_LOADED = "weights_loaded"  # "Load weight end."
    KV_CACHE = "kv_cache"  # "KV Cache is allocated.", "Memory pool end."
    CUDA_GRAPH = "cuda_graph"  # "Capture target prefill/decode CUDA graph begin."
    ENGINE_READY = "engine_ready"  # decode capture end, "max_total_num_tokens=", health server
    HTTP_READY = "http_ready"  # "Uvicorn running on ..." (TP0)
    READY = "ready"  # "The server is fired up and ready to roll!" (warm-up done)
    FAILED = "failed"

    @property
    def order(self) -> int:
        return _ORDER[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Phase):
            return NotImplemented
        return self.order < other.order


_ORDER: dict[Phase, int] = {p: i for i, p in enumerate(Phase)}


@dataclass(frozen=True)
class Signature:
    """A known failure: what it means and how to fix it.

    ``line`` is the log line it was recognised in (empty for a hang, which no
    line announces); ``rank`` the TP rank when known. ``fatal`` is False for
    warnings that often precede a failure but do not end start-up by
    themselves (e.g. NCCL retrying a connect).
    """

    id: str
    title: str
    explanation: str
    fix: str
    line: str = ""
    rank: int | None = None
    fatal: bool = True


@dataclass(frozen=True)
class Source:
    """Where a marker comes from: ``ref`` (catalogue.yml's header says how refs are
    written) and, for SGLang's own source, the literal ``text`` pieces that occur at or
    near the cited line."""

    ref: str
    text: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        return self.ref.split(":", 1)[0]


@dataclass(frozen=True)
class Pattern:
    """A regular expression over one log line, its sources and lines it must match."""

    regex: str
    sources: tuple[Source, ...]
    examples: tuple[str, ...] = ()

    @functools.cached_property
    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex)

    def search(self, line: str) -> bool:
        return self.compiled.search(line) is not None


@dataclass(frozen=True)
class Rule:
    """A known failure as the catalogue gives it: the texts of its :class:`Signature`,
    the patterns of the lines that show it, and ``hang_after``: the phases in which that
    many seconds without progress are this failure although no line says so."""

    id: str
    title: str
    explanation: str
    fix: str
    patterns: tuple[Pattern, ...] = ()
    fatal: bool = True
    hang_after: tuple[tuple[Phase, float], ...] = ()

    def signature(self, line: str = "", rank: int | None = None) -> Signature:
        return Signature(self.id, self.title, self.explanation, self.fix, line, rank, self.fatal)

    def matches(self, line: str) -> bool:
        return any(p.search(line) for p in self.patterns)


@dataclass(frozen=True)
class Catalogue:
    """catalogue.yml, typed. ``phases`` in the order they are tried: the furthest phase
    first, so a line that names two gives the later one; ``rules`` in file order, the
    first that matches a line wins."""

    phases: tuple[tuple[Phase, Pattern], ...]
    generic_failures: tuple[Pattern, ...]
    rules: tuple[Rule, ...]
    hang_rules: tuple[Rule, ...]


class CatalogueError(ValueError):
    """A data file of log patterns that does not hold; the message says where."""


# ------------------------------------------------------------------- the shape
_TEXT: dict[str, Any] = {"type": "string", "minLength": 1}
_REF: dict[str, Any] = {"type": "string", "pattern": r"^[\w@.-]+:\S"}

#: The parts every data file of log patterns shares (JSON Schema, draft 2020-12).
DEFS: Mapping[str, Any] = MappingProxyType(
    {
        "text": _TEXT,
        # "nccl:src/init.cc:428@v2.28.9-1", or a ref with the literal text found there
        "source": {
            "oneOf": [
                _REF,
                {
                    "type": "object",
                    "properties": {
                        "ref": _REF,
                        "text": {"type": "array", "items": _TEXT, "minItems": 1},
                    },
                    "required": ["ref", "text"],
                    "additionalProperties": False,
                },
            ]
        },
        "pattern": {
            "type": "object",
            "properties": {
                "regex": _TEXT,
                "sources": {"type": "array", "items": {"$ref": "#/$defs/source"}, "minItems": 1},
                "examples": {"type": "array", "items": _TEXT, "minItems": 1},
            },
            "required": ["regex", "sources", "examples"],
            "additionalProperties": False,
        },
        "patterns": {"type": "array", "items": {"$ref": "#/$defs/pattern"}, "minItems": 1},
        "phase": {"enum": [p.name for p in Phase if p is not Phase.FAILED]},
        "rule": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
                "title": _TEXT,
                "explanation": _TEXT,
                "fix": _TEXT,
                "fatal": {"type": "boolean"},
                "hang_after": {
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/phase"},
                    "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
                    "minProperties": 1,
                },
                "patterns": {"$ref": "#/$defs/patterns"},
            },
            "required": ["id", "title", "explanation", "fix"],
            "additionalProperties": False,
        },
    }
)

#: catalogue.yml's shape.
SCHEMA: Mapping[str, Any] = MappingProxyType(
    {
        "type": "object",
        "properties": {
            "snippets": {
                "type": "object",
                "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"},
                "additionalProperties": _TEXT,
            },
            "phases": {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/phase"},
                "additionalProperties": {"$ref": "#/$defs/patterns"},
                "minProperties": 1,
            },
            "generic_failures": {"$ref": "#/$defs/patterns"},
            # lines show these: each has patterns
            "rules": {
                "type": "array",
                "items": {"allOf": [{"$ref": "#/$defs/rule"}, {"required": ["patterns"]}]},
                "minItems": 1,
            },
            # no line shows these: a phase's silence does
            "hang_rules": {
                "type": "array",
                "items": {
                    "allOf": [
                        {"$ref": "#/$defs/rule"},
                        {"required": ["hang_after"], "not": {"required": ["patterns"]}},
                    ]
                },
            },
        },
        "required": ["snippets", "phases", "generic_failures", "rules", "hang_rules"],
        "additionalProperties": False,
    }
)


def _where(doc: object, path: Sequence[str | int]) -> str:
    """``rule 'host_ip_hang' patterns[0].regex`` for a path into a document: the rule
    (any mapping with an ``id``) named by its id, the rest as keys and indexes."""
    out, sep = "", ""
    node: Any = doc
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else f"{sep}{key}"
        sep = "."
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            node = None
        if isinstance(node, dict) and isinstance(node.get("id"), str):
            out, sep = f"rule {node['id']!r}", " "
    return out or "the document"


def _regexes(
    node: object, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[list[str | int], str]]:
    """(path, regex) for every ``regex`` key, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "regex" and isinstance(value, str):
                yield [*path, key], value
            else:
                yield from _regexes(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _regexes(value, (*path, i))


def check(doc: object, schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``doc`` (a data file of log patterns, loaded) if it has ``schema``'s shape (with
    :data:`DEFS` as ``$defs``) and every ``regex`` in it compiles; else CatalogueError
    listing every problem, each with where it is."""
    validator = Draft202012Validator({"$defs": dict(DEFS), **schema})
    problems = []
    error: ValidationError
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        detail = (best_match(error.context) if error.context else None) or error
        problems.append(f"{_where(doc, list(detail.absolute_path))}: {detail.message}")
    if not problems:
        for path, regex in _regexes(doc):
            try:
                re.compile(regex)
            except re.error as exc:
                problems.append(f"{_where(doc, path)}: {regex!r} does not compile: {exc}")
    if problems or not isinstance(doc, dict):
        raise CatalogueError(f"{name}:\n  " + "\n  ".join(problems))
    return doc


def read_data(package: str, resource: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The YAML file ``resource`` shipped in ``package``, checked (:func:`check`)."""
    name = f"{package.replace('.', '/')}/{resource}"
    text = resources.files(package).joinpath(resource).read_text(encoding="utf-8")
    try:
        doc = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader, libyaml's if built
    except yaml.YAMLError as exc:
        raise CatalogueError(f"{name}: not YAML: {exc}") from exc
    return check(doc, schema, name)


# ------------------------------------------------------------------ the types
def source(data: str | Mapping[str, Any]) -> Source:
    if isinstance(data, str):
        return Source(data)
    return Source(data["ref"], tuple(data["text"]))


def pattern(data: Mapping[str, Any]) -> Pattern:
    return Pattern(
        data["regex"], tuple(source(s) for s in data["sources"]), tuple(data["examples"])
    )


_SNIPPET = re.compile(r"\{(\w+)\}")


def rule(data: Mapping[str, Any], snippets: Mapping[str, str] = MappingProxyType({})) -> Rule:
    """A checked rule's data as a :class:`Rule`: ``{name}`` in its texts is
    ``snippets[name]``, and each text becomes one paragraph (whitespace runs are one
    space)."""

    def text(key: str) -> str:
        raw: str = data[key]
        unknown = sorted({m for m in _SNIPPET.findall(raw) if m not in snippets})
        if unknown:
            raise CatalogueError(f"rule {data['id']!r} {key}: unknown snippet(s) {unknown}")
        return " ".join(_SNIPPET.sub(lambda m: snippets[m[1]], raw).split())

    return Rule(
        data["id"],
        text("title"),
        text("explanation"),
        text("fix"),
        tuple(pattern(p) for p in data.get("patterns", ())),
        data.get("fatal", True),
        tuple((Phase[name], float(s)) for name, s in data.get("hang_after", {}).items()),
    )


def build(doc: Mapping[str, Any]) -> Catalogue:
    """The :class:`Catalogue` of a checked catalogue.yml document; CatalogueError for
    what the schema cannot say: an id given twice, a phase two rules call their hang."""
    snippets = {k: " ".join(v.split()) for k, v in doc["snippets"].items()}
    rules = tuple(rule(r, snippets) for r in doc["rules"])
    hang_rules = tuple(rule(r, snippets) for r in doc["hang_rules"])
    problems = []
    seen: set[str] = set()
    hung: dict[Phase, str] = {}
    for r in (*rules, *hang_rules):
        if r.id in seen:
            problems.append(f"rule {r.id!r}: the id is given twice")
        seen.add(r.id)
        for phase, _ in r.hang_after:
            if phase in hung:
                problems.append(f"rule {r.id!r}: {phase.name} is already {hung[phase]!r}'s hang")
            hung[phase] = r.id
    if problems:
        raise CatalogueError(f"{CATALOGUE_FILE}:\n  " + "\n  ".join(problems))
    phases = {Phase[name]: tuple(pattern(p) for p in ps) for name, ps in doc["phases"].items()}
    return Catalogue(
        phases=tuple((ph, p) for ph in sorted(phases, reverse=True) for p in phases[ph]),
        generic_failures=tuple(pattern(p) for p in doc["generic_failures"]),
        rules=rules,
        hang_rules=hang_rules,
    )


@functools.cache
def load() -> Catalogue:
    """catalogue.yml, read and checked once."""
    return build(read_data(_PACKAGE, CATALOGUE_FILE, SCHEMA))
