"""Filter of the sglang role for ``serve upgrade``'s golden checks.

``sglang_golden_prompts`` is a list of mappings (defaults/main.yml says each
field). The schema (meta/constraints.yml) holds each field's type and format,
and sparkctl's rules that each item has a prompt and checks something; this
filter refuses the same again (under plain ansible-playbook) and fills in the
defaults, so that the plan (sparkctl.plan.GoldenPrompt) has every field.
"""

from __future__ import annotations

from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - imported outside Ansible (unit tests)

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


FIELDS = ("prompt", "contains", "same", "max_tokens")
MAX_TOKENS = 32  # when an item does not say
PROMPT_LIMIT = 2000


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= PROMPT_LIMIT:
        raise AnsibleFilterError(f"{what} must be text of 1-{PROMPT_LIMIT} characters")
    if not value.isprintable():
        raise AnsibleFilterError(f"{what} holds a newline, tab or control character")
    return value


def sglang_golden(prompts: Any) -> list[dict[str, Any]]:
    """Every item with all of prompt, contains, same and max_tokens."""
    if not isinstance(prompts, list):
        raise AnsibleFilterError("sglang_golden_prompts must be a list")
    out = []
    for i, item in enumerate(prompts):
        where = f"sglang_golden_prompts[{i}]"
        if not isinstance(item, dict):
            raise AnsibleFilterError(f"{where} must be a mapping with a prompt")
        unknown = sorted(set(item) - set(FIELDS))
        if unknown:
            raise AnsibleFilterError(f"{where}: unknown field {unknown[0]!r} ({', '.join(FIELDS)})")
        contains = item.get("contains", [])
        if not isinstance(contains, list):
            raise AnsibleFilterError(f"{where}.contains must be a list of text")
        same = item.get("same", False)
        if not isinstance(same, bool):
            raise AnsibleFilterError(f"{where}.same must be true or false")
        tokens = item.get("max_tokens", MAX_TOKENS)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 1024:
            raise AnsibleFilterError(f"{where}.max_tokens must be an integer 1-1024")
        if not contains and not same:
            raise AnsibleFilterError(f"{where} checks nothing: give contains or same: true")
        out.append(
            {
                "prompt": _text(item.get("prompt"), f"{where}.prompt"),
                "contains": [_text(c, f"{where}.contains") for c in contains],
                "same": same,
                "max_tokens": tokens,
            }
        )
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sglang_golden": sglang_golden}
