"""One node cannot own the others: the relay key, its forced command, and what it trusts.

The model chain's key is authorised on every node with ``restrict``, ``from=`` the
fabric subnets and ``command=`` the relay's ``serve`` (the authorized_keys line is
written by the one filter, sparkctl_authorized_key, and checked here with
OpenSSH's own parser, ``ssh-keygen -l``). The chain runs for real below, each hop
reached the way sshd reaches a forced command: a stand-in ``ssh`` first on PATH
looks the address up, reads the node's authorized_keys line, and runs its
``command=`` with ``sh -c`` (sshd runs it with the user's shell) and the client's
request in ``SSH_ORIGINAL_COMMAND``, the stream on stdin. A marker file that a
hostile request, chain or manifest would create is checked never to exist.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
SCRIPT = (
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "model_cache"
    / "files"
    / "sparkctl_model_relay.py"
)
relay = load_file("sparkctl_model_relay", SCRIPT)
keys = load_file(
    "sparkctl_authorized_keys",
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "plugins"
    / "filter"
    / "sparkctl_authorized_keys.py",
)

CIPHER = "aes128-gcm@openssh.com"
NETS = ["192.0.2.0/24", "198.51.100.0/24"]  # the "fabric" twins of the test (RFC 5737)
PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx0p3yVd0l2U5kZ5wHfdQx8Fz0B8Y0cY8bq3g9v1r0A sparkctl"
MODEL = {"config.json": 300, "model.safetensors": (1 << 20) + 7, "sub/tokenizer.json": 5000}

# The stand-in for ssh + the remote sshd: checks that the client was asked for
# exactly the relay's own command, then runs the node's forced command as sshd does.
FAKE_SSH = r"""
import json, os, re, shlex, sys
conf = json.load(open(os.environ["FAKE_SSH_CONF"]))
argv = sys.argv[1:]
host, request = argv[-2], argv[-1]
expected = [w.replace("{host}", host) for w in shlex.split(conf["via"])][1:]
if argv[:-1] != expected:
    sys.exit(f"fake ssh: not the relay's ssh command: {argv[:-1]}")
node = conf["nodes"].get(host)
if node is None:
    sys.exit(f"fake ssh: no node at {host}")
line = open(os.path.join(node, ".ssh", "authorized_keys")).read().strip()
command = re.search(r'command="([^"]*)"', line).group(1)
os.environ["SSH_ORIGINAL_COMMAND"] = request
os.environ["HOME"] = node
os.chdir(node)
os.execv("/bin/sh", ["sh", "-c", command])
"""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Cluster:
    """A head with the model and nodes with empty caches, each with its authorized_keys."""

    def __init__(self, tmp: Path, count: int) -> None:
        self.tmp = tmp
        self.marker = tmp / "MARKER"
        self.head = tmp / "head" / "model"
        self.data: dict[str, bytes] = {}
        for rel, size in MODEL.items():
            blob = (hashlib.sha256(rel.encode()).digest() * (size // 32 + 1))[:size]
            self.data[rel] = blob
            (self.head / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.head / rel).write_bytes(blob)
        self.manifest = tmp / "head" / "mol.manifest.json"
        relay.write_manifest(
            self.manifest, relay.build_manifest(self.head, tmp / "head" / "state.json")
        )
        self.nodes: list[Path] = []
        addresses: dict[str, str] = {}
        for i in range(count):
            node = tmp / f"n{i}"
            cache = node / "cache"
            (cache / ".sparkctl").mkdir(parents=True)
            shutil.copy(self.manifest, cache / ".sparkctl" / "mol.manifest.json")
            (node / ".ssh").mkdir()
            words = [sys.executable, str(SCRIPT), "serve", "--cache-dir", str(cache)]
            for net in NETS:
                words += ["--net", net]
            words += ["--cipher", CIPHER]
            line = keys.sparkctl_authorized_key(PUB, NETS, [], words)
            (node / ".ssh" / "authorized_keys").write_text(line + "\n")
            addresses[f"192.0.2.{11 + i}"] = str(node)
            addresses[f"198.51.100.{11 + i}"] = str(node)
            self.nodes.append(node)
        bindir = tmp / "bin"
        bindir.mkdir()
        (bindir / "ssh").write_text(f"#!{sys.executable}\n{FAKE_SSH}")
        (bindir / "ssh").chmod(0o755)
        conf = tmp / "fake-ssh.json"
        conf.write_text(json.dumps({"via": relay.relay_via(CIPHER), "nodes": addresses}))
        self.env = {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_SSH_CONF": str(conf)}

    def hop(self, i: int, **override: Any) -> dict[str, Any]:
        cache = self.nodes[i] / "cache"
        hop = {
            "host": f"192.0.2.{11 + i}",
            "hosts": [f"192.0.2.{11 + i}", f"198.51.100.{11 + i}"],
            "name": f"spark{i + 2}",
            "root": str(cache / "mol"),
            "manifest": str(cache / ".sparkctl" / "mol.manifest.json"),
            "state": str(cache / ".sparkctl" / "mol.state.json"),
            "need": str(cache / ".sparkctl" / "mol.need"),
            "job": "j1",
            "via": relay.relay_via(CIPHER),
            "relay": "/usr/local/bin/sparkctl-model-relay",
        }
        hop.update(override)
        return hop

    def check(self, i: int) -> dict[str, Any]:
        hop = self.hop(i)
        out: dict[str, Any] = relay.check(
            Path(hop["root"]), Path(hop["manifest"]), Path(hop["state"]), Path(hop["need"])
        )
        return out

    def serve(self, i: int, request: str | None, stream: bytes = b"") -> Any:
        """Node i's forced command, run as sshd runs it."""
        line = (self.nodes[i] / ".ssh" / "authorized_keys").read_text()
        match = re.search(r'command="([^"]*)"', line)
        assert match is not None
        env = {**os.environ, **self.env, "HOME": str(self.nodes[i])}
        env.pop("SSH_ORIGINAL_COMMAND", None)
        if request is not None:
            env["SSH_ORIGINAL_COMMAND"] = request
        return subprocess.run(
            ["/bin/sh", "-c", match.group(1)],
            input=stream,
            capture_output=True,
            env=env,
            cwd=self.nodes[i],
            check=False,
            timeout=60,
        )


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster(tmp_path, 3)
    for key, value in c.env.items():
        monkeypatch.setenv(key, value)
    return c


