"""One strict JSON Schema per variable, from the roles' own declarations, judged by
jsonschema.

Each role declares a variable's type once (``meta/argument_specs.yml``: ``type``,
``elements``, ``choices``) and what its value may be (``meta/constraints.yml``: range,
format, length, and the same again for list items, mapping keys, mapping values and a
mapping's named fields).
:func:`variable_schema` turns the two into a JSON Schema (draft 2020-12) and
``jsonschema`` judges the value with it, recursively, type first: a value of another
type is a refusal, never a pass, at any depth (a mapping where an environment value
belongs, a string where a list of mounts belongs, a list item outside ``choices``).

Why jsonschema: it is the field's reference implementation of JSON Schema (used by
ansible-lint and molecule for their own configuration, so it is already in every
sparkctl environment), it walks nested values with one documented semantics, and it
lets a project add its own formats (the :data:`FORMATS` of formats.py) and a stricter
type checker (below). pydantic would need a model class per variable, generated from
the same YAML; a JSON Schema is that YAML's natural translation and stays data.

Two deliberate departures from plain JSON Schema, both stricter:

- ``integer`` is an ``int`` and never a ``float`` (JSON Schema takes ``9000.0``), and
  no type takes a ``bool`` but ``boolean`` (YAML's ``yes`` is not 1);
- a constraint on a ``raw`` variable (declared ``raw`` because its default is a
  template) says which types it speaks of: a ``format`` a string or an integer, a
  range a number, ``items`` a list, ``keys``/``values`` a mapping. A value of any
  other type is refused (it used to pass unjudged).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from .common import is_secret_name, type_name
from .formats import FORMATS

# argument_specs type -> JSON Schema type
_TYPES = {
    "str": "string",
    "path": "string",
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "list": "array",
    "dict": "object",
}
KIND_WORDS = {
    "str": "a string",
    "path": "a path",
    "bool": "a boolean (true/false, unquoted)",
    "int": "an integer",
    "float": "a number",
    "list": "a list",
    "dict": "a mapping",
}
ELEMENT_WORDS = {
    "str": "strings",
    "path": "paths",
    "bool": "booleans",
    "int": "integers",
    "float": "numbers",
    "list": "lists",
    "dict": "mappings",
}
_JSON_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "a list",
    "object": "a mapping",
}


def _is_int(_checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker: Any, value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_array(_checker: Any, value: Any) -> bool:
    return isinstance(value, list | tuple)


def _is_object(_checker: Any, value: Any) -> bool:
    return isinstance(value, Mapping)


_TYPE_CHECKER = Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _is_int, "number": _is_number, "array": _is_array, "object": _is_object}
)
Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, type_checker=_TYPE_CHECKER
)

_FORMAT_CHECKER = FormatChecker(formats=())
for _name, (_ok, _words) in FORMATS.items():
    # A format judges the text of a string or an integer (a port written as 22).
    _FORMAT_CHECKER.checks(_name)(lambda value, ok=_ok: ok(str(value)))


def constraint_schema(  # noqa: PLR0912 - one branch per keyword of constraints.yml
    constraint: Mapping[str, Any], kind: str = "raw"
) -> dict[str, Any]:
    """The JSON Schema of a constraints.yml entry, for a value declared ``kind``."""
    schema: dict[str, Any] = {}
    if kind == "raw" and constraint.get("type") in _TYPES:  # a nested value's own type
        kind = str(constraint["type"])
    if kind in _TYPES:
        schema["type"] = _TYPES[kind]
    else:  # raw: the types the constraint speaks of, and no other
        implied: list[str] = []
        if "format" in constraint:
            implied += ["string", "integer"]
        if any(k in constraint for k in ("min", "max", "above", "below")):
            implied += ["number"]
        if "items" in constraint:
            implied += ["array"]
        if "keys" in constraint or "values" in constraint or "fields" in constraint:
            implied += ["object"]
        if "max_length" in constraint and not implied:
            implied += ["string", "array", "object"]
        if implied:
            schema["type"] = sorted(set(implied))
    if "min" in constraint:
        schema["minimum"] = constraint["min"]
    if "max" in constraint:
        schema["maximum"] = constraint["max"]
    if "above" in constraint:
        schema["exclusiveMinimum"] = constraint["above"]
    if "below" in constraint:
        schema["exclusiveMaximum"] = constraint["below"]
    if "format" in constraint:
        schema["format"] = str(constraint["format"])
    if "max_length" in constraint:
        limit = int(constraint["max_length"])
        schema.update(maxLength=limit, maxItems=limit, maxProperties=limit)
    if constraint.get("items"):
        schema["items"] = constraint_schema(constraint["items"])
    if constraint.get("keys"):
        schema["propertyNames"] = constraint_schema(constraint["keys"], "str")
    if constraint.get("values"):
        schema["additionalProperties"] = constraint_schema(constraint["values"])
    if constraint.get("fields"):  # a mapping's named keys, each its own constraint
        schema["properties"] = {
            str(key): constraint_schema(inner) for key, inner in constraint["fields"].items()
        }
    if constraint.get("allow_empty"):  # "" is the role's "unset", whatever else is said
        schema = {"if": {"const": ""}, "then": True, "else": schema}
    if constraint.get("nullable"):  # null is "the default" (a mapping's value, say)
        schema = {"if": {"type": "null"}, "then": True, "else": schema}
    return schema


def variable_schema(spec: Mapping[str, Any], constraint: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema of one role variable: its argument spec and its constraint."""
    kind = str(spec.get("type", "str"))
    schema = constraint_schema(constraint, kind)
    inner = schema
    while "else" in inner:
        inner = inner["else"]
    elements, choices = spec.get("elements"), spec.get("choices")
    if kind == "list" and elements:
        items = dict(inner.get("items") or {})
        if str(elements) in _TYPES:
            items["type"] = _TYPES[str(elements)]
        if choices:
            items["enum"] = list(choices)
        inner["items"] = items
    elif choices:
        inner["enum"] = list(choices)
    return schema


