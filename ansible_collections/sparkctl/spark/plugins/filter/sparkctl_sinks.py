"""Filters that write a value into a file a role installs, refusing what that file cannot hold.

The inventory rules (:mod:`sparkctl.rules`) judge every value before any host is
contacted. These filters are the second line behind them: each role template
that writes a value into a format with its own syntax - a sysctl.d line, a
KEY=VALUE environment file, a systemd unit setting or command line, a YAML file,
a comment - passes the value through the filter of that format, which either
returns text the format's readers all read back as exactly that value or
raises ``AnsibleFilterError``. A failed template fails its task before the file
is written (the roles render every file of a step before writing any).

Messages name the variable or key and show the value only when the name does
not look secret (``HF_TOKEN``, ``*_KEY``, ``*_TOKEN``, ``*_PASSWORD``,
``*_SECRET`` ...); a list or mapping is named by its type, never printed.

A filter plugin of the sparkctl.spark collection (``sparkctl.spark.sparkctl_word``
and the rest); the collection's other filters import it by its module name.
Standard library and PyYAML (an Ansible dependency) only.

The formats, and why each filter refuses what it refuses:

- sysctl.d (https://www.freedesktop.org/software/systemd/man/latest/sysctl.d.html):
  ``name = value`` a line. Values here are integers only: a string may carry a
  newline, which adds a second setting that ``sysctl -p`` applies as root.
  Names are dotted words; the inventory's part of one is ``[a-z0-9_]``.
- Environment files, one ``NAME=value`` a line, each file with its readers:
  systemd's ``EnvironmentFile=``
  (https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html#EnvironmentFile=)
  removes quotes and backslashes and strips blanks at both ends; ``sh`` splits
  and expands unquoted words; docker's ``--env-file``
  (https://docs.docker.com/reference/cli/docker/container/run/#env), NCCL's
  ``nccl.conf`` reader (``setEnvFile`` in NCCL's ``src/misc/param.cc``),
  sparkctl's own reader (``env_file`` in plugins/module_utils/tool_output.py) and the sglang
  launcher take the rest of the line literally. A quote is written only where
  every reader of the file removes it the same way (systemd and sh both read
  ``'...'`` literally); a file with a literal reader gets the value as it is,
  so the value must be one the other readers also read as it is.
- systemd units (https://www.freedesktop.org/software/systemd/man/latest/systemd.syntax.html,
  https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html#Command%20lines):
  a newline ends a setting and starts the next, a trailing backslash joins the
  next line, ``%`` starts a specifier. Command lines are split at blanks, with
  quotes, C escapes, ``$VAR`` expansion and ``;`` between commands: each argv
  item is escaped (``\\``, ``"``, ``$$``, ``%%``) and quoted when needed.
- YAML: written by a dumper from data, so a value cannot add a key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - Ansible is installed wherever the roles run

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


# Characters no line-based file can carry inside a value: C0 controls (newline,
# carriage return, NUL, tab ...), DEL, and the line breaks of YAML 1.1 (NEL, LS, PS).
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
# Names whose value a message must not show.
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)
# Names that hold a secret (HF_TOKEN, *_KEY, *_TOKEN, *_PASSWORD, *_SECRET): a
# file readable by others (an environment file is 0644) must not carry them.
_SECRET_VARIABLE = re.compile(r"(^|_)(TOKEN|KEY|PASSWORD|PASSWD|SECRET)\Z", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# What sh reads as one literal word, unquoted (no blanks, quotes, backslash,
# $, `, globs, redirections, ; & | ( ), ~ or #); systemd and the literal readers
# read these alike too.
_SH_LITERAL = re.compile(r"^[A-Za-z0-9_.,:/=@^+%-]*\Z")
# A word systemd's command-line parser and a specifier pass through unchanged.
_UNIT_WORD = re.compile(r"^[A-Za-z0-9_.,:/=@+-]+\Z")

# Readers of environment files. Literal ones take the rest of the line as the value.
ENV_READERS = ("systemd", "sh", "docker", "nccl", "sparkctl", "launcher")
_LITERAL_READERS = frozenset({"docker", "nccl", "sparkctl", "launcher"})
# NCCL's setEnvFile reads a value into a 1024-byte buffer, truncating the rest.
_NCCL_VALUE_MAX = 1023


class SinkError(AnsibleFilterError):  # type: ignore[misc]  # Any: ansible is untyped here
    """A refusal: ``what`` (the file or variable) and the ``problem`` apart, so a
    checker can list problems under its own heading."""

    def __init__(self, what: str, problem: str) -> None:
        super().__init__(f"{what}: {problem}")
        self.problem = problem


def _fail(what: str, problem: str) -> SinkError:
    return SinkError(what, problem)


def looks_secret(name: Any) -> bool:
    """Whether a message must not show the value of ``name``."""
    return bool(_SECRET_NAME.search(str(name)))


def _shown(name: Any, value: Any) -> str:
    """The value as a message may show it: never a secret's, never a container's items."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple, set)):
        return "a list"
    if looks_secret(name):
        return "(value not shown: the name looks secret)"
    text = repr(str(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _scalar_text(value: Any, what: str, name: Any) -> str:
    """A string or number as text; booleans, None, lists and mappings are refused."""
    if isinstance(value, bool) or value is None:
        raise _fail(
            what,
            f"{name} is {value!r}, not a string or a number "
            "(write the text the program expects, quoted, such as '1' or 'true')",
        )
    if isinstance(value, (Mapping, list, tuple, set)):
        raise _fail(what, f"{name} is {_shown(name, value)}: only a string or a number fits here")
    if not isinstance(value, (str, int, float)):
        raise _fail(what, f"{name} is a {type(value).__name__}, not a string or a number")
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(what, f"{name} is not valid UTF-8 text") from None
    return text


def _no_control(text: str, what: str, name: Any, value: Any) -> None:
    if _CONTROL.search(text):
        raise _fail(
            what,
            f"{name} holds a newline or another control character ({_shown(name, value)}): "
            "one value is one line",
        )


# ------------------------------------------------------------------ comments
def sparkctl_comment(text: Any, what: str = "comment", no_equals: bool = False) -> str:
    """``text`` for a ``#`` comment line of any line-based file: one line, nothing else.

    ``no_equals``: NCCL releases before 2.19 did not skip comment lines in
    nccl.conf, so a comment there carries no ``=``.
    """
    out = _scalar_text(text, what, "the text")
    _no_control(out, what, "the text", text)
    if no_equals and "=" in out:
        raise _fail(what, f"{out!r} has '=', which an older NCCL reads as a variable")
    return out


# -------------------------------------------------------------------- sysctl
_SYSCTL_KEY = re.compile(r"^[a-z0-9_]+\Z")
# Every other part of a name: a word, or an interface name (IFNAMSIZ 16 with
# its NUL). A '.' inside an interface name would be read as a separator.
_SYSCTL_PART = re.compile(r"^[A-Za-z0-9_-]{1,15}\Z")
_INTEGER = re.compile(r"^-?[0-9]{1,19}\Z")


def sparkctl_sysctl_value(value: Any, what: str = "sysctl value") -> str:
    """An integer sysctl value as text (an int, or text of digits from an INI file)."""
    if isinstance(value, bool) or not (
        isinstance(value, int) or (isinstance(value, str) and _INTEGER.match(value))
    ):
        raise _fail(what, f"{_shown(what, value)} is not an integer (sysctl values here are)")
    return str(int(value))


def sparkctl_sysctl_line(name: Any, value: Any, what: str = "sysctl") -> str:
    """``name = value`` for a sysctl.d file: a dotted name whose last part is
    ``[a-z0-9_]``, and an integer value."""
    text = _scalar_text(name, what, "the sysctl name")
    *parents, key = text.split(".")
    if not parents or not _SYSCTL_KEY.match(key):
        raise _fail(what, f"sysctl key {_shown(what, key)} is not [a-z0-9_] only")
    bad = [p for p in parents if not _SYSCTL_PART.match(p)]
    if bad:
        raise _fail(
            what,
            f"{_shown(what, bad[0])} is not a part of a sysctl name "
            "(letters, digits, _ and -, at most 15: an interface name without '.')",
        )
    return f"{text} = {sparkctl_sysctl_value(value, f'{what}: {key}')}"


def sparkctl_sysctl_items(
    sysctls: Any, prefixes: Iterable[Any], what: str = "sysctls"
) -> list[list[str]]:
    """``[name, value]`` for every prefix and every key of ``sysctls`` (keys sorted),
    each name and value checked as :func:`sparkctl_sysctl_line` writes them."""
    if not isinstance(sysctls, Mapping):
        raise _fail(what, f"is {_shown(what, sysctls)}, not a mapping sysctl key -> integer")
    items = []
    for prefix in prefixes:
        for key in sorted(sysctls, key=str):
            name = f"{prefix}.{key}"
            line = sparkctl_sysctl_line(name, sysctls[key], what)
            items.append([name, line.rsplit(" = ", 1)[1]])
    return items


# ------------------------------------------------------------------ env files
def _env_readers(readers: Any) -> frozenset[str]:
    if isinstance(readers, str) or not isinstance(readers, Iterable):
        raise AnsibleFilterError(f"readers must be a list of {', '.join(ENV_READERS)}")
    out = frozenset(str(r) for r in readers)
    unknown = sorted(out - set(ENV_READERS))
    if not out or unknown:
        raise AnsibleFilterError(
            f"unknown environment-file readers {unknown or '(none)'}: {', '.join(ENV_READERS)}"
        )
    return out


def sparkctl_env_line(
    name: Any,
    value: Any,
    readers: Any = ENV_READERS,
    what: str = "environment file",
    *,
    placeholders: Mapping[str, Any] | None = None,
    secrets: bool = False,
) -> str:
    """``NAME=value`` that every one of ``readers`` reads back as ``value``, or a refusal.

    - NAME is ``[A-Za-z_][A-Za-z0-9_]*``; the value a string or number (no bool,
      list or mapping), one line (no newline, NUL or other control character).
    - With a literal reader (docker, nccl, sparkctl, launcher) the value is
      written as it is: for systemd it must have no blank at either end, no
      backslash and no quote; for sh only ``[A-Za-z0-9_.,:/=@^+%-]``; for the
      launcher (which strips blanks) no blank at either end.
    - Read by systemd and/or sh only, a value sh would not read as it is is
      single-quoted (both read ``'...'`` literally); one with a ``'`` is refused.
    - ``placeholders`` (name -> text): render's stand-ins for what only the node
      knows, written as they are; never passed when writing to a node.
    - ``secrets``: the file is the one readable by its service alone; any other
      file refuses a secret's name (``HF_TOKEN``, ``*_KEY``, ``*_TOKEN`` ...).
    """
    who = _env_readers(readers)
    key = _scalar_text(name, what, "a variable name")
    if not _ENV_NAME.match(key):
        raise _fail(
            what,
            f"{_shown(key, key)} is not a variable name ([A-Za-z_][A-Za-z0-9_]*): "
            "every reader would take the line differently",
        )
    if not secrets and _SECRET_VARIABLE.search(key):
        raise _fail(
            what,
            f"{key} names a secret, and this file is readable by every local user: "
            "secrets go to the service's secrets file (see docs/roles.md)",
        )
    text = _scalar_text(value, what, key)
    if placeholders and key in placeholders and text == str(placeholders[key]):
        return f"{key}={text}"
    _no_control(text, what, key, value)
    if "nccl" in who and len(text.encode("utf-8")) > _NCCL_VALUE_MAX:
        raise _fail(what, f"{key} is longer than the {_NCCL_VALUE_MAX} bytes NCCL reads")
    if who & _LITERAL_READERS:
        strips = sorted(who & {"systemd", "launcher"})
        if text != text.strip() and strips:
            raise _fail(
                what,
                f"{key} starts or ends with a blank ({_shown(key, value)}), which "
                f"{' and '.join(strips)} would not keep",
            )
        if "sh" in who and not _SH_LITERAL.match(text):
            raise _fail(
                what,
                f"{key}={_shown(key, value)} has characters that sh would not read as they "
                f"are (blanks, quotes, backslash, $, `, #, ;, globs ...), and "
                f"{', '.join(sorted(who & _LITERAL_READERS))} takes no quoting: "
                "only letters, digits and _ . , : / = @ ^ + % - fit",
            )
        if "systemd" in who and re.search(r"[\\'\"]", text):
            raise _fail(
                what,
                f"{key}={_shown(key, value)} has a quote or backslash, which systemd removes "
                f"and {', '.join(sorted(who & _LITERAL_READERS))} keeps",
            )
        return f"{key}={text}"
    # systemd and/or sh only: both read a single-quoted word literally.
    if _SH_LITERAL.match(text):
        return f"{key}={text}"
    if "'" in text:
        raise _fail(
            what,
            f"{key}={_shown(key, value)} has a single quote: systemd cannot read one "
            "inside the quotes sh and systemd share",
        )
    return f"{key}='{text}'"


def sparkctl_env_problems(
    env: Any, readers: Any = ENV_READERS, *, secrets: bool = False
) -> list[str]:
    """What :func:`sparkctl_env_line` would refuse in ``env``, one problem per
    variable (empty: every line can be written): for a preflight's judgement."""
    if not isinstance(env, Mapping):
        return [f"the environment is {_shown('env', env)}, not a mapping NAME -> value"]
    problems = []
    for name, value in env.items():
        try:
            sparkctl_env_line(name, value, readers, "env", secrets=secrets)
        except SinkError as exc:
            problems.append(exc.problem)
    return problems


# --------------------------------------------------------------- systemd units
_UNIT_KINDS = ("text", "int", "path", "user")
_UNIT_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\Z")
_UNIT_PATH = re.compile(r"^/[A-Za-z0-9_.,:/=@+-]*\Z")


def sparkctl_unit_value(value: Any, what: str = "unit setting", kind: str = "text") -> str:
    """The value of one unit-file setting (or text in a unit's comment line).

    Always one line with no trailing backslash (which joins the next line) and
    no ``%`` (a specifier). ``kind``: ``text``; ``int`` (a non-negative
    integer); ``path`` (absolute, without blanks, quotes or ``..``); ``user``
    (a user or group name, or a numeric id).
    """
    if kind not in _UNIT_KINDS:
        raise AnsibleFilterError(f"unknown unit value kind {kind!r}: {', '.join(_UNIT_KINDS)}")
    if kind == "int":
        if isinstance(value, bool) or not (
            (isinstance(value, int) and value >= 0)
            or (isinstance(value, str) and value.isascii() and value.isdigit())
        ):
            raise _fail(what, f"{_shown(what, value)} is not a non-negative integer")
        return str(int(value))
    text = _scalar_text(value, what, what)
    _no_control(text, what, what, value)
    if text.endswith("\\") or "%" in text or text != text.strip():
        raise _fail(
            what,
            f"{_shown(what, value)} ends in a backslash, has a % or blanks at an end: "
            "systemd would read another value",
        )
    if kind == "path" and (not _UNIT_PATH.match(text) or "/../" in f"{text}/"):
        raise _fail(what, f"{_shown(what, value)} is not an absolute path of plain characters")
    if kind == "user" and not _UNIT_USER.match(text):
        raise _fail(what, f"{_shown(what, value)} is not a user or group name")
    return text


def sparkctl_unit_word(word: Any, what: str = "command line") -> str:
    """One argv item as a word of a systemd command line that parses back to it.

    ``\\`` and ``"`` are escaped, ``$`` and ``%`` doubled (no variable or
    specifier expands), and a word with anything but ``[A-Za-z0-9_.,:/=@+-]``
    (blanks, quotes, ``;``, ``#`` ...) or an empty one is double-quoted. A
    control character (a newline would end the setting) is refused.
    """
    text = _scalar_text(word, what, "an argument")
    _no_control(text, what, "an argument", word)
    if _UNIT_WORD.match(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
    return f'"{escaped}"'


def sparkctl_exec_line(argv: Any, what: str = "command line") -> str:
    """argv -> one ``ExecStart=`` value (each item one word, see :func:`sparkctl_unit_word`).

    The program must be an absolute path of plain characters: systemd reads a
    leading ``@ - : + !`` as a prefix, not as part of the name.
    """
    if isinstance(argv, (str, Mapping)) or not isinstance(argv, Iterable):
        raise _fail(what, f"expected an argv list, got {_shown(what, argv)}")
    words = list(argv)
    if not words:
        raise _fail(what, "the argv list is empty")
    program = _scalar_text(words[0], what, "the program")
    if not _UNIT_PATH.match(program):
        raise _fail(what, f"the program {program!r} is not an absolute path of plain characters")
    return " ".join(sparkctl_unit_word(w, what) for w in words)


# ------------------------------------------------ words of config-file lines
# Kinds of one word in a whitespace-separated line (chrony.conf, /etc/hosts,
# ssh_config, known_hosts): a blank would add an argument, a newline a
# directive, a leading '-' an option, and ssh's pattern characters (* ? !)
# or a comma more hosts.
_WORDS: dict[str, tuple[re.Pattern[str], str]] = {
    "word": (re.compile(r"^[A-Za-z0-9_.,:/=@+][A-Za-z0-9_.,:/=@+-]*\Z"), "one plain word"),
    "host": (
        re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?\Z"),
        "a host name or IPv4 address (letters, digits, _ . -)",
    ),
    "ipv4": (
        re.compile(
            r"^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
            r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\Z"
        ),
        "an IPv4 address",
    ),
    "user": (_UNIT_USER, "a user name"),
    "path": (
        re.compile(r"^(?!.*/\.\.?(?:/|\Z))/[A-Za-z0-9_.+@=-][A-Za-z0-9_.+@=/-]*\Z"),
        "an absolute path below / of letters, digits and _ . + @ = / - (no '..', ':' or ',')",
    ),
    "port_range": (re.compile(r"^[0-9]{1,5}(?:-[0-9]{1,5})?\Z"), "a port or a port range a-b"),
    "glob": (
        re.compile(r"^[A-Za-z0-9_.+*?][A-Za-z0-9_.+*?:-]*\Z"),
        "a name pattern (letters, digits, _ . + : - and the globs * ?)",
    ),
}


def sparkctl_word(value: Any, what: str = "value", kind: str = "word") -> str:
    """One word of a whitespace-separated configuration line, of a ``kind``:
    ``word`` (letters, digits, ``_ . , : / = @ + -``, not starting with ``-``),
    ``host`` (a host name or IPv4 address), ``ipv4``, ``user``, ``glob`` (a
    package name pattern), ``port_range`` (``30000`` or ``32768-60999``),
    ``path`` (absolute and not ``/`` itself, without ``.``/``..`` parts, ``:``
    or ``,``, which a ``--volume DIR:DIR:ro`` would split at)."""
    if kind not in _WORDS:
        raise AnsibleFilterError(f"unknown word kind {kind!r}: {', '.join(_WORDS)}")
    text = _scalar_text(value, what, what)
    _no_control(text, what, what, value)
    pattern, hint = _WORDS[kind]
    if not pattern.match(text):
        raise _fail(what, f"{_shown(what, value)} is not {hint}")
    return text


def sparkctl_list(value: Any, what: str = "value", kind: str | None = None) -> list[Any]:
    """``value`` as a list, refused when it is anything else (a string is not
    iterated into characters, a mapping not into its keys); with ``kind``, each
    item one word of that kind (:func:`sparkctl_word`)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise _fail(what, f"is {_shown(what, value)}, not a list")
    items = list(value)
    if kind is not None:
        return [sparkctl_word(item, f"{what}[{i}]", kind) for i, item in enumerate(items)]
    return items


def sparkctl_quoted(value: Any, what: str = "value", quote: str = '"') -> str:
    """The inside of a ``quote``-delimited string of a configuration file (apt.conf's
    ``"..."``): one line, without the quote or a backslash, which would end or
    escape it."""
    text = _scalar_text(value, what, what)
    _no_control(text, what, what, value)
    if quote in text or "\\" in text:
        raise _fail(what, f"{_shown(what, value)} has {quote} or a backslash")
    return text


def sparkctl_int(
    value: Any, what: str = "value", minimum: int | None = None, maximum: int | None = None
) -> str:
    """An integer (an int, or text of digits from an INI file) within the bounds, as text."""
    if isinstance(value, bool) or not (
        isinstance(value, int) or (isinstance(value, str) and _INTEGER.match(value))
    ):
        raise _fail(what, f"{_shown(what, value)} is not an integer")
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise _fail(what, f"{number} is outside {minimum}..{maximum}")
    return str(number)


# ---------------------------------------------------------------------- YAML
def _plain(value: Any, what: str, where: str) -> Any:
    """``value`` as plain str/int/float/bool/None/list/dict (Ansible's own types are
    subclasses the safe dumper does not know); other types are refused."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or isinstance(key, bool):
                raise _fail(what, f"{where}: key {key!r} is not text")
            out[str(key)] = _plain(item, what, f"{where}.{key}" if where else str(key))
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, what, f"{where}[{i}]") for i, item in enumerate(value)]
    raise _fail(what, f"{where or 'the document'} is a {type(value).__name__}")


class _IndentedDumper(yaml.SafeDumper):
    """Safe dumper that indents a list under its key (netplan's documented style)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def sparkctl_yaml(data: Any, what: str = "YAML file") -> str:
    """``data`` as a YAML document written by a dumper (keys in their order, lists
    indented): a value is always a scalar of its key, never text that adds keys."""
    return yaml.dump(
        _plain(data, what, ""),
        Dumper=_IndentedDumper,
        default_flow_style=False,
        sort_keys=False,
        indent=2,
        allow_unicode=False,
        width=1 << 16,
    )


class FilterModule:
    """The sink filters (module docstring)."""

    def filters(self) -> dict[str, Any]:
        return {
            "sparkctl_comment": sparkctl_comment,
            "sparkctl_sysctl_value": sparkctl_sysctl_value,
            "sparkctl_sysctl_line": sparkctl_sysctl_line,
            "sparkctl_sysctl_items": sparkctl_sysctl_items,
            "sparkctl_env_line": sparkctl_env_line,
            "sparkctl_env_problems": sparkctl_env_problems,
            "sparkctl_unit_value": sparkctl_unit_value,
            "sparkctl_unit_word": sparkctl_unit_word,
            "sparkctl_exec_line": sparkctl_exec_line,
            "sparkctl_word": sparkctl_word,
            "sparkctl_int": sparkctl_int,
            "sparkctl_list": sparkctl_list,
            "sparkctl_quoted": sparkctl_quoted,
            "sparkctl_yaml": sparkctl_yaml,
        }
