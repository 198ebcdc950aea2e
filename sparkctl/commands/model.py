"""sparkctl model: the model on every node."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, exit_for, extra_vars


@click.group("model")
def model_group() -> None:
    """The model on every node: fetched once, fanned out over the fabric, verified."""


@model_group.command("sync")
@INVENTORY_ARG
@click.option(
    "--full-verify",
    is_flag=True,
    help="Hash every file on every node, not only files changed since last verified.",
)
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="Override an inventory variable, e.g. -e model_cache_source=head (repeatable).",
)
@click.option("-l", "--limit", help="Only these hosts or groups (Ansible pattern).")
@click.option("--json", "as_json", is_flag=True, help="Print the run's result as JSON on stdout.")
def model_sync(
    inventory_path: Path,
    full_verify: bool,
    extra: tuple[str, ...],
    limit: str | None,
    as_json: bool,
) -> None:
    """Put the model INVENTORY names on every node (playbooks/model_cache.yml)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.model_sync import sync  # noqa: PLC0415

    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
    result = sync(inv, full_verify=full_verify, extravars=extravars, limit=limit)
    present.provision(result, as_json=as_json)
    exit_for(result)


@model_group.command("list")
@INVENTORY_ARG
@click.option("--json", "as_json", is_flag=True, help="Print the revisions as JSON.")
def model_list(inventory_path: Path, as_json: bool) -> None:
    """The model revisions in every node's cache: size, serving, previous, verified."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.model_store import list_revisions  # noqa: PLC0415

    present.model_revisions(list_revisions(checked(inventory_path)), as_json=as_json)


@model_group.command("prune")
@INVENTORY_ARG
@click.option("--dry-run", is_flag=True, help="Say what would be removed, remove nothing.")
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="Override an inventory variable (the revision the inventory names is kept).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was removed and kept as JSON.")
def model_prune(inventory_path: Path, dry_run: bool, extra: tuple[str, ...], as_json: bool) -> None:
    """Remove the revisions that no longer serve, on nodes whose serving revision has
    passed a serve verify (or a serve upgrade's gate) since it was swapped in. The
    revision the inventory names stays (staged for an upgrade)."""
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.model_store import prune  # noqa: PLC0415

    extravars = extra_vars(extra)
    result = prune(checked(inventory_path, extravars), dry_run=dry_run, extravars=extravars)
    present.model_revisions(result, as_json=as_json)
    exit_for(result)


@model_group.command("plan")
@click.argument(
    "inventory_path",
    metavar="[INVENTORY]",
    required=False,
    type=click.Path(path_type=Path, dir_okay=False),
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A model directory on this machine (config.json, safetensors), without a cluster.",
)
@click.option(
    "--nodes",
    type=click.IntRange(min=1, max=64),
    default=4,
    show_default=True,
    help="Sparks to lay out, with --model.",
)
@click.option(
    "--memory-gib",
    type=click.FloatRange(min=1),
    help="Memory SGLang sizes its pool from, with --model (default: the Spark's 119.7).",
)
@click.option(
    "--mem-fraction",
    type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
    help="--mem-fraction-static, with --model (default: the Spark profile's 0.75).",
)
@click.option(
    "--kv-cache-dtype",
    type=click.Choice(["auto", "bf16", "bfloat16", "fp16", "fp8_e4m3", "fp8_e5m2"]),
    default="auto",
    show_default=True,
    help="KV cache element type, with --model (auto: the model's).",
)
@click.option(
    "--context-length",
    type=click.IntRange(min=0),
    default=0,
    help="Tokens a request may use, with --model (0: the model's own).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def model_plan(
    inventory_path: Path | None,
    model_dir: Path | None,
    nodes: int,
    memory_gib: float | None,
    mem_fraction: float | None,
    kv_cache_dtype: str,
    context_length: int,
    as_json: bool,
) -> None:
    """What the model needs per rank in every layout: one TP=4 group, two TP=2 groups,
    four replicas (for four Sparks); weights and KV cache per rank, KV tokens that fit,
    and which layout to serve. INVENTORY reads the model its head holds and the
    inventory's memory settings; --model PATH plans a local copy without a cluster."""
    from dataclasses import replace  # noqa: PLC0415

    from sparkctl import model_plan as mp  # noqa: PLC0415
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.errors import ExitCode, SparkctlError  # noqa: PLC0415

    if model_dir is None:
        if inventory_path is None:
            raise SparkctlError("model plan takes an INVENTORY or --model PATH", ExitCode.BAD_INPUT)
        from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415

        plan = mp.plan_cluster(open_cluster(checked(inventory_path), "model-plan"))
    elif inventory_path is not None:
        raise SparkctlError(
            "model plan takes an INVENTORY or --model PATH, not both", ExitCode.BAD_INPUT
        )
    else:
        memory = mp.spark_memory()
        memory = replace(
            memory,
            memory_gib=memory_gib or memory.memory_gib,
            mem_fraction=mem_fraction or memory.mem_fraction,
            source="options" if memory_gib or mem_fraction else memory.source,
        )
        plan = mp.make_plan(
            mp.read_local(model_dir),
            memory,
            nodes,
            kv_dtype=kv_cache_dtype,
            context=context_length,
        )
    present.model_plan(plan, as_json=as_json)
    exit_for(plan)
