"""The training skeleton (``mmtok.models.training.Loop``), the spec every trainer is (``TrainSpec``: config, options,
the saved record) and the five trainers on it: each kind trains a tiny
config, checkpoints, and a run resumed from its checkpoint ends with the uninterrupted run's weights and log, bit
for bit; batches come in DataLoader's / DistributedSampler's order from any batch on; gradient clipping and
evaluation hooks; two processes under torchrun (gloo) take the one-process step on the same global batch, and a
backbone (a single-process trainer before the skeleton) trains, resumes and saves on rank 0 with both ranks'
weights equal."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import mmtok
from mmtok.errors import CheckpointError, ConfigError
from mmtok.models.teacher import Teacher
from mmtok.models.training import STATE_FILE, Distributed, Job, Loop, LoopConfig, Part, ShuffledBatches, TrainSpec
from mmtok.models.vq import VQConfig, VQTokenizer

KINDS = ("clip", "vq", "av", "critic", "backbone")


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    """Feature and token caches in a folder of this module's own (the user cache stays untouched)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMTOK_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A tiny CLIP teacher and a VQ tokenizer on it (what the vq, critic and backbone configs name)."""
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    from tests.makers import tiny_teacher_config  # here: the torchrun children import this module without tests/

    teacher_cfg = tiny_teacher_config()
    Teacher(teacher_cfg, name="clip-test").save_pretrained(root / "clip-test")
    torch.manual_seed(0)
    vq_cfg = VQConfig(
        image_size=32,
        channels=16,
        channel_mult=[1, 2, 2],
        codebook_size=64,
        teacher=str(root / "clip-test"),
        teacher_dim=32,
        align_width=32,
        align_heads=2,
    )
    tok = VQTokenizer(vq_cfg, name="vq-test")
    tok(torch.rand(16, 3, 32, 32) * 2 - 1)  # k-means initialises the codebook
    tok.eval().save_pretrained(root / "vq-test")
    return {"teacher": root / "clip-test", "tokenizer": root / "vq-test"}


MODEL = {
    "clip": """
        embed_dim = 32
        image_size = 32
        patch_size = 8
        vision_width = 32
        vision_layers = 1
        vision_head_width = 16
        text_context = 16
        text_width = 32
        text_heads = 2
        text_layers = 1""",
    "vq": """
        image_size = 32
        channels = 16
        channel_mult = [1, 2, 2]
        code_dim = 8
        codebook_size = 64
        teacher = "{teacher}"
        teacher_dim = 32
        align_width = 32
        align_heads = 2""",
    "av": """
        d_model = 32
        codebook_size = 16
        decoder_hidden = 32
        train_rates = [16.0, 25.0]""",
    "critic": """
        token_dim = 72
        context_dim = 32
        hidden = 16
        embed = 8
        layers = 1
        estimator = "smile"
        image_tokenizer = "{tokenizer}"
        teacher = "{teacher}"
        token_features = "local"
        radius = 1""",
    "backbone": """
        dim = 16
        layers = 1
        heads = 2
        image_tokenizer = "{tokenizer}"
        visual_input = "codes"
        stem_width = 8
        stem_sites = "kept"
        readout = "max"
        [model.moe]
        num_experts = 4
        hidden_dim = 16
        top_k = 2""",
}
TRAIN = {
    "clip": "batch_size = 8\nsamples = 40",
    "vq": "batch_size = 8\nsamples = 40\nadversarial_weight = 0.1\nadversarial_start = 2",  # discriminator from step 3
    "av": "audio_tokens = 64\nvideo_tokens = 32\nspeech_limit = 3\nvideo_clips = 2",
    "critic": (
        "images_per_step = 8\ntokens_per_image = 4\ntrain_examples = 24\nphoto_examples = 16\n"
        'heldout_examples = 8\nimage_size = 32\npairing = "region"'
    ),
    "backbone": (
        "batch_size = 8\ntrain_examples = 24\nheldout_examples = 8\nimage_size = 32\ndrop_fraction = 0.5\n"
        "drop_methods = { random = 0.5, divprune = 0.5 }"
    ),
}


