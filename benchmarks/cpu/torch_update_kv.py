"""PyTorch-eager port of the official SnapKV ``SnapKVCluster.update_kv``.

Source: FasterDecoding/SnapKV, ``snapkv/monkeypatch/snapkv_utils.py``. The body of
``update_kv`` below follows the official code line by line (same ops, same order, same
dtype handling) so that it is a fair eager baseline for ``snapkv.select``. The only
differences, all outside the arithmetic:

* ``query_states`` may hold just the last ``window`` queries (what ``snapkv.select``
  takes) instead of the whole prompt; the official code slices ``[..., -window:, :]``
  anyway, so the result is the same. The short-prompt test therefore uses the key length.
* ``return_indices=True`` also returns the top-k prefix indices the official code
  computes internally (order as ``topk`` returns them, i.e. unspecified on ties), so the
  benchmark can cross-check the kept sets.

K/V must already be repeated to the query head count (HuggingFace ``repeat_kv``), as in
the official monkeypatch, i.e. the ``gqa=expand`` policy.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """HuggingFace ``repeat_kv``: [B, Hkv, L, D] -> [B, Hkv * n_rep, L, D]."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class SnapKVCluster:
    def __init__(self, window_size=64, max_capacity_prompt=256 + 64, kernel_size=5,
                 pooling="avgpool"):
        self.window_size = window_size
        self.max_capacity_prompt = max_capacity_prompt
        assert self.max_capacity_prompt - self.window_size > 0
        self.kernel_size = kernel_size
        # Accept the project's spelling ("avg"/"max") as well as the official one.
        self.pooling = {"avg": "avgpool", "max": "maxpool"}.get(pooling, pooling)

    def update_kv(self, key_states, query_states, value_states, attention_mask=None,
                  num_key_value_groups=1, return_indices=False):
        bsz, num_heads, q_len, head_dim = query_states.shape
        kv_len = key_states.shape[-2]
        assert key_states.shape[1] == num_heads, "K/V must be repeated to Hq heads (expand)"
        assert q_len >= self.window_size and kv_len >= self.window_size
        if kv_len < self.max_capacity_prompt:
            # Short prompt: keep everything (official behaviour).
            if return_indices:
                idx = torch.arange(kv_len, device=key_states.device)
                return key_states, value_states, idx.expand(bsz, num_heads, kv_len)
            return key_states, value_states
        attn_weights = torch.matmul(query_states[..., -self.window_size:, :],
                                    key_states.transpose(2, 3)) / math.sqrt(head_dim)
        mask = torch.full((self.window_size, self.window_size),
                          torch.finfo(attn_weights.dtype).min, device=attn_weights.device)
        mask_cond = torch.arange(mask.size(-1), device=attn_weights.device)
        mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
        mask = mask.to(attn_weights.device)
        attention_mask = mask[None, None, :, :]

        attn_weights[:, :, -self.window_size:, -self.window_size:] += attention_mask

        attn_weights = nn.functional.softmax(attn_weights, dim=-1,
                                             dtype=torch.float32).to(query_states.dtype)
        attn_weights_sum = attn_weights[:, :, -self.window_size:, :-self.window_size].sum(dim=-2)
        if self.pooling == "avgpool":
            attn_cache = F.avg_pool1d(attn_weights_sum, kernel_size=self.kernel_size,
                                      padding=self.kernel_size // 2, stride=1)
        elif self.pooling == "maxpool":
            attn_cache = F.max_pool1d(attn_weights_sum, kernel_size=self.kernel_size,
                                      padding=self.kernel_size // 2, stride=1)
        else:
            raise ValueError("Pooling method not supported")
        top = attn_cache.topk(self.max_capacity_prompt - self.window_size, dim=-1).indices
        indices = top.unsqueeze(-1).expand(-1, -1, -1, head_dim)
        k_past_compress = key_states[:, :, :-self.window_size, :].gather(dim=2, index=indices)
        v_past_compress = value_states[:, :, :-self.window_size, :].gather(dim=2, index=indices)
        k_cur = key_states[:, :, -self.window_size:, :]
        v_cur = value_states[:, :, -self.window_size:, :]
        key_states = torch.cat([k_past_compress, k_cur], dim=2)
        value_states = torch.cat([v_past_compress, v_cur], dim=2)
        if return_indices:
            # Kept positions in cache order: top-k prefix (topk order), then the window.
            window = torch.arange(kv_len - self.window_size, kv_len, device=top.device)
            idx = torch.cat([top, window.expand(bsz, num_heads, -1)], dim=-1)
            return key_states, value_states, idx
        return key_states, value_states


def update_kv(q, k, v, window, capacity, kernel=5, pooling="avg", return_indices=False):
    """Functional wrapper: ``q`` [B, Hq, >=W, D]; ``k``/``v`` [B, Hkv, L, D] are repeated
    to Hq heads first (``gqa=expand``, as the official monkeypatch does before update_kv)."""
    n_rep = q.shape[1] // k.shape[1]
    cluster = SnapKVCluster(window, capacity, kernel, pooling)
    return cluster.update_kv(repeat_kv(k, n_rep), q, repeat_kv(v, n_rep), None, n_rep,
                             return_indices=return_indices)
