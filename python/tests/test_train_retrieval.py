"""scripts/train_retrieval_model.py: its training sequences and its determinism (a few steps of a
tiny model; the real run is far too long for a test)."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from snapkv.tasks import retrieval as task  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_retrieval_model.py"


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("train_retrieval_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _stage(train, **kw):
    base = dict(steps=2, lengths=(64,), tokens=128, needles=8, distractors=1, answer=3,
                guide=1.0, dense=True)
    return train.Stage(**{**base, **kw})


def test_sequence_targets(train):
    rng = np.random.default_rng(3)
    sample, tokens, targets, source = train.training_sequence(rng, 64, _stage(train), 8)
    assert tokens[:64].tolist() == sample.ids.tolist()
    # Every needle is asked once: the prompt's own question first, then the others.
    asked = [sample.asked] + [n for n in sample.needles if n is not sample.asked]
    assert len(asked) == len(sample.needles) >= 2
    expected = [t for n in asked for t in (*n.value, task.END)]
    got = targets[targets >= 0].tolist()
    assert sorted(got) == sorted(expected)
    first = [*sample.answer.tolist(), task.END]
    assert got[:len(first)] == first and targets[63] == sample.answer[0]
    # Each target is the token that follows its position.
    where = np.flatnonzero(targets >= 0)
    assert (tokens[where + 1] == targets[where]).all()
    # The guide's source: the needle position holding each target, and only for targets.
    assert ((source >= 0) == (targets >= 0)).all()
    assert (sample.ids[source[where]] == targets[where]).all()
    assert (source[where] < 64).all()


def test_dense_fills_the_prompt(train):
    rng = np.random.default_rng(0)
    for _ in range(5):
        sample, *_ = train.training_sequence(rng, 64, _stage(train, distractors=0, answer=1), 8)
        assert len(sample.needles) == 8  # (64 - SINK - TAIL) // 5


def test_batch_positions_skip(train):
    rng = np.random.default_rng(1)
    _, tok, pos, tgt, src = train.batch(rng, _stage(train, pose=1.0), 4)
    assert tok.shape == pos.shape == tgt.shape == src.shape
    jumps = (pos[:, 1:] - pos[:, :-1])
    assert ((jumps == 1) | (jumps > 1)).all()
    assert (jumps > 1).sum(dim=1).le(1).all()
    assert int(pos.max()) < train.MAX_POSITIONS


def test_training_is_deterministic(train):
    args = train.parse(["--hidden", "64", "--intermediate", "64", "--log-every", "1"])
    stages = (_stage(train, steps=3, tokens=256),)
    torch.set_num_threads(1)

    def run():
        model = train.new_model(args)
        optimizer = train.new_optimizer(model, args)
        rng = np.random.default_rng(np.random.SeedSequence([args.seed, 1]))
        history = train.train(model, optimizer, stages, args, lambda m: None, rng)
        return model, history

    first, history = run()
    second, _ = run()
    assert [h["step"] for h in history] == [1, 2, 3]
    assert all(np.isfinite(h["loss"]) for h in history)
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)


def test_guide_loss_rewards_the_circuit(train):
    """The guide loss is lower for attention on the previous tokens and on the source than for
    uniform attention, and it ignores PoSE jumps and padding."""
    rng = np.random.default_rng(2)
    _, tok, pos, tgt, src = train.batch(rng, _stage(train, tokens=128), 4)
    B, T = tok.shape
    causal = torch.tril(torch.ones(T, T))
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(B, 4, T, T)
    circuit0 = uniform.clone()
    circuit0[:, 0] = torch.diag(torch.ones(T - 1), -1)
    circuit0[:, 1] = torch.diag(torch.ones(T - 2), -2)
    circuit1 = uniform.clone()
    rows, cols = torch.nonzero(src >= 0, as_tuple=True)
    circuit1[rows, :, cols] = 0.0
    circuit1[rows, :, cols, src[rows, cols]] = 1.0
    base = train.guide_loss((uniform, uniform), tok, pos, src)
    assert train.guide_loss((circuit0, uniform), tok, pos, src) < base
    assert train.guide_loss((uniform, circuit1), tok, pos, src) < base
    best = train.guide_loss((circuit0, circuit1), tok, pos, src)
    assert float(best) < 1e-4
