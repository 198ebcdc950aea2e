"""Values are data: no inventory value is ever a template that runs.

Ansible renders every string of an inventory file as a Jinja template when a play
reads it, so a value such as ``{{ lookup('ansible.builtin.pipe', 'id') }}`` runs a
command on the controller, as the user running sparkctl, the moment anything
(``inventory check`` included) asks for the variable. sparkctl judges the raw,
untemplated values first and refuses every template but one narrow form:

- a **pure reference** to another variable, ``{{ name }}``, alone or inside plain
  text (``"{{ sparkctl_state_dir }}/lab/ssh/id_ed25519"``). It names a variable, which
  is itself data and judged by the same rules, and renders to that variable's value:
  no filter, no test, no call, no attribute, no index;
- a string Ansible will never render: a ``!unsafe`` value (ansible-core tags it as not
  trusted as a template, ``ansible.template.is_trusted_as_template``). It is judged as
  the literal text it is, by the variable's own format.

Everything else with ``{{``, ``{%`` or ``{#`` is refused before anything is
templated, wherever it sits: a mapping key, a list item, a value nested at any depth,
a value given with ``-e``.

Standard library only (the trust test is passed in): this module runs inside the
preflight filter too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# The marks that open a Jinja expression, statement or comment.
MARKS = ("{{", "{%", "{#")
# The one form allowed: {{ name }}, a variable name and nothing else.
PURE_REFERENCE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
HINT = (
    "write the value itself, or refer to another variable as {{ variable_name }} and "
    "nothing more; no lookup, filter or call runs from an inventory (docs/inventory.md)"
)

Trusted = Callable[[str], bool]


def _always(_text: str) -> bool:
    return True


def strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string in ``value`` with where it sits (``""``, ``.key``, ``[2]``), mapping
    keys included."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield f"{where} (a key)", key
            yield from strings(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from strings(item, f"{where}[{index}]")


def template_problem(value: Any, trusted: Trusted = _always) -> str | None:
    """Why ``value`` is a template sparkctl refuses, or None.

    ``trusted(text)`` says whether Ansible would render ``text`` (False for
    ``!unsafe``); by default every string is (``-e`` values, plain Python data)."""
    for where, text in strings(value):
        if not any(mark in text for mark in MARKS) or not trusted(text):
            continue
        rest = PURE_REFERENCE.sub("", text)
        if any(mark in rest for mark in MARKS):
            at = f" (at {where.lstrip('.')})" if where else ""
            return f"is a template{at}: values are data"
    return None


def references(value: Any, trusted: Trusted = _always) -> set[str]:
    """The variable names ``value`` refers to with ``{{ name }}``."""
    return {
        name
        for _where, text in strings(value)
        if trusted(text)
        for name in PURE_REFERENCE.findall(text)
    }


# References multiply: a: "{{ b }}{{ b }}", b: "{{ c }}{{ c }}" ... doubles per level,
# so thirty short lines would expand to gigabytes when Ansible renders them.
MAX_EXPANDED_CHARS = 64 << 10


def expansion_problems(variables: Mapping[str, Any], trusted: Trusted = _always) -> dict[str, str]:
    """Variables whose references would expand beyond MAX_EXPANDED_CHARS or refer to
    themselves: name -> what is wrong. Sizes are counted, never built."""
    sizes: dict[str, int] = {}
    busy: set[str] = set()
    wrong: dict[str, str] = {}

    def size(name: str) -> int:
        if name in sizes:
            return sizes[name]
        if name in busy:
            raise RecursionError(name)
        busy.add(name)
        total = 0
        for _where, text in strings(variables.get(name)):
            if not trusted(text):
                total += len(text)
                continue
            total += len(PURE_REFERENCE.sub("", text))
            for ref in PURE_REFERENCE.findall(text):
                total += size(ref) if ref in variables else len(ref)
                total = min(total, MAX_EXPANDED_CHARS + 1)
        busy.discard(name)
        sizes[name] = total
        return total

    for name in variables:
        if not references(variables[name], trusted):
            continue
        try:
            if size(name) > MAX_EXPANDED_CHARS:
                wrong[name] = (
                    f"refers to variables that expand to more than {MAX_EXPANDED_CHARS} characters"
                )
        except RecursionError:
            busy.clear()
            wrong[name] = "refers to itself, through its references"
    return wrong


def value_problems(
    variables: Mapping[str, Any], trusted: Trusted = _always, only: set[str] | None = None
) -> dict[str, str]:
    """What is wrong with each raw value of ``variables`` (of ``only`` those, when given):
    a template sparkctl refuses, else references that loop or would expand too far.
    Sizes are counted over all ``variables``, whatever ``only`` names."""
    found = {
        name: problem
        for name, problem in expansion_problems(variables, trusted).items()
        if only is None or name in only
    }
    for name, value in variables.items():
        if only is not None and name not in only:
            continue
        problem = template_problem(value, trusted)
        if problem is not None:
            found[name] = problem
    return found


def referenced(
    variables: Mapping[str, Any], names: set[str], trusted: Trusted = _always
) -> set[str]:
    """``names`` and every variable of ``variables`` they refer to, at any depth: what
    rendering ``names`` would render."""
    seen: set[str] = set()
    todo = [n for n in names if n in variables]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [r for r in references(variables[name], trusted) if r in variables]
    return seen | names
