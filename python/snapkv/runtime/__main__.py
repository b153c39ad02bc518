"""Ahead-of-time runner for exported model modules (``@prefill`` + ``@decode``).

The command line: compile a module (:class:`~snapkv.runtime.model.CompiledModel`), prefill
given or random ids, decode greedily and print the tokens and the logical and physical cache
lengths::

    python -m snapkv.runtime test/Models/tiny_llama_dynamic.mlir --prompt-length 16 \\
        --steps 8 -v
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ..tools import ToolError
from .memref import CompiledCheckError
from .model import CompiledModel


def main(argv=None) -> int:
    # prog: argparse would say "__main__.py".
    parser = argparse.ArgumentParser(prog="python -m snapkv.runtime",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="MLIR file with @prefill and @decode")
    parser.add_argument("--ids", help="comma-separated prompt ids (default: random)")
    parser.add_argument("--prompt-length", "--prompt-len", type=int, default=16,
                        dest="prompt_length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        model = CompiledModel.from_file(args.module, cache_dir=args.cache_dir,
                                        verbose=args.verbose)
        if args.ids:
            ids = np.array([[int(x) for x in args.ids.split(",")]], dtype=np.int64)
        else:
            model.check_limits(args.prompt_length, args.steps)  # before drawing the ids
            ids = np.random.default_rng(args.seed).integers(0, model.vocab_size or 2,
                                                            (1, args.prompt_length))
        start = time.perf_counter()
        out = model.generate(ids, args.steps)
    except (OSError, ValueError, ToolError, CompiledCheckError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    print(f"library: {model.library.path} ({'cached' if model.from_cache else 'compiled'})")
    print(f"prompt:  {ids[0].tolist()}")
    print(f"tokens:  {out['tokens']}")
    print(f"logical lengths:  {out['logical_lengths']}")
    print(f"physical lengths: {out['physical_lengths']}")
    print(f"cache shape: {out['cache_shapes']}; generate took {elapsed * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
