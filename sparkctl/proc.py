"""Running controller-side commands (podman, ip, tc, ssh-keygen) with useful errors."""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from sparkctl.errors import ExitCode, SparkctlError

log = logging.getLogger(__name__)


def require_tool(name: str, *, package: str | None = None) -> str:
    """Return the path of ``name`` on PATH or fail with the environment exit code."""
    path = shutil.which(name)
    if path is None:
        pkg = package or name
        raise SparkctlError(
            f"'{name}' is not installed on this machine",
            ExitCode.ENVIRONMENT,
            hint=f"install it, e.g. as root: apt-get install {pkg}",
        )
    return path


def run(
    cmd: Sequence[str],
    *,
    check: bool = True,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 300,
    code: ExitCode = ExitCode.LAB,
    what: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` and capture its output; on failure raise with stderr included.

    Without ``input_text`` the child reads /dev/null, never the caller's stdin:
    ssh sets O_NONBLOCK on a stdin it shares, and ansible-core run beside it
    then refuses to start ("Ansible requires blocking IO on stdin").
    """
    log.debug("run: %s", shlex.join(cmd))
    try:
        proc = subprocess.run(
            list(cmd),
            input=input_text,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL if input_text is None else None,
            env=dict(env) if env is not None else None,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SparkctlError(f"'{cmd[0]}' is not installed", ExitCode.ENVIRONMENT) from exc
    except subprocess.TimeoutExpired as exc:
        raise SparkctlError(
            f"{what or shlex.join(cmd)} did not finish within {timeout:.0f} s", code
        ) from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise SparkctlError(
            f"{what or shlex.join(cmd)} failed (exit {proc.returncode}): {detail}", code
        )
    return proc
