"""How the controller reaches a host: passwords, host keys, ssh options, names."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .common import (
    HOST_NAME,
    KEY_FILE,
    USER_NAME,
    Problem,
    boolean,
    ipv4,
    is_int,
    same_everywhere,
)
from .formats import FORMATS
from .schema import fact_names
from .secrets import PASSWORD_VARS, check_secrets

# Connection variables that would turn host key checking off (a boolean false).
HOST_KEY_CHECKING_VARS = (
    "ansible_host_key_checking",
    "ansible_ssh_host_key_checking",
    "ansible_paramiko_host_key_checking",
    "ansible_libssh_host_key_checking",
)
# ... that would accept and record unknown keys (paramiko, network_cli: a boolean true).
HOST_KEY_AUTO_ADD_VARS = ("ansible_paramiko_host_key_auto_add", "ansible_host_key_auto_add")
# ssh argument strings an inventory may set: their -o options reach ssh's command line
# (Ansible) and validate's ssh_config.
SSH_ARGS_VARS = (
    "ansible_ssh_common_args",
    "ansible_ssh_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
)
# sparkctl's own ssh argument string: the known_hosts file of KNOWN_HOSTS_VAR, for every
# ssh Ansible runs (playbooks/group_vars/all/connection.yml), and nothing else.
OWN_SSH_ARGS_VAR = "ansible_ssh_extra_args"
KNOWN_HOSTS_VAR = "sparkctl_known_hosts_file"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"  # ssh's own default


def known_hosts(hv: Mapping[str, Any]) -> str:
    """The known_hosts file a host's ssh records and checks its key in: the inventory's
    ``sparkctl_known_hosts_file``, else ssh's default."""
    value = hv.get(KNOWN_HOSTS_VAR)
    return str(value) if value else DEFAULT_KNOWN_HOSTS


def own_ssh_args(hv: Mapping[str, Any]) -> str:
    """What ``ansible_ssh_extra_args`` is for a host: sparkctl's, and only this."""
    return f"-o UserKnownHostsFile={known_hosts(hv)}"


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
    "userknownhostsfile": (
        "names a known_hosts file, which is sparkctl's to pass (one file, so that no "
        "second one can vouch for a host); set sparkctl_known_hosts_file"
    ),
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
        if pattern is not None and value and re.fullmatch(pattern, value):
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


# ------------------------------------------------------ connection variables
# The ``ansible_*`` variables an inventory may set for a cluster host, each with the
# shape its value must have. Anything else of that prefix is refused (but what Ansible
# sets itself and the facts, see ANSIBLE_SET and schema.fact_names): a connection,
# become or shell variable decides which program runs, where and as whom, so an
# unknown one is never trusted. The lists of names come from ansible-core's own plugin
# documentation (``ansible-doc -t connection ssh``, ``-t become sudo``, ``-t shell sh``)
# and its special variables (https://docs.ansible.com/ansible/latest/reference_appendices/
# special_variables.html).
AUTO_INTERPRETERS = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")


def _user_name(value: Any) -> bool:
    return isinstance(value, str) and USER_NAME.fullmatch(value) is not None


def _key_file(value: Any) -> bool:
    return isinstance(value, str) and KEY_FILE.fullmatch(value) is not None


def _boolean(value: Any) -> bool:
    return boolean(value) is not None and isinstance(value, bool | str | int)


def _interpreter(value: Any) -> bool:
    return isinstance(value, str) and (
        value in AUTO_INTERPRETERS or (FORMATS["abs_path"][0](value) and value != "/")
    )


def _seconds(value: Any) -> bool:
    number = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
    return is_int(number) and 1 <= number <= 3600


def _retries(value: Any) -> bool:
    number = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
    return is_int(number) and 0 <= number <= 10


