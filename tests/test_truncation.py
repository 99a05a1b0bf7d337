"""MI estimators (KSG accuracy, InfoNCE's log-batch cap, bounds on Gaussians) and token truncation: MI relevance
with a critic fitted to data, the baselines, positions kept, and every bad input the call handles."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mmtok import mi
from mmtok.cli.main import app
from mmtok.errors import TruncationError
from mmtok.models.critics import SeparableCritic, TokenCritic, TokenCriticConfig, fit_critic
from mmtok.tokens import TokenSequence
from mmtok.truncation import tome_merge, truncate


@pytest.mark.parametrize("dim", [1, 2])
def test_ksg_is_within_a_tenth_of_a_nat_at_one_nat(dim):
    rng = np.random.default_rng(dim)
    rho = mi.rho_for_mi(1.0, dim)
    x = rng.standard_normal((5000, dim))
    y = rho * x + math.sqrt(1 - rho**2) * rng.standard_normal((5000, dim))
    estimate, pointwise = mi.ksg(x, y)
    assert abs(estimate - 1.0) < 0.1 and pointwise.shape == (5000,)


def gaussian(true_mi: float, dim: int = 20, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rho = mi.rho_for_mi(true_mi, dim)

    def sample(batch):
        x = torch.randn(batch, dim, generator=g)
        return x, rho * x + math.sqrt(1 - rho**2) * torch.randn(batch, dim, generator=g)

    return sample


@pytest.mark.parametrize("estimator", mi.ESTIMATORS)
def test_neural_bounds_learn_gaussian_mi(estimator):
    torch.manual_seed(0)
    history = fit_critic(SeparableCritic(20, 20, 128, 32), gaussian(4.0), estimator, steps=250, batch=64)
    final = float(np.mean(history[-50:]))
    assert 1.5 < final < 5.0
    if estimator == "infonce":
        assert max(history) <= math.log(64) + 1e-5


def test_infonce_never_exceeds_log_batch_even_for_huge_true_mi():
    torch.manual_seed(0)
    history = fit_critic(SeparableCritic(20, 20, 128, 32), gaussian(20.0), "infonce", steps=300, batch=32)
    assert max(history) <= math.log(32) + 1e-5


def test_rectangular_scores_with_a_joint_mask():
    scores = torch.randn(6, 3)
    joint = torch.zeros(6, 3, dtype=torch.bool)
    joint[torch.arange(6), torch.arange(3).repeat_interleave(2)] = True
    for name in mi.ESTIMATORS:
        result = mi.estimate(name, scores, joint)
        assert result.pointwise.shape == (6,)
    with pytest.raises(ValueError, match="exactly one joint"):
        mi.estimate("nwj", scores, torch.zeros(6, 3, dtype=torch.bool))


# ------------------------------------------------------------------------------------------------ truncation
@pytest.fixture(scope="module")
def fitted():
    """Tokens 0-15 of each 'image' carry its caption's class; tokens 16-63 are background. A critic is fitted on
    (token feature, caption embedding) pairs with the NWJ bound, exactly as the shipped critic is trained."""
    torch.manual_seed(0)
    classes = torch.randn(10, 8)

    def image(label: int) -> torch.Tensor:
        feats = torch.randn(64, 8)
        feats[:16] = classes[label] + 0.3 * torch.randn(16, 8)
        return feats

    critic = TokenCritic(TokenCriticConfig(token_dim=8, context_dim=8, hidden=64, embed=16))
    optimizer = torch.optim.Adam(critic.parameters(), lr=2e-3)
    for _ in range(300):
        labels = torch.randint(10, (32,))
        tokens = torch.stack([image(int(lab))[torch.randint(64, (4,))] for lab in labels]).reshape(128, 8)
        joint = torch.zeros(128, 32, dtype=torch.bool)
        joint[torch.arange(128), torch.arange(32).repeat_interleave(4)] = True
        value = mi.estimate("nwj", critic.scores(tokens, classes[labels]), joint).value
        optimizer.zero_grad()
        (-value).backward()
        optimizer.step()
    return critic.eval(), classes, image


def test_mi_keeps_the_tokens_that_share_information_with_the_context(fitted):
    critic, classes, image = fitted
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8))
    short, report = truncate(seq, context=classes[3:4], features=image(3), critic=critic, threshold=0.18)
    kept = set(report.kept.tolist())
    assert len(kept & set(range(16))) >= 14 and len(kept - set(range(16))) <= 6
    assert short.positions.tolist() == sorted(kept) and report.information_kept > 0.9
    assert report.scores.shape == (64,)


def test_mi_beats_random_and_uniform_at_the_same_budget(fitted):
    critic, classes, image = fitted
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8))
    feats = image(5)
    hits = {}
    for method in ("mi", "random", "uniform"):
        kwargs = {"critic": critic, "context": classes[5:6]} if method == "mi" else {}
        _, report = truncate(seq, method=method, keep=16, features=feats, **kwargs)
        hits[method] = len(set(report.kept.tolist()) & set(range(16)))
    assert hits["mi"] > hits["random"] and hits["mi"] > hits["uniform"]


@pytest.mark.parametrize("method", ["random", "uniform", "norm", "divprune"])
def test_baselines_keep_the_budget_and_the_positions(method):
    seq = TokenSequence("audio", embeddings=torch.randn(40, 6), times=torch.arange(40) / 16.0)
    short, report = truncate(seq, method=method, keep_ratio=0.25)
    assert len(short) == report.tokens_out == 10
    assert torch.equal(short.times, seq.times[report.kept])
    assert torch.equal(short.positions, report.kept)


def test_tome_merges_similar_tokens_into_embeddings():
    feats = torch.cat([torch.ones(10, 4), -torch.ones(10, 4)]) + 0.01 * torch.randn(20, 4)
    merged, _, size = tome_merge(feats, 2)
    assert merged.shape == (2, 4) and size.sum() == 20
    seq = TokenSequence("audio", embeddings=feats, times=torch.arange(20) / 16.0)
    short, _ = truncate(seq, method="tome", keep=4)
    assert short.ids is None and short.embeddings.shape == (4, 4) and sum(short.meta["merged_sizes"]) == 20


def test_bad_inputs(fitted):
    critic, classes, image = fitted
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8))
    with pytest.raises(TruncationError, match="non-empty context"):
        truncate(seq, context=[], features=image(1), critic=critic)
    with pytest.raises(TruncationError, match="8-d"):
        truncate(seq, context=torch.randn(1, 5), features=image(1), critic=critic)
    with pytest.raises(TruncationError, match="token features are 3-d"):
        truncate(seq, context=classes[:1], features=torch.randn(64, 3), critic=critic)
    nan = image(1)
    nan[0, 0] = float("nan")
    with pytest.raises(TruncationError, match="NaN"):
        truncate(seq, context=classes[:1], features=nan, critic=critic)
    for ratio in (0.0, 1.5, -1):
        with pytest.raises(TruncationError, match="keep_ratio must be in"):
            truncate(seq, method="random", keep_ratio=ratio, features=image(1))
    with pytest.raises(TruncationError, match="threshold is for mi"):
        truncate(seq, method="random", threshold=0.2, features=image(1))
    with pytest.raises(TruncationError, match="only one of"):
        truncate(seq, keep=3, keep_ratio=0.5, features=image(1))


def test_a_sequence_shorter_than_the_budget_is_kept_whole():
    seq = TokenSequence("audio", embeddings=torch.randn(5, 6), times=torch.arange(5) / 16.0)
    short, report = truncate(seq, method="random", keep=10)
    assert len(short) == 5 and "not more than the budget" in report.notes[0]


def test_a_threshold_that_would_drop_everything_keeps_the_minimum(fitted):
    critic, classes, image = fitted
    seq = TokenSequence("image", ids=torch.arange(64), grid=(8, 8))
    short, report = truncate(seq, context=classes[:1], features=image(1), critic=critic, threshold=1e9, min_keep=2)
    assert len(short) == 2 and "kept the 2 highest" in report.notes[0]


def test_cli_truncate_with_a_baseline(tmp_path):
    seq = TokenSequence("audio", embeddings=torch.randn(32, 6), times=torch.arange(32) / 16.0, tokenizer="x")
    path = seq.save(tmp_path / "a.safetensors")
    result = CliRunner().invoke(
        app,
        [
            "truncate",
            str(path),
            "--method",
            "uniform",
            "--keep-ratio",
            "0.25",
            "--out",
            str(tmp_path / "short.safetensors"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tokens_out"] == 8 and report["kept"] == [0, 4, 9, 13, 18, 22, 27, 31]
    assert len(TokenSequence.load(tmp_path / "short.safetensors")) == 8
    bad = CliRunner().invoke(
        app,
        ["truncate", str(path), "--method", "random", "--keep-ratio", "2", "--out", str(tmp_path / "x.safetensors")],
    )
    assert bad.exit_code == 2 and "--keep-ratio" in bad.output and "must be in (0, 1]" in bad.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--method", "bogus", "--keep", "3"], "--method"),
        (["--method", "mi"], "--context"),
        (["--method", "uniform"], "--keep"),
        (["--method", "uniform", "--keep", "2", "--threshold", "0.2"], "--threshold"),
        (["--context", "a digit", "--out-of-domain", "skip"], "--out-of-domain"),
    ],
)
def test_cli_truncate_usage_errors_exit_2_and_name_the_flag(tmp_path, args, flag):
    seq = TokenSequence("audio", embeddings=torch.randn(8, 4), tokenizer="x")
    path = seq.save(tmp_path / "a.safetensors")
    result = CliRunner().invoke(app, ["truncate", str(path), *args, "--out", str(tmp_path / "o.safetensors")])
    assert result.exit_code == 2 and flag in result.output and "Traceback" not in result.output


def test_mi_on_audio_tokens_is_one_clear_line(tmp_path):
    seq = TokenSequence(
        "audio", ids=torch.zeros(8, 2, dtype=torch.long), embeddings=torch.randn(8, 256), tokenizer="av-tiny"
    )  # av-tiny's width: a file naming it is checked against it
    path = seq.save(tmp_path / "speech.safetensors")
    result = CliRunner().invoke(app, ["truncate", str(path), "--context", "hello", "--out", str(tmp_path / "o.st")])
    assert result.exit_code == 1 and "scores image tokens" in result.stderr and "divprune" in result.stderr
    assert "Traceback" not in result.output


def test_a_text_context_is_encoded_once_per_teacher(monkeypatch):
    import mmtok
    from mmtok import truncation

    critic = mmtok.get_model("critic-vq-text", kind="critic")
    teacher = truncation.critic_teacher(critic)
    calls = []
    encode = teacher.encode_text
    monkeypatch.setattr(teacher, "encode_text", lambda texts: calls.append(list(texts)) or encode(texts))
    monkeypatch.setattr(truncation.domain, "_text_contexts", {})
    first = truncation.context_embeddings(["a photo of the digit two", "a photo of the digit nine"], critic)
    again = truncation.context_embeddings(("a photo of the digit two", "a photo of the digit nine"), critic)
    other = truncation.context_embeddings("a photo of the digit two", critic)
    assert len(calls) == 2 and torch.equal(first, again)  # the repeated question was not encoded again
    torch.testing.assert_close(other[0], first[0])


# ------------------------------------------------------------------------- MI outside the critic's domain
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
HELD_OUT_DIGIT_QUESTIONS = (  # none is one of the 40 training captions
    [f"the digit {d}" for d in range(10)]
    + [f"handwritten {w}" for w in DIGIT_WORDS]
    + [f"a photo of the number {w}" for w in DIGIT_WORDS]
    + [f"an image of a {d}" for d in range(10)]
    + [f"the numeral {w}" for w in DIGIT_WORDS]
    + ["which digit is this", "what number is written here", "is this a nine?", "a handwritten number", "a digit"]
    + ["a number written on a photo", "read the digit", "the digit in the image", "a written 4", "number eight"]
)
OTHER_QUESTIONS = (
    "a portrait of a woman in a navy uniform", "a cat sleeping on a sofa", "what is the weather like",
    "a red sports car", "a diagram of a plant cell", "a bowl of fruit on a table", "an astronaut",
    "the surface of the moon", "a man with a camera", "coins", "a brick wall", "galaxies in deep space",
    "the quarterly revenue report", "a dog playing fetch in the park", "a city skyline at night",
    "how many people are in this picture", "a photo", "a photo of a scene", "a page of text", "a woman smiling",
    "two men shaking hands", "a mountain lake at sunrise", "a plate of pasta", "a traffic sign",
    "an x-ray of a chest", "a bird on a branch", "a crowded street market", "a child riding a bicycle",
    "a screenshot of a spreadsheet", "a painting of flowers", "a soldier in uniform", "a wedding photo",
    "what colour is the car", "describe this image", "a close-up of an eye", "a forest path in autumn",
    "a laptop on a desk", "the front page of a newspaper", "a football match", "a bridge over a river",
)  # fmt: skip


@pytest.fixture(scope="module")
def shipped_critic():
    import mmtok

    return mmtok.get_model("critic-vq-text", kind="critic")


def test_the_shipped_critic_knows_the_captions_it_was_trained_on(shipped_critic):
    from mmtok.models.data import DIGIT_TEMPLATES
    from mmtok.models.data import DIGIT_WORDS as TRAINED_WORDS
    from mmtok.truncation import known_contexts

    trained = {t.format(word=w, digit=d) for d, w in enumerate(TRAINED_WORDS) for t in DIGIT_TEMPLATES}
    assert set(known_contexts(shipped_critic)) == trained and len(trained) == 40  # train_critic.caption_bank's


def test_the_domain_measure_separates_held_out_digit_questions_from_other_questions(shipped_critic):
    """The calibration of DOMAIN_SIMILARITY_MIN (cosine similarity of the context's clip-tiny text embedding to the
    nearest of the 40 training captions): 0.92 lies above every one of 40 other questions (the highest, "the front
    page of a newspaper", is 0.897) and keeps 47 of 60 held-out digit questions in domain (median 0.958; the 13
    others, short or unusual phrasings such as "a digit" at 0.497, get the warning too)."""
    from mmtok.truncation import DOMAIN_SIMILARITY_MIN, context_embeddings, context_similarity

    with torch.no_grad():
        digits = context_similarity(context_embeddings(HELD_OUT_DIGIT_QUESTIONS, shipped_critic), shipped_critic)
        others = context_similarity(context_embeddings(list(OTHER_QUESTIONS), shipped_critic), shipped_critic)
    assert DOMAIN_SIMILARITY_MIN == 0.92 and len(digits) == 60 and len(others) == 40
    assert int((digits >= DOMAIN_SIMILARITY_MIN).sum()) == 47 and float(digits.median()) == pytest.approx(
        0.958, abs=0.01
    )
    assert int((others >= DOMAIN_SIMILARITY_MIN).sum()) == 0 and float(others.max()) == pytest.approx(0.897, abs=0.01)


@pytest.fixture(scope="module")
def astronaut_tokens(tmp_path_factory):
    import mmtok

    vq = mmtok.get_tokenizer("vq-clip-tiny")
    seq = vq.encode(mmtok.load(mmtok.sample_path("astronaut.png")), image_size=128)
    return seq, seq.save(tmp_path_factory.mktemp("tokens") / "astronaut.safetensors")


def test_an_out_of_domain_context_is_truncated_with_a_warning(astronaut_tokens, tmp_path):
    import mmtok

    seq, path = astronaut_tokens
    _, known = mmtok.truncate(seq, context="a photo of the digit seven")
    assert known.domain_warning is None and known.context_similarity > 0.99 and known.to_dict()["in_domain"]
    unknown = "a portrait of a woman in a navy uniform"
    short, report = mmtok.truncate(seq, context=unknown)  # the fallback: divprune at half the tokens
    assert report.context_similarity < 0.6 and report.domain_warning in report.notes
    assert "is far from what critic-vq-text was trained on" in report.domain_warning
    assert "so divprune chose the tokens (keep_ratio=0.5" in report.domain_warning
    expected, _ = mmtok.truncate(seq, method="divprune", keep_ratio=0.5)
    assert report.method == "divprune" and report.tokens_out == 128 and torch.equal(short.positions, expected.positions)
    _, budget = mmtok.truncate(seq, context=unknown, keep=40)  # a budget the call gives is the fallback's
    assert budget.method == "divprune" and budget.tokens_out == 40 and "keep=40" in budget.domain_warning
    _, own = mmtok.truncate(seq, context=unknown, out_of_domain="mi")  # the critic's choice, with the warning
    assert own.method == "mi" and f"the {own.tokens_out} of 256 tokens kept" in own.domain_warning
    with pytest.raises(TruncationError, match=r"far from what critic-vq-text was trained on.*refused"):
        mmtok.truncate(seq, context=unknown, out_of_domain="error")
    with pytest.raises(TruncationError, match="unknown out_of_domain 'skip'"):
        mmtok.truncate(seq, context=unknown, out_of_domain="skip")
    args = ["truncate", str(path), "--context", "a portrait of a woman in a navy uniform", "--json"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "short.safetensors")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["in_domain"] is False
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert line.startswith("warning: the context 'a portrait of a woman in a navy uniform' is far from")
    refused = CliRunner().invoke(
        app, [*args, "--out-of-domain", "error", "--out", str(tmp_path / "refused.safetensors")]
    )
    assert refused.exit_code == 1 and "refused (out_of_domain='error'" in refused.stderr
    assert not (tmp_path / "refused.safetensors").exists()


def test_an_audio_context_is_refused_with_the_reason(astronaut_tokens, tmp_path):
    import mmtok

    seq, path = astronaut_tokens
    speech = TokenSequence("audio", ids=torch.zeros(8, 2, dtype=torch.long), embeddings=torch.randn(8, 256))
    with pytest.raises(TruncationError, match="this context is audio tokens, not text: give the question as text"):
        mmtok.truncate(seq, context=speech)
    context = speech.save(tmp_path / "speech.safetensors")
    result = CliRunner().invoke(
        app, ["truncate", str(path), "--context", str(context), "--out", str(tmp_path / "o.safetensors")]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "(for speech, its transcript)" in result.stderr and "256-d" not in result.stderr


def test_truncate_on_a_shard_without_key_lists_its_keys(tmp_path):
    from mmtok.tokens import save_sequences

    seqs = {k: TokenSequence("audio", embeddings=torch.randn(8, 4)) for k in ("a.wav", "b.wav")}
    shard = save_sequences(tmp_path / "shard.safetensors", seqs)
    args = ["truncate", str(shard), "--method", "uniform", "--keep", "2", "--out", str(tmp_path / "o.safetensors")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {shard}: holds 2 sequences (a.wav, b.wav); choose one with --key"


# ------------------------------------------------------------------------------- the critic's window table
def test_scores_from_the_window_table_equal_the_critics_own_on_complete_and_truncated_grids(
    shipped_critic, astronaut_tokens
):
    """``pmi_on_grids`` (a lookup per window offset and code) is the critic's ``pmi`` over ``local_codes`` (the
    neighbourhood product): on a whole photo and on one with two thirds of its tokens gone (absent neighbours)."""
    import mmtok
    from mmtok.truncation import context_embeddings, mi_scores_on_grids

    vq = mmtok.get_tokenizer("vq-clip-tiny")
    seq, _ = astronaut_tokens
    shortened, _ = truncate(seq, method="random", keep=85, seed=3)
    with torch.no_grad():
        context = context_embeddings(["a photo of the digit seven", "a photo of the digit two"], shipped_critic)
        fast = mi_scores_on_grids([seq, shortened], shipped_critic, context, vq)
        for s, scores in zip([seq, shortened], fast, strict=True):
            slow = shipped_critic.pmi(shipped_critic.token_features(s, vq), context).amax(dim=1)
            assert scores.shape == (len(s),)
            torch.testing.assert_close(scores, slow, atol=1e-4, rtol=1e-4)


def test_truncate_many_makes_the_selections_truncate_makes_one_by_one(shipped_critic):
    import mmtok
    from mmtok.truncation import truncate_many

    vq = mmtok.get_tokenizer("vq-clip-tiny")
    seqs = [vq.encode(mmtok.load(mmtok.sample_path(name)), image_size=128) for name in ("astronaut.png", "chelsea.jpg")]
    seqs.append(truncate(seqs[0], method="uniform", keep=100)[0])
    context = "a photo of the digit four"
    for kwargs in ({"threshold": 0.18}, {"keep": [10, 50, 30]}, {"keep_ratio": 0.4}):
        many = truncate_many(seqs, context=context, critic=shipped_critic, tokenizer=vq, **kwargs)
        for i, (seq, (out, report)) in enumerate(zip(seqs, many, strict=True)):
            one = {k: (v[i] if isinstance(v, list) else v) for k, v in kwargs.items()}
            alone, expected = truncate(seq, context=context, critic=shipped_critic, tokenizer=vq, **one)
            assert report.kept.tolist() == expected.kept.tolist() and torch.equal(out.positions, alone.positions)
            assert report.information_kept == pytest.approx(expected.information_kept, abs=1e-5)
    with pytest.raises(TruncationError, match="keep gives 2 counts for 3 sequences"):
        truncate_many(seqs, context=context, keep=[1, 2], critic=shipped_critic)


def test_smile_over_distinct_captions_is_smile_over_the_whole_pair_matrix():
    from mmtok.models.train_critic import smile_over_captions

    torch.manual_seed(0)
    caption = torch.tensor([0, 0, 1, 2, 2, 2, 3, 1])  # each token's own caption among 4 distinct ones
    scores = torch.randn(8, 4, requires_grad=True)
    fast = smile_over_captions(scores, caption)
    whole = scores[:, caption]  # (8, 8): token i with token j's caption; the diagonal is the joint pair
    reference = mi.smile(whole, torch.eye(8, dtype=torch.bool)).value
    torch.testing.assert_close(fast, reference)
    (g_fast,) = torch.autograd.grad(fast, scores)
    (g_ref,) = torch.autograd.grad(reference, scores)
    torch.testing.assert_close(g_fast, g_ref)


def test_tokens_of_another_tokenizer_take_the_fallback_with_the_reason(astronaut_tokens):
    """critic-vq-text reads vq-clip-tiny's codes; vq-photo-256's codes mean something else to it."""
    import mmtok

    photo = mmtok.get_tokenizer("vq-photo-256").encode(mmtok.load(mmtok.sample_path("astronaut.png")))
    short, report = mmtok.truncate(photo, context="a photo of the digit seven", keep=64)
    assert report.method == "divprune" and report.tokens_out == 64 and len(short) == 64
    assert (
        "these are vq-photo-256 tokens and critic-vq-text was trained on vq-clip-tiny tokens" in report.domain_warning
    )
    assert report.to_dict()["in_domain"] is False
    with pytest.raises(TruncationError, match="these are vq-photo-256 tokens"):
        mmtok.truncate(photo, context="a photo of the digit seven", out_of_domain="error")
    _, kept_anyway = mmtok.truncate(photo, context="a photo of the digit seven", out_of_domain="mi")
    assert kept_anyway.method == "mi" and any("these are vq-photo-256 tokens" in n for n in kept_anyway.notes)
    seq, _ = astronaut_tokens  # the critic's own tokenizer: no fallback
    assert mmtok.truncate(seq, context="a photo of the digit seven")[1].method == "mi"
