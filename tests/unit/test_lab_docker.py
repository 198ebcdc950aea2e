"""The lab's docker stand-in (lab/sparkctl_lab/standins/docker.py) against docker's contract.

The container tests make real namespaces (user, mount, PID, UTS, IPC, network)
and need root, as on a lab node; the parsing tests run anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.paths import roles_dir
from sparkctl_lab import registry
from sparkctl_lab.standins import STANDINS_DIR
from tests.unit.pathload import load_file

DOCKER_PY = STANDINS_DIR / "docker.py"
DOCKER = load_file("lab_docker_standin", DOCKER_PY)
IMAGE = yaml.safe_load((roles_dir() / "sglang/defaults/main.yml").read_text())["sglang_image"]


def _namespaces_work() -> str | None:
    """Why containers cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "the docker stand-in needs root (it writes full uid/gid maps), as on a lab node"
    probe = (
        "import ctypes,os,sys\nlibc=ctypes.CDLL(None,use_errno=True)\n"
        "sys.exit(0 if libc.unshare(0x10000000|0x20000|0x20000000)==0 else 1)"
    )
    done = subprocess.run([sys.executable, "-c", probe], check=False, timeout=30)
    return None if done.returncode == 0 else "unshare(CLONE_NEWUSER|NEWNS|NEWPID) is refused here"


