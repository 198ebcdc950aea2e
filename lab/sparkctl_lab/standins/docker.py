#!/usr/bin/python3
"""``docker`` stand-in for sparkctl rehearsal-lab nodes (no dockerd, no runc, no GPU).

Installed on every lab node as ``/usr/bin/docker`` (sparkctl_lab.standins,
the one table of what goes where). It answers the docker CLI commands
sparkctl's roles and ``sparkctl serve`` use with docker's own flags, output,
error texts and exit codes, and does the work: ``docker run`` starts the
command in namespaces of its own, on a root filesystem made of the image and
the ``--volume`` binds only, with only the image's and the given environment.

Sources (docker/cli at v28.5.2 unless noted, the CLI DGX OS 7 ships is
docker-ce 28): flags and defaults ``docs/reference/commandline/
container_run.md``; exit status and error wrapping ``cli/command/container/
run.go`` (``toStatusError``: 125 daemon errors, 126 "permission denied", 127
"not found"/"no such file or directory"; ``withHelp``: ``docker: <err>\\n\\n
Run 'docker run --help' for more information``); flag errors ``cli/cobra.go``
``FlagErrorFunc`` (status 125); env files ``pkg/kvfile/kvfile.go``; pull
policy ``cli/command/container/create.go`` (``Unable to find image '%s'
locally``, ``invalid pull option``); ``docker pull`` output ``cli/command/
image/pull.go`` and moby ``distribution/pull_v2.go`` (a reference with a tag and
a digest is pulled by the digest alone, moby ``client/image_pull.go``
``getAPITagFromNamedRef``: the image gets no tag); ``docker tag`` ``cli/command/
image/tag.go``, moby ``client/image_tag.go`` and ``daemon/images/image_tag.go``;
``docker image prune`` and ``docker container prune`` ``cli/command/{image,
container}/prune.go`` (output), moby ``daemon/images/image_prune.go``,
``daemon/images/image_delete.go`` (which image goes, conflicts) and
``daemon/prune.go``; ``docker images`` rows ``cli/command/formatter/image.go``;
rm/stop/inspect
``cli/command/container/{rm,stop}.go``, ``cli/command/inspect/
inspector.go``, ``cli/command/system/inspect.go``. Daemon texts (moby):
``No such container: %s``, ``No such image: %s``, ``Conflict. The container
name %q is already in use by container %q. You have to remove (or rename)
that container to be able to reuse that name.`` (daemon/errors.go),
``cannot remove container "/%s": container is running: stop the container
before removing or force remove`` (daemon/delete.go), ``error gathering
device information while adding custom device %q: no such file or
directory`` (daemon/oci_linux.go). GPU errors: ``could not select device
driver "" with capabilities: [[gpu]]`` without the NVIDIA runtime, and the
nvidia-container-cli hook's ``nvml error: driver not loaded`` when the
driver is not loaded (NVIDIA/nvidia-container-toolkit #230, #260).

How a container is made (the same on a lab node, a podman container without
CAP_SYS_ADMIN, and on the controller as root): the shim (``__shim``, the
stand-in's containerd-shim) forks a process that calls ``unshare(CLONE_NEWUSER
| CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS [| CLONE_NEWIPC] [|
CLONE_NEWNET])``; the shim, outside, writes its ``uid_map``/``gid_map`` as
``0 0 65536`` (identity: ``--user 1000:1000`` is a real setuid inside, files
keep their owners); that process forks PID 1 of the new PID namespace, which
builds the root filesystem in a tmpfs and chroots into it:

- the image's own files (its /etc, /sgl-workspace, /usr/local ...),
  copied per container (a writable, throw-away layer);
- the image's base OS layer is the node's ``/usr`` (the image ships none),
  mounted as an overlay whose writes stay in the container, with the lab's
  host-only tools (nvidia-smi, ibdev2netdev, show_gids, docker) deleted from
  it, since the real image has none of them; ``/usr/local`` is the image's
  only; ld.so.cache and ``/etc/alternatives`` come with the base layer;
- ``/proc`` (a new procfs where the kernel allows it; a lab node's podman
  masks /proc so only a bind of the node's /proc is possible there: it then
  shows the node's processes, not only the container's), ``/sys`` read-only,
  a ``/dev`` tmpfs with null, zero, full, random, urandom, tty, ``/dev/shm``
  (the node's with ``--ipc host``, else a private 64 MB tmpfs, docker's
  default shm size);
- ``/etc/hostname``, ``/etc/hosts``, ``/etc/resolv.conf`` bound from the
  container's directory, as dockerd does;
- each ``--volume SRC:DST[:ro]`` (a missing SRC becomes a directory on the
  node, as docker does for -v), each ``--device``;
- with ``--gpus``: the node's nvidia-smi and its hardware.json, as
  nvidia-container-toolkit mounts nvidia-smi and the driver into a container.

Nothing else of the node is visible. The process gets only the image's ENV,
``--env-file`` and ``-e`` values, plus PATH/HOSTNAME/HOME the way dockerd and
runc add them: never the caller's environment. As PID 1 of its namespace it
ignores every signal it has no handler for, SIGTERM included (pid_namespaces(7)),
the trap real containers have; ``docker stop`` sends SIGTERM, then SIGKILL
after ``--time``.

Containers outlive the ``docker run`` that started them, as under dockerd:
when systemd is PID 1 the shim runs in a transient ``docker-<id>.scope`` in
system.slice (``systemd-run --scope``), which is where docker's systemd
cgroup driver puts containers, so stopping a unit whose ExecStart is ``docker
run`` (without ExecStop=) kills the client and leaves the container running,
as on a Spark. Elsewhere (the controller's tests) the shim is only in a new
session.

Not faithful, and why:

- root in the container has capabilities in its own user namespace only
  (binding ports below 1024 on ``--network host``, loading modules, writing
  host sysctls fail; real containers get docker's default capability set in
  the host's namespace); a lab node has no CAP_SYS_ADMIN to do otherwise;
- on a lab node ``/proc`` is the node's (see above): ``ps`` in a container
  fails ("fatal library error, lookup self") and other processes of the node
  are visible; on a host that allows a new procfs (the controller) it is the
  container's own;
- on a lab node the container keeps the node's hostname (podman's seccomp
  profile refuses sethostname without CAP_SYS_ADMIN); with ``--network
  host``, the only mode sparkctl uses, docker gives the node's name anyway;
- ``--ulimit`` above the node's hard limit (raising one needs
  CAP_SYS_RESOURCE, which a lab node lacks; the lab's containers.conf caps
  memlock) is lowered to it, with a WARNING line on the container's stderr;
- ``--network`` other than ``host`` is a network namespace with loopback only
  (the lab has no bridge or NAT); one image store, no layers shared between
  images; no TTY (``-t``), no ``-i``, no ``exec``/``attach``/``build``/
  ``push``; every such flag or command is refused naming this stand-in;
- ``image prune``/``container prune`` without ``-f`` (docker asks on the
  terminal) and with ``--filter`` are refused naming this stand-in; container
  prune reports 0B reclaimed (no writable-layer sizes here); the image store is
  the graphdriver one (docker 28's default), not the containerd image store;
- ``--format`` templates are the Go-template forms sparkctl uses
  (``.Field.Path``, ``json``, ``index``, ``join``, ``lower``, ``upper``,
  ``len``); anything else is refused naming this stand-in.

Stdlib only; state in ``/var/lib/docker`` (``SPARKCTL_LAB_DOCKER_ROOT``), the
registry in ``/etc/sparkctl-lab/registry`` (``SPARKCTL_LAB_REGISTRY``), the
node's hardware description in ``/etc/sparkctl-lab/hardware.json``
(``SPARKCTL_LAB_HW``).
"""

# ruff: noqa: PTH100, PTH101, PTH102, PTH103, PTH108, PTH110, PTH112, PTH113, PTH114, PTH115, PTH116, PTH118, PTH123, PTH208, PTH211
# (os.path strings on purpose: they go to mount(2), chroot(2) and execve(2).)

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import resource
import secrets
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

# ------------------------------------------------------------------ constants

DOCKER_VERSION = "28.5.2"
API_VERSION = "1.51"
STANDIN = "docker (sparkctl lab stand-in)"

ROOT_ENV = "SPARKCTL_LAB_DOCKER_ROOT"
REGISTRY_ENV = "SPARKCTL_LAB_REGISTRY"
HW_ENV = "SPARKCTL_LAB_HW"
DEFAULT_ROOT = "/var/lib/docker"
DEFAULT_REGISTRY = "/etc/sparkctl-lab/registry"
DEFAULT_HW = "/etc/sparkctl-lab/hardware.json"

# Files the lab installs on a node that the real image does not have: deleted
# from the container's /usr (sparkctl_lab.standins.PLACEMENTS; a unit test
# keeps the two equal). nvidia-smi comes back with --gpus.
HOST_ONLY_TOOLS: tuple[str, ...] = (
    "/usr/bin/docker",
    "/usr/bin/ibdev2netdev",
    "/usr/bin/nvidia-smi",
    "/usr/bin/show_gids",
)
NVIDIA_SMI = "/usr/bin/nvidia-smi"

# moby oci.DefaultPathEnv for Linux containers.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_STOP_TIMEOUT = 10  # seconds (moby container/container.go DefaultStopTimeout)
DEFAULT_SHM_SIZE = 64 * 1024 * 1024  # moby config.DefaultShmSize
ZERO_TIME = "0001-01-01T00:00:00Z"

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
ST_RELATIME = 4096
ID_MAP = "0 0 65536"

SIGNALS: dict[str, int] = {
    s.name.removeprefix("SIG"): int(s) for s in signal.Signals if not s.name.startswith("SIG_")
}


class DockerError(Exception):
    """An error docker prints on stderr, with the exit status it exits with."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def daemon(message: str) -> str:
    """How the docker client shows an error the daemon answered with."""
    return f"Error response from daemon: {message}"


def with_help(message: str, command: str) -> str:
    """docker/cli run.go ``withHelp``."""
    return f"docker: {message}\n\nRun 'docker {command} --help' for more information"


def status_of_start_error(message: str) -> int:
    """docker/cli run.go ``toStatusError``: 127, 126 or 125 from the message."""
    if "executable file not found" in message or "no such file or directory" in message:
        return 127
    if "permission denied" in message or "is a directory" in message:
        return 126
    return 125


def now_rfc3339() -> str:
    """Go's time.RFC3339Nano in UTC, as docker's JSON carries times."""
    ns = time.time_ns()
    secs, frac = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    return f"{stamp}.{frac:09d}".rstrip("0").rstrip(".") + "Z"


def parse_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time written by :func:`now_rfc3339`."""
    if not text or text.startswith("0001-"):
        return 0.0
    main, _, frac = text.rstrip("Z").partition(".")
    base = time.mktime(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) - time.timezone
    return base + (float(f"0.{frac}") if frac else 0.0)


def human_duration(seconds: float) -> str:  # noqa: PLR0911 -- one return per unit, as go-units has it
    """docker/go-units ``HumanDuration``."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = int(seconds / 60)
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = int(seconds / 3600 + 0.5)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{int(seconds / 3600) // 24 // 365} years"


def human_size(size: float, precision: int = 3) -> str:
    """docker/go-units ``HumanSizeWithPrecision(size, precision)`` (decimal units): 3 in
    docker/cli's listings (formatter/image.go), 4 in ``HumanSize`` (size.go), which the
    prune commands print."""
    units = ["B", "kB", "MB", "GB", "TB", "PB"]
    i = 0
    while size >= 1000 and i < len(units) - 1:
        size /= 1000
        i += 1
    return f"{size:.{precision}g}{units[i]}"


# ------------------------------------------------------------------ paths


def data_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def registry_root() -> Path:
    return Path(os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY)


def hardware_path() -> Path:
    return Path(os.environ.get(HW_ENV) or DEFAULT_HW)


# ------------------------------------------------------------------ references

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"^(?:{_COMPONENT})(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Ref:
    """An image reference in familiar form (distribution/reference, normalize.go)."""

    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> Ref:
        if not text or text != text.strip() or len(text) > 255:
            raise DockerError(f"invalid reference format: {text!r}", 125)
        rest, _, digest = text.partition("@")
        if digest and not _DIGEST.match(digest):
            raise DockerError("invalid reference format", 125)
        name, tag = rest, None
        if rest.rfind(":") > rest.rfind("/"):
            name, _, tag = rest.rpartition(":")
            if not _TAG.match(tag):
                raise DockerError("invalid reference format", 125)
        first, _, remainder = name.partition("/")
        if remainder and first in {"docker.io", "index.docker.io", "registry-1.docker.io"}:
            name = remainder
        name = name.removeprefix("library/")
        if not _NAME.match(name):
            raise DockerError("invalid reference format: repository name must be lowercase", 125)
        return cls(name, tag, digest or None)

    @property
    def tagged(self) -> str:
        """``repository:tag`` (``latest`` when untagged), the name a tag lookup uses."""
        return f"{self.repository}:{self.tag or 'latest'}"

    @property
    def canonical(self) -> str:
        if not self.digest:
            raise DockerError(f"{self.repository}: no digest")
        return f"{self.repository}@{self.digest}"

    @property
    def familiar(self) -> str:
        """reference.FamiliarString of TagNameOnly(ref)."""
        if self.digest:
            tag = f":{self.tag}" if self.tag else ""
            return f"{self.repository}{tag}@{self.digest}"
        return self.tagged

    @property
    def normalized(self) -> str:
        """ref.String() of the normalized reference (``docker.io/...``)."""
        repo = self.repository if "/" in self.repository else f"library/{self.repository}"
        first = repo.split("/", 1)[0]
        host = "" if ("." in first or ":" in first or first == "localhost") else "docker.io/"
        if self.digest:
            return f"{host}{repo}{':' + self.tag if self.tag else ''}@{self.digest}"
        return f"{host}{repo}:{self.tag or 'latest'}"


# ------------------------------------------------------------------ flags


@dataclass(frozen=True)
class Flag:
    long: str
    short: str = ""
    kind: str = "bool"  # bool | str | list | int
    default: Any = None
    deprecated: str = ""


class Parsed:
    """Values of parsed flags (lists accumulate) and which were set."""

    def __init__(self, flags: Sequence[Flag]) -> None:
        self.values: dict[str, Any] = {}
        self.changed: set[str] = set()
        for f in flags:
            self.values[f.long] = [] if f.kind == "list" else f.default

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


def parse_flags(  # noqa: PLR0912, PLR0915
    args: Sequence[str],
    flags: Sequence[Flag],
    *,
    command: str,
    usage: str,
    interspersed: bool = True,
) -> tuple[Parsed, list[str]]:
    """pflag's parsing: ``--name value``, ``--name=value``, ``-n value``, ``-nvalue``,
    bundled short booleans, ``--`` ends flags; without interspersing (docker run)
    the first positional ends them. Errors are docker's, with status 125."""
    by_long = {f.long: f for f in flags}
    by_short = {f.short: f for f in flags if f.short}
    parsed = Parsed(flags)
    positionals: list[str] = []

    def fail(problem: str) -> NoReturn:
        raise DockerError(
            f"{problem}\n\nUsage:  {usage}\n\nRun '{command} --help' for more information", 125
        )

    def assign(f: Flag, value: str, shown: str) -> None:
        if f.deprecated:
            print(f"Flag --{f.long} has been deprecated, {f.deprecated}", file=sys.stderr)
        parsed.changed.add(f.long)
        if f.kind == "bool":
            low = value.lower()
            if low not in {"true", "false", "1", "0", "t", "f"}:
                fail(
                    f'invalid argument "{value}" for "{shown}" flag: strconv.ParseBool: '
                    f'parsing "{value}": invalid syntax'
                )
            parsed.values[f.long] = low in {"true", "1", "t"}
        elif f.kind == "int":
            try:
                parsed.values[f.long] = int(value)
            except ValueError:
                fail(
                    f'invalid argument "{value}" for "{shown}" flag: strconv.ParseInt: '
                    f'parsing "{value}": invalid syntax'
                )
        elif f.kind == "list":
            parsed.values[f.long].append(value)
        else:
            parsed.values[f.long] = value

    i = 0
    args = list(args)
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positionals += args[i:]
            break
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg[2:].partition("=")
            f = by_long.get(name)
            if f is None:
                fail(f"unknown flag: --{name}")
            if f.kind == "bool":
                assign(f, value if eq else "true", f"--{name}")
                continue
            if not eq:
                if i >= len(args):
                    fail(f"flag needs an argument: --{name}")
                value = args[i]
                i += 1
            assign(f, value, f"--{name}")
            continue
        if arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                ch = arg[j]
                f = by_short.get(ch)
                if f is None:
                    fail(f"unknown shorthand flag: '{ch}' in {arg}")
                j += 1
                if f.kind == "bool":
                    if j < len(arg) and arg[j] == "=":
                        assign(f, arg[j + 1 :], f"-{ch}, --{f.long}")
                        break
                    assign(f, "true", f"-{ch}, --{f.long}")
                    continue
                value = arg[j:].removeprefix("=")
                if not value:
                    if i >= len(args):
                        fail(f"flag needs an argument: '{ch}' in -{ch}")
                    value = args[i]
                    i += 1
                assign(f, value, f"-{ch}, --{f.long}")
                break
            continue
        positionals.append(arg)
        if not interspersed:
            positionals += args[i:]
            break
    return parsed, positionals


