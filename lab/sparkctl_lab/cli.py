"""sparkctl lab: the rehearsal cluster in local containers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from sparkctl import console
from sparkctl.commands.common import inventory_option, print_json
from sparkctl.errors import ExitCode, SparkctlError


@click.group()
def lab() -> None:
    """The rehearsal lab: four simulated Sparks and a switch in local containers."""


def _lab(inventory: Path, **overrides: Any) -> Any:
    from sparkctl_lab.lab import Lab, LabSpec, check_environment  # noqa: PLC0415

    # Bad input first: a mistyped inventory is reported before "needs root".
    spec = LabSpec.from_inventory(inventory, **overrides)
    check_environment()
    return Lab(spec, progress=console.progress)


@lab.command("up")
@inventory_option(default_sim=True)
@click.option(
    "--rate",
    "rate_mbit",
    type=click.IntRange(min=1),
    default=None,
    help="Shape every switch port to this many Mbit/s (default: lab_link_rate_mbit).",
)
@click.option(
    "--driver-version",
    default=None,
    help="Driver version the simulated GPUs report (default: lab_gpu_driver_version).",
)
@click.option("--rebuild", is_flag=True, help="Rebuild the node image even if it is cached.")
@click.option(
    "--mirror",
    envvar="SPARKCTL_LAB_MIRROR",
    default=None,
    help="Debian mirror for the image build (default: this machine's apt mirror; "
    "env: SPARKCTL_LAB_MIRROR).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the lab status as JSON.")
def lab_up(
    inventory: Path,
    rate_mbit: int | None,
    driver_version: str | None,
    rebuild: bool,
    mirror: str | None,
    as_json: bool,
) -> None:
    """Build the node image if needed and bring the lab up."""
    the_lab = _lab(inventory, rate_mbit=rate_mbit, driver_version=driver_version)
    created = the_lab.up(rebuild=rebuild, mirror=mirror)
    status = the_lab.status()
    status["created"] = created
    if as_json:
        print_json(status)
    else:
        show_status(status)


@lab.command("down")
@inventory_option(default_sim=True)
def lab_down(inventory: Path) -> None:
    """Remove every container and network the lab created (the image cache stays)."""
    _lab(inventory).down()


@lab.command("status")
@inventory_option(default_sim=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def lab_status(inventory: Path, as_json: bool) -> None:
    """Each node's state, addresses and links; exit 1 when the lab is not up."""
    status = _lab(inventory).status()
    if as_json:
        print_json(status)
    else:
        show_status(status)
    if not status["up"]:
        raise SparkctlError("the lab is not up", ExitCode.CHECKS_FAILED, hint="sparkctl lab up")


@lab.command("ssh", context_settings={"ignore_unknown_options": True})
@inventory_option(default_sim=True)
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def lab_ssh(inventory: Path, node: str, command: tuple[str, ...]) -> None:
    """Open a shell on NODE (or run COMMAND there) over the management network."""
    from sparkctl_lab.sshtrust import ssh_base_args  # noqa: PLC0415

    the_lab = _lab(inventory)
    hosts = {h.name: h for h in the_lab.spec.hosts}
    if node not in hosts:
        raise SparkctlError(f"no lab host '{node}' (hosts: {', '.join(hosts)})", ExitCode.BAD_INPUT)
    interactive = not command and sys.stdin.isatty()
    args = ssh_base_args(the_lab.dir / "ssh", batch=not interactive)
    sys.stdout.flush()
    os.execvp(args[0], [*args, f"root@{hosts[node].mgmt_ip}", *command])  # noqa: S606 - replaces sparkctl by ssh, as intended


@lab.command("port")
@inventory_option(default_sim=True)
@click.argument("port")
@click.option("--rate", "rate_mbit", type=click.IntRange(min=1), help="New shaping rate, Mbit/s.")
@click.option("--mtu", type=click.IntRange(68, 65535), help="New MTU of the switch port.")
@click.option("--up/--down", "up", default=None, help="Set the port up or down (pull the cable).")
def lab_port(
    inventory: Path, port: str, rate_mbit: int | None, mtu: int | None, up: bool | None
) -> None:
    """Change a switch PORT live (swp3 or spark2:a): rate, MTU, up/down.

    Rehearses faults: a port left at MTU 1500, a pulled cable, a slow link.
    """
    the_lab = _lab(inventory)
    cable = the_lab.cable(port)
    the_lab.set_port(cable, rate_mbit=rate_mbit, mtu=mtu, up=up)
    console.progress(f"{cable.port} ({cable.node}:{cable.domain}) updated")