# name -> (accepts the value, what it must be). ansible_host is the address rule's
# (:func:`_address_problem` and topology's); the password, host key and ssh argument
# variables are judged by check_passwords and check_host_keys.
CONNECTION_VARS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "ansible_user": (
        _user_name,
        "a user name (letters, digits, '.', '_', '-', at most 32)",
    ),
    "ansible_port": (lambda v: port_number(v) is not None, "a TCP port (1-65535)"),
    "ansible_ssh_private_key_file": (
        _key_file,
        "a key file path sparkctl passes to ssh (no whitespace, quotes or control characters)",
    ),
    "ansible_private_key_file": (
        _key_file,
        "a key file path sparkctl passes to ssh (no whitespace, quotes or control characters)",
    ),
    "ansible_connection": (
        lambda v: v in ("ssh", "ansible.builtin.ssh"),
        "ssh: sparkctl reaches every host over ssh (local would run the roles on the "
        "controller itself, as root)",
    ),
    "ansible_become": (_boolean, "a boolean"),
    "ansible_become_method": (
        lambda v: v in ("sudo", "ansible.builtin.sudo"),
        "sudo (without a stored password: sparkctl's roles escalate with sudo only)",
    ),
    "ansible_become_user": (_user_name, "a user name (letters, digits, '.', '_', '-')"),
    "ansible_python_interpreter": (
        _interpreter,
        f"an absolute path without .. or one of {', '.join(AUTO_INTERPRETERS)}",
    ),
    "ansible_pipelining": (_boolean, "a boolean"),
    "ansible_timeout": (_seconds, "a whole number of seconds, 1-3600"),
    "ansible_ssh_retries": (_retries, "a whole number of retries, 0-10"),
    "ansible_ssh_transfer_method": (
        lambda v: v in ("smart", "sftp", "scp", "piped"),
        "one of smart, sftp, scp, piped",
    ),
}
HOST_VAR = "ansible_host"

# Names Ansible sets itself (special variables, and facts it always promotes): never an
# inventory's, never refused.
ANSIBLE_SET = frozenset(
    {
        "ansible_check_mode",
        "ansible_collection_name",
        "ansible_collections",
        "ansible_config_file",
        "ansible_delegated_host",
        "ansible_delegated_vars",
        "ansible_dependent_role_names",
        "ansible_diff_mode",
        "ansible_facts",
        "ansible_failed_result",
        "ansible_failed_task",
        "ansible_forks",
        "ansible_index_var",
        "ansible_inventory_sources",
        "ansible_limit",
        "ansible_local",
        "ansible_loop",
        "ansible_loop_var",
        "ansible_parent_role_names",
        "ansible_parent_role_paths",
        "ansible_play_batch",
        "ansible_play_hosts",
        "ansible_play_hosts_all",
        "ansible_play_name",
        "ansible_play_role_names",
        "ansible_playbook_python",
        "ansible_role_name",
        "ansible_role_names",
        "ansible_run_tags",
        "ansible_search_path",
        "ansible_skip_tags",
        "ansible_verbosity",
        "ansible_version",
    }
)