def tiny_config(kind: str, folder: Path, tiny: dict[str, Path], steps: int = 6, every: int = 4) -> Path:
    """A config of ``kind`` that trains ``steps`` steps into ``folder``, logging each, checkpointing every ``every``."""
    model = textwrap.dedent(MODEL[kind]).format(teacher=tiny["teacher"], tokenizer=tiny["tokenizer"])
    train = (
        f"steps = {steps}\nwarmup_steps = 2\nlog_every = 1\ncheckpoint_every = {every}\n"
        f'out = "{folder}"\nname = "{kind}-run"\n{TRAIN[kind]}\n'
    )
    path = folder.parent / f"{folder.name}.toml"
    path.write_text(f"[model]{model}\n[train]\n{train}")
    return path


def train(kind: str, config: Path, **options) -> Path | None:
    module = __import__(f"mmtok.models.train_{kind}", fromlist=[f"train_{kind}"])
    if kind != "critic":
        options["device"] = "cpu"
    return getattr(module, f"train_{kind}")(config, command="test", **options)


def log_of(folder: Path) -> list[dict]:
    records = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def training_record(folder: Path) -> dict:
    record = json.loads((folder / "config.json").read_text())["training"]
    record["train"].pop("out")
    return record


@pytest.mark.parametrize("kind", KINDS)
def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights_and_log(kind, tiny, tmp_path):
    whole = tmp_path / "whole"
    assert train(kind, tiny_config(kind, whole, tiny)) == whole  # 6 steps; the checkpoint holds step 4
    with safe_open(str(whole / STATE_FILE), framework="pt") as f:
        assert json.loads(f.metadata()["mmtok_training_state"])["step"] == 4
    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)  # as if stopped after step 6's log line but before saving: steps 5-6 are redone
    (resumed / "model.safetensors").unlink()
    assert train(kind, tiny_config(kind, resumed, tiny), resume=True) == resumed
    expected, got = load_file(str(whole / "model.safetensors")), load_file(str(resumed / "model.safetensors"))
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected), kind
    assert log_of(resumed) == log_of(whole) and [r["step"] for r in log_of(whole)][:6] == [1, 2, 3, 4, 5, 6]
    assert training_record(resumed) == training_record(whole)
    if kind == "vq":
        assert (resumed / "discriminator_state.safetensors").is_file()


def test_a_new_run_in_a_used_folder_starts_a_new_log(tiny, tmp_path):
    out = tmp_path / "run"
    train("av", tiny_config("av", out, tiny))
    first = log_of(out)
    train("av", tiny_config("av", out, tiny))  # the same folder again, from step 0 (no --resume)
    assert log_of(out) == first and [r["step"] for r in first][:6] == [1, 2, 3, 4, 5, 6]


def test_batches_come_in_dataloaders_and_distributed_samplers_order_from_any_batch():
    data = TensorDataset(torch.arange(23))

    def reference(batch: int, count: int, rank: int = 0, world: int = 1) -> list[list[int]]:
        if world == 1:
            loader = DataLoader(data, batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(3))
        else:
            sampler = DistributedSampler(data, world, rank, seed=3)
            loader = DataLoader(data, batch, sampler=sampler, drop_last=True)
        out, epoch = [], 0
        while len(out) < count:
            if world > 1:
                sampler.set_epoch(epoch)
            out += [x.tolist() for (x,) in loader]
            epoch += 1
        return out[:count]

    def ours(batch: int, count: int, start: int, rank: int = 0, world: int = 1) -> list[list[int]]:
        batches = ShuffledBatches(data, batch, 3, rank=rank, world_size=world)
        batches.taken.fill_(start)
        return [next(batches)[0].tolist() for _ in range(count - start)]

    for batch in (4, 5):
        expected = reference(batch, 16)
        assert all(ours(batch, 16, start) == expected[start:] for start in (0, 1, 4, 9))
        for rank in (0, 1):
            expected = reference(batch, 8, rank, 2)
            assert all(ours(batch, 8, start, rank, 2) == expected[start:] for start in (0, 3))


class Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)