# ------------------------------------------------------------------ templates


class TemplateError(Exception):
    pass


def go_format(value: Any) -> str:
    """How text/template prints a value (fmt's %v)."""
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + " ".join(go_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_format(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def go_json(value: Any) -> str:
    """docker/cli templates ``json``: encoding/json without HTML escaping."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.S)
_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(-?\d+)|(\.[A-Za-z0-9_.]*)|([A-Za-z]\w*))')
SUPPORTED = (
    "{{.Field.Path}}, {{json .X}}, {{index .X N}}, {{join .X SEP}}, {{lower .X}}, "
    "{{upper .X}}, {{len .X}}"
)


def _tokens(expr: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise TemplateError(
                f"{STANDIN}: template action {{{{{expr}}}}} is not supported "
                f"(supported: {SUPPORTED})"
            )
        pos = m.end()
        if m.group(1) is not None:
            out.append(("str", json.loads(m.group(1))))
        elif m.group(2) is not None:
            out.append(("int", int(m.group(2))))
        elif m.group(3) is not None:
            out.append(("field", m.group(3)))
        else:
            out.append(("func", m.group(4)))
    return out


def _field(data: Any, path: str, action: str) -> Any:
    value = data
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict):
            if part not in value:
                raise TemplateError(
                    f"template parsing error: template: :1:{action}: "
                    f'executing "" at <{path}>: map has no entry for key '
                    f'"{part}"'
                )
            value = value[part]
        else:
            raise TemplateError(
                f'template parsing error: template: :1: executing "" at '
                f"<{path}>: can't evaluate field {part} in type "
                f"{type(value).__name__}"
            )
    return value


def _evaluate(expr: str, data: Any) -> str:
    toks = _tokens(expr)
    if not toks:
        raise TemplateError("template parsing error: template: :1: missing value for command")

    def arg(tok: tuple[str, Any]) -> Any:
        kind, val = tok
        if kind == "field":
            return _field(data, val, expr)
        if kind in {"str", "int"}:
            return val
        raise TemplateError(
            f"{STANDIN}: template function {val!r} is not supported (supported: {SUPPORTED})"
        )

    kind, head = toks[0]
    if kind != "func":
        if len(toks) != 1:
            raise TemplateError(
                f"{STANDIN}: template action {{{{{expr}}}}} is not supported "
                f"(supported: {SUPPORTED})"
            )
        return go_format(arg(toks[0]))
    args = [arg(t) for t in toks[1:]]
    if head == "json" and len(args) == 1:
        return go_json(args[0])
    if head == "index" and len(args) >= 2:
        value = args[0]
        for key in args[1:]:
            try:
                value = value[key]
            except (IndexError, KeyError, TypeError):
                raise TemplateError(
                    f'template parsing error: template: :1: executing "" '
                    f"at <index {expr[6:].strip()}>: error calling index: "
                    f"index out of range: {key}"
                ) from None
        return go_format(value)
    if head == "join" and len(args) == 2 and isinstance(args[0], list):
        return str(args[1]).join(go_format(v) for v in args[0])
    if head in {"lower", "upper"} and len(args) == 1:
        text = go_format(args[0])
        return text.lower() if head == "lower" else text.upper()
    if head == "len" and len(args) == 1 and isinstance(args[0], (list, dict, str)):
        return str(len(args[0]))
    raise TemplateError(
        f"{STANDIN}: template action {{{{{expr}}}}} is not supported (supported: {SUPPORTED})"
    )


def render(template: str, data: Any) -> str:
    """Execute a Go template of the supported forms against JSON-like data."""
    template = template.replace("\\t", "\t").replace("\\n", "\n")
    out: list[str] = []
    pos = 0
    for m in _ACTION.finditer(template):
        out.append(template[pos : m.start()])
        out.append(_evaluate(m.group(1), data))
        pos = m.end()
    out.append(template[pos:])
    return "".join(out)


def check_template(template: str) -> None:
    """Refuse an unsupported template before running anything (docker parses first)."""
    for m in _ACTION.finditer(template):
        for kind, val in _tokens(m.group(1)):
            if kind == "func" and val not in {"json", "index", "join", "lower", "upper", "len"}:
                raise TemplateError(
                    f"{STANDIN}: template function {val!r} in "
                    f"{{{{{m.group(1)}}}}} is not supported (supported: "
                    f"{SUPPORTED})"
                )


# ------------------------------------------------------------------ store


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def _proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: tells a live process from a reused PID."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[19]


class Store:
    """dockerd's state: images (``image/``) and containers (``containers/``)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or data_root()
        self.images = self.root / "image"
        self.containers = self.root / "containers"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o710)
        with (self.root / ".lock").open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    # images -----------------------------------------------------------------
    def repositories(self) -> dict[str, str]:
        """``repositories.json`` flattened: reference (name:tag or name@digest) -> image id."""
        path = self.images / "repositories.json"
        if not path.exists():
            return {}
        data = json.loads(path.read_text())
        flat: dict[str, str] = {}
        for refs in data.get("Repositories", {}).values():
            flat.update(refs)
        return flat

    def _save_repositories(self, flat: dict[str, str]) -> None:
        grouped: dict[str, dict[str, str]] = {}
        for ref, image_id in sorted(flat.items()):
            repo = re.split(r"[:@]", ref, maxsplit=1)[0]
            grouped.setdefault(repo, {})[ref] = image_id
        self.images.mkdir(parents=True, exist_ok=True)
        _write_json(self.images / "repositories.json", {"Repositories": grouped})

    def image_dir(self, image_id: str) -> Path:
        return self.images / "sha256" / image_id.removeprefix("sha256:")

    def image_ids(self) -> list[str]:
        base = self.images / "sha256"
        if not base.is_dir():
            return []
        return sorted("sha256:" + p.name for p in base.iterdir() if (p / "config.json").exists())

    def image_config(self, image_id: str) -> dict[str, Any]:
        return json.loads((self.image_dir(image_id) / "config.json").read_text())  # type: ignore[no-any-return]

    def resolve_image(self, text: str) -> str | None:
        """The image id ``text`` names: a reference (digest favoured over tag, as moby's
        reference store does), or an id or unique id prefix."""
        repos = self.repositories()
        with contextlib.suppress(DockerError):
            ref = Ref.parse(text)
            key = ref.canonical if ref.digest else ref.tagged
            if key in repos:
                return repos[key]
        hexpart = text.removeprefix("sha256:")
        if re.fullmatch(r"[0-9a-f]{1,64}", hexpart):
            found = [i for i in self.image_ids() if i.removeprefix("sha256:").startswith(hexpart)]
            if len(found) == 1:
                return found[0]
        return None

    def image_inspect(self, image_id: str) -> dict[str, Any]:
        config = self.image_config(image_id)
        refs = [r for r, i in self.repositories().items() if i == image_id]
        layer = self.image_dir(image_id) / "layer.size"
        size = int(layer.read_text()) if layer.exists() else 0
        meta = self.image_dir(image_id) / "meta.json"
        last_tag = json.loads(meta.read_text()).get("LastTagTime", "") if meta.exists() else ""
        cfg = config.get("config", {})
        return {
            "Id": image_id,
            "RepoTags": sorted(r for r in refs if "@" not in r),
            "RepoDigests": sorted(r for r in refs if "@" in r),
            "Parent": "",
            "Comment": "",
            "Created": config.get("created", ZERO_TIME),
            "DockerVersion": "",
            "Author": "",
            "Config": {
                "Hostname": "",
                "Domainname": "",
                "User": cfg.get("User", ""),
                "AttachStdin": False,
                "AttachStdout": False,
                "AttachStderr": False,
                "Tty": False,
                "OpenStdin": False,
                "StdinOnce": False,
                "Env": cfg.get("Env"),
                "Cmd": cfg.get("Cmd"),
                "Image": "",
                "Volumes": None,
                "WorkingDir": cfg.get("WorkingDir", ""),
                "Entrypoint": cfg.get("Entrypoint"),
                "OnBuild": None,
                "Labels": cfg.get("Labels"),
            },
            "Architecture": config.get("architecture", ""),
            "Os": config.get("os", "linux"),
            "Size": size,
            "GraphDriver": {"Data": None, "Name": "sparkctl-lab-standin"},
            "RootFS": {"Type": "layers", "Layers": config.get("rootfs", {}).get("diff_ids", [])},
            "Metadata": {"LastTagTime": last_tag or ZERO_TIME},
        }

    # containers ---------------------------------------------------------------
    def container_dir(self, cid: str) -> Path:
        return self.containers / cid

    def container_ids(self) -> list[str]:
        if not self.containers.is_dir():
            return []
        return [p.name for p in self.containers.iterdir() if (p / "container.json").exists()]

    def load(self, cid: str) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(
                (self.container_dir(cid) / "container.json").read_text()
            )
        except (OSError, ValueError):
            return None
        state = record["inspect"]["State"]
        # A running container whose PID 1 is gone without the shim noticing
        # (the node restarted, the shim was killed): dockerd marks such
        # containers exited when it restores them.
        if state["Running"] and _proc_start_time(state["Pid"]) != record["standin"].get(
            "pid_start"
        ):
            shim = record["standin"].get("shim_pid", 0)
            if not shim or _proc_start_time(shim) != record["standin"].get("shim_start"):
                state.update(
                    Running=False,
                    Status="exited",
                    Pid=0,
                    ExitCode=255,
                    FinishedAt=now_rfc3339(),
                    Error=f"{STANDIN}: the container's shim is gone",
                )
        return record

    def save(self, record: dict[str, Any]) -> None:
        directory = self.container_dir(record["inspect"]["Id"])
        if directory.is_dir():
            _write_json(directory / "container.json", record)

    def all_containers(self) -> list[dict[str, Any]]:
        records = [r for r in (self.load(c) for c in self.container_ids()) if r]
        return sorted(records, key=lambda r: r["inspect"]["Created"], reverse=True)

    def find(self, name_or_id: str) -> dict[str, Any] | None:
        """A container by name, full id or unique id prefix (moby daemon.GetContainer)."""
        records = self.all_containers()
        name = "/" + name_or_id.lstrip("/")
        for r in records:
            if r["inspect"]["Id"] == name_or_id:
                return r
        for r in records:
            if r["inspect"]["Name"] == name:
                return r
        if re.fullmatch(r"[0-9a-f]+", name_or_id):
            found = [r for r in records if r["inspect"]["Id"].startswith(name_or_id)]
            if len(found) == 1:
                return found[0]
        return None

    def remove(self, cid: str) -> None:
        shutil.rmtree(self.container_dir(cid), ignore_errors=True)


# ------------------------------------------------------------------ pull


def _registry_index(registry: Path) -> dict[str, str]:
    path = registry / "index.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise DockerError(daemon(f"{STANDIN}: unreadable registry index {path}: {exc}")) from exc
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = []
    for m in tar.getmembers():
        name = m.name
        if (
            name.startswith("/")
            or ".." in Path(name).parts
            or not (m.isdir() or m.isfile() or m.issym())
        ):
            raise DockerError(daemon(f"{STANDIN}: refusing layer member {name!r}"))
        if m.issym() and (m.linkname.startswith("/") or ".." in Path(m.linkname).parts):
            raise DockerError(daemon(f"{STANDIN}: refusing layer symlink {name!r}"))
        members.append(m)
    return members


def _extract(layer: bytes, dest: Path) -> int:
    """Unpack a layer tar (files, dirs, relative links only); returns its content size."""
    size = 0
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        for m in _safe_members(tar):
            target = dest / m.name
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(m.mode & 0o7777)
            elif m.issym():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(m.linkname)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                if src is None:
                    raise DockerError(daemon(f"{STANDIN}: unreadable layer member {m.name}"))
                data = src.read()
                target.write_bytes(data)
                target.chmod(m.mode & 0o7777)
                size += len(data)
            os.lchown(target, m.uid, m.gid)
    return size


def pull(store: Store, text: str, *, out: Any = None, final_line: bool = True) -> str:
    """``docker pull`` from the lab registry; returns the image id."""
    out = out or sys.stdout
    ref = Ref.parse(text)
    registry = registry_root()
    index = _registry_index(registry)
    if not any(k.rpartition(":")[0] == ref.repository for k in index):
        raise DockerError(
            daemon(
                f"pull access denied for {ref.repository}, repository does not exist or may "
                "require 'docker login': denied: requested access to the resource is denied"
            )
        )
    if ref.digest:
        digest, tag_or_digest, shown = ref.digest, ref.digest, ref.canonical
        blob_path = registry / "blobs" / "sha256" / digest.removeprefix("sha256:")
        if not blob_path.exists():
            raise DockerError(
                daemon(f"manifest for {shown} not found: manifest unknown: manifest unknown")
            )
    else:
        shown = ref.tagged
        tag_or_digest = ref.tag or "latest"
        if shown not in index:
            raise DockerError(
                daemon(f"manifest for {shown} not found: manifest unknown: manifest unknown")
            )
        digest = index[shown]
        blob_path = registry / "blobs" / "sha256" / digest.removeprefix("sha256:")
    print(f"{tag_or_digest}: Pulling from {ref.repository}", file=out, flush=True)
    with store.lock():
        repos = store.repositories()
        image_id = repos.get(f"{ref.repository}@{digest}")
        fresh = image_id is None or not (store.image_dir(image_id) / "config.json").exists()
        if fresh:
            image_id = _fetch(store, blob_path, digest, out)
        if image_id is None:
            raise DockerError(daemon(f"{STANDIN}: no image for {digest}"))
        changed = fresh
        repos[f"{ref.repository}@{digest}"] = image_id
        if not ref.digest:
            changed = changed or repos.get(shown) != image_id
            repos[shown] = image_id
            meta = store.image_dir(image_id) / "meta.json"
            _write_json(meta, {"LastTagTime": now_rfc3339()})
        store._save_repositories(repos)
    print(f"Digest: {digest}", file=out)
    status = "Downloaded newer image" if changed else "Image is up to date"
    print(f"Status: {status} for {shown}", file=out, flush=True)
    if final_line:
        print(ref.normalized, file=out, flush=True)
    return image_id


def _fetch(store: Store, blob_path: Path, digest: str, out: Any) -> str:
    """Verify and unpack one blob into the image store; returns the image id."""
    try:
        blob = blob_path.read_bytes()
    except OSError as exc:
        raise DockerError(daemon(f"{STANDIN}: cannot read {blob_path}: {exc}")) from exc
    short = digest.removeprefix("sha256:")[:12]
    print(f"{short}: Pulling fs layer", file=out)
    print(f"{short}: Verifying Checksum", file=out)
    # Content addressing: what was fetched must hash to what was asked for
    # (moby distribution/pull_v2.go, "filesystem layer verification failed").
    if "sha256:" + hashlib.sha256(blob).hexdigest() != digest:
        raise DockerError(daemon(f"filesystem layer verification failed for digest {digest}"))
    print(f"{short}: Download complete", file=out)
    try:
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            config_bytes = tar.extractfile("config.json").read()  # type: ignore[union-attr]
            layer = tar.extractfile("layer.tar").read()  # type: ignore[union-attr]
        config = json.loads(config_bytes)
    except (KeyError, tarfile.TarError, ValueError, AttributeError) as exc:
        raise DockerError(daemon(f"{STANDIN}: {digest} is not an image blob: {exc}")) from exc
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if diff_ids != ["sha256:" + hashlib.sha256(layer).hexdigest()]:
        raise DockerError(daemon(f"filesystem layer verification failed for digest {digest}"))
    image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    final = store.image_dir(image_id)
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "rootfs").mkdir(parents=True)
    size = _extract(layer, tmp / "rootfs")
    (tmp / "config.json").write_bytes(config_bytes)
    (tmp / "layer.size").write_text(str(size))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    print(f"{short}: Pull complete", file=out, flush=True)
    return image_id


