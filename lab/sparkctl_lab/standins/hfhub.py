#!/usr/bin/python3
"""Lab Hugging Face Hub: what ``huggingface_hub.snapshot_download`` talks to, on a lab address.

The model_cache role downloads a pinned revision on the head with the real
``huggingface_hub`` (``model_cache_hf_hub_version``), pointed at this server
through ``HF_ENDPOINT``. The server answers exactly the requests that library
makes, so the download, its cache layout, its authentication and its errors
are the library's own; only the storage behind the API is a directory.

Written from huggingface_hub 2.4.0 (the wheel's ``_snapshot_download.py``,
``hf_api.py``, ``file_download.py``, ``utils/_http.py``,
``utils/_pagination.py``, ``constants.py``; file:line below). With a
40-hex revision, ``snapshot_download`` makes these requests and no others:

1. ``GET /api/models/{org}/{name}/tree/{commit}?recursive=true&expand=false``
   (list_repo_tree, followed page by page through ``Link: <...>; rel="next"``);
2. per file not yet in the cache, ``HEAD /{org}/{name}/resolve/{commit}/{path}``
   for the file's metadata (commit, ETag, size, redirect);
3. per file, ``GET`` of that URL, or of the redirect's ``Location`` for LFS
   files, which the real Hub sends to a CDN on another host with a signed URL
   and which the client fetches WITHOUT the bearer token.

A branch name instead of a commit adds ``GET /api/models/{org}/{name}/revision/{rev}``
(model_info) first. No Xet headers are ever sent, so the client uses plain
HTTP (file_download.py:2015-2037), the path of a Hub without Xet storage.

Layout of ``--root``::

    <root>/<org>/<name>/                  the files of the repository's one commit
    <root>/<org>/<name>.sparkctl-hub.json optional: {"gated": bool} and a hash cache

The commit id is derived from the content, as git derives it: blob, tree and
commit objects hashed the way ``git`` hashes them (LFS files enter the tree as
their git-lfs pointer, as on the Hub), with a fixed author and date, so the same
files always give the same commit and any change gives another one. Files are
LFS files when the repository's ``.gitattributes`` says ``filter=lfs`` for them;
``make-repo`` writes the Hub's default ``.gitattributes`` when the source has
none, so ``*.safetensors`` are LFS files like on the Hub. The JSON file next to
a repository caches each file's hashes by size and mtime (a changed file is
hashed again) and may mark the repository gated. Repositories are read at start;
restart the server after changing one.

Authentication (``--token-file``): when started with a token, every repository
is private, as a gated or private model is on the Hub. A request without an
``Authorization`` header gets 401 ``X-Error-Code: RepoNotFound`` (the Hub does
not confirm that a private repository exists; a gated one says
``GatedRepo``), one with another bearer gets 401 ``Invalid credentials in
Authorization header`` (the Hub's text, which huggingface_hub keeps as a plain
401 ``HfHubHTTPError`` instead of calling it RepoNotFound, utils/_http.py:933-938).
The CDN port needs no token: its URLs are signed (HMAC, expiring), like the
Hub's CDN URLs. Without ``--token-file`` everything is public and
``Authorization`` is ignored (the real Hub would also reject an invalid token
on a public repository; the lab has no other tokens to judge it by).

``--rate BYTES_PER_SECOND`` throttles every file body (both ports together),
so a test can look at the processes of a download while it runs.

Usage::

    hfhub.py --root DIR --bind ADDR --port N [--cdn-port M] [--token-file F]
             [--rate R] [--tree-page-size K]
    hfhub.py make-repo SRC_DIR --root DIR --repo ORG/NAME [--gated] [--replace]

The server prints one JSON line (endpoint, CDN address, repositories and their
commits) when it listens, then one JSON line per request on stderr (method,
path, status, whether a valid token came; never a header's value).
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from types import FrameType
from typing import IO, Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

CHUNK = 1 << 20
SIDECAR_SUFFIX = ".sparkctl-hub.json"
# hf_api.py:4013: "pagination is capped by the Hub (1000 entries per page, 50 when expand=True)".
TREE_PAGE = 1000
TREE_PAGE_EXPAND = 50
SIGNED_URL_SECONDS = 3600
# A fixed author and date make the commit id a function of the content alone.
COMMIT_AUTHOR = "sparkctl lab <lab@sparkctl.invalid> 0 +0000"
COMMIT_MESSAGE = "sparkctl lab snapshot"
COMMIT_DATE = "1970-01-01T00:00:00.000Z"
# utils/_validators.py:28-39 and :138-149 (validate_repo_id): ASCII word
# characters, '-' and '.', 1 to 96 of them, no '--' or '..', no '.git' ending.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}", re.ASCII)
COMMIT_RE = re.compile(r"[0-9a-f]{40}")  # file_download.py:81 REGEX_COMMIT_HASH
DEFAULT_BRANCH = "main"  # constants.DEFAULT_REVISION
# The .gitattributes huggingface.co writes into every new model repository, as
# found verbatim in published model repositories.
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z",
        "*.arrow",
        "*.bin",
        "*.bz2",
        "*.ckpt",
        "*.ftz",
        "*.gz",
        "*.h5",
        "*.joblib",
        "*.lfs.*",
        "*.mlmodel",
        "*.model",
        "*.msgpack",
        "*.npy",
        "*.npz",
        "*.onnx",
        "*.ot",
        "*.parquet",
        "*.pb",
        "*.pickle",
        "*.pkl",
        "*.pt",
        "*.pth",
        "*.rar",
        "*.safetensors",
        "saved_model/**/*",
        "*.tar.*",
        "*.tar",
        "*.tflite",
        "*.tgz",
        "*.wasm",
        "*.xz",
        "*.zip",
        "*.zst",
        "*tfevents*",
    )
)


class HubError(Exception):
    """Bad input for the lab Hub (exit code 2)."""


# ------------------------------------------------------------ repositories
@dataclass(frozen=True)
class Entry:
    """One file of a repository, with what the tree listing and HEAD report about it."""

    path: str
    file: Path
    size: int
    git_oid: str  # sha1 of the git blob: the file itself, or its LFS pointer
    content_oid: str  # sha1 of the file's content as a git blob (the hash cache keeps it)
    sha256: str
    lfs: bool
    pointer_size: int  # 0 for a file stored in git


@dataclass(frozen=True)
class Repo:
    repo_id: str
    directory: Path
    commit: str
    gated: bool
    files: dict[str, Entry]
    dirs: dict[str, str]  # directory path -> git tree oid
    by_sha256: dict[str, Entry]


def check_repo_id(repo_id: str) -> tuple[str, str]:
    """(org, name) of an ``org/name`` id that huggingface_hub would accept."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_NAME.fullmatch(p) and not p.endswith((".", "-")) for p in parts):
        raise HubError(
            f"{repo_id!r} is not a repository id of the form org/name "
            "(letters, digits, '_', '-', '.'; at most 96 each)"
        )
    if "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        raise HubError(f"{repo_id!r}: '--', '..' and a '.git' ending are not allowed")
    return parts[0], parts[1]


