"""sparkctl-model-relay (roles/model_cache/files): manifest, check, and the pipelined chain.

The chain runs for real here: the sender's GNU tar, then one relay process
per "node" (a directory under tmp_path), each reached through ``sh -c``
instead of ssh, forwarding the stream to the next while extracting what it
needs. Nothing is mocked but the transport.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.pathload import load_file

ROLE_FILES = (
    Path(__file__).resolve().parents[2]
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "model_cache"
    / "files"
)
SCRIPT = ROLE_FILES / "sparkctl_model_relay.py"
relay = load_file("sparkctl_model_relay", SCRIPT)


def _model(root: Path, sizes: dict[str, int]) -> dict[str, bytes]:
    out = {}
    for rel, size in sizes.items():
        data = hashlib.sha256(rel.encode()).digest() * (size // 32 + 1)
        out[rel] = data[:size]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(out[rel])
    return out


SIZES = {
    "config.json": 300,
    "model-00001-of-00002.safetensors": 3 << 20,
    "model-00002-of-00002.safetensors": (2 << 20) + 17,
    "sub/tokenizer.json": 5000,
}


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, dict[str, bytes], Path]:
    root = tmp_path / "head" / "model"
    data = _model(root, SIZES)
    manifest = tmp_path / "head" / "manifest.json"
    assert (
        relay.main(
            [
                "manifest",
                str(root),
                "--out",
                str(manifest),
                "--state",
                str(tmp_path / "head" / "state.json"),
            ]
        )
        == 0
    )
    return root, data, manifest


Source = tuple[Path, dict[str, bytes], Path]


def test_manifest_lists_every_file_with_size_and_sha256(source: Source) -> None:
    _, data, manifest = source
    entries = {e["path"]: e for e in json.loads(manifest.read_text())["files"]}
    assert set(entries) == set(SIZES)
    for rel, blob in data.items():
        assert entries[rel]["size"] == len(blob)
        assert entries[rel]["sha256"] == hashlib.sha256(blob).hexdigest()


def test_manifest_reuses_hashes_of_unchanged_files(tmp_path: Path) -> None:
    root = tmp_path / "m"
    _model(root, SIZES)
    state = tmp_path / "state.json"
    first = relay.build_manifest(root, state)
    assert first["hashed_bytes"] == sum(SIZES.values())
    again = relay.build_manifest(root, state)
    assert again["hashed_bytes"] == 0 and again["files"] == first["files"]
    (root / "config.json").write_text("{}")  # a changed file is hashed again
    assert relay.build_manifest(root, state)["hashed_bytes"] == 2


def test_manifest_follows_snapshot_links_into_blobs(tmp_path: Path) -> None:
    blobs = tmp_path / "models--org--m" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "abc").write_bytes(b"weights")
    snap = tmp_path / "models--org--m" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to("../../blobs/abc")
    out = relay.build_manifest(snap, tmp_path / "s.json")
    assert out["files"] == [
        {"path": "model.safetensors", "size": 7, "sha256": hashlib.sha256(b"weights").hexdigest()}
    ]


def test_manifest_follows_no_link_out_of_the_model_root(tmp_path: Path) -> None:
    """A file link out of the root, or any directory link, is refused: nothing outside
    the model is read, hashed or sent (links into blobs/ of a hub snapshot are inside)."""
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "shadow").write_text("secret")
    root = tmp_path / "model"
    _model(root, {"config.json": 10})
    (root / "stolen.json").symlink_to(outside / "shadow")
    with pytest.raises(relay.RelayError, match=r"stolen.json links to .*outside"):
        relay.build_manifest(root, tmp_path / "s.json")
    (root / "stolen.json").unlink()
    (root / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(relay.RelayError, match="is a link to a directory"):
        relay.build_manifest(root, tmp_path / "s.json")
    (root / "sub").unlink()
    (root / "inside.json").symlink_to("config.json")  # a link within the root is fine
    assert {f["path"] for f in relay.build_manifest(root, tmp_path / "s.json")["files"]} == {
        "config.json",
        "inside.json",
    }


def test_the_receiver_writes_through_no_link(tmp_path: Path, source: Source) -> None:
    """A directory link already in the node's cache, or a link planted under the name of a
    partial file, is never written through; the rest of the model still arrives."""
    root, data, manifest = source
    hop = _hop(tmp_path, "spark2", manifest)
    node = Path(hop["root"])
    node.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (node / "sub").symlink_to(elsewhere, target_is_directory=True)
    _need(hop, manifest)
    with pytest.raises(relay.RelayError, match=r"sub is a link or not a directory"):
        relay.send(root, list(SIZES), [hop], None)
    assert list(elsewhere.iterdir()) == []
    (node / "sub").unlink()
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (node / "config.json.sparkctl-partial").symlink_to(victim)
    _need(hop, manifest)
    out = relay.send(root, list(SIZES), [hop], None)
    assert out["error"] is None
    assert victim.read_text() == "untouched"
    assert (node / "config.json").read_bytes() == data["config.json"]
    assert not (node / "config.json").is_symlink()


def test_check_finds_missing_truncated_and_corrupt_files(tmp_path: Path, source: Source) -> None:
    _, data, manifest = source
    node = tmp_path / "n2"
    _model(node, SIZES)
    (node / "config.json").unlink()
    with (node / "model-00002-of-00002.safetensors").open("r+b") as handle:
        handle.truncate(1000)
    blob = bytearray(data["sub/tokenizer.json"])
    blob[10] ^= 0xFF  # same size, one byte flipped
    (node / "sub/tokenizer.json").write_bytes(bytes(blob))
    need = tmp_path / "need"
    out = relay.check(node, manifest, tmp_path / "n2state.json", need)
    assert out["missing"] == ["config.json"]
    assert sorted(out["bad"]) == ["model-00002-of-00002.safetensors", "sub/tokenizer.json"]
    assert sorted(need.read_text().split()) == sorted(out["missing"] + out["bad"])
    assert (
        out["need_bytes"]
        == SIZES["config.json"]
        + SIZES["model-00002-of-00002.safetensors"]
        + SIZES["sub/tokenizer.json"]
    )
    assert out["free_bytes"] > 0


def test_check_quick_mode_trusts_verified_files_until_they_change(
    tmp_path: Path, source: Source
) -> None:
    _, _, manifest = source
    node = tmp_path / "n2"
    _model(node, SIZES)
    state = tmp_path / "n2state.json"
    need = tmp_path / "need"
    assert relay.check(node, manifest, state, need)["hashed_bytes"] == sum(SIZES.values())
    assert relay.check(node, manifest, state, need)["hashed_bytes"] == 0
    # A flipped byte that keeps size and mtime is only seen by a full check.
    path = node / "config.json"
    st = path.stat()
    blob = bytearray(path.read_bytes())
    blob[0] ^= 0xFF
    path.write_bytes(bytes(blob))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert relay.check(node, manifest, state, need)["bad"] == []
    assert relay.check(node, manifest, state, need, full=True)["bad"] == ["config.json"]


_SHA = "a" * 64


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"files": [{"path": "../etc/passwd", "size": 1, "sha256": _SHA}]}),
        json.dumps({"files": [{"path": "/abs", "size": 1, "sha256": _SHA}]}),
        json.dumps({"files": [{"path": "x", "size": "1", "sha256": "short"}]}),
        "not json",
    ],
)
def test_a_bad_manifest_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(relay.RelayError):
        relay.read_manifest(path)


def _hop(tmp_path: Path, name: str, manifest: Path) -> dict[str, Any]:
    base = tmp_path / name
    return {
        "host": name,
        "root": str(base / "model"),
        "manifest": str(manifest),
        "state": str(base / "state.json"),
        "need": str(base / "need"),
        "via": "sh -c",
        "relay": f"{shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))}",
    }


def _need(hop: dict[str, Any], manifest: Path) -> dict[str, Any]:
    out: dict[str, Any] = relay.check(
        Path(hop["root"]), manifest, Path(hop["state"]), Path(hop["need"])
    )
    return out


def test_chain_delivers_each_node_what_it_lacks_and_nothing_else(
    tmp_path: Path, source: Source
) -> None:
    root, data, manifest = source
    hops = [_hop(tmp_path, f"spark{i}", manifest) for i in (2, 3, 4)]
    # spark3 already has everything but one shard; spark2 and spark4 have nothing.
    _model(Path(hops[1]["root"]), SIZES)
    (Path(hops[1]["root"]) / "model-00001-of-00002.safetensors").unlink()
    untouched = Path(hops[1]["root"]) / "config.json"
    before = untouched.stat().st_mtime_ns
    needs = [_need(h, manifest) for h in hops]
    assert [n["need"] for n in needs] == [4, 1, 4]
    union = tmp_path / "union"
    union.write_text("\n".join(SIZES) + "\n")
    progress = tmp_path / "progress.json"
    out = relay.send(root, list(SIZES), hops, progress)
    assert out["error"] is None and out["finished"]
    for hop in hops:
        for rel, blob in data.items():
            assert (Path(hop["root"]) / rel).read_bytes() == blob
        assert _need(hop, manifest)["need"] == 0
        assert out["hosts"][hop["host"]]["done"]
        assert out["hosts"][hop["host"]]["bytes"] >= sum(SIZES.values())  # every hop saw the stream
    assert untouched.stat().st_mtime_ns == before  # a file spark3 had was not rewritten
    assert [out["hosts"][h["host"]]["files"] for h in hops] == [4, 1, 4]
    assert json.loads(progress.read_text())["finished"] is True
    assert not list(tmp_path.rglob("*.sparkctl-partial"))


def test_a_hop_that_fails_stops_the_chain_with_its_name(tmp_path: Path, source: Source) -> None:
    root, _, manifest = source
    hops = [_hop(tmp_path, f"spark{i}", manifest) for i in (2, 3)]
    for hop in hops:
        _need(hop, manifest)
    hops[1]["manifest"] = str(tmp_path / "missing-manifest.json")
    with pytest.raises(
        relay.RelayError, match=r"spark3 stopped reading: .*not a sparkctl model manifest"
    ):
        relay.send(root, list(SIZES), hops, None)


def test_a_stream_that_does_not_match_the_manifest_leaves_no_file(
    tmp_path: Path, source: Source
) -> None:
    root, _, manifest = source
    hop = _hop(tmp_path, "spark2", manifest)
    _need(hop, manifest)
    (root / "config.json").write_text("changed on the sender after the manifest was made")
    with pytest.raises(relay.RelayError, match=r"config\.json: received"):
        relay.send(root, ["config.json"], [hop], None)
    assert not (Path(hop["root"]) / "config.json").exists()
    assert not list(Path(hop["root"]).rglob("*.sparkctl-partial"))


# ------------------------------------------------------- fetch-hf (the Hub faked)
REMOTE = {
    "config.json": b'{"model_type": "llama"}',
    "model.safetensors": os.urandom(70000),
    "tokenizer/tokenizer.json": b"{}" * 300,
}
REPO, REV = "org/tiny", "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """huggingface_hub.snapshot_download as the hub cache lays it out: files are
    blobs, the snapshot links to them; only files not already there are fetched."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.fetched: list[str] = []
        self.calls = 0
        self.tokens: list[str | bool | None] = []
        self.env_tokens: list[str | None] = []
        self.say: list[str] = []  # written on stderr by the "library", one write each
        self.error: Exception | None = None

    def snapshot_download(
        self, *, repo_id: str, revision: str, cache_dir: str, token: str | bool | None
    ) -> str:
        self.calls += 1
        self.tokens.append(token)
        self.env_tokens.append(os.environ.get("HF_TOKEN"))
        for chunk in self.say:
            sys.stderr.write(chunk)
        if self.error is not None:
            raise self.error
        repo_dir = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}"
        snap = repo_dir / "snapshots" / revision
        for rel, data in self.files.items():
            link = snap / rel
            if link.exists():
                continue
            blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
            self.fetched.append(rel)
        return str(snap)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    fake = FakeHub(dict(REMOTE))
    module = type(sys)("huggingface_hub")
    module.snapshot_download = fake.snapshot_download  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    return fake


