"""The compaction options (snapkv-compress-kv-cache's): their option group and checks, the
pass options and description they make, and the model rewrite with them."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Sequence

from .. import tools
from .arguments import int_in, odd_kernel
from .messages import CLIError, read_text, show
from .opt import diagnostics, layer_functions, run_opt

# The pass's own defaults (snapkv-compress-kv-cache; kernel 15 and gqa mean, not the published
# method's 5 and expand: docs/eval.md, "The defaults"); the demo passes its small sizes.
DEFAULTS = dict(window=32, capacity=1024, kernel=15, pooling="avg", gqa="mean",
                order="position", budget="uniform", pyramid_beta=20, floor=0, chunk=0,
                decode_interval=0, decode_capacity=0, block=1, kv_dtype="same", staging=0,
                staging_scoring="sum")
# --kv-dtype: the compacted cache's element type (snapkv-compress-kv-cache kv-dtype).
KV_DTYPES = ("same", "i8")


def compaction_parent(strict: bool = False) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "compaction", "The options of snapkv-compress-kv-cache and snapkv.select, with the "
        "pass's defaults (docs/semantics.md defines them). The bundled tiny model is meant "
        "for short prompts: `make demo-mechanics` runs it with --window 8 --capacity 24.")
    group.add_argument("--window", "-W", type=int_in(1, "the window"),
                       default=DEFAULTS["window"], metavar="W",
                       help="observation window: the last W prompt queries vote for the "
                            "earlier positions, and the W window positions are always kept")
    group.add_argument("--capacity", "-C", type=int_in(2, "the capacity"),
                       default=DEFAULTS["capacity"], metavar="C",
                       help="prompt positions kept per cache head, window included (C > W); "
                            "a prompt shorter than C is kept whole")
    group.add_argument("--kernel", "--kernel-size", "-k", type=odd_kernel, dest="kernel",
                       default=DEFAULTS["kernel"], metavar="K",
                       help="pooling kernel over neighbouring positions (odd, >= 1)")
    group.add_argument("--pooling", choices=("avg", "max"), default=DEFAULTS["pooling"],
                       help="pooling of the votes: avg (zero padding, divides by K) or max")
    group.add_argument("--gqa", choices=("expand", "mean", "max"), default=DEFAULTS["gqa"],
                       help="GQA policy: expand = one selection per query head (the cache "
                            "holds Hq heads); mean/max = votes of a kv head's query heads "
                            "averaged/maximised, one selection per kv head (Hkv heads)")
    group.add_argument("--order", choices=("position", "score"), default=DEFAULTS["order"],
                       help="order of the kept positions in the cache: ascending position, "
                            "or prefix by descending score then the window")
    group.add_argument("--budget",
                       choices=("uniform", "pyramid", "inverted-pyramid", "adaptive"),
                       default=DEFAULTS["budget"],
                       help="uniform = every layer keeps C; pyramid = PyramidKV: more in lower "
                            "layers, fewer in upper ones, C - W prefix positions per layer on "
                            "average (never more in all); inverted-pyramid = the same the other "
                            "way up; adaptive = Ada-KV: a layer's heads share Hc x (C - W) "
                            "prefix positions, ranked together (a ragged cache, the same bytes)")
    group.add_argument("--floor", type=int_in(0, "--floor"), default=DEFAULTS["floor"],
                       metavar="F",
                       help="with --budget adaptive: prefix positions every head keeps at least "
                            "(Ada-KV's safeguard, at most C - W)")
    group.add_argument("--pyramid-beta", type=int_in(1, "--pyramid-beta"),
                       default=DEFAULTS["pyramid_beta"], metavar="BETA",
                       help="with --budget pyramid: the top layer keeps (C - W) / BETA prefix "
                            "positions (at least 1), the bottom one twice the mean less that")
    group.add_argument("--chunk", type=int_in(0, "--chunk"), default=DEFAULTS["chunk"],
                       metavar="N",
                       help="chunked prefill: feed the prompt N tokens at a time (N >= W) and "
                            "compact the cache back to C after each chunk, so that the K/V held "
                            "stay near C + N rows per head (docs/semantics.md, \"Chunked "
                            "prefill\"); needs --gqa mean or max and --budget uniform. 0 (the "
                            "default): one-shot prefill")
    group.add_argument("--staging", type=int_in(0, "--staging"), default=DEFAULTS["staging"],
                       metavar="M",
                       help="with --chunk: two-level chunked prefill: the chunks before the "
                            "last are compacted to M rows (M >= C) ranked by "
                            "--staging-scoring, and the last chunk's selection keeps C by the "
                            "prompt's last W queries (which hold the question), so that the K/V "
                            "held stay near M + N rows per head. 0 (the default): off")
    group.add_argument("--staging-scoring", choices=("sum", "norm_sum", "votes", "prefix_votes",
                                                     "keydiff", "carried-sum",
                                                     "carried-norm_sum"),
                       default=DEFAULTS["staging_scoring"],
                       help="with --staging: what ranks a staged chunk's rows: sum = "
                            "accumulated attention of all the chunk's queries (H2O, "
                            "OpenVINO's SUM), norm_sum = that divided by the queries that "
                            "see the row, votes = the chunk's last W queries, keydiff = the "
                            "keys least like their head's mean key direction (KeyDiff; no "
                            "attention, CPU only); carried-sum / "
                            "carried-norm_sum: each row's score so far plus the chunk's sum / "
                            "norm_sum, carried from chunk to chunk")
    group.add_argument("--decode-interval", type=int_in(0, "--decode-interval"),
                       default=DEFAULTS["decode_interval"], metavar="K",
                       help="decode-time compression: every K generated tokens, caches holding "
                            "more than C rows (--decode-capacity M: M) are compacted back to "
                            "C (M), the last W generated tokens voting, so that decoding holds "
                            "at most C + K (M + K) rows per head; "
                            "needs --gqa mean or max and --budget uniform. 0 (the default): off")
    group.add_argument("--decode-capacity", type=int_in(0, "--decode-capacity"),
                       default=DEFAULTS["decode_capacity"], metavar="M",
                       help="with --decode-interval: compact back to M rows (M > W) instead of "
                            "C, so that decoding holds at most M + K rows per head once it "
                            "compacted. 0 (the default): C")
    group.add_argument("--block", type=int_in(1, "--block"), default=DEFAULTS["block"],
                       metavar="B",
                       help="block-granular selection: keep whole blocks of B consecutive "
                            "prefix positions, ranked by the sum of their pooled scores "
                            "(docs/semantics.md, \"Blocks\"); C - W (and M - W with "
                            "--decode-capacity M) must be a multiple of B; needs --budget "
                            "uniform. 1 (the default): single positions")
    group.add_argument("--kv-dtype", choices=KV_DTYPES, default=DEFAULTS["kv_dtype"],
                       help="element type of the compacted K/V cache: same = the model's "
                            "(--dtype); i8 = int8 rows with a per-token per-head f32 scale "
                            "(symmetric, absmax/127), D + 4 bytes a row, quantized when "
                            "written and read back where attention reads the cache; not with "
                            "--chunk, --decode-interval or --budget adaptive")
    if strict:
        group.add_argument("--strict", action="store_true",
                           help="a module the rewrite does not recognise with certainty is "
                                "an error (non-zero exit, nothing written) instead of a "
                                "warning with the module left unchanged")
    return parent


def check_window_capacity(args):
    if args.capacity <= args.window:
        raise CLIError(f"--capacity ({args.capacity}) must be greater than --window "
                       f"({args.window}): the capacity counts the window")
    floor = getattr(args, "floor", 0)
    if floor and getattr(args, "budget", "uniform") != "adaptive":
        raise CLIError("--floor is the per-head minimum of --budget adaptive")
    if floor > args.capacity - args.window:
        raise CLIError(f"--floor ({floor}) must be at most --capacity - --window "
                       f"({args.capacity - args.window})")
    chunk = getattr(args, "chunk", 0)
    if chunk and chunk < args.window:
        raise CLIError(f"--chunk ({chunk}) must be at least --window ({args.window}): a "
                       f"chunk's last W queries vote")
    staging = getattr(args, "staging", 0)
    if staging and not chunk:
        raise CLIError("--staging is what the chunks before the last are compacted to: it "
                       "needs --chunk")
    if staging and staging < args.capacity:
        raise CLIError(f"--staging ({staging}) must be at least --capacity ({args.capacity}): "
                       f"the final selection keeps C of the staged rows")
    decode_capacity = getattr(args, "decode_capacity", 0)
    if decode_capacity and not getattr(args, "decode_interval", 0):
        raise CLIError("--decode-capacity is what decode-time compression compacts to: it "
                       "needs --decode-interval")
    if decode_capacity and decode_capacity <= args.window:
        raise CLIError(f"--decode-capacity ({decode_capacity}) must be greater than --window "
                       f"({args.window}): the generated window is always kept")
    block = getattr(args, "block", 1)
    if block != 1:
        if getattr(args, "budget", "uniform") != "uniform":
            raise CLIError("--block needs --budget uniform (a per-layer or per-head budget "
                           "need not be a multiple of the block)")
        for name, kept in (("--capacity", args.capacity), ("--decode-capacity",
                                                           decode_capacity)):
            if kept and (kept - args.window) % block:
                raise CLIError(f"--block ({block}) must divide {name} - --window "
                               f"({kept - args.window} = {kept} - {args.window}): whole "
                               f"blocks fill the kept prefix")
    kv_dtype = getattr(args, "kv_dtype", "same")
    for name, value in (("--chunk", chunk), ("--decode-interval",
                                             getattr(args, "decode_interval", 0)),
                        ("--budget adaptive", getattr(args, "budget", "") == "adaptive")):
        if value and kv_dtype != "same":
            raise CLIError(f"--kv-dtype {kv_dtype} is not available with {name} (the "
                           f"extend function and the ragged cache take the model's type)")
    for name, value in (("--chunk", chunk), ("--decode-interval",
                                             getattr(args, "decode_interval", 0))):
        if value and args.gqa == "expand":
            raise CLIError(f"{name} needs --gqa mean or max (with expand the caches the "
                           f"extend function extends would hold Hq heads)")
        if value and getattr(args, "budget", "uniform") != "uniform":
            raise CLIError(f"{name} needs --budget uniform")


def option_dict(args) -> dict:
    return {name: getattr(args, name, DEFAULTS[name]) for name in DEFAULTS}


def pass_options(args, strict: bool, text: str = "") -> str:
    """The pass's options; for a module with one function per layer (`snapkv export --hf`),
    prefill-func/decode-func name those functions unless given."""
    options = (f"window={args.window} capacity={args.capacity} kernel={args.kernel} "
               f"pooling={args.pooling} gqa={args.gqa} order={args.order}")
    if args.budget == "adaptive":
        options += f" budget=adaptive floor={args.floor}"
    elif args.budget != "uniform":
        options += f" budget={args.budget} pyramid-beta={args.pyramid_beta}"
    if getattr(args, "block", 1) != 1:
        options += f" block={args.block}"
    if getattr(args, "kv_dtype", "same") != "same":
        options += f" kv-dtype={args.kv_dtype}"
    layers = layer_functions(text) if text else None
    prefill = getattr(args, "prefill_func", None)
    decode = getattr(args, "decode_func", None)
    if prefill is None and layers:
        prefill = layers[0]
    if decode is None and layers:
        decode = layers[1]
    if prefill is not None:
        options += f" prefill-func={prefill}"
    if decode is not None:
        options += f" decode-func={decode}"
    chunk, interval = getattr(args, "chunk", 0), getattr(args, "decode_interval", 0)
    decode_capacity = getattr(args, "decode_capacity", 0)
    if chunk or interval:
        from ..hf import extend_function

        try:
            extend = extend_function(text) if text else None
        except tools.ToolFailed:
            extend = None
        options += (f" chunk={chunk}" if chunk else "") + \
            (f" decode-interval={interval}" if interval else "") + \
            (f" decode-capacity={decode_capacity}" if decode_capacity else "") + \
            f" extend-func={extend or 'extend'}"
    if getattr(args, "staging", 0):
        from ..hf import staging_options

        options += staging_options(args.staging, args.staging_scoring)
    return options + (" strict=true" if strict else "")


def describe_options(args) -> str:
    return describe(option_dict(args))


def describe(options: dict) -> str:
    """The compaction options (:func:`option_dict`) as the commands print them: results keep
    the dict and render this text from it."""
    budget = "" if options["budget"] == "uniform" else \
        f", budget adaptive (floor {options['floor']}; capacity is the heads' mean)" \
        if options["budget"] == "adaptive" else \
        f", budget {options['budget']} (beta {options['pyramid_beta']}; capacity is the " \
        f"layers' mean)"
    if options.get("block", 1) != 1:
        budget += f", whole blocks of {options['block']} positions"
    if options.get("kv_dtype", "same") != "same":
        budget += f", {options['kv_dtype']} cache"
    chunk = f", chunked prefill ({options['chunk']} tokens a chunk)" \
        if options.get("chunk") else ""
    if options.get("staging"):
        chunk += f" staged at {options['staging']} rows by {options['staging_scoring']}"
    if options.get("decode_interval"):
        chunk += f", decode-time compression every {options['decode_interval']} tokens"
        if options.get("decode_capacity"):
            chunk += f" back to {options['decode_capacity']} rows"
    return (f"window {options['window']}, capacity {options['capacity']}, kernel "
            f"{options['kernel']}, pooling {options['pooling']}, gqa {options['gqa']}, order "
            f"{options['order']}{budget}{chunk}")


def rewrite(path: Path, args, *, strict: bool = True, extra: Sequence[str] = ()):
    """(rewritten text, snapkv-opt's stderr, seconds) of the model rewrite of `path`.

    With `strict`, a refusal is a CLIError naming the reason."""
    start = time.perf_counter()
    done = run_opt([f"--snapkv-compress-kv-cache={pass_options(args, strict, read_text(path))}",
                    *extra], path=path)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        if done.returncode == tools.REFUSAL_EXIT:
            raise CLIError(f"the model rewrite (snapkv-compress-kv-cache) refused {show(path)}; "
                           f"nothing was changed. snapkv-opt says:\n"
                           f"{diagnostics(done.stderr)}")
        raise CLIError(f"snapkv-opt failed on {show(path)} (exit {done.returncode}):\n"
                       f"{diagnostics(done.stderr)}")
    return done.stdout, done.stderr, seconds
