"""The one error type of sparkctl and its named exit codes.

Every failure the user should see is raised as :class:`SparkctlError` with an
:class:`ExitCode`; the CLI catches it in one place, prints the message (and
the hint) and exits with the code. Tracebacks are shown only with ``--debug``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes documented in README.md ("Exit codes")."""

    OK = 0
    CHECKS_FAILED = 1  # the command ran, and what it checked is not right
    BAD_INPUT = 2  # usage error, bad inventory, bad file: nothing was touched
    UNREACHABLE = 3  # one or more hosts could not be reached
    ENVIRONMENT = 4  # something missing on the controller: root, podman, a tool
    LAB = 5  # the rehearsal lab could not be built, started or wired
    LOCKED = 6  # another sparkctl run holds the lock for this inventory
    # a host offers a different SSH host key than the one recorded for it (sparkctl trust)
    HOST_KEY_CHANGED = 7
    # the command ran and found nothing wrong, but could not judge what it was asked to
    # (validate's bandwidth gate: a sweep below its calibrated size, NCCL's transport unseen)
    NOT_JUDGED = 8
    INTERNAL = 70  # a bug in sparkctl (EX_SOFTWARE): please report it
    INTERRUPTED = 130  # Ctrl-C


class SparkctlError(Exception):
    """A failure with a message for people and the exit code it maps to."""

    def __init__(
        self, message: str, code: ExitCode = ExitCode.CHECKS_FAILED, *, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint

    def __str__(self) -> str:
        return self.message