def _fetch(tmp_path: Path) -> dict[str, Any]:
    out: dict[str, Any] = relay.fetch_hf(
        REPO, REV, tmp_path / "hub", tmp_path / "m.json", tmp_path / "state.json"
    )
    return out


def test_fetch_writes_the_revision_manifest_from_the_first_download(
    tmp_path: Path, hub: FakeHub
) -> None:
    out = _fetch(tmp_path)
    assert out["downloaded"] and sorted(hub.fetched) == sorted(REMOTE)
    manifest = json.loads((tmp_path / "m.json").read_text())
    assert manifest["revision"] == REV and manifest["repo"] == REPO
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in REMOTE.items()
    }
    assert out["path"].endswith(f"models--org--tiny/snapshots/{REV}")


def test_fetch_of_a_complete_copy_does_not_contact_the_hub(tmp_path: Path, hub: FakeHub) -> None:
    _fetch(tmp_path)
    out = _fetch(tmp_path)
    assert out == {"path": out["path"], "downloaded": False, "repaired": []}
    assert hub.calls == 1


def test_fetch_downloads_a_damaged_file_again_instead_of_trusting_it(
    tmp_path: Path, hub: FakeHub
) -> None:
    first = _fetch(tmp_path)
    shard = Path(first["path"]) / "model.safetensors"
    blob = shard.resolve()
    blob.write_bytes(b"garbage" + blob.read_bytes()[7:])  # damaged on the head
    hub.fetched.clear()
    out = _fetch(tmp_path)
    assert out["repaired"] == ["model.safetensors"] and hub.fetched == ["model.safetensors"]
    assert shard.read_bytes() == REMOTE["model.safetensors"]
    manifest = json.loads((tmp_path / "m.json").read_text())  # still the first download's
    assert {f["path"]: f["sha256"] for f in manifest["files"]}[
        "model.safetensors"
    ] == hashlib.sha256(REMOTE["model.safetensors"]).hexdigest()


