"""The one module that talks to ansible-runner.

It runs a playbook with extravars passed as a dict (never ``-e k=v``
strings), follows the event stream for live progress, and turns status, rc,
stats and per-host failures into a typed :class:`RunResult` for the CLI.
Runner artifacts are kept in the results directory whose path is returned.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.inventory import vault_environment
from sparkctl.paths import collections_path, controller_vars, data_dir, playbooks_dir
from sparkctl.rules.common import is_secret_name
from sparkctl.rules.secrets import TOKEN_SHAPE, URL_CREDENTIALS

log = logging.getLogger(__name__)

STAT_KEYS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class TaskFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass(frozen=True)
class Event:
    """What the CLI needs of one runner event for live progress."""

    kind: str  # task_start, ok, changed, failed, skipped, unreachable, play_start, retry
    host: str | None
    task: str | None
    message: str | None = None
    # The attempt's module result, for retry events (an `until` loop reading progress).
    result: Mapping[str, Any] | None = None


@dataclass
class RunResult:
    status: str
    rc: int
    artifact_dir: Path
    duration: float
    stats: dict[str, HostStats] = field(default_factory=dict)
    failures: list[TaskFailure] = field(default_factory=list)
    # Errors Ansible printed outside any task (a YAML or syntax error, a bad
    # option): a run can fail before the first task with nothing in failures.
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "rc": self.rc,
            "duration_s": round(self.duration, 1),
            "artifact_dir": str(self.artifact_dir),
            "hosts": {h: asdict(s) for h, s in sorted(self.stats.items())},
            "failures": [asdict(f) for f in self.failures],
            "errors": self.errors,
        }

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    def exit_code(self) -> ExitCode:
        if self.ok:
            return ExitCode.OK
        if any(f.unreachable for f in self.failures) or any(
            s.unreachable for s in self.stats.values()
        ):
            return ExitCode.UNREACHABLE
        return ExitCode.CHECKS_FAILED


def _message(res: Mapping[str, Any]) -> str:
    """The plain-words reason of a failed task result."""
    parts: list[str] = []
    msg = res.get("msg")
    if msg:
        parts.append(str(msg).strip())
    for key in ("stderr", "module_stderr"):
        text = str(res.get(key) or "").strip()
        if text and text not in parts:
            parts.append(text.splitlines()[-1] if len(text) > 400 else text)
    if not parts and res.get("results"):
        for item in res["results"]:
            if isinstance(item, Mapping) and item.get("failed"):
                parts.append(_message(item))
                break
    return " | ".join(parts) or "failed (no message)"


def event_from_runner(raw: Mapping[str, Any]) -> Event | None:
    """Map an ansible-runner event dict to an :class:`Event` (None for the rest)."""
    name = raw.get("event")
    data = raw.get("event_data") or {}
    host, task, res = data.get("host"), data.get("task"), data.get("res") or {}
    if name == "playbook_on_play_start":
        return Event("play_start", None, data.get("play"))
    if name == "playbook_on_task_start":
        return Event("task_start", None, task)
    if name == "runner_retry":
        return Event("retry", host, task, result=res)
    kind = {
        "runner_on_ok": "changed" if res.get("changed") else "ok",
        "runner_on_failed": "ok" if data.get("ignore_errors") else "failed",
        "runner_on_unreachable": "unreachable",
        "runner_on_skipped": "skipped",
    }.get(str(name))
    if kind is None:
        return None
    message = _message(res) if kind in {"failed", "unreachable"} else None
    return Event(kind, host, task, message)


_HOST_KEY_CHANGED = re.compile(
    r"REMOTE HOST IDENTIFICATION HAS CHANGED|"
    r"Host key verification failed",
    re.IGNORECASE,
)


# OpenSSH with StrictHostKeyChecking=yes and no entry: "No ED25519 host key is known
# for 10.77.0.13 and you have requested strict checking."
_HOST_KEY_UNKNOWN = re.compile(r"No \S+ host key is known for", re.IGNORECASE)


def host_key_message(host: str, message: str, inventory: Path) -> str:
    """For a host that is unreachable because ssh refused its host key: say so, and how to
    look at the fingerprints and accept a legitimate change; other messages unchanged."""
    if not _HOST_KEY_CHANGED.search(message):
        return message
    inv = shlex.quote(str(inventory))
    if _HOST_KEY_UNKNOWN.search(message):  # never recorded: first contact, not a change
        return (
            f"{host} has no recorded SSH host key (ssh: host key verification failed): "
            f"record it with `sparkctl trust {inv}` and compare the fingerprint it "
            "prints with the machine's console"
        )
    return (
        f"{host}'s SSH host key does not match the one recorded for it (ssh: host key "
        f"verification failed): see the fingerprints with `sparkctl trust {inv}`; if the "
        "change is legitimate (reinstalled, keys regenerated), accept it with "
        f"`sparkctl trust {inv} --accept {host}`"
    )


# Environment variables whose values are secrets (HF_TOKEN, SPARKCTL_SGLANG_API_KEY,
# AWS_SECRET_ACCESS_KEY, ...): ansible-playbook needs them (lookups read them),
# but ansible-runner copies its whole environment into artifacts/<ident>/command.
SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|PRIVATE_?KEY|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted by sparkctl>"


def redact_command_file(artifact_dir: Path) -> bool:
    """Blank the secret environment values in runner's ``command`` artifact; True if it existed."""
    path = artifact_dir / "command"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    env = data.get("env") if isinstance(data, dict) else None
    if isinstance(env, dict):
        for key in env:
            if SECRET_ENV.search(str(key)) and env[key]:
                env[key] = REDACTED
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
    return True


