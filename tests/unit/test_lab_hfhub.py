"""The lab Hugging Face Hub against the real client, through the relay's ``fetch-hf``.

The client is the pinned ``huggingface_hub`` (``model_cache_hf_hub_version`` in
the model_cache role's defaults), installed from PyPI once into a virtualenv
cached outside the checkout (``${XDG_CACHE_HOME:-~/.cache}/sparkctl/``). The
lab Hub (lab/sparkctl_lab/standins/hfhub.py) runs as its own process on loopback;
the relay runs as the head runs it: that virtualenv's python, the token on
stdin (``--token-stdin``), ``HF_ENDPOINT`` pointing at the Hub. Expected
blob names are computed here the way git and git-lfs define them, not with
the Hub's code.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import yaml

from sparkctl_lab.standins import hfhub

ROOT = Path(__file__).resolve().parents[2]
HFHUB = ROOT / "lab" / "sparkctl_lab" / "standins" / "hfhub.py"
RELAY = (
    ROOT
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "model_cache"
    / "files"
    / "sparkctl_model_relay.py"
)
DEFAULTS = (
    ROOT
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "model_cache"
    / "defaults"
    / "main.yml"
)
TOKEN = "hf_" + base64.b32encode(os.urandom(20)).decode().lower()  # new every run


def _pin() -> str:
    return str(yaml.safe_load(DEFAULTS.read_text())["model_cache_hf_hub_version"])


# ------------------------------------------------------------- the client venv
@pytest.fixture(scope="module")
def hf_python() -> Path:
    """python of a virtualenv holding the pinned huggingface_hub (made once, then reused)."""
    pin = _pin()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkctl"
    venv = base / f"hf-hub-{pin}-py{sys.version_info[0]}{sys.version_info[1]}"
    python = venv / "bin" / "python"
    ready = venv / ".sparkctl-ready"
    base.mkdir(parents=True, exist_ok=True)
    with (base / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be building it
        if not (ready.exists() and ready.read_text() == pin and python.exists()):
            shutil.rmtree(venv, ignore_errors=True)
            # No pip of its own (ensurepip costs more than the install: 6-7 s of CPU): this
            # venv's pip installs into it.
            subprocess.run(
                [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
            )
            pip = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "--python",
                    str(python),
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    f"huggingface_hub=={pin}",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if pip.returncode != 0:
                pytest.fail(f"pip install huggingface_hub=={pin} failed:\n{pip.stderr[-2000:]}")
            ready.write_text(pin)
    got = subprocess.run(
        [str(python), "-c", "import huggingface_hub; print(huggingface_hub.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert got == pin
    return python


# ----------------------------------------------------------------- the lab Hub
@dataclass
class Hub:
    endpoint: str
    cdn: str
    repos: dict[str, str]
    log: Path
    proc: subprocess.Popen[str]

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@contextlib.contextmanager
def running_hub(root: Path, work: Path, *extra: str) -> Iterator[Hub]:
    log = work / f"hub-{len(list(work.glob('hub-*.log')))}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(HFHUB),
                "--root",
                str(root),
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if ready else ""
        if not line:
            pytest.fail(f"the lab Hub did not start: {log.read_text()}")
        info = json.loads(line)
        yield Hub(info["endpoint"], info["cdn"], info["repos"], log, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _files(seed: str, sizes: dict[str, int]) -> dict[str, bytes]:
    out = {}
    for rel, size in sizes.items():
        block = hashlib.sha256(f"{seed}/{rel}".encode()).digest()
        out[rel] = (block * (size // 32 + 1))[:size]
    return out


TINY = {
    "config.json": 120,
    "generation_config.json": 60,
    "tokenizer/tokenizer.json": 3000,
    "tokenizer/special_tokens_map.json": 90,
    "added_tokens.json": 0,
    "model-00001-of-00002.safetensors": 200_000,
    "model-00002-of-00002.safetensors": 70_001,
}
SLOW = {"config.json": 100, "model.safetensors": 240_000}
RATE = 160_000  # bytes per second: the slow download takes ~1.5 s


def _publish(
    root: Path, src: Path, repo_id: str, data: dict[str, bytes], *, gated: bool = False
) -> str:
    for rel, blob in data.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(blob)
    return hfhub.make_repo(src, root, repo_id, gated=gated).commit


@dataclass
class Published:
    root: Path
    data: dict[str, dict[str, bytes]]  # repo -> path -> bytes (with the .gitattributes)
    commits: dict[str, str]
    token_file: Path


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    base = tmp_path_factory.mktemp("hubroot")
    root = base / "root"
    data = {
        "org/tiny": _files("tiny", TINY),
        "org/gated": _files("gated", {"config.json": 50}),
        "org/slow": _files("slow", SLOW),
    }
    commits = {
        repo: _publish(root, base / repo.replace("/", "_"), repo, files, gated=repo == "org/gated")
        for repo, files in data.items()
    }
    for repo, files in data.items():
        files[".gitattributes"] = (root / repo / ".gitattributes").read_bytes()
    token_file = base / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    return Published(root, data, commits, token_file)


@pytest.fixture(scope="module")
def hub(published: Published, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    # Two entries per tree page: the listing is only complete if the client follows Link.
    with running_hub(
        published.root,
        tmp_path_factory.mktemp("hublog"),
        "--token-file",
        str(published.token_file),
        "--tree-page-size",
        "2",
    ) as server:
        yield server


# ------------------------------------------------------------------- the relay
def _env(tmp: Path, endpoint: str) -> dict[str, str]:
    """A clean environment: no proxy, no saved token, no HF_TOKEN; the lab Hub as endpoint."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp / "home"),
        "HF_HOME": str(tmp / "hf-home"),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "LANG": "C.UTF-8",
    }


