#!/usr/bin/env python3
"""sparkctl's launcher for SGLang: the API key in memory only, and out of every log.

Installed by the sglang role at /usr/local/lib/sparkctl/sglang-launcher.py
(mounted read-only into the container of the container method) and run as the
unit's command, by the interpreter that has SGLang installed::

    python3 sglang-launcher.py [--secrets-file FILE] [--module MODULE]
        [--wait-for-head HOST:PORT --wait-timeout SECONDS] -- <the module's arguments>

MODULE is ``sglang.launch_server`` (the default) or ``smg.launch_router``, the
SGLang gateway (the Shepherd Model Gateway, PyPI ``smg``), whose ``--api-key``
is the same data-plane key and has the same problem: no environment variable
or file takes it (smg 1.13.0 ``smg/router_args.py``), only its command line.

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

With ``--wait-for-head`` (a worker rank of a unit enabled at boot, the sglang
role's sglang_start_on_boot) the server is started only once the head's
rendezvous address answers: a TCP connect to HOST:PORT is accepted or
refused (the head is up, its SGLang not listening yet). torch's TCPStore
client, which SGLang's rendezvous is, retries exactly those two itself until
--dist-timeout, but fails at once on anything else (torch
torch/csrc/distributed/c10d/socket.cpp, SocketConnectOp::tryConnect: only
ECONNREFUSED, ECONNRESET and ETIMEDOUT are retried; "No route to host" while
the head still boots ends the rank), and systemd's start limit would stop a
rank that failed so after a few restarts. The wait is bounded (SECONDS; then
exit 1 and the unit's Restart= takes over) and says in the journal what it
waits for.

In a container this process is PID 1 (docker runs the command in a PID
namespace of its own): the kernel delivers no signal to PID 1 that it has no
handler for, so ``docker stop``'s SIGTERM would be ignored and the server
killed only after the stop timeout. Signals are forwarded to the server, and
orphaned processes (PID 1 adopts them) are reaped.

Standard library only; runs on the image's Python (3.10 or newer).
"""

from __future__ import annotations

import contextlib
import errno
import os
import runpy
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass

MODULE = "sglang.launch_server"
# What --module may name: SGLang's server, and its gateway's router (smg 1.13.0
# smg/launch_router.py: ``main()`` parses sys.argv[1:] as ``smg launch`` does).
MODULES = (MODULE, "smg.launch_router")
KEY_VARIABLE = "SGLANG_API_KEY"
MASK = b"<redacted>"
# A line longer than this without a line end is passed on in pieces, keeping
# back as many bytes as a key could span.
MAX_LINE = 1 << 16
# Seconds the output of processes the server left behind is still passed on
# after the server itself exited (SGLang kills its process tree on the way out).
LINGER = 10.0
# The head's answers that let a worker start: the connect was accepted, or refused
# (or reset) because nothing listens yet, which torch's TCPStore client retries.
ANSWERS = (errno.ECONNREFUSED, errno.ECONNRESET)
# Seconds one connect attempt may take, between two attempts, and between two
# "still waiting" lines in the journal.
CONNECT_TIMEOUT = 5.0
RETRY_PAUSE = 2.0
REPORT_EVERY = 60.0
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


USAGE = (
    "usage: sglang-launcher.py [--secrets-file FILE] [--module MODULE] "
    "[--wait-for-head HOST:PORT --wait-timeout SECONDS] -- ARGS"
)


@dataclass(frozen=True)
class Options:
    """The launcher's own options (before ``--``) and the server's arguments."""

    secrets_file: str | None
    head: tuple[str, int] | None
    wait_timeout: float
    server: list[str]
    module: str = MODULE


