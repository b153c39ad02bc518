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
* an auxiliary loss on the attention pattern (``Stage.guide``) that names the circuit to learn:
  in layer 0, query head 0 attends to the previous token and head 1 to the one before it (so a
  value token's residual stream holds the key that precedes it); in the last layer, the heads'
  mean attention from every answer-predicting position goes to the needle token it must copy
  (an induction head). Without it the model sits for thousands of steps on the plateau of
  copying *some* value token of the prompt, the classic delay before induction heads form;
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
        initializer_range=args.init_std,
        tie_word_embeddings=args.tie,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        bos_token_id=task.BOS,
        eos_token_id=task.END,
        pad_token_id=task.PAD,
    )
    # Eager attention: the guide loss reads the attention probabilities.
    cfg._attn_implementation = "eager"
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
    guide: float = 0.0   # weight of the attention-pattern loss (see guide_loss)
    dense: bool = False  # always as many needles as fit (else 1 .. that many)


WINDOW = 50

# Matching first: prompts of 64 tokens packed with 8 needles (so copying *any* value token
# present is worth little). Then distractors, longer answers and longer prompts. The last two
# stages run for a fixed number of steps (the last one with the learning rate decaying):
# prompts up to 512 tokens whose positions skip ahead (PoSE), so needle-question distances
# cover 4096, and real prompts of 1024 and 2048 tokens, so attention picks the needle out of
# thousands of filler tokens.
CURRICULUM = (
    Stage(steps=1500, lengths=(64,), tokens=512, needles=8, distractors=0, answer=1,
          guide=1.0, dense=True, until=0.95),
    Stage(steps=800, lengths=(48, 64), tokens=512, needles=4, distractors=2, answer=3,
          guide=1.0, until=0.95),
    Stage(steps=800, lengths=(64, 96, 128), tokens=1024, needles=6, distractors=2, answer=3,
          guide=1.0, pose=0.3, until=0.97),
    Stage(steps=400, lengths=(128, 256, 512), tokens=2048, needles=8, distractors=2, answer=3,
          guide=0.5, pose=0.5),
    Stage(steps=120, lengths=(1024, 2048), tokens=4096, needles=8, distractors=2, answer=3,
          guide=0.5, pose=0.5),
)


# ---------------------------------------------------------------------------------------------
# Training data


