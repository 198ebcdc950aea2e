#!/usr/bin/env python3
"""sparkctl-model-relay: manifest, check and pipelined fan-out of a model directory.

Installed on every node by the model_cache role (standard library only). Six
subcommands, each printing one JSON object on stdout:

``manifest ROOT --out FILE --state FILE``
    Walks ROOT (symlinks followed: a Hugging Face snapshot is links into
    blobs/) and writes the manifest: every file's relative path, size and
    SHA-256. Hashes are reused from the state file for files whose size and
    mtime did not change, so a re-run reads nothing it has read before.

``check ROOT --manifest FILE --state FILE --need-out FILE [--full]``
    Compares the local copy with the manifest: missing files, files of
    another size, and (for files whose size or mtime changed since they were
    last verified, or all files with --full) files of another SHA-256. Writes
    the relative paths this node needs, one per line, and reports the bytes
    needed and the bytes free under ROOT's file system.

``send ROOT --files FILE --chain JSON [--manifest FILE] [--progress FILE] [--streams K|auto]
[--transport ssh|tcp]``
    Streams the listed files (with --manifest: only files it lists, each a plain
    relative path) to the first node of the chain, as K streams at
    once over disjoint pieces (a file bigger than a stream's share is split by
    byte range), stream i reaching each hop on its twin ``hosts[i % len]``.
    Files are read with sendfile(2): the kernel copies from the page cache.

``fetch-hf REPO --revision SHA --cache-dir DIR --manifest FILE --state FILE [--token-stdin]``
    Downloads a Hugging Face repository at a pinned commit into DIR in the
    hub cache layout (``models--org--name/snapshots/SHA``, what
    ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE=1`` read), with ``huggingface_hub``
    (run by the virtualenv that has it), and writes the revision's manifest
    from the first complete download. Later runs check the copy against that
    manifest, contact the Hub only for files that are missing or differ, and
    download those again. With ``--token-stdin`` the token is the first line
    of stdin (empty: anonymous, and no token found elsewhere is used either);
    otherwise it is ``HF_TOKEN`` from the environment. It is never an argument
    and never printed: it goes to huggingface_hub as its ``token=`` argument
    only (the library puts it in its requests' headers, in this process; it
    starts no other program), and every message and every line the library
    writes on stdout/stderr during the download has it replaced by ``<token>``.
    The environment variable shows in ``/proc/PID/environ`` of the relay and
    in the command line of the shell that set it (``HF_TOKEN=... python3``,
    how Ansible's ``environment:`` works); stdin shows nowhere.

``serve --cache-dir DIR --net CIDR [--net CIDR] --cipher NAME [--key FILE]``
    The relay key's forced command (authorized_keys ``command=``): runs the
    ``recv`` that ``SSH_ORIGINAL_COMMAND`` asks for only when it has the one
    shape the sender writes, and only on a chain whose paths are this node's
    cache files and whose addresses are in its fabric networks; it reaches the
    next hop with its own ssh command and key, never with one the upstream sent.

``recv --chain JSON [--stream I --streams K] [--transport ssh|tcp]``
    Run by the previous hop (through ssh). Reads one stream and, WHILE reading
    it, passes every byte on to the next node of the chain (tee(2) from pipe to
    pipe: the kernel duplicates page references; a copy otherwise), so all
    nodes receive at the speed of the slowest link instead of the source
    sending one full copy per node. It writes only the files this node needs,
    hashing each whole file as it is written, and moves a file into place only
    when its size and SHA-256 are the manifest's (a truncated or corrupt
    transfer never leaves a file that looks complete). Byte ranges of a split
    file go into one partial file shared by the node's streams; the stream
    that writes the last range hashes the file and moves it into place. The
    last of a node's K streams to end checks that every file the node needed
    is in place. Progress lines from the nodes downstream are passed upstream
    on stderr, so the sender sees every node's bytes. With ``--transport
    tcp`` the first line of stdin is a one-time token; the relay listens on
    its own address for this stream, prints ``listening PORT``, and reads the
    stream from the one connection that presents the token (unencrypted).

The stream: ``SPKR2\n``, then records of a 4-byte big-endian length, a JSON
header of that length and, for a piece (``{"path", "offset", "length",
"size"}``), its bytes; the last record is ``{"end": true, "pieces": N}``.

The chain is a JSON list of hops ``{"host", "hosts", "name", "root", "manifest",
"state", "need", "job"}``; each ``recv`` handles the first and passes the rest on. ``via`` is
the command that reaches a host (default ``ssh -T -o BatchMode=yes
-o Compression=no {host}``; the role's, and ``serve``'s own, is :func:`relay_via`).
Node to node, a hop is reached with the relay key, whose authorized_keys line
forces ``serve``: whatever the upstream sends is data to that node, never a path
outside its cache or a command.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import hmac
import io
import ipaddress
import json
import mmap
import os
import re
import select
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from secrets import token_hex
from typing import IO, Any, Protocol

CHUNK = 1 << 20
TOKEN_LIMIT = 4096  # bytes --token-stdin reads at most (HF tokens are ~40 characters)
MASK = "<token>"
PROGRESS_EVERY = 0.5  # seconds between progress lines
DEFAULT_VIA = "ssh -T -o BatchMode=yes -o Compression=no {host}"
RELAY = "sparkctl-model-relay"
PARTIAL = ".sparkctl-partial"  # a file being received (never in a manifest, never walked)
RANGES = ".sparkctl-ranges"  # the byte ranges of a partial file received so far
HASH_THREADS = 8  # files hashed at once (hashlib releases the GIL for large updates)
MAX_REL = 4096  # bytes of one relative path in a manifest (PATH_MAX)
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
JOB = re.compile(r"[a-z0-9]{1,64}")


class RelayError(Exception):
    """A failure with a message for the operator (exit code 1)."""


# ------------------------------------------------------------------ manifest
def _hub_repo(root: Path) -> Path | None:
    """The repo directory of a Hugging Face hub cache snapshot
    (``models--org--name/snapshots/SHA``), whose files link into ``../../blobs``."""
    resolved = root.resolve()
    if resolved.parent.name == "snapshots" and resolved.parents[1].name.startswith(
        ("models--", "datasets--", "spaces--")
    ):
        return resolved.parents[1]
    return None


def _walk(root: Path, link_root: Path | None = None) -> Iterator[Path]:
    """Regular files under root, skipping partial transfers. A file link is followed only
    to a file inside ``link_root`` (root itself; for a Hugging Face snapshot the repo's
    cache directory, whose blobs/ its links point into); a directory link is refused:
    nothing outside the model root is read, hashed or sent."""
    base = (link_root or _hub_repo(root) or root).resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in dirnames:
            if (Path(dirpath) / name).is_symlink():
                raise RelayError(
                    f"{Path(dirpath) / name} is a link to a directory; sparkctl "
                    "follows no directory link (point the source at the real "
                    "directory, or copy the files in)"
                )
        for name in sorted(filenames):
            if name.endswith((PARTIAL, RANGES)):
                continue
            path = Path(dirpath) / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(base):
                    raise RelayError(
                        f"{path} links to {target}, outside {base}: sparkctl "
                        "reads nothing outside the model root"
                    )
            if path.is_file():
                yield path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def hash_all(paths: list[Path]) -> list[str]:
    """SHA-256 of every path, several files at once on as many cores as there are."""
    if len(paths) < 2:
        return [sha256_file(p) for p in paths]
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - 13 ms a start: only here

    workers = max(1, min(HASH_THREADS, os.cpu_count() or 1, len(paths)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(sha256_file, paths))


def load_state(path: Path) -> dict[str, dict[str, Any]]:
    """rel path -> {size, mtime_ns, sha256} of files hashed before (empty when unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("files", {}) if isinstance(data, dict) else {}


def save_state(path: Path, files: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"version": 1, "files": files}, sort_keys=True) + "\n")
    tmp.replace(path)


def _known(state: dict[str, dict[str, Any]], rel: str, st: os.stat_result) -> str | None:
    entry = state.get(rel)
    if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
        return str(entry.get("sha256"))
    return None


