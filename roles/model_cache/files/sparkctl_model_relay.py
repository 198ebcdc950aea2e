#!/usr/bin/env python3
"""sparkctl-model-relay: manifest, check and pipelined fan-out of a model directory.

Installed on every node by the model_cache role (standard library only). Four
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

``send ROOT --files FILE --chain JSON [--progress FILE]``
    Streams the listed files as one tar stream (GNU tar) to the first node of
    the chain, over ``ssh`` by default.

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

``recv --chain JSON``
    Run by the previous hop (through ssh). Reads the tar stream on stdin and,
    WHILE reading it, forwards every byte to the next node of the chain, so
    all nodes receive at the speed of the slowest link instead of the source
    sending one full copy per node. It extracts only the files this node
    needs, hashing each as it is written, and moves a file into place only
    when its size and SHA-256 are the manifest's (a truncated or corrupt
    transfer never leaves a file that looks complete). Progress lines from
    the nodes downstream are passed upstream on stderr, so the sender sees
    every node's bytes.

The chain is a JSON list of hops ``{"host", "root", "manifest", "state",
"need"}``; each ``recv`` handles the first and passes the rest on. ``via`` is
the command that reaches a host (default ``ssh -T -o BatchMode=yes
-o Compression=no {host}``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

CHUNK = 1 << 20
TOKEN_LIMIT = 4096  # bytes --token-stdin reads at most (HF tokens are ~40 characters)
MASK = "<token>"
PROGRESS_EVERY = 0.5  # seconds between progress lines
DEFAULT_VIA = "ssh -T -o BatchMode=yes -o Compression=no {host}"
RELAY = "sparkctl-model-relay"


class RelayError(Exception):
    """A failure with a message for the operator (exit code 1)."""


# ------------------------------------------------------------------ manifest
def _hub_repo(root: Path) -> Path | None:
    """The repo directory of a Hugging Face hub cache snapshot
    (``models--org--name/snapshots/SHA``), whose files link into ``../../blobs``."""
    resolved = root.resolve()
    if resolved.parent.name == "snapshots" and resolved.parents[1].name.startswith(
            ("models--", "datasets--", "spaces--")):
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
                raise RelayError(f"{Path(dirpath) / name} is a link to a directory; sparkctl "
                                 "follows no directory link (point the source at the real "
                                 "directory, or copy the files in)")
        for name in sorted(filenames):
            if name.endswith(".sparkctl-partial"):
                continue
            path = Path(dirpath) / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(base):
                    raise RelayError(f"{path} links to {target}, outside {base}: sparkctl "
                                     "reads nothing outside the model root")
            if path.is_file():
                yield path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


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


def build_manifest(root: Path, state_path: Path,
                   link_root: Path | None = None) -> dict[str, Any]:
    """The manifest of root; hashes reused from the state where size and mtime match."""
    if not root.is_dir():
        raise RelayError(f"{root} is not a directory")
    state = load_state(state_path)
    files: list[dict[str, Any]] = []
    new_state: dict[str, dict[str, Any]] = {}
    hashed = 0
    for path in _walk(root, link_root):
        rel = path.relative_to(root).as_posix()
        st = path.stat()
        digest = _known(state, rel, st)
        if digest is None:
            digest = sha256_file(path)
            hashed += st.st_size
        files.append({"path": rel, "size": st.st_size, "sha256": digest})
        new_state[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    if not files:
        raise RelayError(f"{root} holds no files")
    save_state(state_path, new_state)
    return {"version": 1, "files": files, "total_bytes": sum(f["size"] for f in files),
            "hashed_bytes": hashed}


def read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """rel path -> entry; refuses paths that would leave the model directory."""
    try:
        data = json.loads(path.read_text())
        entries = data["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RelayError(f"{path}: not a sparkctl model manifest ({exc})") from None
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        rel = str(entry.get("path", ""))
        pure = PurePosixPath(rel)
        if not rel or pure.is_absolute() or ".." in pure.parts:
            raise RelayError(f"{path}: unsafe path {rel!r} in the manifest")
        if not isinstance(entry.get("size"), int) or len(str(entry.get("sha256", ""))) != 64:
            raise RelayError(f"{path}: entry {rel!r} lacks a size or a SHA-256")
        out[rel] = entry
    return out


# --------------------------------------------------------------------- check
def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (for the free space of a missing directory)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check(root: Path, manifest_path: Path, state_path: Path, need_out: Path | None,
          *, full: bool = False, link: Path | None = None,
          read_only: bool = False) -> dict[str, Any]:
    """What this node lacks, against the manifest (see the module docstring).

    ``read_only`` (``sparkctl validate``) writes nothing: the hash state is
    used but not updated, no need list is written and no directory is made.
    """
    manifest = read_manifest(manifest_path)
    state = {} if full else load_state(state_path)
    new_state: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    bad: list[str] = []
    hashed = 0
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
        digest = _known(state, rel, st)
        if digest is None:
            digest = sha256_file(path)
            hashed += st.st_size
        if digest != entry["sha256"]:
            bad.append(rel)
            continue
        new_state[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    need = missing + bad
    if not read_only:
        save_state(state_path, new_state)
        if need_out is not None:
            need_out.parent.mkdir(parents=True, exist_ok=True)
            need_out.write_text("".join(f"{rel}\n" for rel in need))
        root.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(_existing(root))
    need_bytes = sum(manifest[rel]["size"] for rel in need)
    return {"files": len(manifest), "missing": missing, "bad": bad, "need": len(need),
            "need_bytes": need_bytes, "free_bytes": usage.free, "hashed_bytes": hashed,
            "total_bytes": sum(e["size"] for e in manifest.values()),
            "link_target": str(link.readlink()) if link is not None and link.is_symlink() else None}


# ---------------------------------------------------------------- the chain
def _via(hop: dict[str, Any]) -> list[str]:
    via = str(hop.get("via") or DEFAULT_VIA)
    return [w.replace("{host}", str(hop["host"])) for w in shlex.split(via)]


def next_command(chain: list[dict[str, Any]]) -> list[str]:
    """argv that starts ``recv`` on the first hop of ``chain`` with the rest of it."""
    hop = chain[0]
    relay = str(hop.get("relay") or RELAY)
    remote = shlex.join([*shlex.split(relay), "recv", "--chain", json.dumps(chain)])
    return [*_via(hop), remote]


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    """A pipe Popen was asked for (never None then; checked for the type checker)."""
    if stream is None:
        raise RelayError("a child process has no pipe")
    return stream


class Progress:
    """Bytes seen by this hop, printed as ``progress HOST BYTES FILES`` lines on stderr."""

    def __init__(self, host: str, out: IO[str]) -> None:
        self.host, self.out = host, out
        self.bytes = 0
        self.files = 0
        self._last = 0.0
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        self.bytes += n
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY:
            self._last = now
            self.emit()

    def emit(self, final: bool = False) -> None:
        word = "done" if final else "progress"
        with self.lock:
            self.out.write(f"{word} {self.host} {self.bytes} {self.files}\n")
            self.out.flush()


def _pass_up(stream: IO[bytes], out: IO[str], lock: threading.Lock, tail: list[str]) -> None:
    """Copy the downstream hop's stderr lines upstream (progress, and errors kept in tail)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if not line.startswith(("progress ", "done ")):
            tail.append(line)
            del tail[:-20]
        with lock:
            out.write(line + "\n")
            out.flush()