# ------------------------------------------------------------------ run options

RUN_USAGE = "docker run [OPTIONS] IMAGE [COMMAND] [ARG...]"
# Every flag of `docker run` (container_run.md's table, plus the hidden --net
# and the deprecated --disable-content-trust): the ones this stand-in does not
# implement are refused by name, unknown ones as docker refuses them.
_RUN_FLAG_TABLE = """
add-host - list x; annotation - list x; attach a list x; blkio-weight - str x;
blkio-weight-device - list x; cap-add - list x; cap-drop - list x; cgroup-parent - str x;
cgroupns - str x; cidfile - str x; cpu-count - str x; cpu-percent - str x; cpu-period - str x;
cpu-quota - str x; cpu-rt-period - str x; cpu-rt-runtime - str x; cpu-shares c str x;
cpus - str x; cpuset-cpus - str x; cpuset-mems - str x; detach d bool; detach-keys - str x;
device - list; device-cgroup-rule - list x; device-read-bps - list x; device-read-iops - list x;
device-write-bps - list x; device-write-iops - list x; dns - list x; dns-option - list x;
dns-search - list x; domainname - str x; entrypoint - str; env e list; env-file - list;
expose - list x; gpus - str; group-add - list x; health-cmd - str x; health-interval - str x;
health-retries - str x; health-start-interval - str x; health-start-period - str x;
health-timeout - str x; help - bool; hostname h str; init - bool; interactive i bool x;
io-maxbandwidth - str x; io-maxiops - str x; ip - str x; ip6 - str x; ipc - str;
isolation - str x; label l list; label-file - list x; link - list x; link-local-ip - list x;
log-driver - str; log-opt - list x; mac-address - str x; memory m str x;
memory-reservation - str x; memory-swap - str x; memory-swappiness - str x; mount - list x;
name - str; network - str; net - str; network-alias - list x; no-healthcheck - bool x;
oom-kill-disable - bool x; oom-score-adj - str x; pid - str x; pids-limit - str x;
platform - str; privileged - bool x; publish p list x; publish-all P bool x; pull - str;
quiet q bool; read-only - bool x; restart - str; rm - bool; runtime - str x;
security-opt - list x; shm-size - str; sig-proxy - bool; stop-signal - str; stop-timeout - int;
storage-opt - list x; sysctl - list x; tmpfs - list x; tty t bool x; ulimit - list;
use-api-socket - bool x; user u str; userns - str x; uts - str x; volume v list;
volume-driver - str x; volumes-from - list x; workdir w str; disable-content-trust - bool
"""


def _run_flags() -> tuple[list[Flag], set[str]]:
    flags, unsupported = [], set()
    for item in _RUN_FLAG_TABLE.replace("\n", " ").split(";"):
        words = item.split()
        if not words:
            continue
        long, short, kind = words[0], words[1], words[2]
        default: Any = {"pull": "missing", "sig-proxy": True}.get(long)
        if kind == "bool" and default is None:
            default = False
        flags.append(Flag(long, "" if short == "-" else short, kind, default))
        if len(words) > 3:
            unsupported.add(long)
    return flags, unsupported


RUN_FLAGS, RUN_UNSUPPORTED = _run_flags()

ULIMITS = {
    "core": resource.RLIMIT_CORE,
    "cpu": resource.RLIMIT_CPU,
    "data": resource.RLIMIT_DATA,
    "fsize": resource.RLIMIT_FSIZE,
    "locks": 10,  # RLIMIT_LOCKS (Python does not name it)
    "memlock": resource.RLIMIT_MEMLOCK,
    "msgqueue": resource.RLIMIT_MSGQUEUE,
    "nice": resource.RLIMIT_NICE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "rss": resource.RLIMIT_RSS,
    "rtprio": resource.RLIMIT_RTPRIO,
    "rttime": resource.RLIMIT_RTTIME,
    "sigpending": resource.RLIMIT_SIGPENDING,
    "stack": resource.RLIMIT_STACK,
}


def parse_env_file(path: str, lookup: Callable[[str], str | None]) -> list[str]:
    """docker/cli pkg/kvfile: ``KEY=VALUE`` lines, ``#`` comments, blank lines; a
    bare ``KEY`` takes the caller's value (omitted when unset); quotes around a
    value are removed when it starts and ends with the same quote; no
    interpolation; whitespace in a value is kept."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise DockerError(f"open {path}: {os.strerror(exc.errno or 0).lower()}") from exc
    out = []
    for number, line_bytes in enumerate(raw.split(b"\n"), start=1):
        try:
            line = line_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise DockerError(
                f"invalid env file ({path}): invalid utf8 bytes at line "
                f"{number}: {list(line_bytes)}"
            ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        # bufio.ScanLines drops one carriage return before the newline.
        line = line.removesuffix("\r").lstrip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not key:
            raise DockerError(f"invalid env file ({path}): no variable name on line '{line}'")
        if " " in key or "\t" in key:
            raise DockerError(f"invalid env file ({path}): variable '{key}' contains whitespaces")
        if eq:
            out.append(f"{key}={_trim_quotes(value)}")
            continue
        found = lookup(line)
        if found is not None:
            out.append(f"{key}={_trim_quotes(found)}")
    return out


def _trim_quotes(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def parse_env_flag(value: str, lookup: Callable[[str], str | None]) -> str | None:
    """docker/cli opts.ValidateEnv: ``VAR=VAL``, or ``VAR`` with the caller's value."""
    key, eq, _ = value.partition("=")
    if not key:
        raise DockerError(f"invalid environment variable: {value}")
    if eq:
        return value
    found = lookup(key)
    return None if found is None else f"{key}={found}"


def merge_env(base: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """moby container.ReplaceOrAppendEnvValues: replace same keys in place, append others."""
    out = list(base)
    keys = [e.split("=", 1)[0] for e in out]
    for entry in overrides:
        key = entry.split("=", 1)[0]
        if key in keys:
            out[keys.index(key)] = entry
        else:
            out.append(entry)
            keys.append(key)
    return out


@dataclass
class Volume:
    source: str
    destination: str
    read_only: bool
    spec: str


def parse_volume(spec: str) -> Volume:
    """``-v SRC:DST[:OPTS]`` for bind mounts (docker/cli volume spec, Linux)."""
    parts = spec.split(":")
    if len(parts) == 1 or not parts[0] or not (parts[0].startswith(("/", ".", "~"))):
        if len(parts) == 1:
            raise DockerError(
                f"{STANDIN}: anonymous volumes (-v {spec}) are not implemented; "
                "bind a host directory (-v /host/dir:{spec})"
            )
        if len(parts) >= 2 and parts[0] and not parts[0].startswith("/"):
            raise DockerError(
                f"{STANDIN}: named volumes (-v {spec}) are not implemented; bind a host path"
            )
    if len(parts) > 3:
        raise DockerError(f"invalid spec: {spec}: too many colons")
    source, dest = parts[0], parts[1]
    opts = parts[2].split(",") if len(parts) == 3 else []
    read_only = False
    for opt in opts:
        if opt == "ro":
            read_only = True
        elif opt in {
            "rw",
            "z",
            "Z",
            "nocopy",
            "private",
            "rprivate",
            "shared",
            "rshared",
            "slave",
            "rslave",
            "consistent",
            "cached",
            "delegated",
        }:
            continue
        else:
            raise DockerError(f"invalid mode: {parts[2]}")
    if source.startswith("."):
        source = os.path.abspath(source)
    if not dest.startswith("/"):
        raise DockerError(
            f"invalid volume specification: '{spec}': invalid mount config for "
            f"type \"bind\": invalid mount path: '{dest}' mount path must be "
            "absolute"
        )
    if os.path.normpath(dest) == "/":
        raise DockerError(
            f"invalid volume specification: '{spec}': invalid mount config for "
            "type \"bind\": invalid specification: destination can't be '/'"
        )
    return Volume(os.path.normpath(source), os.path.normpath(dest), read_only, spec)


@dataclass
class Device:
    host: str
    container: str
    perms: str


def parse_device(spec: str) -> Device:
    parts = spec.split(":")
    host = parts[0]
    container = parts[1] if len(parts) > 1 and parts[1] else host
    perms = parts[2] if len(parts) > 2 else "rwm"
    if len(parts) == 2 and re.fullmatch(r"[rwm]{1,3}", parts[1]):
        container, perms = host, parts[1]
    if (
        not host.startswith("/")
        or not container.startswith("/")
        or not re.fullmatch(r"[rwm]{1,3}", perms)
    ):
        raise DockerError(f"invalid device specification: {spec}")
    return Device(host, container, perms)


def parse_ulimit(spec: str) -> dict[str, Any]:
    """``name=soft[:hard]`` (docker/cli opts/ulimit.go; -1 is unlimited)."""
    name, eq, values = spec.partition("=")
    if not eq:
        raise DockerError(
            f'invalid argument "{spec}" for "--ulimit" flag: invalid ulimit argument: {spec}'
        )
    if name not in ULIMITS:
        raise DockerError(
            f'invalid argument "{spec}" for "--ulimit" flag: invalid ulimit type: {name}'
        )
    soft_s, _, hard_s = values.partition(":")
    try:
        soft = int(soft_s)
        hard = int(hard_s) if hard_s else soft
    except ValueError:
        raise DockerError(
            f'invalid argument "{spec}" for "--ulimit" flag: invalid ulimit argument: {spec}'
        ) from None
    if soft > hard and hard != -1:
        raise DockerError(
            f'invalid argument "{spec}" for "--ulimit" flag: ulimit soft limit '
            f"must be less than or equal to hard limit: {soft} > {hard}"
        )
    return {"Name": name, "Hard": hard, "Soft": soft}


def parse_gpus(value: str) -> dict[str, Any]:
    """``--gpus all|N|device=...`` (docker/cli opts/gpus.go) as a DeviceRequest."""
    request: dict[str, Any] = {
        "Driver": "",
        "Count": 0,
        "DeviceIDs": None,
        "Capabilities": [["gpu"]],
        "Options": {},
    }
    for part in value.strip("'\"").split(","):
        if part == "all":
            request["Count"] = -1
        elif part.isdigit():
            request["Count"] = int(part)
        elif part.startswith("device="):
            request["DeviceIDs"] = part[len("device=") :].split(",")
        elif part.startswith(("driver=", "capabilities=", "count=")):
            key, _, val = part.partition("=")
            if key == "count":
                request["Count"] = -1 if val == "all" else int(val)
            elif key == "driver":
                request["Driver"] = val
            else:
                request["Capabilities"] = [val.split(",")]
        else:
            raise DockerError(
                f'invalid argument "{value}" for "--gpus" flag: unexpected '
                f"key '{part}' in '{value}'"
            )
    return request


def _shm_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([bkmg]?)b?", text.lower())
    if not m:
        raise DockerError(
            f'invalid argument "{text}" for "--shm-size" flag: invalid size: \'{text}\''
        )
    return int(m.group(1)) * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)]


