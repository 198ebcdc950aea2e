"""`sparkctl trust`: fingerprints as ssh-keygen prints them, known_hosts read as ssh reads
it, and the whole command against a fake ``ssh-keyscan`` whose keys each test controls
(one file per address) and a known_hosts file in a temporary state directory."""

from __future__ import annotations

import base64
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import cli, trust
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.remote import sshconfig
from sparkctl.trust import HostKey, Target, decide, fingerprint, names_match

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
    ),
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "inventory" / "sim.ini"
ADDRESSES = {
    "spark1": "10.77.0.11",
    "spark2": "10.77.0.12",
    "spark3": "10.77.0.13",
    "spark4": "10.77.0.14",
    "lab-switch": "10.77.0.2",
}


def keygen(path: Path, key_type: str = "ed25519") -> HostKey:
    """A fresh key pair at ``path``; its public key."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", "", "-f", str(path)], check=True
    )
    fields = path.with_suffix(".pub").read_text().split()
    key = HostKey.parse(fields[0], fields[1])
    assert key is not None
    return key


def keygen_fingerprint(pub: Path) -> str:
    return subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    ).stdout.split()[1]


# ------------------------------------------------------------------ fingerprints
@pytest.mark.parametrize("key_type", ["ed25519", "ecdsa"])
def test_fingerprint_is_what_ssh_keygen_prints(tmp_path: Path, key_type: str) -> None:
    key = keygen(tmp_path / "k", key_type)
    assert key.fingerprint == keygen_fingerprint(tmp_path / "k.pub")
    assert fingerprint(key.blob) == key.fingerprint
    assert not key.fingerprint.endswith("=")


def test_a_key_whose_blob_is_not_its_type_is_refused(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")
    b64 = base64.b64encode(key.blob).decode()
    assert HostKey.parse("ssh-rsa", b64) is None
    assert HostKey.parse("ssh-ed25519", "not base64!") is None


# ------------------------------------------------------------------ known_hosts
def test_known_hosts_plain_port_hashed_and_markers(tmp_path: Path) -> None:
    a, b, c, d, e = (keygen(tmp_path / f"k{i}") for i in range(5))
    hashed = tmp_path / "hashed"
    hashed.write_text(f"10.0.0.5 {c.text}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(hashed)], check=True, capture_output=True)
    hashed_line = hashed.read_text().strip()
    assert hashed_line.startswith("|1|")
    text = "\n".join(
        [
            "# a comment",
            f"spark1,10.0.0.1 {a.text} a comment after the key",
            f"[10.0.0.2]:2222 {b.text}",
            hashed_line,
            f"@cert-authority 10.0.0.1 {d.text}",
            f"@revoked 10.0.0.2 {d.text}",
            f"10.0.0.* {e.text}",
            f"*.lan,!bad.lan {e.text}",
            "10.0.0.9 ssh-ed25519 not-base64",
            "10.0.0.9",
            "",
        ]
    )
    entries = trust.parse_known_hosts(text)
    assert [x.lineno for x in entries] == [2, 3, 4, 5, 6, 7, 8]
    assert entries[3].marker == "@cert-authority"

    def keys(name: str) -> list[HostKey]:
        return trust.recorded_keys(entries, name)

    assert keys("10.0.0.1") == [a, e]  # the CA key is not a host key
    assert keys("spark1") == [a]
    assert keys("SPARK1") == [a]  # ssh compares names case-insensitively
    assert keys("10.0.0.2") == [e]  # only on port 2222 is b recorded; @revoked is skipped
    assert keys("[10.0.0.2]:2222") == [b]
    assert keys("10.0.0.5") == [c, e]  # the hashed entry, by HMAC-SHA1
    assert keys("10.0.0.50") == [e]
    assert keys("10.0.1.1") == []
    assert keys("node.lan") == [e]
    assert keys("bad.lan") == []  # negated
    # The same answers as ssh-keygen -F for every name (it prints the lines it matched).
    path = tmp_path / "known_hosts"
    path.write_text(text)
    for name in ("10.0.0.1", "spark1", "[10.0.0.2]:2222", "10.0.0.5", "10.0.1.1", "node.lan"):
        out = subprocess.run(
            ["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True, text=True, check=False
        ).stdout
        found = [
            HostKey.parse(*ln.split()[1:3])
            for ln in out.splitlines()
            if ln.strip() and not ln.startswith(("#", "@"))
        ]
        assert found == keys(name), name


def test_hashed_names_written_by_sparkctl_are_found_by_ssh_keygen(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")
    name = trust.host_pattern("10.0.0.7", 2222)
    assert name == "[10.0.0.7]:2222"
    path = tmp_path / "known_hosts"
    path.write_text(f"{trust.hash_host(name, os.urandom(20))} {key.text}\n")
    assert names_match(path.read_text().split()[0], name)
    assert not names_match(path.read_text().split()[0], "10.0.0.7")
    out = subprocess.run(
        ["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert "found: line 1" in out


def test_decide_compares_key_types_as_ssh_does(tmp_path: Path) -> None:
    ed, ed2 = keygen(tmp_path / "e1"), keygen(tmp_path / "e2")
    ec = keygen(tmp_path / "c1", "ecdsa")
    t = Target("spark1", "10.0.0.1", 22, tmp_path / "kh")
    assert decide(t, [], [ed]).outcome == "unreachable"
    assert decide(t, [ec, ed], []) == trust.Result(t, "recorded", ed)  # ed25519 preferred
    assert decide(t, [ed, ec], [ec]) == trust.Result(t, "unchanged", ec)
    assert decide(t, [ed], [ed2, ed]).outcome == "unchanged"  # any recorded one matches
    assert decide(t, [ed, ec], [ed2, ec]) == trust.Result(t, "changed", ed, ed2)
    # Only a type the host no longer offers is recorded: ssh would refuse it too.
    assert decide(t, [ed], [ec]) == trust.Result(t, "changed", ed, ec)


# ------------------------------------------------------ which known_hosts file
def test_known_hosts_file_is_sparkctl_known_hosts_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sshconfig.known_hosts_file("s", {}) == tmp_path / ".ssh" / "known_hosts"
    assert (
        sshconfig.known_hosts_file("s", {"sparkctl_known_hosts_file": "~/lab/kh"})
        == tmp_path / "lab" / "kh"
    )
    # The inventory's ssh options never name one (rules.connection refuses it), and
    # the extra args are sparkctl's, derived from the variable: neither is read.
    assert sshconfig.known_hosts_file(
        "s", {"ansible_ssh_extra_args": "-o UserKnownHostsFile=/c/kh"}
    ) == (tmp_path / ".ssh" / "known_hosts")
    for value in ("/dev/null x", "none", "~/kh%d"):
        with pytest.raises(SparkctlError) as err:
            sshconfig.known_hosts_file("s", {"sparkctl_known_hosts_file": value})
        assert err.value.code == ExitCode.BAD_INPUT
        assert "host s" in err.value.message


# ------------------------------------------------------------- the command
class Cluster:
    """Fake hosts: ssh-keyscan prints ``keys/<address>`` (nothing for a host that is down)."""

    def __init__(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        self.tmp, self.monkeypatch, self.capsys = tmp_path, monkeypatch, capsys
        self.keys_dir = tmp_path / "keys"
        self.keys_dir.mkdir()
        self.calls = tmp_path / "keyscan-calls"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        fake = bin_dir / "ssh-keyscan"
        fake.write_text(f"""#!/bin/sh