def test_fetch_refuses_a_download_that_contradicts_the_manifest(
    tmp_path: Path, hub: FakeHub
) -> None:
    first = _fetch(tmp_path)
    (Path(first["path"]) / "config.json").unlink()
    hub.files["config.json"] = b'{"model_type": "changed upstream"}'
    with pytest.raises(relay.RelayError, match="differs from its manifest"):
        _fetch(tmp_path)


def test_fetch_without_the_library_says_which_python_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(relay.RelayError, match="huggingface_hub is not installed"):
        _fetch(tmp_path)


def test_read_only_check_writes_nothing_on_the_node(tmp_path: Path, source: Source) -> None:
    """What validate runs: the same verdict, and no state, need list or directory written."""
    _, _, manifest = source
    node = tmp_path / "n2"
    _model(node, SIZES)
    with (node / "config.json").open("r+b") as handle:
        handle.truncate(10)
    state = tmp_path / "n2state.json"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert (
        relay.main(
            ["check", str(node), "--manifest", str(manifest), "--state", str(state), "--read-only"]
        )
        == 0
    )
    out = relay.check(node, manifest, state, None, read_only=True)
    assert out["bad"] == ["config.json"] and out["missing"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no state file
    missing_root = tmp_path / "nowhere" / "model"
    gone = relay.check(missing_root, manifest, state, None, read_only=True)
    assert len(gone["missing"]) == len(SIZES) and gone["free_bytes"] > 0
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------- fetch-hf: the token, off the command line
TOKEN = "hf_" + os.urandom(18).hex()  # a new one every run


def _fetch_main(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stdin: bytes | None,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str]:
    argv = [
        "fetch-hf",
        REPO,
        "--revision",
        REV,
        "--cache-dir",
        str(tmp_path / "hub"),
        "--manifest",
        str(tmp_path / "m.json"),
        "--state",
        str(tmp_path / "state.json"),
    ]
    if stdin is not None:
        argv.append("--token-stdin")
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    rc = relay.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    "stdin",
    [TOKEN.encode() + b"\n", TOKEN.encode(), b"  " + TOKEN.encode() + b"\r\n\n"],
    ids=["newline", "bare", "blanks-crlf"],  # the token is random: ids the same in every process
)
def test_token_stdin_goes_to_the_library_only(
    tmp_path: Path,
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stdin: bytes,
) -> None:
    """What Ansible's ``stdin:`` hands over (with or without its newline) is the token the
    library gets as ``token=``; it is not put into the environment children inherit."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    rc, out, err = _fetch_main(tmp_path, monkeypatch, stdin, capsys)
    assert rc == 0, err
    assert hub.tokens == [TOKEN] and hub.env_tokens == [None]
    assert "HF_TOKEN" not in os.environ
    assert json.loads(out)["downloaded"] is True
    assert TOKEN not in out + err


def test_empty_token_stdin_is_anonymous_even_with_hf_token_set(
    tmp_path: Path,
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment")
    rc, _, err = _fetch_main(tmp_path, monkeypatch, b"\n", capsys)
    assert rc == 0, err
    assert hub.tokens == [False]  # token=False: the library looks for no token elsewhere


def test_without_token_stdin_hf_token_still_works(
    tmp_path: Path,
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    rc, _, err = _fetch_main(tmp_path, monkeypatch, None, capsys)
    assert rc == 0, err
    assert hub.tokens == [TOKEN]
    monkeypatch.delenv("HF_TOKEN")
    (tmp_path / "m.json").unlink()
    rc, _, err = _fetch_main(tmp_path, monkeypatch, None, capsys)
    assert rc == 0, err
    assert hub.tokens[-1] is None  # nothing set: the library's own lookup, as before


@pytest.mark.parametrize("env", [False, True])
def test_the_token_is_masked_in_errors_and_in_what_the_library_prints(
    tmp_path: Path,
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: bool,
) -> None:
    """A library (or a mirror's error page) that repeats the token does not get it printed,
    even when it writes it in two pieces."""
    hub.say = [f"warning: sending Bearer {TOKEN[:9]}", f"{TOKEN[9:]} to the mirror\n"]
    hub.error = OSError(f"401 for Authorization: Bearer {TOKEN} (mirror echo)")
    if env:
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        rc, out, err = _fetch_main(tmp_path, monkeypatch, None, capsys)
    else:
        monkeypatch.delenv("HF_TOKEN", raising=False)
        rc, out, err = _fetch_main(tmp_path, monkeypatch, TOKEN.encode() + b"\n", capsys)
    assert rc == 1
    assert TOKEN not in out + err
    assert "warning: sending Bearer <token> to the mirror" in err
    assert "OSError: 401 for Authorization: Bearer <token> (mirror echo)" in err
    assert sys.stderr is not None and not isinstance(sys.stderr, relay.MaskedStream)


@pytest.mark.parametrize(
    "case",
    [
        (TOKEN.encode() + b"\nsecond-line\n", "more than one line"),
        (b"hf_with space\n", "spaces or control characters"),
        (b"hf_tab\there\n", "spaces or control characters"),
        ("hf_n\u00f6t_ascii\n".encode(), "not ASCII"),
        (b"x" * 5000, "more than 4096 bytes"),
    ],
)
def test_a_bad_token_stdin_is_refused_without_echoing_it(
    tmp_path: Path,
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: tuple[bytes, str],
) -> None:
    stdin, why = case
    rc, out, err = _fetch_main(tmp_path, monkeypatch, stdin, capsys)
    assert rc == 1 and why in err and hub.calls == 0
    first = stdin.decode(errors="replace").splitlines()[0].strip()
    assert first not in err and out == ""


# ------------------------------------------- several streams, twins, ranges, tcp
def _everything_delivered(
    hops: list[dict[str, Any]], data: dict[str, bytes], manifest: Path
) -> None:
    for hop in hops:
        for rel, blob in data.items():
            assert (Path(hop["root"]) / rel).read_bytes() == blob
        assert _need(hop, manifest)["need"] == 0
        leftovers = [
            p.name
            for p in Path(hop["root"]).parent.rglob("*")
            if p.name.endswith((".sparkctl-partial", ".sparkctl-ranges", ".streams"))
        ]
        assert leftovers == []


@pytest.mark.parametrize("streams", [1, 2, 5])
def test_plan_carries_every_byte_once_and_balances_the_streams(streams: int) -> None:
    mib = 1 << 20
    sizes = {"a": 700 * mib, "b": 300 * mib + 5, "c": 0, "d": 12345, "e": 90 * mib}
    groups = relay.plan(sizes, streams)
    assert 1 <= len(groups) <= streams
    covered: dict[str, list[tuple[int, int]]] = {}
    for group in groups:
        for rel, offset, length, size in group:
            assert size == sizes[rel]
            covered.setdefault(rel, []).append((offset, length))
    for rel, size in sizes.items():
        spans = sorted(covered[rel])
        assert spans[0][0] == 0 and sum(n for _, n in spans) == size
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(spans))
        if len(spans) > 1:  # split only at whole MiBs, into pieces of at least MIN_PIECE
            assert all(n >= relay.MIN_PIECE and a % relay.CHUNK == 0 for a, n in spans)
    loads = [sum(p[2] for p in g) for g in groups]
    biggest_piece = max(p[2] for g in groups for p in g)
    assert max(loads) - min(loads) <= biggest_piece


def test_plan_makes_no_empty_streams() -> None:
    assert [len(g) for g in relay.plan({"only": 10}, 8)] == [1]


def test_auto_streams_uses_both_twins_and_half_the_cores() -> None:
    assert [relay.auto_streams(c) for c in (1, 2, 4, 20, 64)] == [2, 2, 2, 8, 8]


def test_streams_over_both_twins_split_a_big_file_and_deliver_everything(
    tmp_path: Path, source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1 MiB MIN_PIECE makes the 3 MiB shard split across streams here (the
    # sender plans in this process; the receivers take whatever pieces come).
    monkeypatch.setattr(relay, "MIN_PIECE", 1 << 20)
    root, data, manifest = source
    hops = [_hop(tmp_path, f"spark{i}", manifest) for i in (2, 3, 4)]
    seen = tmp_path / "seen"
    for i, hop in enumerate(hops):
        hop["hosts"] = [f"twin-a-{i}", f"twin-b-{i}"]
        hop["job"] = "j1"
        # The "transport" notes which twin each stream reached, then runs the hop.
        hop["via"] = f"sh -c 'echo $0 >> {seen}; exec sh -c \"$1\"' {{host}}"
    _model(Path(hops[1]["root"]), {"sub/tokenizer.json": SIZES["sub/tokenizer.json"]})
    needs = [_need(h, manifest) for h in hops]
    assert [n["need"] for n in needs] == [4, 3, 4]
    progress = tmp_path / "progress.json"
    pieces = [p for g in relay.plan(SIZES, 3) for p in g]
    assert len([p for p in pieces if p[0] == "model-00001-of-00002.safetensors"]) == 2
    out = relay.send(root, list(SIZES), hops, progress, "j1", streams=3)
    assert out["error"] is None and out["finished"] and out["streams"] == 3
    _everything_delivered(hops, data, manifest)
    assert sorted(seen.read_text().split()) == sorted(
        [f"twin-a-{i}" for i in range(3)] * 2 + [f"twin-b-{i}" for i in range(3)]
    )
    board = json.loads(progress.read_text())
    for hop in hops:
        assert board["hosts"][hop["host"]]["done"]
        assert board["hosts"][hop["host"]]["bytes"] >= sum(SIZES.values())
    assert [board["hosts"][h["host"]]["files"] for h in hops] == [4, 3, 4]
    assert out["sent_bytes"] == sum(SIZES.values())


def test_the_unencrypted_transport_delivers_over_tcp_on_each_hops_address(
    tmp_path: Path, source: Source
) -> None:
    root, data, manifest = source
    hops = [_hop(tmp_path, f"spark{i}", manifest) for i in (2, 3)]
    for hop in hops:
        hop["hosts"] = ["127.0.0.1", "127.0.0.2"]
        _need(hop, manifest)
    out = relay.send(root, list(SIZES), hops, None, "t1", streams=2, transport="tcp")
    assert out["error"] is None and out["finished"]
    _everything_delivered(hops, data, manifest)


def test_a_tcp_hop_takes_only_the_connection_with_its_token(tmp_path: Path) -> None:
    token = b"ab" * (relay.TOKEN_HEX // 2)
    said = io.StringIO()
    got: dict[str, Any] = {}

    def listen() -> None:
        try:
            got["conn"] = relay._listen({"host": "127.0.0.1"}, 0, io.BytesIO(token + b"\n"), said)
        except relay.RelayError as exc:
            got["error"] = exc

    thread = threading.Thread(target=listen)
    thread.start()
    for _ in range(200):
        if said.getvalue():
            break
        thread.join(0.01)
    port = int(said.getvalue().split()[1])
    with socket.create_connection(("127.0.0.1", port)) as stranger:
        stranger.sendall(b"cd" * (relay.TOKEN_HEX // 2) + b"\n")
        assert stranger.recv(10) == b""  # closed unanswered
    with socket.create_connection(("127.0.0.1", port)) as upstream:
        upstream.sendall(token + b"\n")
        thread.join(10)
        conn = got["conn"]
        upstream.sendall(b"payload")
        assert conn.recv(7) == b"payload"
        conn.close()


def test_a_tcp_hop_without_a_token_refuses_to_listen() -> None:
    with pytest.raises(relay.RelayError, match="no one-time token"):
        relay._listen({"host": "127.0.0.1"}, 0, io.BytesIO(b"\n"), io.StringIO())


def test_a_corrupt_range_leaves_no_file(
    tmp_path: Path, source: Source, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "MIN_PIECE", 1 << 20)
    root, _, manifest = source
    hop = _hop(tmp_path, "spark2", manifest)
    hop["job"] = "j2"
    _need(hop, manifest)
    shard = root / "model-00001-of-00002.safetensors"
    blob = bytearray(shard.read_bytes())
    blob[-1] ^= 0xFF  # same size, last range differs from the manifest
    shard.write_bytes(bytes(blob))
    with pytest.raises(
        relay.RelayError, match=r"model-00001-of-00002\.safetensors: received 3145728 bytes"
    ):
        relay.send(root, [shard.name], [hop], None, "j2", streams=3)
    assert not (Path(hop["root"]) / shard.name).exists()
    assert not [p for p in Path(hop["root"]).rglob("*") if p.name.startswith(shard.name)]


def _stream(records: list[tuple[dict[str, Any], bytes]], end: int | None) -> bytes:
    out = bytearray(relay.MAGIC)
    for header, payload in records:
        raw = json.dumps(header).encode()
        out += relay.HEADER.pack(len(raw)) + raw + payload
    if end is not None:
        raw = json.dumps({"end": True, "pieces": end}).encode()
        out += relay.HEADER.pack(len(raw)) + raw
    return bytes(out)


def _recv_bytes(hop: dict[str, Any], stream: bytes) -> Any:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "recv", "--chain", json.dumps([hop])],
        input=stream,
        capture_output=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("records", "end", "message"),
    [
        ([], None, "cut off"),
        (
            [({"path": "config.json", "offset": 0, "length": 300, "size": 300}, b"x" * 100)],
            None,
            "cut off",
        ),
        ([], 1, "ended after 0 pieces, its sender sent 1"),
        (
            [({"path": "../etc/passwd", "offset": 0, "length": 1, "size": 1}, b"x")],
            1,
            "which the manifest does not list",
        ),
        (
            [({"path": "config.json", "offset": 200, "length": 200, "size": 300}, b"x" * 200)],
            1,
            "does not fit",
        ),
    ],
)
def test_a_bad_stream_is_refused_and_leaves_no_file(
    tmp_path: Path,
    source: Source,
    records: list[tuple[dict[str, Any], bytes]],
    end: int | None,
    message: str,
) -> None:
    _, _, manifest = source
    hop = _hop(tmp_path, "spark2", manifest)
    _need(hop, manifest)
    proc = _recv_bytes(hop, _stream(records, end))
    assert proc.returncode == 1
    assert message in proc.stderr.decode()
    assert not (Path(hop["root"]) / "config.json").exists()
    assert not list(Path(hop["root"]).rglob("*.sparkctl-partial"))


def test_check_clears_what_an_interrupted_transfer_left(tmp_path: Path, source: Source) -> None:
    _, _, manifest = source
    hop = _hop(tmp_path, "spark2", manifest)
    node = Path(hop["root"])
    (node / "sub").mkdir(parents=True)
    for name in (
        "sub/tokenizer.json.j9.sparkctl-partial",
        "sub/tokenizer.json.j9.sparkctl-ranges",
        "config.json.sparkctl-partial",
    ):
        (node / name).write_text("left over")
    counter = Path(hop["state"]).with_name("state.json.j9.streams")
    counter.write_text("2\n")
    assert _need(hop, manifest)["need"] == 4
    assert [p.name for p in node.rglob("*") if p.is_file()] == []
    assert not counter.exists()


def test_the_forwarded_stream_is_the_stream_byte_for_byte(tmp_path: Path) -> None:
    """Inbound passes every byte on before parsing, by tee(2) between pipes."""
    calls: list[int] = []
    real = relay._TEE
    assert real is not None  # Linux with glibc: the kernel copy is available

    def counting(fd_in: int, fd_out: int, n: int, flags: int) -> int:
        got = int(real(fd_in, fd_out, n, flags))
        calls.append(got)
        return got

    src_r, src_w = os.pipe()
    out_r, out_w = os.pipe()
    payload = os.urandom(50000)
    os.write(src_w, payload)
    os.close(src_w)
    down = type("Down", (), {"fd": out_w, "is_pipe": True, "host": "next", "tail": []})()
    inbound = relay.Inbound(src_r, down, relay.Progress("here", io.StringIO()))
    inbound.tee = counting
    assert inbound.pipe  # pipe in, pipe on: the kernel's copies
    assert inbound.exact(len(payload)) == payload
    assert inbound.at_end()
    os.close(out_w)
    forwarded = b""
    while block := os.read(out_r, 65536):
        forwarded += block
    assert forwarded == payload
    assert sum(calls) == len(payload) and calls[-1] == 0
    for fd in (src_r, out_r):
        os.close(fd)


# ------------------------------------------- a chain that stands still, and its end
def _running(text: str) -> list[int]:
    """Live processes (not zombies) whose command line holds ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text.encode() in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def _left_after(text: str, bound: float = 30.0) -> list[int]:
    """The processes of ``text`` still running once they had ``bound`` seconds to end
    (an empty list as soon as none is left)."""
    end = time.monotonic() + bound
    while (left := _running(text)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def _hanging_chain(tmp_path: Path, manifest: Path) -> list[dict[str, Any]]:
    """spark2, a real relay, forwarding to spark3, which never reads (a relay stuck,
    a link that takes nothing): spark2 blocks once the pipe to it is full, then the
    sender. Both "nodes" carry tmp_path in their command lines."""
    hops = [_hop(tmp_path, f"spark{i}", manifest) for i in (2, 3)]
    for hop in hops:
        _need(hop, manifest)
    marker = tmp_path / "spark3-reads-nothing"
    marker.write_text("")
    hops[1]["via"] = f"sh -c {shlex.quote(f'exec tail -f /dev/null {marker}')}"
    hops[1]["hosts"] = ["192.0.2.13", "198.51.100.13"]
    return hops


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        (
            ["--stall-timeout", "2"],
            "stood still for 2 s (no node's byte count grew); it stops at "
            "spark3 192.0.2.13 (fabric_a_ip, stream 0) from spark2",
        ),
        (["--deadline", "2"], "did not finish within its deadline of 2 s"),
        (["--lease-timeout", "2"], "nobody read this transfer's progress for 2 s"),
    ],
)
def test_a_chain_that_stands_still_is_stopped_on_every_hop_and_named(
    tmp_path: Path, source: Source, limit: list[str], says: str
) -> None:
    root, _, manifest = source
    hops = _hanging_chain(tmp_path, manifest)
    files = tmp_path / "files"
    files.write_text("\n".join(SIZES) + "\n")
    progress = tmp_path / "progress.json"
    argv = [sys.executable, str(SCRIPT), "send", str(root), "--files", str(files)]
    argv += ["--chain", json.dumps(hops), "--progress", str(progress), "--job", "s1"]
    if limit[0] == "--lease-timeout":
        argv += ["--lease", str(tmp_path / "progress.json.lease")]
    # Without the limit the sender would wait for ever: bounded here, a failure then.
    proc = subprocess.run([*argv, *limit], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert says in proc.stderr
    board = json.loads(progress.read_text())
    assert board["job"] == "s1" and board["finished"] and says in board["error"]
    if limit[0] == "--stall-timeout":
        assert [(s["host"], s["from"], s["twin"]) for s in board["stalled"]] == [
            ("spark3", "spark2", "fabric_a_ip")
        ]
        assert board["hosts"]["spark2"]["bytes"] > board["hosts"]["spark3"]["bytes"] == 0
    assert _left_after(str(tmp_path)) == []  # spark2's relay and the stuck spark3 too


def test_a_stalled_stream_stops_at_the_first_hop_holding_the_least() -> None:
    names = ["spark2", "spark3", "spark4"]
    chain = [{"host": f"a{n[-1]}", "hosts": [f"a{n[-1]}", f"b{n[-1]}"], "name": n} for n in names]
    board = relay.ProgressFile(None, names, 0)
    board.streams = 3
    board.sender = "spark1"
    for line in [
        # stream 0: the link spark2 -> spark3 broke; spark4 holds what spark3 passed on
        "progress spark2 5000 0 0",
        "progress spark3 3000 0 0",
        "progress spark4 3000 0 0",
        # stream 1: nothing reaches spark2 any more (the sender's link, or spark2 itself)
        "progress spark2 4000 0 1",
        "progress spark3 4000 0 1",
        "progress spark4 4000 0 1",
        # stream 2: finished on every hop
        "done spark2 9000 1 2",
        "done spark3 9000 1 2",
        "done spark4 9000 1 2",
    ]:
        board.line(line)
    assert [
        (s["host"], s["address"], s["twin"], s["from"], s["from_address"])
        for s in board.where_stalled(chain)
    ] == [
        # both ends of the link: a cable pulled at spark2's twin a breaks it too
        ("spark3", "a3", "fabric_a_ip", "spark2", "a2"),
        ("spark2", "b2", "fabric_b_ip", "spark1", ""),  # the sender's own end: no hop
    ]


@pytest.mark.parametrize(
    "how", ["SIGTERM", "SIGHUP", "its upstream went away", "its upstream went silent"]
)
def test_a_hop_ends_its_next_hop_when_stopped_or_left_by_its_upstream(
    tmp_path: Path, source: Source, how: str
) -> None:
    """A relay ends its next hop (on a node: the ssh session to it) whatever ends it:
    a signal, its parent gone (sshd, once the upstream's ssh connection closed), or
    nothing from upstream for its idle bound (a pulled cable, of which its sshd
    hears nothing). Its stdin stays open here: the end of the stream is not what
    stops it."""
    _, _, manifest = source
    hops = _hanging_chain(tmp_path, manifest)
    if how.endswith("silent"):
        hops[0]["idle"] = 2  # what the sender sets from its stall bound
    cmd = shlex.join([sys.executable, str(SCRIPT), "recv", "--chain", json.dumps(hops)])
    log = tmp_path / "spark2.err"
    with log.open("wb") as err:
        parent = subprocess.Popen(  # a shell that stays, as sshd does, the relay its child
            ["sh", "-c", f"{cmd}; exit $?"], stdin=subprocess.PIPE, stderr=err
        )
    try:
        end = time.monotonic() + 30
        stuck = f"/dev/null\0{tmp_path / 'spark3-reads-nothing'}\0"  # tail's own argv
        while not _running(stuck) and time.monotonic() < end:  # spark2 started its next hop
            time.sleep(0.05)
        (child,) = [p for p in _running(str(tmp_path)) if _ppid(p) == parent.pid]
        if how.startswith("SIG"):
            os.kill(child, getattr(signal, how))
        elif how.endswith("away"):
            os.kill(parent.pid, signal.SIGKILL)
        assert _left_after(str(tmp_path)) == []
        says = {
            "SIGTERM": "stopped by signal SIGTERM",
            "SIGHUP": "stopped by signal SIGHUP",
            "its upstream went away": "the upstream went away",
            "its upstream went silent": "nothing came from upstream for 2 s",
        }[how]
        assert says in log.read_text()
    finally:
        with contextlib.suppress(OSError):
            parent.kill()
        parent.wait()
        assert parent.stdin is not None
        parent.stdin.close()


def _ppid(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


# ------------------------------------------------------- reach and watch (the role's)
def test_reach_names_the_hop_address_and_twin_that_do_not_answer() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        out = relay.reach(
            "spark3",
            "spark2",
            [("fabric_a_ip", "127.0.0.1"), ("fabric_b_ip", "127.0.0.2"), ("other", "192.0.2.1")],
            port=port,
            timeout=1,
        )
    assert out["answers"]["127.0.0.1"] is None
    assert len(out["problems"]) == 2
    assert out["problems"][0] == (
        f"spark3: fabric_b_ip 127.0.0.2 does not answer from spark2 "
        f"(TCP port {port}: refused: nothing listens on port {port})"
    )
    # TEST-NET-1 (RFC 5737): no host answers; dropped (timeout) or unroutable here
    assert out["problems"][1].startswith(
        f"spark3: other 192.0.2.1 does not answer from spark2 (TCP port {port}: "
    )


def test_reach_through_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = str(server.getsockname()[1])
        argv = ["reach", "spark2", "--from", "spark1", "--port", port, "--timeout", "1"]
        assert relay.main([*argv, "--address", "fabric_a_ip=127.0.0.1"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


def test_watch_renews_the_lease_and_reads_board_and_job(tmp_path: Path) -> None:
    progress, lease, job = (
        tmp_path / "progress.json",
        tmp_path / "progress.json.lease",
        tmp_path / "j",
    )
    progress.write_text(json.dumps({"job": "s1", "hosts": {}}))
    job.write_text(json.dumps({"finished": 0}))
    lease.write_text("s1\n")
    os.utime(lease, (1_000_000, 1_000_000))
    out = relay.watch(progress, lease, job)
    assert out == {"board": {"job": "s1", "hosts": {}}, "job": {"finished": 0}}
    assert lease.stat().st_mtime > 1_000_000
    assert relay.watch(tmp_path / "none.json", None, None) == {"board": {}, "job": {}}