_NAME_RE = re.compile(r"^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
# moby pkg/namesgenerator (a few of its words).
_LEFT = (
    "admiring",
    "brave",
    "clever",
    "eager",
    "festive",
    "gracious",
    "jolly",
    "keen",
    "nifty",
    "quirky",
    "serene",
    "vibrant",
    "zealous",
)
_RIGHT = (
    "babbage",
    "curie",
    "dijkstra",
    "hopper",
    "kilby",
    "lovelace",
    "noether",
    "ritchie",
    "shannon",
    "torvalds",
    "turing",
    "wozniak",
)


def _random_name(store: Store) -> str:
    taken = {r["inspect"]["Name"] for r in store.all_containers()}
    while True:
        name = f"{secrets.choice(_LEFT)}_{secrets.choice(_RIGHT)}"
        if "/" + name not in taken:
            return name


def _node_hostname() -> str:
    return socket.gethostname()


def _resolv_conf(host_network: bool) -> str:
    """What dockerd writes: the host's resolv.conf (systemd-resolved's upstream file
    when the host's only lists the 127.0.0.53 stub), localhost servers dropped
    for a private network namespace (Google's servers when none is left)."""
    text = ""
    for candidate in ("/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"):
        with contextlib.suppress(OSError):
            text = Path(candidate).read_text()
            if "127.0.0.53" not in text:
                break
    if host_network:
        return text
    lines = [ln for ln in text.splitlines() if not re.match(r"^\s*nameserver\s+(127\.|::1)", ln)]
    if not any(ln.strip().startswith("nameserver") for ln in lines):
        lines += ["nameserver 8.8.8.8", "nameserver 8.8.4.4"]
    return "\n".join(lines) + "\n"


_DEFAULT_HOSTS = (
    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::\tip6-localnet\nff00::\tip6-mcastprefix\nff02::1\tip6-allnodes\n"
    "ff02::2\tip6-allrouters\n"
)


@dataclass
class RunOptions:
    """``docker run``'s flags, checked, as the record and the shim need them."""

    image_text: str
    command: list[str]
    parsed: Parsed
    env: list[str] = field(default_factory=list)
    volumes: list[Volume] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    ulimits: list[dict[str, Any]] = field(default_factory=list)
    gpus: dict[str, Any] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    shm_size: int = DEFAULT_SHM_SIZE


def parse_run(args: Sequence[str]) -> RunOptions:  # noqa: PLR0912, PLR0915 -- one check per flag
    parsed, positionals = parse_flags(
        args, RUN_FLAGS, command="docker run", usage=RUN_USAGE, interspersed=False
    )
    if parsed["help"]:
        print(
            f"\nUsage:  {RUN_USAGE}\n\nCreate and run a new container from an image "
            f"({STANDIN}: see the docstring of /usr/bin/docker for what is implemented)"
        )
        raise SystemExit(0)
    for name in sorted(parsed.changed & RUN_UNSUPPORTED):
        raise DockerError(
            with_help(f"{STANDIN}: `docker run --{name}` is not implemented", "run"), 125
        )
    if not positionals:
        raise DockerError(
            "docker: 'docker run' requires at least 1 argument\n\nUsage:  "
            f"{RUN_USAGE}\n\nSee 'docker run --help' for more information",
            1,
        )
    pull_opt = parsed["pull"]
    if pull_opt not in {"always", "missing", "never", ""}:
        raise DockerError(
            with_help(
                f"invalid pull option: '{pull_opt}': must be one of "
                '"always", "missing" or "never"',
                "run",
            ),
            125,
        )
    opts = RunOptions(image_text=positionals[0], command=positionals[1:], parsed=parsed)
    environ = os.environ.get
    try:
        # --env-file first, then -e, whatever their order (container_run.md).
        for path in parsed["env-file"]:
            opts.env += parse_env_file(path, environ)
        for value in parsed["env"]:
            entry = parse_env_flag(value, environ)
            if entry is not None:
                opts.env.append(entry)
        destinations: set[str] = set()
        for spec in parsed["volume"]:
            vol = parse_volume(spec)
            if vol.destination in destinations:
                raise DockerError(f"Duplicate mount point: {vol.destination}")
            destinations.add(vol.destination)
            opts.volumes.append(vol)
        opts.devices = [parse_device(d) for d in parsed["device"]]
        opts.ulimits = [parse_ulimit(u) for u in parsed["ulimit"]]
        if parsed["gpus"] is not None:
            opts.gpus = parse_gpus(parsed["gpus"])
        for label in parsed["label"]:
            key, _, value = label.partition("=")
            opts.labels[key] = value
        if parsed["shm-size"] is not None:
            opts.shm_size = _shm_size(parsed["shm-size"])
        workdir = parsed["workdir"]
        if workdir is not None and not workdir.startswith("/"):
            raise DockerError(
                daemon(
                    f"the working directory '{workdir}' is invalid, it needs to be an absolute path"
                )
            )
        network = parsed["network"] or parsed["net"] or "bridge"
        if network.startswith("container:") or (
            network not in {"host", "bridge", "none", "default"}
        ):
            raise DockerError(
                daemon(
                    f"{STANDIN}: --network {network} is not implemented (host, bridge and none are)"
                )
            )
        ipc = parsed["ipc"] or ""
        if ipc not in {"", "host", "private", "shareable", "none"}:
            raise DockerError(
                daemon(
                    f"{STANDIN}: --ipc {ipc} is not implemented "
                    "(host, private, shareable and none are)"
                )
            )
        if parsed["log-driver"] not in {None, "json-file"}:
            raise DockerError(
                daemon(
                    f"{STANDIN}: --log-driver {parsed['log-driver']} is not "
                    "implemented (json-file is)"
                )
            )
        if parsed["restart"] not in {None, "no"}:
            raise DockerError(
                daemon(f"{STANDIN}: --restart {parsed['restart']} is not implemented (no is)")
            )
        if parsed["stop-signal"] is not None:
            _signal_number(parsed["stop-signal"])
        name = parsed["name"]
        if name is not None and not _NAME_RE.match(name):
            raise DockerError(
                daemon(
                    f"Invalid container name ({name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"
                )
            )
        if parsed["platform"] not in {None, "", "linux", f"linux/{_arch()}"}:
            raise DockerError(
                daemon(
                    f"{STANDIN}: --platform {parsed['platform']}: the lab "
                    f"serves linux/{_arch()} only"
                )
            )
    except DockerError as exc:
        if exc.message.startswith("docker: "):
            raise
        raise DockerError(with_help(exc.message, "run"), 125) from None
    return opts


def _arch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _signal_number(text: str) -> int:
    name = text.upper().removeprefix("SIG")
    if name.isdigit():
        return int(name)
    if name not in SIGNALS:
        raise DockerError(f"invalid signal: {text}")
    return SIGNALS[name]


def create_container(store: Store, opts: RunOptions, image_id: str) -> dict[str, Any]:
    """``POST /containers/create``: the record, its directory and name, under the lock."""
    p = opts.parsed
    config = store.image_config(image_id).get("config", {})
    entrypoint = [p["entrypoint"]] if p["entrypoint"] else config.get("Entrypoint") or []
    if p["entrypoint"] == "":
        entrypoint = []
    cmd = opts.command or ([] if p["entrypoint"] is not None else config.get("Cmd") or [])
    argv = list(entrypoint) + list(cmd)
    if not argv:
        raise DockerError(with_help(daemon("no command specified"), "run"), 125)
    network = p["network"] or p["net"] or "bridge"
    if network == "default":
        network = "bridge"
    host_network = network == "host"
    cid = secrets.token_hex(32)
    hostname = p["hostname"] or (_node_hostname() if host_network else cid[:12])
    env = merge_env(config.get("Env") or [], opts.env)
    directory = store.container_dir(cid)
    mounts = [
        {
            "Type": "bind",
            "Source": v.source,
            "Destination": v.destination,
            "Mode": "ro" if v.read_only else "",
            "RW": not v.read_only,
            "Propagation": "rprivate",
        }
        for v in opts.volumes
    ]
    inspect: dict[str, Any] = {
        "Id": cid,
        "Created": now_rfc3339(),
        "Path": argv[0],
        "Args": argv[1:],
        "State": {
            "Status": "created",
            "Running": False,
            "Paused": False,
            "Restarting": False,
            "OOMKilled": False,
            "Dead": False,
            "Pid": 0,
            "ExitCode": 0,
            "Error": "",
            "StartedAt": ZERO_TIME,
            "FinishedAt": ZERO_TIME,
        },
        "Image": image_id,
        "ResolvConfPath": str(directory / "resolv.conf"),
        "HostnamePath": str(directory / "hostname"),
        "HostsPath": str(directory / "hosts"),
        "LogPath": str(directory / f"{cid}-json.log"),
        "Name": "/" + (p["name"] or ""),
        "RestartCount": 0,
        "Driver": "sparkctl-lab-standin",
        "Platform": "linux",
        "MountLabel": "",
        "ProcessLabel": "",
        "AppArmorProfile": "",
        "ExecIDs": None,
        "HostConfig": {
            "Binds": [
                v.spec if not v.spec.startswith(".") else f"{v.source}:{v.spec.split(':', 1)[1]}"
                for v in opts.volumes
            ]
            or None,
            "ContainerIDFile": "",
            "LogConfig": {"Type": "json-file", "Config": {}},
            "NetworkMode": network,
            "PortBindings": {},
            "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
            "AutoRemove": bool(p["rm"]),
            "VolumeDriver": "",
            "VolumesFrom": None,
            "CapAdd": None,
            "CapDrop": None,
            "CgroupnsMode": "private",
            "Dns": [],
            "DnsOptions": [],
            "DnsSearch": [],
            "ExtraHosts": None,
            "IpcMode": p["ipc"] or "private",
            "Cgroup": "",
            "Links": None,
            "OomScoreAdj": 0,
            "PidMode": "",
            "Privileged": False,
            "PublishAllPorts": False,
            "ReadonlyRootfs": False,
            "SecurityOpt": None,
            "UTSMode": "",
            "UsernsMode": "",
            "ShmSize": opts.shm_size,
            "Runtime": "runc",
            "Isolation": "",
            "Devices": [
                {"PathOnHost": d.host, "PathInContainer": d.container, "CgroupPermissions": d.perms}
                for d in opts.devices
            ],
            "DeviceRequests": [opts.gpus] if opts.gpus else None,
            "Ulimits": opts.ulimits or None,
            "Init": True if p["init"] else None,
        },
        "Mounts": mounts,
        "Config": {
            "Hostname": hostname,
            "Domainname": "",
            "User": p["user"] or config.get("User", ""),
            "AttachStdin": False,
            "AttachStdout": not p["detach"],
            "AttachStderr": not p["detach"],
            "Tty": False,
            "OpenStdin": False,
            "StdinOnce": False,
            "Env": env,
            "Cmd": cmd or None,
            "Image": opts.image_text,
            "Volumes": None,
            "WorkingDir": p["workdir"] or config.get("WorkingDir", ""),
            "Entrypoint": entrypoint or None,
            "OnBuild": None,
            "Labels": {**(config.get("Labels") or {}), **opts.labels},
        },
        "NetworkSettings": {
            "Networks": {network: {"NetworkID": "", "EndpointID": "", "IPAddress": ""}}
        },
    }
    if p["stop-signal"]:
        inspect["Config"]["StopSignal"] = p["stop-signal"]
    if p["stop-timeout"] is not None:
        inspect["Config"]["StopTimeout"] = p["stop-timeout"]
    record = {
        "inspect": inspect,
        "standin": {
            "argv": argv,
            "host_network": host_network,
            "init": bool(p["init"]),
            "volumes": [v.__dict__ for v in opts.volumes],
            "devices": [d.__dict__ for d in opts.devices],
            "gpus": opts.gpus is not None,
            "ulimits": opts.ulimits,
            "shm_size": opts.shm_size,
            "rootfs": str(store.image_dir(image_id) / "rootfs"),
            "hidden": list(HOST_ONLY_TOOLS),
        },
    }
    with store.lock():
        name = p["name"] or _random_name(store)
        inspect["Name"] = "/" + name
        for other in store.all_containers():
            if other["inspect"]["Name"] == inspect["Name"]:
                raise DockerError(
                    with_help(
                        daemon(
                            f'Conflict. The container name "/{name}" is already in use by container '  # noqa: E501 - the real text, whole
                            f'"{other["inspect"]["Id"]}". You have to remove (or rename) that '
                            "container to be able to reuse that name."
                        ),
                        "run",
                    ),
                    125,
                )
        directory.mkdir(parents=True, mode=0o710)
        (directory / "hostname").write_text(hostname + "\n")
        hosts = Path("/etc/hosts").read_text() if host_network else _DEFAULT_HOSTS
        (directory / "hosts").write_text(hosts)
        (directory / "resolv.conf").write_text(_resolv_conf(host_network))
        (directory / f"{cid}-json.log").touch(mode=0o640)
        _write_json(directory / "container.json", record)
    return record


def ensure_image(store: Store, opts: RunOptions) -> str:
    """The image for ``docker run``, after the pull policy (create.go createContainer)."""
    policy = opts.parsed["pull"] or "missing"
    quiet = bool(opts.parsed["quiet"])
    err = open(os.devnull, "w") if quiet else sys.stderr  # noqa: SIM115
    try:
        ref = Ref.parse(opts.image_text)
    except DockerError as exc:
        raise DockerError(with_help(exc.message, "run"), 125) from None
    try:
        if policy == "always":
            return pull(store, opts.image_text, out=err, final_line=False)
        image_id = store.resolve_image(opts.image_text)
        if image_id:
            return image_id
        if policy == "never":
            raise DockerError(with_help(daemon(f"No such image: {ref.familiar}"), "run"), 125)
        print(f"Unable to find image '{ref.familiar}' locally", file=err, flush=True)
        return pull(store, opts.image_text, out=err, final_line=False)
    except DockerError as exc:
        if exc.message.startswith("docker: "):
            raise
        raise DockerError(with_help(exc.message, "run"), 125) from None
    finally:
        if quiet:
            err.close()


def _shim_command(cid: str, fds: Sequence[int]) -> list[str]:
    """How the shim is started: in its own systemd scope where systemd runs the node."""
    base = [sys.executable, os.path.realpath(__file__), "__shim", cid, *map(str, fds)]
    systemd_run = shutil.which("systemd-run")
    if os.path.isdir("/run/systemd/system") and systemd_run and os.geteuid() == 0:
        # The unit dockerd would give a container with the systemd cgroup
        # driver: docker-<id>.scope in system.slice (moby daemon/oci_linux.go
        # getCgroupsPath "system.slice:docker:<id>").
        return [
            systemd_run,
            "--scope",
            "--quiet",
            "--collect",
            f"--unit=docker-{cid}.scope",
            "--slice=system.slice",
            f"--description=docker container {cid[:12]} ({STANDIN})",
            "--",
            "env",
            f"{SCOPE_ENV}=docker-{cid}.scope",
            *base,
        ]
    return base


def spawn_shim(command: list[str], pass_fds: Sequence[int], log: Path) -> None:
    """Start the shim as a daemon: in a session of its own, a child of PID 1.

    It holds none of the caller's stdio (``docker run -d`` leaves nothing open
    behind it; the shim's own messages go to ``log``), and the double fork
    makes init its parent, like containerd-shim's: init reaps it, which is
    also how systemd learns that the container's scope emptied.
    """
    env = _shim_env()
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(out, 2)
                for fd in pass_fds:
                    os.set_inheritable(fd, True)
                os.execvpe(command[0], command, env)  # noqa: S606 -- the shim
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def _shim_env() -> dict[str, str]:
    keep = (ROOT_ENV, REGISTRY_ENV, HW_ENV, "PATH")
    return {k: v for k, v in os.environ.items() if k in keep}


def _read_event(fd: int, buffer: bytearray) -> dict[str, Any] | None:
    """One JSON line from the shim's status pipe; None at EOF."""
    while b"\n" not in buffer:
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    event: dict[str, Any] = json.loads(line)
    return event


def cmd_run(args: Sequence[str]) -> int:
    opts = parse_run(args)
    store = Store()
    image_id = ensure_image(store, opts)
    record = create_container(store, opts, image_id)
    cid = record["inspect"]["Id"]
    detach = bool(opts.parsed["detach"])
    status_r, status_w = os.pipe()
    fds = [status_w]
    out_r = err_r = -1
    if not detach:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds += [out_w, err_w]
    else:
        fds += [-1, -1]
    pass_fds = [f for f in fds if f >= 0]
    spawn_shim(_shim_command(cid, fds), pass_fds, store.container_dir(cid) / "shim.log")
    for f in pass_fds:
        os.close(f)
    buffer = bytearray()
    event = _read_event(status_r, buffer)
    if event is None or event.get("event") not in {"started", "error"}:
        raise DockerError(
            with_help(
                daemon(
                    f"{STANDIN}: the container's shim did not start "
                    f"(see {store.container_dir(cid)}/shim.log)"
                ),
                "run",
            ),
            125,
        )
    if event["event"] == "error":
        message = event["message"]
        raise DockerError(with_help(daemon(message), "run"), status_of_start_error(message))
    if detach:
        os.close(status_r)
        print(cid, flush=True)
        return 0
    return _attach(
        store,
        cid,
        int(event["pid"]),
        event.get("pid_start"),
        status_r,
        buffer,
        out_r,
        err_r,
        proxy=bool(opts.parsed["sig-proxy"]),
    )


def _attach(  # noqa: PLR0917
    store: Store,
    cid: str,
    pid: int,
    pid_start: str | None,
    status_r: int,
    buffer: bytearray,
    out_r: int,
    err_r: int,
    *,
    proxy: bool,
) -> int:
    """Relay the container's output and exit status; proxy signals (--sig-proxy)."""

    def forward(signum: int, _frame: object) -> None:
        # ForwardAllSignals: the daemon kills the container's PID 1 with the
        # signal; the client itself keeps waiting for the container.
        if _proc_start_time(pid) == pid_start:
            with contextlib.suppress(OSError):
                os.kill(pid, signum)

    if proxy:
        for sig in signal.valid_signals():
            if sig in {
                signal.SIGCHLD,
                signal.SIGPIPE,
                signal.SIGURG,
                signal.SIGKILL,
                signal.SIGSTOP,
                signal.SIGWINCH,
            }:
                continue
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                signal.signal(sig, forward)
    sinks = {out_r: sys.stdout.buffer, err_r: sys.stderr.buffer}
    open_fds = [out_r, err_r, status_r]
    code: int | None = None

    def drain() -> None:
        nonlocal code
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            event = json.loads(line)
            if event.get("event") == "exit":
                code = int(event["code"])

    drain()
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [])
        for fd in ready:
            if fd == status_r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    open_fds.remove(fd)
                    continue
                buffer += chunk
                drain()
                continue
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
                continue
            with contextlib.suppress(OSError):
                sinks[fd].write(data)
                sinks[fd].flush()
    if code is None:
        print(
            f"ERRO[0000] error waiting for container: {STANDIN}: the shim of {cid[:12]} "
            "ended without an exit status",
            file=sys.stderr,
        )
        return 125
    return code


