"""``sparkctl trust``: record each host's SSH host key once, then notice when it changes.

Host key checking stays on everywhere. Each host's current keys are fetched
with ``ssh-keyscan`` (all hosts at once) and compared with the known_hosts
file every ssh of sparkctl and Ansible is given (``sparkctl_known_hosts_file``, else
``~/.ssh/known_hosts``; see :func:`sparkctl.remote.sshconfig.known_hosts_file`).
A host seen for the first time is recorded and its fingerprint shown, to be
compared with the machine's console; a host whose key changed is never
recorded over: the run stops naming it, with the command that accepts a
legitimate change (``--accept HOST``).

known_hosts is read in Python (plain, ``[addr]:port``, hashed ``|1|`` entries,
``*``/``?`` patterns and ``!`` negations, as ssh matches them; ``@cert-authority``
and ``@revoked`` lines are not host keys and are skipped); old entries are
removed with ``ssh-keygen -R``, which keeps the previous file as ``FILE.old``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import shlex
import struct
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkctl import console, inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.proc import require_tool, run
from sparkctl.remote.sshconfig import known_hosts_file

KEY_TYPES = "ed25519,ecdsa,rsa"  # what ssh-keyscan asks for, best first
SCAN_TIMEOUT_S = 5

Outcome = Literal["recorded", "unchanged", "changed", "replaced", "unreachable"]


# ------------------------------------------------------------------ keys
def fingerprint(blob: bytes) -> str:
    """``SHA256:...`` exactly as ``ssh-keygen -l`` prints it (base64, no padding)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _blob_type(blob: bytes) -> str | None:
    """The key type string a public key blob starts with (uint32 length, then the name)."""
    if len(blob) < 4:
        return None
    (size,) = struct.unpack(">I", blob[:4])
    if size > 64 or len(blob) < 4 + size:
        return None
    return blob[4 : 4 + size].decode("ascii", errors="replace")


@dataclass(frozen=True)
class HostKey:
    type: str  # ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, ...
    blob: bytes

    @classmethod
    def parse(cls, key_type: str, b64: str) -> HostKey | None:
        """A key from its known_hosts fields; None when the base64 or the type is wrong."""
        try:
            blob = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return None
        return cls(key_type, blob) if _blob_type(blob) == key_type else None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    @property
    def text(self) -> str:
        return f"{self.type} {base64.b64encode(self.blob).decode()}"

    @property
    def family(self) -> str:
        """ed25519, ecdsa or rsa: the name of its file on the host, /etc/ssh/ssh_host_*_key."""
        if self.type.startswith("ecdsa-"):
            return "ecdsa"
        return self.type.removeprefix("ssh-").split("@", 1)[0]

    @property
    def rank(self) -> int:
        """Preference order (ed25519 first), as ssh-keyscan was asked."""
        order = KEY_TYPES.split(",")
        return order.index(self.family) if self.family in order else len(order)


# ------------------------------------------------------------ known_hosts
def host_pattern(address: str, port: int) -> str:
    """How ssh names a host in known_hosts: ``addr``, or ``[addr]:port`` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def hash_host(name: str, salt: bytes) -> str:
    """A hashed known_hosts name (``|1|salt|HMAC-SHA1(salt, name)``), as HashKnownHosts writes."""
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _pattern_match(pattern: str, name: str) -> bool:
    """ssh's match_pattern: ``*`` and ``?`` wildcards, case-insensitive, nothing else."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.IGNORECASE | re.DOTALL) is not None