# ------------------------------------------------------------ the authorized_keys line
def test_the_relay_key_line_is_restricted_and_openssh_reads_it(tmp_path: Path) -> None:
    words = ["/usr/local/bin/sparkctl-model-relay", "serve", "--cache-dir", "/var/lib/m"]
    line = keys.sparkctl_authorized_key(PUB, ["192.168.100.0/24", "192.168.101.7/24"], [], words)
    assert line == (
        'restrict,from="192.168.100.0/24,192.168.101.0/24",'
        'command="/usr/local/bin/sparkctl-model-relay serve --cache-dir /var/lib/m" ' + PUB
    )
    if shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen here to parse the line")
    path = tmp_path / "authorized_keys"
    path.write_text(line + "\n")
    out = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr  # options skipped, the key found: well formed


def test_the_cluster_key_line_adds_the_nodes_own_addresses_only() -> None:
    line = keys.sparkctl_authorized_key(
        PUB, ["192.168.100.0/24"], ["10.77.0.11", "spark1.example", "127.0.0.1", "10.77.0.11"]
    )
    assert line == f'restrict,from="192.168.100.0/24,10.77.0.11" {PUB}'


@pytest.mark.parametrize(
    ("sources", "command", "key", "says"),
    [
        (["0.0.0.0/0"], None, PUB, "matches every address"),
        (["192.168.100.0/24,0.0.0.0/0"], None, PUB, "is not an IP network"),
        (['192.168.100.0/24" ,command="sh'], None, PUB, "is not an IP network"),
        ("192.168.100.0/24", None, PUB, "is not a list"),
        ([], None, PUB, "usable from nowhere"),
        (["192.168.100.0/24"], ["relay", 'x",command="sh'], PUB, "is not a plain word"),
        (["192.168.100.0/24"], ["relay", "a b"], PUB, "is not a plain word"),
        (["192.168.100.0/24"], ["relay", "x\\"], PUB, "is not a plain word"),
        (["192.168.100.0/24"], ["relay", "x;touch"], PUB, "is not a plain word"),
        (["192.168.100.0/24"], [], PUB, "is not a list of words"),
        (["192.168.100.0/24"], None, PUB + "\nssh-ed25519 AAAA x", "not one"),
        (["192.168.100.0/24"], None, 'command="sh" ' + PUB, "not one"),
        (["192.168.100.0/24"], None, "ssh-dss AAAAB3 x", "not one"),
    ],
)
def test_what_authorized_keys_cannot_hold_is_refused(
    sources: Any, command: Any, key: str, says: str
) -> None:
    with pytest.raises(keys.AnsibleFilterError, match=says):
        keys.sparkctl_authorized_key(key, sources, [], command)