# ------------------------------------------------------------------ the shim

OCI_PREFIX = (
    "failed to create task for container: failed to create shim task: OCI runtime "
    "create failed: runc create failed: unable to start container process: "
)


class InitError(Exception):
    """A container start failure, in runc's words (without the OCI prefix)."""


_LIBC: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _LIBC  # noqa: PLW0603
    if _LIBC is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        lib.unshare.argtypes = [ctypes.c_int]
        lib.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _LIBC = lib
    return _LIBC


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    def enc(value: str | None) -> bytes | None:
        return value.encode() if value is not None else None

    if libc().mount(enc(source), target.encode(), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or fstype}:{target}: {os.strerror(err).lower()}")


def _locked_flags(path: str) -> int:
    """The mount flags a remount inside a user namespace must keep (mount(2) EPERM)."""
    f = os.statvfs(path).f_flag
    flags = f & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME)
    return flags | (MS_RELATIME if f & ST_RELATIME else 0)


def _bind(source: str, target: str, *, read_only: bool = False, recursive: bool = True) -> None:
    _mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(target))


def _touch(path: str) -> None:
    if not os.path.lexists(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()


def _close_fds_except(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _hardware() -> dict[str, Any] | None:
    try:
        data = json.loads(hardware_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def start_checks(record: dict[str, Any]) -> str | None:  # noqa: PLR0911 -- one refusal per check
    """What dockerd and the runtime refuse before the process starts, in their words."""
    st = record["standin"]
    for dev in st["devices"]:
        try:
            mode = os.stat(dev["host"]).st_mode
        except FileNotFoundError:
            return (
                f"error gathering device information while adding custom device "
                f'"{dev["host"]}": no such file or directory'
            )
        if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode)):
            return (
                f"error gathering device information while adding custom device "
                f'"{dev["host"]}": not a device node'
            )
    if st["gpus"]:
        hw = _hardware()
        if hw is None:
            # No NVIDIA runtime configured: dockerd finds no device driver.
            return 'could not select device driver "" with capabilities: [[gpu]]'
        if not hw.get("gpu_present", True):
            return (
                OCI_PREFIX + "error during container init: error running hook #0: error "
                "running hook: exit status 1, stdout: , stderr: Auto-detected mode as "
                "'legacy'\nnvidia-container-cli: initialization error: nvml error: driver "
                "not loaded: unknown"
            )
    for vol in st["volumes"]:
        # -v creates a missing host directory (container_run.md, "Mount volume").
        if not os.path.lexists(vol["source"]):
            try:
                os.makedirs(vol["source"], mode=0o755)
            except OSError as exc:
                return (
                    f"error while creating mount source path '{vol['source']}': mkdir "
                    f"{vol['source']}: {os.strerror(exc.errno or 0).lower()}"
                )
    if not os.path.isdir(st["rootfs"]):
        return f"{STANDIN}: the image's files are missing ({st['rootfs']}): docker pull again"
    return None


class JsonLog:
    """The json-file log driver: one JSON object per line of output."""

    def __init__(self, path: str) -> None:
        self.fh = open(path, "ab", buffering=0)  # noqa: SIM115
        self.partial = {"stdout": b"", "stderr": b""}

    def _write(self, stream: str, data: bytes) -> None:
        entry = {"log": data.decode("utf-8", "replace"), "stream": stream, "time": now_rfc3339()}
        with contextlib.suppress(OSError):
            self.fh.write((json.dumps(entry, ensure_ascii=False) + "\n").encode())

    def feed(self, stream: str, data: bytes) -> None:
        buf = self.partial[stream] + data
        *lines, rest = buf.split(b"\n")
        for line in lines:
            self._write(stream, line + b"\n")
        while len(rest) >= 16 * 1024:  # moby splits long lines into 16K messages
            self._write(stream, rest[: 16 * 1024])
            rest = rest[16 * 1024 :]
        self.partial[stream] = rest

    def close(self) -> None:
        for stream, rest in self.partial.items():
            if rest:
                self._write(stream, rest)
        self.fh.close()


def shim_main(argv: Sequence[str]) -> int:  # noqa: PLR0912, PLR0915 -- the shim's whole life, in order
    """``docker __shim ID STATUS_FD OUT_FD ERR_FD``: start, watch and reap one container."""
    cid = argv[0]
    status_fd, out_fd, err_fd = (int(a) for a in argv[1:4])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    for fd in (status_fd, out_fd, err_fd):
        if fd >= 0:
            os.set_inheritable(fd, False)
    sinks = {"stdout": out_fd, "stderr": err_fd}

    def send(event: dict[str, Any]) -> None:
        nonlocal status_fd
        if status_fd >= 0:
            try:
                os.write(status_fd, (json.dumps(event) + "\n").encode())
            except OSError:
                status_fd = -1

    store = Store()
    record = store.load(cid)
    if record is None:
        send({"event": "error", "message": f"No such container: {cid}"})
        return 1
    st = record["standin"]
    st["shim_pid"], st["shim_start"] = os.getpid(), _proc_start_time(os.getpid())
    store.save(record)
    init_pid, channels = 0, (-1, -1, -1, bytearray())
    problem = start_checks(record)
    if problem is None:
        problem, init_pid, channels = _spawn(record, store.container_dir(cid))
    if problem is not None:
        state = record["inspect"]["State"]
        code = status_of_start_error(problem)
        state.update(Status="created", ExitCode=128 if code == 125 else code, Error=problem)
        if record["inspect"]["HostConfig"]["AutoRemove"]:
            with store.lock():
                store.remove(cid)
        else:
            store.save(record)
        send({"event": "error", "message": problem})
        return 1
    pid_start = _proc_start_time(init_pid)
    record["inspect"]["State"].update(
        Status="running", Running=True, Pid=init_pid, StartedAt=now_rfc3339()
    )
    st["pid_start"] = pid_start
    store.save(record)
    send({"event": "started", "pid": init_pid, "pid_start": pid_start})

    out_r, err_r, rep_r, rep_buf = channels
    log = JsonLog(record["inspect"]["LogPath"])
    streams = {out_r: "stdout", err_r: "stderr"}
    open_fds = [out_r, err_r, rep_r]
    raw_status: int | None = None
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [])
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
                continue
            if fd == rep_r:
                rep_buf += data
                continue
            stream = streams[fd]
            log.feed(stream, data)
            if sinks[stream] >= 0:
                try:
                    os.write(sinks[stream], data)
                except OSError:  # the client is gone: the container runs on
                    sinks[stream] = -1
    log.close()
    found = re.search(rb"exit (-?\d+)\n", rep_buf)
    if found:
        raw_status = int(found.group(1))
    for fd in sinks.values():
        if fd >= 0:
            os.close(fd)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(-1, 0)
    if raw_status is None:
        code, error = 255, f"{STANDIN}: lost the container's exit status"
    else:
        code, error = os.waitstatus_to_exitcode(raw_status), ""
        if code < 0:
            code = 128 - code
    with store.lock():
        current = store.load(cid)
        if current is not None:
            current["inspect"]["State"].update(
                Status="exited",
                Running=False,
                Pid=0,
                ExitCode=code,
                Error=error,
                FinishedAt=now_rfc3339(),
            )
            if current["inspect"]["HostConfig"]["AutoRemove"]:
                store.remove(cid)
            else:
                store.save(current)
    send({"event": "exit", "code": code})
    return 0


SCOPE_ENV = "SPARKCTL_LAB_DOCKER_SCOPE"


def _release_scope() -> None:
    """Stop this container's scope unit, now empty but for the exiting shim.

    A lab node's systemd (cgroup v1 in a podman container) is never told that
    a cgroup emptied, so an ended scope would stay "active" for good; dockerd's
    scopes end when the container does.
    """
    unit = os.environ.get(SCOPE_ENV)
    if unit and re.fullmatch(r"docker-[0-9a-f]{64}\.scope", unit):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["systemctl", "stop", "--no-block", unit],
                check=False,
                timeout=30,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )


