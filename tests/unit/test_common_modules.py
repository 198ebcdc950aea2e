"""cluster_defaults' shared modules: sparkctl_files (write a set in one call) and
sparkctl_probe (read a set in one call). Both are exercised here on real files
and real commands in a temporary directory."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkctl.collection import tool_output as TO
from tests.unit.pathload import PLUGINS, load_file

LIB = PLUGINS / "modules"
files_mod = load_file("sparkctl_files", LIB / "sparkctl_files.py")
probe_mod = load_file("sparkctl_probe", LIB / "sparkctl_probe.py")


def _entries(tmp: Path) -> list[dict[str, str]]:
    return [
        {"path": str(tmp / "bin" / "a"), "content": "#!/bin/sh\necho a\n", "mode": "0755"},
        {"path": str(tmp / "bin" / "marker"), "content": "made by a test\n"},
    ]


def _run(params: Mapping[str, object], check: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = files_mod.run(params, check_mode=check, want_diff=True)
    return out


def test_files_writes_what_is_missing_then_nothing(tmp_path: Path) -> None:
    params = {"directories": [str(tmp_path / "bin")], "files": _entries(tmp_path)}
    first = _run(params)
    assert first["changed_paths"] == [
        str(tmp_path / "bin"),
        str(tmp_path / "bin" / "a"),
        str(tmp_path / "bin" / "marker"),
    ]
    assert (tmp_path / "bin" / "a").read_text() == "#!/bin/sh\necho a\n"
    assert (tmp_path / "bin" / "a").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "bin" / "marker").stat().st_mode & 0o7777 == 0o644
    again = _run(params)
    assert again["changed"] is False and again["changed_paths"] == []
    assert (
        again["sha256"][str(tmp_path / "bin" / "marker")]
        == hashlib.sha256(b"made by a test\n").hexdigest()
    )


def test_files_check_mode_reports_and_touches_nothing(tmp_path: Path) -> None:
    out = _run({"directories": [str(tmp_path / "bin")], "files": _entries(tmp_path)}, check=True)
    assert out["changed"] is True
    assert not (tmp_path / "bin").exists()
    assert [d["after_header"] for d in out["diff"]] == [
        str(tmp_path / "bin" / "a"),
        str(tmp_path / "bin" / "marker"),
    ]


def test_files_rewrites_on_content_or_mode_drift_only(tmp_path: Path) -> None:
    params = {"directories": [str(tmp_path / "bin")], "files": _entries(tmp_path)}
    _run(params)
    (tmp_path / "bin" / "marker").write_text("edited by hand\n")
    (tmp_path / "bin" / "a").chmod(0o700)
    assert _run(params)["changed_paths"] == [
        str(tmp_path / "bin" / "a"),
        str(tmp_path / "bin" / "marker"),
    ]
    assert (tmp_path / "bin" / "marker").read_text() == "made by a test\n"
    assert _run(params)["changed_paths"] == []


def test_files_replaces_a_symlink_with_a_file(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "elsewhere").write_text("#!/bin/sh\necho a\n")
    (tmp_path / "elsewhere").chmod(0o700)
    (tmp_path / "bin" / "a").symlink_to(tmp_path / "elsewhere")
    assert _run({"files": _entries(tmp_path)[:1]})["changed_paths"] == [str(tmp_path / "bin" / "a")]
    assert not (tmp_path / "bin" / "a").is_symlink()


def test_files_corrects_a_directory_mode_given_as_a_dict(tmp_path: Path) -> None:
    (tmp_path / "ssh").mkdir(mode=0o755)
    params = {"directories": [{"path": str(tmp_path / "ssh"), "mode": "0700"}]}
    assert _run(params)["changed_paths"] == [str(tmp_path / "ssh")]
    assert (tmp_path / "ssh").stat().st_mode & 0o7777 == 0o700
    assert _run(params)["changed"] is False


def test_files_validate_keeps_the_old_file_when_the_new_one_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "rules"
    target.write_text("good\n")
    check = f"{sys.executable} -c \"import sys; sys.exit('bad' in open(sys.argv[1]).read())\" %s"
    with pytest.raises(ValueError, match=r"validate .* failed"):
        _run({"files": [{"path": str(target), "content": "bad\n", "validate": check}]})
    assert target.read_text() == "good\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rules"]  # no temporary file left
    out = _run({"files": [{"path": str(target), "content": "better\n", "validate": check}]})
    assert out["changed_paths"] == [str(target)] and target.read_text() == "better\n"


BLOCK = {"marker": "# {mark} test block", "block": "10.0.0.1 a\n10.0.0.2 b"}


def test_block_is_appended_then_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost")  # no final newline
    hosts.chmod(0o640)
    assert _run({"blocks": [{"path": str(hosts), **BLOCK}]})["changed"] is True
    assert hosts.read_text() == (
        "127.0.0.1 localhost\n# BEGIN test block\n10.0.0.1 a\n10.0.0.2 b\n# END test block\n"
    )
    assert hosts.stat().st_mode & 0o7777 == 0o640  # the file's mode is kept
    assert _run({"blocks": [{"path": str(hosts), **BLOCK}]})["changed"] is False
    hosts.write_text(hosts.read_text() + "192.0.2.9 added-later\n")
    changed = {**BLOCK, "block": "10.0.0.3 c\n"}
    assert _run({"blocks": [{"path": str(hosts), **changed}]})["changed"] is True
    assert hosts.read_text() == (
        "127.0.0.1 localhost\n# BEGIN test block\n10.0.0.3 c\n"
        "# END test block\n192.0.2.9 added-later\n"
    )


def test_block_creates_a_missing_file_unless_told_not_to(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    with pytest.raises(ValueError, match="create is false"):
        _run({"blocks": [{"path": str(path), "create": False, **BLOCK}]})
    _run({"blocks": [{"path": str(path), "mode": "0600", **BLOCK}]})
    assert path.read_text().startswith("# BEGIN test block\n")
    assert path.stat().st_mode & 0o7777 == 0o600


def test_digests_report_other_files_without_touching_them(tmp_path: Path) -> None:
    live = tmp_path / "live.yaml"
    live.write_text("x\n")
    out = _run(
        {
            "files": [{"path": str(tmp_path / "staged.yaml"), "content": "x\n"}],
            "digests": [str(live), str(tmp_path / "absent")],
        }
    )
    assert out["sha256"][str(live)] == out["sha256"][str(tmp_path / "staged.yaml")]
    assert out["sha256"][str(tmp_path / "absent")] is None


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"files": [{"path": "relative/x", "content": ""}]}, "not absolute"),
        ({"files": [{"path": "/x", "content": "", "mode": "rwx"}]}, "not octal"),
        ({"files": [{"path": "/x", "content": None}]}, "content must be text"),
        ({"files": [{"path": "/x", "content": "", "validate": "nft -c -f"}]}, "has no %s"),
        (
            {"files": [{"path": "/x", "content": ""}, {"path": "/x", "content": "y"}]},
            "listed twice",
        ),
        ({"files": [{"path": "/x", "content": "", "owner": "no-such-user-here"}]}, "no user"),
        ({"blocks": [{"path": "/x", "block": "", "marker": "# plain"}]}, "has no {mark}"),
        ({"directories": ["relative"]}, "not absolute"),
    ],
)
def test_files_refuses_bad_entries(params: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _run(params, check=True)


def test_probe_reads_looks_and_runs(tmp_path: Path) -> None:
    text = tmp_path / "env"
    text.write_text("A=1\n")
    secret = tmp_path / "secret"
    secret.write_text("KEY=hunter2hunter2\n")
    secret.chmod(0o600)
    out = probe_mod.probe(
        files=[str(secret), str(tmp_path / "missing")],
        read=[str(text)],
        commands={
            "py": [sys.executable, "-c", "print('hi'); import sys; sys.exit(3)"],
            "nope": ["/nonexistent/program"],
        },
    )
    assert out["files"][str(text)]["content"] == "A=1\n"
    assert out["files"][str(secret)]["mode"] == "0600"
    assert "content" not in out["files"][str(secret)]
    digest = hashlib.sha256(b"KEY=hunter2hunter2\n").hexdigest()
    assert out["files"][str(secret)]["sha256"] == digest
    assert out["files"][str(tmp_path / "missing")] == {"exists": False}
    assert out["commands"]["py"] == {"rc": 3, "stdout": "hi\n", "stderr": ""}
    assert out["commands"]["nope"]["rc"] == 127


def test_probe_reports_a_command_that_hangs(tmp_path: Path) -> None:
    out = probe_mod.probe(
        [], [], {"slow": [sys.executable, "-c", "import time; time.sleep(5)"]}, timeout=1
    )
    assert out["commands"]["slow"]["rc"] == 124


def test_probe_parses_dpkg_status_like_package_facts() -> None:
    text = (
        "bash\t5.2-1\tarm64\tii \n"
        "nvidia-driver-580\t580.95-0ubuntu1\tarm64\thi \n"
        "removed-pkg\t1.0\tarm64\trc \n"
        "libc6:arm64\t2.39\tarm64\tii \n"
        "garbled line\n"
    )
    out = TO.dpkg_query(text)
    assert sorted(out) == ["bash", "libc6", "nvidia-driver-580"]
    assert out["nvidia-driver-580"][0]["selection"] == "hold"
    assert out["bash"][0] == {
        "name": "bash",
        "version": "5.2-1",
        "arch": "arm64",
        "source": "apt",
        "selection": "install",
    }


def test_probe_reads_packages_of_this_machine() -> None:
    out = probe_mod.probe([], [], {}, packages=True)
    assert "dpkg" in out["ansible_facts"]["packages"]


def test_probe_parses_systemctl_show_per_unit() -> None:
    text = (
        "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n"
        "FragmentPath=/lib/systemd/system/chrony.service\n\n"
        "LoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\n"
        "FragmentPath=\n"
    )
    out = TO.systemctl_show_units(
        text, ["chrony.service", "gone.service"], list(probe_mod.UNIT_PROPERTIES)
    )
    assert out["chrony.service"]["UnitFileState"] == "enabled"
    assert out["gone.service"]["LoadState"] == "not-found"
    empty = TO.systemctl_show_units("", ["x.service"], list(probe_mod.UNIT_PROPERTIES))
    assert empty["x.service"]["LoadState"] == ""


def test_probe_looks_up_users() -> None:
    out = probe_mod.probe([], [], {}, users=["root", "no-such-user-here"])
    assert out["users"]["root"]["uid"] == 0
    assert out["users"]["no-such-user-here"] == {"exists": False}


def test_probe_never_hashes_or_reads_a_secret(tmp_path: Path) -> None:
    secret = tmp_path / "secrets.env"
    secret.write_text("KEY=hunter2hunter2\n")
    secret.chmod(0o600)
    out = probe_mod.probe([str(secret)], [], {}, secrets=[str(secret)])
    assert out["files"][str(secret)]["mode"] == "0600"
    assert "sha256" not in out["files"][str(secret)] and "content" not in out["files"][str(secret)]
    with pytest.raises(ValueError, match="secret and to read"):
        probe_mod.probe([], [str(secret)], {}, secrets=[str(secret)])