def training_sequence(rng, length, stage, extra_questions):
    """``(sample, tokens, targets, source)``: a dense prompt of ``length`` tokens, its answer
    and questions about its other needles; ``targets[i]`` is the token position ``i`` must
    predict, or -1; ``source[i]`` is the prompt position holding that token inside its needle
    (where the last layer should look, see :func:`guide_loss`), or -1."""
    room = (length - task.SINK - task.TAIL) // (task.KEY_LEN + stage.answer + 2)
    room -= stage.distractors
    most = max(1, min(stage.needles, room))
    spec = task.VariantSpec(needles=(most if stage.dense else 1, most),
                            distractors=(0, stage.distractors), answer_len=(1, stage.answer))
    sample = task.draw(rng, length, spec)
    tokens = list(sample.ids)
    targets = [-1] * length
    source = [-1] * length

    def answer(needle):
        # Predicting value token j (and then END) means copying needle position value_start + j.
        for j, token in enumerate((*needle.value, task.END)):
            targets[-1] = token
            source[-1] = needle.value_start + j
            tokens.append(token)
            targets.append(-1)
            source.append(-1)

    # The answer right after the prompt (the evaluated form), then the other needles in a
    # random order, each asked with its own question.
    answer(sample.asked)
    others = [n for n in sample.needles if n is not sample.asked]
    for i in rng.permutation(len(others))[:extra_questions]:
        question = (task.QRY, *others[i].key)
        tokens.extend(question)
        targets.extend([-1] * len(question))
        source.extend([-1] * len(question))
        answer(others[i])
    return sample, *(np.asarray(x, np.int64) for x in (tokens, targets, source))


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
    """One step's ``(length, tokens, positions, targets, source)``, each ``[B, T]``."""
    length = int(rng.choice(stage.lengths))
    size = max(1, stage.tokens // length)
    rows = []
    for _ in range(size):
        sample, tokens, targets, source = training_sequence(rng, length, stage, extra_questions)
        skip = 0
        if rng.random() < stage.pose:
            skip = int(rng.integers(0, MAX_LENGTH - length + 1))
        rows.append((tokens, positions(rng, sample, len(tokens), skip), targets, source))
    width = max(len(r[0]) for r in rows)
    tok = np.full((size, width), task.PAD, np.int64)
    pos = np.zeros((size, width), np.int64)
    tgt = np.full((size, width), -1, np.int64)
    src = np.full((size, width), -1, np.int64)
    for i, (t, p, g, c) in enumerate(rows):
        tok[i, :len(t)], tgt[i, :len(t)], src[i, :len(t)] = t, g, c
        # Padding continues the positions (it is after every target, so it never matters).
        pos[i] = np.concatenate([p, p[-1] + 1 + np.arange(width - len(p))])
    return (length, torch.from_numpy(tok), torch.from_numpy(pos), torch.from_numpy(tgt),
            torch.from_numpy(src))


def guide_loss(attentions, tok, pos, src, parts=None):
    """Mean negative log attention on the circuit's positions: layer 0's query head 0 on the
    previous token and head 1 on the one before (where the position ids are consecutive, i.e.
    not across a PoSE skip, and not on padding); the last layer's mean over heads on ``src``."""
    first, last = attentions[0], attentions[-1]
    terms = []
    for head, back in ((0, 1), (1, 2)):
        t = torch.arange(back, tok.shape[1])
        probs = first[:, head, t, t - back]
        valid = (pos[:, back:] - pos[:, :-back] == back) & (tok[:, back:] != task.PAD)
        terms.append(-torch.log(probs[valid] + 1e-6).mean())
    rows, cols = torch.nonzero(src >= 0, as_tuple=True)
    probs = last.mean(dim=1)[rows, cols, src[rows, cols]]
    terms.append(-torch.log(probs + 1e-6).mean())
    if parts is not None:
        parts.append([t.item() for t in terms])
    return sum(terms) / len(terms)


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
    history, logged, recent, parts = [], [], [], []
    start, cpu = time.time(), time.process_time()
    step = 0
    for index, stage in enumerate(stages):
        last = index == len(stages) - 1
        recent.clear()
        for stage_step in range(stage.steps):
            lr = learning_rate(step, stage_step, stage, last, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            length, tok, pos, tgt, src = batch(rng, stage, args.extra_questions)
            out = model.model(input_ids=tok, position_ids=pos,
                              output_attentions=bool(stage.guide))
            hidden = out.last_hidden_state
            mask = tgt >= 0
            logits = model.lm_head(hidden[mask])
            loss = torch.nn.functional.cross_entropy(logits, tgt[mask])
            if stage.guide:
                loss = loss + stage.guide * guide_loss(out.attentions, tok, pos, src, parts)
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
                if parts:
                    entry["guide"] = [round(float(x), 3) for x in np.mean(parts, axis=0)]
                logged, parts = [], []
                if args.eval_every and (step % args.eval_every == 0 or (last and done)):
                    for L in args.eval_lengths:
                        entry[f"acc@{L}"] = accuracy(model, L, args.eval_samples, 10_000 + step)
                history.append(entry)
                log(json.dumps(entry))
            if done:
                break
        log(f"stage {index} ended after step {step}")
    return history


# ---------------------------------------------------------------------------------------------
# The model card


CARD_LENGTHS = (512, 1024, 2048, 4096)
CARD_SAMPLES = 50
CARD_SEED = 1234  # not a training seed: these prompts were never trained on


def write_card(out: Path, log):
    """``README.md`` and ``loss.png`` in `out` from its checkpoint and ``training.json``: the
    task, the run, the loss curve and the full-cache accuracy per length (PyTorch, teacher
    forced, ``CARD_SAMPLES`` prompts of ``CARD_SEED`` per variant)."""
    from snapkv.tasks import checkpoint

    run = json.loads((out / "training.json").read_text())
    model = checkpoint.load(out)
    variants = ("mixed", "multitoken")
    table = {}
    for variant in variants:
        for length in CARD_LENGTHS:
            table[variant, length] = accuracy(model, length, CARD_SAMPLES, CARD_SEED, variant)
            log(f"card: {variant} L={length}: {table[variant, length]:.2f}")
    steps = [h["step"] for h in run["history"]]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot(steps, [h["loss"] for h in run["history"]], label="training loss")
        ax.plot(steps, [h["token_accuracy"] for h in run["history"]],
                label="answer-token accuracy")
        for change in [a["step"] for a, h in zip(run["history"], run["history"][1:])
                       if h["stage"] != a["stage"]]:
            ax.axvline(change, color="grey", lw=0.5)
        ax.set_xlabel("step (grey: curriculum stage changes)")
        ax.set_yscale("log")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "loss.png", dpi=100)
        plt.close(fig)
        curve = "![loss curve](loss.png)"
    except ImportError:
        curve = "(matplotlib was not installed: no loss curve)"
    args = run["args"]
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    rows = ["| variant | " + " | ".join(f"L = {L}" for L in CARD_LENGTHS) + " |",
            "|---|" + "---:|" * len(CARD_LENGTHS)]
    for variant in variants:
        rows.append(f"| `{variant}` | " + " | ".join(
            f"{table[variant, L]:.0%}" for L in CARD_LENGTHS) + " |")
    stages = "\n".join(
        f"| {i} | {s['steps']} | {', '.join(map(str, s['lengths']))} | {s['needles']} | "
        f"{s['distractors']} | {s['answer']} | {s['pose']} | {s['guide']} |"
        for i, s in enumerate(run["curriculum"]))
    ends = [a["step"] for a, h in zip(run["history"], run["history"][1:])
            if h["stage"] != a["stage"]]
    (out / "README.md").write_text(f"""# retrieval-llama

A {args['layers']}-layer Llama (hidden {args['hidden']}, {args['heads']} query / \
{args['kv_heads']} key-value heads of {args['hidden'] // args['heads']}, MLP \
{args['intermediate']}, RoPE theta {args['rope_theta']:g}, tied embeddings, vocabulary 256), \
trained from random weights on the synthetic retrieval task of `snapkv.tasks.retrieval` (key-value
needles in random filler, a question `QRY k1 k2` at the end, the answer is the needle's value).
It exists to test KV-cache compression on a model that really retrieves; it knows nothing else.
{size / 1e6:.1f} MB of f32 safetensors.

## Training

`{run['command']}` (deterministic: same machine and thread count, same weights), \
{run['history'][-1]['step']} steps, {run['seconds']:.0f} s wall / {run['cpu_seconds']:.0f} s CPU \
on {args['threads']} thread(s); torch {run['versions']['torch']}. AdamW, lr {args['lr']:g}, \
init std {args['init_std']:g}. Curriculum (a stage ends early at its accuracy threshold; \
the stages ended after steps {', '.join(map(str, ends))}):

| stage | at most steps | prompt lengths | needles | distractors | answer tokens | PoSE | guide |
|---:|---:|---|---:|---:|---:|---:|---:|
{stages}

Besides the answer loss, an auxiliary loss on the attention pattern ("guide") names the circuit:
layer 0 query heads 0 and 1 attend to the previous and the second previous token, and the last
layer's heads attend from each answer position to the needle token to copy. See the script's
docstring.

{curve}

## Accuracy with the full cache

Greedy answers (teacher forced: every answer token must be the argmax) in PyTorch, eager
attention, {CARD_SAMPLES} prompts per cell drawn with seed {CARD_SEED}:

{chr(10).join(rows)}

`mixed`: 1-4 needles, 0-2 distractor keys that differ from the asked key in one token, 1-3 answer
tokens; `multitoken`: one needle, 3 answer tokens (the variant `snapkv eval` uses by default).
Accuracy against the cache budget, through the compiled pipeline: `docs/eval.md`.
""")


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
    p.add_argument("--init-std", type=float, default=0.0625,
                   help="std of the initial weights (1/sqrt(hidden); HF's 0.02 is meant for "
                        "far wider models and starts every W_O W_V product near zero, where "
                        "copying is slow to learn)")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-lengths", type=int, nargs="+", default=[512])
    p.add_argument("--eval-samples", type=int, default=32)
    p.add_argument("--card-only", action="store_true",
                   help="only (re)write the model card of --out (README.md, loss.png)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.card_only:
        write_card(args.out, log)
        return 0
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
        write_card(args.out, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