def names_match(field: str, name: str) -> bool:
    """Whether a known_hosts host field (hashed, or a comma list of patterns) names ``name``."""
    if field.startswith("|1|"):
        parts = field.split("|")
        if len(parts) != 4:
            return False
        try:
            salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
        except (binascii.Error, ValueError):
            return False
        got = hmac.new(salt, name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(got, want)
    found = False
    for pattern in field.split(","):
        if pattern.startswith("!"):
            if _pattern_match(pattern[1:], name):
                return False  # a negated match excludes the line whatever else matches
        elif _pattern_match(pattern, name):
            found = True
    return found


@dataclass(frozen=True)
class Entry:
    """One key line of a known_hosts file."""

    lineno: int
    marker: str | None  # @cert-authority, @revoked or None
    names: str
    key: HostKey

    @property
    def hashed(self) -> bool:
        return self.names.startswith("|1|")


def parse_known_hosts(text: str) -> list[Entry]:
    """Every well-formed key line (comments, blank and broken lines are skipped, as ssh does)."""
    entries: list[Entry] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3:
            continue
        key = HostKey.parse(fields[1], fields[2])
        if key is not None:
            entries.append(Entry(lineno, marker, fields[0], key))
    return entries


def recorded_keys(entries: Sequence[Entry], name: str) -> list[HostKey]:
    """The host keys recorded for ``name`` (markers are not host keys: skipped)."""
    return [e.key for e in entries if e.marker is None and names_match(e.names, name)]


def parse_keyscan(stdout: str) -> list[HostKey]:
    """``ssh-keyscan`` output lines (``name type base64``) as keys, best type first."""
    keys: list[HostKey] = []
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith("#"):
            continue
        key = HostKey.parse(fields[1], fields[2])
        if key is not None and key not in keys:
            keys.append(key)
    return sorted(keys, key=lambda k: k.rank)


# ------------------------------------------------------------------ decide
@dataclass(frozen=True)
class Target:
    name: str
    address: str
    port: int
    known_hosts: Path

    @property
    def pattern(self) -> str:
        return host_pattern(self.address, self.port)

    @property
    def where(self) -> str:
        return self.address if self.port == 22 else f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Result:
    target: Target
    outcome: Outcome
    key: HostKey | None = None  # what the host offers (the one recorded or compared)
    old: HostKey | None = None  # the recorded key it differs from (changed, replaced)

    def to_dict(self) -> dict[str, Any]:
        t = self.target
        return {
            "host": t.name,
            "address": t.address,
            "port": t.port,
            "known_hosts": str(t.known_hosts),
            "outcome": self.outcome,
            "key_type": self.key.type if self.key else None,
            "fingerprint": self.key.fingerprint if self.key else None,
            "recorded_fingerprint": self.old.fingerprint if self.old else None,
        }


def decide(target: Target, offered: Sequence[HostKey], recorded: Sequence[HostKey]) -> Result:
    """Compare what the host offers with what is recorded for it, key type by key type.

    As ssh does: a recorded key of the offered type that differs is a changed
    key; keys recorded only of types the host does not offer match nothing
    either (ssh would refuse the host too).
    """
    if not offered:
        return Result(target, "unreachable")
    best = min(offered, key=lambda k: k.rank)
    if not recorded:
        return Result(target, "recorded", best)
    matched: HostKey | None = None
    for key in sorted(offered, key=lambda k: k.rank):
        same_type = [r for r in recorded if r.type == key.type]
        if not same_type:
            continue
        if key in same_type:
            matched = matched or key
        else:
            return Result(target, "changed", key, same_type[0])
    if matched is not None:
        return Result(target, "unchanged", matched)
    return Result(target, "changed", best, recorded[0])


# -------------------------------------------------------------------- I/O
def targets(inv: inventory.Inventory) -> list[Target]:
    """Every Spark and the switch: name, management address, port, known_hosts file."""
    hosts = [(n.name, n.mgmt_ip) for n in inv.nodes]
    if inv.switch:
        hosts.append((inv.switch.name, inv.switch.mgmt_ip))
    out = []
    for name, address in hosts:
        hv = inv.hostvars[name]
        raw_port = hv.get("ansible_port") or hv.get("ansible_ssh_port") or 22
        try:
            port = int(raw_port)
        except (TypeError, ValueError):
            raise inventory.bad_input(
                inv.path, name, "ansible_port", f"{raw_port!r} is not a port number"
            ) from None
        out.append(Target(name, address, port, known_hosts_file(name, hv)))
    return out


def scan(keyscan: str, target: Target) -> list[HostKey]:
    """The host's keys, best type first; empty when it does not answer."""
    argv = [
        keyscan,
        "-T",
        str(SCAN_TIMEOUT_S),
        "-p",
        str(target.port),
        "-t",
        KEY_TYPES,
        "--",
        target.address,
    ]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            timeout=SCAN_TIMEOUT_S * 6,
        )
    except subprocess.TimeoutExpired:
        return []
    return parse_keyscan(proc.stdout)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise SparkctlError(
            f"{path}: cannot read known_hosts: {exc.strerror or exc}", ExitCode.ENVIRONMENT
        ) from None