class Downstream:
    """The next hop's process: what is written to it goes down the chain."""

    def __init__(self, chain: list[dict[str, Any]], out: IO[str], lock: threading.Lock) -> None:
        self.host = str(chain[0]["host"])
        self.tail: list[str] = []
        self.proc = subprocess.Popen(next_command(chain), stdin=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        self.stdin = _piped(self.proc.stdin)
        self.reader = threading.Thread(target=_pass_up, daemon=True,
                                       args=(_piped(self.proc.stderr), out, lock, self.tail))
        self.reader.start()

    def write(self, data: bytes) -> None:
        try:
            self.stdin.write(data)
        except BrokenPipeError:
            raise RelayError(f"{self.host} stopped reading: "
                             + " | ".join(self.tail[-3:])) from None

    def finish(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.stdin.close()
        rc = self.proc.wait()
        self.reader.join(timeout=10)
        if rc != 0:
            raise RelayError(f"{self.host} failed (rc {rc}): " + " | ".join(self.tail[-3:]))


class TeeReader:
    """A read-only stream over ``source`` that also sends every byte it reads downstream."""

    def __init__(self, source: IO[bytes], downstream: Downstream | None,
                 progress: Progress) -> None:
        self.source, self.downstream, self.progress = source, downstream, progress

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size if size and size > 0 else CHUNK)
        if data:
            if self.downstream is not None:
                self.downstream.write(data)
            self.progress.add(len(data))
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


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
            raise RelayError(f"{current} is a link or not a directory; sparkctl writes "
                             "nothing through it (remove it first)")
    return current


def _new_file(path: Path) -> IO[bytes]:
    """``path`` created anew for writing, never through a link: a leftover partial file
    (or a link planted under its name) is removed first; O_NOFOLLOW and O_EXCL hold."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "wb")


def _receive(stream: TeeReader, root: Path, manifest: dict[str, dict[str, Any]],
             need: set[str], progress: Progress) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Extract the needed members of the tar stream, verified; returns (written, state)."""
    written: list[str] = []
    state: dict[str, dict[str, Any]] = {}
    with tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK) as archive:  # type: ignore[call-overload]
        for member in archive:
            rel = PurePosixPath(member.name).as_posix()
            if rel not in need or not member.isfile():
                continue  # another node's file, passed on and skipped here
            entry = manifest[rel]
            target = _real_dir(root, rel) / PurePosixPath(rel).name
            partial = target.with_name(target.name + ".sparkctl-partial")
            digest = hashlib.sha256()
            size = 0
            source = archive.extractfile(member)
            if source is None:
                raise RelayError(f"{rel}: no data in the stream")
            with _new_file(partial) as handle:
                while block := source.read(CHUNK):
                    digest.update(block)
                    handle.write(block)
                    size += len(block)
            if size != entry["size"] or digest.hexdigest() != entry["sha256"]:
                partial.unlink(missing_ok=True)
                raise RelayError(f"{rel}: received {size} bytes with SHA-256 "
                                 f"{digest.hexdigest()[:16]}..., the manifest says "
                                 f"{entry['size']} bytes, {entry['sha256'][:16]}...")
            partial.chmod(0o644)
            if target.is_symlink() or target.is_dir():
                raise RelayError(f"{target} is a link or a directory; remove it first")
            partial.replace(target)
            st = target.stat()
            state[rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": entry["sha256"]}
            written.append(rel)
            progress.files += 1
    stream.drain()  # tar's end-of-archive blocks go downstream too
    return written, state


def recv(chain: list[dict[str, Any]], stdin: IO[bytes], err: IO[str]) -> dict[str, Any]:
    hop, rest = chain[0], chain[1:]
    root, need_file = Path(hop["root"]), Path(hop["need"])
    manifest = read_manifest(Path(hop["manifest"]))
    need = {line.strip() for line in need_file.read_text().splitlines() if line.strip()} \
        if need_file.exists() else set()
    unknown = need - manifest.keys()
    if unknown:
        raise RelayError(f"{need_file} names files not in the manifest: {sorted(unknown)[:3]}")
    progress = Progress(str(hop.get("name") or hop["host"]), err)
    downstream = Downstream(rest, err, progress.lock) if rest else None
    try:
        written, state = _receive(TeeReader(stdin, downstream, progress), root, manifest, need,
                                  progress)
    except BaseException:
        if downstream is not None:
            downstream.proc.kill()
        raise
    if downstream is not None:
        downstream.finish()
    missing = sorted(need - set(written))
    if missing:
        raise RelayError(f"the stream ended without {len(missing)} needed file(s): {missing[:3]}")
    merged = load_state(Path(hop["state"]))
    merged.update(state)
    save_state(Path(hop["state"]), merged)
    progress.emit(final=True)
    return {"host": hop["host"], "written": written, "bytes": progress.bytes}


def _tar_create(root: Path, names: list[str]) -> subprocess.Popen[bytes]:
    """GNU tar writing ``names`` (relative to root, links dereferenced) to its stdout."""
    listing = "\0".join(names) + "\0"
    proc = subprocess.Popen(["tar", "-c", "-f", "-", "-C", str(root), "--dereference",
                             "--no-recursion", "--null", "--files-from=-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdin = _piped(proc.stdin)

    def feed() -> None:
        stdin.write(listing.encode())
        stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    return proc


class ProgressFile:
    """The sender's view of every hop (``progress`` lines from downstream), kept as JSON."""

    def __init__(self, path: Path | None, hosts: list[str], total: int, job: str = "") -> None:
        self.path = path
        self.job = job
        self.started = time.monotonic()
        self.hosts = {h: {"bytes": 0, "files": 0, "done": False} for h in hosts}
        self.total = total
        self.error: str | None = None

    def line(self, text: str) -> None:
        parts = text.split()
        if len(parts) == 4 and parts[0] in ("progress", "done") and parts[1] in self.hosts:
            entry = self.hosts[parts[1]]
            entry["bytes"], entry["files"] = int(parts[2]), int(parts[3])
            entry["done"] = parts[0] == "done"
            self.write()

    def snapshot(self, finished: bool = False) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        return {"job": self.job, "total_bytes": self.total, "elapsed_s": round(elapsed, 3),
                "finished": finished,
                "error": self.error,
                "hosts": {h: {**e, "rate_bps": round(int(e["bytes"]) / elapsed)}
                          for h, e in self.hosts.items()}}

    def write(self, finished: bool = False) -> None:
        if self.path is None:
            return
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


def send(root: Path, names: list[str], chain: list[dict[str, Any]],
         progress_path: Path | None, job: str = "") -> dict[str, Any]:
    """Stream ``names`` along ``chain``; every outcome, failures too, ends in the progress file."""
    total = sum((root / n).stat().st_size for n in names if (root / n).is_file())
    board = ProgressFile(progress_path, [str(h.get("name") or h["host"]) for h in chain], total,
                         job)
    board.write()
    try:
        return _send(root, names, chain, board)
    except BaseException as exc:
        board.error = str(exc) or type(exc).__name__
        board.write(finished=True)
        raise


def _send(root: Path, names: list[str], chain: list[dict[str, Any]],
          board: ProgressFile) -> dict[str, Any]:
    if not chain or not names:
        board.write(finished=True)
        return {"sent_bytes": 0, **board.snapshot(finished=True)}
    for name in names:
        if not (root / name).is_file():
            raise RelayError(f"{root / name} is missing on the sending node")
    sink = _LineSink(board.line)
    lock = threading.Lock()
    tar = _tar_create(root, names)
    tar_out = _piped(tar.stdout)
    downstream = Downstream(chain, sink, lock)  # type: ignore[arg-type]
    sent = 0
    try:
        while block := tar_out.read(CHUNK):
            downstream.write(block)
            sent += len(block)
    except RelayError:
        tar.kill()
        raise
    rc = tar.wait()
    tar_err = tar.stderr.read().decode(errors="replace").strip() if tar.stderr else ""
    downstream.finish()
    if rc != 0:
        raise RelayError(f"tar failed (rc {rc}): {tar_err}")
    board.write(finished=True)
    return {"sent_bytes": sent, **board.snapshot(finished=True)}


def snapshot_dir(cache_dir: Path, repo: str, revision: str) -> Path:
    """Where huggingface_hub puts ``repo`` at ``revision`` in a hub cache."""
    return cache_dir / f"models--{repo.replace('/', '--')}" / "snapshots" / revision


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({k: v for k, v in manifest.items() if k != "hashed_bytes"},
                              indent=1) + "\n")
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
        raise RelayError(f"--token-stdin: more than {TOKEN_LIMIT} bytes on stdin; it reads one "
                         "line holding the token")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise RelayError("--token-stdin: the token on stdin is not ASCII") from None
    lines = text.splitlines()
    if any(line.strip() for line in lines[1:]):
        raise RelayError("--token-stdin: stdin holds more than one line; it reads one line "
                         "holding the token")
    token = lines[0].strip() if lines else ""
    # It goes into an "authorization: Bearer ..." header: no spaces or control characters.
    if any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise RelayError("--token-stdin: the token on stdin contains spaces or control "
                         "characters")
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
            self.target.write(mask(self.pending[:cut + 1], self.secrets))
            self.target.flush()
            self.pending = self.pending[cut + 1:]
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


def fetch_hf(repo: str, revision: str, cache_dir: Path, manifest_path: Path,
             state_path: Path, *, token: str | None = None) -> dict[str, Any]:
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
    hf_token: str | bool | None = (env_token if token is None else (token or False))
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
            raise RelayError("huggingface_hub is not installed for this Python; run it with the "
                             "model_cache role's virtualenv") from None
        try:
            path = Path(snapshot_download(repo_id=repo, revision=revision,
                                          cache_dir=str(cache_dir), token=hf_token))
        except Exception as exc:  # the library raises many kinds; every one ends the fetch
            # One line: the library's messages span several, and the role reports the
            # last line of stderr (tasks/configure.yml, "Say why the download failed").
            text = " ".join(str(exc).split())
            raise RelayError(mask(f"downloading {repo}@{revision}: {type(exc).__name__}: {text}",
                                  secrets)) from None
    if path.resolve() != snapshot.resolve():
        raise RelayError(f"huggingface_hub put {repo}@{revision} in {path}, not {snapshot}")
    if known:
        found = check(snapshot, manifest_path, state_path,
                      state_path.with_name(state_path.name + ".need"))
        if found["need"]:
            raise RelayError(f"the download of {repo}@{revision} differs from its manifest "
                             f"{manifest_path}: {(found['missing'] + found['bad'])[:3]}")
    else:
        manifest = build_manifest(snapshot, state_path)  # links into blobs/: _hub_repo
        write_manifest(manifest_path, {**manifest, "repo": repo, "revision": revision})
    return {"path": str(snapshot), "downloaded": True, "repaired": repaired}


# ----------------------------------------------------------------------- CLI
def _names(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _chain(text: str) -> list[dict[str, Any]]:
    try:
        chain = json.loads(text)
    except ValueError as exc:
        raise RelayError(f"--chain is not JSON: {exc}") from None
    if not isinstance(chain, list) or not all(isinstance(h, dict) and "host" in h for h in chain):
        raise RelayError("--chain must be a list of hops with a host")
    return chain


def main(argv: Iterable[str] | None = None) -> int:
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
    p.add_argument("--read-only", action="store_true",
                   help="write nothing (no state, no need list, no directory): validate")
    p.add_argument("--link", type=Path, help="a link whose target is reported (link_target)")
    p = sub.add_parser("send")
    p.add_argument("root", type=Path)
    p.add_argument("--files", type=Path, required=True)
    p.add_argument("--chain", required=True)
    p.add_argument("--progress", type=Path)
    p.add_argument("--job", default="",
                   help="written into the progress file (a reader waits for its own job)")
    p = sub.add_parser("recv")
    p.add_argument("--chain", required=True)
    p = sub.add_parser("fetch-hf")
    p.add_argument("repo")
    p.add_argument("--revision", required=True)
    p.add_argument("--cache-dir", type=Path, required=True)
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--token-stdin", action="store_true",
                   help="read the token from the first line of stdin (empty: anonymous) "
                   "instead of HF_TOKEN")
    args = parser.parse_args(list(argv) if argv is not None else None)
    secrets = [os.environ.get("HF_TOKEN", "")]
    try:
        if args.command == "manifest":
            manifest = build_manifest(args.root, args.state)
            write_manifest(args.out, manifest)
            result: dict[str, Any] = {"files": len(manifest["files"]),
                                      "total_bytes": manifest["total_bytes"],
                                      "hashed_bytes": manifest["hashed_bytes"]}
        elif args.command == "check":
            result = check(args.root, args.manifest, args.state, args.need_out, full=args.full,
                           link=args.link, read_only=args.read_only)
        elif args.command == "fetch-hf":
            token = read_token(sys.stdin.buffer) if args.token_stdin else None
            secrets.append(token or "")
            result = fetch_hf(args.repo, args.revision, args.cache_dir, args.manifest, args.state,
                              token=token)
        elif args.command == "send":
            result = send(args.root, _names(args.files), _chain(args.chain), args.progress,
                          args.job)
        else:
            result = recv(_chain(args.chain), sys.stdin.buffer, sys.stderr)
    except (RelayError, OSError, tarfile.TarError) as exc:
        print(mask(f"{RELAY}: {exc}", secrets), file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
