"""`fairprobe cache ...`: inspect or empty the shared cache."""

from __future__ import annotations

from typing import Annotated

import typer

from fairprobe.cli.common import CacheOpt, console, rich_table

app = typer.Typer(help="Inspect or empty the shared cache of model and judge calls.", no_args_is_help=True)


@app.command("stats")
def cache_stats(cache: CacheOpt = None) -> None:
    """Show the cache's location, size and entries per kind and model."""
    from fairprobe.cache import Cache

    stats = Cache(cache).stats()
    console.print(f"{stats.path}: {stats.entries} entries, {stats.size_bytes / 1e6:.2f} MB", soft_wrap=True)
    if not stats.entries:
        return
    table = rich_table(header_style="bold cyan")
    table.add_column("kind")
    table.add_column("model")
    table.add_column("entries", justify="right")
    for kind, n in stats.by_kind.items():
        table.add_row(kind, "", str(n))
    for model, n in stats.by_model.items():
        table.add_row("", model, str(n))
    console.print(table)


@app.command("clear")
def cache_clear(
    cache: CacheOpt = None,
    model: Annotated[str | None, typer.Option(help="only this model's entries (as `cache stats` lists it)")] = None,
) -> None:
    """Delete cached answers (all, or one model's): the next run asks the model again."""
    from fairprobe.cache import Cache

    store = Cache(cache)
    deleted = store.clear(model)
    console.print(f"deleted {deleted} entries from {store.path}", soft_wrap=True)
