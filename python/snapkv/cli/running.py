"""Running a model: the prompt (random, ids or text), the checks made before anything is
compiled or allocated, and compiling the model."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..tools import ToolError
from .arguments import DEFAULT_PROMPT_LENGTH
from .locate import FIXTURE
from .messages import CLIError, progress, show


def prompt_length(args) -> int:
    if args.prompt is not None:
        return len(args.prompt)
    return args.prompt_length or DEFAULT_PROMPT_LENGTH


def check_limits(text: str, path: Path, args, length: int, steps: int):
    """Refuse, before anything is allocated, a prompt (plus `steps` generated tokens) past
    the model's max_position_embeddings or one whose largest intermediate tensor alone needs
    more memory than there is."""
    from .. import runtime

    limit, source = args.max_positions, "--max-positions"
    if limit is None:
        found = runtime.max_positions_of(path)
        if found:
            limit, source = found[0], show(found[1])
    last = length + steps - 1
    if limit is not None and last >= limit:
        raise CLIError(f"the prompt ({length:,} tokens)"
                       + (f" and {steps:,} generated tokens reach" if steps else " reaches")
                       + f" position {last:,}, past the model's "
                       f"max_position_embeddings ({limit:,}, from {source}): the model was "
                       f"not built for positions beyond {limit - 1:,}")
    try:
        runtime.check_memory(runtime.growth(text, "prefill"), "prefill", length,
                             f"a {length:,}-token prompt")
        if steps:
            runtime.check_memory(runtime.growth(text, "decode"), "decode", length + steps,
                                 f"a cache of up to {length + steps:,} rows")
    except runtime.ResourceLimitError as error:
        raise CLIError(str(error)) from None
    except ValueError:
        pass  # not a prefill/decode module: signatures() says so


def text_prompt(args, checkpoint) -> Optional[str]:
    """--text / --prompt-file tokenised into args.prompt (ids); returns the text (None when
    the prompt is not text). Refuses text for a model without a checkpoint's tokenizer."""
    text = getattr(args, "text", None)
    if getattr(args, "prompt_file", None) is not None:
        try:
            text = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CLIError(f"--prompt-file {args.prompt_file}: {error}") from None
    if text is None:
        if getattr(args, "chat", False):
            raise CLIError("--chat goes with --text or --prompt-file")
        return None
    if not text:
        raise CLIError("the prompt text is empty")
    if checkpoint is None:
        raise CLIError("a text prompt needs the model's tokenizer: give a checkpoint "
                       "directory or a known model (`snapkv models`) as MODEL")
    from .. import tokenizer

    try:
        args.prompt = tokenizer.encode(checkpoint.path, text, chat=args.chat).tolist()
    except tokenizer.TokenizerError as error:
        raise CLIError(str(error)) from None
    if not args.prompt:
        raise CLIError("the prompt text has no tokens")
    return text


def prompt(args, vocab: Optional[int]) -> tuple:
    """(ids int64 [1, L], description)."""
    if args.prompt is not None:
        ids = np.array(args.prompt, dtype=np.int64)
        where = "text" if getattr(args, "text", None) is not None or \
            getattr(args, "prompt_file", None) is not None else "given"
    else:
        length = prompt_length(args)
        ids = np.random.default_rng(args.seed).integers(0, vocab or 2, length, dtype=np.int64)
        where = f"random ids, seed {args.seed}"
    if vocab is not None and (ids.min() < 0 or ids.max() >= vocab):
        bad = [int(i) for i in ids if i < 0 or i >= vocab]
        raise CLIError(f"token ids must be in [0, {vocab}) for this model; got {bad[:8]}")
    return ids[None], where


def signatures(text: str, path: Path):
    from .. import runtime

    try:
        prefill = runtime.signature(text, "prefill")
        decode = runtime.signature(text, "decode")
    except ValueError as error:
        raise CLIError(f"{show(path)}: not a prefill/decode model module ({error}); see "
                       f"docs/model-ir.md for what `snapkv generate` runs") from None
    return prefill, decode


