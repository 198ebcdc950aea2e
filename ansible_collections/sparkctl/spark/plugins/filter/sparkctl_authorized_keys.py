"""The one writer of sparkctl's lines in a node's ``authorized_keys``.

A key that one node holds to reach another is a key every node holds: if any
node is taken, the key is taken. So no such key is written bare. Each line
gets, in front of the key, the options of sshd(8), "AUTHORIZED_KEYS FILE
FORMAT" (https://man.openbsd.org/sshd.8#AUTHORIZED_KEYS_FILE_FORMAT):

- ``restrict``: no port, agent or X11 forwarding, no pty, no ``~/.ssh/rc``
  (and any restriction a later OpenSSH adds);
- ``from="pattern-list"``: the key is refused unless the client's address
  matches one entry (CIDR ``address/masklen`` entries are allowed there);
- ``command="command"``: whatever the client asks, sshd runs this instead and
  shows the client's request in ``SSH_ORIGINAL_COMMAND``.

Every value is checked here, because sshd reads the options up to the first
unquoted space and takes ``\\"`` as a quote inside a value: a source that is not
an IP network (or one that matches every address), a command word with a
quote, a backslash or a control character, or a key that is not one
``type base64 [comment]`` line is an error, never a line.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # unit tests import this file without Ansible installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
COMMENT = re.compile(r"[A-Za-z0-9 ._@:+-]{0,200}")
WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def _networks(sources: Any, what: str) -> list[str]:
    if not isinstance(sources, (list, tuple)):
        raise AnsibleFilterError(f"{what}: {sources!r} is not a list of networks")
    out: list[str] = []
    for source in sources:
        if not isinstance(source, str):
            raise AnsibleFilterError(f"{what}: {source!r} is not an IP network")
        try:
            net = ipaddress.ip_network(source, strict=False)
        except ValueError:
            raise AnsibleFilterError(f"{what}: {source!r} is not an IP network") from None
        if net.prefixlen == 0:
            raise AnsibleFilterError(f"{what}: {source!r} matches every address")
        text = str(net.network_address) if net.num_addresses == 1 else str(net)
        if text not in out:
            out.append(text)
    return out


def _addresses(values: Any) -> list[str]:
    """A node's own addresses, as sshd compares them: literal IPs only (a name is
    matched only with UseDNS, which is off by default), loopback left out."""
    if not isinstance(values, (list, tuple)):
        raise AnsibleFilterError(f"addresses: {values!r} is not a list")
    out: list[str] = []
    for value in values:
        try:
            addr = ipaddress.ip_address(value if isinstance(value, str) else "")
        except ValueError:
            continue
        if not addr.is_loopback and not addr.is_unspecified and str(addr) not in out:
            out.append(str(addr))
    return out


def _key(public_key: Any) -> str:
    text = public_key.strip() if isinstance(public_key, str) else ""
    parts = text.split(" ", 2)
    if (
        "\n" in text
        or len(parts) < 2
        or parts[0] not in KEY_TYPES
        or not BASE64.fullmatch(parts[1])
        or (len(parts) == 3 and not COMMENT.fullmatch(parts[2]))
    ):
        raise AnsibleFilterError(
            "the public key is not one 'type base64 [comment]' line of an OpenSSH key"
        )
    return text


def _command(words: Any) -> str:
    if not isinstance(words, (list, tuple)) or not words:
        raise AnsibleFilterError(f"command: {words!r} is not a list of words")
    for word in words:
        if not isinstance(word, str) or not WORD.fullmatch(word):
            raise AnsibleFilterError(
                f"command: {word!r} is not a plain word (letters, digits and _@%+=:,./- only)"
            )
    return shlex.join(words)


def sparkctl_authorized_key(
    public_key: str,
    sources: list[str],
    addresses: list[str] | tuple[str, ...] = (),
    command: list[str] | None = None,
) -> str:
    """``restrict,from="...",[command="...",]<key>``: the key usable only from
    ``sources`` (networks) and ``addresses`` (the nodes' own; names and loopback
    are skipped), and, given ``command``, for that command only."""
    allowed = _networks(sources, "sources") + _addresses(addresses)
    if not allowed:
        raise AnsibleFilterError("no source address: the key would be usable from nowhere")
    options = ["restrict", f'from="{",".join(dict.fromkeys(allowed))}"']
    if command is not None:
        options.append(f'command="{_command(command)}"')
    return f"{','.join(options)} {_key(public_key)}"


class FilterModule:
    """authorized_keys filters shared by the roles (base, model_cache)."""

    def filters(self) -> dict[str, Any]:
        return {"sparkctl_authorized_key": sparkctl_authorized_key}