@lab.command("reboot")
@inventory_option(default_sim=True)
@click.argument("nodes", nargs=-1, required=True)
def lab_reboot(inventory: Path, nodes: tuple[str, ...]) -> None:
    """Reboot lab Sparks: each shuts down through its systemd, then each boots again, in
    the order given, with its cables plugged in before its systemd starts."""
    _lab(inventory).reboot(list(nodes))


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
}


def parse_size(text: str) -> int:
    """'1GiB', '512M', '64MiB', '1048576' -> bytes (binary units)."""
    raw = text.strip().lower().replace(" ", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    try:
        value = float(number)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size such as 1GiB or 512M") from None
    if unit not in _SIZE_UNITS or value <= 0:
        raise click.BadParameter(f"{text!r} is not a size such as 1GiB or 512M")
    return int(value * _SIZE_UNITS[unit])


@lab.command("model")
@inventory_option(default_sim=True)
@click.option("--size", default="1GiB", show_default=True, help="Total size, e.g. 64MiB, 1GiB.")
@click.option(
    "--files",
    "shards",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Number of weight shards.",
)
@click.option("--node", help="Lab node that gets it (default: the head, node_rank 0).")
@click.option(
    "--dir",
    "directory",
    default="/srv/sparkctl-model/synthetic",
    show_default=True,
    help="Directory on the node (replaced).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON.")
def lab_model(
    inventory: Path, size: str, shards: int, node: str | None, directory: str, as_json: bool
) -> None:
    """Make a synthetic model (random bytes) on a lab node, to rehearse `model sync`.

    Then: sparkctl model sync inventory/sim.ini -e model_cache_source=head
    -e model_cache_head_dir=/srv/sparkctl-model/synthetic
    """
    from sparkctl import inventory as inv_mod  # noqa: PLC0415

    the_lab = _lab(inventory)
    head = node or next(n.name for n in inv_mod.validate(inventory).nodes if n.rank == 0)
    made = the_lab.make_model(head, directory, parse_size(size), files=shards)
    if as_json:
        print_json({"node": head, **made})
    else:
        console.progress(
            f"{head}:{made['directory']}: {len(made['files'])} files, "
            f"{made['size_bytes']} bytes of random weights"
        )


@lab.command("image")
@inventory_option(default_sim=True)
@click.argument("ref")
@click.option("--variant", default="", help="Another image under a tag (a label value).")
@click.option(
    "--broken",
    is_flag=True,
    help="An image without SGLang's package: its server fails at once (rehearses rollback).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the reference and digest as JSON.")
def lab_image(inventory: Path, ref: str, variant: str, broken: bool, as_json: bool) -> None:
    """Publish REF (repository:tag) in every lab node's registry; print its digest.

    The SGLang stand-in's image under another tag (a new release to upgrade to:
    sparkctl serve upgrade INVENTORY -e sglang_image=REF -e sglang_image_digest=DIGEST).
    """
    from sparkctl import inventory as inv_mod  # noqa: PLC0415
    from sparkctl_lab import registry  # noqa: PLC0415
    from sparkctl_lab.podman import Podman  # noqa: PLC0415

    _lab(inventory)
    nodes = [n.name for n in inv_mod.validate(inventory).nodes]
    try:
        digest = registry.move_lab_tag(Podman(), nodes, ref, variant, broken=broken)
    except registry.RegistryError as exc:
        raise SparkctlError(str(exc), ExitCode.BAD_INPUT) from None
    if as_json:
        print_json({"ref": ref, "digest": digest, "nodes": nodes, "broken": broken})
    else:
        click.echo(f"{ref}@{digest}")


def show_status(status: dict[str, Any]) -> None:
    table = Table(
        title=f"lab ({'up' if status['up'] else 'not up'}, "
        f"ports shaped to {status['rate_mbit']} Mbit/s"
        + ("" if status.get("egress_guard", True) else "; NO egress guard: run sparkctl lab up")
        + ")"
    )
    for col in ("host", "state", "management", "links"):
        table.add_column(col)
    for h in status["hosts"]:
        links = "\n".join(
            f"{ln['name']} {ln['state']} mtu {ln['mtu']}"
            + (f" {' '.join(ln['addresses'])}" if ln["addresses"] else "")
            + (f" {ln['rate_mbit']} Mbit/s" if "rate_mbit" in ln else "")
            for ln in h["links"]
        )
        table.add_row(h["name"], h["state"], h["mgmt_ip"], links)
    console.out.print(table)