def toy_run(out: Path, ctx: Distributed | None = None, resume: bool = False, **config) -> tuple[Loop, list]:
    """Least squares on a fixed global batch of 8; each of ``ctx``'s processes takes its share."""
    ctx = ctx or Distributed()
    torch.manual_seed(0)
    model = Toy()
    x, y = torch.randn(8, 4), torch.randn(8)
    share = slice(ctx.rank * 8 // ctx.world_size, (ctx.rank + 1) * 8 // ctx.world_size)
    cfg = LoopConfig(**{"steps": 8, "lr": 0.1, "warmup_steps": 2, "log_every": 1, "out": str(out), **config})
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    loop = Loop(cfg, Part(model, optimizer), ctx=ctx, device=torch.device("cpu"), title="toy", resume=resume)
    seen = []

    def step(index: int) -> dict[str, torch.Tensor]:
        seen.append(model.training)
        loss = torch.nn.functional.mse_loss(model.linear(x[share]).squeeze(-1), y[share])
        loss.backward()
        return {"loss": loss.detach()}

    def evaluate() -> dict[str, float]:
        model.eval()
        return {"noise": float(torch.rand(()))}  # draws from torch's generator: the run must not notice

    loop.result = loop.run(step, evaluate=evaluate)
    return loop, seen


def test_gradients_are_clipped_and_their_norm_logged(tmp_path):
    loop, _ = toy_run(tmp_path / "a", grad_clip=0.01)
    norms = [r["grad_norm"] for r in log_of(tmp_path / "a")]
    assert len(norms) == 8 and min(norms) > 0.01  # the norm before clipping
    assert float(torch.cat([p.grad.flatten() for p in loop.model.parameters()]).norm()) == pytest.approx(0.01, rel=1e-5)
    plain, _ = toy_run(tmp_path / "b")
    assert "grad_norm" not in log_of(tmp_path / "b")[0]
    assert not torch.equal(loop.model.linear.weight, plain.model.linear.weight)


def test_evaluations_are_logged_and_leave_the_run_as_it_was(tmp_path):
    evaluated, modes = toy_run(tmp_path / "a", eval_every=3)
    plain, _ = toy_run(tmp_path / "b")
    assert torch.equal(evaluated.model.linear.weight, plain.model.linear.weight)  # random state forked
    assert all(modes)  # training mode restored after each evaluation
    assert [r["step"] for r in log_of(tmp_path / "a") if "noise" in r] == [3, 6]
    assert "noise" in evaluated.result.evaluation and evaluated.result.last.keys() == {"loss"}


def test_the_train_state_keeps_its_format_and_refuses_another_model(tmp_path):
    toy_run(tmp_path / "a", checkpoint_every=4)
    with safe_open(str(tmp_path / "a" / STATE_FILE), framework="pt") as f:
        header = json.loads(f.metadata()["mmtok_training_state"])
        keys = set(f.keys())
    assert {"step", "param_groups", "scalars", "meta"} <= set(header) and header["step"] == 8
    assert {"model/linear.weight", "model/linear.bias", "optim/0/exp_avg", "rng/torch"} <= keys
    assert all(k.split("/")[0] in ("model", "optim", "rng", "state") for k in keys)
    other = torch.nn.Linear(3, 1)
    cfg = LoopConfig(steps=8, out=str(tmp_path / "a"))
    part = Part(other, torch.optim.AdamW(other.parameters()))
    with pytest.raises(CheckpointError, match="does not match the model"):
        Loop(cfg, part, ctx=Distributed(), device=torch.device("cpu"), title="x", resume=True)


@dataclasses.dataclass
class ToyModelConfig:
    teacher: str = "config's teacher"


@dataclasses.dataclass
class ToyTrainConfig(LoopConfig):
    data: str = ""


class SavedToy(Toy):
    def save_pretrained(self, folder: str, trained_by: str, training: dict) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "record.json").write_text(json.dumps({"trained_by": trained_by, **training}))


def toy_spec(seen: list, **spec) -> TrainSpec:
    """A trainer whose build notes the config sections it was given."""

    def build(run) -> Job:
        seen.append((run.model.teacher, run.train.data))
        model = SavedToy()

        def step(index: int) -> dict:
            model.linear(torch.ones(4)).square().sum().backward()
            return {}

        return Job(Part(model, torch.optim.SGD(model.parameters())), step, record=lambda result: {"extra": 1})

    return TrainSpec("toy", ToyModelConfig, ToyTrainConfig, build, **spec)