# --------------------------------------------------------------- the role's values
def _role_vars() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (
            REPO
            / "ansible_collections"
            / "sparkctl"
            / "spark"
            / "roles"
            / "model_cache"
            / "vars"
            / "main.yml"
        ).read_text()
    )
    return data


def _render(template: str, **values: Any) -> Any:
    env = jinja2.Environment(autoescape=False)  # noqa: S701 - not HTML
    return env.from_string(template).render(**values)


def test_the_roles_hop_command_is_the_relays_own() -> None:
    """The sender's via (role) and a forwarding node's (relay) are the same command,
    which the fake ssh above holds every hop to."""
    via = _render(
        _role_vars()["_model_cache_ssh_via"],
        model_cache_ssh_cipher=CIPHER,
        _model_cache_key_name="id_sparkctl_relay",
        _model_cache_ssh_bounds=_role_vars()["_model_cache_ssh_bounds"],
    )
    assert shlex.split(via) == shlex.split(relay.relay_via(CIPHER))
    assert via.split()[-2:] == ["--", "{host}"]
    # and neither hangs on a hop that does not answer or a link that went quiet
    for option in ("ConnectTimeout=10", "ServerAliveInterval=5", "ServerAliveCountMax=3"):
        assert option in shlex.split(via), via


def test_the_roles_forced_command_is_accepted_by_the_filter_and_the_relay() -> None:
    words = _role_vars()["_model_cache_forced_command"]
    rendered = _render(
        "{{ " + words.strip().removeprefix("{{").removesuffix("}}").strip() + " | tojson }}",
        _model_cache_relay="/usr/local/bin/sparkctl-model-relay",
        model_cache_dir="/var/lib/sparkctl/models",
        fabric_a_subnet="192.168.100.0/24",
        fabric_b_subnet="192.168.101.0/24",
        model_cache_ssh_cipher=CIPHER,
    )
    argv = json.loads(rendered)
    line = keys.sparkctl_authorized_key(PUB, ["192.168.100.0/24"], [], argv)
    assert f'command="{shlex.join(argv)}"' in line
    args = relay._parser().parse_args(argv[1:])
    assert args.command == "serve" and str(args.cache_dir) == "/var/lib/sparkctl/models"
    assert [str(n) for n in args.net] == ["192.168.100.0/24", "192.168.101.0/24"]


# ------------------------------------------------------------------ the chain for real
def test_the_chain_runs_through_the_forced_command_on_every_hop(cluster: Cluster) -> None:
    hops = [cluster.hop(i) for i in range(3)]
    assert [cluster.check(i)["need"] for i in range(3)] == [3, 3, 3]
    out = relay.send(
        cluster.head,
        list(MODEL),
        hops,
        None,
        "j1",
        streams=2,
        manifest=relay.read_manifest(cluster.manifest),
    )
    assert out["error"] is None and out["finished"]
    for i, node in enumerate(cluster.nodes):
        for rel, blob in cluster.data.items():
            assert (node / "cache" / "mol" / rel).read_bytes() == blob
        assert cluster.check(i)["need"] == 0


def test_hops_forward_with_their_own_command_never_the_upstreams(cluster: Cluster) -> None:
    """A hostile ``via`` and ``relay`` in the chain are dropped: the next hop is
    still reached with the relay's own ssh command (the fake ssh insists on it)."""
    evil = f"sh -c 'touch {cluster.marker}' {{host}}"
    hops = [cluster.hop(0), cluster.hop(1, via=evil, relay=f"touch {cluster.marker}")]
    for i in range(2):
        cluster.check(i)
    out = relay.send(cluster.head, list(MODEL), hops, None, "j1")
    assert out["error"] is None
    assert (cluster.nodes[1] / "cache" / "mol" / "config.json").exists()
    assert not cluster.marker.exists()


def _request(chain: list[dict[str, Any]], *extra: str) -> str:
    return shlex.join(
        ["/usr/local/bin/sparkctl-model-relay", "recv", "--chain", json.dumps(chain), *extra]
    )