def git_object_oid(kind: str, body: bytes) -> str:
    """The id git gives an object: sha1 of ``<kind> <size>\\0<body>``."""
    # sha1 is git's object id, not a security measure here.
    return hashlib.sha1(
        b"%s %d\0" % (kind.encode(), len(body)) + body, usedforsecurity=False
    ).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file (git-lfs docs/spec.md) git stores in place of an LFS file."""
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
    ).encode()


def lfs_patterns(gitattributes: str) -> list[str]:
    """Patterns with ``filter=lfs`` (later lines win in git; a ``-filter`` line unsets)."""
    out: list[str] = []
    for line in gitattributes.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if "filter=lfs" in words[1:]:
            out.append(words[0])
        elif "-filter" in words[1:] or "!filter" in words[1:]:
            out = [p for p in out if p != words[0]]
    return out


def is_lfs(path: str, patterns: Sequence[str]) -> bool:
    """gitattributes matching, simplified: a pattern without '/' matches the file name at
    any depth, one with '/' the whole path (fnmatch's '*' also crosses '/')."""
    name = PurePosixPath(path).name
    for pattern in patterns:
        if "/" in pattern.strip("/"):
            if fnmatch.fnmatchcase(path, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pattern.strip("/")):
            return True
    return False


def _hash_file(path: Path) -> tuple[str, str]:
    """(git blob sha1, sha256) of a file's content, read once."""
    size = path.stat().st_size
    blob = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    sha256 = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            blob.update(block)
            sha256.update(block)
    return blob.hexdigest(), sha256.hexdigest()


def _walk_files(directory: Path) -> Iterator[tuple[str, Path]]:
    for dirpath, dirnames, filenames in os.walk(directory):
        here = Path(dirpath)
        if here == directory and ".git" in dirnames:
            dirnames.remove(".git")  # a git clone's own objects are not repository files
        dirnames.sort()
        for dirname in dirnames:
            if (here / dirname).is_symlink():
                raise HubError(
                    f"{here / dirname} is a symbolic link; a repository holds regular files only"
                )
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink() or not path.is_file():
                raise HubError(f"{path} is not a regular file")
            yield path.relative_to(directory).as_posix(), path


def _tree_oid(files: dict[str, str], dirs: dict[str, str], prefix: str) -> str:
    """git tree id of directory ``prefix`` ('' = root); fills ``dirs`` with subtree ids."""
    children: dict[str, tuple[str, str]] = {}  # name -> (mode, oid)
    base = f"{prefix}/" if prefix else ""
    for path, oid in files.items():
        if not path.startswith(base):
            continue
        rest = path[len(base) :]
        if "/" in rest:
            sub = rest.split("/", 1)[0]
            if sub not in children:
                children[sub] = ("40000", _tree_oid(files, dirs, base + sub))
        else:
            children[rest] = ("100644", oid)
    # git sorts tree entries by name, a directory as if its name ended in '/'.
    order = sorted(children, key=lambda n: (n + "/" if children[n][0] == "40000" else n).encode())
    body = b"".join(
        f"{children[n][0]} {n}".encode() + b"\0" + bytes.fromhex(children[n][1]) for n in order
    )
    oid = git_object_oid("tree", body)
    if prefix:
        dirs[prefix] = oid
    return oid


def commit_oid(tree: str) -> str:
    body = (
        f"tree {tree}\nauthor {COMMIT_AUTHOR}\ncommitter {COMMIT_AUTHOR}\n\n{COMMIT_MESSAGE}\n"
    ).encode()
    return git_object_oid("commit", body)


def sidecar_path(root: Path, repo_id: str) -> Path:
    org, name = check_repo_id(repo_id)
    return root / org / f"{name}{SIDECAR_SUFFIX}"


def _read_sidecar(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise HubError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("files", {}), dict):
        raise HubError(f"{path}: not a lab Hub repository file")
    return data


def index_repo(root: Path, repo_id: str) -> Repo:
    """Everything the API reports about ``<root>/<org>/<name>``, hashes reused from its
    side file where a file's size and mtime did not change."""
    org, name = check_repo_id(repo_id)
    directory = root / org / name
    if not directory.is_dir():
        raise HubError(f"{directory} is not a directory")
    side = _read_sidecar(sidecar_path(root, repo_id))
    cached: dict[str, Any] = side.get("files", {})
    attributes = directory / ".gitattributes"
    patterns = lfs_patterns(attributes.read_text(errors="replace")) if attributes.is_file() else []
    files: dict[str, Entry] = {}
    for rel, path in _walk_files(directory):
        st = path.stat()
        hit = cached.get(rel)
        if (
            isinstance(hit, dict)
            and hit.get("size") == st.st_size
            and hit.get("mtime_ns") == st.st_mtime_ns
            and isinstance(hit.get("blob"), str)
            and isinstance(hit.get("sha256"), str)
        ):
            blob, sha256 = hit["blob"], hit["sha256"]
        else:
            blob, sha256 = _hash_file(path)
        lfs = is_lfs(rel, patterns)
        pointer = lfs_pointer(sha256, st.st_size) if lfs else b""
        files[rel] = Entry(
            path=rel,
            file=path,
            size=st.st_size,
            git_oid=git_object_oid("blob", pointer) if lfs else blob,
            content_oid=blob,
            sha256=sha256,
            lfs=lfs,
            pointer_size=len(pointer),
        )
    if not files:
        raise HubError(f"{directory} holds no files")
    dirs: dict[str, str] = {}
    tree = _tree_oid({rel: e.git_oid for rel, e in files.items()}, dirs, "")
    return Repo(
        repo_id=repo_id,
        directory=directory,
        commit=commit_oid(tree),
        gated=bool(side.get("gated", False)),
        files=files,
        dirs=dirs,
        by_sha256={e.sha256: e for e in files.values() if e.lfs},
    )


def write_sidecar(root: Path, repo: Repo) -> Path:
    """Record the hashes (and the gated flag) so the next start reads nothing twice."""
    path = sidecar_path(root, repo.repo_id)
    files = {}
    for rel, entry in repo.files.items():
        st = entry.file.stat()
        files[rel] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "sha256": entry.sha256,
            "blob": entry.content_oid,
        }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(
            {
                "format": 1,
                "repo": repo.repo_id,
                "commit": repo.commit,
                "gated": repo.gated,
                "files": files,
            },
            indent=1,
        )
        + "\n"
    )
    tmp.replace(path)
    return path