def _spawn(
    record: dict[str, Any], directory: Path
) -> tuple[str | None, int, tuple[int, int, int, bytearray]]:
    """Fork the namespaced process; returns (start error, host PID of PID 1, channels)."""
    st = record["standin"]
    host_ipc = record["inspect"]["HostConfig"]["IpcMode"] == "host"
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS
    flags |= 0 if host_ipc else CLONE_NEWIPC
    flags |= 0 if st["host_network"] else CLONE_NEWNET
    staging = directory / "mnt"
    staging.mkdir(exist_ok=True, mode=0o700)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    fail_r, fail_w = os.pipe()  # close-on-exec: EOF without data means exec happened
    sync_r, sync_w = os.pipe()
    go_r, go_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _setup(record, str(staging), flags, out_w, err_w, fail_w, sync_w, go_r, rep_w)
        finally:
            os._exit(1)
    for fd in (out_w, err_w, fail_w, sync_w, go_r, rep_w):
        os.close(fd)
    if os.read(sync_r, 1) == b"u":
        try:
            # The parent writes the child's maps: the full 0-65535 range needs
            # CAP_SETUID/CAP_SETGID in the parent namespace (user_namespaces(7)).
            for name in ("uid_map", "gid_map"):
                Path(f"/proc/{pid}/{name}").write_text(ID_MAP)
            os.write(go_w, b"g")
        except OSError as exc:
            os.close(go_w)
            _drain_close(fail_r)
            return (
                f"{OCI_PREFIX}error during container init: writing user namespace "
                f"maps: {exc.strerror}: unknown",
                0,
                (out_r, err_r, rep_r, bytearray()),
            )
    os.close(go_w)
    os.close(sync_r)
    rep_buf = bytearray()
    while b"\n" not in rep_buf:
        chunk = os.read(rep_r, 4096)
        if not chunk:
            break
        rep_buf += chunk
    found = re.match(rb"pid (\d+)\n", rep_buf)
    init_pid = int(found.group(1)) if found else 0
    rep_buf = rep_buf[found.end() :] if found else rep_buf
    failure = _drain_close(fail_r)
    if failure or not init_pid:
        for fd in (out_r, err_r, rep_r):
            os.close(fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return (
            (failure or f"{OCI_PREFIX}error during container init: {STANDIN}: no PID 1: unknown"),
            0,
            (-1, -1, -1, bytearray()),
        )
    return None, init_pid, (out_r, err_r, rep_r, rep_buf)


def _drain_close(fd: int) -> str:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    os.close(fd)
    return data.decode("utf-8", "replace")


def _setup(  # noqa: PLR0917
    record: dict[str, Any],
    staging: str,
    flags: int,
    out_w: int,
    err_w: int,
    fail_w: int,
    sync_w: int,
    go_r: int,
    rep_w: int,
) -> NoReturn:
    """The process that enters the new namespaces and forks the container's PID 1."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    _close_fds_except({0, 1, 2, fail_w, sync_w, go_r, rep_w})
    if libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        os.write(
            fail_w,
            f"{OCI_PREFIX}error during container init: unshare: "
            f"{os.strerror(err).lower()}: unknown".encode(),
        )
        os._exit(1)
    os.write(sync_w, b"u")
    os.close(sync_w)
    if os.read(go_r, 1) != b"g":
        os._exit(1)
    os.close(go_r)
    pid = os.fork()
    if pid == 0:
        os.close(rep_w)
        container_init(record, staging, fail_w)
    os.close(fail_w)
    os.write(rep_w, f"pid {pid}\n".encode())
    # The container's output pipes must be held by the container alone: their
    # EOF is how the shim learns the output ended.
    os.dup2(0, 1)  # fd 0 is /dev/null
    os.dup2(0, 2)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 255 << 8
            break
        except InterruptedError:
            continue
    os.write(rep_w, f"exit {status}\n".encode())
    os._exit(0)


# ------------------------------------------------------------------ PID 1

BASE_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914


def _copy_tree(source: str, dest: str, *, skip: set[str] | None = None) -> None:
    """Copy a tree keeping modes and owners (the image's files into the container)."""
    for name in sorted(os.listdir(source)):
        if skip and name in skip:
            continue
        src, dst = os.path.join(source, name), os.path.join(dest, name)
        info = os.lstat(src)
        if stat.S_ISDIR(info.st_mode):
            if not os.path.isdir(dst):
                os.mkdir(dst)
            _copy_tree(src, dst)
            os.chmod(dst, stat.S_IMODE(info.st_mode))
        elif os.path.lexists(dst):
            continue
        elif stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copyfile(src, dst)
            os.chmod(dst, stat.S_IMODE(info.st_mode))
        os.lchown(dst, info.st_uid, info.st_gid)


def _loopback_up() -> None:
    """``ip link set lo up`` in the container's own network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(sock, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | 0x1 | 0x40))


def build_rootfs(record: dict[str, Any], staging: str) -> str:  # noqa: PLR0912, PLR0915 -- the mounts, in order
    """Assemble the container's root in a tmpfs (see the module docstring); returns it."""
    st, inspect = record["standin"], record["inspect"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", staging, "tmpfs", MS_NOSUID, "mode=0700")
    root = os.path.join(staging, "root")
    for d in ("root", "upper", "work"):
        os.mkdir(os.path.join(staging, d), 0o755)
    image = st["rootfs"]
    # The image's files, a per-container copy: writable, gone with the container.
    _copy_tree(image, root, skip={"usr"})
    usr = os.path.join(root, "usr")
    os.makedirs(usr, exist_ok=True)
    overlay = False
    for data in (
        f"lowerdir=/usr,upperdir={staging}/upper,workdir={staging}/work,userxattr",
        f"lowerdir=/usr,upperdir={staging}/upper,workdir={staging}/work",
    ):
        try:
            _mount("overlay", usr, "overlay", 0, data)
            overlay = True
            break
        except OSError:
            continue
    if overlay:
        for tool in st["hidden"]:
            path = os.path.join(root, tool.lstrip("/"))
            if os.path.lexists(path):
                os.unlink(path)  # a whiteout in the overlay: the node keeps its file
    else:  # no overlay in this kernel: the base layer read-only
        _bind("/usr", usr, read_only=True)
    if os.path.isdir(os.path.join(image, "usr")):
        _copy_tree(os.path.join(image, "usr"), usr, skip={"local"})
    local = os.path.join(usr, "local")
    os.makedirs(local, exist_ok=True)
    _mount("tmpfs", local, "tmpfs", MS_NOSUID, "mode=0755")
    if os.path.isdir(os.path.join(image, "usr", "local")):
        _copy_tree(os.path.join(image, "usr", "local"), local)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        node, mine = "/" + name, os.path.join(root, name)
        if os.path.lexists(mine):
            continue
        if os.path.islink(node):
            os.symlink(os.readlink(node), mine)
        elif os.path.isdir(node):
            os.mkdir(mine)
            _bind(node, mine, read_only=True)
    etc = os.path.join(root, "etc")
    os.makedirs(etc, exist_ok=True)
    base = list(BASE_ETC) + sorted(n for n in os.listdir("/etc") if n.startswith("python3"))
    for name in base:
        src, dst = os.path.join("/etc", name), os.path.join(etc, name)
        if os.path.lexists(src) and not os.path.lexists(dst):
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)
    for name, path in (
        ("hostname", inspect["HostnamePath"]),
        ("hosts", inspect["HostsPath"]),
        ("resolv.conf", inspect["ResolvConfPath"]),
    ):
        target = os.path.join(etc, name)
        if os.path.islink(target):
            os.unlink(target)
        _touch(target)
        _bind(path, target, recursive=False)
    proc = os.path.join(root, "proc")
    os.makedirs(proc, exist_ok=True)
    try:
        _mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        # The kernel refuses a new procfs where the current one has masked
        # paths (podman masks /proc/kcore, /proc/keys ...): the node's /proc
        # it is, showing the node's processes too.
        _bind("/proc", proc)
    sys_dir = os.path.join(root, "sys")
    os.makedirs(sys_dir, exist_ok=True)
    _bind("/sys", sys_dir)
    with contextlib.suppress(OSError):
        _mount(None, sys_dir, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _locked_flags(sys_dir))
    _build_dev(record, os.path.join(root, "dev"))
    if st["gpus"]:
        # nvidia-container-toolkit mounts the driver's tools and libraries.
        smi = os.path.join(root, NVIDIA_SMI.lstrip("/"))
        if os.path.exists(NVIDIA_SMI):
            _touch(smi)
            _bind(NVIDIA_SMI, smi, read_only=True, recursive=False)
        hw = os.path.join(root, DEFAULT_HW.lstrip("/"))
        _touch(hw)
        _bind(str(hardware_path()), hw, read_only=True, recursive=False)
    # Parents before children (moby daemon/volumes.go sortMounts).
    for vol in sorted(st["volumes"], key=lambda v: v["destination"].count("/")):
        target = os.path.join(root, vol["destination"].lstrip("/"))
        try:
            if not os.path.lexists(target):
                if os.path.isdir(vol["source"]):
                    os.makedirs(target)
                else:
                    _touch(target)
            _bind(vol["source"], target, read_only=vol["read_only"])
        except OSError as exc:
            raise InitError(
                f'error during container init: error mounting "{vol["source"]}" '
                f'to rootfs at "{vol["destination"]}": '
                f"{os.strerror(exc.errno or 0).lower()}"
            ) from exc
    return root


def _build_dev(record: dict[str, Any], dev: str) -> None:
    st, host = record["standin"], record["inspect"]["HostConfig"]
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name in DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            _touch(os.path.join(dev, name))
            _bind(f"/dev/{name}", os.path.join(dev, name), recursive=False)
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ):
        os.symlink(target, os.path.join(dev, link))
    pts = os.path.join(dev, "pts")
    os.mkdir(pts)
    with contextlib.suppress(OSError):
        _mount(
            "devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"
        )
    shm = os.path.join(dev, "shm")
    os.mkdir(shm)
    if host["IpcMode"] == "host":
        _bind("/dev/shm", shm)  # noqa: S108 -- the node's /dev/shm: --ipc host
    elif host["IpcMode"] != "none":
        _mount(
            "shm",
            shm,
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            f"mode=1777,size={st['shm_size']}",
        )
        mqueue = os.path.join(dev, "mqueue")
        os.mkdir(mqueue)
        with contextlib.suppress(OSError):
            _mount("mqueue", mqueue, "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for device in st["devices"]:
        host_path, inside = device["host"], device["container"]
        nodes = [(host_path, inside)]
        if os.path.isdir(host_path):
            nodes = []
            for top, _, files in os.walk(host_path):
                for name in files:
                    path = os.path.join(top, name)
                    mode = os.stat(path).st_mode
                    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                        nodes.append((path, inside + path[len(host_path) :]))
        for src, dst_inside in nodes:
            # No mknod in a user namespace: the node's device node, bound.
            target = (
                os.path.join(dev, os.path.relpath(dst_inside, "/dev"))
                if dst_inside.startswith("/dev/")
                else os.path.join(dev, "..", dst_inside.lstrip("/"))
            )
            _touch(target)
            _bind(src, target, recursive=False)


def _passwd(uid_or_name: str) -> tuple[int, int, str, str] | None:
    """(uid, gid, home, name) from the container's /etc/passwd."""
    with contextlib.suppress(OSError):
        for line in Path("/etc/passwd").read_text().splitlines():
            parts = line.split(":")
            if len(parts) >= 7 and uid_or_name in {parts[0], parts[2]}:
                return int(parts[2]), int(parts[3]), parts[5], parts[0]
    return None


def _group(gid_or_name: str) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path("/etc/group").read_text().splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and gid_or_name in {parts[0], parts[2]}:
                return int(parts[2])
    return None


def _supplementary(name: str | None, gid: int) -> list[int]:
    groups = []
    if name:
        with contextlib.suppress(OSError):
            for line in Path("/etc/group").read_text().splitlines():
                parts = line.split(":")
                if len(parts) >= 4 and name in parts[3].split(",") and int(parts[2]) != gid:
                    groups.append(int(parts[2]))
    return groups


def resolve_user(spec: str) -> tuple[int, int, list[int], str]:
    """runc's user lookup: ``user[:group]`` by name or number; (uid, gid, groups, home)."""
    user, _, group = (spec or "0").partition(":")
    entry = _passwd(user)
    if entry is None:
        if not user.isdigit():
            raise InitError(f"unable to find user {user}: no matching entries in passwd file")
        uid, gid, home, name = int(user), 0, "/", None
    else:
        uid, gid, home, name = entry[0], entry[1], entry[2], entry[3]
    if group:
        found = _group(group)
        if found is None:
            if not group.isdigit():
                raise InitError(f"unable to find group {group}: no matching entries in group file")
            found = int(group)
        gid = found
    return uid, gid, _supplementary(name, gid), home


def _find_executable(name: str, env: dict[str, str]) -> str:
    """Go os/exec LookPath, with runc's error texts."""
    if "/" in name:
        try:
            mode = os.stat(name).st_mode
        except FileNotFoundError:
            raise InitError(f'exec: "{name}": stat {name}: no such file or directory') from None
        if stat.S_ISDIR(mode):
            raise InitError(f'exec: "{name}": is a directory')
        if not os.access(name, os.X_OK):
            raise InitError(f'exec: "{name}": permission denied')
        return name
    for directory in env.get("PATH", "").split(":"):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise InitError(f'exec: "{name}": executable file not found in $PATH')


def _process_env(config_env: Sequence[str], hostname: str) -> list[str]:
    """moby container.CreateDaemonEnvironment: PATH and HOSTNAME, then the container's."""
    return merge_env([f"PATH={DEFAULT_PATH}", f"HOSTNAME={hostname}"], config_env)


def _apply_ulimits(ulimits: Sequence[dict[str, Any]]) -> None:
    for u in ulimits:
        which = ULIMITS[u["Name"]]
        soft = resource.RLIM_INFINITY if u["Soft"] == -1 else u["Soft"]
        hard = resource.RLIM_INFINITY if u["Hard"] == -1 else u["Hard"]
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError):
            # Raising a hard limit needs CAP_SYS_RESOURCE in the node's own user
            # namespace, which a lab node has not (runc, as the host's root, can).
            _, cur_hard = resource.getrlimit(which)
            capped = [
                v
                if cur_hard == resource.RLIM_INFINITY
                or (v != resource.RLIM_INFINITY and v <= cur_hard)
                else cur_hard
                for v in (soft, hard)
            ]
            resource.setrlimit(which, (capped[0], capped[1]))
            os.write(
                2,
                f"WARNING: {STANDIN}: --ulimit {u['Name']}={u['Soft']}:{u['Hard']} is "
                f"above this node's hard limit {cur_hard}; the container got "
                f"{capped[0]}:{capped[1]}\n".encode(),
            )


def _reset_signals() -> None:
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def container_init(record: dict[str, Any], staging: str, fail_w: int) -> NoReturn:
    """PID 1: build the root, become the user, exec the command (or run --init)."""
    try:
        inspect, st = record["inspect"], record["standin"]
        config = inspect["Config"]
        root = build_rootfs(record, staging)
        hostname = config["Hostname"].encode()
        # The container's own UTS namespace; with --network host it keeps the
        # node's name (moby sets Config.Hostname to os.Hostname()). A lab
        # node's seccomp profile (podman's) refuses sethostname without
        # CAP_SYS_ADMIN: there the container keeps the node's hostname.
        if (
            hostname != socket.gethostname().encode()
            and libc().sethostname(hostname, len(hostname)) != 0
            and ctypes.get_errno() != errno.EPERM
        ):
            raise InitError(
                f"error during container init: sethostname: "
                f"{os.strerror(ctypes.get_errno()).lower()}"
            )
        if not st["host_network"]:
            _loopback_up()
        os.chroot(root)
        os.chdir("/")
        workdir = config["WorkingDir"] or "/"
        os.makedirs(workdir, exist_ok=True)
        os.chdir(workdir)
        try:
            uid, gid, groups, home = resolve_user(config["User"])
        except InitError as exc:
            raise InitError(f"error during container init: {exc}") from None
        _apply_ulimits(st["ulimits"])
        env_list = _process_env(config["Env"] or [], config["Hostname"])
        env: dict[str, str] = {}
        for entry in env_list:
            key, _, value = entry.partition("=")
            env[key] = value
        if "HOME" not in env:  # runc sets HOME from the user's passwd entry
            env["HOME"] = home
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
        os.umask(0o022)
        argv = list(st["argv"])
        path = _find_executable(argv[0], env)
        if st["init"]:
            _tini(path, argv, env, fail_w)
        _reset_signals()
        os.execve(path, argv, env)  # noqa: S606 -- the container's command
    except InitError as exc:
        message = str(exc)
    except OSError as exc:
        message = f"error during container init: {exc.strerror or exc}"
    except Exception as exc:  # whatever failed must reach docker run
        message = f"error during container init: {STANDIN}: {exc!r}"
    os.write(fail_w, f"{OCI_PREFIX}{message}: unknown".encode())
    os._exit(1)


def _tini(path: str, argv: list[str], env: dict[str, str], fail_w: int) -> NoReturn:
    """``--init``: PID 1 forwards signals to the command and reaps zombies (docker-init)."""
    child = os.fork()
    if child == 0:
        _reset_signals()
        os.execve(path, argv, env)  # noqa: S606 -- the container's command
    os.close(fail_w)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(child, signum)

    for sig in signal.valid_signals():
        if sig in {signal.SIGCHLD, signal.SIGKILL, signal.SIGSTOP}:
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(sig, forward)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


# ------------------------------------------------------------------ commands


def _no_such_container(name: str) -> DockerError:
    return DockerError(daemon(f"No such container: {name}"))


def _is_running(store: Store, cid: str) -> bool:
    record = store.load(cid)
    return bool(record and record["inspect"]["State"]["Running"])


def _wait_stopped(store: Store, cid: str, timeout: float | None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    while _is_running(store, cid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _kill(record: dict[str, Any], signum: int) -> None:
    state = record["inspect"]["State"]
    if state["Running"] and _proc_start_time(state["Pid"]) == record["standin"].get("pid_start"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["Pid"], signum)


def stop_container(
    store: Store, record: dict[str, Any], timeout: int | None, signum: int | None
) -> None:
    """moby daemon/stop.go: the stop signal to PID 1, SIGKILL after the timeout."""
    config = record["inspect"]["Config"]
    if signum is None:
        signum = _signal_number(config.get("StopSignal") or "SIGTERM")
    if timeout is None:
        timeout = config.get("StopTimeout", DEFAULT_STOP_TIMEOUT)
    cid = record["inspect"]["Id"]
    if not record["inspect"]["State"]["Running"]:
        return
    _kill(record, signum)
    if timeout >= 0 and _wait_stopped(store, cid, timeout):
        return
    current = store.load(cid)
    if current:
        _kill(current, signal.SIGKILL)
    _wait_stopped(store, cid, None)


STOP_FLAGS = [
    Flag("signal", "s", "str"),
    Flag("timeout", "t", "int"),
    Flag("time", "", "int", deprecated="use --timeout instead"),
    Flag("help"),
]


def cmd_stop(args: Sequence[str]) -> int:
    usage = "docker stop [OPTIONS] CONTAINER [CONTAINER...]"
    p, names = parse_flags(args, STOP_FLAGS, command="docker stop", usage=usage)
    if not names:
        raise DockerError(
            f"docker: 'docker stop' requires at least 1 argument\n\nUsage:  "
            f"{usage}\n\nSee 'docker stop --help' for more information"
        )
    if "time" in p.changed and "timeout" in p.changed:
        raise DockerError("conflicting options: cannot specify both --timeout and --time")
    timeout = p["timeout"] if "timeout" in p.changed else p["time"]
    signum = _signal_number(p["signal"]) if p["signal"] else None
    store = Store()
    errors = []
    for name in names:
        record = store.find(name)
        if record is None:
            errors.append(daemon(f"No such container: {name}"))
            continue
        stop_container(store, record, timeout, signum)
        print(name, flush=True)
    if errors:
        raise DockerError("\n".join(errors))
    return 0


def cmd_rm(args: Sequence[str]) -> int:
    usage = "docker rm [OPTIONS] CONTAINER [CONTAINER...]"
    p, names = parse_flags(
        args,
        [Flag("force", "f"), Flag("volumes", "v"), Flag("link", "l"), Flag("help")],
        command="docker rm",
        usage=usage,
    )
    if not names:
        raise DockerError(
            f"docker: 'docker rm' requires at least 1 argument\n\nUsage:  "
            f"{usage}\n\nSee 'docker rm --help' for more information"
        )
    store = Store()
    errors = []
    for name in names:
        record = store.find(name)
        if record is None:
            if not p["force"]:  # rm.go: --force ignores containers that are not there
                errors.append(daemon(f"No such container: {name}"))
            continue
        cid = record["inspect"]["Id"]
        if record["inspect"]["State"]["Running"]:
            if not p["force"]:
                errors.append(
                    daemon(
                        f'cannot remove container "{record["inspect"]["Name"]}": '
                        "container is running: stop the container before "
                        "removing or force remove"
                    )
                )
                continue
            _kill(record, signal.SIGKILL)
            _wait_stopped(store, cid, None)
        with store.lock():
            store.remove(cid)
        print(name, flush=True)
    if errors:
        raise DockerError("\n".join(errors))
    return 0


def cmd_logs(args: Sequence[str]) -> int:  # noqa: PLR0912
    usage = "docker logs [OPTIONS] CONTAINER"
    flags = [
        Flag("follow", "f"),
        Flag("tail", "n", "str", "all"),
        Flag("timestamps", "t"),
        Flag("since", "", "str"),
        Flag("until", "", "str"),
        Flag("details"),
        Flag("help"),
    ]
    p, names = parse_flags(args, flags, command="docker logs", usage=usage)
    if len(names) != 1:
        raise DockerError(
            f"docker: 'docker logs' requires 1 argument\n\nUsage:  {usage}\n\n"
            "See 'docker logs --help' for more information"
        )
    if p["since"] or p["until"]:
        raise DockerError(f"{STANDIN}: docker logs --since/--until are not implemented")
    store = Store()
    record = store.find(names[0])
    if record is None:
        raise _no_such_container(names[0])
    tail = p["tail"]
    if tail != "all" and not re.fullmatch(r"-?\d+", tail):
        tail = "all"  # the daemon treats an unparsable tail as all
    path = Path(record["inspect"]["LogPath"])

    def emit(line: bytes) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            return
        text = entry.get("log", "")
        if p["timestamps"]:
            text = f"{entry.get('time', '')} {text}"
        out = sys.stdout if entry.get("stream") == "stdout" else sys.stderr
        out.write(text)
        out.flush()

    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return 0
    with fh:
        lines = fh.read().splitlines(keepends=True)
        pending = b""
        if lines and not lines[-1].endswith(b"\n"):
            pending = lines.pop()
        if tail != "all" and int(tail) >= 0:
            lines = lines[len(lines) - int(tail) :] if int(tail) else []
        for line in lines:
            emit(line)
        if not p["follow"]:
            return 0
        cid = record["inspect"]["Id"]
        while True:
            chunk = fh.read()
            if chunk:
                pending += chunk
                *done, pending = pending.split(b"\n")
                for line in done:
                    emit(line)
                continue
            if not _is_running(store, cid):
                return 0
            time.sleep(0.1)


def _ps_row(record: dict[str, Any]) -> dict[str, Any]:
    """The fields `docker ps --format` offers (docker/cli formatter/container.go)."""
    i = record["inspect"]
    state = i["State"]
    now = time.time()
    if state["Running"]:
        status = f"Up {human_duration(now - parse_time(state['StartedAt']))}"
    elif state["Status"] == "created":
        status = "Created"
    else:
        status = (
            f"Exited ({state['ExitCode']}) "
            f"{human_duration(now - parse_time(state['FinishedAt']))} ago"
        )
    command = " ".join([i["Path"], *i["Args"]])
    if len(command) > 20:
        command = command[:19] + "…"
    created = parse_time(i["Created"])
    return {
        "ID": i["Id"][:12],
        "Image": i["Config"]["Image"],
        "Command": f'"{command}"',
        "CreatedAt": time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(created)),
        "RunningFor": f"{human_duration(now - created)} ago",
        "Status": status,
        "State": state["Status"],
        "Ports": "",
        "Names": i["Name"].lstrip("/"),
        "Labels": ",".join(f"{k}={v}" for k, v in sorted((i["Config"]["Labels"] or {}).items())),
        "Mounts": ",".join(m["Source"] for m in i["Mounts"]),
        "Networks": i["HostConfig"]["NetworkMode"],
        "LocalVolumes": "0",
        "Size": "0B",
    }


def _table(rows: list[dict[str, Any]], template: str, headers: dict[str, str]) -> str:
    """docker/cli formatter: a ``table`` template is tab-aligned with a header row."""
    body = template[len("table") :].strip() if template.startswith("table") else template
    header = _HEADER_FIELD.sub(lambda m: headers.get(m.group(1), m.group(1).upper()), body)
    lines = [header] + [render(body, r) for r in rows]
    cells = [ln.replace("\\t", "\t").split("\t") for ln in lines]
    widths: dict[int, int] = {}
    for row in cells:
        for n, cell in enumerate(row[:-1]):
            widths[n] = max(widths.get(n, 0), len(cell))
    out = []
    for row in cells:
        out.append(
            "   ".join(
                c.ljust(widths[n]) if n < len(row) - 1 else c for n, c in enumerate(row)
            ).rstrip()
        )
    return "\n".join(out) + "\n"


_HEADER_FIELD = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
PS_HEADERS = {
    "ID": "CONTAINER ID",
    "Image": "IMAGE",
    "Command": "COMMAND",
    "RunningFor": "CREATED",
    "CreatedAt": "CREATED AT",
    "Status": "STATUS",
    "Ports": "PORTS",
    "Names": "NAMES",
    "State": "STATE",
    "Labels": "LABELS",
    "Mounts": "MOUNTS",
    "Networks": "NETWORKS",
    "Size": "SIZE",
}
PS_DEFAULT = (
    "table {{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}\t{{.Names}}"
)


def cmd_ps(args: Sequence[str]) -> int:
    usage = "docker ps [OPTIONS]"
    flags = [
        Flag("all", "a"),
        Flag("filter", "f", "list"),
        Flag("format", "", "str"),
        Flag("quiet", "q"),
        Flag("no-trunc"),
        Flag("last", "n", "int", -1),
        Flag("latest", "l"),
        Flag("size", "s"),
        Flag("help"),
    ]
    p, extra = parse_flags(args, flags, command="docker ps", usage=usage)
    if extra:
        raise DockerError(
            f"docker: 'docker ps' accepts no arguments\n\nUsage:  {usage}\n\n"
            "Run 'docker ps --help' for more information"
        )
    store = Store()
    records = store.all_containers()
    filters: list[tuple[str, str]] = []
    for f in p["filter"]:
        key, eq, value = f.partition("=")
        if not eq:
            raise DockerError(
                f'invalid argument "{f}" for "-f, --filter" flag: bad format of '
                "filter (expected name=value)"
            )
        if key not in {"name", "id", "status", "label", "ancestor"}:
            raise DockerError(
                f"{STANDIN}: docker ps --filter {key}=... is not implemented "
                "(name, id, status, label, ancestor are)"
            )
        filters.append((key, value))
    status_filter = any(k == "status" for k, _ in filters)
    if not p["all"] and not status_filter:
        records = [r for r in records if r["inspect"]["State"]["Running"]]
    for key, value in filters:

        def keep(r: dict[str, Any], key: str = key, value: str = value) -> bool:
            i = r["inspect"]
            if key == "name":  # a regular expression over the names (daemon/list.go)
                return re.search(value, i["Name"].lstrip("/")) is not None
            if key == "id":
                return bool(i["Id"].startswith(value))
            if key == "status":
                return bool(i["State"]["Status"] == value)
            if key == "label":
                k, eq, v = value.partition("=")
                labels = i["Config"]["Labels"] or {}
                return k in labels and (not eq or labels[k] == v)
            return value in {i["Config"]["Image"], i["Image"]}

        records = [r for r in records if keep(r)]
    if p["latest"]:
        records = records[:1]
    elif p["last"] >= 0:
        records = records[: p["last"]]
    rows = [_ps_row(r) for r in records]
    if p["no-trunc"]:
        for row, r in zip(rows, records, strict=True):
            row["ID"] = r["inspect"]["Id"]
    if p["quiet"]:
        for row in rows:
            print(row["ID"])
        return 0
    return _list_output(rows, p["format"] or PS_DEFAULT, PS_HEADERS)


def _list_output(rows: list[dict[str, Any]], template: str, headers: dict[str, str]) -> int:
    """``ps`` and ``images``: json lines, a table, or one rendered template per row
    (docker/cli cli/command/formatter)."""
    try:
        if template == "json":
            for row in rows:
                print(go_json(row))
            return 0
        check_template(template)
        if template.startswith("table"):
            sys.stdout.write(_table(rows, template, headers))
        else:
            for row in rows:
                print(render(template, row))
    except TemplateError as exc:
        raise DockerError(str(exc)) from None
    return 0


def _inspect_output(elements: list[dict[str, Any]], template: str | None, errors: list[str]) -> int:
    """docker/cli cli/command/inspect: JSON array or one rendered template per element."""
    if template and template != "json":
        try:
            check_template(template)
        except TemplateError as exc:
            raise DockerError(str(exc), 64) from None
        out = []
        for element in elements:
            try:
                out.append(render(template, element))
            except TemplateError as exc:
                errors.append(str(exc))
        sys.stdout.write("\n".join(out) + "\n" if out else "\n")
    elif template == "json":
        sys.stdout.write(go_json(elements) + "\n")
    else:
        sys.stdout.write(json.dumps(elements, indent=4, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    if errors:
        raise DockerError("\n".join(errors))
    return 0


INSPECT_FLAGS = [
    Flag("format", "f", "str"),
    Flag("size", "s"),
    Flag("type", "", "str"),
    Flag("platform", "", "str"),
    Flag("help"),
]


def cmd_inspect(args: Sequence[str], kind: str = "") -> int:
    command = {
        "": "docker inspect",
        "container": "docker container inspect",
        "image": "docker image inspect",
    }[kind]
    what = "IMAGE [IMAGE...]" if kind == "image" else "NAME|ID [NAME|ID...]"
    usage = f"{command} [OPTIONS] {what}"
    p, names = parse_flags(args, INSPECT_FLAGS, command=command, usage=usage)
    if not names:
        raise DockerError(
            f"docker: '{command}' requires at least 1 argument\n\nUsage:  "
            f"{usage}\n\nSee '{command} --help' for more information"
        )
    kind = kind or (p["type"] or "")
    if kind not in {"", "container", "image"}:
        raise DockerError(f"{STANDIN}: docker inspect --type {kind} is not implemented")
    store = Store()
    elements: list[dict[str, Any]] = []
    errors: list[str] = []
    for name in names:
        if kind in {"", "container"}:
            record = store.find(name)
            if record is not None:
                elements.append(record["inspect"])
                continue
        if kind in {"", "image"}:
            image_id = store.resolve_image(name)
            if image_id is not None:
                elements.append(store.image_inspect(image_id))
                continue
        errors.append(
            {
                "": f"Error: No such object: {name}",
                "container": daemon(f"No such container: {name}"),
                "image": daemon(f"No such image: {name}"),
            }[kind]
        )
    return _inspect_output(elements, p["format"], errors)


IMAGE_HEADERS = {
    "Repository": "REPOSITORY",
    "Tag": "TAG",
    "Digest": "DIGEST",
    "ID": "IMAGE ID",
    "CreatedSince": "CREATED",
    "Size": "SIZE",
    "CreatedAt": "CREATED AT",
}


def _image_rows(info: dict[str, Any], *, need_digest: bool) -> list[tuple[str, str, str]]:
    """(repository, tag, digest) rows of one image in `docker images` (docker/cli
    cli/command/formatter/image.go: ``isDangling``, ``imageFormatTaggedAndDigest``): a row
    per tag (per tag and digest of its repository when digests are shown), then a
    ``<none>`` tag row for each repository that has only digest references."""
    if not info["RepoTags"] and not info["RepoDigests"]:
        return [("<none>", "<none>", "<none>")]
    tags: dict[str, list[str]] = {}
    for ref in info["RepoTags"]:
        repo, _, tag = ref.rpartition(":")
        tags.setdefault(repo, []).append(tag)
    digests: dict[str, list[str]] = {}
    for ref in info["RepoDigests"]:
        repo, _, digest = ref.partition("@")
        digests.setdefault(repo, []).append(digest)
    rows = []
    for repo, names in tags.items():
        shown = digests.pop(repo, []) if need_digest else []
        digests.pop(repo, None)
        for tag in names:
            rows += [(repo, tag, d) for d in shown] or [(repo, tag, "<none>")]
    for repo, only in digests.items():
        rows += [(repo, "<none>", d) for d in only] if need_digest else [(repo, "<none>", "<none>")]
    return rows


def cmd_images(args: Sequence[str]) -> int:
    usage = "docker images [OPTIONS] [REPOSITORY[:TAG]]"
    flags = [
        Flag("all", "a"),
        Flag("digests"),
        Flag("filter", "f", "list"),
        Flag("format", "", "str"),
        Flag("no-trunc"),
        Flag("quiet", "q"),
        Flag("tree"),
        Flag("help"),
    ]
    p, extra = parse_flags(args, flags, command="docker images", usage=usage)
    store = Store()
    rows = []
    need_digest = p["digests"] or ".Digest" in (p["format"] or "")
    for image_id in store.image_ids():
        info = store.image_inspect(image_id)
        for repo, tag, digest in _image_rows(info, need_digest=need_digest):
            if extra and not (repo == extra[0] or f"{repo}:{tag}" == extra[0]):
                continue
            created = parse_time(info["Created"])
            rows.append(
                {
                    "Repository": repo,
                    "Tag": tag,
                    "Digest": digest,
                    "ID": image_id if p["no-trunc"] else image_id[7:19],
                    "CreatedSince": f"{human_duration(time.time() - created)} ago",
                    "CreatedAt": time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(created)),
                    "Size": human_size(info["Size"]),
                }
            )
    if p["quiet"]:
        for row in rows:
            print(row["ID"])
        return 0
    default = (
        "table {{.Repository}}\t{{.Tag}}\t"
        + ("{{.Digest}}\t" if p["digests"] else "")
        + "{{.ID}}\t{{.CreatedSince}}\t{{.Size}}"
    )
    return _list_output(rows, p["format"] or default, IMAGE_HEADERS)


def cmd_pull(args: Sequence[str]) -> int:
    usage = "docker pull [OPTIONS] NAME[:TAG|@DIGEST]"
    flags = [
        Flag("all-tags", "a"),
        Flag("quiet", "q"),
        Flag("platform", "", "str"),
        Flag("disable-content-trust", "", "bool", True),
        Flag("help"),
    ]
    p, names = parse_flags(args, flags, command="docker pull", usage=usage)
    if len(names) != 1:
        raise DockerError(
            f"docker: 'docker pull' requires 1 argument\n\nUsage:  {usage}\n\n"
            "See 'docker pull --help' for more information"
        )
    if p["all-tags"]:
        raise DockerError(f"{STANDIN}: docker pull --all-tags is not implemented")
    text = names[0]
    ref = Ref.parse(text)
    if not ref.tag and not ref.digest and not p["quiet"]:
        print("Using default tag: latest")
    if p["quiet"]:
        with open(os.devnull, "w") as sink:
            pull(Store(), text, out=sink, final_line=False)
        print(ref.normalized)
    else:
        pull(Store(), text)
    return 0


# ------------------------------------------------------------------ tag and prune


def _familiar_name(ref: str) -> str:
    """The repository of a stored reference (``name:tag`` or ``name@digest``)."""
    return Ref.parse(ref).repository


def _references(store: Store, image_id: str) -> list[str]:
    """The references to an image, sorted by their normalized String() as moby's
    reference store returns them (reference/store.go, ``References``, ``lexicalRefs``)."""
    refs = [r for r, i in store.repositories().items() if i == image_id]
    return sorted(refs, key=lambda r: Ref.parse(r).normalized)


def _containers_using(store: Store, image_id: str) -> list[dict[str, Any]]:
    return [r for r in store.all_containers() if r["inspect"]["Image"] == image_id]


def _is_single_reference(refs: Sequence[str]) -> bool:
    """moby daemon/images/image_delete.go ``isSingleReference``: every reference of one
    repository and at most one tag."""
    if len(refs) <= 1:
        return len(refs) == 1
    single = None
    canonical: set[str] = set()
    for ref in refs:
        if "@" in ref:
            canonical.add(_familiar_name(ref))
        elif single is None:
            single = ref
        else:
            return False
    name = _familiar_name(single or refs[0])
    return len(canonical) == 1 and name in canonical


class _Conflict(Exception):
    """An image delete conflict (moby ``imageDeleteConflict``; prune skips the image)."""

    def __init__(self, message: str, *, used: bool = False) -> None:
        super().__init__(message)
        self.used = used


def _delete_conflict(
    store: Store, image_id: str, *, references: bool, stopped: bool
) -> _Conflict | None:
    """moby image_delete.go ``checkImageDeleteConflict``: a running container (hard),
    then, as asked, references and stopped containers (soft). No child images: the
    stand-in's images have no parents."""
    short = image_id.removeprefix("sha256:")[:12]
    users = _containers_using(store, image_id)
    running = [r for r in users if r["inspect"]["State"]["Running"]]
    if running:
        cid = running[0]["inspect"]["Id"][:12]
        return _Conflict(
            f"conflict: unable to delete {short} (cannot be forced) - image is being used "
            f"by running container {cid}",
            used=True,
        )
    if references and _references(store, image_id):
        return _Conflict(
            f"conflict: unable to delete {short} (must be forced) - image is referenced in "
            "multiple repositories"
        )
    if stopped and users:
        cid = users[0]["inspect"]["Id"][:12]
        return _Conflict(
            f"conflict: unable to delete {short} (must be forced) - image is being used by "
            f"stopped container {cid}",
            used=True,
        )
    return None


def _untag(store: Store, ref: str) -> None:
    repos = store.repositories()
    repos.pop(ref, None)
    store._save_repositories(repos)


def image_delete(store: Store, name: str, image_id: str) -> tuple[list[str], int]:
    """moby daemon/images/image_delete.go ``ImageDelete(name, force=false, prune=true)``
    for a reference or an image id; returns docker's "untagged: "/"deleted: " lines and
    the layer bytes freed. Raises _Conflict where dockerd refuses."""
    records: list[str] = []
    refs = _references(store, image_id)
    removed_repository_ref = False
    if not image_id.removeprefix("sha256:").startswith(name.removeprefix("sha256:")):
        ref = Ref.parse(name)
        key = ref.canonical if ref.digest else ref.tagged
        users = _containers_using(store, image_id)
        if _is_single_reference(refs) and users:
            raise _Conflict(
                f'conflict: unable to remove repository reference "{name}" (must force) - '
                f"container {users[0]['inspect']['Id'][:12]} is using its referenced image "
                f"{image_id.removeprefix('sha256:')[:12]}"
            )
        _untag(store, key)
        records.append(f"untagged: {key}")
        refs = _references(store, image_id)
        # A tag removed and only digest references of its repository left: those go too.
        if not ref.digest and not any(
            "@" not in r and _familiar_name(r) == ref.repository for r in refs
        ):
            for r in [r for r in refs if "@" in r and _familiar_name(r) == ref.repository]:
                _untag(store, r)
                records.append(f"untagged: {r}")
            refs = _references(store, image_id)
        if refs:
            return records, 0
        removed_repository_ref = True
    elif _is_single_reference(refs):
        conflict = _delete_conflict(store, image_id, references=False, stopped=True)
        if conflict is not None:
            raise conflict
        for r in refs:
            _untag(store, r)
            records.append(f"untagged: {r}")
    # imageDeleteHelper: quiet after a removed reference, unless the image is dangling
    # and unused.
    conflict = _delete_conflict(store, image_id, references=True, stopped=True)
    if conflict is not None:
        if removed_repository_ref and (_references(store, image_id) or conflict.used):
            return records, 0
        raise conflict
    for r in _references(store, image_id):
        _untag(store, r)
        records.append(f"untagged: {r}")
    config = store.image_config(image_id)
    layer = store.image_dir(image_id) / "layer.size"
    freed = int(layer.read_text()) if layer.exists() else 0
    shutil.rmtree(store.image_dir(image_id), ignore_errors=True)
    records.append(f"deleted: {image_id}")
    # The removed layers by chain id; an image of one layer: its diff id.
    records += [f"deleted: {d}" for d in config.get("rootfs", {}).get("diff_ids", [])[:1]]
    return records, freed


def _refuse_prompt(command: str, force: bool) -> None:
    if not force:
        raise DockerError(
            f"{STANDIN}: {command} without --force asks for confirmation on the terminal; "
            "that prompt is not implemented: give -f"
        )


def _no_arguments(command: str, usage: str, extra: Sequence[str]) -> None:
    if extra:
        raise DockerError(
            f"docker: '{command}' accepts no arguments\n\nUsage:  {usage}\n\n"
            f"Run '{command} --help' for more information"
        )


def _prune_flags(*, images: bool) -> list[Flag]:
    return [
        Flag("force", "f"),
        *([Flag("all", "a")] if images else []),
        Flag("filter", "", "list"),
        Flag("help"),
    ]


def cmd_image_prune(args: Sequence[str]) -> int:
    """``docker image prune [-a] -f``: docker/cli cli/command/image/prune.go (the output),
    moby daemon/images/image_prune.go (which images): without -a only images without a
    tag (a digest reference alone is no tag); with -a every image; each through
    ImageDelete, which keeps an image a container uses, running or stopped."""
    command, usage = "docker image prune", "docker image prune [OPTIONS]"
    p, extra = parse_flags(args, _prune_flags(images=True), command=command, usage=usage)
    _no_arguments(command, usage, extra)
    if p["filter"]:
        raise DockerError(f"{STANDIN}: {command} --filter is not implemented")
    _refuse_prompt(command, p["force"])
    store = Store()
    records: list[str] = []
    freed = 0
    with store.lock():
        for image_id in store.image_ids():
            refs = _references(store, image_id)
            names = refs if refs else [image_id.removeprefix("sha256:")]
            if refs and not p["all"] and any("@" not in r for r in refs):
                continue
            for name in names:
                if store.resolve_image(name) != image_id:
                    continue  # gone with an earlier reference: "No such image", skipped
                try:
                    done, size = image_delete(store, name, image_id)
                except _Conflict:
                    continue  # image_prune.go imageDeleteFailed: skipped, not reported
                records += done
                freed += size
    if records:
        print("Deleted Images:\n" + "".join(r + "\n" for r in records))
    print(f"Total reclaimed space: {human_size(freed, 4)}", flush=True)
    return 0


def cmd_container_prune(args: Sequence[str]) -> int:
    """``docker container prune -f``: docker/cli cli/command/container/prune.go (the
    output), moby daemon/prune.go ``ContainersPrune`` (every container not running). The
    stand-in counts no writable-layer size: it reports 0B reclaimed."""
    command, usage = "docker container prune", "docker container prune [OPTIONS]"
    p, extra = parse_flags(args, _prune_flags(images=False), command=command, usage=usage)
    _no_arguments(command, usage, extra)
    if p["filter"]:
        raise DockerError(f"{STANDIN}: {command} --filter is not implemented")
    _refuse_prompt(command, p["force"])
    store = Store()
    deleted = []
    with store.lock():
        for record in store.all_containers():
            if not record["inspect"]["State"]["Running"]:
                store.remove(record["inspect"]["Id"])
                deleted.append(record["inspect"]["Id"])
    if deleted:
        print("Deleted Containers:\n" + "".join(c + "\n" for c in deleted))
    print(f"Total reclaimed space: {human_size(0, 4)}", flush=True)
    return 0


def cmd_tag(args: Sequence[str]) -> int:
    """``docker tag SOURCE TARGET``: docker/cli cli/command/image/tag.go, moby
    client/image_tag.go (the checks and texts), daemon/images/image_tag.go (``AddTag``
    with force: a tag that names another image moves). Prints nothing."""
    usage = "docker tag SOURCE_IMAGE[:TAG] TARGET_IMAGE[:TAG]"
    _, names = parse_flags(
        args, [Flag("help")], command="docker tag", usage=usage, interspersed=False
    )
    if len(names) != 2:
        raise DockerError(
            f"docker: 'docker tag' requires 2 arguments\n\nUsage:  {usage}\n\n"
            "See 'docker tag --help' for more information"
        )
    source, target = names
    if not re.fullmatch(r"(?:sha256:)?[0-9a-f]{64}", source):
        try:
            Ref.parse(source)
        except DockerError as exc:
            raise DockerError(
                f'Error parsing reference: "{source}" is not a valid repository/tag: {exc.message}'
            ) from None
    if re.fullmatch(r"[0-9a-f]{64}", target):
        raise DockerError(
            f'Error parsing reference: "{target}" is not a valid repository/tag: invalid '
            f"repository name ({target}), cannot specify 64-byte hexadecimal strings"
        )
    try:
        ref = Ref.parse(target)
    except DockerError as exc:
        raise DockerError(
            f'Error parsing reference: "{target}" is not a valid repository/tag: {exc.message}'
        ) from None
    if ref.digest:
        raise DockerError("refusing to create a tag with a digest reference")
    if ref.repository == "sha256":
        raise DockerError(
            daemon("refusing to create an ambiguous tag using digest algorithm as name")
        )
    store = Store()
    with store.lock():
        image_id = store.resolve_image(source)
        if image_id is None:
            raise DockerError(daemon(f"No such image: {source}"))
        repos = store.repositories()
        repos[ref.tagged] = image_id
        store._save_repositories(repos)
        _write_json(store.image_dir(image_id) / "meta.json", {"LastTagTime": now_rfc3339()})
    return 0


def cmd_version(args: Sequence[str]) -> int:
    p, _ = parse_flags(
        args,
        [Flag("format", "f", "str"), Flag("help")],
        command="docker version",
        usage="docker version [OPTIONS]",
    )
    info: dict[str, dict[str, Any]] = {
        "Client": {
            "Platform": {"Name": f"Docker Engine - Community ({STANDIN})"},
            "Version": DOCKER_VERSION,
            "ApiVersion": API_VERSION,
            "DefaultAPIVersion": API_VERSION,
            "GitCommit": "sparkctl",
            "GoVersion": f"python{sys.version.split()[0]}",
            "Os": "linux",
            "Arch": _arch(),
            "BuildTime": "",
            "Context": "default",
        },
        "Server": {
            "Platform": {"Name": f"Docker Engine - Community ({STANDIN})"},
            "Version": DOCKER_VERSION,
            "ApiVersion": API_VERSION,
            "MinAPIVersion": "1.24",
            "GitCommit": "sparkctl",
            "GoVersion": f"python{sys.version.split()[0]}",
            "Os": "linux",
            "Arch": _arch(),
            "KernelVersion": os.uname().release,
        },
    }
    if p["format"]:
        try:
            check_template(p["format"])
            print(render(p["format"], info))
        except TemplateError as exc:
            raise DockerError(str(exc)) from None
        return 0
    c, s = info["Client"], info["Server"]
    print(
        f"Client: {c['Platform']['Name']}\n Version:           {c['Version']}\n"
        f" API version:       {c['ApiVersion']}\n Go version:        {c['GoVersion']}\n"
        f" Git commit:        {c['GitCommit']}\n OS/Arch:           linux/{c['Arch']}\n"
        f" Context:           default\n\nServer: {s['Platform']['Name']}\n Engine:\n"
        f"  Version:          {s['Version']}\n  API version:      {s['ApiVersion']} "
        f"(minimum version 1.24)\n  Go version:       {s['GoVersion']}\n"
        f"  OS/Arch:          linux/{s['Arch']}\n  Experimental:     false"
    )
    return 0


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "run": cmd_run,
    "ps": cmd_ps,
    "stop": cmd_stop,
    "rm": cmd_rm,
    "logs": cmd_logs,
    "inspect": cmd_inspect,
    "images": cmd_images,
    "pull": cmd_pull,
    "tag": cmd_tag,
    "version": cmd_version,
}
GROUPS: dict[str, dict[str, Callable[[Sequence[str]], int]]] = {
    "container": {
        "run": cmd_run,
        "ps": cmd_ps,
        "ls": cmd_ps,
        "list": cmd_ps,
        "stop": cmd_stop,
        "rm": cmd_rm,
        "remove": cmd_rm,
        "logs": cmd_logs,
        "inspect": lambda a: cmd_inspect(a, "container"),
        "prune": cmd_container_prune,
    },
    "image": {
        "inspect": lambda a: cmd_inspect(a, "image"),
        "pull": cmd_pull,
        "ls": cmd_images,
        "list": cmd_images,
        "tag": cmd_tag,
        "prune": cmd_image_prune,
    },
}
NEEDS_DAEMON = {
    "run",
    "ps",
    "stop",
    "rm",
    "logs",
    "inspect",
    "images",
    "pull",
    "tag",
    "container",
    "image",
}


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] == ["__shim"]:
        try:
            return shim_main(args[1:])
        finally:
            _release_scope()
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in {"-v", "--version"}:
            print(f"Docker version {DOCKER_VERSION}, build sparkctl ({STANDIN})")
            return 0
        if flag in {"-h", "--help"}:
            print(
                f"Usage:  docker [OPTIONS] COMMAND\n\n{STANDIN}: run, ps, stop, rm, logs, "
                "inspect, images, pull, tag, version, container ..., image ..."
            )
            return 0
        if flag in {"-D", "--debug"}:
            continue
        if flag in {"-l", "--log-level", "-c", "--context", "--config", "-H", "--host"}:
            raise DockerError(f"{STANDIN}: the global flag {flag} is not implemented")
        raise DockerError(f"unknown flag: {flag}\nSee 'docker --help'.", 125)
    if not args:
        print("Usage:  docker [OPTIONS] COMMAND", file=sys.stderr)
        return 0
    command, rest = args[0], args[1:]
    if command in NEEDS_DAEMON and os.geteuid() != 0:
        raise DockerError(
            "permission denied while trying to connect to the Docker daemon "
            'socket at unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2F'
            f'docker.sock/v{API_VERSION}/containers/json": dial unix '
            "/var/run/docker.sock: connect: permission denied"
        )
    if command in GROUPS:
        if not rest or rest[0] not in GROUPS[command]:
            sub = rest[0] if rest else ""
            raise DockerError(
                f"docker: unknown command: docker {command} {sub}\n\nRun "
                f"'docker {command} --help' for more information"
                if sub
                else f"Usage:  docker {command} COMMAND"
            )
        return GROUPS[command][rest[0]](rest[1:])
    if command not in COMMANDS:
        raise DockerError(
            f"docker: unknown command: docker {command}\n\nRun 'docker --help' "
            f"for more information ({STANDIN} implements: "
            f"{', '.join(sorted(COMMANDS))}, container, image)"
        )
    return COMMANDS[command](rest)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except DockerError as exc:
        print(exc.message, file=sys.stderr)
        sys.exit(exc.code)
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
