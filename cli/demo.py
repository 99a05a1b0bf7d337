"""``mmtok demo``: the main job on the shipped defaults and sample media."""

from __future__ import annotations

import mmtok
from mmtok.cli.common import console
from mmtok.cli.inspect import inspect_table
from mmtok.samples import manifest, samples_dir


def demo() -> None:
    """Run mmtok's main job on the shipped sample media and print what it finds."""
    console().rule("[bold]mmtok demo")
    console().print(f"sample media: {samples_dir()}")
    rows = [m.info() for m in mmtok.scan([samples_dir()]) if not isinstance(m, mmtok.MediaError)]
    console().print(inspect_table(rows, root=samples_dir()))
    speech = {name: item["transcript"] for name, item in manifest().items() if "transcript" in item}
    console().print(f"{len(rows)} media files inspected from headers; {len(speech)} speech samples with transcripts.")
