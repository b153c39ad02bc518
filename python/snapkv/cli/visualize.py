"""``snapkv visualize``: votes, pooled scores and kept positions per layer, computed by the
compiled model itself (``snapkv-expose-scores``)."""

from __future__ import annotations

import ctypes
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np

from .. import interface
from ..tools import ToolError
from .arguments import Formatter, add_prompt_options, layer_list, model_argument
from .compaction import check_window_capacity, describe_options, rewrite
from .messages import CLIError, progress, read_text, show
from .opt import count_selects, diagnostics, first_error, run_opt, verify_ir
from .result import Result, emit
from .running import check_limits, check_runnable, prompt, prompt_length, signatures
from .sources import resolve_model


def add_parser(commands, common_options, compaction):
    p = commands.add_parser(
        "visualize", parents=[common_options, compaction], formatter_class=Formatter,
        help="plot votes, pooled scores and kept positions per layer (PNG)",
        description="Writes DIR/layer<i>.png for each layer: for every cache head, the votes "
                    "(bars) and pooled scores (line) along the prompt, the positions the "
                    "selection keeps (red) and the window (shaded). Everything plotted comes "
                    "from the COMPILED model: snapkv-opt --snapkv-expose-scores adds a "
                    "snapkv.score next to each snapkv.select of the rewritten prefill (same "
                    "queries, keys and clauses) and makes prefill return its votes and pooled "
                    "scores, the select's indices and its Q/K; that prefill is compiled with "
                    "the CPU pipeline and run on the prompt. The numpy reference "
                    "(snapkv.reference.select) is run on the returned Q/K as a check. Needs "
                    "matplotlib.",
        epilog="examples:\n"
               "  snapkv visualize --out /tmp/snapkv-plots --window 8 --capacity 24\n"
               "  snapkv visualize --out /tmp/plots --window 8 --capacity 24 --gqa mean "
               "--pooling max --kernel 3 --layers 0")
    model_argument(p)
    add_prompt_options(p)
    p.add_argument("--out", "-o", type=Path, required=True, metavar="DIR",
                   help="directory for the PNGs (created if needed)")
    p.add_argument("--layers", type=layer_list, metavar="I,J",
                   help="only these layers (comma-separated; default: all)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show each compile step (snapkv-opt, snapkv-translate, clang)")
    p.set_defaults(func=run)


def exposed_layers(text: str, function: str = "prefill"):
    """The clauses of each select, as ``snapkv-expose-scores`` records them on `function`
    (``snapkv.exposed_scores = ["window=8 capacity=16 ...", ...]``), as dicts of strings."""
    described = interface.describe(text).function(function)
    exposed = described.attributes.get("snapkv.exposed_scores")
    if exposed is None:
        raise CLIError(f"@{function} has no snapkv.exposed_scores attribute")
    return [dict(item.split("=", 1) for item in clauses.split()) for clauses in exposed]


def compile_scores(rewritten: str, args, length: int):
    """Compiled @prefill of `rewritten` with the scores exposed; (function, layers, number of
    prefill's own results)."""
    from .. import runtime

    # Keep @prefill only (decode is not needed), then expose the scores.
    done = run_opt(["--symbol-privatize=exclude=prefill", "--symbol-dce",
                    "--snapkv-expose-scores=functions=prefill"], text=rewritten)
    if done.returncode != 0:
        raise CLIError(first_error(done.stderr))
    text = done.stdout
    layers = exposed_layers(text)
    for layer in args.layers or ():
        if layer >= len(layers):
            raise CLIError(f"--layers: the model has {len(layers)} layers (0..{len(layers) - 1})")
    window = min(int(clauses["window"]) for clauses in layers)
    if length < window:
        raise CLIError(f"the prompt has {length} tokens, fewer than the window ({window}); "
                       f"SnapKV needs L >= W (the compiled prefill would stop on its check)")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CLIError(f"cannot create {args.out}: {error.strerror or error}") from None
    progress(args.quiet, "compiling the rewritten prefill with snapkv.score outputs "
                         "(about 10-20 s the first time, then cached) ...")
    signature = runtime.signature(text, "prefill")
    try:
        library = runtime.compile_library(text, verbose=args.verbose, label="prefill")
        function = runtime.CompiledFunction(ctypes.CDLL(str(library.path)), "prefill",
                                            signature)
    except ToolError as error:
        raise CLIError(f"compiling the prefill with exposed scores failed: {error}") from None
    progress(args.quiet, f"  {'cached library' if library.from_cache else 'compiled'} in "
                         f"{library.seconds:.1f} s")
    return function, layers, len(signature.results) - 5 * len(layers)