def test_a_spec_trains_saves_its_record_and_takes_only_its_own_options(tmp_path):
    config = tmp_path / "toy.toml"
    config.write_text(f'[train]\nsteps = 2\ndata = "config data"\nout = "{tmp_path / "out"}"\n')
    seen: list = []
    train_toy = toy_spec(seen, options={"teacher": "model", "data": "train"})
    assert train_toy(config, teacher="given teacher", data=None, device="cpu") == tmp_path / "out"
    assert seen == [("given teacher", "config data")]  # an option not given leaves the config's key
    record = json.loads((tmp_path / "out" / "record.json").read_text())
    assert record["trained_by"] == f"mmtok train toy {config}" and record["steps"] == 2 and record["extra"] == 1
    assert record["train"]["data"] == "config data"
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        train_toy(config, colour="red", device="cpu")
    with pytest.raises(ConfigError, match="trains on the cpu only"):
        toy_spec(seen, device="cpu")(config, device="cuda")


TWO_PROCESSES = """
import json, os, shutil, sys
from pathlib import Path
import torch, torch.distributed as dist
sys.path.insert(0, {tests!r})
dist.init_process_group("gloo")
rank = dist.get_rank()
from mmtok.models import training
from mmtok.models.train_backbone import train_backbone
from test_training import toy_run

root = Path({root!r})
loop, _ = toy_run(root / "toy", training.Distributed(rank, 2, rank), grad_clip=0.5)
if rank == 0:
    (root / "toy.json").write_text(json.dumps(loop.model.linear.weight.tolist()))

loops = []
run = training.Loop.run
def keep(self, *args, **kwargs):
    loops.append(self)
    return run(self, *args, **kwargs)
training.Loop.run = keep

def weights_agree():
    flat = torch.cat([p.detach().cpu().flatten() for p in loops[-1].model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(copies, flat)
    return bool(torch.equal(copies[0], copies[1]))

returned = [str(train_backbone(root / "whole.toml", device="cpu", command="test"))]
agree = [weights_agree()]
if rank == 0:
    shutil.copytree(root / "whole", root / "resumed")
    (root / "resumed" / "model.safetensors").unlink()
dist.barrier()
returned.append(str(train_backbone(root / "resumed.toml", resume=True, device="cpu", command="test")))
agree.append(weights_agree())
(root / f"rank{{rank}}.json").write_text(json.dumps({{"returned": returned, "agree": agree}}))
dist.barrier()
dist.destroy_process_group()
os._exit(0)
"""


@pytest.fixture(scope="module")
def two_processes(tiny, tmp_path_factory) -> Path:
    """One torchrun launch with two gloo processes: the toy loop, then a backbone trained and resumed."""
    root = tmp_path_factory.mktemp("two")
    for name in ("whole", "resumed"):
        tiny_config("backbone", root / name, tiny)
    script = root / "run.py"
    script.write_text(TWO_PROCESSES.format(tests=str(Path(__file__).parent), root=str(root)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.mark.timeout(300)
def test_two_processes_take_the_one_process_step_on_the_same_global_batch(two_processes, tmp_path):
    single, _ = toy_run(tmp_path / "one", grad_clip=0.5)
    two = torch.tensor(json.loads((two_processes / "toy.json").read_text()))
    assert torch.allclose(two, single.model.linear.weight, atol=1e-6)  # mean of the halves' means: float rounding
    assert not torch.allclose(two, torch.nn.Linear(4, 1).weight, atol=1e-3)


@pytest.mark.timeout(300)
def test_a_backbone_trains_resumes_and_saves_on_rank_0_under_torchrun(two_processes):
    ranks = [json.loads((two_processes / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["returned"] == [str(two_processes / "whole"), str(two_processes / "resumed")]
    assert ranks[1]["returned"] == ["None", "None"]  # rank 0 saves and reports
    assert ranks[0]["agree"] == [True, True]  # averaged gradients: both ranks hold the same weights
    whole, resumed = (load_file(str(two_processes / n / "model.safetensors")) for n in ("whole", "resumed"))
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)  # two ranks resume exactly too
    assert log_of(two_processes / "resumed") == log_of(two_processes / "whole")
    state = load_file(str(two_processes / "whole" / STATE_FILE))
    assert not torch.equal(state["rng/data"], state["rank1/rng/data"])  # each rank draws its own examples
    assert mmtok.get_model(two_processes / "whole", kind="backbone").config.dim == 16