def check_runnable(text: str, path: Path, length: int, window: int, decode: bool = True):
    """Refuse, with a reason, what the compiled code's run-time checks would stop on (the
    same checks then report from the compiled code, but only after compiling)."""
    prefill_sig, decode_sig = signatures(text, path)
    inputs = prefill_sig.inputs
    if len(inputs) != 1 or inputs[0].rank != 2:
        raise CLIError(f"{show(path)}: @prefill does not take one [B, L] array of token ids")
    static_len = inputs[0].shape[1]
    if static_len is not None and static_len != length:
        raise CLIError(f"{show(path)}: @prefill takes exactly {static_len} tokens "
                       f"(static shapes); use --prompt-length {static_len} or the dynamic "
                       f"export (test/Models/{FIXTURE})")
    if decode and len(decode_sig.args) > 2 and decode_sig.args[2].rank == 4 and \
            decode_sig.args[2].shape[2] is not None:
        rows = decode_sig.args[2].shape[2]
        raise CLIError(f"{show(path)}: @decode takes a cache of exactly {rows} "
                       f"rows (static shapes), so it cannot run on a cache that grows or is "
                       f"compacted; use the dynamic export (test/Models/{FIXTURE})")
    if length < window:
        raise CLIError(f"the prompt has {length} tokens, fewer than the window ({window}); "
                       f"SnapKV needs L >= W (the compiled prefill would stop on its check)")
    return prefill_sig


def check_weights(args):
    """--weights as-stored with a --dtype it does not take: refused before anything is
    exported."""
    from ..frontend import quantized

    if getattr(args, "activations", "float") != "float" and \
            getattr(args, "weights", "f32") != "as-stored":
        raise CLIError(f"--activations {args.activations} quantizes the activations of Q8_0 "
                       f"and Q4_1 products: it goes with --weights as-stored")
    if getattr(args, "weights", "f32") == "as-stored" and \
            (getattr(args, "dtype", None) or "f32") not in quantized.STORED_DTYPES:
        raise CLIError(f"--weights as-stored keeps Q8_0 or Q4_1 weights, whose products "
                       f"accumulate in f32: it goes with --dtype "
                       f"{' or '.join(quantized.STORED_DTYPES)}, not {args.dtype}")


def stored_weights(source, args, texts):
    """--weights as-stored: `texts` (modules of `source`'s checkpoint) with their Q8_0 or
    Q4_1 projections as stored, and the weights that bind them; else unchanged, with the
    checkpoint."""
    if getattr(args, "weights", "f32") != "as-stored":
        return texts, source.checkpoint
    if source.checkpoint is None:
        raise CLIError(f"--weights as-stored: {source.label} takes no checkpoint to keep "
                       f"quantized (give the checkpoint directory as MODEL)")
    from .. import hf
    from ..frontend import quantized

    try:
        stored = quantized.as_stored(
            source.checkpoint,
            log=lambda m: progress(args.quiet and not getattr(args, "verbose", False), m))
    except ValueError as error:
        raise CLIError(str(error)) from None
    if stored is None:
        return texts, source.checkpoint
    try:
        return [hf.quantize_weights(text, getattr(args, "activations", "float"),
                                    stored.formats) for text in texts], stored
    except quantized.QuantizedError as error:
        raise CLIError(f"--weights as-stored: {error}") from None
    except ToolError as error:
        raise CLIError(f"snapkv-quantize-weights failed: {error}") from None


def compile_model(text: str, label: str, args, weights=None):
    from ..runtime import CompiledModel

    progress(args.quiet, f"compiling the {label}: snapkv-opt --snapkv-cpu-pipeline, "
                         f"snapkv-translate, clang (seconds to a minute the first time, then "
                         f"cached) ...")
    try:
        model = CompiledModel(text, verbose=getattr(args, "verbose", False), weights=weights)
    except ToolError as error:
        raise CLIError(f"compiling the {label} failed: {error}") from None
    except ValueError as error:  # CheckpointError too: weights that do not fit
        raise CLIError(f"cannot run the {label}: {error}") from None
    how = "cached library" if model.from_cache else "compiled"
    progress(args.quiet, f"  {how} in {model.library.seconds:.1f} s: {model.library.path}")
    for note in model.weight_notes:
        progress(args.quiet, f"  {note}")
    return model


def ids_text(ids) -> str:
    return " ".join(str(int(i)) for i in ids)