def _fetch_argv(python: Path, tmp: Path, repo: str, commit: str) -> list[str]:
    return [
        str(python),
        str(RELAY),
        "fetch-hf",
        repo,
        "--revision",
        commit,
        "--cache-dir",
        str(tmp / "hub-cache"),
        "--manifest",
        str(tmp / "manifest.json"),
        "--state",
        str(tmp / "state.json"),
    ]


def fetch(
    python: Path, tmp: Path, hub: Hub, repo: str, stdin: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_fetch_argv(python, tmp, repo, hub.repos[repo]), "--token-stdin"],
        input=stdin,
        env=_env(tmp, hub.endpoint),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _blob_name(data: bytes, lfs: bool) -> str:
    """What the hub cache names a blob: the ETag, i.e. sha256 for LFS files, else the git
    blob id (huggingface_hub file_download.py:1200; hf_hub_url's docstring)."""
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def test_the_real_client_fetches_a_repository_into_the_hub_cache_layout(
    hf_python: Path, hub: Hub, published: Published, tmp_path: Path
) -> None:
    logged = len(hub.requests())
    done = fetch(hf_python, tmp_path, hub, "org/tiny", TOKEN + "\n")
    assert done.returncode == 0, done.stderr
    commit = published.commits["org/tiny"]
    result = json.loads(done.stdout)
    snapshot = tmp_path / "hub-cache" / "models--org--tiny" / "snapshots" / commit
    assert result == {"path": str(snapshot), "downloaded": True, "repaired": []}
    want = published.data["org/tiny"]
    got = {p.relative_to(snapshot).as_posix(): p for p in snapshot.rglob("*") if not p.is_dir()}
    assert set(got) == set(want)
    for rel, path in got.items():
        assert path.is_symlink() and path.read_bytes() == want[rel], rel
        lfs = rel.endswith(".safetensors")  # the Hub's default .gitattributes
        assert path.resolve().parent.name == "blobs"
        assert path.resolve().name == _blob_name(want[rel], lfs), rel
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["revision"] == commit and len(manifest["files"]) == len(want)
    assert TOKEN not in done.stdout + done.stderr

    seen = hub.requests()[logged:]
    trees = [r for r in seen if "/tree/" in r["path"]]
    entries = len(want) + 1  # and the tokenizer directory
    assert len(trees) == (entries + 1) // 2 and all(r["status"] == 200 for r in trees)
    cdn = [r for r in seen if r["port"] == "cdn"]
    # LFS bodies came from the CDN, signed, without the bearer (the client drops it).
    assert sorted(r["path"].rsplit("/", 1)[1] for r in cdn) == sorted(
        _blob_name(want[f], True) for f in want if f.endswith(".safetensors")
    )
    assert all(r["auth"] == "none" and r["status"] == 200 for r in cdn)
    assert all(r["auth"] == "valid" for r in seen if r["port"] == "hub")

    before = len(hub.requests())
    again = fetch(hf_python, tmp_path, hub, "org/tiny", TOKEN + "\n")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["downloaded"] is False
    assert len(hub.requests()) == before  # a complete copy: the Hub is not contacted