echo "$@" >> {self.calls}
for a; do addr=$a; done
[ -f "{self.keys_dir}/$addr" ] && cat "{self.keys_dir}/$addr"
echo "# $addr:22 SSH-2.0-OpenSSH_fake" >&2
exit 0
""")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
        monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
        # What inventory/group_vars/sim/connection.yml makes of SPARKCTL_STATE_DIR.
        self.known_hosts = tmp_path / "state" / "lab" / "ssh" / "known_hosts"
        self.pub: dict[str, HostKey] = {}
        for name in ADDRESSES:
            self.new_key(name)

    def new_key(self, name: str, key_type: str = "ed25519") -> HostKey:
        """The host (re)generates its key: ssh-keyscan returns it from now on."""
        key = keygen(self.tmp / f"{name}-{len(list(self.tmp.glob(name + '-*.pub')))}", key_type)
        address = ADDRESSES[name]
        (self.keys_dir / address).write_text(f"{address} {key.text}\n")
        self.pub[name] = key
        return key

    def down(self, name: str) -> None:
        (self.keys_dir / ADDRESSES[name]).unlink()

    def run(self, *args: str) -> tuple[int, str, str]:
        self.monkeypatch.setattr(sys, "argv", ["sparkctl", *args])
        code = 0
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def trust(self, *args: str, inventory: Path = SIM) -> tuple[int, str, str]:
        return self.run("trust", str(inventory), *args)


@pytest.fixture
def cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Cluster:
    return Cluster(tmp_path, monkeypatch, capsys)


def lines_by_address(path: Path) -> dict[str, str]:
    return {ln.split()[0]: ln for ln in path.read_text().splitlines()}


def test_first_contact_records_every_host_and_shows_fingerprints(cluster: Cluster) -> None:
    code, out, err = cluster.trust()
    assert code == 0, err
    for name, key in cluster.pub.items():
        row = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        assert row.split()[1:] == [ADDRESSES[name], "ssh-ed25519", key.fingerprint, "recorded"]
    assert "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in err
    recorded = lines_by_address(cluster.known_hosts)
    assert recorded == {a: f"{a} {cluster.pub[n].text}" for n, a in ADDRESSES.items()}
    assert stat.S_IMODE(cluster.known_hosts.stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.known_hosts.parent.stat().st_mode) == 0o700
    calls = cluster.calls.read_text().splitlines()
    assert sorted(calls) == sorted(
        f"-T 5 -p 22 -t ed25519,ecdsa,rsa -- {a}" for a in ADDRESSES.values()
    )


def test_second_run_changes_nothing(cluster: Cluster) -> None:
    assert cluster.trust()[0] == 0
    before = cluster.known_hosts.read_bytes()
    code, out, err = cluster.trust()
    assert code == 0, err
    assert cluster.known_hosts.read_bytes() == before
    assert out.count("unchanged") == len(ADDRESSES)
    assert "console" not in err  # nothing new to compare


def test_a_changed_key_stops_and_records_nothing(cluster: Cluster) -> None:
    assert cluster.trust()[0] == 0
    before = cluster.known_hosts.read_bytes()
    old = cluster.pub["spark2"]
    new = cluster.new_key("spark2")
    code, out, err = cluster.trust()
    assert code == ExitCode.HOST_KEY_CHANGED
    assert int(ExitCode.HOST_KEY_CHANGED) == 7
    assert cluster.known_hosts.read_bytes() == before
    flat = " ".join(err.split())
    assert "spark2 (10.77.0.12)" in flat
    assert old.fingerprint in flat
    assert new.fingerprint in flat
    assert f"sparkctl trust {SIM} --accept spark2" in flat
    assert "spark1" not in flat
    row = next(ln for ln in out.splitlines() if ln.split()[:1] == ["spark2"])
    assert row.split()[-2:] == [new.fingerprint, "changed"]


def test_accept_replaces_only_that_hosts_entry(cluster: Cluster) -> None:
    # The lab's own file lists name and address on one line: both go.
    cluster.known_hosts.parent.mkdir(parents=True)
    cluster.known_hosts.write_text(
        "".join(f"{n},{a} {cluster.pub[n].text}\n" for n, a in ADDRESSES.items())
    )
    before = lines_by_address(cluster.known_hosts)
    old = cluster.pub["spark2"]
    new = cluster.new_key("spark2")
    code, out, err = cluster.trust("--accept", "spark2")
    assert code == 0, err
    after = lines_by_address(cluster.known_hosts)
    assert after.pop("10.77.0.12") == f"10.77.0.12 {new.text}"
    assert after == {k: v for k, v in before.items() if not k.startswith("spark2,")}
    flat = " ".join(err.split())
    assert f"replaced ssh-ed25519 {old.fingerprint} with ssh-ed25519 {new.fingerprint}" in flat
    assert "replaced" in out
    # Accepted once: the next run finds every key unchanged.
    code, out, err = cluster.trust()
    assert code == 0, err
    assert out.count("unchanged") == len(ADDRESSES)


def test_accept_leaves_other_changed_hosts_alone(cluster: Cluster) -> None:
    assert cluster.trust()[0] == 0
    cluster.new_key("spark2")
    new3 = cluster.new_key("spark3")
    before = lines_by_address(cluster.known_hosts)
    code, _, err = cluster.trust("--accept", "spark3")
    assert code == ExitCode.HOST_KEY_CHANGED, err
    after = lines_by_address(cluster.known_hosts)
    assert after["10.77.0.13"] == f"10.77.0.13 {new3.text}"
    assert after["10.77.0.12"] == before["10.77.0.12"]
    assert "--accept spark2" in " ".join(err.split())


def test_an_unreachable_host_is_named_and_the_others_recorded(cluster: Cluster) -> None:
    cluster.down("spark3")
    code, out, err = cluster.trust()
    assert code == ExitCode.UNREACHABLE
    assert "spark3 (10.77.0.13)" in " ".join(err.split())
    recorded = lines_by_address(cluster.known_hosts)
    assert set(recorded) == set(ADDRESSES.values()) - {"10.77.0.13"}
    assert "unreachable" in next(ln for ln in out.splitlines() if "spark3" in ln)


def test_bad_inventory_exits_2_before_any_scan(cluster: Cluster) -> None:
    bad = cluster.tmp / "bad.ini"
    bad.write_text("[sparks]\n")
    code, _, err = cluster.trust(inventory=bad)
    assert code == ExitCode.BAD_INPUT
    assert "[sparks]" in err
    code, _, err = cluster.trust("--accept", "spark9")
    assert code == ExitCode.BAD_INPUT
    assert "spark9" in err
    assert not cluster.calls.exists()
    assert not cluster.known_hosts.exists()


def test_the_inventory_lock_is_taken(cluster: Cluster) -> None:
    """Another run holding the cluster's hosts: exit 6, and no host is contacted."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib\n"
            "from sparkctl.lock import inventory_lock\n"
            "with inventory_lock(pathlib.Path(sys.argv[1]), 'provision'):\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.read()\n",
            str(SIM),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        code, _, err = cluster.trust()
    finally:
        holder.communicate("", timeout=30)
    assert code == ExitCode.LOCKED, err
    assert not cluster.calls.exists()


