#!/usr/bin/env python3
"""Train the retrieval Llama of models/retrieval-llama from scratch on CPU, deterministically.

    PYTHONPATH=python python3 scripts/train_retrieval_model.py --out models/retrieval-llama

The task is :mod:`snapkv.tasks.retrieval` (needles ``KEY k1 k2 v1 .. vm END`` in filler, the
question ``QRY k1 k2`` ending the prompt). Training differs from the evaluated prompts in
four ways, all to learn more per CPU second:

* denser prompts: up to ``Stage.needles`` needles, 0-2 distractors, 1-3 value tokens;
* after the prompt and its answer + ``END`` come questions about the prompt's other needles
  (``QRY k1 k2 v1 .. vm END``), so one prefill teaches several retrievals; the loss is on the
  answer and ``END`` tokens only;
* early on, an auxiliary loss: layer 0's output (read through the final norm and the output
  projection) must predict the previous token at every filler position, which makes layer 0
  the previous-token half of an induction head (``Stage.copy``);
* a curriculum (``CURRICULUM``; a stage ends when its running accuracy reaches ``until``):
  mostly short prompts, whose position ids jump ahead once, at a filler position, by a random
  skip (PoSE-style), so that the relative distances between needle and question cover the
  whole 4096-token range; and a few real long prompts so that attention learns to pick the
  needle out of thousands of filler tokens.

Everything is fixed by ``--seed``: the weights' initialisation, every training prompt and the
order of steps. With ``torch.use_deterministic_algorithms(True)`` and a fixed thread count
(``--threads``, default 1: on a shared machine a second thread mostly spins) a rerun on the
same machine reproduces the weights bit for bit. The script prints its wall and CPU time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from snapkv.tasks import retrieval as task  # noqa: E402

MAX_LENGTH = 4096
MAX_POSITIONS = MAX_LENGTH + 64


def model_config(args):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=task.VOCAB_SIZE,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=args.rope_theta,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=args.tie,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        bos_token_id=task.BOS,
        eos_token_id=task.END,
        pad_token_id=task.PAD,
    )
    # SDPA for training (the same math as eager, faster on long prompts); the checkpoint loads
    # with eager attention (snapkv.tasks.checkpoint).
    cfg._attn_implementation = "sdpa"
    return cfg


# ---------------------------------------------------------------------------------------------
# Curriculum


@dataclasses.dataclass(frozen=True)
class Stage:
    """At most ``steps`` optimizer steps whose prompts are drawn like this; the stage ends early
    once the token accuracy over its last ``WINDOW`` steps reaches ``until``."""

    steps: int
    lengths: tuple       # prompt lengths, one drawn per step (uniformly)
    tokens: int          # prompt tokens per step: batch size = tokens // length
    needles: int         # at most this many non-distractor needles (as many as fit)
    distractors: int     # 0..distractors distractor needles
    answer: int          # 1..answer value tokens
    pose: float = 0.0    # probability that a prompt's positions skip ahead (see positions())
    until: float = 2.0   # accuracy that ends the stage early (above 1: never)
    copy: float = 0.0    # weight of the previous-token loss on filler (see training_sequence)
    dense: bool = False  # always as many needles as fit (else 1 .. that many)


WINDOW = 50

# Matching first: prompts of 64 tokens packed with 8 needles (so copying *any* value token
# present is worth little), with the auxiliary previous-token loss on layer 0's output so that
# layer 0 becomes the previous-token half of an induction head early (without it, layer 0
# learns to copy value tokens and the model sits on that plateau; with the loss on the final
# output instead, layer 1 takes the previous-token role, the wrong order). Then distractors,
# longer answers and longer prompts. The last two stages run for a fixed number of steps (the
# last one with the learning rate decaying): prompts up to 512 tokens whose positions skip
# ahead (PoSE), so needle-question distances cover 4096, and real prompts of 1024 and 2048
# tokens, so attention picks the needle out of thousands of filler tokens.
# Not yet validated end to end: no run of this curriculum has met the accuracy targets so far.
CURRICULUM = (
    Stage(steps=3000, lengths=(64,), tokens=512, needles=8, distractors=0, answer=1,
          copy=1.0, dense=True, until=0.95),
    Stage(steps=800, lengths=(48, 64), tokens=512, needles=4, distractors=1, answer=2,
          copy=0.2, until=0.95),
    Stage(steps=800, lengths=(64, 96, 128), tokens=1024, needles=6, distractors=2, answer=3,
          pose=0.3, until=0.97),
    Stage(steps=500, lengths=(128, 256, 512), tokens=2048, needles=8, distractors=2, answer=3,
          pose=0.5),
    Stage(steps=150, lengths=(1024, 2048), tokens=4096, needles=8, distractors=2, answer=3,
          pose=0.5),
)


# ---------------------------------------------------------------------------------------------
# Training data


def training_sequence(rng, length, stage, extra_questions):
    """``(sample, tokens, targets, previous)``: a dense prompt of ``length`` tokens, its answer
    and questions about its other needles; ``targets[i]`` is the token position ``i`` must
    predict, or -1; ``previous[i]`` is the token before filler position ``i`` of the prompt, or
    -1 (the auxiliary previous-token target, see :class:`Stage`)."""
    room = (length - task.SINK - task.TAIL) // (task.KEY_LEN + stage.answer + 2)
    room -= stage.distractors
    most = max(1, min(stage.needles, room))
    spec = task.VariantSpec(needles=(most if stage.dense else 1, most),
                            distractors=(0, stage.distractors), answer_len=(1, stage.answer))
    sample = task.draw(rng, length, spec)
    tokens = list(sample.ids)
    targets = [-1] * length
    asked = sample.asked
    # The answer right after the prompt (the evaluated form), then the other needles in a
    # random order, each asked with its own question.
    for token in (*asked.value, task.END):
        targets[-1] = token
        tokens.append(token)
        targets.append(-1)
    others = [n for n in sample.needles if n is not asked]
    for i in rng.permutation(len(others))[:extra_questions]:
        needle = others[i]
        question = (task.QRY, *needle.key)
        tokens.extend(question)
        targets.extend([-1] * len(question))
        for token in (*needle.value, task.END):
            targets[-1] = token
            tokens.append(token)
            targets.append(-1)
    previous = np.full(len(tokens), -1, np.int64)
    filler = np.isin(sample.ids, np.asarray(task.FILLER))
    filler[0] = False
    previous[:length][filler] = sample.ids[np.flatnonzero(filler) - 1]
    return sample, np.asarray(tokens, np.int64), np.asarray(targets, np.int64), previous


def positions(rng, sample, total, skip):
    """Position ids ``[total]``: ``0..total-1``, plus ``skip`` from a filler position on that
    lies between the sink and the question (PoSE-style), so the prompt reads as if it were
    ``skip`` tokens longer."""
    pos = np.arange(total, dtype=np.int64)
    if skip <= 0:
        return pos
    covered = np.zeros(sample.length, dtype=bool)
    for needle in sample.needles:
        covered[needle.start:needle.start + needle.length] = True
    candidates = np.flatnonzero(~covered[task.SINK:sample.length - task.TAIL]) + task.SINK
    cut = int(rng.choice(candidates))
    pos[cut:] += skip
    return pos


def batch(rng, stage, extra_questions):
    """One step's ``(length, tokens, positions, targets, previous)``, each ``[B, T]``."""
    length = int(rng.choice(stage.lengths))
    size = max(1, stage.tokens // length)
    rows = []
    for _ in range(size):
        sample, tokens, targets, previous = training_sequence(rng, length, stage,
                                                              extra_questions)
        skip = 0
        if rng.random() < stage.pose:
            skip = int(rng.integers(0, MAX_LENGTH - length + 1))
        rows.append((tokens, positions(rng, sample, len(tokens), skip), targets, previous))
    width = max(len(r[0]) for r in rows)
    tok = np.full((size, width), task.PAD, np.int64)
    pos = np.zeros((size, width), np.int64)
    tgt = np.full((size, width), -1, np.int64)
    prev = np.full((size, width), -1, np.int64)
    for i, (t, p, g, b) in enumerate(rows):
        tok[i, :len(t)], tgt[i, :len(t)], prev[i, :len(t)] = t, g, b
        # Padding continues the positions (it is after every target, so it never matters).
        pos[i] = np.concatenate([p, p[-1] + 1 + np.arange(width - len(p))])
    return (length, torch.from_numpy(tok), torch.from_numpy(pos), torch.from_numpy(tgt),
            torch.from_numpy(prev))


# ---------------------------------------------------------------------------------------------
# Evaluation (teacher forced: every answer token is the argmax <=> greedy decoding answers)


@torch.no_grad()
def answer_correct(model, sample):
    ids = torch.from_numpy(np.concatenate([sample.ids, sample.answer[:-1]]))[None]
    hidden = model.model(input_ids=ids).last_hidden_state[0, sample.length - 1:]
    predicted = model.lm_head(hidden).argmax(-1).numpy()
    return bool(np.array_equal(predicted, sample.answer))


def accuracy(model, length, n, seed, variant=task.DEFAULT_VARIANT):
    model.eval()
    hits = sum(answer_correct(model, s) for s in task.samples(n, length, seed, variant))
    model.train()
    return hits / n


# ---------------------------------------------------------------------------------------------


def new_model(args):
    from transformers import LlamaForCausalLM

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(model_config(args))
    model.train()
    return model


def new_optimizer(model, args):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.98), eps=1e-8)