def make_repo(
    source: Path, root: Path, repo_id: str, *, gated: bool = False, replace: bool = False
) -> Repo:
    """Publish the files under ``source`` as ``repo_id`` (one commit) under ``root``."""
    org, name = check_repo_id(repo_id)
    if not source.is_dir():
        raise HubError(f"{source} is not a directory")
    dest = root / org / name
    if dest.exists():
        if not replace:
            raise HubError(f"{dest} exists; pass --replace to publish a new commit over it")
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(
        source,
        dest,
        symlinks=False,
        ignore=shutil.ignore_patterns(".git") if (source / ".git").is_dir() else None,
    )
    if not (dest / ".gitattributes").exists():
        (dest / ".gitattributes").write_text(DEFAULT_GITATTRIBUTES)
    sidecar = sidecar_path(root, repo_id)
    sidecar.unlink(missing_ok=True)
    if gated:
        sidecar.write_text(json.dumps({"format": 1, "gated": True}) + "\n")
    repo = index_repo(root, repo_id)
    write_sidecar(root, repo)
    return repo


def load_root(root: Path) -> dict[str, Repo]:
    """Every ``<root>/<org>/<name>/`` directory as a repository."""
    if not root.is_dir():
        raise HubError(f"--root {root} is not a directory")
    repos: dict[str, Repo] = {}
    for org_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for repo_dir in sorted(
            p for p in org_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
        ):
            repo_id = f"{org_dir.name}/{repo_dir.name}"
            repos[repo_id] = index_repo(root, repo_id)
    return repos