_ALIAS = (
    "is an alias that ssh would take instead of {0} (another node's address, or a word "
    "in ssh's option position); set {0}"
)
_PROGRAM = "names a program that sparkctl would run {0}"
_CONTROL = (
    "moves the ssh connections' control socket, through which anyone who can reach it "
    "runs commands on the hosts; sparkctl and Ansible place it themselves"
)
_KEY_TEXT = "holds a private key's text (not shown); give its file in ansible_ssh_private_key_file"
_SSHPASS_ONLY = "belongs to password authentication, which sparkctl does not use"
# Refused ansible_* names, with why (any other unknown one: "not a connection variable
# sparkctl accepts").
REFUSED_VARS: dict[str, str] = {
    "ansible_ssh_host": _ALIAS.format("ansible_host"),
    "ansible_ssh_user": _ALIAS.format("ansible_user"),
    "ansible_ssh_port": _ALIAS.format("ansible_port"),
    "ansible_ssh_timeout": _ALIAS.format("ansible_timeout"),
    "ansible_ssh_pipelining": _ALIAS.format("ansible_pipelining"),
    "ansible_sudo_user": _ALIAS.format("ansible_become_user"),
    "ansible_su_user": _ALIAS.format("ansible_become_user"),
    "ansible_ssh_executable": _PROGRAM.format("on the controller instead of ssh"),
    "ansible_scp_executable": _PROGRAM.format("on the controller instead of scp"),
    "ansible_sftp_executable": _PROGRAM.format("on the controller instead of sftp"),
    "ansible_become_exe": _PROGRAM.format("on every host instead of sudo, as root"),
    "ansible_sudo_exe": _PROGRAM.format("on every host instead of sudo, as root"),
    "ansible_su_exe": _PROGRAM.format("on every host instead of su, as root"),
    "ansible_shell_executable": _PROGRAM.format("on every host for each task"),
    "ansible_become_flags": "adds words to the sudo command line on every host, as root",
    "ansible_sudo_flags": "adds words to the sudo command line on every host, as root",
    "ansible_su_flags": "adds words to the su command line on every host, as root",
    "ansible_control_path": _CONTROL,
    "ansible_control_path_dir": _CONTROL,
    "ansible_ssh_control_path": _CONTROL,
    "ansible_ssh_control_path_dir": _CONTROL,
    "ansible_ssh_pkcs11_provider": "loads a library into ssh on the controller",
    "ansible_private_key": _KEY_TEXT,
    "ansible_ssh_private_key": _KEY_TEXT,
    "ansible_sshpass_prompt": _SSHPASS_ONLY,
    "ansible_ssh_password_mechanism": _SSHPASS_ONLY,
}
_JUDGED_ELSEWHERE = frozenset(
    {
        *PASSWORD_VARS,
        *HOST_KEY_CHECKING_VARS,
        *HOST_KEY_AUTO_ADD_VARS,
        *SSH_ARGS_VARS,
        OWN_SSH_ARGS_VAR,
    }
)
# Every variable ansible-core's ssh connection, sudo and su become and sh shell plugins
# read, and its connection-wide ones (ansible-doc -t connection ssh; -t become sudo, su;
# -t shell sh; ansible.constants.MAGIC_VARIABLE_MAPPING): judged even when a fact of
# the same name exists.
PLUGIN_VARS = frozenset(
    {
        "ansible_async_dir",
        "ansible_admin_users",
        "ansible_common_remote_group",
        "ansible_connection_user",
        "ansible_docker_extra_args",
        "ansible_module_compression",
        "ansible_network_os",
        "ansible_remote_tmp",
        "ansible_sftp_batch_mode",
        "ansible_shell_allow_world_readable_temp",
        "ansible_shell_type",
        "ansible_ssh_use_tty",
        "ansible_ssh_verbosity",
        "ansible_sudo_chdir",
        "ansible_su_prompt_l10n",
        "ansible_system_tmpdirs",
    }
)
_JUDGED = frozenset({HOST_VAR, *CONNECTION_VARS, *REFUSED_VARS, *PLUGIN_VARS})
_CONNECTION_HINT = (
    "sparkctl accepts ansible_host and "
    + ", ".join(sorted(CONNECTION_VARS))
    + "; see docs/provision.md, connection variables"
)


def _odd_character(text: str) -> str | None:
    """The first character of ``text`` that is not printable ASCII or is a blank, named."""
    for char in text:
        if not (char.isascii() and char.isprintable()) or char.isspace():
            name = unicodedata.name(char, "a control character")
            return f"U+{ord(char):04X} ({name})"
    return None


def _address_problem(value: Any) -> str | None:
    """ansible_host beyond topology's IPv4 rule: Python reads ``'192.0.2.12\xa0'`` as an
    address (int() and strip() take Unicode blanks and digits), ssh does not. A value
    that is no IPv4 address at all is topology's to report."""
    if not isinstance(value, str) or ipv4(value) is None:
        return None
    odd = _odd_character(value)
    if odd is None:
        return None
    return f"{value!r} has {odd} in it: an address is ASCII letters, digits and dots"


