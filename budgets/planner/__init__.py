"""Token budget planner: NSGA-II (pymoo, mixed variables) over measured cost and quality.

A spec (TOML, see ``budgets/examples/``) names what one request holds (images, seconds of speech, text tokens),
the knobs and their domains, the candidate models, the objectives, quality bars and the token budget:

- knobs: ``image_size`` (px; mmtok tokens = (size/8)^2, or the pixels a provider receives), ``keep_ratio`` (MI
  truncation of visual tokens, self-hosted only), ``audio_tokens_per_second`` and ``codebook_levels`` (the audio
  tokenizer), ``trim_silence`` (audio: mmtok shrink's silence cut first, every model), ``model`` (provider models,
  or ``mmtok-semantic``: the self-hosted mmtok stack);
- ``image_size = "breakpoints"`` (or ``["breakpoints", 64, 128]``): each provider model gets its own sizes, those
  at which its token rule's count changes, from ``mmtok shrink``'s candidates (``budgets/shrink/candidates.py``) for
  a square image of ``MAX_IMAGE_SIZE_PX`` sent at ``PROVIDER_DETAIL``: one size per token count, shrink's largest
  at that count (on rules that count whole tiles or patches one pixel more costs more; Qwen2-VL's rounds, and its
  sizes are whole 28-px cells), and at the top the size the model resizes that image to (its view, same count;
  else the full size), at most ``MAX_BREAKPOINTS`` of them spread evenly over that ladder, smallest and largest
  kept. The sizes
  listed beside it are ``mmtok-semantic``'s (multiples of 8, as without it: its count changes at every one), so
  with ``mmtok-semantic`` among the models at least one is needed, and without it none may be listed. NSGA-II
  then searches the rank of the size on each model's own ladder (rank r of R on a ladder of n sizes is size
  ``round(r (n - 1) / (R - 1))``), and every setting, table and JSON holds the size in pixels;
- ``trim_silence = [false, true]`` (audio only): true sends the speech after ``mmtok shrink``'s silence cut
  (Silero VAD; silences longer than ``[calibration] min_silence_s``, shrink's 0.8 s by default, cut to 0.5 s or
  to min_silence_s if shorter):
  the cut is measured once on the calibration speech (cached by the speech set and the VAD settings), the
  request's ``audio_seconds`` are billed times the fraction it kept, and WER is measured on the trimmed speech;
- objectives, each measured on a calibration set by running the pipeline (``CalibrationEvaluator``):
  ``cost`` (USD per request, ``mmtok.price``), ``fd`` (Fréchet distance on the chosen extractor between the
  calibration photos and what the model receives: mmtok reconstructions, or the photos resized to ``image_size``),
  ``wer`` (of the speech the model receives: reconstructed from tokens, or the original), ``accuracy`` and
  ``judge`` (the MoE backbone answering questions about held-out digits-on-photos from truncated tokens;
  self-hosted only, since provider answers cannot be measured offline);
- constraint: tokens per request <= ``budget_tokens`` (pymoo ``n_ieq_constr``).

Measurements are cached on disk by what they measured (JSON): the setting, the calibration set, the weights of
every model used (``weights_fingerprint``) and the ASR's protocol name, so reruns and the exhaustive grid in
``bench_planner`` reuse them, and a retrained model or another decoder never does. Hypervolume is tracked per
generation (pymoo ``HV``) against one reference point for the whole run (fixed after the first generation: 10% of
the range beyond the worst evaluated value of each objective); the knee point comes from pymoo's
``HighTradeoffPoints``, and the cheapest feasible point that meets every bar is reported with it.

The package's parts: ``spec`` (the dataclass and its TOML reader), ``checks`` (what a spec asks must be measurable),
``variables`` (knobs as pymoo variables, settings), ``evaluation`` (``CalibrationEvaluator``: measuring a setting),
``problem`` (the NSGA-II search, ``plan()``, the exhaustive ``grid``) and ``summary`` (``Plan``: front, knee,
cheapest at the bars, hypervolume).
"""

from mmtok.budgets.planner.checks import calibration_sets, user_photos, user_speech, validate
from mmtok.budgets.planner.evaluation import CalibrationEvaluator, default_cache_dir
from mmtok.budgets.planner.problem import grid, plan
from mmtok.budgets.planner.spec import (
    AUDIO_CODEBOOK_LEVELS,
    AUDIO_KNOBS,
    BREAKPOINTS,
    FAILED_OBJECTIVE,
    KNOBS,
    MAX_AUDIO_TOKENS_PER_SECOND,
    MAX_BREAKPOINTS,
    MAX_IMAGE_SIZE_PX,
    MAX_REQUEST_IMAGES,
    OBJECTIVES,
    PROVIDER_DETAIL,
    SECTIONS,
    SELF_HOSTED,
    SELF_HOSTED_KNOBS,
    Spec,
    candidate_models,
    load_spec,
)
from mmtok.budgets.planner.summary import (
    Plan,
    best_value,
    hypervolume,
    meets_bars,
    objective_vector,
    pareto_rows,
    reference_point,
    summarise,
)
from mmtok.budgets.planner.variables import (
    DEFAULTS,
    applicable_setting,
    domains,
    image_sizes,
    knob_applies,
    model_breakpoints,
    per_model_sizes,
    resolve_setting,
    setting_key,
)

__all__ = [
    "AUDIO_CODEBOOK_LEVELS",
    "AUDIO_KNOBS",
    "BREAKPOINTS",
    "DEFAULTS",
    "FAILED_OBJECTIVE",
    "KNOBS",
    "MAX_AUDIO_TOKENS_PER_SECOND",
    "MAX_BREAKPOINTS",
    "MAX_IMAGE_SIZE_PX",
    "MAX_REQUEST_IMAGES",
    "OBJECTIVES",
    "PROVIDER_DETAIL",
    "SECTIONS",
    "SELF_HOSTED",
    "SELF_HOSTED_KNOBS",
    "CalibrationEvaluator",
    "Plan",
    "Spec",
    "applicable_setting",
    "best_value",
    "calibration_sets",
    "candidate_models",
    "default_cache_dir",
    "domains",
    "grid",
    "hypervolume",
    "image_sizes",
    "knob_applies",
    "load_spec",
    "meets_bars",
    "model_breakpoints",
    "objective_vector",
    "pareto_rows",
    "per_model_sizes",
    "plan",
    "reference_point",
    "resolve_setting",
    "setting_key",
    "summarise",
    "user_photos",
    "user_speech",
    "validate",
]