NO_NAMESPACES = _namespaces_work()
needs_root = pytest.mark.skipif(NO_NAMESPACES is not None, reason=NO_NAMESPACES or "")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    """Poll for a state the test needs before it acts (not an assertion on time)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Node:
    """A docker data root and registry of its own, the way a lab node has them."""

    base: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.base / "docker"

    @property
    def registry(self) -> Path:
        return self.base / "registry"

    def docker(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(DOCKER_PY), *args],
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=timeout,
            check=False,
        )

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(DOCKER_PY), *args],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**self.env, **(env or {})},
        )

    def inspect(self, name: str) -> dict[str, Any]:
        done = self.docker("inspect", name)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert isinstance(data, list) and len(data) == 1
        element: dict[str, Any] = data[0]
        return element

    def status(self, name: str) -> str:
        return self.docker("inspect", "--format", "{{.State.Status}}", name).stdout.strip()


def make_node(base: Path) -> Node:
    base.mkdir(parents=True, exist_ok=True)
    node = Node(base)
    node.env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        DOCKER.ROOT_ENV: str(node.root),
        DOCKER.REGISTRY_ENV: str(node.registry),
        DOCKER.HW_ENV: str(base / "hardware.json"),
    }
    registry.write_registry(node.registry, IMAGE)
    return node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    if NO_NAMESPACES:
        pytest.skip(NO_NAMESPACES)
    lab = make_node(tmp_path_factory.mktemp("docker-node"))
    pulled = lab.docker("pull", IMAGE)
    assert pulled.returncode == 0, pulled.stderr
    yield lab
    left = lab.docker("ps", "-aq").stdout.split()
    if left:
        lab.docker("rm", "--force", *left)


def run(
    node: Node, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return node.docker("run", "--rm", *args, env=env)


# ---------------------------------------------------------------- environment


@needs_root
def test_the_container_gets_only_image_env_file_and_e_values(node: Node, tmp_path: Path) -> None:
    env_file = tmp_path / "app.env"
    env_file.write_text(
        '# a comment\n  FROM_FILE=file value # kept\nQUOTED="q v"\n'
        "OVERRIDE=from-file\nBARE\nNOT_SET_ANYWHERE\n"
    )
    caller = {
        "LEAKED_FROM_CALLER": "must-not-reach",
        "BARE": "caller-value",
        "NCCL_DEBUG": "INFO-from-systemd",
    }
    done = run(
        node,
        "--env-file",
        str(env_file),
        "-e",
        "OVERRIDE=from-e",
        "-e",
        "BARE_E",
        IMAGE,
        "python3",
        "-c",
        "import json,os; print(json.dumps(dict(os.environ)))",
        env={**caller, "BARE_E": "e-caller"},
    )
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)
    assert env["FROM_FILE"] == "file value # kept"
    assert env["QUOTED"] == "q v"
    assert env["OVERRIDE"] == "from-e"  # -e after --env-file, whatever the order
    assert env["BARE"] == "caller-value"  # a bare name takes the caller's value
    assert env["BARE_E"] == "e-caller"
    assert "NOT_SET_ANYWHERE" not in env
    assert "LEAKED_FROM_CALLER" not in env and "NCCL_DEBUG" not in env
    image_env = dict(e.split("=", 1) for e in registry.IMAGE_ENV)
    assert env["CUDA_HOME"] == image_env["CUDA_HOME"]
    assert env["PATH"] == image_env["PATH"]
    extra = set(env) - set(image_env) - {"FROM_FILE", "QUOTED", "OVERRIDE", "BARE", "BARE_E"}
    assert extra == {"HOSTNAME", "HOME"}  # what dockerd and runc add, nothing else


@needs_root
def test_inspect_shows_env_file_values_so_secrets_do_not_belong_there(
    node: Node, tmp_path: Path
) -> None:
    env_file = tmp_path / "secret.env"
    env_file.write_text("SGLANG_API_KEY=s3cret\n")
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text("SGLANG_API_KEY=mounted\n")
    started = node.docker(
        "run",
        "-d",
        "--name",
        "envshow",
        "--env-file",
        str(env_file),
        "-v",
        f"{secrets_file}:/etc/sparkctl/sglang-secrets.env:ro",
        "--network",
        "host",
        "--ipc",
        "host",
        IMAGE,
        "sleep",
        "600",
    )
    assert started.returncode == 0, started.stderr
    try:
        info = node.inspect("envshow")
        assert "SGLANG_API_KEY=s3cret" in info["Config"]["Env"]  # as real docker shows it
        assert not [e for e in info["Config"]["Env"] if "mounted" in e]
        assert info["Mounts"] == [
            {
                "Type": "bind",
                "Source": str(secrets_file),
                "Destination": "/etc/sparkctl/sglang-secrets.env",
                "Mode": "ro",
                "RW": False,
                "Propagation": "rprivate",
            }
        ]
        assert info["HostConfig"]["Binds"] == [
            f"{secrets_file}:/etc/sparkctl/sglang-secrets.env:ro"
        ]
        assert info["HostConfig"]["NetworkMode"] == "host"
        assert info["HostConfig"]["IpcMode"] == "host"
        assert info["Config"]["Image"] == IMAGE
        assert (
            info["Image"]
            == node.docker("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
        )
        assert info["State"]["Running"] and info["State"]["Pid"] > 0
        assert info["Name"] == "/envshow" and len(info["Id"]) == 64
        fmt = node.docker("inspect", "--format", "{{json .Config.Env}}", "envshow")
        assert json.loads(fmt.stdout) == info["Config"]["Env"]
        refused = node.docker("inspect", "--format", "{{range .Mounts}}x{{end}}", "envshow")
        assert refused.returncode != 0 and "sparkctl lab stand-in" in refused.stderr
    finally:
        node.docker("rm", "-f", "envshow")


# ---------------------------------------------------------------- filesystem


@needs_root
def test_only_the_image_and_mounted_host_paths_are_visible(node: Node, tmp_path: Path) -> None:
    host_etc = tmp_path / "etc-sparkctl"
    host_etc.mkdir()
    (host_etc / "nccl.env").write_text("NCCL_X=1\n")
    (host_etc / "other.env").write_text("unmounted\n")
    script = (
        "import os; "
        "print(os.path.exists('/etc/sparkctl/nccl.env'), "
        f"os.path.exists({str(host_etc / 'other.env')!r}), "
        f"os.path.exists({str(tmp_path)!r}), "
        "os.path.exists('/usr/bin/docker'), os.path.exists('/usr/bin/nvidia-smi'), "
        "os.path.exists('/etc/sparkctl-lab/hardware.json'), "
        "os.path.isfile('/sgl-workspace/sglang/python/sglang/__init__.py'), "
        "os.getcwd())"
    )
    done = run(
        node,
        "-v",
        f"{host_etc / 'nccl.env'}:/etc/sparkctl/nccl.env:ro",
        IMAGE,
        "python3",
        "-c",
        script,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "True",
        "False",
        "False",
        "False",
        "False",
        "False",
        "True",
        "/sgl-workspace/sglang",
    ]


@needs_root
def test_ro_binds_are_read_only_and_rw_binds_write_to_the_host(node: Node, tmp_path: Path) -> None:
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    done = run(
        node,
        "-v",
        f"{ro}:/ro:ro",
        "-v",
        f"{rw}:/rw",
        IMAGE,
        "sh",
        "-c",
        "touch /ro/x; echo ro=$?; echo hi > /rw/y; echo rw=$?",
    )
    assert done.stdout.split() == ["ro=1", "rw=0"]
    assert "Read-only file system" in done.stderr
    assert not (ro / "x").exists()
    assert (rw / "y").read_text() == "hi\n"


@needs_root
def test_a_missing_volume_source_becomes_a_directory(node: Node, tmp_path: Path) -> None:
    missing = tmp_path / "does" / "not" / "exist"
    done = run(node, "-v", f"{missing}:/data", IMAGE, "sh", "-c", "touch /data/made")
    assert done.returncode == 0, done.stderr
    assert missing.is_dir() and (missing / "made").exists()


@needs_root
def test_user_runs_as_that_uid_and_gid(node: Node, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    done = run(
        node,
        "--user",
        "1000:1000",
        "-v",
        f"{out}:/out",
        IMAGE,
        "sh",
        "-c",
        "id -u; id -g; touch /out/f",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1000", "1000"]
    st = (out / "f").stat()
    assert (st.st_uid, st.st_gid) == (1000, 1000)


@needs_root
def test_default_network_is_loopback_only_and_host_is_the_nodes(node: Node) -> None:
    count = "import sys; print(len(open('/proc/self/net/dev').read().splitlines()) - 2)"
    private = run(node, IMAGE, "python3", "-c", count)
    assert private.stdout.strip() == "1", private.stderr  # lo
    shared = run(node, "--network", "host", IMAGE, "python3", "-c", count)
    with Path("/proc/self/net/dev").open() as fh:
        assert int(shared.stdout.strip()) == len(fh.read().splitlines()) - 2


# ---------------------------------------------------------------- pull / image


@needs_root
def test_pull_never_without_the_image_is_dockers_error_125(tmp_path: Path) -> None:
    fresh = make_node(tmp_path)
    done = fresh.docker("run", "--rm", "--pull", "never", IMAGE, "true")
    assert done.returncode == 125
    assert done.stderr == (
        f"docker: Error response from daemon: No such image: {IMAGE}\n\n"
        "Run 'docker run --help' for more information\n"
    )
    absent = fresh.docker("image", "inspect", "--format", "{{.Id}}", IMAGE)
    assert absent.returncode == 1
    assert absent.stderr.strip() == f"Error response from daemon: No such image: {IMAGE}"


@needs_root
def test_pull_prints_dockers_lines_and_verifies_the_digest(tmp_path: Path) -> None:
    fresh = make_node(tmp_path)
    digest = registry.read_index(fresh.registry)[registry.ImageRef.parse(IMAGE).key]
    blob = fresh.registry / "blobs/sha256" / digest[7:]
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    corrupt = fresh.docker("pull", IMAGE)
    assert corrupt.returncode == 1
    assert (
        f"Error response from daemon: filesystem layer verification failed for digest {digest}"
    ) in corrupt.stderr
    assert fresh.docker("image", "inspect", IMAGE).returncode == 1
    blob.write_bytes(good)
    pulled = fresh.docker("pull", IMAGE)
    assert pulled.returncode == 0, pulled.stderr
    tag = IMAGE.rsplit(":", 1)[1]
    lines = pulled.stdout.splitlines()
    assert lines[0] == f"{tag}: Pulling from {IMAGE.rsplit(':', 1)[0]}"
    assert f"Digest: {digest}" in lines
    assert f"Status: Downloaded newer image for {IMAGE}" in lines
    assert lines[-1] == f"docker.io/{IMAGE}"
    again = fresh.docker("pull", IMAGE)
    assert f"Status: Image is up to date for {IMAGE}" in again.stdout.splitlines()
    repo_digests = fresh.docker("image", "inspect", "--format", "{{json .RepoDigests}}", IMAGE)
    repo = IMAGE.rsplit(":", 1)[0]
    assert json.loads(repo_digests.stdout) == [f"{repo}@{digest}"]
    first = fresh.docker("image", "inspect", "--format", "{{index .RepoDigests 0}}", IMAGE)
    assert first.stdout.strip() == f"{repo}@{digest}"


@needs_root
def test_a_moved_tag_pulls_new_content_and_by_digest_the_old(tmp_path: Path) -> None:
    fresh = make_node(tmp_path)
    assert fresh.docker("pull", IMAGE).returncode == 0
    repo = IMAGE.rsplit(":", 1)[0]
    old = registry.read_index(fresh.registry)[registry.ImageRef.parse(IMAGE).key]
    new = registry.move_tag(fresh.registry, IMAGE, "moved")
    pulled = fresh.docker("pull", IMAGE)
    assert f"Digest: {new}" in pulled.stdout
    assert f"Status: Downloaded newer image for {IMAGE}" in pulled.stdout
    label = fresh.docker(
        "image",
        "inspect",
        "--format",
        f'{{{{index .Config.Labels "{registry.VARIANT_LABEL}"}}}}',
        IMAGE,
    )
    assert label.stdout.strip() == "moved"
    pinned = f"{IMAGE}@{old}"
    by_digest = fresh.docker("pull", pinned)
    assert by_digest.returncode == 0, by_digest.stderr
    assert by_digest.stdout.splitlines()[0] == f"{old}: Pulling from {repo}"
    assert by_digest.stdout.splitlines()[-1] == f"docker.io/{pinned}"
    # name:tag@digest runs the digest's image whatever the tag says now
    runs = fresh.docker("run", "--rm", "--pull", "never", pinned, "cat", "/etc/os-release")
    assert runs.returncode == 0, runs.stderr
    ids = {
        fresh.docker("image", "inspect", "--format", "{{.Id}}", r).stdout.strip()
        for r in (IMAGE, pinned)
    }
    assert len(ids) == 2
    assert registry.restore_tag(fresh.registry, IMAGE) == old


@needs_root
def test_tags_and_repositories_the_registry_does_not_have(tmp_path: Path) -> None:
    fresh = make_node(tmp_path)
    repo = IMAGE.rsplit(":", 1)[0]
    unknown = fresh.docker("pull", f"{repo}:no-such-tag")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == (
        f"Error response from daemon: manifest for "
        f"{repo}:no-such-tag not found: manifest unknown: "
        "manifest unknown"
    )
    other = fresh.docker("pull", "someone/else:v1")
    assert other.returncode == 1 and "pull access denied for someone/else" in other.stderr


# ---------------------------------------------------------------- lifecycle


@needs_root
def test_exit_status_propagates_and_command_errors_are_126_127(node: Node) -> None:
    assert run(node, IMAGE, "sh", "-c", "exit 3").returncode == 3
    missing = run(node, IMAGE, "no-such-command")
    assert missing.returncode == 127
    assert 'exec: "no-such-command": executable file not found in $PATH' in missing.stderr
    assert missing.stderr.startswith("docker: Error response from daemon: ")
    assert run(node, IMAGE, "/etc").returncode == 126


@needs_root
def test_unknown_and_unimplemented_flags_are_refused_with_125(node: Node) -> None:
    unknown = node.docker("run", "--no-such-flag", IMAGE, "true")
    assert unknown.returncode == 125
    assert unknown.stderr.startswith("unknown flag: --no-such-flag\n\nUsage:  docker run ")
    unimplemented = node.docker("run", "--privileged", IMAGE, "true")
    assert unimplemented.returncode == 125 and "sparkctl lab stand-in" in unimplemented.stderr
    bad_pull = node.docker("run", "--pull", "sometimes", IMAGE, "true")
    assert bad_pull.returncode == 125 and "invalid pull option: 'sometimes'" in bad_pull.stderr


@needs_root
def test_a_second_container_with_the_same_name_is_refused(node: Node) -> None:
    first = node.docker("run", "-d", "--name", "twin", IMAGE, "sleep", "600")
    assert first.returncode == 0, first.stderr
    cid = first.stdout.strip()
    try:
        second = node.docker("run", "-d", "--name", "twin", IMAGE, "true")
        assert second.returncode == 125
        assert (
            f'Conflict. The container name "/twin" is already in use by container "{cid}"'
            in second.stderr
        )
    finally:
        node.docker("rm", "-f", "twin")


@needs_root
def test_rm_refuses_a_running_container_and_force_kills_it(node: Node) -> None:
    assert node.docker("run", "-d", "--name", "victim", IMAGE, "sleep", "600").returncode == 0
    refused = node.docker("rm", "victim")
    assert refused.returncode == 1
    assert (
        'cannot remove container "/victim": container is running: stop the container '
        "before removing or force remove"
    ) in refused.stderr
    forced = node.docker("rm", "--force", "victim")
    assert forced.returncode == 0 and forced.stdout == "victim\n"
    assert node.docker("inspect", "victim").returncode == 1
    absent = node.docker("rm", "--force", "victim")
    assert (absent.returncode, absent.stdout, absent.stderr) == (0, "", "")
    gone = node.docker("rm", "victim")
    assert gone.returncode == 1
    assert gone.stderr.strip() == "Error response from daemon: No such container: victim"


@needs_root
def test_stop_sends_sigterm_to_pid_1_which_runs_its_handler(node: Node) -> None:
    script = 'trap "echo got-term; exit 7" TERM; echo ready; while :; do sleep 0.1; done'
    assert node.docker("run", "-d", "--name", "handler", IMAGE, "sh", "-c", script).returncode == 0
    try:
        wait_for("the trap", lambda: "ready" in node.docker("logs", "handler").stdout)
        stopped = node.docker("stop", "--timeout", "60", "handler")
        assert stopped.returncode == 0 and stopped.stdout == "handler\n"
        info = node.inspect("handler")
        assert info["State"]["Status"] == "exited" and info["State"]["ExitCode"] == 7
        assert "got-term" in node.docker("logs", "handler").stdout
    finally:
        node.docker("rm", "-f", "handler")


@needs_root
def test_pid_1_without_a_handler_ignores_sigterm_and_is_killed_after_time(node: Node) -> None:
    assert node.docker("run", "-d", "--name", "deaf", IMAGE, "sleep", "600").returncode == 0
    try:
        stopped = node.docker("stop", "--time", "1", "deaf")
        assert stopped.returncode == 0
        assert "Flag --time has been deprecated, use --timeout instead" in stopped.stderr
        # 143 would be death by SIGTERM; 137 is the SIGKILL after the timeout.
        assert node.inspect("deaf")["State"]["ExitCode"] == 137
    finally:
        node.docker("rm", "-f", "deaf")


@needs_root
def test_foreground_run_relays_output_and_proxies_sigterm(node: Node) -> None:
    script = (
        'trap "echo got-term; echo bye >&2; exit 9" TERM; echo ready; while :; do sleep 0.1; done'
    )
    client = node.popen("run", "--rm", "--name", "proxied", IMAGE, "sh", "-c", script)
    try:
        assert client.stdout is not None
        assert client.stdout.readline() == "ready\n"
        client.send_signal(signal.SIGTERM)
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
        node.docker("rm", "-f", "proxied")
    assert client.returncode == 9
    assert out == "got-term\n" and err == "bye\n"


@needs_root
def test_the_container_outlives_a_killed_client(node: Node) -> None:
    client = node.popen("run", "--name", "orphan", IMAGE, "sleep", "600")
    try:
        wait_for("the container", lambda: node.status("orphan") == "running")
        client.kill()
        client.wait(timeout=30)
        assert node.status("orphan") == "running"
        listed = node.docker("ps", "--filter", "name=orph", "--format", "{{.Names}} {{.State}}")
        assert listed.stdout == "orphan running\n"
    finally:
        node.docker("rm", "-f", "orphan")


@needs_root
def test_logs_keep_both_streams_and_tail(node: Node) -> None:
    done = node.docker(
        "run", "-d", "--name", "talker", IMAGE, "sh", "-c", "echo out1; echo err1 >&2; echo out2"
    )
    assert done.returncode == 0, done.stderr
    try:
        wait_for("the container to exit", lambda: node.status("talker") == "exited")
        logs = node.docker("logs", "talker")
        assert (logs.stdout, logs.stderr) == ("out1\nout2\n", "err1\n")
        tail = node.docker("logs", "--tail", "1", "talker")
        assert tail.stdout + tail.stderr in {"out2\n", "err1\n"}  # the one last line
        listed = node.docker("ps", "-a", "--filter", "name=^talker$", "--format", "{{.Status}}")
        assert listed.stdout.startswith("Exited (0) ")
        path = Path(node.inspect("talker")["LogPath"])
        first = json.loads(path.read_text().splitlines()[0])
        assert set(first) == {"log", "stream", "time"} and first["stream"] == "stdout"
    finally:
        node.docker("rm", "-f", "talker")


@needs_root
def test_rm_flag_removes_the_container_and_without_it_it_stays(node: Node) -> None:
    assert node.docker("run", "--rm", "--name", "gone", IMAGE, "true").returncode == 0
    assert node.docker("inspect", "gone").returncode == 1
    assert node.docker("run", "--name", "kept", IMAGE, "sh", "-c", "exit 4").returncode == 4
    try:
        assert node.inspect("kept")["State"]["ExitCode"] == 4
    finally:
        node.docker("rm", "kept")


# ---------------------------------------------------------------- devices, GPU


@needs_root
def test_devices_must_exist_and_are_bound(node: Node) -> None:
    missing = run(node, "--device", "/dev/no-such-device", IMAGE, "true")
    assert missing.returncode == 127
    assert (
        "error gathering device information while adding custom device "
        '"/dev/no-such-device": no such file or directory'
    ) in missing.stderr
    bound = run(
        node,
        "--device",
        "/dev/null:/dev/mynull",
        IMAGE,
        "sh",
        "-c",
        "echo x > /dev/mynull && test -c /dev/mynull && echo ok",
    )
    assert bound.stdout == "ok\n", bound.stderr


@needs_root
def test_gpus_fail_like_docker_without_a_gpu_and_expose_the_node_with_one(
    node: Node, tmp_path: Path
) -> None:
    no_runtime = run(
        node, "--gpus", "all", IMAGE, "true", env={DOCKER.HW_ENV: str(tmp_path / "absent.json")}
    )
    assert no_runtime.returncode == 125
    assert 'could not select device driver "" with capabilities: [[gpu]]' in no_runtime.stderr
    hw = tmp_path / "hardware.json"
    hw.write_text(json.dumps({"gpu_present": False}))
    no_driver = run(node, "--gpus", "all", IMAGE, "true", env={DOCKER.HW_ENV: str(hw)})
    assert no_driver.returncode == 125
    assert "nvml error: driver not loaded" in no_driver.stderr
    hw.write_text(json.dumps({"gpu_present": True, "gpu_name": "NVIDIA GB10"}))
    with_gpu = run(
        node,
        "--gpus",
        "all",
        IMAGE,
        "cat",
        "/etc/sparkctl-lab/hardware.json",
        env={DOCKER.HW_ENV: str(hw)},
    )
    assert with_gpu.returncode == 0, with_gpu.stderr
    assert json.loads(with_gpu.stdout)["gpu_name"] == "NVIDIA GB10"


@needs_root
def test_the_sglang_standin_answers_help_as_verify_runs_it(node: Node) -> None:
    done = run(node, "--pull", "never", IMAGE, "python3", "-m", "sglang.launch_server", "--help")
    assert done.returncode == 0, done.stderr
    assert "--model-path" in done.stdout


# ---------------------------------------------------------------- parsing (no root)


def test_env_file_syntax_is_dockers(tmp_path: Path) -> None:
    path = tmp_path / "e.env"
    path.write_bytes(b"\xef\xbb\xbfA=1\r\n#B=2\n\n   C = 3\nD='x y'\nE=\"a\nF\nG=#h\n")
    with pytest.raises(DOCKER.DockerError, match="variable 'C ' contains whitespaces"):
        DOCKER.parse_env_file(str(path), lambda _k: None)
    path.write_bytes(b"\xef\xbb\xbfA=1\r\n#B=2\n\nD='x y'\nE=\"a\nF\nG=#h\nH\n")
    values = DOCKER.parse_env_file(str(path), {"F": "from-caller"}.get)
    assert values == ["A=1", "D=x y", 'E="a', "F=from-caller", "G=#h"]
    with pytest.raises(DOCKER.DockerError, match=r"open .*: no such file or directory"):
        DOCKER.parse_env_file(str(tmp_path / "missing.env"), lambda _k: None)


def test_templates_render_the_forms_sparkctl_uses_and_refuse_others() -> None:
    data = {
        "Id": "sha256:ab",
        "State": {"Status": "running", "Running": True},
        "RepoDigests": ["r@sha256:1", "r@sha256:2"],
        "Config": {"Env": ["A=1", "B=<&>"]},
    }
    render = DOCKER.render
    assert render("{{.Id}}", data) == "sha256:ab"
    assert render("{{.State.Status}} {{.State.Running}}", data) == "running true"
    assert render("{{json .RepoDigests}}", data) == '["r@sha256:1","r@sha256:2"]'
    assert render("{{index .RepoDigests 1}}", data) == "r@sha256:2"
    assert render("{{json .Config.Env}}", data) == '["A=1","B=<&>"]'  # no HTML escaping
    assert render("{{.RepoDigests}}", data) == "[r@sha256:1 r@sha256:2]"
    for bad in ("{{range .RepoDigests}}{{.}}{{end}}", '{{printf "%s" .Id}}'):
        with pytest.raises(DOCKER.TemplateError, match="sparkctl lab stand-in"):
            DOCKER.check_template(bad)
    with pytest.raises(DOCKER.TemplateError, match='map has no entry for key "Nope"'):
        render("{{.Nope}}", data)


def test_flags_parse_like_pflag() -> None:
    parsed, rest = DOCKER.parse_flags(
        ["-d", "--name=x", "-e", "A=1", "-eB=2", "--rm", "img", "--name", "cmd-arg"],
        DOCKER.RUN_FLAGS,
        command="docker run",
        usage=DOCKER.RUN_USAGE,
        interspersed=False,
    )
    assert parsed["detach"] and parsed["rm"] and parsed["name"] == "x"
    assert parsed["env"] == ["A=1", "B=2"]
    assert rest == ["img", "--name", "cmd-arg"]  # flags stop at the image
    with pytest.raises(DOCKER.DockerError) as exc:
        DOCKER.parse_flags(
            ["--name"], DOCKER.RUN_FLAGS, command="docker run", usage=DOCKER.RUN_USAGE
        )
    assert exc.value.code == 125 and exc.value.message.startswith("flag needs an argument: --name")


def test_volume_specs() -> None:
    vol = DOCKER.parse_volume("/a:/b:ro")
    assert (vol.source, vol.destination, vol.read_only) == ("/a", "/b", True)
    for bad, message in (
        ("/a:b", "mount path must be absolute"),
        ("/a:/b:xx", "invalid mode"),
        ("named:/b", "named volumes"),
        ("/only", "anonymous volumes"),
    ):
        with pytest.raises(DOCKER.DockerError, match=message):
            DOCKER.parse_volume(bad)


def test_merge_env_replaces_in_place_and_appends() -> None:
    assert DOCKER.merge_env(["PATH=/a", "X=1"], ["X=2", "Y=3", "PATH=/b"]) == [
        "PATH=/b",
        "X=2",
        "Y=3",
    ]


@pytest.mark.skipif(
    shutil.which("systemd-run") is None or not Path("/run/systemd/system").is_dir(),
    reason="no systemd here: the shim is started without a scope",
)
def test_where_systemd_runs_the_shim_gets_a_docker_scope() -> None:
    command = DOCKER._shim_command("ab" * 32, [3, 4, 5])
    assert command[1:3] == ["--scope", "--quiet"] and f"--unit=docker-{'ab' * 32}.scope" in command


def test_images_and_ps_list_in_table_json_and_template_form(node: Node) -> None:
    """The listing commands share docker/cli's formatter: a table with its header, json
    lines, or one rendered template per row."""
    repo, _, tag = IMAGE.rpartition(":")
    table = node.docker("images")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:2] == ["REPOSITORY", "TAG"]
    assert any(r.split()[:2] == [repo, tag] for r in rows), table.stdout
    lines = node.docker("images", "--format", "json").stdout.splitlines()
    assert {(json.loads(x)["Repository"], json.loads(x)["Tag"]) for x in lines} >= {(repo, tag)}
    assert (
        f"{repo}:{tag}"
        in node.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    )
    assert node.docker("run", "-d", "--name", "lister", IMAGE, "sleep", "60").returncode == 0
    try:
        ps = node.docker("ps", "--filter", "name=lister", "--format", "table {{.Names}}")
        assert ps.stdout.split() == ["NAMES", "lister"], ps.stdout
        bad = node.docker("ps", "--format", "{{.Nope | frob}}")
        assert bad.returncode != 0 and "stand-in" in bad.stderr
    finally:
        node.docker("rm", "--force", "lister")


# ---------------------------------------------------------------- tag and prune
# What the sglang role does on a node: pull IMAGE@digest, tag the image under a local
# name (roles/sglang/tasks/install_served_tag.yml), and what a routine prune then does.
SERVED_TAG = yaml.safe_load((roles_dir() / "sglang/vars/main.yml").read_text())[
    "_sglang_served_tag"
]


def _pinned(node: Node) -> tuple[str, str]:
    """IMAGE@digest pulled as the role pulls a pinned image; (that reference, image id)."""
    digest = registry.read_index(node.registry)[registry.ImageRef.parse(IMAGE).key]
    pinned = f"{IMAGE}@{digest}"
    pulled = node.docker("pull", pinned)
    assert pulled.returncode == 0, pulled.stderr
    image_id = node.docker("image", "inspect", "--format", "{{.Id}}", pinned).stdout.strip()
    assert image_id.startswith("sha256:"), image_id
    return pinned, image_id


def _prune(node: Node, *args: str) -> str:
    done = node.docker("image", "prune", "-f", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_root
def test_a_pull_by_tag_and_digest_leaves_the_image_untagged_and_prune_deletes_it(
    tmp_path: Path,
) -> None:
    """docker sends the digest alone when a reference has both (moby client/image_pull.go,
    getAPITagFromNamedRef): the image gets no tag, `docker images` shows <none>, and
    `docker image prune` (dangling only) deletes it when no container uses it."""
    fresh = make_node(tmp_path)
    pinned, image_id = _pinned(fresh)
    repo = IMAGE.rsplit(":", 1)[0]
    digest = pinned.rsplit("@", 1)[1]
    info = fresh.inspect(pinned)
    assert info["RepoTags"] == [] and info["RepoDigests"] == [f"{repo}@{digest}"]
    listed = fresh.docker("images", "--format", "{{.Repository}} {{.Tag}}").stdout
    assert listed.splitlines() == [f"{repo} <none>"]
    diff_id = info["RootFS"]["Layers"][0]
    size = DOCKER.human_size(info["Size"], 4)
    assert _prune(fresh) == (
        f"Deleted Images:\nuntagged: {repo}@{digest}\ndeleted: {image_id}\n"
        f"deleted: {diff_id}\n\nTotal reclaimed space: {size}\n"
    )
    assert fresh.docker("image", "inspect", pinned).returncode == 1


@needs_root
def test_the_served_tag_keeps_a_pulled_by_digest_image_from_prune_but_not_from_prune_a(
    tmp_path: Path,
) -> None:
    fresh = make_node(tmp_path)
    pinned, image_id = _pinned(fresh)
    tagged = fresh.docker("tag", image_id, SERVED_TAG)
    assert (tagged.returncode, tagged.stdout, tagged.stderr) == (0, "", "")
    assert fresh.inspect(pinned)["RepoTags"] == [SERVED_TAG]
    name, _, tag = SERVED_TAG.rpartition(":")
    repo = IMAGE.rsplit(":", 1)[0]
    listed = fresh.docker("images", "--format", "{{.Repository}} {{.Tag}} {{.ID}}").stdout
    assert listed.splitlines() == [
        f"{name} {tag} {image_id[7:19]}",
        f"{repo} <none> {image_id[7:19]}",
    ]
    assert _prune(fresh) == "Total reclaimed space: 0B\n"
    again = fresh.docker("image", "inspect", "--format", "{{.Id}}", pinned)
    assert (again.returncode, again.stdout.strip()) == (0, image_id)
    # -a removes every image no container uses, the served one too: both references go.
    digest = pinned.rsplit("@", 1)[1]
    out = _prune(fresh, "-a")
    assert out.startswith(
        f"Deleted Images:\nuntagged: {repo}@{digest}\nuntagged: {SERVED_TAG}\ndeleted: {image_id}\n"
    ), out
    assert fresh.docker("image", "inspect", SERVED_TAG).returncode == 1


@needs_root
def test_prune_keeps_an_image_a_stopped_container_uses_until_container_prune(
    tmp_path: Path,
) -> None:
    fresh = make_node(tmp_path)
    pinned, image_id = _pinned(fresh)
    ran = fresh.docker("run", "--name", "left", "--pull", "never", pinned, "true")
    assert ran.returncode == 0, ran.stderr
    cid = fresh.inspect("left")["Id"]
    assert _prune(fresh) == "Total reclaimed space: 0B\n"
    assert _prune(fresh, "-a") == "Total reclaimed space: 0B\n"
    assert fresh.inspect(pinned)["Id"] == image_id
    pruned = fresh.docker("container", "prune", "-f")
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout == f"Deleted Containers:\n{cid}\n\nTotal reclaimed space: 0B\n"
    assert f"deleted: {image_id}" in _prune(fresh).splitlines()


@needs_root
def test_tag_moves_a_tag_and_refuses_as_docker_does(tmp_path: Path) -> None:
    fresh = make_node(tmp_path)
    assert fresh.docker("pull", IMAGE).returncode == 0
    first = fresh.inspect(IMAGE)["Id"]
    old = registry.read_index(fresh.registry)[registry.ImageRef.parse(IMAGE).key]
    registry.move_tag(fresh.registry, IMAGE, "moved")
    assert fresh.docker("pull", IMAGE).returncode == 0
    second = fresh.inspect(IMAGE)["Id"]
    assert first != second
    assert fresh.docker("tag", first, SERVED_TAG).returncode == 0
    assert fresh.docker("image", "tag", f"{IMAGE}", SERVED_TAG).returncode == 0
    assert fresh.inspect(SERVED_TAG)["Id"] == second
    assert fresh.inspect(f"{IMAGE}@{old}")["RepoTags"] == []
    missing = fresh.docker("tag", "no/such:image", SERVED_TAG)
    assert missing.returncode == 1
    assert missing.stderr == "Error response from daemon: No such image: no/such:image\n"
    digest = fresh.docker("tag", second, f"{SERVED_TAG}@{old}")
    assert digest.stderr == "refusing to create a tag with a digest reference\n"
    assert fresh.docker("tag", second).returncode == 1
    unconfirmed = fresh.docker("image", "prune")
    assert unconfirmed.returncode == 1 and "stand-in" in unconfirmed.stderr
    assert fresh.inspect(SERVED_TAG)["Id"] == second