def _whole_stream(cluster: Cluster) -> bytes:
    out = bytearray(relay.MAGIC)
    for rel, blob in cluster.data.items():
        raw = json.dumps({"path": rel, "offset": 0, "length": len(blob), "size": len(blob)})
        out += relay.HEADER.pack(len(raw)) + raw.encode() + blob
    end = json.dumps({"end": True, "pieces": len(cluster.data)}).encode()
    return bytes(out + relay.HEADER.pack(len(end)) + end)


def test_the_forced_command_reads_the_request_and_the_stream_as_sshd_gives_them(
    cluster: Cluster,
) -> None:
    cluster.check(0)
    proc = cluster.serve(0, _request([cluster.hop(0)]), _whole_stream(cluster))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["written"] == sorted(MODEL, key=list(MODEL).index)
    assert cluster.check(0)["need"] == 0


@pytest.mark.parametrize(
    "request_",
    [
        None,
        "",
        "sh -c 'touch @MARKER@'",
        "touch @MARKER@",
        "sparkctl-model-relay manifest / --out @MARKER@ --state /tmp/s",
        "sparkctl-model-relay send / --files /etc/passwd --chain []",
        "sparkctl-model-relay recv --chain [] ; touch @MARKER@",
        "sparkctl-model-relay recv --chain '[]' --chain '[]'",
        "sparkctl-model-relay recv --chain '[]' --files @MARKER@",
        "sparkctl-model-relay recv --chain '[]' --stream 1 --streams 1",
        "sparkctl-model-relay recv --chain '[]' --stream -1 --streams 2",
        "sparkctl-model-relay recv --chain '[]' --transport udp",
        "sparkctl-model-relay recv --chain 'unterminated",
        "/tmp/evil/sparkctl-model-relayx recv --chain '[]'",
        "sparkctl-model-relay recv --chain '$(touch @MARKER@)'",
    ],
)
def test_the_forced_command_refuses_any_other_request(
    cluster: Cluster, request_: str | None
) -> None:
    request = None if request_ is None else request_.replace("@MARKER@", str(cluster.marker))
    with pytest.raises(relay.RelayError):
        relay.serve(
            request,
            io.BytesIO(b""),
            io.StringIO(),
            cache=cluster.nodes[0] / "cache",
            nets=[relay._net(n) for n in NETS],
            cipher=CIPHER,
        )
    assert not cluster.marker.exists()


@pytest.mark.parametrize("request_", [None, "sh -c 'touch @MARKER@'", "touch @MARKER@"])
def test_sshd_running_the_forced_command_runs_nothing_else(
    cluster: Cluster, request_: str | None
) -> None:
    request = None if request_ is None else request_.replace("@MARKER@", str(cluster.marker))
    proc = cluster.serve(0, request, b"")
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.decode().startswith("sparkctl-model-relay: this key runs ")
    assert not cluster.marker.exists()


def _hostile_hops(cluster: Cluster) -> list[tuple[str, dict[str, Any], str]]:
    cache = cluster.nodes[0] / "cache"
    meta = cache / ".sparkctl"
    return [
        ("root outside", {"root": "/etc"}, "outside the model cache"),
        ("root ..", {"root": f"{cache}/../../etc"}, "holds .."),
        ("root relative", {"root": "mol"}, "not an absolute path"),
        ("root is cache", {"root": str(cache)}, "the model cache itself"),
        ("root in meta", {"root": str(meta / "x")}, "meta directory"),
        ("root newline", {"root": f"{cache}/mol\n"}, "not an absolute path"),
        ("manifest outside", {"manifest": "/etc/passwd"}, "outside the model cache"),
        ("manifest elsewhere", {"manifest": str(cache / "mol.manifest.json")}, "is not"),
        ("need other model", {"need": str(meta / "other.need")}, "different models"),
        ("state not json", {"state": str(meta / "mol.state")}, "is not"),
        ("host outside", {"host": "10.0.0.1", "hosts": ["10.0.0.1"]}, "not in this cluster"),
        ("host option", {"hosts": ["-oProxyCommand=touch"]}, "not an IP address"),
        ("host name", {"hosts": ["spark3"]}, "not an IP address"),
        ("three twins", {"hosts": ["192.0.2.11"] * 3}, "one or two addresses"),
        ("name newline", {"name": "spark2\nprogress x 1 1 0"}, "not a host name"),
        ("job path", {"job": "../../x"}, "lowercase letters and digits"),
        ("idle word", {"idle": "60; touch x"}, "whole seconds"),
        ("idle negative", {"idle": -1}, "whole seconds"),
        ("port", {"port": 22}, "does not take"),
        ("unknown", {"exec": "touch"}, "does not take"),
    ]