def test_port_and_hashed_known_hosts(cluster: Cluster) -> None:
    """Off port 22 the entry is ``[addr]:port``; a file of hashed names gets hashed names."""
    inv_dir = cluster.tmp / "inv"
    shutil.copytree(ROOT / "inventory" / "group_vars", inv_dir / "group_vars")
    inv = inv_dir / "sim.ini"
    inv.write_text(
        SIM.read_text().replace(
            "spark2 ansible_host=10.77.0.12", "spark2 ansible_host=10.77.0.12 ansible_port=2222"
        )
    )
    cluster.known_hosts.parent.mkdir(parents=True)
    cluster.known_hosts.write_text(f"10.77.0.11 {cluster.pub['spark1'].text}\n")
    subprocess.run(
        ["ssh-keygen", "-H", "-f", str(cluster.known_hosts)], check=True, capture_output=True
    )
    code, out, err = cluster.trust(inventory=inv)
    assert code == 0, err
    assert "10.77.0.12:2222" in out
    assert "-p 2222 -t ed25519,ecdsa,rsa -- 10.77.0.12" in cluster.calls.read_text()
    assert all(
        ln.startswith("|1|") for ln in cluster.known_hosts.read_text().splitlines() if ln.strip()
    )
    found = subprocess.run(
        ["ssh-keygen", "-F", "[10.77.0.12]:2222", "-f", str(cluster.known_hosts)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert cluster.pub["spark2"].text in found
    assert next(ln for ln in out.splitlines() if "spark1" in ln).split()[-1] == "unchanged"


def test_json_lists_each_host(cluster: Cluster) -> None:
    import json  # noqa: PLC0415

    code, out, _ = cluster.trust("--json")
    assert code == 0
    data = json.loads(out)
    assert [h["host"] for h in data["hosts"]] == list(ADDRESSES)
    assert {h["outcome"] for h in data["hosts"]} == {"recorded"}
    assert data["hosts"][1]["fingerprint"] == cluster.pub["spark2"].fingerprint
    assert data["hosts"][1]["known_hosts"] == str(cluster.known_hosts)
