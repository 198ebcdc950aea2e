"""Filters of nvidia_driver: the one hold set, as dpkg holds and as unattended-upgrades' blacklist.

The role holds a set of shell-style package patterns (``nvidia-driver-*``,
``linux-image-nvidia-hwe-24.04``, ``linux-modules-nvidia-580-open-*``). Two
readers need that set in their own syntax, and both are derived here from the
same list so that they cannot drift apart:

- the configure step matches installed package names against it (Jinja's
  ``match`` test, Python's ``re.match``) and puts them on dpkg hold;
- unattended-upgrades reads ``Unattended-Upgrade::Package-Blacklist`` entries
  as "Python regular expressions, matching packages to exclude from
  upgrading", matched from the start of the name: "Use $ to explicitely define
  the end of a package name. Without the $, "libc6" would match all of them"
  (the comments of Ubuntu's /etc/apt/apt.conf.d/50unattended-upgrades).

Debian package names hold only ``[a-z0-9.+-]`` (Debian Policy 5.6.1), so a
pattern is that alphabet plus ``*`` and ``?``; anything else is refused
before it reaches a file. The translation uses no backslash (``.`` and ``+``
become ``[.]`` and ``[+]``): apt.conf strings and Jinja treat backslashes
differently, character classes mean the same everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Debian Policy 5.6.1 (Package): lower case letters, digits, + - . ; at least
# two characters, starting with an alphanumeric. Plus the two glob characters.
_PATTERN = re.compile(r"^[a-z0-9*?][a-z0-9.+*?-]+\Z")


def nvidia_hold_pattern_problems(patterns: Iterable[Any]) -> list[str]:
    """Patterns that are not Debian package names with * and ? (empty list: all fine)."""
    return [f"{p!r}" for p in patterns if not isinstance(p, str) or not _PATTERN.match(p)]


def nvidia_hold_regex(pattern: str) -> str:
    """One shell-style pattern as an anchored regular expression, without backslashes."""
    if nvidia_hold_pattern_problems([pattern]):
        raise ValueError(
            f"{pattern!r} is not a package name pattern (a-z, 0-9, '.', '+', '-', '*', '?')"
        )
    out = []
    for char in pattern:
        out.append({".": "[.]", "+": "[+]", "*": ".*", "?": "."}.get(char, char))
    return "^" + "".join(out) + "$"


def nvidia_hold_select(names: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """The names (sorted) one of the patterns matches, as unattended-upgrades matches them."""
    regexes = [re.compile(nvidia_hold_regex(p)) for p in patterns]
    return sorted(n for n in names if any(r.match(n) for r in regexes))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_hold_pattern_problems": nvidia_hold_pattern_problems,
            "nvidia_hold_regex": nvidia_hold_regex,
            "nvidia_hold_select": nvidia_hold_select,
        }
