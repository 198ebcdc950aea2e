"""What the command modules share: the inventory argument and options, ``-e`` parsing,
the one inventory check per command, JSON output and the exit for a typed result."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import default_sim_inventory

if TYPE_CHECKING:
    from sparkctl.inventory import Inventory


@dataclass
class App:
    debug: bool = False


F = TypeVar("F", bound=Callable[..., Any])


def inventory_option(default_sim: bool) -> Callable[[F], F]:
    option: Callable[[F], F] = click.option(
        "-i",
        "--inventory",
        "inventory",
        type=click.Path(path_type=Path, dir_okay=False),
        default=default_sim_inventory() if default_sim else None,
        show_default="inventory/sim.ini" if default_sim else False,
        envvar="SPARKCTL_LAB_INVENTORY" if default_sim else None,
        help="Inventory describing the lab (env: SPARKCTL_LAB_INVENTORY).",
    )
    return option


def print_json(data: Any) -> None:
    from sparkctl import present  # noqa: PLC0415

    present.emit(data)


def checked(inventory_path: Path, extra: Mapping[str, Any] | None = None) -> Inventory:
    """The inventory loaded and checked, once per command, with the command's ``-e``
    values judged by the same rules (exit 2 before any host)."""
    from sparkctl import inventory  # noqa: PLC0415

    return inventory.validate(inventory_path, extra)


class Result(Protocol):
    """A command's result: :meth:`failure` is the error to exit with, or None."""

    def failure(self) -> SparkctlError | None: ...


def exit_for(result: Result) -> None:
    error = result.failure()
    if error is not None:
        raise error


INVENTORY_ARG = click.argument(
    "inventory_path", metavar="INVENTORY", type=click.Path(path_type=Path, dir_okay=False)
)
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


def digest(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not DIGEST_RE.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a digest sha256:<64 hex digits>")
    return value


ACCEPT_DIGEST = click.option(
    "--accept-image-digest",
    "accept_digest",
    metavar="sha256:...",
    callback=digest,
    help="The SGLang image's tag moved to this digest: move the cluster to it (once; "
    "pin it with sglang_image_digest to keep it).",
)


def with_accept(extra: tuple[str, ...], accept_digest: str | None) -> dict[str, Any]:
    extravars = extra_vars(extra)
    if accept_digest:
        extravars["sglang_image_accept_digest"] = accept_digest
    return extravars


def extra_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """-e KEY=VALUE (the value read as YAML, as ansible-playbook does) or -e '{...}'."""
    import yaml  # noqa: PLC0415

    out: dict[str, Any] = {}
    for text in values:
        if text.lstrip().startswith("{"):
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise SparkctlError(
                    f"-e {text!r}: not a YAML mapping ({exc})", ExitCode.BAD_INPUT
                ) from None
            if not isinstance(data, dict):
                raise SparkctlError(f"-e {text!r}: not a mapping", ExitCode.BAD_INPUT)
            out.update(data)
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SparkctlError(f"-e {text!r}: expected KEY=VALUE", ExitCode.BAD_INPUT)
        try:
            out[key.strip()] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out