# A later hop's paths are that node's to judge (its own cache); the shape of
# everything, and every address, is judged by every node before anything is forwarded.
LATER = {"outside", "relative", "is cache", "in meta", "elsewhere", "other model", "not json"}


def _serve_here(cluster: Cluster, i: int, request: str, stream: bytes) -> str:
    """Node i's serve in this process (a refusal comes before the stream is read):
    its error message, or "" when it went through."""
    try:
        relay.serve(
            request,
            io.BytesIO(stream),
            io.StringIO(),
            cache=cluster.nodes[i] / "cache",
            nets=[relay._net(n) for n in NETS],
            cipher=CIPHER,
        )
    except relay.RelayError as exc:
        return str(exc)
    return ""


def test_the_forced_command_confines_every_hop_of_the_chain(cluster: Cluster) -> None:
    cluster.check(0)
    for label, override, says in _hostile_hops(cluster):
        chains = [[cluster.hop(0, **override)]]
        if not any(word in label for word in LATER):
            chains.append([cluster.hop(0), cluster.hop(1, **override)])
        for chain in chains:
            said = _serve_here(cluster, 0, _request(chain), _whole_stream(cluster))
            assert says in said, (label, said)
        assert not (cluster.nodes[0] / "cache" / "mol" / "config.json").exists(), label
    # And once as sshd runs it: the refusal is the relay's one line, exit 1.
    proc = cluster.serve(0, _request([cluster.hop(0, root="/etc")]), _whole_stream(cluster))
    assert proc.returncode == 1
    assert proc.stderr.decode() == (
        "sparkctl-model-relay: root '/etc' is outside the model cache "
        f"{cluster.nodes[0] / 'cache'}\n"
    )


def test_the_forced_command_writes_through_no_link_to_outside_the_cache(
    cluster: Cluster,
) -> None:
    outside = cluster.tmp / "outside"
    outside.mkdir()
    (cluster.nodes[0] / "cache" / "mol").symlink_to(outside, target_is_directory=True)
    proc = cluster.serve(0, _request([cluster.hop(0)]), _whole_stream(cluster))
    assert proc.returncode == 1
    assert "is a link" in proc.stderr.decode()
    assert list(outside.iterdir()) == []


# ------------------------------------------------------------- hostile manifests
ENTRY = {"size": 1, "sha256": "0" * 64}


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([{"path": "/etc/cron.d/x", **ENTRY}], "is absolute"),
        ([{"path": "../x", **ENTRY}], "plain relative"),
        ([{"path": "a/../../x", **ENTRY}], "plain relative"),
        ([{"path": "./a", **ENTRY}], "plain relative"),
        ([{"path": "a//b", **ENTRY}], "plain relative"),
        ([{"path": "a/", **ENTRY}], "plain relative"),
        ([{"path": "a\n../../x", **ENTRY}], "control character"),
        ([{"path": "a\x00", **ENTRY}], "control character"),
        ([{"path": "x.sparkctl-partial", **ENTRY}], "partial files"),
        ([{"path": "", **ENTRY}], "not a path"),
        ([{"path": 7, **ENTRY}], "not a path"),
        (["config.json"], "not a JSON object"),
        ([{"path": "a", **ENTRY}, {"path": "a", **ENTRY}], "listed twice"),
        ([{"path": "a", "size": -1, "sha256": "0" * 64}], "lacks a size"),
        ([{"path": "a", "size": True, "sha256": "0" * 64}], "lacks a size"),
        ([{"path": "a", "size": 1, "sha256": "A" * 64}], "lacks a size"),
    ],
)
def test_a_hostile_manifest_is_refused(tmp_path: Path, entries: list[Any], says: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"version": 1, "files": entries}))
    with pytest.raises(relay.RelayError, match=re.escape(says)):
        relay.read_manifest(path)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("../../etc/shadow", "not a file of the model"),
        ("/etc/shadow", "not a file of the model"),
        ("sub/../config.json", "not a file of the model"),
        ("extra.bin", "is not in the manifest"),
    ],
)
def test_the_sender_sends_only_what_its_manifest_lists(
    cluster: Cluster, name: str, says: str
) -> None:
    """The file list is the union of what the nodes reported lacking: a node's word."""
    (cluster.head / "extra.bin").write_text("not in the manifest")
    cluster.check(0)
    progress = cluster.tmp / "progress.json"
    with pytest.raises(relay.RelayError, match=re.escape(says)):
        relay.send(
            cluster.head,
            ["config.json", name],
            [cluster.hop(0)],
            progress,
            "j1",
            manifest=relay.read_manifest(cluster.manifest),
        )
    assert says in json.loads(progress.read_text())["error"]
    assert not (cluster.nodes[0] / "cache" / "mol" / "config.json").exists()