def build_manifest(root: Path, state_path: Path, link_root: Path | None = None) -> dict[str, Any]:
    """The manifest of root; hashes reused from the state where size and mtime match."""
    if not root.is_dir():
        raise RelayError(f"{root} is not a directory")
    state = load_state(state_path)
    found = [
        (path, path.relative_to(root).as_posix(), path.stat()) for path in _walk(root, link_root)
    ]
    digests = [_known(state, rel, st) for _, rel, st in found]
    todo = [i for i, d in enumerate(digests) if d is None]
    for i, digest in zip(todo, hash_all([found[i][0] for i in todo]), strict=True):
        digests[i] = digest
    hashed = sum(found[i][2].st_size for i in todo)
    files: list[dict[str, Any]] = []
    new_state: dict[str, dict[str, Any]] = {}
    for (_, rel, st), digest in zip(found, [str(d) for d in digests], strict=True):
        files.append({"path": rel, "size": st.st_size, "sha256": digest})
        new_state[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    if not files:
        raise RelayError(f"{root} holds no files")
    save_state(state_path, new_state)
    return {
        "version": 1,
        "files": files,
        "total_bytes": sum(f["size"] for f in files),
        "hashed_bytes": hashed,
    }


def safe_rel(rel: object) -> str | None:
    """Why ``rel`` cannot name a file inside a model directory, or None when it can.

    A manifest is made on the head (or the controller) and copied to every node,
    and a sender's file list comes from what the nodes reported: neither is taken
    as a path until it is a plain relative path, written the one way PurePosixPath
    writes it (no "", ".", "..", "//", leading or trailing "/"), of printable
    characters (the need list is one path a line), and not one of the relay's own
    working names."""
    if not isinstance(rel, str) or not rel:
        return "not a path"
    pure = PurePosixPath(rel)
    checks = (
        (len(rel.encode()) > MAX_REL, f"longer than {MAX_REL} bytes"),
        (not rel.isprintable(), "holds a control character"),
        (pure.is_absolute(), "is absolute"),
        (
            ".." in pure.parts or str(pure) != rel,
            "is not a plain relative path (.., ., // or a trailing /)",
        ),
        (
            pure.name.endswith((PARTIAL, RANGES)),
            "ends with a name the relay keeps for its partial files",
        ),
    )
    return next((why for bad, why in checks if bad), None)


def read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """rel path -> entry; refuses anything but plain relative paths with a size and a
    SHA-256 (see :func:`safe_rel`), each once."""
    try:
        data = json.loads(path.read_text())
        entries = data["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RelayError(f"{path}: not a sparkctl model manifest ({exc})") from None
    if not isinstance(entries, list):
        raise RelayError(f"{path}: not a sparkctl model manifest (files is not a list)")
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise RelayError(f"{path}: an entry is not a JSON object")
        rel = entry.get("path")
        why = safe_rel(rel)
        if why is not None or not isinstance(rel, str):
            raise RelayError(f"{path}: unsafe path {rel!r} in the manifest: {why}")
        size, digest = entry.get("size"), entry.get("sha256")
        if (
            isinstance(size, bool)
            or not isinstance(size, int)
            or size < 0
            or not isinstance(digest, str)
            or not SHA256_HEX.fullmatch(digest)
        ):
            raise RelayError(f"{path}: entry {rel!r} lacks a size or a SHA-256")
        if rel in out:
            raise RelayError(f"{path}: {rel!r} is listed twice")
        out[rel] = entry
    return out


# --------------------------------------------------------------------- check
def _clear_leftovers(root: Path, state_path: Path) -> None:
    """Partial files, range notes and stream counters of transfers that ended early
    (each is named after its transfer, so a new one never reuses them)."""
    if root.is_dir():
        for dirpath, _, filenames in os.walk(root, followlinks=False):
            for name in filenames:
                if name.endswith((PARTIAL, RANGES)):
                    (Path(dirpath) / name).unlink(missing_ok=True)
    for counter in state_path.parent.glob(f"{state_path.name}.*.streams"):
        counter.unlink(missing_ok=True)


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (for the free space of a missing directory)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check(
    root: Path,
    manifest_path: Path,
    state_path: Path,
    need_out: Path | None,
    *,
    full: bool = False,
    link: Path | None = None,
    read_only: bool = False,
) -> dict[str, Any]:
    """What this node lacks, against the manifest (see the module docstring).

    ``read_only`` (``sparkctl validate``) writes nothing: the hash state is
    used but not updated, no need list is written and no directory is made.
    """
    manifest = read_manifest(manifest_path)
    state = {} if full else load_state(state_path)
    new_state: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    bad: list[str] = []
    present: list[tuple[str, os.stat_result, str | None]] = []
    for rel, entry in manifest.items():
        path = root / rel
        try:
            st = path.stat()
        except FileNotFoundError:
            missing.append(rel)
            continue
        if not path.is_file() or st.st_size != entry["size"]:
            bad.append(rel)
            continue
        present.append((rel, st, _known(state, rel, st)))
    todo = [rel for rel, _, digest in present if digest is None]
    fresh = dict(zip(todo, hash_all([root / rel for rel in todo]), strict=True))
    hashed = sum(st.st_size for rel, st, digest in present if digest is None)
    for rel, st, known in present:
        digest = known or fresh[rel]
        if digest != manifest[rel]["sha256"]:
            bad.append(rel)
            continue
        new_state[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    bad.sort(key=list(manifest).index)
    need = missing + bad
    if not read_only:
        _clear_leftovers(root, state_path)
        save_state(state_path, new_state)
        if need_out is not None:
            need_out.parent.mkdir(parents=True, exist_ok=True)
            need_out.write_text("".join(f"{rel}\n" for rel in need))
        root.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(_existing(root))
    need_bytes = sum(manifest[rel]["size"] for rel in need)
    return {
        "files": len(manifest),
        "missing": missing,
        "bad": bad,
        "need": len(need),
        "need_bytes": need_bytes,
        "free_bytes": usage.free,
        "hashed_bytes": hashed,
        "total_bytes": sum(e["size"] for e in manifest.values()),
        "link_target": str(link.readlink()) if link is not None and link.is_symlink() else None,
    }


# ---------------------------------------------------------------- the chain
# The stream each hop reads and forwards: MAGIC, then records, each a 4-byte
# big-endian length, that many bytes of JSON header, and for a piece the
# piece's bytes. A piece is a whole file or a byte range of one; the last
# record is {"end": true, "pieces": N}, so a cut stream is told from a whole one.
MAGIC = b"SPKR2\n"
HEADER = struct.Struct(">I")
MAX_HEADER = 1 << 16
MIN_PIECE = 64 << 20  # a file is split across streams only into pieces this big or bigger
PIPE_SIZE = 1 << 20  # asked of every pipe the chain reads or tees (F_SETPIPE_SZ)
MAX_STREAMS = 32
TOKEN_HEX = 64  # the one-time token of an unencrypted (tcp) connection, hex characters
ACCEPT_TIMEOUT = 60.0
MAX_IDLE = 7 * 86400
TRANSPORTS = ("ssh", "tcp")

Piece = tuple[str, int, int, int]  # path, offset, length, size of the whole file


def hop_host(hop: dict[str, Any], stream: int = 0) -> str:
    """The address stream ``stream`` reaches this hop on: its twins in turn."""
    hosts = hop.get("hosts") or [hop["host"]]
    return str(hosts[stream % len(hosts)])


def _hop_name(hop: dict[str, Any]) -> str:
    return str(hop.get("name") or hop["host"])


def _via(hop: dict[str, Any], stream: int = 0) -> list[str]:
    via = str(hop.get("via") or DEFAULT_VIA)
    return [w.replace("{host}", hop_host(hop, stream)) for w in shlex.split(via)]


def next_command(
    chain: list[dict[str, Any]], stream: int = 0, streams: int = 1, transport: str = "ssh"
) -> list[str]:
    """argv that starts ``recv`` on the first hop of ``chain`` with the rest of it."""
    hop = chain[0]
    relay = str(hop.get("relay") or RELAY)
    args = [*shlex.split(relay), "recv", "--chain", json.dumps(chain)]
    if streams > 1:
        args += ["--stream", str(stream), "--streams", str(streams)]
    if transport != "ssh":
        args += ["--transport", transport]
    return [*_via(hop, stream), shlex.join(args)]


def auto_streams(cores: int | None = None) -> int:
    """Streams when the inventory says ``auto``: half the cores (each stream costs
    about one core per hop: SHA-256, plus ssh's AES-GCM when encrypted), at least
    two (one per twin) and at most eight."""
    return max(2, min(8, (cores or os.cpu_count() or 2) // 2))


def plan(sizes: dict[str, int], streams: int) -> list[list[Piece]]:
    """The pieces each stream carries: every file once, files bigger than a stream's
    share split into byte ranges (each at least MIN_PIECE, cut at whole CHUNKs; the
    last takes the rest), the pieces dealt
    largest first to the stream carrying least. Streams that would be empty are left
    out, so there are at most as many streams as pieces."""
    k = max(1, min(streams, MAX_STREAMS))
    total = sum(sizes.values())
    share = max(MIN_PIECE, -(-total // k))
    pieces: list[Piece] = []
    for rel, size in sizes.items():
        if k > 1 and size > share and size >= 2 * MIN_PIECE:
            count = min(-(-size // share), size // MIN_PIECE)
            step = size // count // CHUNK * CHUNK  # >= MIN_PIECE, a whole number of CHUNKs
            offsets = [i * step for i in range(count)]
            pieces += [
                (rel, off, (offsets[i + 1] if i + 1 < count else size) - off, size)
                for i, off in enumerate(offsets)
            ]
        else:
            pieces.append((rel, 0, size, size))
    groups: list[list[Piece]] = [[] for _ in range(k)]
    load = [0] * k
    for piece in sorted(pieces, key=lambda p: (-p[2], p[0], p[1])):
        i = min(range(k), key=lambda j: (load[j], len(groups[j]), j))
        groups[i].append(piece)
        load[i] += piece[2]
    return [sorted(g, key=lambda p: (p[0], p[1])) for g in groups if g]


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A pipe Popen was asked for (never None then; checked for the type checker)."""
    if stream is None:
        raise RelayError("a child process has no pipe")
    return stream


def _grow_pipe(fd: int) -> None:
    """Ask for a PIPE_SIZE buffer (fewer, larger tee/read/write calls); a pipe
    that cannot grow (pipe-max-size, not a pipe) is used as it is."""
    if _is_pipe(fd):
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _libc_tee() -> Callable[[int, int, int, int], int] | None:
    """tee(2), which Python's os module lacks: copies pipe to pipe in the kernel
    (page references, not bytes) without consuming the source."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.tee
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint]
    fn.restype = ctypes.c_ssize_t
    return fn  # type: ignore[no-any-return,unused-ignore]


_TEE = _libc_tee()


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Progress:
    """Bytes seen by this hop, printed as ``progress HOST BYTES FILES STREAM`` lines
    on stderr."""

    def __init__(self, host: str, out: IO[str], stream: int = 0) -> None:
        self.host, self.out, self.stream = host, out, stream
        self.bytes = 0
        self.files = 0
        self._last = 0.0
        self._said: int | None = -1  # bytes of the last line printed; None after the final
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        self.bytes += n
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY:
            self._last = now
            self.emit()

    def emit(self, final: bool = False, *, changed_only: bool = False) -> None:
        word = "done" if final else "progress"
        with self.lock:
            count = self.bytes
            if self._said is None or (changed_only and count == self._said):
                return  # after the final line nothing more is said
            self.out.write(f"{word} {self.host} {count} {self.files} {self.stream}\n")
            self.out.flush()
            self._said = None if final else count

    def ticking(self) -> None:
        """Say the count whenever it changed and no line said it (a daemon thread): a
        hop that stops receiving has its last count on the board, not one up to
        PROGRESS_EVERY old, so the sender can tell where a stalled stream stopped."""
        while self._said is not None:
            time.sleep(PROGRESS_EVERY)
            with contextlib.suppress(OSError, ValueError):
                self.emit(changed_only=True)


class LineOut(Protocol):
    """Where a hop's progress and error lines go: a text stream (stderr) or, in the
    sender, a _LineSink that hands each line to the progress file."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def _pass_up(stream: IO[bytes], out: LineOut, lock: threading.Lock, tail: list[str]) -> None:
    """Copy the downstream hop's stderr lines upstream (progress, and errors kept in tail)."""
    for raw in iter(stream.readline, b""):
        # What a downstream node says is shown upstream (the progress file, the
        # controller's output): never a control character (a terminal escape).
        line = "".join(
            c if c.isprintable() else "?" for c in raw.decode(errors="replace").rstrip("\n")
        )
        if not line.startswith(("progress ", "done ")):
            tail.append(line)
            del tail[:-20]
        with lock:
            out.write(line + "\n")
            out.flush()


def _read_line(fd: int, limit: int, deadline: float) -> bytes:
    """One line from ``fd`` (unbuffered, byte by byte: nothing after it is consumed)."""
    line = b""
    while not line.endswith(b"\n"):
        if len(line) > limit:
            raise RelayError(f"a line longer than {limit} bytes where a short one was expected")
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise RelayError(f"no answer within {ACCEPT_TIMEOUT:.0f} s")
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


# Every next hop's process this relay started: ended when the relay is (a signal,
# or its parent gone: see guard()).
CHILDREN: list[Downstream] = []
STOP_GRACE = 2.0  # seconds a next hop's process has after SIGTERM before SIGKILL
ORPHAN_EVERY = 1.0  # seconds between checks that the relay's parent is still there


class Stopped(RelayError):
    """The relay was told to stop (SIGTERM, SIGHUP) or lost its parent."""


def _stop_children() -> None:
    for child in list(CHILDREN):
        child.kill(STOP_GRACE)


def guard() -> None:
    """End this relay's next hops with it, whatever ends it.

    The sender runs under Ansible's async wrapper, a hop under sshd (the upstream's
    ssh session), in a chain of processes on several nodes. When one of them goes
    the ones below it must go too, or they hold ssh sessions, pipes and partial
    files until their own links time out (or for ever, when a next hop stopped
    reading):

    * SIGTERM or SIGHUP (async_wrapper's and an operator's kill, a hang-up) raises
      :class:`Stopped` in the main thread, whose failure path ends the next hops
      (send: every stream's; recv: its own);
    * a parent that went away (sshd when the upstream's ssh connection closed; the
      sender's wrapper): the process is re-parented, which a thread notices within
      ORPHAN_EVERY seconds, ends the next hops and exits at once, since the main
      thread may be blocked writing to a next hop that no longer reads.
    """

    def stop(signum: int, _frame: object) -> None:
        raise Stopped(f"stopped by signal {signal.Signals(signum).name}")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    parent = os.getppid()

    def orphan_watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_EVERY)
        with contextlib.suppress(OSError, ValueError):
            print(f"{RELAY}: the upstream went away; stopping", file=sys.stderr, flush=True)
        _stop_children()
        os._exit(1)

    threading.Thread(target=orphan_watch, daemon=True).start()


class Downstream:
    """The next hop's process: what is written to ``fd`` goes down the chain.

    ``ssh`` (the default): the bytes travel in the ssh session (encrypted) on the
    process's stdin. ``tcp``: the session only starts the next hop and hands it a
    one-time token; the next hop listens on its own address for this stream, says
    the port on its stdout, and takes the one connection that presents the token
    (any other is closed unread). The bytes then travel unencrypted.
    """

    def __init__(
        self,
        chain: list[dict[str, Any]],
        out: LineOut,
        lock: threading.Lock,
        *,
        stream: int = 0,
        streams: int = 1,
        transport: str = "ssh",
    ) -> None:
        hop = chain[0]
        self.host = _hop_name(hop)
        self.tail: list[str] = []
        self.sock: socket.socket | None = None
        tcp = transport == "tcp"
        self.proc = subprocess.Popen(
            next_command(chain, stream, streams, transport),
            stdin=subprocess.PIPE,
            bufsize=0,
            stdout=subprocess.PIPE if tcp else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        CHILDREN.append(self)
        self.stdin = _piped(self.proc.stdin)
        self.reader = threading.Thread(
            target=_pass_up, daemon=True, args=(_piped(self.proc.stderr), out, lock, self.tail)
        )
        self.reader.start()
        if tcp:
            self.sock = self._connect(hop_host(hop, stream))
            self.fd = self.sock.fileno()
        else:
            self.fd = self.stdin.fileno()
            _grow_pipe(self.fd)
        self.is_pipe = self.sock is None

    def _connect(self, host: str) -> socket.socket:
        token = token_hex(TOKEN_HEX // 2).encode()
        try:
            _write_all(self.stdin.fileno(), token + b"\n")
            self.stdin.close()
            line = _read_line(
                _piped(self.proc.stdout).fileno(), 64, time.monotonic() + ACCEPT_TIMEOUT
            )
        except (OSError, RelayError) as exc:
            self.proc.kill()
            raise RelayError(
                f"{self.host} did not start listening ({exc}): " + " | ".join(self.tail[-3:])
            ) from None
        words = line.decode(errors="replace").split()
        if len(words) != 2 or words[0] != "listening" or not words[1].isdigit():
            self.proc.kill()
            self.proc.wait()
            self.reader.join(timeout=10)
            raise RelayError(
                f"{self.host} did not start listening: "
                + " | ".join(self.tail[-3:] or [line.decode(errors="replace")])
            )
        # What recv prints at its end goes nowhere; read so that it never blocks.
        threading.Thread(target=_piped(self.proc.stdout).read, daemon=True).start()
        try:
            sock = socket.create_connection((host, int(words[1])), timeout=ACCEPT_TIMEOUT)
            sock.settimeout(None)
            sock.sendall(token + b"\n")
        except OSError as exc:
            self.proc.kill()
            raise RelayError(f"{self.host}: connecting to {host} port {words[1]}: {exc}") from None
        return sock

    def stopped(self) -> RelayError:
        """The error of a next hop that stopped reading, with its last words."""
        return RelayError(f"{self.host} stopped reading: " + " | ".join(self.tail[-3:]))

    def write(self, data: bytes | memoryview) -> None:
        try:
            _write_all(self.fd, data)
        except (BrokenPipeError, ConnectionError):
            raise self.stopped() from None

    def sendfile(self, in_fd: int, offset: int, count: int, name: str) -> None:
        """``count`` bytes of the open file ``in_fd`` from ``offset``, copied by the kernel."""
        try:
            while count:
                sent = os.sendfile(self.fd, in_fd, offset, min(count, 1 << 30))
                if sent == 0:
                    raise RelayError(f"{name} became shorter while it was sent")
                offset += sent
                count -= sent
        except (BrokenPipeError, ConnectionError):
            raise self.stopped() from None

    def kill(self, grace: float = 0.0) -> None:
        """End the next hop's process (its ssh): SIGTERM first, so that a relay reached
        without ssh ends its own next hop too, SIGKILL after ``grace`` seconds; a tcp
        connection is shut, which wakes a sendfile(2) blocked on it."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        with contextlib.suppress(OSError):
            self.proc.kill()

    def finish(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            self.stdin.close()
        rc = self.proc.wait()
        if self.sock is not None:
            self.sock.close()
        self.reader.join(timeout=10)
        if rc != 0:
            raise RelayError(f"{self.host} failed (rc {rc}): " + " | ".join(self.tail[-3:]))


class Inbound:
    """The stream this hop reads; every byte is passed downstream before it is used.

    Between pipes (ssh's stdout into this hop, this hop into the next ssh) the
    bytes never enter Python: tee(2) duplicates them into the next hop's pipe
    (the kernel shares page references), splice(2) moves a file's bytes from
    the pipe into the file (the one copy a hop cannot avoid: into its page
    cache), and the receiver hashes them where they landed, through a mapping
    of the file. From a socket (the tcp transport) or a file the bytes are read
    into one reused buffer, written on, and hashed from it.
    """

    def __init__(self, fd: int, downstream: Downstream | None, progress: Progress) -> None:
        self.fd, self.down, self.progress = fd, downstream, progress
        _grow_pipe(fd)
        self.pipe = _is_pipe(fd) and (downstream is None or downstream.is_pipe)
        self.tee = _TEE if self.pipe and downstream is not None else None
        if self.pipe and downstream is not None and self.tee is None:
            self.pipe = False  # no tee(2): copy through the buffer
        self.ahead = 0  # tee mode: bytes already passed on and not yet used here
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)
        self.pos = self.end = 0
        self.eof = False
        self.null = -1

    # ---------------------------------------------------------------- pipes
    def _available(self) -> int:
        """Pipe mode: bytes that may be used now (passed on already when there is a
        next hop); 0 at the end of the stream."""
        down = self.down
        if self.tee is None or down is None:
            return 1 << 30
        while self.ahead == 0:
            n = self.tee(self.fd, down.fd, PIPE_SIZE, 0)
            if n < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                if err == errno.EPIPE:
                    raise down.stopped()
                raise OSError(err, os.strerror(err))
            if n == 0:
                return 0
            self.ahead += n
            self.progress.add(n)
        return self.ahead

    def _used(self, n: int) -> None:
        if self.tee is not None:
            self.ahead -= n
        else:
            self.progress.add(n)

    # --------------------------------------------------------------- buffer
    def _fill(self) -> None:
        n = os.readv(self.fd, [self.view])
        if n and self.down is not None:
            self.down.write(self.view[:n])
        self.pos, self.end = 0, n
        self.eof = n == 0
        self.progress.add(n)

    def _chunk(self, limit: int) -> memoryview | None:
        if self.pos == self.end:
            if self.eof:
                return None
            self._fill()
            if self.eof:
                return None
        n = min(limit, self.end - self.pos)
        view = self.view[self.pos : self.pos + n]
        self.pos += n
        return view

    # -------------------------------------------------------------- the API
    def exact(self, n: int) -> bytes:
        """The next ``n`` bytes (headers: small)."""
        out = bytearray()
        while len(out) < n:
            if self.pipe:
                room = self._available()
                data = os.read(self.fd, min(n - len(out), room)) if room else b""
                if not data:
                    raise _cut()
                self._used(len(data))
                out += data
            else:
                view = self._chunk(n - len(out))
                if view is None:
                    raise _cut()
                out += view
        return bytes(out)

    def at_end(self) -> bool:
        if self.pipe:
            room = self._available()
            return room == 0 or not os.read(self.fd, 1)
        return self._chunk(1) is None

    def place(self, fd: int, offset: int, count: int) -> Iterator[tuple[int, memoryview | None]]:
        """The next ``count`` bytes written into the file ``fd`` from ``offset``:
        yields (bytes placed, their view when they passed through the buffer, None
        when spliced into the file: read them from the file's mapping then)."""
        pos = offset
        while count:
            if self.pipe:
                room = self._available()
                n = (
                    os.splice(self.fd, fd, min(count, room, PIPE_SIZE), offset_dst=pos)
                    if room
                    else 0
                )
                if n == 0:
                    raise _cut()
                self._used(n)
                yield n, None
            else:
                view = self._chunk(min(count, CHUNK))
                if view is None:
                    raise _cut()
                n = len(view)
                rest, at = view, pos
                while rest:
                    k = os.pwrite(fd, rest, at)
                    rest, at = rest[k:], at + k
                yield n, view
            pos += n
            count -= n

    def skip(self, count: int) -> None:
        """The next ``count`` bytes, passed on and not kept (another node's file)."""
        while count:
            if self.pipe:
                if self.null < 0:
                    self.null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
                room = self._available()
                n = os.splice(self.fd, self.null, min(count, room, PIPE_SIZE)) if room else 0
                if n == 0:
                    raise _cut()
                self._used(n)
            else:
                view = self._chunk(min(count, CHUNK))
                if view is None:
                    raise _cut()
                n = len(view)
            count -= n

    def close(self) -> None:
        if self.null >= 0:
            os.close(self.null)
            self.null = -1


def _cut() -> RelayError:
    return RelayError("the stream ended early (cut off)")


def _real_dir(root: Path, rel: str) -> Path:
    """The directory ``rel``'s file goes into, made under root one real directory at a
    time: a link planted anywhere on the way (a directory link in the cache) is refused,
    never written through."""
    parts = PurePosixPath(rel).parts
    if PurePosixPath(rel).is_absolute() or ".." in parts or not parts:
        raise RelayError(f"{rel!r}: not a path inside the model directory")
    current = root
    for part in parts[:-1]:
        current = current / part
        with contextlib.suppress(FileExistsError):
            current.mkdir(mode=0o755)
        if current.is_symlink() or not current.is_dir():
            raise RelayError(
                f"{current} is a link or not a directory; sparkctl writes "
                "nothing through it (remove it first)"
            )
    return current


def _own(path: Path, flags: int = 0) -> int:
    """``path`` opened read-write for this relay's own use, made 0600 if missing, never
    through a link (partial files, range notes, stream counters, the state lock)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | flags, 0o600)


def _new_file(path: Path) -> int:
    """``path`` created anew for writing, never through a link: a leftover partial file
    (or a link planted under its name) is removed first; O_NOFOLLOW and O_EXCL hold."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return _own(path, os.O_EXCL)


def _shared_file(path: Path) -> int:
    """The partial file several streams write ranges of: opened (made if missing) never
    through a link, and only if it is a regular file."""
    fd = _own(path)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RelayError(f"{path} is not a regular file; remove it first")
    return fd


def _no_link(path: Path, mode: str) -> IO[str]:
    """``path`` opened as text for reading and appending ("a+"), made if missing, never
    through a link (the range notes and stream counters are named after the transfer)."""
    return os.fdopen(_own(path, os.O_APPEND), mode)


def _mismatch(rel: str, size: int, digest: str, entry: dict[str, Any]) -> RelayError:
    return RelayError(
        f"{rel}: received {size} bytes with SHA-256 {digest[:16]}..., the "
        f"manifest says {entry['size']} bytes, {entry['sha256'][:16]}..."
    )


def _into_place(partial: Path, target: Path) -> os.stat_result:
    partial.chmod(0o644)
    if target.is_symlink() or target.is_dir():
        partial.unlink(missing_ok=True)
        raise RelayError(f"{target} is a link or a directory; remove it first")
    partial.replace(target)
    return target.stat()


def _piece(header: dict[str, Any], manifest: dict[str, dict[str, Any]]) -> Piece:
    """A piece header, checked against the manifest (every node holds the same one)."""
    rel = header.get("path")
    entry = manifest.get(rel) if isinstance(rel, str) else None
    if entry is None or not isinstance(rel, str):
        raise RelayError(f"the stream carries {rel!r}, which the manifest does not list")
    offset, length, size = header.get("offset"), header.get("length"), header.get("size")
    if size != entry["size"]:
        raise RelayError(
            f"{rel}: received a file of {size} bytes, the manifest says "
            f"{entry['size']} bytes (changed on the sender since its manifest?)"
        )
    if not (
        isinstance(offset, int)
        and isinstance(length, int)
        and offset >= 0
        and length >= 0
        and offset + length <= size
    ):
        raise RelayError(
            f"{rel}: the piece {offset}+{length} of {size} bytes does not fit the "
            f"manifest's {entry['size']} bytes"
        )
    return rel, offset, length, int(entry["size"])


class Receiver:
    """What one stream writes on one node: whole files hashed as they are written,
    byte ranges into a partial file that the stream completing it hashes."""

    def __init__(
        self,
        root: Path,
        manifest: dict[str, dict[str, Any]],
        need: set[str],
        progress: Progress,
        job: str,
    ) -> None:
        self.root, self.manifest, self.need, self.progress = root, manifest, need, progress
        self.job = job or "0"
        self.written: list[str] = []
        self.state: dict[str, dict[str, Any]] = {}

    def run(self, inbound: Inbound) -> None:
        if inbound.exact(len(MAGIC)) != MAGIC:
            raise RelayError("the stream is not a sparkctl relay stream (version 2)")
        count = 0
        while True:
            (size,) = HEADER.unpack(inbound.exact(HEADER.size))
            if size > MAX_HEADER:
                raise RelayError(f"a record header of {size} bytes (at most {MAX_HEADER})")
            try:
                header = json.loads(inbound.exact(size))
            except ValueError as exc:
                raise RelayError(f"a record header is not JSON: {exc}") from None
            if not isinstance(header, dict):
                raise RelayError("a record header is not a JSON object")
            if header.get("end") is True:
                if header.get("pieces") != count:
                    raise RelayError(
                        f"the stream ended after {count} pieces, its sender sent "
                        f"{header.get('pieces')}"
                    )
                break
            rel, offset, length, total = _piece(header, self.manifest)
            count += 1
            if rel not in self.need:
                inbound.skip(length)  # another node's file, passed on and skipped here
            elif offset == 0 and length == total:
                self._whole(inbound, rel)
            else:
                self._range(inbound, rel, offset, length)
        if not inbound.at_end():
            raise RelayError("the stream goes on after its end record")

    def _done(self, rel: str, st: os.stat_result) -> None:
        self.state[rel] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sha256": self.manifest[rel]["sha256"],
        }
        self.written.append(rel)
        self.progress.files += 1

    def _whole(self, inbound: Inbound, rel: str) -> None:
        entry = self.manifest[rel]
        size = int(entry["size"])
        target = _real_dir(self.root, rel) / PurePosixPath(rel).name
        partial = target.with_name(target.name + PARTIAL)
        digest = hashlib.sha256()
        fd = _new_file(partial)
        try:
            if size:
                # Hashed as they land: from the buffer they came through, or (spliced)
                # from the file's own pages, through a read-only mapping of it.
                os.ftruncate(fd, size)
                with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
                    view = memoryview(mapped)
                    try:
                        pos = 0
                        for n, data in inbound.place(fd, 0, size):
                            digest.update(data if data is not None else view[pos : pos + n])
                            pos += n
                    finally:
                        view.release()
        except BaseException:
            os.close(fd)
            partial.unlink(missing_ok=True)
            raise
        os.close(fd)
        if digest.hexdigest() != entry["sha256"]:
            partial.unlink(missing_ok=True)
            raise _mismatch(rel, size, digest.hexdigest(), entry)
        self._done(rel, _into_place(partial, target))

    def _range(self, inbound: Inbound, rel: str, offset: int, length: int) -> None:
        entry = self.manifest[rel]
        size = int(entry["size"])
        target = _real_dir(self.root, rel) / PurePosixPath(rel).name
        partial = target.with_name(f"{target.name}.{self.job}{PARTIAL}")
        ranges = target.with_name(f"{target.name}.{self.job}{RANGES}")
        fd = _shared_file(partial)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)  # the same size from every stream: nothing is cut
            for _ in inbound.place(fd, offset, length):
                pass
            # Under the partial file's lock: note this range, and whoever notes the last
            # one hashes the whole file (SHA-256 is sequential: ranges cannot be hashed
            # apart) and moves it into place.
            fcntl.flock(fd, fcntl.LOCK_EX)
            with _no_link(ranges, "a+") as log:
                log.write(f"{offset} {length}\n")
                log.seek(0)
                got = sorted(tuple(map(int, line.split())) for line in log if line.strip())
            covered = 0
            for start, span in got:
                if start > covered:
                    break
                covered = max(covered, start + span)
            if covered < size:
                return
            ranges.unlink(missing_ok=True)
            digest = sha256_fd(fd, size)
            if digest != entry["sha256"]:
                partial.unlink(missing_ok=True)
                raise _mismatch(rel, size, digest, entry)
            self._done(rel, _into_place(partial, target))
        finally:
            os.close(fd)


def sha256_fd(fd: int, size: int) -> str:
    """SHA-256 of the first ``size`` bytes of the open file ``fd``, read through a
    mapping of it (no copy). Only for the relay's own partial files (0600, made by
    it): a mapped file cut short by someone else would stop the process (SIGBUS)."""
    digest = hashlib.sha256()
    if size:
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
            view = memoryview(mapped)
            try:
                for i in range(0, size, 64 << 20):
                    digest.update(view[i : i + (64 << 20)])
            finally:
                view.release()
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (made if missing): the streams of one node share
    the hash state and the count of streams finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _own(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _finish_node(hop: dict[str, Any], receiver: Receiver, streams: int) -> None:
    """This stream's files into the node's hash state; the last stream of the node to
    finish checks that every file the node needed is now in place."""
    state_path = Path(hop["state"])
    with _locked(state_path.with_name(state_path.name + ".lock")):
        merged = load_state(state_path)
        merged.update(receiver.state)
        save_state(state_path, merged)
        if streams > 1:
            counter = state_path.with_name(f"{state_path.name}.{receiver.job}.streams")
            with _no_link(counter, "a+") as count:
                count.seek(0)
                try:
                    done = int(count.read() or 0) + 1
                except ValueError:
                    done = 1
                count.seek(0)
                count.truncate()
                count.write(f"{done}\n")
            if done < streams:
                return
            counter.unlink(missing_ok=True)
    missing = []
    for rel in sorted(receiver.need):
        entry, known = receiver.manifest[rel], merged.get(rel)
        try:
            st = (receiver.root / rel).stat()
        except OSError:
            missing.append(rel)
            continue
        if (
            not known
            or known.get("sha256") != entry["sha256"]
            or known.get("mtime_ns") != st.st_mtime_ns
            or st.st_size != entry["size"]
        ):
            missing.append(rel)
    if missing:
        raise RelayError(f"the stream ended without {len(missing)} needed file(s): {missing[:3]}")


def _listen(
    hop: dict[str, Any], stream: int, stdin: IO[bytes], out: IO[str] | None = None
) -> socket.socket:
    """The one connection of an unencrypted (tcp) stream: the token comes first on
    stdin (inside the ssh session), then the port is said on stdout, and only a
    connection that presents the token is taken."""
    token = stdin.readline(TOKEN_HEX + 2).strip()
    if len(token) != TOKEN_HEX:
        raise RelayError("--transport tcp: no one-time token on stdin")
    address = hop_host(hop, stream)
    deadline = time.monotonic() + ACCEPT_TIMEOUT
    with socket.create_server((address, int(hop.get("port") or 0))) as server:
        print(f"listening {server.getsockname()[1]}", file=out or sys.stdout, flush=True)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RelayError(
                    f"no connection with the token on {address} within {ACCEPT_TIMEOUT:.0f} s"
                )
            server.settimeout(left)
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            try:
                given = b""
                while len(given) < TOKEN_HEX + 1:
                    part = conn.recv(TOKEN_HEX + 1 - len(given))
                    if not part:
                        break
                    given += part
            except OSError:
                given = b""
            if hmac.compare_digest(given.strip(), token):
                conn.settimeout(None)
                return conn
            conn.close()  # not the upstream hop: nothing read from it is used


def _idle(value: object) -> int:
    """Seconds a hop waits for its upstream to send anything (0: for ever)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_IDLE:
        raise RelayError(f"idle {value!r}: whole seconds, 0-{MAX_IDLE}")
    return value


def _watch_upstream(fd: int, progress: Progress, idle: float) -> None:
    """End this hop when its upstream sent nothing for ``idle`` seconds: nothing to
    read on ``fd`` and the count unchanged (when the hop is the one held up, by its
    next hop, its input fills instead). The sender stops a chain that stands still
    and ends its ssh sessions; a hop beyond a pulled cable never hears of it (its
    sshd keeps the dead connection for hours), so it ends itself, its next hop with
    it. The sender gives it more time than its own stall bound, so that the sender,
    which can name the hop, speaks first."""
    quiet_since, last = time.monotonic(), progress.bytes
    while True:
        time.sleep(min(1.0, idle / 4))
        if select.select([fd], [], [], 0)[0] or progress.bytes != last:
            quiet_since, last = time.monotonic(), progress.bytes
        elif time.monotonic() - quiet_since > idle:
            with contextlib.suppress(OSError, ValueError):
                print(
                    f"{RELAY}: nothing came from upstream for {idle:.0f} s; stopping",
                    file=sys.stderr,
                    flush=True,
                )
            _stop_children()
            os._exit(1)


def _job(value: object) -> str:
    """The transfer's name, which names the partial files, range notes and stream
    counters: lowercase letters and digits only (never a path)."""
    job = "" if value is None else value
    if not isinstance(job, str) or (job and not JOB.fullmatch(job)):
        raise RelayError(f"job {job!r}: 1-64 lowercase letters and digits")
    return job


def recv(
    chain: list[dict[str, Any]],
    stdin: IO[bytes],
    err: IO[str],
    *,
    stream: int = 0,
    streams: int = 1,
    transport: str = "ssh",
) -> dict[str, Any]:
    hop, rest = chain[0], chain[1:]
    root, need_file = Path(hop["root"]), Path(hop["need"])
    manifest = read_manifest(Path(hop["manifest"]))
    need = (
        {line.strip() for line in need_file.read_text().splitlines() if line.strip()}
        if need_file.exists()
        else set()
    )
    unknown = need - manifest.keys()
    if unknown:
        raise RelayError(f"{need_file} names files not in the manifest: {sorted(unknown)[:3]}")
    conn = _listen(hop, stream, stdin) if transport == "tcp" else None
    progress = Progress(_hop_name(hop), err, stream)
    downstream = (
        Downstream(rest, err, progress.lock, stream=stream, streams=streams, transport=transport)
        if rest
        else None
    )
    receiver = Receiver(root, manifest, need, progress, _job(hop.get("job")))
    inbound = Inbound(conn.fileno() if conn is not None else stdin.fileno(), downstream, progress)
    threading.Thread(target=progress.ticking, daemon=True).start()
    idle = _idle(hop.get("idle", 0))
    if idle:
        threading.Thread(
            target=_watch_upstream, args=(inbound.fd, progress, idle), daemon=True
        ).start()
    try:
        receiver.run(inbound)
    except BaseException:
        if downstream is not None:
            downstream.kill(STOP_GRACE)
        raise
    finally:
        inbound.close()
        if conn is not None:
            conn.close()
    if downstream is not None:
        downstream.finish()
    _finish_node(hop, receiver, streams)
    progress.emit(final=True)
    return {
        "host": hop["host"],
        "stream": stream,
        "written": receiver.written,
        "bytes": progress.bytes,
    }


# ------------------------------------------------ the forced command (serve)
# The relay key's only use: its line in authorized_keys is
#   restrict,from="<fabric subnets>",command="sparkctl-model-relay serve --cache-dir ..."
# (sshd(8), AUTHORIZED_KEYS FILE FORMAT: with command= the client's command is
# never run, only shown to the forced one in SSH_ORIGINAL_COMMAND). serve takes
# from that string nothing but data: the recv arguments of the one shape
# next_command writes, and a chain whose every path lies in this node's cache
# and every address in its fabric networks. What it runs next (ssh, with this
# node's relay key, to the next hop's fabric address) is its own, never the
# upstream's "via" or "relay".
HOP_KEYS = frozenset({"host", "hosts", "name", "root", "manifest", "state", "need", "job", "idle"})
HOP_IGNORED = frozenset({"via", "relay"})  # sent by the sender, replaced here
HOP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
CIPHER = re.compile(r"[a-z0-9][a-z0-9@.,-]{0,255}")  # a name or a list (ssh -c a,b)
META = ".sparkctl"  # the cache's meta directory (manifests, states, need lists)
MAX_HOPS = 64
MAX_COMMAND = 1 << 20  # bytes of SSH_ORIGINAL_COMMAND read at most
RELAY_KEY = "~/.ssh/id_sparkctl_relay"
# A hop that does not answer, or a link that carries nothing for 15 s, ends its ssh
# (and so the chain) instead of hanging (ssh_config(5); the role's
# _model_cache_ssh_bounds, held equal by a unit test).
SSH_BOUNDS = "-o ConnectTimeout=10 -o ServerAliveInterval=5 -o ServerAliveCountMax=3"


def relay_via(cipher: str, key: str = RELAY_KEY) -> str:
    """How a node reaches the next hop: ssh with the relay key only (its
    authorized_keys line forces ``serve`` there), no configuration file (nothing in
    ~/.ssh/config can add a key, a proxy or a command), host keys checked against
    the known hosts base wrote; ``{host}`` after ``--``, never in option position."""
    if not CIPHER.fullmatch(cipher):
        raise RelayError(f"--cipher {cipher!r} is not an ssh cipher name")
    return (
        "ssh -F /dev/null -T -o BatchMode=yes -o Compression=no -o StrictHostKeyChecking=yes "
        f"{SSH_BOUNDS} "
        f"-o IdentitiesOnly=yes -o IdentityAgent=none -i {shlex.quote(key)} -c {cipher} "
        "-- {host}"
    )


def _no_link_on_the_way(base: Path, rel: PurePosixPath, what: str) -> None:
    current = base
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            raise RelayError(f"{what} {current} is a link; the relay writes through none")


def _in_cache(cache: Path, value: object, what: str) -> tuple[Path, PurePosixPath]:
    """``value`` as an absolute path under ``cache`` (the cache itself excluded), with
    no ``..`` and no link on the way below the cache; (path, its part below cache)."""
    if not isinstance(value, str) or not value.startswith("/") or not value.isprintable():
        raise RelayError(f"{what} {value!r} is not an absolute path")
    pure = PurePosixPath(value)
    if ".." in pure.parts:
        raise RelayError(f"{what} {value!r} holds ..")
    try:
        rel = pure.relative_to(PurePosixPath(cache))
    except ValueError:
        raise RelayError(f"{what} {value!r} is outside the model cache {cache}") from None
    if not rel.parts:
        raise RelayError(f"{what} {value!r} is the model cache itself")
    _no_link_on_the_way(cache, rel, what)
    return cache / rel, rel


def _address(value: object, nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
    try:
        addr = ipaddress.ip_address(value if isinstance(value, str) else "")
    except ValueError:
        raise RelayError(f"hop address {value!r} is not an IP address") from None
    if not any(addr in net for net in nets):
        raise RelayError(
            f"hop address {addr} is not in this cluster's fabric "
            f"({', '.join(str(n) for n in nets)})"
        )
    return str(addr)


def _own_paths(hop: dict[str, Any], cache: Path) -> dict[str, str]:
    """This node's hop: the root a directory in the cache (not its meta directory);
    manifest, state and need the meta files of one model name."""
    root, root_rel = _in_cache(cache, hop.get("root"), "root")
    if root_rel.parts[0] == META:
        raise RelayError(f"root {root} is in the cache's meta directory")
    paths = {"root": str(root)}
    stems = set()
    for key, suffix in (
        ("manifest", ".manifest.json"),
        ("state", ".state.json"),
        ("need", ".need"),
    ):
        path, rel = _in_cache(cache, hop.get(key), key)
        stem = rel.name[: -len(suffix)] if rel.name.endswith(suffix) else ""
        if rel.parent != PurePosixPath(META) or not MODEL_NAME.fullmatch(stem):
            raise RelayError(f"{key} {path} is not {cache / META}/<model>{suffix}")
        stems.add(stem)
        paths[key] = str(path)
    if len(stems) != 1:
        raise RelayError(f"manifest, state and need name different models: {sorted(stems)}")
    return paths


def _passed_paths(hop: dict[str, Any]) -> dict[str, str]:
    """A later hop's paths, which that node confines to its own cache: here only
    absolute, printable and without ``..`` (data passed on, never opened)."""
    out = {}
    for key in ("root", "manifest", "state", "need"):
        value = hop.get(key)
        if (
            not isinstance(value, str)
            or not value.startswith("/")
            or not value.isprintable()
            or ".." in PurePosixPath(value).parts
        ):
            raise RelayError(f"{key} {value!r} is not an absolute path or holds ..")
        out[key] = value
    return out


def confine_chain(
    chain: list[dict[str, Any]],
    cache: Path,
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
    via: str,
) -> list[dict[str, Any]]:
    """The chain an upstream node sent, as data this node may act on, or a RelayError.

    Every hop: only known keys; each address an IP in the fabric networks; the name
    a host name; the job a job name. This node's hop (the first): the paths of
    :func:`_own_paths`; the others are judged by their own nodes. The upstream's
    ``via`` and ``relay`` are dropped for ``via`` (this node's own command) and the
    relay's name."""
    if not isinstance(chain, list) or not 1 <= len(chain) <= MAX_HOPS:
        raise RelayError(f"the chain must be a list of 1-{MAX_HOPS} hops")
    out: list[dict[str, Any]] = []
    for i, hop in enumerate(chain):
        if not isinstance(hop, dict):
            raise RelayError("a hop is not a JSON object")
        unknown = sorted(set(hop) - HOP_KEYS - HOP_IGNORED)
        if unknown:
            raise RelayError(f"a hop carries {unknown}, which the relay does not take")
        hosts = hop.get("hosts", [hop.get("host")])
        if not isinstance(hosts, list) or not 1 <= len(hosts) <= 2:
            raise RelayError(f"hop hosts {hosts!r}: one or two addresses (the twins)")
        name = hop.get("name", hop.get("host"))
        if not isinstance(name, str) or not HOP_NAME.fullmatch(name):
            raise RelayError(f"hop name {name!r} is not a host name")
        out.append(
            {
                "host": _address(hop.get("host", hosts[0]), nets),
                "hosts": [_address(h, nets) for h in hosts],
                "name": name,
                **(_own_paths(hop, cache) if i == 0 else _passed_paths(hop)),
                "job": _job(hop.get("job")),
                "idle": _idle(hop.get("idle", 0)),
                "via": via,
                "relay": RELAY,
            }
        )
    return out


def _recv_words(words: list[str]) -> dict[str, str]:
    """``--chain JSON [--stream I --streams K] [--transport T]``, each at most once,
    nothing else (what next_command writes)."""
    if len(words) % 2:
        raise RelayError("the relay's arguments come in --option value pairs")
    given: dict[str, str] = {}
    for flag, value in zip(words[::2], words[1::2], strict=True):
        if flag not in ("--chain", "--stream", "--streams", "--transport") or flag in given:
            raise RelayError(f"{flag[:40]!r}: the relay key runs recv with its own options only")
        given[flag] = value
    if "--chain" not in given:
        raise RelayError("no --chain")
    for flag in ("--stream", "--streams"):
        if flag in given and not (given[flag].isascii() and given[flag].isdigit()):
            raise RelayError(f"{flag} {given[flag][:20]!r} is not a number")
    if given.get("--transport", "ssh") not in TRANSPORTS:
        raise RelayError(f"--transport {given['--transport'][:20]!r}: ssh or tcp")
    return given


def serve(
    original: str | None,
    stdin: IO[bytes],
    err: IO[str],
    *,
    cache: Path,
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
    cipher: str,
    key: str = RELAY_KEY,
) -> dict[str, Any]:
    """The forced command: one ``recv`` of the shape next_command writes, on a chain
    confined to this node's cache and fabric (see above), or a refusal."""
    via = relay_via(cipher, key)
    if not original:
        raise RelayError("this key runs the model relay only; no command was given")
    if len(original) > MAX_COMMAND:
        raise RelayError(f"a command longer than {MAX_COMMAND} bytes")
    try:
        words = shlex.split(original)
    except ValueError as exc:
        raise RelayError(f"the command is not shell words: {exc}") from None
    if len(words) < 2 or PurePosixPath(words[0]).name != RELAY or words[1] != "recv":
        raise RelayError(f"this key runs `{RELAY} recv` only, not {words[:2]!r}")
    given = _recv_words(words[2:])
    stream, streams = int(given.get("--stream", 0)), int(given.get("--streams", 1))
    if not 0 <= stream < streams <= MAX_STREAMS:
        raise RelayError(f"--stream {stream} of --streams {streams}")
    chain = confine_chain(_chain(given["--chain"]), cache, nets, via)
    return recv(
        chain,
        stdin,
        err,
        stream=stream,
        streams=streams,
        transport=given.get("--transport", "ssh"),
    )


class ProgressFile:
    """The sender's view of every hop (``progress`` lines from downstream), kept as JSON;
    a host's figures are the sums over its streams."""

    def __init__(self, path: Path | None, hosts: list[str], total: int, job: str = "") -> None:
        self.path = path
        self.job = job
        self.started = time.monotonic()
        self.streams = 1
        self.seen: dict[str, dict[int, tuple[int, int, bool]]] = {h: {} for h in hosts}
        self.total = total
        self.error: str | None = None
        self.stalled: list[dict[str, Any]] = []
        self.sender = "the sender"  # the holder's name, when it was given
        self.advanced = self.started  # when some hop's byte count last grew
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        parts = text.split()
        if (
            len(parts) in (4, 5)
            and parts[0] in ("progress", "done")
            and parts[1] in self.seen
            and all(p.isdigit() for p in parts[2:])
        ):
            stream = int(parts[4]) if len(parts) == 5 else 0
            before = self.seen[parts[1]].get(stream, (0, 0, False))[0]
            self.seen[parts[1]][stream] = (int(parts[2]), int(parts[3]), parts[0] == "done")
            if int(parts[2]) > before:
                self.advanced = time.monotonic()
            self.write()

    def where_stalled(self, chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Where each unfinished stream stopped. A hop counts what it passed on, so
        along a stream the counts never grow downstream; once nothing moves, the
        hops past the break hold exactly what the first of them received, and every
        hop before it more (what sits in the buffers the break filled). The stream
        stops at the first hop holding the least: the link into it, or the hop
        itself (a relay that stopped reading). Both ends of that link are named: a
        link runs through a port of each (a cable pulled at the upstream node's twin
        breaks the link into it and the one out of it, and the counts show the
        second)."""
        names = [_hop_name(h) for h in chain]
        out: list[dict[str, Any]] = []
        for stream in range(self.streams):
            seen = [self.seen[n].get(stream, (0, 0, False)) for n in names]
            if seen and seen[-1][2]:
                continue  # the stream's last hop is done
            counts = [count for count, _, _ in seen]
            i = counts.index(min(counts))
            hop = chain[i]
            hosts = hop.get("hosts") or [hop["host"]]
            twin = ("fabric_a_ip", "fabric_b_ip")[stream % 2] if len(hosts) == 2 else ""
            out.append(
                {
                    "host": names[i],
                    "address": hop_host(hop, stream),
                    "twin": twin,
                    "from": names[i - 1] if i else self.sender,
                    # the upstream end's own address on this stream (none for the sender)
                    "from_address": hop_host(chain[i - 1], stream) if i else "",
                    "stream": stream,
                    "bytes": counts[i],
                }
            )
        return out

    def snapshot(self, finished: bool = False) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        hosts = {}
        for host, streams in self.seen.items():
            sent = sum(b for b, _, _ in streams.values())
            hosts[host] = {
                "bytes": sent,
                "files": sum(f for _, f, _ in streams.values()),
                "done": len(streams) == self.streams and all(d for _, _, d in streams.values()),
                "rate_bps": round(sent / elapsed),
            }
        return {
            "job": self.job,
            "total_bytes": self.total,
            "elapsed_s": round(elapsed, 3),
            "streams": self.streams,
            "finished": finished,
            "error": self.error,
            "stalled": self.stalled,
            "hosts": hosts,
        }

    def write(self, finished: bool = False) -> None:
        if self.path is None:
            return
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(self.snapshot(finished)) + "\n")
            tmp.replace(self.path)


class _LineSink:
    """A text stream whose lines go to a callback (the sender's stderr stand-in)."""

    def __init__(self, callback: Callable[[str], None]) -> None:
        self.callback = callback
        self.buffer = ""

    def write(self, text: str) -> int:
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            self.callback(line)
        return len(text)

    def flush(self) -> None:
        pass


WATCH_EVERY = 0.5  # seconds between the sender's checks of its limits


class Limits:
    """When the sender gives up, each off at 0.

    ``stall``: seconds no hop's byte count may stand still (a link that carries
    nothing, a hop that stopped reading: ssh's keepalive ends a dead connection,
    not a live one that is not read, nor a tcp stream). ``deadline``: seconds the
    whole transfer may take. ``lease``: a file the controller's progress reader
    touches at every reading (``watch``); older than ``lease_timeout`` seconds, the
    run that started the transfer is gone (interrupted, killed, cut off), and
    nobody would ever read the result: the chain is stopped on every node.
    """

    def __init__(
        self,
        *,
        stall: float = 0,
        deadline: float = 0,
        lease: Path | None = None,
        lease_timeout: float = 0,
    ) -> None:
        self.stall, self.deadline = stall, deadline
        self.lease, self.lease_timeout = lease, lease_timeout

    def renew(self, job: str) -> None:
        """The lease starts with the transfer (the first reading comes later)."""
        if self.lease is not None and self.lease_timeout:
            self.lease.parent.mkdir(parents=True, exist_ok=True)
            self.lease.write_text(job + "\n")

    def broken(self, board: ProgressFile, chain: list[dict[str, Any]]) -> RelayError | None:
        """Why the transfer must stop now, or None."""
        now = time.monotonic()
        if self.deadline and now - board.started > self.deadline:
            return RelayError(
                f"the transfer did not finish within its deadline of {self.deadline:.0f} s "
                f"({board.total} bytes to move); model_cache_transfer_timeout sets another"
            )
        if self.stall and now - board.advanced > self.stall:
            board.stalled = board.where_stalled(chain)
            where = "; ".join(
                f"{s['host']} {s['address']} ("
                + (f"{s['twin']}, " if s["twin"] else "")
                + f"stream {s['stream']}) from {s['from']}"
                + (f" {s['from_address']}" if s.get("from_address") else "")
                for s in board.stalled
            )
            return RelayError(
                f"the transfer stood still for {self.stall:.0f} s (no node's byte count grew); "
                f"it stops at {where or 'the first hop'}: check that link (`sparkctl validate` "
                "names a pulled cable or a port down) and that node"
            )
        if self.lease is not None and self.lease_timeout:
            try:
                age = time.time() - self.lease.stat().st_mtime
            except OSError:
                age = now - board.started
            if age > self.lease_timeout:
                return RelayError(
                    f"nobody read this transfer's progress for {self.lease_timeout:.0f} s "
                    "(the run that started it ended: interrupted?); the chain was stopped"
                )
        return None


def send(
    root: Path,
    names: list[str],
    chain: list[dict[str, Any]],
    progress_path: Path | None,
    job: str = "",
    *,
    streams: int = 1,
    transport: str = "ssh",
    manifest: dict[str, dict[str, Any]] | None = None,
    limits: Limits | None = None,
    sender: str = "",
) -> dict[str, Any]:
    """Stream ``names`` along ``chain``; every outcome, failures too, ends in the progress file."""
    board = ProgressFile(progress_path, [_hop_name(h) for h in chain], 0, job)
    board.sender = sender or board.sender
    limits = limits or Limits()
    if limits.stall:  # each hop ends itself when its upstream went silent (_watch_upstream)
        idle = min(MAX_IDLE, int(limits.stall * 2 + 30))
        chain = [{**hop, "idle": idle} for hop in chain]
    try:
        sizes = _sizes(root, names, manifest) if chain and names else {}
        board.total = sum(sizes.values())
        board.write()
        return _send(
            root,
            sizes,
            chain,
            board,
            streams=streams,
            transport=transport,
            limits=limits,
        )
    except BaseException as exc:
        board.error = str(exc) or type(exc).__name__
        board.write(finished=True)
        raise


def _sizes(
    root: Path, names: list[str], manifest: dict[str, dict[str, Any]] | None = None
) -> dict[str, int]:
    """Each file's size, refusing a name that is not a plain relative path (or, given
    the manifest, one it does not list: the list is the union of what the nodes
    reported lacking), a missing file and a link out of the model root."""
    base = (_hub_repo(root) or root).resolve()
    sizes: dict[str, int] = {}
    for name in names:
        why = safe_rel(name)
        if why is not None:
            raise RelayError(f"{name!r}: not a file of the model ({why}); nothing was sent")
        if manifest is not None and name not in manifest:
            raise RelayError(f"{name!r} is not in the manifest; nothing was sent")
        path = root / name
        if not path.is_file():
            raise RelayError(f"{path} is missing on the sending node")
        if not path.resolve().is_relative_to(base):
            raise RelayError(
                f"{path} links to {path.resolve()}, outside {base}: sparkctl "
                "reads nothing outside the model root"
            )
        sizes[name] = path.stat().st_size
    return sizes


def _send_stream(root: Path, pieces: list[Piece], down: Downstream) -> int:
    """One stream: MAGIC, each piece's header and bytes (sendfile: the kernel copies
    from the page cache), the end record. Returns the bytes of the pieces."""
    down.write(MAGIC)
    sent = 0
    for rel, offset, length, size in pieces:
        header = json.dumps(
            {"path": rel, "offset": offset, "length": length, "size": size}
        ).encode()
        down.write(HEADER.pack(len(header)) + header)
        fd = os.open(root / rel, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size != size:
                raise RelayError(f"{root / rel} changed size while it was sent")
            down.sendfile(fd, offset, length, str(root / rel))
        finally:
            os.close(fd)
        sent += length
    end = json.dumps({"end": True, "pieces": len(pieces)}).encode()
    down.write(HEADER.pack(len(end)) + end)
    return sent


def _send(
    root: Path,
    sizes: dict[str, int],
    chain: list[dict[str, Any]],
    board: ProgressFile,
    *,
    streams: int = 1,
    transport: str = "ssh",
    limits: Limits,
) -> dict[str, Any]:
    if not chain or not sizes:
        board.write(finished=True)
        return {"sent_bytes": 0, **board.snapshot(finished=True)}
    groups = plan(sizes, streams)
    board.streams = len(groups)
    sink = _LineSink(board.line)
    lock = threading.Lock()
    downs: list[Downstream] = []
    errors: list[BaseException] = []
    sent = [0] * len(groups)

    def work(i: int) -> None:
        try:
            sent[i] = _send_stream(root, groups[i], downs[i])
            downs[i].finish()
        except BaseException as exc:  # the first failure stops every stream
            errors.append(exc)
            for down in downs:
                down.kill(STOP_GRACE)

    try:
        for i in range(len(groups)):
            downs.append(
                Downstream(
                    chain,
                    sink,
                    lock,
                    stream=i,
                    streams=len(groups),
                    transport=transport,
                )
            )
    except BaseException:
        for down in downs:
            down.kill()
        raise
    limits.renew(board.job)
    board.started = board.advanced = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(groups))]
    for thread in threads:
        thread.start()
    reason: list[RelayError] = []
    try:
        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(WATCH_EVERY)
            if not reason and (broken := limits.broken(board, chain)) is not None:
                reason.append(broken)  # what the operator is told, not a stream's EPIPE
                for down in downs:
                    down.kill(STOP_GRACE)
    except BaseException:  # a signal (Stopped), KeyboardInterrupt: every stream ends
        for down in downs:
            down.kill(STOP_GRACE)
        raise
    if reason:
        raise reason[0]
    if errors:
        raise errors[0]
    board.write(finished=True)
    return {"sent_bytes": sum(sent), **board.snapshot(finished=True)}


def watch(progress: Path, lease: Path | None, job_file: Path | None) -> dict[str, Any]:
    """One reading of a transfer for the controller: the progress file and the async
    job's results file as they are (empty when missing or unreadable), and the
    lease renewed (see :class:`Limits`)."""
    if lease is not None:
        lease.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            lease.touch()
        if not lease.exists():
            lease.write_text("\n")

    def read(path: Path | None) -> Any:
        try:
            return json.loads(path.read_text()) if path is not None else {}
        except (OSError, ValueError):
            return {}

    return {"board": read(progress), "job": read(job_file)}


def reach(
    name: str,
    upstream: str,
    addresses: list[tuple[str, str]],
    *,
    port: int = 22,
    timeout: float = 3.0,
) -> dict[str, Any]:
    """Whether every ``(label, address)`` of the hop ``name`` answers from here (the
    node that will connect to it, ``upstream``): a TCP connection to ``port``, all
    at once, each given ``timeout`` seconds. The chain would stand still at an
    address that does not answer (a fabric not provisioned, a cable out): this is
    said before anything is sent, naming the hop, the address and its twin."""
    answers: dict[str, str | None] = {}

    def one(address: str) -> None:
        try:
            with socket.create_connection((address, port), timeout=timeout):
                answers[address] = None
        except TimeoutError:
            answers[address] = f"no answer within {timeout:g} s"
        except ConnectionRefusedError:
            answers[address] = f"refused: nothing listens on port {port}"
        except OSError as exc:
            answers[address] = exc.strerror or type(exc).__name__

    threads = [threading.Thread(target=one, args=(a,)) for _, a in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    problems = [
        f"{name}: {label} {address} does not answer from {upstream} "
        f"(TCP port {port}: {answers[address]})"
        for label, address in addresses
        if answers.get(address) is not None
    ]
    return {"hop": name, "from": upstream, "answers": answers, "problems": problems}


def snapshot_dir(cache_dir: Path, repo: str, revision: str) -> Path:
    """Where huggingface_hub puts ``repo`` at ``revision`` in a hub cache."""
    return cache_dir / f"models--{repo.replace('/', '--')}" / "snapshots" / revision


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps({k: v for k, v in manifest.items() if k != "hashed_bytes"}, indent=1) + "\n"
    )
    tmp.replace(path)


def _manifest_revision(path: Path) -> str | None:
    try:
        return str(json.loads(path.read_text()).get("revision") or "") or None
    except (OSError, ValueError, AttributeError):
        return None


def _drop(snapshot: Path, rels: list[str]) -> None:
    """Remove snapshot entries (and the blobs they link to) so they are downloaded again."""
    for rel in rels:
        entry = snapshot / rel
        if entry.is_symlink():
            blob = entry.resolve()
            entry.unlink()
            blob.unlink(missing_ok=True)
        elif entry.exists():
            entry.unlink()


def read_token(stream: IO[bytes]) -> str:
    """The token handed over on stdin: its one line, stripped (empty: anonymous).

    Ansible's ``stdin:`` adds a newline (``stdin_add_newline``), hence the
    strip. Nothing read here is ever echoed, not even in an error.
    """
    data = stream.read(TOKEN_LIMIT + 1)
    if len(data) > TOKEN_LIMIT:
        raise RelayError(
            f"--token-stdin: more than {TOKEN_LIMIT} bytes on stdin; it reads one "
            "line holding the token"
        )
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise RelayError("--token-stdin: the token on stdin is not ASCII") from None
    lines = text.splitlines()
    if any(line.strip() for line in lines[1:]):
        raise RelayError(
            "--token-stdin: stdin holds more than one line; it reads one line holding the token"
        )
    token = lines[0].strip() if lines else ""
    # It goes into an "authorization: Bearer ..." header: no spaces or control characters.
    if any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise RelayError("--token-stdin: the token on stdin contains spaces or control characters")
    return token


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (longest first) replaced by ``<token>``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


class MaskedStream(io.TextIOBase):
    """A text stream that writes to ``target`` with the secrets masked.

    Text is passed on at line ends (``\\n``, or the ``\\r`` of progress bars), so a
    secret split across two writes is still seen whole.
    """

    def __init__(self, target: IO[str], secrets: Iterable[str]) -> None:
        super().__init__()
        self.target = target
        self.secrets = [s for s in secrets if s]
        self.pending = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.target.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        self.pending += text
        cut = max(self.pending.rfind("\n"), self.pending.rfind("\r"))
        if cut >= 0:
            self.target.write(mask(self.pending[: cut + 1], self.secrets))
            self.target.flush()
            self.pending = self.pending[cut + 1 :]
        return len(text)

    def flush(self) -> None:
        pass  # a flush mid-line would pass on half a secret; line ends flush

    def drain(self) -> None:
        if self.pending:
            self.target.write(mask(self.pending, self.secrets))
            self.pending = ""
        self.target.flush()


@contextlib.contextmanager
def masked_output(secrets: list[str]) -> Iterator[None]:
    """sys.stdout and sys.stderr masked while the library runs (its logging handler and
    progress bars take the stream current when they are made: the masked one)."""
    saved = sys.stdout, sys.stderr
    out, err = MaskedStream(sys.stdout, secrets), MaskedStream(sys.stderr, secrets)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        out.drain()
        err.drain()


def fetch_hf(
    repo: str,
    revision: str,
    cache_dir: Path,
    manifest_path: Path,
    state_path: Path,
    *,
    token: str | None = None,
) -> dict[str, Any]:
    """The snapshot of ``repo`` at ``revision``, complete and as the manifest says.

    The manifest of a revision is made once, from its first complete download,
    and kept: a file that later differs on the head is downloaded again instead
    of becoming the new truth. A head whose copy already matches is not asked
    to contact the Hub at all.

    ``token``: None takes ``HF_TOKEN`` from the environment (the library then
    also looks for a saved token, as it always did); a string is the token
    (``--token-stdin``), and the empty string means anonymous (``token=False``:
    no token from anywhere else either).
    """
    env_token = os.environ.get("HF_TOKEN") or None
    secrets = [t for t in (token, env_token) if t]
    hf_token: str | bool | None = env_token if token is None else (token or False)
    snapshot = snapshot_dir(cache_dir, repo, revision)
    known = _manifest_revision(manifest_path) == revision
    if known and snapshot.is_dir():
        need = state_path.with_name(state_path.name + ".need")
        found = check(snapshot, manifest_path, state_path, need)
        if found["need"] == 0:
            return {"path": str(snapshot), "downloaded": False, "repaired": []}
        _drop(snapshot, found["missing"] + found["bad"])
        repaired = found["missing"] + found["bad"]
    else:
        repaired = []
    cache_dir.mkdir(parents=True, exist_ok=True)
    with masked_output(secrets):
        try:
            from huggingface_hub import snapshot_download  # noqa: PLC0415 - only in the fetch venv
        except ImportError:
            raise RelayError(
                "huggingface_hub is not installed for this Python; run it with the "
                "model_cache role's virtualenv"
            ) from None
        try:
            path = Path(
                snapshot_download(
                    repo_id=repo, revision=revision, cache_dir=str(cache_dir), token=hf_token
                )
            )
        except Exception as exc:  # the library raises many kinds; every one ends the fetch
            # One line: the library's messages span several, and the role reports the
            # last line of stderr (tasks/configure.yml, "Say why the download failed").
            text = " ".join(str(exc).split())
            raise RelayError(
                mask(f"downloading {repo}@{revision}: {type(exc).__name__}: {text}", secrets)
            ) from None
    if path.resolve() != snapshot.resolve():
        raise RelayError(f"huggingface_hub put {repo}@{revision} in {path}, not {snapshot}")
    if known:
        found = check(
            snapshot, manifest_path, state_path, state_path.with_name(state_path.name + ".need")
        )
        if found["need"]:
            raise RelayError(
                f"the download of {repo}@{revision} differs from its manifest "
                f"{manifest_path}: {(found['missing'] + found['bad'])[:3]}"
            )
    else:
        manifest = build_manifest(snapshot, state_path)  # links into blobs/: _hub_repo
        write_manifest(manifest_path, {**manifest, "repo": repo, "revision": revision})
    return {"path": str(snapshot), "downloaded": True, "repaired": repaired}


# ----------------------------------------------------------------------- CLI
def _names(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _streams(text: str) -> int:
    if text == "auto":
        return auto_streams()
    if not text.isdigit() or not 1 <= int(text) <= MAX_STREAMS:
        raise argparse.ArgumentTypeError(f"{text!r}: 1-{MAX_STREAMS} or auto")
    return int(text)


def _chain(text: str) -> list[dict[str, Any]]:
    try:
        chain = json.loads(text)
    except ValueError as exc:
        raise RelayError(f"--chain is not JSON: {exc}") from None
    if not isinstance(chain, list) or not all(isinstance(h, dict) and "host" in h for h in chain):
        raise RelayError("--chain must be a list of hops with a host")
    return chain


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds, 0-604800")
    return value


def _labelled(text: str) -> tuple[str, str]:
    label, sep, address = text.partition("=")
    if not sep or not label or not address:
        raise argparse.ArgumentTypeError(f"{text!r}: LABEL=ADDRESS")
    return label, address


def _cache_dir(text: str) -> Path:
    pure = PurePosixPath(text)
    if not pure.is_absolute() or ".." in pure.parts or len(pure.parts) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: an absolute directory below /")
    return Path(pure)


def _net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if net.prefixlen == 0:
        raise argparse.ArgumentTypeError(f"{text!r} matches every address")
    return net


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=RELAY, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("manifest")
    p.add_argument("root", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True)
    p = sub.add_parser("check")
    p.add_argument("root", type=Path)
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--need-out", type=Path)
    p.add_argument("--full", action="store_true")
    p.add_argument(
        "--read-only",
        action="store_true",
        help="write nothing (no state, no need list, no directory): validate",
    )
    p.add_argument("--link", type=Path, help="a link whose target is reported (link_target)")
    p = sub.add_parser("send")
    p.add_argument("root", type=Path)
    p.add_argument("--files", type=Path, required=True)
    p.add_argument("--chain", required=True)
    p.add_argument("--progress", type=Path)
    p.add_argument(
        "--job", default="", help="written into the progress file (a reader waits for its own job)"
    )
    p.add_argument(
        "--streams",
        type=_streams,
        default=1,
        help=f"parallel chains (1-{MAX_STREAMS}, or auto: half the cores, 2-8)",
    )
    p.add_argument("--transport", choices=TRANSPORTS, default="ssh")
    p.add_argument(
        "--manifest", type=Path, help="send only files this manifest lists (the holder's)"
    )
    p.add_argument(
        "--stall-timeout",
        type=_seconds,
        default=0,
        help="give up when no hop's byte count grew for this many seconds (0: never)",
    )
    p.add_argument(
        "--deadline", type=_seconds, default=0, help="seconds the transfer may take (0: no limit)"
    )
    p.add_argument("--lease", type=Path, help="a file the progress reader touches (watch)")
    p.add_argument("--sender", default="", help="this node's name, in what is said of a stall")
    p.add_argument(
        "--lease-timeout",
        type=_seconds,
        default=0,
        help="stop when the lease is older than this many seconds (0: never)",
    )
    _watch_parsers(sub)
    _rest_parsers(sub)
    return parser


def _watch_parsers(sub: Any) -> None:
    p = sub.add_parser("watch", help="one reading of a transfer, renewing its lease")
    p.add_argument("--progress", type=Path, required=True)
    p.add_argument("--lease", type=Path)
    p.add_argument("--job-file", type=Path, help="the async job's results file")
    p = sub.add_parser("reach", help="whether a hop's addresses answer from here")
    p.add_argument("name")
    p.add_argument("--from", dest="upstream", required=True)
    p.add_argument(
        "--address", type=_labelled, action="append", required=True, help="LABEL=ADDRESS"
    )
    p.add_argument("--port", type=int, default=22)
    p.add_argument("--timeout", type=_seconds, default=3.0)


def _rest_parsers(sub: Any) -> None:
    p = sub.add_parser("recv")
    p.add_argument("--chain", required=True)
    p.add_argument("--stream", type=int, default=0)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--transport", choices=TRANSPORTS, default="ssh")
    p = sub.add_parser("serve", help="the relay key's forced command (reads SSH_ORIGINAL_COMMAND)")
    p.add_argument("--cache-dir", type=_cache_dir, required=True)
    p.add_argument("--net", type=_net, action="append", required=True)
    p.add_argument("--cipher", required=True)
    p.add_argument("--key", default=RELAY_KEY)
    p = sub.add_parser("fetch-hf")
    p.add_argument("repo")
    p.add_argument("--revision", required=True)
    p.add_argument("--cache-dir", type=Path, required=True)
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument(
        "--token-stdin",
        action="store_true",
        help="read the token from the first line of stdin (empty: anonymous) instead of HF_TOKEN",
    )


def main(argv: Iterable[str] | None = None) -> int:
    args = _parser().parse_args(list(argv) if argv is not None else None)
    secrets = [os.environ.get("HF_TOKEN", "")]
    try:
        if args.command == "manifest":
            manifest = build_manifest(args.root, args.state)
            write_manifest(args.out, manifest)
            result: dict[str, Any] = {
                "files": len(manifest["files"]),
                "total_bytes": manifest["total_bytes"],
                "hashed_bytes": manifest["hashed_bytes"],
            }
        elif args.command == "check":
            result = check(
                args.root,
                args.manifest,
                args.state,
                args.need_out,
                full=args.full,
                link=args.link,
                read_only=args.read_only,
            )
        elif args.command == "fetch-hf":
            token = read_token(sys.stdin.buffer) if args.token_stdin else None
            secrets.append(token or "")
            result = fetch_hf(
                args.repo, args.revision, args.cache_dir, args.manifest, args.state, token=token
            )
        elif args.command == "watch":
            result = watch(args.progress, args.lease, args.job_file)
        elif args.command == "reach":
            result = reach(
                args.name, args.upstream, args.address, port=args.port, timeout=args.timeout
            )
        elif args.command == "send":
            guard()
            result = send(
                args.root,
                _names(args.files),
                _chain(args.chain),
                args.progress,
                args.job,
                streams=args.streams,
                transport=args.transport,
                manifest=read_manifest(args.manifest) if args.manifest else None,
                limits=Limits(
                    stall=args.stall_timeout,
                    deadline=args.deadline,
                    lease=args.lease,
                    lease_timeout=args.lease_timeout,
                ),
                sender=args.sender,
            )
        elif args.command == "serve":
            guard()
            result = serve(
                os.environ.get("SSH_ORIGINAL_COMMAND"),
                sys.stdin.buffer,
                sys.stderr,
                cache=args.cache_dir,
                nets=args.net,
                cipher=args.cipher,
                key=args.key,
            )
        else:
            if not 0 <= args.stream < args.streams <= MAX_STREAMS:
                raise RelayError(
                    f"--stream {args.stream} of --streams {args.streams}: "
                    f"0 <= stream < streams <= {MAX_STREAMS}"
                )
            guard()
            result = recv(
                _chain(args.chain),
                sys.stdin.buffer,
                sys.stderr,
                stream=args.stream,
                streams=args.streams,
                transport=args.transport,
            )
    except (RelayError, OSError) as exc:
        print(mask(f"{RELAY}: {exc}", secrets), file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
