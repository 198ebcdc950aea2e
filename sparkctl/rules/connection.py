"""How the controller reaches a host: passwords, host keys, ssh options, names."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .common import HOST_NAME, KEY_FILE, USER_NAME, Problem, boolean, same_everywhere

PASSWORD_VARS = (
    "ansible_password",
    "ansible_ssh_pass",
    "ansible_ssh_password",
    "ansible_become_password",
    "ansible_become_pass",
    "ansible_sudo_pass",
)
# Connection variables that would turn host key checking off (a boolean false).
HOST_KEY_CHECKING_VARS = (
    "ansible_host_key_checking",
    "ansible_ssh_host_key_checking",
    "ansible_paramiko_host_key_checking",
    "ansible_libssh_host_key_checking",
)
# ... that would accept and record unknown keys (paramiko, network_cli: a boolean true).
HOST_KEY_AUTO_ADD_VARS = ("ansible_paramiko_host_key_auto_add", "ansible_host_key_auto_add")
# ssh argument strings: their -o options reach ssh's command line (Ansible) and
# validate's ssh_config.
SSH_ARGS_VARS = (
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_ssh_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
)
TRUST_HINT = "run `sparkctl trust INVENTORY` to record the hosts' keys"


def check_passwords(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    return [
        Problem(
            host,
            var,
            "passwords are not accepted in inventories",
            hint="use SSH key authentication (ansible_ssh_private_key_file) "
            "and sudo without a stored password",
        )
        for host in hosts
        for var in PASSWORD_VARS
        if var in hostvars[host]
    ]


def _host_key_weakness(var: str, value: Any) -> str | None:
    """How ``var: value`` would weaken host key checking, or None if it does not."""
    if var in HOST_KEY_CHECKING_VARS and boolean(value) is not True:
        return f"{value!r} would turn host key checking off"
    if var in HOST_KEY_AUTO_ADD_VARS and boolean(value) is not False:
        return f"{value!r} would accept and record host keys it does not know"
    if var in SSH_ARGS_VARS:
        text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        try:
            ssh_options(text)
        except ValueError as exc:
            return str(exc)
    return None


# --------------------------------------------------------------- ssh options
# Only -o options of these names pass from an inventory to ssh, each with a value of a
# known shape (one word: no whitespace but where a list of files is meant, no quotes,
# no control characters, no shell or ssh_config syntax). Anything else could run a
# command on the controller (ProxyCommand, KnownHostsCommand, LocalCommand, Match exec,
# an Include), or let another key or file vouch for a host; sparkctl refuses it.
_WORD = r"[A-Za-z0-9_.,+@%~/=:-]+"
_YES_NO = r"(?i:yes|no)"
_NUMBER = r"[0-9]{1,6}"
_HOSTPORT = r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?"
_ALGORITHMS = r"[+^-]?[A-Za-z0-9@._-]+(?:,[A-Za-z0-9@._-]+)*"
SSH_OPTIONS: dict[str, str] = {
    "addressfamily": r"(?i:any|inet|inet6)",
    "batchmode": r"(?i:yes)",
    "checkhostip": _YES_NO,
    "ciphers": _ALGORITHMS,
    "compression": _YES_NO,
    "connectionattempts": _NUMBER,
    "connecttimeout": _NUMBER,
    "controlmaster": r"(?i:yes|no|auto|ask|autoask)",
    "controlpath": _WORD,
    "controlpersist": r"(?i:yes|no|[0-9]{1,6}[smhdw]?)",
    "forwardagent": r"(?i:no)",
    "hashknownhosts": _YES_NO,
    "hostkeyalgorithms": _ALGORITHMS,
    "identitiesonly": _YES_NO,
    "identityfile": _WORD,
    "ipqos": r"[A-Za-z0-9]+(?: [A-Za-z0-9]+)?",
    "kexalgorithms": _ALGORITHMS,
    "loglevel": r"(?i:quiet|fatal|error|info|verbose|debug[123]?)",
    "macs": _ALGORITHMS,
    "passwordauthentication": r"(?i:no)",
    "port": r"[0-9]{1,5}",
    "preferredauthentications": r"[a-z-]+(?:,[a-z-]+)*",
    "proxyjump": rf"(?i:none)|{_HOSTPORT}(?:,{_HOSTPORT})*",
    "pubkeyacceptedalgorithms": _ALGORITHMS,
    "pubkeyacceptedkeytypes": _ALGORITHMS,
    "pubkeyauthentication": r"(?i:yes)",
    "serveralivecountmax": _NUMBER,
    "serveraliveinterval": _NUMBER,
    "stricthostkeychecking": r"(?i:yes)",
    "tcpkeepalive": _YES_NO,
    "user": r"[A-Za-z_][A-Za-z0-9_.-]{0,31}",
    "userknownhostsfile": rf"{_WORD}(?: {_WORD})*",
}
# Why an option of note is refused (any other unknown one: "not an option sparkctl
# passes on").
_REFUSED_SSH_OPTIONS = {
    "proxycommand": "runs a command on the controller (use ProxyJump)",
    "localcommand": "runs a command on the controller",
    "permitlocalcommand": "lets LocalCommand run a command on the controller",
    "remotecommand": "replaces the command sparkctl runs on the node",
    "knownhostscommand": "runs a command on the controller and lets it vouch for host keys",
    "match": "its exec criterion runs a command on the controller",
    "include": "reads further ssh configuration from another file",
    "hostkeyalias": "lets another host's recorded key stand for this host",
    "globalknownhostsfile": "lets another file vouch for host keys",
    "verifyhostkeydns": "lets DNS vouch for host keys",
    "updatehostkeys": "lets a host replace its own recorded keys",
    "stricthostkeychecking": "would accept host keys it does not know",
    "userknownhostsfile": "would keep no known host key to check against",
}


# The flags of ssh's command line that are options in another spelling.
_SSH_FLAGS = {
    "-C": ("Compression", "yes"),
    "-4": ("AddressFamily", "inet"),
    "-6": ("AddressFamily", "inet6"),
}


def ssh_options(text: str) -> list[tuple[str, str]]:
    """The ``-o Key=Value`` pairs of an ssh argument string (``-o K=V``, ``-oK=V``,
    ``-o 'K V'``), each checked against SSH_OPTIONS. ValueError says what is wrong."""
    import shlex  # noqa: PLC0415 - only here

    try:
        words = shlex.split(text or "")
    except ValueError as exc:
        raise ValueError(f"{exc} in {text!r}") from None
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in _SSH_FLAGS:  # Ansible's own default ssh_args start with -C
            out.append(_SSH_FLAGS[word])
            i += 1
            continue
        if word == "-o" and i + 1 < len(words):
            spec, i = words[i + 1], i + 2
        elif word.startswith("-o") and len(word) > 2:
            spec, i = word[2:], i + 1
        else:
            raise ValueError(
                f"sparkctl passes only -o options (and -C, -4, -6) to ssh, not {word!r}"
            )
        if re.search(r"[\x00-\x1f\x7f]", spec):
            raise ValueError(f"{spec!r}: control characters (a newline, a tab) in an ssh option")
        parts = re.split(r"\s*=\s*|\s+", spec.strip(), maxsplit=1)
        key, value = parts[0], " ".join(parts[1].split()) if len(parts) > 1 else ""
        pattern = SSH_OPTIONS.get(key.lower())
        shown = " ".join(spec.split())
        if (
            pattern is not None
            and value
            and re.fullmatch(pattern, value)
            and not (
                key.lower() == "userknownhostsfile"
                and value.split()[0].lower() in ("none", "/dev/null")
            )
        ):
            out.append((key, value))
            continue
        why = _REFUSED_SSH_OPTIONS.get(key.lower())
        if why is None and pattern is not None:
            why = "is not a value sparkctl passes on for this option"
        if why is None:
            why = (
                "is not an ssh option sparkctl passes on (one of: "
                + ", ".join(sorted(SSH_OPTIONS))
                + ")"
            )
        raise ValueError(f"{shown!r} {why}")
    return out


KEY_FILE_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")


def port_number(value: Any) -> int | None:
    """A TCP port (1-65535) as an int or a string of digits; None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value):
        value = int(value)
    return value if isinstance(value, int) and 1 <= value <= 65535 else None