def test_what_a_downstream_node_says_reaches_upstream_without_control_characters() -> None:
    lines = io.BytesIO(b"progress n 1 1 0\n\x1b]0;owned\x07error\x1b[2J\n")
    out = io.StringIO()
    tail: list[str] = []
    relay._pass_up(lines, out, threading.Lock(), tail)
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert tail == ["?]0;owned?error?[2J"]


# ------------------------------------------------------------ the controller's keys
def _tasks(node: Any) -> list[dict[str, Any]]:
    """Every task of a task file, blocks opened."""
    out: list[dict[str, Any]] = []
    for task in node if isinstance(node, list) else []:
        if isinstance(task, dict):
            out.append(task)
            for key in ("block", "rescue", "always"):
                out += _tasks(task.get(key))
    return out


def test_the_only_private_keys_a_role_sends_to_the_nodes_are_the_two_node_keys() -> None:
    """No role copies a key of the controller (the operator's own, which is root on
    every node) to a node: the copy tasks that send a key send the cluster key and
    the relay key, made for the nodes in the cluster's key directory, and the
    operator's key file is named only in the controller's own ssh command."""
    sent: set[str] = set()
    for path in sorted(REPO.glob("ansible_collections/sparkctl/spark/roles/*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            copy = task.get("ansible.builtin.copy")
            if isinstance(copy, dict) and not copy.get("remote_src") and "src" in copy:
                sent.add(str(copy["src"]))
        for line in path.read_text().splitlines():
            if "ansible_ssh_private_key_file" in line:
                assert "' -i ' ~" in line, f"{path}: {line.strip()}"
    assert {s for s in sent if "key" in s.lower()} == {
        "{{ _base_key_path }}",
        "{{ _model_cache_key_path }}",
    }
    base_vars = yaml.safe_load(
        (
            REPO
            / "ansible_collections"
            / "sparkctl"
            / "spark"
            / "roles"
            / "base"
            / "vars"
            / "main.yml"
        ).read_text()
    )
    assert "base_cluster_key_dir" in base_vars["_base_key_path"]
    assert "base_cluster_key_dir" in _role_vars()["_model_cache_key_path"]


@pytest.mark.parametrize(
    ("cipher", "ok"),
    [
        ("aes128-gcm@openssh.com", True),
        ("aes256-gcm@openssh.com,chacha20-poly1305@openssh.com", True),
        ("-oProxyCommand=x", False),
        ("aes128-ctr -oProxyCommand=x", False),
        ("", False),
    ],
)
def test_the_hop_command_takes_a_cipher_name_or_list_only(cipher: str, ok: bool) -> None:
    if ok:
        words = shlex.split(relay.relay_via(cipher))
        assert words[words.index("-c") + 1] == cipher
    else:
        with pytest.raises(relay.RelayError, match="is not an ssh cipher name"):
            relay.relay_via(cipher)


def test_the_idle_bound_the_sender_sets_reaches_every_hop_through_the_forced_command(
    cluster: Cluster,
) -> None:
    """A hop beyond a pulled cable ends itself after the idle bound the sender gave
    (twice its stall bound and 30 s): the forced command keeps it, as a number."""
    chain = [cluster.hop(0, idle=150), cluster.hop(1, idle=150)]
    confined = relay.confine_chain(
        chain, cluster.nodes[0] / "cache", [relay._net(n) for n in NETS], relay.relay_via(CIPHER)
    )
    assert [hop["idle"] for hop in confined] == [150, 150]
    assert (
        relay.confine_chain(
            [cluster.hop(0)], cluster.nodes[0] / "cache", [relay._net(n) for n in NETS], "ssh"
        )[0]["idle"]
        == 0
    )
