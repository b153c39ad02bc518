"""Check that kvpress's SnapKVPress and StreamingLLMPress keep, per layer and kv head, the same
positions as our reference selection (``snapkv.reference.select``, docs/semantics.md) with
``gqa mean``, ``capacity int(L * (1 - ratio))``, kernel 5, avg pooling (``scoring recent``,
4 sinks, for StreamingLLM), on the real queries and keys of one prompt.

Run it with the kvpress venv's interpreter; it records kvpress's inputs and kept indices in
a temporary .npz, then runs its own compare half under the main environment's ``python3``
(``--python``), where the snapkv package and numpy are:

    ~/.cache/snapkv/kvpress-venv/bin/python benchmarks/kvpress/check_selection.py \\
        --model /tmp/smollm2 --prompts /tmp/passkey.json --ratio 0.5 --windows 16,64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def dump(args, out: Path) -> None:
    import numpy as np
    import torch
    import transformers
    from kvpress import SnapKVPress, StreamingLLMPress
    from kvpress.utils import compute_n_kept, get_prerope_query_states
    from transformers import AutoModelForCausalLM, DynamicCache
    from transformers.models.llama.modeling_llama import rotate_half

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    record = {}

    def kept(press, module, hidden_states, keys, values, attentions, kwargs):
        scores = press.score(module, hidden_states, keys, values, attentions, kwargs)
        n = compute_n_kept(keys.shape[2], press.compression_ratio)
        return scores.topk(n, dim=-1).indices.numpy().copy()

    @dataclass
    class RecordSnapKV(SnapKVPress):
        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            # the post-RoPE window queries, as SnapKVPress.compute_window_attention makes them
            w = self.window_size
            q = get_prerope_query_states(module, hidden_states[:, -w:])
            cos, sin = kwargs["position_embeddings"]
            q = q * cos[:, -w:].unsqueeze(1) + rotate_half(q) * sin[:, -w:].unsqueeze(1)
            idx = kept(self, module, hidden_states, keys, values, attentions, kwargs)
            record[f"snapkv{w}_{module.layer_idx}"] = (q.numpy().copy(), keys.numpy().copy(), idx)
            return super().compress(module, hidden_states, keys, values, attentions, kwargs)

    @dataclass
    class RecordStreaming(StreamingLLMPress):
        def compress(self, module, hidden_states, keys, values, attentions, kwargs):
            idx = kept(self, module, hidden_states, keys, values, attentions, kwargs)
            record[f"streaming_{module.layer_idx}"] = (None, keys.numpy().copy(), idx)
            return super().compress(module, hidden_states, keys, values, attentions, kwargs)

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    prompt = json.loads(Path(args.prompts).read_text())[args.index]
    ids = torch.tensor([prompt["ids"]])
    presses = [RecordSnapKV(compression_ratio=args.ratio, window_size=int(w))
               for w in args.windows.split(",")]
    presses.append(RecordStreaming(compression_ratio=args.ratio))
    for press in presses:
        with torch.inference_mode(), press(model):
            model(input_ids=ids, past_key_values=DynamicCache())
    arrays = {}
    for name, (q, k, idx) in record.items():
        if q is not None:
            arrays[f"q:{name}"] = q
        arrays[f"k:{name}"] = k
        arrays[f"i:{name}"] = idx
    np.savez(out, **arrays)
    print(f"prompt {prompt['id']} (L={ids.shape[1]}), ratio {args.ratio}: recorded "
          f"{len(record)} layer selections")


def compare(path: Path) -> int:
    import numpy as np

    sys.path.insert(0, str(REPO / "python"))
    from snapkv import reference

    z = np.load(path)
    groups = {}
    for key in z.files:
        if key.startswith("i:"):
            name, layer = key[2:].rsplit("_", 1)
            groups.setdefault(name, []).append(int(layer))
    failures = 0
    for name, layers in sorted(groups.items()):
        same = total = worst = 0
        for layer in sorted(layers):
            tag = f"{name}_{layer}"
            k, idx = z[f"k:{tag}"], z[f"i:{tag}"]
            capacity = idx.shape[2]
            if name.startswith("snapkv"):
                window = int(name[len("snapkv"):])
                sel = reference.select(z[f"q:{tag}"], k, k, window=window, capacity=capacity,
                                       kernel=5, pooling="avg", gqa="mean")
            else:  # StreamingLLM: 4 sinks and the most recent positions, no window needed
                q = np.zeros((k.shape[0], k.shape[1], 1, k.shape[3]), np.float32)
                sel = reference.select(q, k, k, window=1, capacity=capacity, gqa="mean",
                                       scoring="recent", sinks=4)
            for h in range(k.shape[1]):
                a, b = set(idx[0, h].tolist()), set(sel.indices[0, h].tolist())
                total += 1
                same += a == b
                worst = max(worst, len(a ^ b) // 2)
        failures += same != total
        print(f"{name:<12} L={k.shape[2]} kept={capacity}: {same}/{total} (layer, kv head) "
              f"kept sets identical to snapkv.reference.select"
              + ("" if same == total else f"; worst differs by {worst} positions"))
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path)
    p.add_argument("--prompts", type=Path, help="run.py's prompts JSON")
    p.add_argument("--index", type=int, default=0, help="which prompt (default 0)")
    p.add_argument("--ratio", type=float, default=0.5)
    p.add_argument("--windows", default="16,64", help="SnapKV window sizes to check")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--python", default="python3", help="the main environment's interpreter")
    p.add_argument("--compare", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.compare is not None:
        return compare(args.compare)
    if args.model is None or args.prompts is None:
        p.error("--model and --prompts are required")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "selection.npz"
        dump(args, out)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        return subprocess.call([args.python, __file__, "--compare", str(out)], env=env)


if __name__ == "__main__":
    sys.exit(main())