def append(path: Path, lines: Sequence[str]) -> None:
    """Append lines to known_hosts; a new file is 0600 in a 0700 directory."""
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, mode=0o700)
        path.parent.chmod(0o700)
    text = _read(path)
    prefix = "\n" if text and not text.endswith("\n") else ""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as handle:
        handle.write(prefix + "".join(line + "\n" for line in lines))


def _line(target: Target, key: HostKey, hashed: bool) -> str:
    name = hash_host(target.pattern, os.urandom(20)) if hashed else target.pattern
    return f"{name} {key.text}"


def remove(keygen: str, target: Target) -> None:
    """Remove every entry for the host's address (and its inventory name) with ssh-keygen -R."""
    entries = parse_known_hosts(_read(target.known_hosts))
    for name in (target.pattern, host_pattern(target.name, target.port)):
        if any(names_match(e.names, name) for e in entries if e.marker is None):
            run(
                [keygen, "-R", name, "-f", str(target.known_hosts)],
                code=ExitCode.ENVIRONMENT,
                what=f"ssh-keygen -R {name} -f {target.known_hosts}",
            )


# ------------------------------------------------------------------ command
@dataclass(frozen=True)
class TrustRun:
    """Every host's outcome, returned for :mod:`sparkctl.present` to show.

    :meth:`notes` are the progress lines about what was written (they follow the
    table: "compare each new fingerprint above"); :meth:`failure` is the error the
    command exits with (a changed key, a host that did not answer), or None."""

    inventory_path: Path
    cluster: str
    results: tuple[Result, ...]
    accept: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "inventory": str(self.inventory_path),
            "cluster": self.cluster,
            "hosts": [r.to_dict() for r in self.results],
        }

    def notes(self) -> list[str]:
        return _notes(self.results, self.accept)

    def failure(self) -> SparkctlError | None:
        return _failure(self.inventory_path, self.results)


def trust(inv: inventory.Inventory, accept: Sequence[str] = ()) -> TrustRun:
    """Record first-contact host keys, check the others; every host's outcome."""
    todo = targets(inv)
    names = [t.name for t in todo]
    unknown = [a for a in accept if a not in names]
    if unknown:
        raise SparkctlError(
            f"--accept {', '.join(unknown)}: not a host of {inv.path} (hosts: {', '.join(names)})",
            ExitCode.BAD_INPUT,
        )
    keyscan = require_tool("ssh-keyscan", package="openssh-client")
    keygen = require_tool("ssh-keygen", package="openssh-client")
    with inventory_lock(inv, "trust"):  # every host, as the other commands take them
        console.progress(
            f"trust: fetching the host keys of {len(todo)} hosts ({inv.cluster}) with ssh-keyscan"
        )
        with ThreadPoolExecutor(max_workers=len(todo) or 1) as pool:
            offered = list(pool.map(lambda t: scan(keyscan, t), todo))
        results = [
            _apply(t, keys, keygen, accept=t.name in accept)
            for t, keys in zip(todo, offered, strict=True)
        ]
    return TrustRun(inv.path, inv.cluster, tuple(results), tuple(accept))