def check_connection(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Host names, users, ports and key files: one word each, of the shape ssh expects."""
    problems: list[Problem] = []
    for host in hosts:
        hv = hostvars[host]
        if not HOST_NAME.fullmatch(host):
            problems.append(
                Problem(
                    host,
                    None,
                    f"host name {host!r} is not a host name "
                    "(letters, digits, '.', '_', '-'; starting with a letter or "
                    "digit; at most 63)",
                    hint="name the host like spark1 and give its address in ansible_host",
                )
            )
        user = hv.get("ansible_user")
        if user is not None and not (isinstance(user, str) and USER_NAME.fullmatch(user)):
            problems.append(
                Problem(
                    host,
                    "ansible_user",
                    f"{user!r} is not a user name (letters, digits, '.', '_', '-', at most 32)",
                )
            )
        if "ansible_port" in hv and port_number(hv["ansible_port"]) is None:
            problems.append(
                Problem(host, "ansible_port", f"{hv['ansible_port']!r} is not a TCP port (1-65535)")
            )
        for var in KEY_FILE_VARS:
            key = hv.get(var)
            if key is not None and not (isinstance(key, str) and KEY_FILE.fullmatch(key)):
                problems.append(
                    Problem(
                        host,
                        var,
                        f"{key!r} is not a key file path sparkctl "
                        "passes to ssh (no whitespace, quotes or control "
                        "characters)",
                    )
                )
    everywhere: list[Problem] = []
    for problem in problems:  # a group_vars value is reported once, for all hosts
        if (
            problem.var
            and same_everywhere({h: hostvars[h] for h in hosts}, problem.var)
            and all(problem.var in hostvars[h] for h in hosts)
        ):
            if not any(p.var == problem.var for p in everywhere):
                everywhere.append(replace(problem, host=None))
        else:
            everywhere.append(problem)
    return everywhere


def check_host_keys(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """No inventory variable may weaken host key checking.

    A setting every host shares (group_vars) is reported once, for all hosts.
    """
    problems: list[Problem] = []
    these = {host: hostvars[host] for host in hosts}
    for var in (*HOST_KEY_CHECKING_VARS, *HOST_KEY_AUTO_ADD_VARS, *SSH_ARGS_VARS):
        weak = [
            (host, text)
            for host in hosts
            if var in these[host]
            and (text := _host_key_weakness(var, these[host][var])) is not None
        ]
        everywhere = len(weak) == len(hosts) and same_everywhere(these, var)
        for host, text in weak[:1] if everywhere else weak:
            problems.append(
                Problem(
                    None if everywhere else host,
                    var,
                    f"{text}; host key checking stays on",
                    hint=TRUST_HINT,
                )
            )
    return problems
