"""sparkctl bench: what the served model does under a fixed load, and what it costs."""

from __future__ import annotations

from pathlib import Path

import click

from sparkctl.commands.common import INVENTORY_ARG, checked, extra_vars

MAX_CONCURRENCY = 1024


def _levels(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
    """``1,4,16``: distinct positive integers, in the order given."""
    out: list[int] = []
    for raw in value.split(","):
        word = raw.strip()
        if not word.isdigit() or not 1 <= int(word) <= MAX_CONCURRENCY:
            raise click.BadParameter(
                f"{word!r} is not a whole number from 1 to {MAX_CONCURRENCY} "
                "(a comma-separated list, e.g. 1,4,16)"
            )
        if int(word) in out:
            raise click.BadParameter(f"{word} is given twice")
        out.append(int(word))
    return tuple(out)


@click.command("bench")
@INVENTORY_ARG
@click.option(
    "--concurrency",
    default="1,4,16",
    show_default=True,
    callback=_levels,
    help="The levels: requests in flight at once, comma-separated.",
)
@click.option(
    "--input-len",
    type=click.IntRange(1, 100_000),
    default=128,
    show_default=True,
    help="Words in each prompt (the seeded workload; the report gives the server's token count).",
)
@click.option(
    "--output-len",
    type=click.IntRange(1, 32_768),
    default=128,
    show_default=True,
    help="Tokens each request decodes (ignore_eos: exactly this many).",
)
@click.option(
    "--requests",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Requests per level [default: 8 x the level's concurrency, at least 8].",
)
@click.option(
    "--duration",
    "duration_s",
    type=click.FloatRange(min=1, max=86_400),
    default=None,
    help="Seconds per level instead of a number of requests.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**31 - 1),
    default=0,
    show_default=True,
    help="The workload's seed: the same seed, the same prompts.",
)
@click.option(
    "--baseline",
    metavar="PATH|last-good",
    help="Compare with an earlier bench (its directory or report.json, or last-good): "
    "exit 1 when output tokens/s dropped beyond validate_baseline_tolerance.",
)
@click.option(
    "--layouts",
    metavar="tp4,tp2x2,tp1x4",
    default=None,
    help="Serve each TP layout in turn (model plan's names), run the same workload on "
    "each, report them side by side, then serve the inventory's layout again.",
)
@click.option(
    "-e",
    "--extra-vars",
    "extra",
    multiple=True,
    help="The -e given to provision (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print report.json on stdout.")
def bench_command(
    inventory_path: Path,
    concurrency: tuple[int, ...],
    input_len: int,
    output_len: int,
    requests: int | None,
    duration_s: float | None,
    seed: int,
    baseline: str | None,
    layouts: str | None,
    extra: tuple[str, ...],
    as_json: bool,
) -> None:
    """Drive the served model with a fixed, seeded load at each concurrency level while
    every node is sampled; tokens/s, TTFT, ITL and latency by bench_serving's
    definitions, memory, GPU and fabric twins per node, the communication share of a
    token, and the node or link that sets the pace (report.json, report.html).

    Exit 1 when a request fails or tokens/s dropped against --baseline; with
    --layouts, also when a layout cannot be served or the inventory's layout cannot be
    served again.
    """
    from sparkctl import present  # noqa: PLC0415
    from sparkctl.bench import run  # noqa: PLC0415

    if requests is not None and duration_s is not None:
        raise click.UsageError("give --requests or --duration, not both")
    if layouts is not None and baseline is not None:
        raise click.UsageError("give --baseline or --layouts, not both")
    extravars = extra_vars(extra)
    inv = checked(inventory_path, extravars)
    opts = run.Options(
        inv,
        concurrency=concurrency,
        input_len=input_len,
        output_len=output_len,
        requests=requests,
        duration_s=duration_s,
        seed=seed,
        baseline=baseline,
        extra=extravars,
    )
    if layouts is not None:
        from sparkctl.bench import layouts as lay  # noqa: PLC0415

        chosen = lay.parse(inv, layouts)
        report, run_dir = lay.bench_layouts(opts, chosen)
        present.bench_layouts(report, run_dir, as_json=as_json)
        if (error := lay.failure(report, run_dir)) is not None:
            raise error
        return
    report, run_dir = run.bench(opts)
    present.bench(report, run_dir, as_json=as_json)
    failure = run.failure(report, run_dir)
    if failure is not None:
        raise failure
