"""cluster_defaults' shared modules: sparkctl_files (write a set in one call) and
sparkctl_probe (read a set in one call). Both are exercised here on real files
and real commands in a temporary directory."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from tests.unit.pathload import load_file

LIB = Path(__file__).resolve().parents[2] / "roles" / "cluster_defaults" / "library"
files_mod = load_file("sparkctl_files", LIB / "sparkctl_files.py")
probe_mod = load_file("sparkctl_probe", LIB / "sparkctl_probe.py")


def _entries(tmp: Path) -> list[dict[str, str]]:
    return [{"path": str(tmp / "bin" / "a"), "content": "#!/bin/sh\necho a\n", "mode": "0755"},
            {"path": str(tmp / "bin" / "marker"), "content": "made by a test\n"}]


def test_files_writes_what_is_missing_then_nothing(tmp_path: Path) -> None:
    files = files_mod.normalise(_entries(tmp_path))
    make, write = files_mod.plan([str(tmp_path / "bin")], files)
    assert make == [tmp_path / "bin"]
    assert write == [tmp_path / "bin" / "a", tmp_path / "bin" / "marker"]
    files_mod.apply(make, write, files)
    assert (tmp_path / "bin" / "a").read_text() == "#!/bin/sh\necho a\n"
    assert (tmp_path / "bin" / "a").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "bin" / "marker").stat().st_mode & 0o7777 == 0o644
    assert files_mod.plan([str(tmp_path / "bin")], files) == ([], [])


def test_files_rewrites_on_content_or_mode_drift_only(tmp_path: Path) -> None:
    files = files_mod.normalise(_entries(tmp_path))
    files_mod.apply(*files_mod.plan([str(tmp_path / "bin")], files), files)
    (tmp_path / "bin" / "marker").write_text("edited by hand\n")
    (tmp_path / "bin" / "a").chmod(0o700)
    _, write = files_mod.plan([], files)
    assert write == [tmp_path / "bin" / "a", tmp_path / "bin" / "marker"]
    files_mod.apply([], write, files)
    assert (tmp_path / "bin" / "marker").read_text() == "made by a test\n"
    assert files_mod.plan([], files) == ([], [])


def test_files_replaces_a_symlink_with_a_file(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "elsewhere").write_text("#!/bin/sh\necho a\n")
    (tmp_path / "elsewhere").chmod(0o700)
    (tmp_path / "bin" / "a").symlink_to(tmp_path / "elsewhere")
    files = files_mod.normalise(_entries(tmp_path)[:1])
    _, write = files_mod.plan([], files)
    assert write == [tmp_path / "bin" / "a"]
    files_mod.apply([], write, files)
    assert not (tmp_path / "bin" / "a").is_symlink()


@pytest.mark.parametrize(("entry", "message"), [
    ({"path": "relative/x", "content": ""}, "not absolute"),
    ({"path": "/x", "content": "", "mode": "rwx"}, "not octal"),
    ({"path": "/x", "content": None}, "content must be text"),
])
def test_files_refuses_bad_entries(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        files_mod.normalise([entry])


def test_probe_reads_looks_and_runs(tmp_path: Path) -> None:
    text = tmp_path / "env"
    text.write_text("A=1\n")
    secret = tmp_path / "secret"
    secret.write_text("KEY=hunter2hunter2\n")
    secret.chmod(0o600)
    out = probe_mod.probe(files=[str(secret), str(tmp_path / "missing")], read=[str(text)],
                          commands={"py": [sys.executable, "-c",
                                           "print('hi'); import sys; sys.exit(3)"],
                                    "nope": ["/nonexistent/program"]})
    assert out["files"][str(text)]["content"] == "A=1\n"
    assert out["files"][str(secret)]["mode"] == "0600"
    assert "content" not in out["files"][str(secret)]
    digest = hashlib.sha256(b"KEY=hunter2hunter2\n").hexdigest()
    assert out["files"][str(secret)]["sha256"] == digest
    assert out["files"][str(tmp_path / "missing")] == {"exists": False}
    assert out["commands"]["py"] == {"rc": 3, "stdout": "hi\n", "stderr": ""}
    assert out["commands"]["nope"]["rc"] == 127


def test_probe_reports_a_command_that_hangs(tmp_path: Path) -> None:
    out = probe_mod.probe([], [], {"slow": [sys.executable, "-c", "import time; time.sleep(5)"]},
                          timeout=1)
    assert out["commands"]["slow"]["rc"] == 124