# ------------------------------------------------------------------ serving
class Throttle:
    """One rate for all file bodies: each chunk books the next slot of a shared clock."""

    def __init__(self, rate: int | None) -> None:
        self.rate = rate
        self.next = time.monotonic()
        self.lock = threading.Lock()
        # Small chunks at low rates, so progress is visible every ~50 ms.
        self.chunk = CHUNK if rate is None else max(1, min(64 << 10, rate // 20))

    def wait(self, n: int) -> None:
        if self.rate is None:
            return
        with self.lock:
            start = max(self.next, time.monotonic())
            self.next = start + n / self.rate
            until = self.next
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


@dataclass(frozen=True)
class Request:
    """What the API needs of an HTTP request (paths unquoted segment by segment)."""

    parts: list[str]
    path: str
    query: dict[str, list[str]]
    auth: str  # none | valid | invalid | ignored (never the header's value)
    host: str  # as the client addressed this server (Host:)
    range: str | None


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    file: Entry | None = None  # a file body (throttled), instead of ``body``
    span: tuple[int, int] | None = None  # inclusive byte range of the file


def _error(
    status: int, message: str, code: str | None = None, extra: dict[str, str] | None = None
) -> Reply:
    """The Hub's error shape: ``{"error": ...}`` plus X-Error-Code / X-Error-Message, which
    hf_raise_for_status turns into the library's error types (utils/_http.py:871-953)."""
    headers = {"Content-Type": "application/json; charset=utf-8", "X-Error-Message": message}
    if code is not None:
        headers["X-Error-Code"] = code
    headers.update(extra or {})
    return Reply(status, headers, json.dumps({"error": message}).encode())


def _json(data: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        200,
        {"Content-Type": "application/json; charset=utf-8", **(headers or {})},
        json.dumps(data).encode(),
    )


def _truthy(values: dict[str, list[str]], key: str) -> bool:
    # httpx2 sends booleans as "true"/"false" (httpx2/_utils.py primitive_value_to_str).
    return values.get(key, ["false"])[-1].lower() in ("1", "true")


def _byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(first, last) of a ``Range: bytes=a-b`` header; None: whole file; "bad": 416."""
    if not header:
        return None
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not match or match.groups() == ("", ""):
        return "bad"
    first_s, last_s = match.groups()
    if first_s == "":  # suffix range: the last N bytes
        first, last = max(size - int(last_s), 0), size - 1
    else:
        first = int(first_s)
        last = min(int(last_s), size - 1) if last_s else size - 1
    if first >= size or first > last:
        return "bad"
    return first, last


class Hub:
    """The API and CDN behaviour; the HTTP handlers only parse and write."""

    def __init__(
        self,
        repos: dict[str, Repo],
        token: str | None,
        rate: int | None,
        page_size: int = TREE_PAGE,
        log: IO[str] | None = None,
    ) -> None:
        self.repos = repos
        self.token = token
        self.throttle = Throttle(rate)
        self.page_size = page_size
        self.secret = secrets.token_bytes(32)
        self.cdn_port = 0
        self.log = log if log is not None else sys.stderr
        self.log_lock = threading.Lock()

    # -- authentication
    def auth_state(self, header: str | None) -> str:
        if header is None:
            return "none"
        if self.token is None:
            return "ignored"
        scheme, _, value = header.partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), self.token.encode()
        )
        return "valid" if ok else "invalid"

    def refuse(self, state: str, repo_id: str) -> Reply | None:
        """401 unless the request may read ``repo_id`` (which may not exist)."""
        if self.token is None or state == "valid":
            return None
        if state == "invalid":
            return _error(401, "Invalid credentials in Authorization header")
        repo = self.repos.get(repo_id)
        if repo is not None and repo.gated:
            return _error(
                401,
                f"Access to model {repo_id} is restricted. You must have access "
                "to it and be authenticated to access it. Please log in.",
                "GatedRepo",
            )
        return _error(401, "Repository not found", "RepoNotFound")

    def lookup(self, repo_id: str, revision: str, state: str) -> Repo | Reply:
        refused = self.refuse(state, repo_id)
        if refused is not None:
            return refused
        repo = self.repos.get(repo_id)
        if repo is None:
            return _error(404, "Repository not found", "RepoNotFound")
        if revision not in (repo.commit, DEFAULT_BRANCH):
            return _error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo

    # -- routing
    def route(self, request: Request) -> Reply:
        parts = request.parts
        if len(parts) >= 5 and parts[2] == "resolve":
            found = self.lookup(f"{parts[0]}/{parts[1]}", parts[3], request.auth)
            return (
                found
                if isinstance(found, Reply)
                else self.resolve(found, "/".join(parts[4:]), request.host, request.range)
            )
        if len(parts) >= 4 and parts[:2] == ["api", "models"]:
            return self._api_model(f"{parts[2]}/{parts[3]}", parts[4:], request)
        if (len(parts) >= 3 and parts[:2] in (["api", "datasets"], ["api", "spaces"])) or (
            len(parts) >= 5 and parts[0] in ("datasets", "spaces")
        ):
            return _error(404, "Repository not found", "RepoNotFound")  # models only
        return _error(404, "Sorry, we can't find the page you are looking for.")

    def _api_model(self, repo_id: str, rest: list[str], request: Request) -> Reply:
        if rest[:1] == ["tree"] and len(rest) >= 2:
            found = self.lookup(repo_id, rest[1], request.auth)
            return (
                found
                if isinstance(found, Reply)
                else self.tree(
                    found, "/".join(rest[2:]), request.query, f"http://{request.host}", request.path
                )
            )
        if rest == [] or (rest[:1] == ["revision"] and len(rest) == 2):
            found = self.lookup(repo_id, rest[1] if rest else DEFAULT_BRANCH, request.auth)
            return found if isinstance(found, Reply) else self.model_info(found, request.query)
        return _error(404, "Sorry, we can't find the page you are looking for.")

    # -- /api/models/{repo}/tree/{rev}[/{path}]
    def tree(
        self, repo: Repo, path: str, query: dict[str, list[str]], base_url: str, request_path: str
    ) -> Reply:
        recursive, expand = _truthy(query, "recursive"), _truthy(query, "expand")
        prefix = path.strip("/")
        if prefix and prefix not in repo.dirs:
            if prefix in repo.files:  # a file's own path lists that file, as on the Hub
                return _json([self._file_item(repo, repo.files[prefix], expand)])
            return _error(
                404, f"Entry not found: {prefix}", "EntryNotFound", {"X-Repo-Commit": repo.commit}
            )
        base = f"{prefix}/" if prefix else ""
        items: list[dict[str, Any]] = []
        for dirpath in sorted(repo.dirs):
            rest = dirpath[len(base) :] if dirpath.startswith(base) else None
            if rest and (recursive or "/" not in rest):
                items.append(
                    {"type": "directory", "oid": repo.dirs[dirpath], "size": 0, "path": dirpath}
                )
        for rel in sorted(repo.files):
            rest = rel[len(base) :] if rel.startswith(base) else None
            if rest and (recursive or "/" not in rest):
                items.append(self._file_item(repo, repo.files[rel], expand))
        # Cursor pagination with a Link header (utils/_pagination.py:41-53, 68-69): the
        # client follows ``rel="next"`` until a page comes without one.
        size = min(self.page_size, TREE_PAGE_EXPAND) if expand else self.page_size
        try:
            start = int(base64.urlsafe_b64decode(query.get("cursor", ["MA=="])[-1]).decode())
        except ValueError:
            return _error(400, "Invalid cursor")
        page = items[start : start + size]
        headers: dict[str, str] = {}
        if start + size < len(items):
            cursor = base64.urlsafe_b64encode(str(start + size).encode()).decode()
            params = urlencode(
                {
                    "recursive": str(recursive).lower(),
                    "expand": str(expand).lower(),
                    "cursor": cursor,
                }
            )
            headers["Link"] = f'<{base_url}{request_path}?{params}>; rel="next"'
        return _json(page, headers)

    def _file_item(self, repo: Repo, entry: Entry, expand: bool) -> dict[str, Any]:
        # The fields RepoFile reads (hf_api.py:711-735): path, size, oid, lfs{oid,size,pointerSize}.
        item: dict[str, Any] = {
            "type": "file",
            "oid": entry.git_oid,
            "size": entry.size,
            "path": entry.path,
        }
        if entry.lfs:
            item["lfs"] = {
                "oid": entry.sha256,
                "size": entry.size,
                "pointerSize": entry.pointer_size,
            }
        if expand:
            item["lastCommit"] = {"id": repo.commit, "title": COMMIT_MESSAGE, "date": COMMIT_DATE}
        return item

    # -- /api/models/{repo}[/revision/{rev}]  (model_info, hf_api.py:3202-3217)
    def model_info(self, repo: Repo, query: dict[str, list[str]]) -> Reply:
        blobs = _truthy(query, "blobs")
        siblings: list[dict[str, Any]] = []
        for rel in sorted(repo.files):
            entry = repo.files[rel]
            sibling: dict[str, Any] = {"rfilename": rel}
            if blobs:  # ModelInfo siblings (hf_api.py:966-984)
                sibling.update(size=entry.size, blobId=entry.git_oid)
                if entry.lfs:
                    sibling["lfs"] = {
                        "size": entry.size,
                        "sha256": entry.sha256,
                        "pointerSize": entry.pointer_size,
                    }
            siblings.append(sibling)
        org = repo.repo_id.split("/")[0]
        return _json(
            {
                "_id": hashlib.sha256(repo.repo_id.encode()).hexdigest()[:24],
                "id": repo.repo_id,
                "author": org,
                "sha": repo.commit,
                "lastModified": COMMIT_DATE,
                "createdAt": COMMIT_DATE,
                "private": self.token is not None,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": [],
                "siblings": siblings,
            }
        )

    # -- /{repo}/resolve/{rev}/{path}
    def resolve(self, repo: Repo, filename: str, host: str, range_header: str | None) -> Reply:
        entry = repo.files.get(filename)
        # X-Repo-Commit on every answer: the client refuses metadata without it
        # (file_download.py:1790-1796) and caches a missing file's commit (.no_exist).
        commit = {"X-Repo-Commit": repo.commit}
        if entry is None:
            return _error(404, "Entry not found", "EntryNotFound", commit)
        if entry.lfs:
            # The Hub redirects LFS files to a CDN host; as the target is another origin,
            # the client stops there, takes the metadata from this response
            # (utils/_http.py:763-780; X-Linked-Etag and X-Linked-Size win over ETag and
            # Content-Length, file_download.py:1674-1689) and GETs the Location without
            # its Authorization header (file_download.py:1818-1822).
            return Reply(
                302,
                {
                    **commit,
                    "Location": self.signed_url(repo, entry, host),
                    "X-Linked-Etag": f'"{entry.sha256}"',
                    "X-Linked-Size": str(entry.size),
                    "ETag": f'"{entry.git_oid}"',
                },
            )
        # A file stored in git: its git blob id is its ETag (hf_hub_url's docstring,
        # file_download.py:268-270), and the cache names the blob by it (:1200).
        return self._file_reply(entry, {**commit, "ETag": f'"{entry.git_oid}"'}, range_header)

    def _file_reply(self, entry: Entry, headers: dict[str, str], range_header: str | None) -> Reply:
        span = _byte_range(range_header, entry.size)
        headers = {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if span == "bad":
            return Reply(416, {**headers, "Content-Range": f"bytes */{entry.size}"})
        if isinstance(span, tuple):
            # http_get resumes an interrupted body with Range (file_download.py:376-378).
            return Reply(
                206,
                {**headers, "Content-Range": f"bytes {span[0]}-{span[1]}/{entry.size}"},
                file=entry,
                span=span,
            )
        return Reply(200, headers, file=entry, span=(0, entry.size - 1))

    # -- the CDN: signed URLs of LFS files
    def _signature(self, repo_id: str, sha256: str, filename: str, expires: int) -> str:
        message = f"{repo_id}\n{sha256}\n{filename}\n{expires}".encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def signed_url(self, repo: Repo, entry: Entry, host: str) -> str:
        expires = int(time.time()) + SIGNED_URL_SECONDS
        query = urlencode(
            {
                "filename": entry.path,
                "Expires": expires,
                "Signature": self._signature(repo.repo_id, entry.sha256, entry.path, expires),
            }
        )
        cdn = _with_port(host, self.cdn_port)
        return f"http://{cdn}/repos/{repo.repo_id}/{entry.sha256}?{query}"

    def cdn(self, request: Request) -> Reply:
        parts, query = request.parts, request.query
        denied = Reply(
            403,
            {"Content-Type": "application/xml"},
            b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied'
            b"</Code><Message>Access denied</Message></Error>",
        )
        if len(parts) != 4 or parts[0] != "repos":
            return denied
        repo = self.repos.get(f"{parts[1]}/{parts[2]}")
        entry = repo.by_sha256.get(parts[3]) if repo is not None else None
        try:
            expires = int(query.get("Expires", ["0"])[-1])
        except ValueError:
            return denied
        filename = query.get("filename", [""])[-1]
        signature = query.get("Signature", [""])[-1]
        if (
            repo is None
            or entry is None
            or entry.path != filename
            or expires < time.time()
            or not hmac.compare_digest(
                signature, self._signature(repo.repo_id, entry.sha256, filename, expires)
            )
        ):
            return denied
        name = PurePosixPath(filename).name
        return self._file_reply(
            entry,
            {
                "ETag": f'"{entry.sha256}"',
                # http_get shows the name from Content-Disposition (file_download.py:428-434).
                "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",  # noqa: E501 - the real text, whole
            },
            request.range,
        )

    def record(self, **fields: Any) -> None:
        with self.log_lock:
            self.log.write(json.dumps(fields) + "\n")
            self.log.flush()


def _with_port(host: str, port: int) -> str:
    """``host`` (as the client wrote it in Host:, maybe with a port) with another port."""
    hostname = urlsplit(f"//{host}").hostname or "127.0.0.1"
    return f"[{hostname}]:{port}" if ":" in hostname else f"{hostname}:{port}"


class Listener(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], hub: Hub, role: str) -> None:
        super().__init__(address, Handler)
        self.hub = hub
        self.role = role


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx2 expects of the Hub
    server_version = "sparkctl-lab-hfhub"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded as JSON by ``Hub.record`` instead

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, *, body: bool) -> None:
        listener = self.server
        if not isinstance(listener, Listener):
            raise TypeError("Handler serves a Listener")
        hub = listener.hub
        split = urlsplit(self.path)
        bound = listener.server_address
        request = Request(
            parts=[unquote(p) for p in split.path.split("/")[1:]],
            path=split.path,
            query=parse_qs(split.query),
            auth=hub.auth_state(self.headers.get("Authorization")),
            host=self.headers.get("Host") or _with_port(str(bound[0]), bound[1]),
            range=self.headers.get("Range"),
        )
        reply = hub.cdn(request) if listener.role == "cdn" else hub.route(request)
        reply.headers["X-Request-Id"] = f"Root={uuid.uuid4()}"
        sent = self._write(hub, reply, body=body)
        hub.record(
            port=listener.role,
            method=self.command,
            path=split.path,
            status=reply.status,
            auth=request.auth,
            bytes=sent,
        )

    def _write(self, hub: Hub, reply: Reply, *, body: bool) -> int:
        self.send_response(reply.status)
        length = len(reply.body)
        if reply.file is not None and reply.span is not None:
            length = reply.span[1] - reply.span[0] + 1
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        if not body:
            return 0
        if reply.file is None or reply.span is None:
            self.wfile.write(reply.body)
            return len(reply.body)
        sent = 0
        try:
            with reply.file.file.open("rb") as handle:
                handle.seek(reply.span[0])
                left = length
                while left > 0:
                    block = handle.read(min(hub.throttle.chunk, left))
                    if not block:
                        break  # the file shrank under the server: the client sees a short body
                    hub.throttle.wait(len(block))
                    self.wfile.write(block)
                    sent += len(block)
                    left -= len(block)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        return sent


# ---------------------------------------------------------------------- CLI
def read_token_file(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise HubError(f"--token-file {path}: {exc.strerror}") from None
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise HubError(f"--token-file {path}: holds no token (one line, no spaces)")
    return token


def serve(args: argparse.Namespace) -> int:
    repos = load_root(args.root)
    token = read_token_file(args.token_file) if args.token_file is not None else None
    hub = Hub(repos, token, args.rate, page_size=args.tree_page_size)
    try:
        api = Listener((args.bind, args.port), hub, "hub")
        cdn = Listener((args.bind, args.cdn_port), hub, "cdn")
    except OSError as exc:
        raise HubError(f"cannot listen on {args.bind}: {exc.strerror}") from None
    hub.cdn_port = cdn.server_address[1]
    host = _with_port(args.bind, api.server_address[1])
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        for s in (api, cdn)
    ]
    for thread in threads:
        thread.start()
    print(
        json.dumps(
            {
                "endpoint": f"http://{host}",
                "cdn": f"http://{_with_port(args.bind, hub.cdn_port)}",
                "port": api.server_address[1],
                "cdn_port": hub.cdn_port,
                "token_required": token is not None,
                "rate": args.rate,
                "repos": {r.repo_id: r.commit for r in repos.values()},
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    stop.wait()
    for server in (api, cdn):
        server.shutdown()
        server.server_close()
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535; 0: any free one)")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] == ["make-repo"]:
            parser = argparse.ArgumentParser(
                prog="hfhub.py make-repo", description="Publish a directory as one commit."
            )
            parser.add_argument("source", type=Path)
            parser.add_argument("--root", type=Path, required=True)
            parser.add_argument("--repo", required=True, help="org/name")
            parser.add_argument(
                "--gated",
                action="store_true",
                help="a request without a token gets GatedRepo, not RepoNotFound",
            )
            parser.add_argument("--replace", action="store_true")
            args = parser.parse_args(args_list[1:])
            repo = make_repo(
                args.source, args.root, args.repo, gated=args.gated, replace=args.replace
            )
            print(
                json.dumps(
                    {
                        "repo": repo.repo_id,
                        "commit": repo.commit,
                        "files": len(repo.files),
                        "path": str(repo.directory),
                        "lfs": sorted(e.path for e in repo.files.values() if e.lfs),
                    }
                )
            )
            return 0
        parser = argparse.ArgumentParser(prog="hfhub.py", description=__doc__.split("\n\n")[0])
        parser.add_argument("--root", type=Path, required=True)
        parser.add_argument("--bind", required=True)
        parser.add_argument("--port", type=_port, required=True)
        parser.add_argument(
            "--cdn-port",
            type=_port,
            default=0,
            help="where LFS files are served (default: any free port)",
        )
        parser.add_argument("--token-file", type=Path)
        parser.add_argument("--rate", type=_positive, help="file body bytes per second, in all")
        parser.add_argument("--tree-page-size", type=_positive, default=TREE_PAGE)
        return serve(parser.parse_args(args_list))
    except HubError as exc:
        print(f"hfhub: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