def allowed_names_problems(host: str, hv: Mapping[str, Any]) -> list[Problem]:
    """The ``ansible_*`` variables of one host that sparkctl does not accept, or whose value
    is not of its shape (CONNECTION_VARS); the values of refused names are never shown."""
    problems: list[Problem] = []
    # A fact's name is no inventory variable, but the names this rule judges are never
    # facts: an inventory's own ``ansible_facts: {ssh_executable: ...}`` must not make
    # ansible_ssh_executable one.
    facts = fact_names(hv) - _JUDGED
    for name in sorted(hv):
        if (
            not name.startswith("ansible_")
            or (name in facts and "control_path" not in name)
            or name in ANSIBLE_SET
            or name in _JUDGED_ELSEWHERE
        ):
            continue
        value = hv[name]
        if name == HOST_VAR:
            wrong = _address_problem(value)
            if wrong is not None:
                problems.append(Problem(host, name, wrong))
            continue
        if name in CONNECTION_VARS:
            ok, words = CONNECTION_VARS[name]
            if value is not None and not ok(value):
                problems.append(Problem(host, name, f"{value!r} is not {words}"))
            continue
        why = REFUSED_VARS.get(name)
        if why is None and "control_path" in name:
            why = _CONTROL
        if why is not None:
            problems.append(
                Problem(
                    host,
                    name,
                    f"is refused: it {why}",
                    hint=_CONNECTION_HINT,
                )
            )
            continue
        close = difflib.get_close_matches(name, [HOST_VAR, *CONNECTION_VARS], n=1, cutoff=0.8)
        problems.append(
            Problem(
                host,
                name,
                "is not a connection variable sparkctl accepts",
                hint=f"did you mean {close[0]}?" if close else _CONNECTION_HINT,
            )
        )
    return problems


def check_connection(hosts: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Host names, and every ``ansible_*`` variable of every host: one of the accepted
    ones (CONNECTION_VARS), of the shape ssh expects; the ssh arguments' options that
    sparkctl leaves to itself (:func:`ssh_args_problems`); secrets outside the secret
    variables (:func:`.secrets.check_secrets`)."""
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
        problems += allowed_names_problems(host, hv)
        problems += ssh_args_problems(host, hv)
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
    # Secrets in every other hiding place (env maps, argument lists, URLs): checked
    # with the connection, before any rule that could show a value.
    return everywhere + check_secrets(hosts, hostvars)


def ssh_args_problems(host: str, hv: Mapping[str, Any]) -> list[Problem]:
    """What an inventory's ssh arguments may not set although ssh_options parses it,
    and sparkctl's own argument string:

    - ControlPath: the control socket is sparkctl's and Ansible's to place (validate's
      ssh_config and Ansible's control_path_dir put it in a directory of the user only);
    - ``ansible_ssh_extra_args`` is sparkctl's (:func:`own_ssh_args`): it names the one
      known_hosts file, ``sparkctl_known_hosts_file``, for every ssh Ansible runs. ssh
      checks a host against every file it is given, so a second file (in another
      UserKnownHostsFile, which ssh_options refuses anywhere else) would let its keys
      vouch for the hosts; sparkctl records and checks host keys in exactly one.

    Arguments ssh_options refuses are check_host_keys' to report.
    """
    problems: list[Problem] = []
    for var in SSH_ARGS_VARS:
        value = hv.get(var)
        if value is None:
            continue
        text = " ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        try:
            options = ssh_options(text)
        except ValueError:
            continue
        problems += [
            Problem(host, var, f"'{key}={option}' {_CONTROL}", hint=_CONNECTION_HINT)
            for key, option in options
            if key.lower() == "controlpath"
        ]
    own = hv.get(OWN_SSH_ARGS_VAR)
    if own is not None and own != own_ssh_args(hv):
        problems.append(
            Problem(
                host,
                OWN_SSH_ARGS_VAR,
                "is sparkctl's own: it passes ssh the known_hosts file of "
                f"{KNOWN_HOSTS_VAR} ({own_ssh_args(hv)!r}) and nothing else",
                hint="put ssh options in ansible_ssh_common_args, and the known_hosts "
                f"file in {KNOWN_HOSTS_VAR}",
            )
        )
    return problems


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