@pytest.mark.parametrize(
    "case",
    [
        ("org/tiny", "", ["RepositoryNotFoundError: 401 Client Error", "Repository Not Found"]),
        (
            "org/tiny",
            "hf_" + "x" * 34,
            [
                "HfHubHTTPError: Client error '401 Unauthorized'",
                "Invalid credentials in Authorization header",
            ],
        ),
        (
            "org/gated",
            "",
            ["GatedRepoError: 401 Client Error", "Access to model org/gated is restricted"],
        ),
    ],
)
def test_a_missing_or_wrong_token_fails_with_the_library_error(
    hf_python: Path, hub: Hub, tmp_path: Path, case: tuple[str, str, list[str]]
) -> None:
    repo, token, error = case
    done = fetch(hf_python, tmp_path, hub, repo, token + "\n")
    assert done.returncode == 1
    # The role reports the last line of stderr: the whole error must be on it.
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sparkctl-model-relay: downloading {repo}@"), done.stderr
    assert all(part in last for part in error), last
    if token:
        assert token not in done.stdout + done.stderr
    assert TOKEN not in done.stdout + done.stderr
    repo_dir = tmp_path / "hub-cache" / f"models--{repo.replace('/', '--')}"
    assert not (repo_dir / "snapshots").exists()


# ------------------------------------------- what other users see during a download
def _tree(root_pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [root_pid]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(children.get(pid, []))
    return out


@dataclass
class Watch:
    leaks: set[tuple[str, str]]  # (command name, "cmdline" | "environ")
    samples_in_flight: int  # samples taken while the relay ran and a blob was incomplete
    returncode: int


def start(argv: list[str], tmp: Path, endpoint: str, stdin: str | None) -> subprocess.Popen[bytes]:
    """The relay in the background, its output in files (nothing to drain while watching)."""
    with (tmp / "out").open("wb") as out, (tmp / "err").open("wb") as err:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=err,
            env=_env(tmp, endpoint),
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        )
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin.encode())
        proc.stdin.close()  # EOF: the relay has its line
    return proc


def watch(proc: subprocess.Popen[bytes], relay_pid: int, blobs: Path, token: str) -> Watch:
    """Sample cmdline and environ of every process of this test's tree until ``proc`` ends."""
    needle = token.encode()
    leaks: set[tuple[str, str]] = set()
    in_flight = 0
    while proc.poll() is None:
        pids = _tree(os.getpid())
        for pid in pids:
            for what in ("cmdline", "environ"):
                with contextlib.suppress(OSError):
                    if needle in Path(f"/proc/{pid}/{what}").read_bytes():
                        name = Path(f"/proc/{pid}/comm").read_text().strip()
                        leaks.add((name, what))
        if relay_pid in pids and any(blobs.glob("*.incomplete")):
            in_flight += 1
        time.sleep(0.02)
    return Watch(leaks, in_flight, proc.wait(timeout=30))


