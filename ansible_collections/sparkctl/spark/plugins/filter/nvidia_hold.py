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


def nvidia_hold_list_patterns(text: str) -> list[str]:
    """The patterns of a hold list file (one a line, ``#`` comments and blank lines skipped);
    lines that are not package patterns are left out (a list written by hand)."""
    lines = (line.strip() for line in str(text or "").splitlines())
    return [p for p in lines if p and not p.startswith("#") and _PATTERN.match(p)]


def nvidia_hold_release(
    packages: dict[str, Any], old_list: str, patterns: Iterable[str]
) -> list[str]:
    """Installed packages on dpkg hold that the hold list sparkctl wrote before
    (``old_list``, the file's text) covered and the hold set (``patterns``) no longer
    does: the holds sparkctl put there itself and now releases (the NVIDIA Container
    Toolkit's ``libnvidia-container1`` under an old ``libnvidia-*``, ``cuda-keyring``
    under ``cuda-*``). A hold no sparkctl list covered is the operator's, and stays.

    ``packages``: package_facts' shape with ``selection`` (sparkctl_probe).
    """
    old = [re.compile(nvidia_hold_regex(p)) for p in nvidia_hold_list_patterns(old_list)]
    new = [re.compile(nvidia_hold_regex(p)) for p in patterns]
    held = [
        name
        for name, versions in packages.items()
        if any(isinstance(v, dict) and v.get("selection") == "hold" for v in versions or [])
    ]
    return sorted(
        n for n in held if any(r.match(n) for r in old) and not any(r.match(n) for r in new)
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "nvidia_hold_pattern_problems": nvidia_hold_pattern_problems,
            "nvidia_hold_regex": nvidia_hold_regex,
            "nvidia_hold_select": nvidia_hold_select,
            "nvidia_hold_list_patterns": nvidia_hold_list_patterns,
            "nvidia_hold_release": nvidia_hold_release,
        }