def _apply(target: Target, offered: list[HostKey], keygen: str, *, accept: bool) -> Result:
    """Decide one host and write what it calls for (nothing for a changed key unless accepted)."""
    entries = parse_known_hosts(_read(target.known_hosts))
    result = decide(target, offered, recorded_keys(entries, target.pattern))
    hashed = any(e.hashed for e in entries)
    if result.outcome == "changed" and accept and result.key is not None:
        remove(keygen, target)
        append(target.known_hosts, [_line(target, result.key, hashed)])
        return Result(target, "replaced", result.key, result.old)
    if result.outcome == "recorded" and result.key is not None:
        append(target.known_hosts, [_line(target, result.key, hashed)])
    return result


def _notes(results: Sequence[Result], accept: Sequence[str]) -> list[str]:
    """Progress lines for what was written."""
    out = []
    for r in results:
        if r.outcome == "replaced" and r.old and r.key:
            out.append(
                f"{r.target.name} ({r.target.where}): replaced {r.old.type} "
                f"{r.old.fingerprint} with {r.key.type} {r.key.fingerprint} in "
                f"{r.target.known_hosts} (previous file: "
                f"{r.target.known_hosts}.old)"
            )
        elif r.outcome == "recorded" and r.key:
            out.append(
                f"{r.target.name} ({r.target.where}): first contact, recorded "
                f"{r.key.fingerprint} in {r.target.known_hosts}"
            )
    for name in accept:
        r = next(r for r in results if r.target.name == name)
        if r.outcome == "unchanged":
            out.append(f"--accept {name}: its key has not changed, nothing to accept")
    new = [r for r in results if r.outcome in ("recorded", "replaced") and r.key]
    if new:
        families = sorted({r.key.family for r in new if r.key})
        out.append(
            "compare each new fingerprint above with the one on that machine's "
            "own console: "
            + "; ".join(f"ssh-keygen -lf /etc/ssh/ssh_host_{f}_key.pub" for f in families)
            + ". If one differs, do not use the host: remove its line "
            "(ssh-keygen -R ADDRESS -f KNOWN_HOSTS) and find out why"
        )
    return out


def _failure(inventory_path: Path, results: Sequence[Result]) -> SparkctlError | None:
    """The error for what stops the run: a changed key, then a host that did not answer."""
    changed = [r for r in results if r.outcome == "changed"]
    down = [r for r in results if r.outcome == "unreachable"]
    down_names = ", ".join(f"{r.target.name} ({r.target.where})" for r in down)
    down_text = f"\n  no answer from {down_names}" if down else ""
    if changed:
        inv = shlex.quote(str(inventory_path))
        lines = [
            f"{r.target.name} ({r.target.where}): recorded {r.old.type} {r.old.fingerprint}, "
            f"now offers {r.key.type} {r.key.fingerprint} (in {r.target.known_hosts})"
            for r in changed
            if r.old and r.key
        ]
        hosts = " ".join(f"--accept {r.target.name}" for r in changed)
        return SparkctlError(
            f"host key changed on {', '.join(r.target.name for r in changed)}; nothing was "
            "recorded for "
            + ("it" if len(changed) == 1 else "them")
            + "\n  "
            + "\n  ".join(lines)
            + down_text
            + f"\n  if the change is legitimate (reinstalled, keys regenerated) and the new "
            f"fingerprint matches the machine's console, accept it: sparkctl trust {inv} {hosts}",
            ExitCode.HOST_KEY_CHANGED,
            hint="a key that changed for no known reason can mean something is impersonating "
            "the host: do not accept it until you know why",
        )
    if down:
        return SparkctlError(
            f"no host key from {down_names}: "
            f"ssh-keyscan got no answer within {SCAN_TIMEOUT_S} s; the other hosts were handled",
            ExitCode.UNREACHABLE,
            hint="is the host up, and its address and ansible_port right in the inventory?",
        )
    return None