@cache
def _validator(key: str) -> Any:
    import json  # noqa: PLC0415

    return Validator(json.loads(key), format_checker=_FORMAT_CHECKER)


def errors(value: Any, schema: Mapping[str, Any]) -> list[ValidationError]:
    """jsonschema's errors of ``value``, shallowest and type errors first."""
    import json  # noqa: PLC0415

    found = list(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value))
    return sorted(found, key=lambda e: (len(e.absolute_path), _ORDER.get(str(e.validator), 9)))


# Which refusal to name first when a value breaks several: its type, then its choices,
# then its range, then its format.
_ORDER = {
    "type": 0,
    "enum": 1,
    "minimum": 2,
    "maximum": 2,
    "exclusiveMinimum": 2,
    "exclusiveMaximum": 2,
    "format": 3,
}


def _at(error: ValidationError) -> str:
    """Where in the value: "item 2: ", "NCCL_DEBUG: ", "key " for a mapping's key."""
    parts = []
    for step in error.absolute_path:
        parts.append(f"item {step}" if isinstance(step, int) else str(step))
    at = ": ".join(parts) + ": " if parts else ""
    if "propertyNames" in error.absolute_schema_path:
        at += "key "
    return at


def message(  # noqa: PLR0911 - one wording per JSON Schema keyword
    error: ValidationError,
    *,
    name: str,
    role: str,
    kind: str,
    elements: str | None = None,
    secret: bool = False,
) -> str:
    """The refusal in sparkctl's words (as the rules wrote them before jsonschema), the
    value shown only when it is not a secret."""
    # jsonschema types these as possibly "unset" (an error built by hand); its
    # validators always set them.
    value: Any = error.instance
    validator: Any = error.validator
    limit: Any = error.validator_value
    where: Any = error.schema
    at = _at(error)
    if secret or any(
        isinstance(step, str) and is_secret_name(step) for step in error.absolute_path
    ):
        fmt = where.get("format") if isinstance(where, Mapping) else None
        words = FORMATS[fmt][1] if fmt in FORMATS else "what the variable takes"
        return f"{at}the value (not shown) is not {words}"
    if validator == "type":
        path = list(error.absolute_path)
        if len(path) == 1 and isinstance(path[0], int) and kind == "list" and elements:
            return (
                f"item {path[0]} ({value!r}) is {type_name(value)}, but {role} needs a list "
                f"of {ELEMENT_WORDS.get(elements, elements)}"
            )
        if not at:
            wanted = KIND_WORDS.get(kind) or " or ".join(
                _JSON_WORDS[t] for t in ([limit] if isinstance(limit, str) else limit)
            )
            return f"{value!r} is {type_name(value)}, but {role} needs {wanted}"
        wanted = " or ".join(_JSON_WORDS[t] for t in ([limit] if isinstance(limit, str) else limit))
        return f"{at}{value!r} is {type_name(value)}, but {role} needs {wanted} here"
    if validator == "enum":
        choices = ", ".join(map(str, limit))
        if not at:
            return f"{name} must be one of: {choices}, got: {value!r}"
        return f"{at}{value!r} is not one of: {choices}"
    if validator in ("minimum", "maximum"):
        low = where.get("minimum", "-inf")
        high = where.get("maximum", "inf")
        return f"{at}{value!r} is outside {low}..{high}"
    if validator == "exclusiveMinimum":
        return f"{at}{value!r} must be above {limit}"
    if validator == "exclusiveMaximum":
        return f"{at}{value!r} must be below {limit}"
    if validator == "format":
        return f"{at}{value!r} is not {FORMATS[str(limit)][1]}"
    if validator in ("maxLength", "maxItems", "maxProperties"):
        unit = "characters" if isinstance(value, str) else "items"
        return f"{at}{len(value)} {unit}: at most {limit}"
    return f"{at}{error.message}"


def judge(
    name: str, value: Any, role: str, spec: Mapping[str, Any], constraint: Mapping[str, Any]
) -> tuple[str | None, bool]:
    """What is wrong with ``value`` for ``name`` (declared by ``role``), or None; and
    whether it is the value's own type (the argument spec's business, not the
    constraint's)."""
    found = errors(value, variable_schema(spec, constraint))
    if not found:
        return None, False
    kind = str(spec.get("type", "str"))
    elements = spec.get("elements")
    of_type = found[0].validator == "type" and not found[0].absolute_path
    return message(
        found[0],
        name=name,
        role=role,
        kind=kind,
        elements=str(elements) if elements else None,
        secret=bool(constraint.get("secret")) or is_secret_name(name),
    ), of_type


def constraint_problem(value: Any, constraint: Mapping[str, Any]) -> str | None:
    """What ``value`` breaks of a constraints.yml entry alone (its variable ``raw``)."""
    if value is None:
        return None
    found = errors(value, constraint_schema(constraint))
    if not found:
        return None
    return message(
        found[0], name="", role="the role", kind="raw", secret=bool(constraint.get("secret"))
    )