def parse_argv(argv: list[str]) -> Options:
    """``[--secrets-file FILE] [--module M] [--wait-for-head HOST:PORT --wait-timeout S]
    -- ARGS``."""
    if "--" not in argv:
        raise UsageError(USAGE)
    split = argv.index("--")
    own, server = argv[:split], argv[split + 1 :]
    names = own[0::2]
    if len(own) % 2 or len(set(names)) != len(names) or not all(own[1::2]):
        raise UsageError(f"unknown launcher options {own}; {USAGE}")
    given = dict(zip(names, own[1::2], strict=True))
    unknown = set(given) - {"--secrets-file", "--module", "--wait-for-head", "--wait-timeout"}
    if unknown or ("--wait-for-head" in given) != ("--wait-timeout" in given):
        raise UsageError(f"unknown launcher options {own}; {USAGE}")
    if given.get("--module", MODULE) not in MODULES:
        raise UsageError(f"unknown launcher options {own}; {USAGE}")
    head = None
    timeout = 0.0
    if "--wait-for-head" in given:
        host, sep, port = given["--wait-for-head"].rpartition(":")
        try:
            head = (host.strip("[]"), int(port))
            timeout = float(given["--wait-timeout"])
        except ValueError:
            head = None
        if not sep or not host or head is None or not 0 < head[1] < 65536 or timeout <= 0:
            raise UsageError(f"unknown launcher options {own}; {USAGE}")
    return Options(
        given.get("--secrets-file"), head, timeout, server, given.get("--module", MODULE)
    )


def say(text: str) -> None:
    print(f"sparkctl sglang launcher: {text}", file=sys.stderr, flush=True)


def knock(head: tuple[str, int], timeout: float) -> str | None:
    """None when the head's rendezvous address answers (the connect is accepted, and
    closed again at once, or refused); otherwise why not, as the OS says it."""
    try:
        with socket.create_connection(head, timeout=timeout):
            return None
    except TimeoutError:
        return "no answer (timed out)"
    except OSError as exc:
        if exc.errno in ANSWERS:
            return None
        return exc.strerror or str(exc)


def wait_for_head(head: tuple[str, int], limit: float) -> bool:
    """Until the head's rendezvous address answers (True) or ``limit`` seconds passed."""
    where = f"{head[0]}:{head[1]}"
    started = time.monotonic()
    reported = 0.0
    while True:
        left = limit - (time.monotonic() - started)
        why = knock(head, max(0.1, min(CONNECT_TIMEOUT, left)))
        waited = time.monotonic() - started
        if why is None:
            if reported:
                say(f"the head's rendezvous {where} answers after {waited:.0f} s; starting SGLang")
            return True
        if waited >= limit:
            say(
                f"the head's rendezvous {where} did not answer in {limit:.0f} s ({why}); "
                "giving up, systemd restarts this rank (Restart=on-failure)"
            )
            return False
        if not reported or time.monotonic() - reported >= REPORT_EVERY:
            say(
                f"waiting for the head's rendezvous {where} to answer ({why}), "
                f"{waited:.0f} of at most {limit:.0f} s: SGLang would give up on it at once"
            )
            reported = time.monotonic()
        time.sleep(max(0.0, min(RETRY_PAUSE, limit - waited)))


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


def _run_server(args: list[str], key: str | None, module: str) -> None:
    """In the child: the module as ``python3 -m sglang.launch_server`` runs it."""
    sys.argv = [module, *args, *(["--api-key", key] if key else [])]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
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


def _spawn(args: list[str], key: str | None, module: str = MODULE) -> tuple[int, int]:
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
        _run_server(args, key, module)
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


def _exit_on(signum: int, _frame: object) -> None:
    """Before the server runs: a stop ends the wait with the status a killed server gives."""
    os._exit(128 + signum)


def main(argv: list[str]) -> int:
    try:
        options = parse_argv(argv)
        key = read_key(options.secrets_file) if options.secrets_file else None
    except UsageError as exc:
        say(str(exc))
        return 2
    if options.head is not None:
        # As PID 1 of a container a signal without a handler is ignored: docker stop
        # must end the wait, not run into its timeout.
        for signum in FORWARDED:
            signal.signal(signum, _exit_on)
        if not wait_for_head(options.head, options.wait_timeout):
            return 1
    child, read_end = _spawn(options.server, key, options.module)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    return _relay(child, read_end, Redactor([key.encode()] if key else []))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