def learning_rate(step, stage_step, stage, last, args):
    """Linear warmup over the first ``--warmup`` steps, then ``--lr``; over the last stage a
    cosine decay to ``lr * min_lr``."""
    lr = args.lr * min(1.0, (step + 1) / args.warmup)
    if last:
        progress = stage_step / max(1, stage.steps - 1)
        lr *= args.min_lr + (1 - args.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
    return lr


def train(model, optimizer, stages, args, log, rng):
    """Run ``stages``; returns the history (one entry per ``--log-every`` steps and one per
    stage change)."""
    history, logged, recent = [], [], []
    start, cpu = time.time(), time.process_time()
    step = 0
    for index, stage in enumerate(stages):
        last = index == len(stages) - 1
        recent.clear()
        for stage_step in range(stage.steps):
            lr = learning_rate(step, stage_step, stage, last, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            length, tok, pos, tgt, prev = batch(rng, stage, args.extra_questions)
            out = model.model(input_ids=tok, position_ids=pos,
                              output_hidden_states=bool(stage.copy))
            hidden = out.last_hidden_state
            mask = tgt >= 0
            logits = model.lm_head(hidden[mask])
            loss = torch.nn.functional.cross_entropy(logits, tgt[mask])
            if stage.copy:
                # Read the previous token out of the first layer's output (through the final
                # norm and the output projection): a previous-token head in layer 0.
                aux = prev >= 0
                first = model.model.norm(out.hidden_states[1][aux])
                loss = loss + stage.copy * torch.nn.functional.cross_entropy(
                    model.lm_head(first), prev[aux])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            correct = (logits.argmax(-1) == tgt[mask]).float().mean().item()
            logged.append((loss.item(), correct))
            recent.append(correct)
            del recent[:-WINDOW]
            step += 1
            done = len(recent) == WINDOW and np.mean(recent) >= stage.until
            if step % args.log_every == 0 or done or stage_step == stage.steps - 1:
                entry = dict(step=step, stage=index, length=length, lr=round(lr, 7),
                             loss=round(float(np.mean([w[0] for w in logged])), 4),
                             token_accuracy=round(float(np.mean([w[1] for w in logged])), 4),
                             seconds=round(time.time() - start, 1),
                             cpu_seconds=round(time.process_time() - cpu, 1))
                logged = []
                if args.eval_every and (step % args.eval_every == 0 or (last and done)):
                    for L in args.eval_lengths:
                        entry[f"acc@{L}"] = accuracy(model, L, args.eval_samples, 10_000 + step)
                history.append(entry)
                log(json.dumps(entry))
            if done:
                break
        log(f"stage {index} ended after step {step}")
    return history


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="save_pretrained directory (and training.json)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--min-lr", type=float, default=0.1, help="final lr / lr")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--extra-questions", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=256)
    p.add_argument("--tie", action=argparse.BooleanOptionalAction, default=True,
                   help="tie the input embedding and the output projection")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-lengths", type=int, nargs="+", default=[512])
    p.add_argument("--eval-samples", type=int, default=32)
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    model = new_model(args)
    optimizer = new_optimizer(model, args)
    rng = np.random.default_rng(np.random.SeedSequence([args.seed, 1]))
    start = time.time()
    cpu = time.process_time()
    history = train(model, optimizer, CURRICULUM, args, log, rng)
    seconds, cpu_seconds = time.time() - start, time.process_time() - cpu
    print(f"trained {history[-1]['step']} steps in {seconds:.0f} s wall, {cpu_seconds:.0f} s CPU "
          f"({args.threads} thread(s))", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(args.out)
        (args.out / "training.json").write_text(json.dumps(dict(
            command="scripts/train_retrieval_model.py " + " ".join(argv or sys.argv[1:]),
            args={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            curriculum=[dataclasses.asdict(s) for s in CURRICULUM],
            seconds=round(seconds, 1), cpu_seconds=round(cpu_seconds, 1), history=history,
            versions=dict(torch=torch.__version__, numpy=np.__version__)), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