@pytest.fixture(scope="module")
def slow_hub(published: Published, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(
        published.root,
        tmp_path_factory.mktemp("slowlog"),
        "--token-file",
        str(published.token_file),
        "--rate",
        str(RATE),
    ) as server:
        yield server


def _check_slow_copy(tmp: Path, published: Published) -> None:
    snapshot = tmp / "hub-cache" / "models--org--slow" / "snapshots" / published.commits["org/slow"]
    for rel, blob in published.data["org/slow"].items():
        assert (snapshot / rel).read_bytes() == blob


def test_no_process_shows_the_token_while_the_download_runs(
    hf_python: Path, slow_hub: Hub, published: Published, tmp_path: Path
) -> None:
    """The lead's task hands the token on stdin: neither the relay's command line nor its
    environment (nor any other process of this tree: the Hub, this test) holds it."""
    argv = _fetch_argv(hf_python, tmp_path, "org/slow", published.commits["org/slow"])
    proc = start([*argv, "--token-stdin"], tmp_path, slow_hub.endpoint, TOKEN + "\n")
    seen = watch(proc, proc.pid, tmp_path / "hub-cache" / "models--org--slow" / "blobs", TOKEN)
    assert seen.returncode == 0, (tmp_path / "err").read_text()
    assert seen.samples_in_flight > 0  # the processes were looked at during the download
    assert seen.leaks == set()
    _check_slow_copy(tmp_path, published)


def test_the_watch_sees_the_token_passed_the_old_way(
    hf_python: Path, slow_hub: Hub, published: Published, tmp_path: Path
) -> None:
    """Control, and the old path still working: Ansible's ``environment:`` runs
    ``/bin/sh -c 'HF_TOKEN=... python3 ...'``; the token is in the shell's world-readable
    command line and in the relay's environment for the whole download."""
    argv = _fetch_argv(hf_python, tmp_path, "org/slow", published.commits["org/slow"])
    proc = start(
        ["/bin/sh", "-c", f"HF_TOKEN={TOKEN} {shlex.join(argv)}"], tmp_path, slow_hub.endpoint, None
    )
    blobs = tmp_path / "hub-cache" / "models--org--slow" / "blobs"
    seen = watch(proc, proc.pid, blobs, TOKEN)
    assert seen.returncode == 0, (tmp_path / "err").read_text()
    assert seen.samples_in_flight > 0
    assert ("sh", "cmdline") in seen.leaks
    assert any(what == "environ" and name.startswith("python") for name, what in seen.leaks)
    _check_slow_copy(tmp_path, published)


# ------------------------------------------------------- the Hub's own answers
def _request(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request(
            method, parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {}
        )
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_lfs_files_redirect_to_signed_cdn_urls_that_serve_ranges(
    hub: Hub, published: Published
) -> None:
    commit = published.commits["org/tiny"]
    name = "model-00002-of-00002.safetensors"
    data = published.data["org/tiny"][name]
    url = f"{hub.endpoint}/org/tiny/resolve/{commit}/{name}"
    status, headers, _ = _request(url, "HEAD", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 302
    assert headers["X-Repo-Commit"] == commit
    assert headers["X-Linked-Etag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert headers["X-Linked-Size"] == str(len(data))
    location = headers["Location"]
    assert location.startswith(hub.cdn + "/")
    status, headers, body = _request(location, headers={"Range": "bytes=1000-1999"})
    assert status == 206 and body == data[1000:2000]
    assert headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    query = parse_qs(urlsplit(location).query)
    query["Expires"] = [str(int(query["Expires"][0]) + 1)]  # a changed URL is not signed
    tampered = location.split("?")[0] + "?" + urlencode({k: v[0] for k, v in query.items()})
    assert _request(tampered)[0] == 403
    assert _request(url, "HEAD")[1]["X-Error-Code"] == "RepoNotFound"  # no token
    status, headers, body = _request(
        f"{hub.endpoint}/org/tiny/resolve/{commit}/nope.bin",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (
        404,
        "EntryNotFound",
        commit,
    )
    assert json.loads(body) == {"error": "Entry not found"}


def test_the_commit_is_the_id_git_gives_the_same_tree(published: Published, tmp_path: Path) -> None:
    """LFS files enter the tree as their git-lfs pointers, as in the Hub's git repositories."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    work = tmp_path / "clone"
    shutil.copytree(published.root / "org" / "tiny", work)
    for path in work.rglob("*.safetensors"):
        blob = path.read_bytes()
        path.write_text(
            "version https://git-lfs.github.com/spec/v1\n"
            f"oid sha256:{hashlib.sha256(blob).hexdigest()}\nsize {len(blob)}\n"
        )
    who = {
        "GIT_AUTHOR_NAME": "sparkctl lab",
        "GIT_AUTHOR_EMAIL": "lab@sparkctl.invalid",
        "GIT_AUTHOR_DATE": "@0 +0000",
        "GIT_COMMITTER_NAME": "sparkctl lab",
        "GIT_COMMITTER_EMAIL": "lab@sparkctl.invalid",
        "GIT_COMMITTER_DATE": "@0 +0000",
        "HOME": str(tmp_path),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }

    def run(*args: str) -> str:
        return subprocess.run(
            [git, *args], cwd=work, env=who, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    run("init", "-q")
    run("add", "-A")
    tree = run("write-tree")
    assert run("commit-tree", tree, "-m", "sparkctl lab snapshot") == published.commits["org/tiny"]


def test_a_changed_file_makes_another_commit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    first = _publish(tmp_path / "root", src, "org/m", {"config.json": b"{}"})
    (src / "config.json").write_bytes(b'{"changed": 1}')
    second = hfhub.make_repo(src, tmp_path / "root", "org/m", replace=True).commit
    assert first != second
    assert hfhub.index_repo(tmp_path / "root", "org/m").commit == second  # from its side file


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["make-repo", "{src}", "--root", "{root}", "--repo", "no-namespace"], "org/name"),
        (["make-repo", "{src}", "--root", "{root}", "--repo", "org/a--b"], "'--'"),
        (["make-repo", "{root}/missing", "--root", "{root}", "--repo", "org/x"], "not a directory"),
        (["--root", "{root}/missing", "--bind", "127.0.0.1", "--port", "0"], "not a directory"),
        (
            [
                "--root",
                "{root}",
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--token-file",
                "{src}/empty",
            ],
            "holds no token",
        ),
    ],
)
def test_bad_input_is_refused_with_a_message(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "empty").write_text("\n")
    (tmp_path / "root").mkdir()
    args = [a.format(src=tmp_path / "src", root=tmp_path / "root") for a in argv]
    assert hfhub.main(args) == 2
    assert message in capsys.readouterr().err


def test_bad_rate_is_refused_by_the_parser(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(HFHUB),
            "--root",
            str(tmp_path),
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--rate",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "must be above 0" in done.stderr
