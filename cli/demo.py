"""``mmtok demo``: the main job on the shipped defaults and sample media, step by step."""

from __future__ import annotations

from mmtok.cli.common import console

DEMO_MODELS = ("gpt-4o", "claude-sonnet-4-5", "gemini-2.5-flash")


def demo() -> None:
    """Run mmtok's main job on the shipped sample media: inspect, then price on three providers."""
    import mmtok
    from mmtok.samples import samples_dir

    console().rule("[bold]mmtok demo")
    console().print(f"sample media: {samples_dir()}")
    media = [m for m in mmtok.scan([samples_dir()]) if not isinstance(m, mmtok.MediaError)]
    _inspect_step(media)
    _price_step(media)


def _inspect_step(media: list) -> None:
    from mmtok.cli.inspect import inspect_table
    from mmtok.samples import manifest, samples_dir

    console().rule("1. inspect (headers only)")
    console().print(inspect_table([m.info() for m in media], root=samples_dir()))
    speech = [name for name, item in manifest().items() if "transcript" in item]
    console().print(f"{len(media)} media files; {len(speech)} speech samples with known transcripts.")


def _price_step(media: list) -> None:
    from decimal import Decimal

    from rich.table import Table

    from mmtok.budgets.pricing import model_spec, price

    console().rule("2. price on three providers")
    table = Table(show_edge=False, header_style="bold")
    table.add_column("sample")
    for name in DEMO_MODELS:
        table.add_column(f"{name}\ntokens / USD", justify="right")
    totals = dict.fromkeys(DEMO_MODELS, Decimal(0))
    for item in media:
        cells = []
        for name in DEMO_MODELS:
            if not model_spec(name).accepts(item.kind):
                cells.append("[dim]not accepted[/]")
                continue
            quote = price(item, name)
            totals[name] += quote.total_cost
            cells.append(f"{quote.input_tokens:,} / {quote.total_cost:.6f}" + ("" if quote.exact else " ~"))
        table.add_row(item.path.name, *cells)
    table.add_section()
    table.add_row("total USD", *[f"{totals[name]:.6f}" for name in DEMO_MODELS])
    console().print(table)
    for name in DEMO_MODELS:
        row = model_spec(name).row
        console().print(f"[dim]{name}: prices as of {row.as_of} from {row.source}[/]")
    console().print("[dim]~ a documented estimate (the provider's tokenizer or rule is not public)[/]")
