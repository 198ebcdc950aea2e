"""The value formats a constraint names (``format:`` in roles/*/meta/constraints.yml)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from functools import cache

from sparkctl.collection import plugin

from .common import GROUP_NAME, GROUP_NAME_WORDS, HOST_NAME, USER_NAME, ipv4

# Directories every local user may write to (sticky, mode 1777, on Debian and Ubuntu:
# the Filesystem Hierarchy Standard's /tmp and /var/tmp, the shared-memory /dev/shm,
# /run/lock and its /var/lock link; macOS's /private/tmp). Anyone can plant a file or a
# link there before sparkctl writes, so a key or a secret never goes under them.
WORLD_WRITABLE = (
    "/tmp",  # noqa: S108 - a place refused, not used
    "/var/tmp",  # noqa: S108 - a place refused, not used
    "/dev/shm",  # noqa: S108 - a place refused, not used
    "/dev/mqueue",
    "/run/lock",
    "/var/lock",
    "/private/tmp",
    "/private/var/tmp",
)


def _abs_path(value: str) -> bool:
    """An absolute path of plain characters, no ``..`` and no empty component: a file a
    role writes stays where it says (``/../../tmp/x`` is refused)."""
    if value == "/":
        return True
    return bool(re.fullmatch(r"/[A-Za-z0-9_.,+@%=:/-]*", value)) and not any(
        part in ("", ".", "..") for part in value[1:].rstrip("/").split("/")
    )


def _controller_path(value: str) -> bool:
    """A path on the controller: absolute or from ``~``, same characters."""
    return _abs_path(value[1:] if value.startswith("~/") else value) if value != "~" else True


def world_writable(value: str) -> str | None:
    """The world-writable directory (WORLD_WRITABLE) ``value`` lies in, or None; compared
    by whole components, so /tmpfoo is not /tmp."""
    for top in WORLD_WRITABLE:
        if value == top or value.startswith(f"{top}/"):
            return top
    return None


def _ssh_file(value: str) -> bool:
    """A controller path (:func:`_controller_path`) that ssh takes as the one file it
    names: no ``%`` (ssh expands %h, %u, ... in a file option, which would make it a
    file per host or user) and no ``,`` or ``=``; not ``~`` itself, a directory."""
    return value != "~" and _controller_path(value) and not re.search(r"[%,=]", value)


def _private_path(value: str) -> bool:
    """A controller path (:func:`_controller_path`) outside every world-writable
    directory: where sparkctl keeps a key or a secret."""
    return _controller_path(value) and world_writable(value) is None


def _dir_name(value: str) -> bool:
    """One directory name: letters, digits, _ . -, starting with a letter or digit (so
    never ``.`` or ``..``), at most 63 characters; no ``/``."""
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value) is not None


def _unit_path(value: str) -> bool:
    """An absolute path (as :func:`_abs_path`) that a systemd unit line and docker's
    ``--volume SRC:DST:ro`` take as it is: no ``:`` (docker's separator), no ``%``
    (a systemd specifier in EnvironmentFile=) and no ``,``."""
    return _abs_path(value) and re.fullmatch(r"[A-Za-z0-9_.+@=/-]+", value) is not None


def _port_range(value: str) -> bool:
    """A TCP port or a range ``a-b`` with 1 <= a <= b <= 65535 (nft's and the sglang
    firewall filter's form)."""
    found = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", value)
    if found is None:
        return False
    low = int(found.group(1))
    return 1 <= low <= int(found.group(2) or low) <= 65535


def _hf_repo(value: str) -> bool:
    """``org/name`` as huggingface_hub's validate_repo_id takes it (utils/_validators.py:
    each part 1-96 of letters, digits and _ . -, not starting or ending with - or ., no
    ``--`` or ``..``), with the namespace required: ``org/..`` names no repository and
    ``--`` is the hub cache's separator (``models--org--name``)."""
    part = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
    return (
        re.fullmatch(rf"{part}/{part}", value) is not None
        and "--" not in value
        and ".." not in value
    )


def _power_of_two(value: str) -> bool:
    """A positive power of two written in digits (an int's text): 1, 2, 4 ... 1048576."""
    return (
        re.fullmatch(r"[0-9]+", value) is not None
        and int(value) > 0
        and int(value) & (int(value) - 1) == 0
    )


def _ifname(value: str) -> bool:
    """A Linux interface name (the kernel's dev_valid_name: 1-15 bytes, not . or ..,
    no '/', ':' or whitespace) of the characters netplan and nft take unquoted."""
    return bool(re.fullmatch(r"[A-Za-z0-9_.@-]{1,15}", value)) and value not in (".", "..")


_PROM_DURATION = re.compile(
    r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?"
)


def prom_duration_ms(value: object) -> int | None:
    """A Prometheus duration in milliseconds; None for what is not one (or is zero).
    The monitoring role's own parser (its filter ``monitoring_duration_ms``)."""
    if not isinstance(value, str) or not _prom_duration(value):
        return None
    return int(plugin("filter", "monitoring_config").duration_ms(value))


def _prom_duration(value: str) -> bool:
    """A Prometheus duration that is not empty and not zero (no interval is 0)."""
    return (
        bool(value)
        and _PROM_DURATION.fullmatch(value) is not None
        and any(c in "123456789" for c in value)
    )


def _host_port(value: str) -> bool:
    """``host:port``: a host name or IPv4 address (HOST_NAME), a TCP port 1-65535."""
    host, sep, port = value.rpartition(":")
    return (
        bool(sep)
        and HOST_NAME.fullmatch(host) is not None
        and port.isdigit()
        and port.isascii()
        and 1 <= int(port) <= 65535
    )


@cache
def _alert_names() -> frozenset[str]:
    """The alerts of sparkctl's rules file, the monitoring role's files/sparkctl-rules.yml,
    as its filter monitoring_rules finds them."""
    from sparkctl.paths import roles_dir  # noqa: PLC0415 - only where an alert is named

    text = (roles_dir() / "monitoring" / "files" / "sparkctl-rules.yml").read_text()
    return frozenset(plugin("filter", "monitoring_config").alert_names(text))


def _sparkctl_alert(value: str) -> bool:
    return value in _alert_names()


def _regex(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda value: compiled.fullmatch(value) is not None


def _ipv4_ok(value: str) -> bool:
    return ipv4(value) is not None and value == value.strip()


def _network_ok(value: str) -> bool:
    try:
        ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        return False
    return value == value.strip()


_IMAGE_NAME = r"[a-z0-9]+(?:[._-][a-z0-9]+)*"
_URL_REST = r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+=:@/-]*)?"  # host, port, path
FORMATS: dict[str, tuple[Callable[[str], bool], str]] = {
    "word": (_regex(r"[A-Za-z0-9_.,:/=@+-]+"), "one word (letters, digits and _ . , : / = @ + -)"),
    # A switch port's breakout mode (switch_ports.<port>.breakout): NVUE's own word
    # (`nv set interface swp1 link breakout 2x`: 1x 2x 4x 8x) or a SONiC platform.json
    # breakout mode as `config interface breakout` takes it (2x200G, 2x200G[100G,50G]).
    # Which of the two the switch takes, the switch_mtu role's preflight judges.
    "breakout": (
        _regex(r"[1-8]x(?:[1-9][0-9]{0,3}G(?:\[[0-9]{1,4}G(?:,[0-9]{1,4}G)*\])?)?"),
        "a breakout mode: 2x (NVUE) or 2x200G, 2x200G[100G,50G] (SONiC)",
    ),
    # `ssh -c` as the model relay takes it (roles/model_cache/files/sparkctl_model_relay.py
    # CIPHER): a name, or a comma list, of OpenSSH's lower-case cipher names.
    "ssh_ciphers": (
        _regex(r"[a-z0-9][a-z0-9@.,-]{0,255}"),
        "OpenSSH cipher names (ssh -Q cipher), one or a comma list, lower case",
    ),
    # A golden prompt or what its answer must contain (sglang_golden_prompts): sent in
    # a JSON body and shown in messages, so printable characters and blanks only.
    "prompt": (
        lambda v: 0 < len(v) <= 2000 and v.isprintable(),
        "printable text of 1-2000 characters (no newline, tab or control character)",
    ),
    "golden_field": (
        _regex(r"prompt|contains|same|max_tokens"),
        "one of prompt, contains, same, max_tokens",
    ),
    "text": (
        _regex(r"[A-Za-z0-9_.,:/=@+ ()-]*"),
        "plain text (letters, digits, blanks and _ . , : / = @ + ( ) -)",
    ),
    "env_name": (_regex(r"[A-Za-z_][A-Za-z0-9_]*"), "an environment variable name"),
    "env_value": (
        _regex(r"[A-Za-z0-9_.,:/=@^+%-]*"),
        "an environment value (no blanks, quotes, backslash, $ or #)",
    ),
    "abs_path": (
        _abs_path,
        "an absolute path without .. (letters, digits and _ . , + @ % = : / -)",
    ),
    "controller_path": (_controller_path, "an absolute path or one from ~, without .."),
    "ssh_file": (
        _ssh_file,
        "a file on the controller, absolute or from ~, without .. (letters, digits and "
        "_ . + @ : / -; no %, which ssh would expand)",
    ),
    "private_path": (
        _private_path,
        "an absolute path or one from ~, without .., outside the world-writable "
        "/tmp, /var/tmp, /dev/shm and /run/lock",
    ),
    "unit_path": (
        _unit_path,
        "an absolute path without .. (letters, digits and _ . + @ = / -; "
        "no : or %, which docker --volume and systemd read)",
    ),
    "ifname": (_ifname, "a Linux interface name (1-15 of letters, digits and _ . @ -)"),
    "ipv4": (_ipv4_ok, "an IPv4 address"),
    "ipv4_network": (_network_ok, "an IPv4 address or network (a.b.c.d/n)"),
    "hf_repo": (_hf_repo, "a Hugging Face repository id (org/name)"),
    "git_sha": (_regex(r"[0-9a-f]{40}"), "a full commit hash (40 hex digits)"),
    "version": (_regex(r"[0-9]+(?:\.[0-9]+)*"), "a version number (digits and dots)"),
    # PEP 440's normalized public versions (pip's ==): 0.5.17, 0.5.12.post1, 1.0rc2.
    "pip_version": (
        _regex(
            r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?"
            r"(?:\.dev[0-9]+)?"
        ),
        "a release version as pip writes it (0.5.17, 0.5.12.post1, 1.0rc2)",
    ),
    "package": (_regex(r"[a-z0-9][a-z0-9.+-]+"), "a Debian package name"),
    "package_pattern": (_regex(r"[a-z0-9*?][a-z0-9.+*?-]+"), "a Debian package name or glob (* ?)"),
    "user_name": (
        lambda v: USER_NAME.fullmatch(v) is not None,
        "a user name (letters, digits, . _ -, at most 32)",
    ),
    "group_name": (
        lambda v: GROUP_NAME.fullmatch(v) is not None,
        f"a name ({GROUP_NAME_WORDS})",
    ),
    "dir_name": (
        _dir_name,
        "a name of one directory (letters, digits, . _ -, at most 63), not a path",
    ),
    "host_or_ipv4": (
        lambda v: HOST_NAME.fullmatch(v) is not None,
        "a host name or an IPv4 address",
    ),
    "https_url": (_regex(rf"https://{_URL_REST}"), "an https:// URL without query or fragment"),
    "http_url": (
        _regex(rf"https?://{_URL_REST}"),
        "an http:// or https:// URL without query or fragment",
    ),
    "image_ref": (
        _regex(
            rf"{_IMAGE_NAME}(?:\.{_IMAGE_NAME})*(?::[0-9]{{1,5}})?"
            rf"(?:/{_IMAGE_NAME})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
        ),
        "a container image reference (registry/name:tag)",
    ),
    "digest": (_regex(r"sha256:[0-9a-f]{64}"), "an image digest (sha256:64 hex digits)"),
    # The sglang role's own rule for the API key (its preflight, and the launcher's file).
    "api_key": (
        _regex(r"[A-Za-z0-9._~+/=:-]{16,4096}"),
        "a key of 16 or more letters, digits and . _ ~ + / = : -",
    ),
    # A Hugging Face access token (hf_ and 34 letters and digits today; older
    # organisation tokens are api_org_...): one word, sent on the relay's stdin.
    "hf_token": (_regex(r"[A-Za-z0-9_-]{8,512}"), "a token (8 or more letters, digits, _ and -)"),
    "hostport_list": (_port_range, "a port or a port range a-b within 1-65535"),
    # nccl, nvidia_driver and validate (their meta/constraints.yml say where each goes):
    # a package-name part that is digits only (nvidia-driver-580-open) or digits and
    # dashes (cuda-toolkit-13-0, where 13.0 names no package), a git release tag (the
    # nccl role reads x.y.z of it for libnccl.so.x.y.z), an RDMA device of NCCL_IB_HCA
    # (the nccl role's own preflight rule), the two raw settings that take "auto", and
    # the nccl-tests sizes the sweep doubles between.
    "digits": (_regex(r"[0-9]+"), "digits only (such as 580)"),
    "dashed_version": (
        _regex(r"[0-9]+(?:-[0-9]+)*"),
        "a version with dashes as package names carry it (such as 13-0)",
    ),
    "release_tag": (
        _regex(r"v?[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9]+)?"),
        "a release tag (such as v2.28.9-1 or v2.18.3)",
    ),
    "ibdev": (
        _regex(r"[A-Za-z0-9_]+(?::[0-9]+)?"),
        "an RDMA device name, optionally with :port (such as rocep1s0f1 or mlx5_0:1)",
    ),
    "auto_or_int": (_regex(r"auto|[0-9]+"), "auto or a non-negative integer"),
    # The relay's --streams (sparkctl_model_relay.MAX_STREAMS is 32).
    "stream_count": (_regex(r"auto|[1-9]|[12][0-9]|3[0-2]"), "auto or a whole number 1-32"),
    "auto_bool": (_regex(r"(?i:auto|true|false|yes|no)"), "one of auto, true, false"),
    "power_of_two": (_power_of_two, "a power of two (such as 1048576 = 1 MiB)"),
    # The monitoring role: Prometheus durations (model/duration.go ParseDuration: units
    # y w d h m s ms, largest first, each at most once; not zero), and scrape targets.
    "prom_duration": (_prom_duration, "a Prometheus duration such as 15s, 1m or 15d"),
    "host_port": (_host_port, "host:port (a host name or IPv4 address, a port 1-65535)"),
    "sparkctl_alert": (
        _sparkctl_alert,
        "the name of an alert of sparkctl's rules (the monitoring role's "
        "files/sparkctl-rules.yml), such as SparkctlRankDown",
    ),
}