def plot_layer(out: Path, layer: int, votes, pooled, indices, clauses, length: int,
                heads_are_query: bool, group: int, title_route: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads, prefix = votes.shape
    window = int(clauses["window"])
    capacity = int(clauses["capacity"])
    fig, axes = plt.subplots(heads, 1, figsize=(9, 1.55 * heads + 1.3), sharex=True,
                             squeeze=False)
    x = np.arange(prefix)
    for h in range(heads):
        ax = axes[h, 0]
        ax.bar(x, votes[h], width=0.8, color="#9ecae1", label="votes")
        ax.plot(x, pooled[h], color="#08519c", linewidth=1.4,
                label=f"pooled ({clauses.get('pooling', 'avg')}, kernel "
                      f"{clauses.get('kernel', '5')})")
        kept = np.array(sorted(int(i) for i in indices[h] if i < prefix), dtype=np.int64)
        if kept.size:
            ax.scatter(kept, pooled[h][kept], s=16, color="#d62728", zorder=3,
                       label="kept")
            ax.scatter(kept, np.zeros(kept.size), marker="|", s=60, color="#d62728", zorder=3)
        ax.axvspan(prefix - 0.5, length - 0.5, color="#fdae6b", alpha=0.35,
                   label="window (always kept)")
        name = f"q head {h} (kv {h // group})" if heads_are_query else f"kv head {h}"
        ax.set_ylabel(name, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlim(-0.5, length - 0.5)
        top = max(float(np.max(votes[h], initial=0)), float(np.max(pooled[h], initial=0)))
        if np.isfinite(top) and top > 0:
            ax.set_ylim(0, top * 1.08)
    axes[-1, 0].set_xlabel("prompt position", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    height = fig.get_figheight()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=7,
               frameon=False, bbox_to_anchor=(0.5, 1 - 0.45 / height))
    gqa = clauses.get("gqa", "expand")
    fig.suptitle(f"layer {layer}: L={length}, W={window}, C={capacity}, "
                 f"gqa {gqa}, order {clauses.get('order', 'position')} "
                 f"(keeps {min(length, capacity)} per head)\n{title_route}", fontsize=9,
                 y=1 - 0.05 / height, va="top")
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.5 / height, top=1 - 0.85 / height,
                        hspace=0.18)
    target = out / f"layer{layer}.png"
    fig.savefig(target, dpi=80)
    plt.close(fig)
    return target


@dataclass
class LayerPlot:
    """One layer's PNG, the numpy reference's check of the compiled select, and the prefix
    positions each cache head kept."""
    layer: int
    path: Path
    size: int                 # the PNG's bytes
    same: bool                # the reference keeps the same positions
    votes_diff: float         # max |votes diff| against the reference (L >= C only)
    pooled_diff: float
    dropped: bool             # L >= C: the selection had positions to drop
    window: int
    kept: List[List[int]]     # per head, the kept prefix positions

    def to_json(self) -> dict:
        return dict(layer=self.layer, path=str(self.path), bytes=self.size, same=self.same,
                    votes_diff=self.votes_diff, pooled_diff=self.pooled_diff,
                    dropped=self.dropped, window=self.window, kept=self.kept)

    def render_text(self, length: int) -> str:
        if self.dropped:
            check = (f"numpy reference on the compiled Q/K: "
                     f"{'same kept positions' if self.same else 'DIFFERENT kept positions'}, "
                     f"max |votes diff| {self.votes_diff:.2g}, max |pooled diff| "
                     f"{self.pooled_diff:.2g}")
        else:
            check = (f"L < C: nothing is dropped (numpy reference: "
                     f"{'same' if self.same else 'DIFFERENT'} indices)")
        prefix = length - self.window
        return "\n".join(
            [f"layer {self.layer}: wrote {show(self.path)} ({self.size:,} bytes); {check}"]
            + [f"  head {h}: kept prefix positions {kept} + window {prefix}..{length - 1}"
               for h, kept in enumerate(self.kept)])


@dataclass
class VisualizeResult(Result):
    """The PNGs `snapkv visualize` wrote for one prompt, a layer each."""
    model: Path
    length: int
    source: str               # where the prompt came from
    layers: List[LayerPlot]

    def to_json(self) -> dict:
        return dict(model=show(self.model), length=self.length, source=self.source,
                    layers=[layer.to_json() for layer in self.layers])

    def render_text(self) -> str:
        return "\n".join([f"snapkv visualize: {show(self.model)}; prompt {self.length} tokens "
                          f"({self.source})"]
                         + [layer.render_text(self.length) for layer in self.layers])


def compute(args) -> VisualizeResult:
    if importlib.util.find_spec("matplotlib") is None:
        raise CLIError("`snapkv visualize` needs matplotlib: pip install matplotlib")
    from .. import reference
    from ..runtime import CompiledCheckError

    path = resolve_model(args.model, args.quiet)
    text = read_text(path)
    verify_ir(path)
    prefill_sig, _ = signatures(text, path)
    vocab = prefill_sig.results[0].shape[-1] if prefill_sig.results else None
    check_limits(text, path, args, prompt_length(args), 0)
    ids, where = prompt(args, vocab)
    length = ids.shape[1]
    if count_selects(text):
        progress(args.quiet, f"{show(path)} already holds snapkv.select: using its selects "
                             f"as they are (the compaction options are not used)")
        rewritten = text
        check_runnable(text, path, length, 1, decode=False)
    else:
        check_window_capacity(args)
        if args.chunk or args.decode_interval:
            raise CLIError("--chunk and --decode-interval are for generate, compile "
                           "and ledger: visualize shows one-shot selections")
        check_runnable(text, path, length, args.window, decode=False)
        progress(args.quiet, f"rewriting {show(path)} ({describe_options(args)}) ...")
        rewritten, warnings, _ = rewrite(path, args)
        if warnings.strip():
            progress(False, diagnostics(warnings))
    function, layers, base = compile_scores(rewritten, args, length)
    try:
        outputs = function(ids)
    except CompiledCheckError as error:
        raise CLIError(f"the compiled model stopped: {error}") from None
    except ValueError as error:
        raise CLIError(str(error)) from None
    wanted = range(len(layers)) if args.layers is None else args.layers
    route = ("scores: the compiled model's own snapkv.score (same operands and clauses as its "
             "snapkv.select); kept: the compiled select's indices")
    plots = []
    for layer in wanted:
        clauses = layers[layer]
        q, k, indices, votes, pooled = outputs[base + 5 * layer: base + 5 * layer + 5]
        window, capacity = int(clauses["window"]), int(clauses["capacity"])
        options = dict(kernel=int(clauses.get("kernel", 5)), pooling=clauses.get("pooling", "avg"),
                       gqa=clauses.get("gqa", "expand"), order=clauses.get("order", "position"))
        if "scale" in clauses:
            options["scale"] = float(clauses["scale"])
        ref = reference.select(q, k, k, window, capacity, **options)
        dropped = length >= capacity
        votes_diff = float(np.max(np.abs(ref.votes - votes))) if dropped and votes.size else 0.0
        pooled_diff = float(np.max(np.abs(ref.pooled - pooled))) \
            if dropped and pooled.size else 0.0
        group = q.shape[1] // k.shape[1]
        target = plot_layer(args.out, layer, votes[0], pooled[0], indices[0], clauses, length,
                            options["gqa"] == "expand", group, route)
        prefix = length - window
        plots.append(LayerPlot(
            layer, target, target.stat().st_size, bool(np.array_equal(ref.indices, indices)),
            votes_diff, pooled_diff, dropped, window,
            [[int(i) for i in indices[0, h] if i < prefix] for h in range(indices.shape[1])]))
    return VisualizeResult(path, length, where, plots)


def run(args) -> int:
    emit(compute(args), as_json=False)
    return 0
