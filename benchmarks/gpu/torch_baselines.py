"""PyTorch baselines of the GPU benchmark, on top of ``benchmarks/cpu/torch_update_kv.py``.

* ``update_kv_expand`` is that file's ``update_kv``: HuggingFace ``repeat_kv`` of K/V to Hq
  heads, then the official ``SnapKVCluster.update_kv`` line by line (matmul of the last W
  queries with all keys, scale 1/sqrt(D), causal mask on the window block, softmax in f32 cast
  back to the input dtype, sum over the W rows of the prefix columns, avg_pool1d, topk(C - W),
  gather, cat with the window). Output: Hq heads, i.e. ``gqa=expand``.
* ``update_kv_mean`` is what the official code does NOT do (it only knows K/V repeated to Hq
  heads): the same steps up to the vote sums ``attn_weights_sum [B, Hq, P]`` (computed against
  K repeated to Hq heads, in the input dtype as the official code leaves it), then the mean
  over the G query heads of each kv head (``view(B, Hkv, G, P).mean(2)``), then avg_pool1d,
  topk(C - W) per kv head, and the gather from the UNREPEATED K/V. Output: Hkv heads, i.e.
  ``gqa=mean``. K is still repeated for the matmul (that is how the official code computes
  votes); V is never repeated.

Both keep torch's ``topk`` order for the prefix (the official ``order score`` layout, ties in
unspecified order); ``snapkv.select`` in the benchmark uses ``order position``. The two differ
only in the order of the kept rows, not in the work done.
"""

import math
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))
from torch_update_kv import SnapKVCluster, repeat_kv, update_kv  # noqa: E402

__all__ = ["SnapKVCluster", "repeat_kv", "update_kv_expand", "update_kv_mean", "BASELINES"]


def update_kv_expand(q, k, v, window, capacity, kernel=5, pooling="avg", return_indices=False):
    """Official update_kv after repeat_kv (gqa=expand): returns K, V [B, Hq, C, D]."""
    return update_kv(q, k, v, window, capacity, kernel, pooling, return_indices=return_indices)


def update_kv_mean(q, k, v, window, capacity, kernel=5, pooling="avg", return_indices=False):
    """The official steps with the GQA mean of the votes before pooling: K, V [B, Hkv, C, D]."""
    bsz, num_heads, q_len, head_dim = q.shape
    num_kv_heads, kv_len = k.shape[1], k.shape[2]
    groups = num_heads // num_kv_heads
    if kv_len < capacity:
        if return_indices:
            idx = torch.arange(kv_len, device=k.device)
            return k, v, idx.expand(bsz, num_kv_heads, kv_len)
        return k, v
    key_states = repeat_kv(k, groups)  # votes as the official code computes them
    attn_weights = (torch.matmul(q[..., -window:, :], key_states.transpose(2, 3))
                    / math.sqrt(head_dim))
    mask = torch.full((window, window), torch.finfo(attn_weights.dtype).min,
                      device=attn_weights.device)
    mask_cond = torch.arange(mask.size(-1), device=attn_weights.device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(attn_weights.device)
    attention_mask = mask[None, None, :, :]
    attn_weights[:, :, -window:, -window:] += attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
    attn_weights_sum = attn_weights[:, :, -window:, :-window].sum(dim=-2)
    # GQA mean: one selection per kv head.
    attn_weights_sum = attn_weights_sum.view(bsz, num_kv_heads, groups, -1).mean(dim=2)
    if pooling in ("avg", "avgpool"):
        attn_cache = F.avg_pool1d(attn_weights_sum, kernel_size=kernel, padding=kernel // 2,
                                  stride=1)
    elif pooling in ("max", "maxpool"):
        attn_cache = F.max_pool1d(attn_weights_sum, kernel_size=kernel, padding=kernel // 2,
                                  stride=1)
    else:
        raise ValueError("Pooling method not supported")
    top = attn_cache.topk(capacity - window, dim=-1).indices
    indices = top.unsqueeze(-1).expand(-1, -1, -1, head_dim)
    k_past_compress = k[:, :, :-window, :].gather(dim=2, index=indices)
    v_past_compress = v[:, :, :-window, :].gather(dim=2, index=indices)
    k_cur = k[:, :, -window:, :]
    v_cur = v[:, :, -window:, :]
    key_out = torch.cat([k_past_compress, k_cur], dim=2)
    value_out = torch.cat([v_past_compress, v_cur], dim=2)
    if return_indices:
        win = torch.arange(kv_len - window, kv_len, device=top.device)
        idx = torch.cat([top, win.expand(bsz, num_kv_heads, -1)], dim=-1)
        return key_out, value_out, idx
    return key_out, value_out


BASELINES = {"expand": update_kv_expand, "mean": update_kv_mean}
