"""`fairprobe cache ...`: inspect or empty the shared cache."""

from __future__ import annotations

from typing import Annotated

import typer

from fairprobe.cli.common import CacheOpt, console, rich_table

app = typer.Typer(help="Inspect or empty the shared cache of model and judge calls.", no_args_is_help=True)


@app.command("stats")
def cache_stats(cache: CacheOpt = None) -> None:
    """What fairprobe keeps on disk: cached calls by model and kind, converted models, downloads, with sizes."""
    from fairprobe.cache import Cache, stored_items
    from fairprobe.formatting import file_size
    from fairprobe.io import cache_dir

    stats = Cache(cache).stats()
    console.print(f"{stats.path}: {stats.entries} entries, {file_size(stats.size_bytes)}", soft_wrap=True)
    if stats.entries:
        table = rich_table(header_style="bold cyan", title="cached calls by model")
        for col, justify in (("model", "left"), ("entries", "right"), ("by kind", "left"), ("size", "right")):
            table.add_column(col, justify=justify)  # type: ignore[arg-type]
        for model, kinds in stats.by_model_kind.items():
            split = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
            table.add_row(model, str(stats.by_model[model]), split, file_size(stats.model_bytes[model]))
        console.print(table)
    items = stored_items()
    console.print(
        f"{cache_dir()}: {file_size(sum(i.size for i in items))} besides the cached calls"
        + ("" if items else " (nothing)"),
        soft_wrap=True,
    )
    if items:
        table = rich_table(header_style="bold cyan")
        for col, justify in (("what", "left"), ("path", "left"), ("size", "right")):
            table.add_column(col, justify=justify)  # type: ignore[arg-type]
        for item in items:
            table.add_row(item.what, str(item.path.relative_to(cache_dir())), file_size(item.size))
        console.print(table)


@app.command("clear")
def cache_clear(
    cache: CacheOpt = None,
    model: Annotated[str | None, typer.Option(help="only this model's entries (as `cache stats` lists it)")] = None,
    models: Annotated[
        bool, typer.Option("--models", help="also delete converted models and assembled GGUF (rebuilt on next use)")
    ] = False,
) -> None:
    """Delete cached calls (all, or one model's); with --models also the converted models on disk."""
    from fairprobe.cache import Cache, clear_rebuilt
    from fairprobe.formatting import file_size

    store = Cache(cache)
    deleted = store.clear(model)
    console.print(f"deleted {deleted} entries from {store.path}", soft_wrap=True)
    if models:
        gone = clear_rebuilt()
        console.print(f"deleted {len(gone)} converted models and files, {file_size(sum(i.size for i in gone))}")