def _holds_secret(name: str, value: Any) -> bool:
    """``name: value`` is or carries a secret: a secret name (here or at any depth of a
    mapping or list below it), or a token's shape or a URL's password in any string."""
    if SECRET_ENV.search(str(name)) or is_secret_name(str(name)):
        return True
    if isinstance(value, Mapping):
        return any(_holds_secret(str(k), v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_secret("", v) for v in value)
    return isinstance(value, str) and bool(
        TOKEN_SHAPE.search(value) or URL_CREDENTIALS.search(value)
    )


def _split_secret_vars(
    extravars: Mapping[str, Any], private: Path
) -> tuple[dict[str, Any], Path | None]:
    """Keep secret extra vars (``-e sglang_api_key=...``) off the command line.

    ansible-runner puts extravars on ansible-playbook's argv (visible in ``ps``)
    and into the ``command`` artifact. Those that are or carry a secret (a secret name
    at any depth, ``-e '{"sglang_env_extra": {"HF_TOKEN": ...}}'``, or a token's shape)
    go into a 0600 file passed as ``-e @file`` instead, removed when the run ends; the
    rest stay inline so the artifact still records what the run was given."""
    secret = {k: v for k, v in extravars.items() if _holds_secret(str(k), v)}
    inline = {k: v for k, v in extravars.items() if k not in secret}
    if not secret:
        return inline, None
    path = private / f"secret-vars-{os.getpid()}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(secret, fh)
    return inline, path


def _path() -> str:
    """PATH for ansible-runner, which starts `ansible-playbook` by name: the one
    installed beside sparkctl first, even when the venv is not activated."""
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        "PATH": _path(),
        "ANSIBLE_CONFIG": str(data_dir() / "ansible.cfg"),
        # The sparkctl.spark collection of this sparkctl (a stale copy under
        # ~/.ansible/collections must not shadow it); the collections of the ansible
        # package are found on sys.path, as always.
        "ANSIBLE_COLLECTIONS_PATH": str(collections_path()),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    # The vault passwords the inventory check decrypted `!vault` values with.
    env.update(vault_environment())
    env.update(extra)
    return env


# Ansible runs a task on at most `forks` hosts at once; ansible.cfg's 16 would run a
# 32-node cluster in two batches, each task's time twice. sparkctl passes the
# number of hosts the inventory names instead, up to this many processes (each
# fork is a copy of the controller's Python, about 60 MB here), and leaves an
# operator's own ANSIBLE_FORKS alone.
FORKS_MAX = 128


def forks_for(hosts: int) -> int | None:
    """Ansible's ``--forks`` for an inventory of ``hosts`` hosts; None: the operator's
    ANSIBLE_FORKS (or ansible.cfg) decides."""
    if os.environ.get("ANSIBLE_FORKS"):
        return None
    return max(1, min(hosts, FORKS_MAX))


def run_playbook(
    playbook: str,
    inventory: Path | Sequence[Path],
    *,
    results_dir: Path,
    hosts: int,
    limit: str | None = None,
    tags: Sequence[str] = (),
    skip_tags: Sequence[str] = (),
    check: bool = False,
    diff: bool = False,
    extravars: Mapping[str, Any] | None = None,
    envvars: Mapping[str, str] | None = None,
    on_event: Callable[[Event], None] | None = None,
    verbosity: int = 0,
) -> RunResult:
    """Run ``playbooks/<playbook>`` against ``inventory`` (``hosts`` hosts: Ansible forks
    one process per host); artifacts go to ``results_dir``. ``inventory`` may be several
    sources (:attr:`Inventory.sources`): Ansible reads them in order, the first is the
    operator's."""
    sources = [inventory] if isinstance(inventory, Path) else list(inventory)
    inventory = sources[0]
    if shutil.which("ansible-playbook", path=_path()) is None:
        raise SparkctlError(
            "ansible-playbook is not installed beside sparkctl",
            ExitCode.ENVIRONMENT,
            hint="pip install sparkctl (it brings ansible)",
        )
    book = playbooks_dir() / playbook
    if not book.is_file():
        raise SparkctlError(f"no playbook {book}", ExitCode.BAD_INPUT)

    import ansible_runner  # noqa: PLC0415 - heavy import, only when a playbook runs

    results_dir.mkdir(parents=True, exist_ok=True)
    private = results_dir / "runner"
    private.mkdir(parents=True, exist_ok=True)
    cmdline = []
    # The controller's own variables (paths.controller_vars) for every run, as the
    # inventory check resolved them; the inventory may refer to them, never set them.
    inline, secret_file = _split_secret_vars(
        {**controller_vars(inventory), **(extravars or {})}, private
    )
    if secret_file is not None:
        cmdline.append(f"-e @{shlex.quote(str(secret_file))}")
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    stats: dict[str, HostStats] = {}
    failures: list[TaskFailure] = []

    redacted = False

    def handler(raw: dict[str, Any]) -> bool:
        nonlocal redacted
        if not redacted:  # the command file is written before the first event
            redacted = redact_command_file(results_dir / "artifacts" / "run")
        event = event_from_runner(raw)
        if event is not None and event.kind == "unreachable" and event.host:
            event = replace(
                event, message=host_key_message(event.host, event.message or "", inventory)
            )
        if event is not None:
            if event.kind in {"failed", "unreachable"} and event.host:
                failures.append(
                    TaskFailure(
                        event.host,
                        event.task or "?",
                        event.message or "",
                        event.kind == "unreachable",
                    )
                )
            if on_event is not None:
                on_event(event)
        return True  # keep the event in the artifacts

    started = time.monotonic()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(playbooks_dir()),
            playbook=str(book),
            # ansible-runner passes each source of a list as its own -i, in order
            inventory=[str(src.resolve()) for src in sources],
            artifact_dir=str(results_dir / "artifacts"),
            ident="run",
            extravars=inline,
            envvars=_env(envvars or {}),
            limit=limit,
            forks=forks_for(hosts),
            tags=",".join(tags) or None,
            skip_tags=",".join(skip_tags) or None,
            cmdline=" ".join(cmdline) or None,
            verbosity=verbosity or None,
            quiet=True,
            event_handler=handler,
            suppress_env_files=True,
            # Not runner's own fact cache (a fresh one in every run's artifacts):
            # ansible.cfg's jsonfile cache in the directory the caller names per
            # cluster (ANSIBLE_CACHE_PLUGIN_CONNECTION), so `gathering = smart`
            # skips re-gathering facts a recent run already has.
            fact_cache_type="sparkctl",
        )
    finally:
        if secret_file is not None:
            secret_file.unlink(missing_ok=True)
    duration = time.monotonic() - started
    redact_command_file(results_dir / "artifacts" / "run")
    raw_stats = runner.stats or {}
    for key, attr in zip(
        STAT_KEYS,
        ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored"),
        strict=True,
    ):
        for host, count in (raw_stats.get(key) or {}).items():
            setattr(stats.setdefault(host, HostStats()), attr, int(count))
    errors: list[str] = []
    if not failures and runner.status != "successful":
        stdout = Path(runner.config.artifact_dir) / "stdout"
        errors = ansible_errors(stdout.read_text(errors="replace") if stdout.is_file() else "")
    return RunResult(
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else 1),
        artifact_dir=Path(runner.config.artifact_dir),
        duration=duration,
        stats=stats,
        failures=failures,
        errors=errors,
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ansible_errors(stdout: str) -> list[str]:
    """Each ``[ERROR]: ...`` (or ``ERROR! ...``) of Ansible's output with its indented
    or following detail lines up to the next blank line, ANSI colours removed."""
    out: list[str] = []
    current: list[str] | None = None
    for raw in _ANSI.sub("", stdout).splitlines():
        line = raw.rstrip()
        if line.startswith(("[ERROR]:", "ERROR!")):
            current = [line.removeprefix("[ERROR]:").removeprefix("ERROR!").strip()]
            out.append("")
        elif current is not None and line.strip():
            current.append(line.strip())
        else:
            current = None
        if current is not None:
            out[-1] = " | ".join(current[:8])
    return out
