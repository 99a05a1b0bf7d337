"""The examples each ``--help`` ends with: one table, keyed by the command as typed after ``mmtok``.

:mod:`mmtok.cli.main` applies a row as the epilog of its command or group when it registers them, so a command's
own module says nothing about examples. Each example is ``(what it does, command line)``; a command line fits 72
columns so that it reads whole in an 80-column help (tests/test_cli_help.py renders every help at 80 columns and
checks that every flag an example uses is one of its command's). A new command adds its row here.
"""

from __future__ import annotations

Example = tuple[str, str]  # (what it does, the command line)

EXAMPLES: dict[str, tuple[Example, ...]] = {
    "": (
        ("Price a photo on two models", "mmtok price photo.jpg -m gpt-5.2 -m claude-opus-4-7"),
        ("The cheapest version that still reads", "mmtok shrink page.png -m gpt-4o --out small/"),
        ("See everything run on the shipped samples", "mmtok demo"),
    ),
    "inspect": (
        ("Every file of a folder, from headers only", "mmtok inspect photos/"),
        ("One JSON object per file", "mmtok inspect --json clip.mp4 photo.jpg"),
        ("Refuse anything that is not an image", "mmtok inspect --kind image uploads/"),
    ),
    "demo": (
        ("The main job on the shipped sample media", "mmtok demo"),
        ("Only the first two steps, as JSON lines", "mmtok demo --steps inspect,price --json"),
    ),
    "price": (
        ("A photo on two models, high detail", "mmtok price photo.jpg -m gpt-5.2 -m claude-opus-4-7 --detail high"),
        ("A prompt with a recording attached", 'mmtok price --text "Sum up." -a talk.wav -m gemini-3-flash-preview'),
        ("Batch rates, on a past date, as CSV", "mmtok price photos/ -m gpt-5.2 --batch --at 2026-11-15 --csv"),
    ),
    "models": (
        ("Anthropic's models that take images", "mmtok models --provider anthropic --modality image"),
        ("Every field, for a spreadsheet", "mmtok models --csv"),
    ),
    "tokenize": (
        ("Images and speech to token files", "mmtok tokenize photo.jpg talk.wav --out tokens/"),
        (
            "Video at 25 tokens/s, 4 codebook levels",
            "mmtok tokenize a.mp4 --tokens-per-second 25 --codebook-levels 4 --out t/",
        ),
        ("Photos with the 256-token tokenizer", "mmtok tokenize photos/ --tokenizer vq-photo-256 --out tokens/"),
    ),
    "detokenize": (
        ("Image tokens back to a picture", "mmtok detokenize tokens/photo.safetensors --out photo.png"),
        ("The sound of a video's token file", "mmtok detokenize tokens/clip.safetensors --key audio --out clip.wav"),
    ),
    "truncate": (
        (
            "Keep the tokens that matter to a question",
            'mmtok truncate t.safetensors --context "the digit 7" --out s.safetensors',
        ),
        (
            "64 tokens, similar ones merged (ToMe)",
            "mmtok truncate t.safetensors --method tome --keep 64 -o d.safetensors",
        ),
    ),
    "shrink": (
        ("The cheapest version for two models", "mmtok shrink photo.jpg -m gpt-4o -m gemini-3-flash-preview --out s/"),
        ("A stricter bar on the picture", "mmtok shrink photo.jpg -m claude-opus-4-7 --keep 'ssim>=0.95' --out s/"),
        ("Same tokens, fewer bytes", "mmtok shrink scan.png -m claude-opus-4-7 --lossless --out s/"),
    ),
    "plan": (
        (
            "A quick plan on the shipped example",
            "mmtok plan budgets/examples/digits-qa.toml --out plan/ --generations 1",
        ),
        ("Priced with your own sheet, as JSON", "mmtok plan spec.toml --out plan/ --prices my.toml --json"),
    ),
    "proxy": (
        ("Price and record every call on port 8787", "mmtok proxy --port 8787 --ledger calls.sqlite"),
        ("Refuse calls over 5 cents or $20 a day", "mmtok proxy --max-cost 0.05 --budget-usd-per-day 20"),
        ("Predict with a calibration sheet", "mmtok proxy --ledger calls.sqlite --prices calibrated.toml"),
    ),
    "ledger": (
        ("Spend, and predicted against billed", "mmtok ledger calls.sqlite"),
        ("An HTML report with figures", "mmtok ledger calls.sqlite --html report/"),
        ("Store a batch's bills in the ledger", "mmtok ledger import out.jsonl --batch-input in.jsonl --ledger l.db"),
    ),
    "calibrate": (
        ("Fit each model's rule to its bills", "mmtok calibrate calls.sqlite --out calibrated.toml"),
        ("The fits as JSON, for a script", "mmtok calibrate calls.sqlite --out calibrated.toml --json"),
        ("Fit to a batch's results", "mmtok calibrate out.jsonl --batch-input in.jsonl --out batch.toml"),
    ),
    "mcp": (
        ("Serve the tools to a client that starts it", "mmtok mcp --root ~/work/app"),
        ("Over HTTP on 127.0.0.1, with a default model", "mmtok mcp --root ~/work/app --http -m claude-opus-4-7"),
        ("Stricter bars for its shrink tool", "mmtok mcp --root . --keep 'ocr>=0.98' --keep 'ssim>=0.95'"),
    ),
    "hook": (
        ("Claude Code's read hook (settings.json runs it)", "mmtok hook claude-code"),
        ("With the model and bars of your own", "mmtok hook claude-code -m claude-opus-4-7 --keep 'ocr>=0.98'"),
    ),
    "version": (("The installed version", "mmtok version"),),
    "prices": (
        ("Which price data is in use, and how old", "mmtok prices status"),
        ("Take in a newer genai-prices data file", "mmtok prices update --from data.json"),
        ("Every model a sheet prices", "mmtok prices list --prices my.toml"),
    ),
    "prices status": (
        ("Which price data is in use, and how old", "mmtok prices status"),
        ("The same for a script", "mmtok prices status --json"),
    ),
    "prices update": (
        ("Use a newer genai-prices data file", "mmtok prices update --from data.json"),
        ("A newer LiteLLM catalog", "mmtok prices update --from prices.json --litellm-version 1.111.0"),
        ("Back to the installed data", "mmtok prices update --reset"),
    ),
    "prices list": (
        ("The shipped sheets' models", "mmtok prices list"),
        ("With your sheet, as CSV", "mmtok prices list --prices my.toml --csv"),
    ),
    "prices import-litellm": (
        ("LiteLLM's map as a price sheet", "mmtok prices import-litellm prices.json --out my.toml"),
        ("Only some models", "mmtok prices import-litellm prices.json -m 'gpt-5*' --out my.toml"),
    ),
    "train": (
        ("Train the image tokenizer", "mmtok train vq models/configs/train/vq-clip-tiny.toml"),
        ("Go on after an interruption", "mmtok train vq models/configs/train/vq-clip-tiny.toml --resume"),
    ),
    "train clip": (
        ("The CLIP teacher", "mmtok train clip models/configs/train/clip-tiny.toml"),
        (
            "A short run into a folder of your own",
            "mmtok train clip models/configs/train/clip-tiny.toml --steps 50 --out c/",
        ),
    ),
    "train vq": (
        ("The image tokenizer", "mmtok train vq models/configs/train/vq-clip-tiny.toml"),
        ("On your own photos", "mmtok train vq models/configs/train/vq-clip-tiny.toml --data photos/"),
        ("Go on after an interruption", "mmtok train vq models/configs/train/vq-clip-tiny.toml --resume"),
    ),
    "train av": (
        ("The audio/video embedder", "mmtok train av models/configs/train/av-tiny.toml"),
        (
            "A short run into a folder of your own",
            "mmtok train av models/configs/train/av-tiny.toml --steps 100 --out av/",
        ),
    ),
    "train backbone": (
        ("The MoE backbone", "mmtok train backbone models/configs/train/backbone-tiny.toml"),
        ("Go on after an interruption", "mmtok train backbone CONFIG.toml --resume"),
    ),
    "train critic": (
        ("The critic behind MI truncation", "mmtok train critic models/configs/train/critic-vq-text.toml"),
        ("A short run into a folder of your own", "mmtok train critic CONFIG.toml --steps 100 --out critic/"),
    ),
    "eval": (
        ("Run a suite on two processes", "mmtok eval run eval/suites/images-heldout.toml --out run/ --workers 2"),
        ("Its report, as Markdown and HTML", "mmtok eval report run/"),
    ),
    "eval run": (
        ("Run a suite on two processes", "mmtok eval run eval/suites/images-heldout.toml --out run/ --workers 2"),
        ("Go on after a crash", "mmtok eval run eval/suites/images-heldout.toml --out run/ --resume"),
        ("Redo what changed in the suite", "mmtok eval run SUITE.toml --out run/ --resume --rerun-changed"),
    ),
    "eval report": (
        ("Tables and figures of a run", "mmtok eval report run/"),
        ("The summary for a script", "mmtok eval report run/ --json"),
    ),
}


def epilog(command: str) -> str | None:
    """The examples of ``command`` (as typed after ``mmtok``: ``"price"``, ``"eval run"``, ``""`` for mmtok itself)
    as an epilog: a heading, then each example's line and command line. None when the table has no row for it."""
    examples = EXAMPLES.get(command)
    if not examples:
        return None
    return "Examples:\n" + "\n".join(f"{what}:\n  {line}" for what, line in examples)
