#!/usr/bin/env python3
"""sparkctl's launcher for SGLang: the API key in memory only, and out of every log.

Installed by the sglang role at /usr/local/lib/sparkctl/sglang-launcher.py
(mounted read-only into the container of the container method) and run as the
unit's command, by the interpreter that has SGLang installed::

    python3 sglang-launcher.py [--secrets-file FILE] -- <launch_server arguments>

Why it exists (each point is a way the key leaked before):

- ``ps`` shows every process's arguments to every local user
  (/proc/PID/cmdline is world-readable), so ``--api-key KEY`` may never be on
  a command line. The key is read from FILE (``SGLANG_API_KEY=...``, root's,
  group-readable by the server's user, mounted read-only into the container)
  and appended to ``sys.argv`` in memory; SGLang is then run through runpy
  exactly as ``python3 -m sglang.launch_server`` runs it (``alter_sys`` sets
  ``sys.argv[0]`` and ``__main__`` as ``-m`` does, so multiprocessing's spawn
  children re-import the server by its module name).
- ``docker inspect`` prints every variable given with ``-e``/``--env-file``
  (Config.Env), so the key does not travel through the container's
  environment either: only the file's path does.
- SGLang logs ``server_args=ServerArgs(... api_key='KEY' ...)`` with the plain
  dataclass repr at start-up (sglang 0.5.17 ``srt/server_args.py``, the
  ``logger.info(f"{server_args=}")`` of the engine's start), which systemd
  would keep in the journal of every node. The server therefore runs as a
  child whose stdout and stderr are a pipe; this process copies that output
  to its own with every occurrence of the key replaced, so the journal (and
  ``docker logs``) never hold it. Lines are passed on when they end (``\\n``
  or ``\\r``: the CUDA-graph progress bar rewrites one line with ``\\r``), so
  a key is never split across two writes.

In a container this process is PID 1 (docker runs the command in a PID
namespace of its own): the kernel delivers no signal to PID 1 that it has no
handler for, so ``docker stop``'s SIGTERM would be ignored and the server
killed only after the stop timeout. Signals are forwarded to the server, and
orphaned processes (PID 1 adopts them) are reaped.

Standard library only; runs on the image's Python (3.10 or newer).
"""

from __future__ import annotations

import contextlib
import os
import runpy
import select
import signal
import sys
import time

MODULE = "sglang.launch_server"
KEY_VARIABLE = "SGLANG_API_KEY"
MASK = b"<redacted>"
# A line longer than this without a line end is passed on in pieces, keeping
# back as many bytes as a key could span.
MAX_LINE = 1 << 16
# Seconds the output of processes the server left behind is still passed on
# after the server itself exited (SGLang kills its process tree on the way out).
LINGER = 10.0
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


class UsageError(Exception):
    """The unit's command line or the secrets file is not as the role writes them."""


def parse_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """``[--secrets-file FILE] -- ARGS`` -> (FILE or None, ARGS)."""
    if "--" not in argv:
        raise UsageError("usage: sglang-launcher.py [--secrets-file FILE] -- ARGS")
    split = argv.index("--")
    own, server = argv[:split], argv[split + 1 :]
    if own == []:
        return None, server
    if len(own) == 2 and own[0] == "--secrets-file" and own[1]:
        return own[1], server
    raise UsageError(f"unknown launcher options {own}: only --secrets-file FILE")


def read_key(path: str) -> str:
    """SGLANG_API_KEY from a KEY=VALUE file (comments and blank lines skipped)."""
    try:
        with open(path, encoding="utf-8") as handle:  # noqa: PTH123 - the image's Python 3.10+
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read the secrets file {path}: {exc.strerror}") from None
    key = ""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == KEY_VARIABLE:
            key = value.strip()
    if not key:
        raise UsageError(f"{KEY_VARIABLE} is empty or missing in {path}")
    return key


class Redactor:
    """Copies a byte stream with every occurrence of the secrets replaced."""

    def __init__(self, secrets: list[bytes]) -> None:
        self.secrets = [s for s in secrets if s]
        self.keep = max((len(s) for s in self.secrets), default=1) - 1
        self.pending = b""

    def _mask(self, data: bytes) -> bytes:
        for secret in self.secrets:
            data = data.replace(secret, MASK)
        return data

    def feed(self, data: bytes) -> bytes:
        """The complete lines of ``pending + data``, masked; the rest is held back."""
        self.pending += data
        cut = max(self.pending.rfind(b"\n"), self.pending.rfind(b"\r"))
        if cut >= 0:
            out, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
            return self._mask(out)
        if len(self.pending) > MAX_LINE:
            # Mask first, then hold back what could be the start of a key.
            masked = self._mask(self.pending)
            split = len(masked) - self.keep
            out, self.pending = masked[:split], masked[split:]
            return out
        return b""

    def flush(self) -> bytes:
        out, self.pending = self._mask(self.pending), b""
        return out


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data) :]
        except BrokenPipeError:
            return


def _run_server(args: list[str], key: str | None) -> None:
    """In the child: SGLang as ``python3 -m sglang.launch_server`` runs it."""
    sys.argv = [MODULE, *args, *(["--api-key", key] if key else [])]
    try:
        runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            os._exit(0)
        if isinstance(code, int):
            os._exit(code)
        print(code, file=sys.stderr)
        os._exit(1)
    except BaseException:  # an uncaught error: shown (redacted by the parent), then exit 1
        import traceback  # noqa: PLC0415 - only on the way out

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _status(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _spawn(args: list[str], key: str | None) -> tuple[int, int]:
    """The server as a child whose stdout and stderr are a pipe: (pid, read end)."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        _run_server(args, key)
    os.close(write_end)
    return child, read_end


def _reap(child: int) -> int | None:
    """Reap the server and, as PID 1, anyone orphaned to us: the server's status, if it ended."""
    status = None
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = _status(wait_status)


def _relay(child: int, read_end: int, redactor: Redactor) -> int:
    """Pass the server's output on, redacted, until it and its stragglers are done."""
    status: int | None = None
    exited_at: float | None = None
    while True:
        if exited_at is not None and time.monotonic() - exited_at > LINGER:
            break  # processes the server left behind; as PID 1 our exit ends them
        ready, _, _ = select.select([read_end], [], [], 1.0)
        if ready:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break  # every writer closed the pipe
            _write_all(1, redactor.feed(chunk))
        if status is None:
            status = _reap(child)
            if status is not None:
                exited_at = time.monotonic()
    _write_all(1, redactor.flush())
    os.close(read_end)
    if status is None:
        _, wait_status = os.waitpid(child, 0)
        status = _status(wait_status)
    return status


def main(argv: list[str]) -> int:
    try:
        secrets_file, args = parse_argv(argv)
        key = read_key(secrets_file) if secrets_file else None
    except UsageError as exc:
        print(f"sparkctl sglang launcher: {exc}", file=sys.stderr)
        return 2
    child, read_end = _spawn(args, key)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    return _relay(child, read_end, Redactor([key.encode()] if key else []))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
