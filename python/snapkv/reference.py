"""Numpy reference of the SnapKV selection (docs/semantics.md).

Votes and pooled scores are computed in float64 from the exact input values; the compiled code
works in f32, so tests compare it with this reference only away from near-ties."""

import math
import numbers
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .dtypes import bf16_to_f32, element_type, to_float64

POOLINGS = ("avg", "max")
GQA_POLICIES = ("expand", "mean", "max")
ORDERS = ("position", "score")
SCORINGS = ("votes", "prefix_votes", "recent", "random", "sum", "norm_sum", "keydiff")
# The scorings that vote (pooled, blocked and ranked like the votes).
VOTE_SCORINGS = ("votes", "prefix_votes", "sum", "norm_sum")
# The scorings whose queries are the last Q >= window prompt queries, not the window's.
ACCUMULATED = ("sum", "norm_sum")


@dataclass
class Selection:
    indices: np.ndarray  # int64 [B, Hc, S], S = min(L, C)
    keys: np.ndarray     # [B, Hc, S, D], bit-identical copies of input rows (input dtype)
    values: np.ndarray   # [B, Hc, S, D], gathered with the same indices as keys
    votes: np.ndarray    # float64 [B, Hc, P]; [B, Hc, 0] when the selection is bypassed (L < C)
    pooled: np.ndarray   # float64 [B, Hc, P]; same shape as votes


def select(q, k, v, window, capacity, kernel=5, pooling="avg", gqa="expand",
           order="position", scale=None, dtype=None, scoring="votes", sinks=None, seed=0,
           block=1):
    """SnapKV selection of q [B,Hq,W,D] over k, v [B,Hkv,L,D].

    Arrays are float32 or float16; bf16 arrays are uint16 bit patterns with dtype="bf16".
    Returns a `Selection`; Hc = Hq for gqa="expand", else Hkv.

    `scoring` replaces the ranking for comparisons (as `snapkv.select`'s clause does):
    "prefix_votes" leaves the window columns out of the softmax denominator; "recent"
    keeps `sinks` leading positions and the most recent ones; "random" ranks by
    `random_keys(seed, ...)`. For "recent"/"random", votes and pooled hold those keys.
    "sum" / "norm_sum" (accumulated attention) take q [B,Hq,Q,D], the last Q prompt queries
    (window <= Q <= L), and vote with all of them (`accumulated_votes`). "keydiff" ranks by
    `keydiff_scores` (question-agnostic: q only fixes the shapes), pooled like the votes.

    `block` > 1 ranks blocks of `block` consecutive prefix positions (from position 0, the
    last one possibly shorter) by the sum of their pooled scores: `pooled` then holds, at
    every position, its block's sum (`block_sums`), and the top `capacity - window`
    positions of that are kept (whole blocks; docs/semantics.md)."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    elem = _validate(q, k, v, window, capacity, kernel, pooling, gqa, order, scale, dtype,
                     accumulated=scoring in ACCUMULATED)
    if sinks is None:  # the op's default: 4, or capacity - window if smaller
        sinks = min(4, capacity - window)
    if scoring == "recent" and not 0 <= sinks <= capacity - window:
        raise ValueError(f"sinks must be between 0 and capacity - window, got {sinks}")
    if scoring == "random" and seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    _validate_block(block, window, capacity, scoring)
    batch, q_heads, _, dim = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    group = q_heads // kv_heads
    heads = q_heads if gqa == "expand" else kv_heads
    # Which kv head each cache head copies: query head h reads kv head h // G (repeat_kv order).
    source = np.arange(heads) // group if gqa == "expand" else np.arange(heads)

    if length < capacity:  # short prompt: nothing is selected, all L positions are kept
        indices = np.broadcast_to(np.arange(length, dtype=np.int64), (batch, heads, length))
        votes = pooled = np.zeros((batch, heads, 0))
    else:
        s = 1.0 / math.sqrt(dim) if scale is None else float(scale)
        prefix = length - window
        if scoring in ("votes", "prefix_votes"):
            per_query_head = window_votes(to_float64(q, elem), to_float64(k, elem), s,
                                          prefix_only=scoring == "prefix_votes")
            votes = aggregate(per_query_head, gqa, kv_heads)
            pooled = block_sums(pool(votes, kernel, pooling), block)
        elif scoring in ACCUMULATED:
            per_query_head = accumulated_votes(to_float64(q, elem), to_float64(k, elem), s,
                                               window, normalise=scoring == "norm_sum")
            votes = aggregate(per_query_head, gqa, kv_heads)
            pooled = block_sums(pool(votes, kernel, pooling), block)
        elif scoring == "keydiff":
            votes = keydiff_scores(to_float64(k, elem), window)[:, source]
            pooled = pool(votes, kernel, pooling)
        elif scoring == "recent":
            position = np.arange(prefix, dtype=np.float64)
            votes = np.broadcast_to(np.where(position < sinks, np.inf, position),
                                    (batch, heads, prefix)).copy()
            pooled = votes
        else:
            votes = random_keys(seed, batch, heads, prefix).astype(np.float64)
            pooled = votes
        indices = np.empty((batch, heads, capacity), dtype=np.int64)
        for b in range(batch):
            for h in range(heads):
                chosen = rank(pooled[b, h])[:capacity - window]
                if order == "position":
                    chosen = np.sort(chosen)
                indices[b, h] = np.concatenate([chosen, np.arange(prefix, length)])

    return Selection(indices=np.ascontiguousarray(indices), keys=_gather(k, source, indices),
                     values=_gather(v, source, indices), votes=votes, pooled=pooled)


@dataclass
class CarriedSelection:
    """A staged step of two-level chunked prefill with carried scores (`carried_select`)."""
    indices: np.ndarray  # int64 [B, Hc, S], S = min(L, C): rows of the concatenation kept
    keys: np.ndarray     # [B, Hc, S, D], bit-identical copies of input rows
    values: np.ndarray   # [B, Hc, S, D]
    scores: np.ndarray   # float64 [B, Hc, S]: the kept rows' scores, carried to the next step
    totals: np.ndarray   # float64 [B, Hc, L]: every row's carried score plus the chunk's votes
    pooled: np.ndarray   # float64 [B, Hc, L - W]: what ranks (the prefix's totals, not pooled)


def carried_select(q, k, v, carried, window, capacity, gqa="mean", scoring="sum",
                   order="position", scale=None, dtype=None):
    """A staged chunk's selection with carried scores (docs/semantics.md, "Carried scores";
    ``snapkv-compress-kv-cache staging-carry``). `k`, `v` [B, Hkv, L, D] are the cache's T rows
    followed by the chunk's, `q` [B, Hq, n, D] the chunk's queries (n = L - T >= window),
    `carried` [B, Hc, T] the cache rows' scores. Every row but the last gets the chunk's
    accumulated votes (`accumulated_votes` with window 1: all n queries, the full causal
    softmax; `norm_sum` divided by the queries that see the row), aggregated over the GQA
    group; a row's total is its carried score (0 for the chunk's rows) plus those votes (0
    for the last row). Not pooled. The top `capacity - window` of the first L - window rows
    by total (ties to the lower row, NaN below every number) and the last `window` rows are
    kept, or every row when L < capacity; the kept rows' totals are the new carried scores."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    carried = np.asarray(carried, dtype=np.float64)
    if scoring not in ACCUMULATED:
        raise ValueError(f"carried scores add accumulated votes: scoring must be one of "
                         f"{ACCUMULATED}, got {scoring!r}")
    if gqa not in ("mean", "max"):
        raise ValueError(f"carried scores are per kv head: gqa must be mean or max, got {gqa!r}")
    elem = _validate(q, k, v, window, capacity, 1, "avg", gqa, order, scale, dtype,
                     accumulated=True)
    batch, _, rows, dim = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    cached = length - rows
    if carried.shape != (batch, kv_heads, cached):
        raise ValueError(f"carried scores must be [B, Hc, T] = {[batch, kv_heads, cached]} "
                         f"(one per cache row), got shape {list(carried.shape)}")
    s = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    votes = aggregate(accumulated_votes(to_float64(q, elem), to_float64(k, elem), s, 1,
                                        normalise=scoring == "norm_sum"), gqa, kv_heads)
    totals = np.zeros((batch, kv_heads, length))
    totals[..., :length - 1] += votes
    totals[..., :cached] += carried
    if length < capacity:
        indices = np.broadcast_to(np.arange(length, dtype=np.int64),
                                  (batch, kv_heads, length)).copy()
    else:
        prefix = length - window
        indices = np.empty((batch, kv_heads, capacity), dtype=np.int64)
        for b in range(batch):
            for h in range(kv_heads):
                chosen = rank(totals[b, h, :prefix])[:capacity - window]
                if order == "position":
                    chosen = np.sort(chosen)
                indices[b, h] = np.concatenate([chosen, np.arange(prefix, length)])
    source = np.arange(kv_heads)
    return CarriedSelection(indices=indices, keys=_gather(k, source, indices),
                            values=_gather(v, source, indices),
                            scores=np.take_along_axis(totals, indices, axis=2), totals=totals,
                            pooled=totals[..., :length - window])


def adaptive_counts(pooled, keep, floor=0):
    """How many prefix positions each head keeps under ``budget=adaptive`` (Ada-KV's
    allocation; docs/semantics.md, "Budgets"), for one batch element's pooled scores
    ``[Hc, P]``: the layer's budget is ``Hc * keep`` prefix positions (``keep = C - W``).
    Each head first takes its own best ``floor`` positions (Ada-KV's safeguard); the rest of
    the budget goes to the best remaining (head, position) pairs of all heads together:
    descending score, NaN below every number, exact ties to the lower head, then the lower
    position. A head then keeps ``rank(pooled[h])[:count]``: within one head this order is
    its own ranking, so its positions are always its best ones. When ``Hc * P`` fits in the
    budget every head keeps all ``P``. Returns int64 ``[Hc]``."""
    pooled = np.asarray(pooled, dtype=np.float64)
    if pooled.ndim != 2:
        raise ValueError(f"pooled scores must be [heads, prefix], got shape {pooled.shape}")
    heads, prefix = pooled.shape
    if not 0 <= floor <= keep:
        raise ValueError(f"floor must be between 0 and capacity - window ({keep}), got {floor}")
    if prefix <= keep:  # the budget holds every position of every head
        return np.full(heads, prefix, dtype=np.int64)
    counts = np.full(heads, min(floor, prefix), dtype=np.int64)
    taken = np.zeros((heads, prefix), dtype=bool)
    for h in range(heads):
        taken[h, rank(pooled[h])[:counts[h]]] = True
    head, position = np.nonzero(~taken)  # row-major: by head, then position
    scores = pooled[head, position]
    nan = np.isnan(scores)
    order = np.lexsort((position, head, -np.where(nan, 0.0, scores), nan))
    rest = heads * keep - int(counts.sum())
    np.add.at(counts, head[order[:rest]], 1)
    return counts


def adaptive_indices(pooled, keep, window, floor=0, order="position"):
    """Each head's kept positions under ``budget=adaptive`` for one batch element (a list of
    ``Hc`` int64 arrays of different lengths): its ``adaptive_counts`` best prefix positions
    (ascending with ``order="position"``, best first with ``"score"``), then the window
    ``P .. P + window - 1``."""
    pooled = np.asarray(pooled, dtype=np.float64)
    prefix = pooled.shape[1]
    out = []
    for h, count in enumerate(adaptive_counts(pooled, keep, floor)):
        chosen = rank(pooled[h])[:count]
        if order == "position":
            chosen = np.sort(chosen)
        out.append(np.concatenate([chosen, np.arange(prefix, prefix + window)]).astype(np.int64))
    return out


@dataclass
class AdaptiveSelection:
    """What ``snapkv.select_adaptive`` returns: every head's rows packed one after another."""
    indices: np.ndarray  # int64 [B, T], T = Hc * min(L, C): each head's positions, then its window
    keys: np.ndarray     # [B, T, D], bit-identical copies of input rows (input dtype)
    values: np.ndarray   # [B, T, D]
    offsets: np.ndarray  # int64 [B, Hc + 1]: head h's rows are offsets[b, h] .. offsets[b, h + 1]-1
    pooled: np.ndarray   # float64 [B, Hc, P]; [B, Hc, 0] when bypassed (L < C)


def select_adaptive(q, k, v, window, capacity, floor=0, kernel=5, pooling="avg", gqa="expand",
                    scale=None, dtype=None, scoring="votes"):
    """``snapkv.select_adaptive``: the selection of `select` with one budget of
    ``Hc * (capacity - window)`` prefix positions per batch element shared by the heads
    (`adaptive_counts`), each head's rows packed after the previous head's."""
    if scoring not in ("votes", "prefix_votes"):
        raise ValueError(f"scoring must be votes or prefix_votes, got {scoring!r}")
    if isinstance(floor, bool) or not isinstance(floor, numbers.Integral) \
            or not 0 <= floor <= capacity - window:
        raise ValueError(f"floor must be between 0 and capacity - window "
                         f"({capacity - window}), got {floor!r}")
    uniform = select(q, k, v, window, capacity, kernel=kernel, pooling=pooling, gqa=gqa,
                     scale=scale, dtype=dtype, scoring=scoring)
    batch, heads = uniform.indices.shape[:2]
    length = np.asarray(k).shape[2]
    rows, offsets = [], np.zeros((batch, heads + 1), dtype=np.int64)
    for b in range(batch):
        if length < capacity:
            per_head = [np.arange(length, dtype=np.int64)] * heads
        else:
            per_head = adaptive_indices(uniform.pooled[b], capacity - window, window, floor)
        offsets[b, 1:] = np.cumsum([len(r) for r in per_head])
        rows.append(np.concatenate(per_head))
    indices = np.stack(rows)
    group = np.asarray(q).shape[1] // np.asarray(k).shape[1]
    head_of_row = np.stack([np.repeat(np.arange(heads), np.diff(o)) for o in offsets])
    source = head_of_row // group if gqa == "expand" else head_of_row

    def gather(x):
        x = np.asarray(x)
        return np.ascontiguousarray(x[np.arange(batch)[:, None], source, indices])

    return AdaptiveSelection(indices=indices, keys=gather(k), values=gather(v), offsets=offsets,
                             pooled=uniform.pooled)


def layer_capacities(budget, window, capacity, layers, beta=20):
    """Each layer's capacity (window included), lowest layer first, under the rewrite's
    ``budget`` (docs/semantics.md, "Budgets"): ``uniform`` keeps ``capacity`` everywhere;
    ``pyramid`` takes PyramidKV's endpoints with ``K = capacity - window`` -- the top layer
    keeps ``max(1, K // beta)`` prefix positions, the bottom one ``2K`` minus that -- and puts
    the layers between on the line joining them, floored (never more than ``layers * K`` in
    all); ``inverted-pyramid`` is the same list the other way up."""
    if budget not in ("uniform", "pyramid", "inverted-pyramid"):
        raise ValueError(f"budget must be uniform, pyramid or inverted-pyramid, got {budget!r}")
    if budget == "uniform" or layers < 2:
        return [capacity] * layers
    prefix = capacity - window
    top = max(1, prefix // beta)
    bottom = 2 * prefix - top
    steps = layers - 1
    falling = [window + top + (bottom - top) * (steps - layer) // steps
               for layer in range(layers)]
    return falling[::-1] if budget == "inverted-pyramid" else falling


def chunk_bounds(length, chunk, minimum=1):
    """Chunked prefill's chunks (docs/semantics.md, "Chunked prefill"): the ``(start, stop)``
    of each chunk of a `length`-token prompt fed `chunk` tokens at a time, ``[0, chunk),
    [chunk, 2 chunk), ...``; a last chunk shorter than `minimum` (the window: a chunk's last
    `window` queries vote) joins the one before it."""
    if length < 1 or chunk < 1 or minimum < 1:
        raise ValueError(f"need length, chunk and minimum >= 1, got {length}, {chunk}, "
                         f"{minimum}")
    if chunk < minimum:
        raise ValueError(f"chunk ({chunk}) is shorter than the window ({minimum})")
    bounds = [(start, min(start + chunk, length)) for start in range(0, length, chunk)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < minimum:
        last = bounds.pop()
        bounds[-1] = (bounds[-1][0], last[1])
    return bounds


def random_keys(seed, batch, heads, prefix):
    """The ranking keys of scoring "random": the splitmix64 step of ((b * Hc + h) << 32 | j)
    xor seed * 0x9E3779B97F4A7C15, top 31 bits, plus 1 ([B, Hc, P] uint64 in [1, 2^31])."""
    b = np.arange(batch, dtype=np.uint64)[:, None, None]
    h = np.arange(heads, dtype=np.uint64)[None, :, None]
    j = np.arange(prefix, dtype=np.uint64)[None, None, :]
    with np.errstate(over="ignore"):
        x = ((b * np.uint64(heads) + h) << np.uint64(32)) | j
        x ^= np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        x += np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(33)) + np.uint64(1)


def window_votes(q, k, scale, prefix_only=False):
    """Votes [B, Hq, P] of the window queries for the prefix columns (float64 inputs).
    `prefix_only` leaves the window columns out of the softmax denominator."""
    window, length = q.shape[2], k.shape[2]
    prefix = length - window
    hidden = _future(window, length)
    if prefix_only:
        hidden = hidden | (np.arange(length)[None, :] >= prefix)
    return _causal_probs(q, k, scale, hidden)[..., :prefix].sum(axis=2)


def _future(rows, length):
    """[rows, length]: the columns the last `rows` queries of a `length`-token prompt do not
    see (query t sits at absolute position length - rows + t and sees columns j <= it)."""
    return np.arange(length)[None, :] > (length - rows + np.arange(rows))[:, None]


def _causal_probs(q, k, scale, hidden):
    """Each query row's softmax [B, Hq, rows, L] over its visible columns (not `hidden`),
    with max-subtraction; a visible logit equal to the maximum gets exponent 0, so +inf
    logits share the mass and a row of -inf is uniform (docs/hostile-values.md), never
    inf - inf = NaN."""
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    logits = np.where(hidden, -np.inf, scale * np.einsum("bhtd,bhjd->bhtj", q, k))
    top = logits.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        weights = np.exp(np.where(logits == top, 0.0, logits - top))
    weights = np.where(hidden, 0.0, weights)
    return weights / weights.sum(axis=-1, keepdims=True)


def accumulated_votes(q, k, scale, window, normalise=False):
    """Votes [B, Hq, P] of ALL the given queries q [B, Hq, Q, D] (the last Q prompt queries,
    query t at position L - Q + t) for the prefix columns j < P = L - window (float64
    inputs): each query's full causal softmax row, summed over the Q queries (H2O / OpenVINO's
    SUM). `normalise` (NORM_SUM) divides column j's sum by the queries that see it,
    min(Q, L - j)."""
    rows, length = q.shape[2], k.shape[2]
    prefix = length - window
    votes = _causal_probs(q, k, scale, _future(rows, length))[..., :prefix].sum(axis=2)
    if normalise:
        votes = votes / np.minimum(rows, length - np.arange(prefix))
    return votes


def attention(q, k, v, scale=None, elem="f32", offset=None, softcap=None, sliding_window=None):
    """`snapkv.attention` (docs/semantics.md) in float64: causal attention of q [B, Hq, Lq, D]
    over k, v [B, Hkv, Lk, D] (arrays of element type `elem`), query head h reading kv head
    h // (Hq // Hkv), row i seeing the keys j <= i + offset (default Lk - Lq), and with
    `sliding_window` W only those with j > i + offset - W; `softcap` c caps the scaled logits
    to c * tanh(x / c). A row that sees no key is zero. Returns float64 [B, Hq, Lq, D]."""
    q, k, v = (to_float64(x, elem) for x in (q, k, v))
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    lq, lk = q.shape[2], k.shape[2]
    logits = scale * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap is not None:
        logits = softcap * np.tanh(logits / softcap)
    if offset is None:
        offset = lk - lq
    limit = (np.arange(lq) + offset)[:, None]
    hidden = np.arange(lk)[None, :] > limit
    if sliding_window is not None:
        hidden |= np.arange(lk)[None, :] <= limit - sliding_window
    logits = np.where(hidden, -np.inf, logits)
    top = logits.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        weights = np.exp(np.where(logits == top, 0.0, logits - top))
    weights = np.where(hidden, 0.0, weights)
    total = weights.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = np.where(total > 0, weights / total, 0.0)
    return np.einsum("bhij,bhjd->bhid", probs, v)


def ragged_attention(q, k, v, starts, lengths, scale=None, elem="f32"):
    """`snapkv.ragged_attention` in float64: a decode step's queries q [B, Hq, 1, D] over a
    ragged cache k, v [B, T, D], cache head c (read by query heads c * G .. c * G + G - 1,
    G = Hq // Hc) holding rows starts[b, c] .. starts[b, c] + lengths[b, c] - 1.
    Returns float64 [B, Hq, 1, D]."""
    starts, lengths = np.asarray(starts), np.asarray(lengths)
    batch, heads = starts.shape
    group = q.shape[1] // heads
    out = np.empty(q.shape, dtype=np.float64)
    for b in range(batch):
        for c in range(heads):
            rows = slice(int(starts[b, c]), int(starts[b, c] + lengths[b, c]))
            out[b, c * group:(c + 1) * group] = attention(
                q[b:b + 1, c * group:(c + 1) * group], k[b:b + 1, None, rows],
                v[b:b + 1, None, rows], scale, elem)[0]
    return out


def keydiff_scores(k, window):
    """KeyDiff's key distinctness [B, Hkv, P] of the prefix rows j < P = L - window (float64
    keys [B, Hkv, L, D]; docs/semantics.md, "Comparison scorings"): 1 - <k_j, a> / (|k_j| |a|)
    with a the sum over all L rows of the head's unit keys k / |k| (a zero key's is 0), and
    1 where |k_j| or |a| is 0. A NaN or infinite key makes the head's anchor, so every score
    of the head, NaN. Larger = more distinct; kvpress's KeyDiffPress ranks by -cos(k_j, mean
    unit key), the same order."""
    norms = np.sqrt((k * k).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        anchor = np.where(norms[..., None] == 0, 0.0, k / norms[..., None]).sum(axis=2)
        size = np.sqrt((anchor * anchor).sum(axis=-1))
        prefix = k.shape[2] - window
        dot = np.einsum("bhjd,bhd->bhj", k[:, :, :prefix], anchor)
        cosine = np.where((norms[..., :prefix] == 0) | (size[..., None] == 0), 0.0,
                          dot / (norms[..., :prefix] * size[..., None]))
    return 1.0 - cosine


def aggregate(votes, gqa, kv_heads):
    """Combine the G query heads of each kv head (before pooling) for gqa mean/max."""
    if gqa == "expand":
        return votes
    batch, q_heads, prefix = votes.shape
    grouped = votes.reshape(batch, kv_heads, q_heads // kv_heads, prefix)
    return grouped.mean(axis=2) if gqa == "mean" else grouped.max(axis=2)


def pool(scores, kernel, pooling):
    """1-D pooling along the last axis, stride 1, kernel // 2 on each side.

    avg counts out-of-range neighbours as 0 and always divides by `kernel`
    (avg_pool1d with count_include_pad=True); max looks at in-range neighbours only."""
    if scores.shape[-1] == 0:
        return scores.copy()
    pad = [(0, 0)] * (scores.ndim - 1) + [(kernel // 2, kernel // 2)]
    fill = 0.0 if pooling == "avg" else -np.inf
    windows = sliding_window_view(np.pad(scores, pad, constant_values=fill), kernel, axis=-1)
    return windows.sum(axis=-1) / kernel if pooling == "avg" else windows.max(axis=-1)


def block_sums(scores, block):
    """Each position of the last axis replaced by the sum of its block: blocks of `block`
    consecutive positions from position 0, the last one shorter when `block` does not divide
    the length. `block` 1 returns the scores unchanged."""
    if block == 1 or scores.shape[-1] == 0:
        return scores
    length = scores.shape[-1]
    blocks = -(-length // block)
    pad = [(0, 0)] * (scores.ndim - 1) + [(0, blocks * block - length)]
    sums = np.pad(scores, pad).reshape(*scores.shape[:-1], blocks, block).sum(axis=-1)
    return np.repeat(sums, block, axis=-1)[..., :length]


def _validate_block(block, window, capacity, scoring):
    if isinstance(block, bool) or not isinstance(block, numbers.Integral) or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block!r}")
    if block != 1 and scoring not in VOTE_SCORINGS:
        raise ValueError(f"block only applies to the scorings that vote {VOTE_SCORINGS}, "
                         f"got {scoring!r}")
    if (capacity - window) % block:
        raise ValueError(f"block ({block}) must divide capacity - window "
                         f"({capacity - window} = {capacity} - {window})")


def rank(scores):
    """Positions of a 1-D score vector, best first: descending score, exact ties to the lower
    position, NaN below every number."""
    nan = np.isnan(scores)
    return np.lexsort((np.arange(scores.size), -np.where(nan, 0.0, scores), nan))


def _gather(x, source, indices):
    rows = x[:, source]  # [B, Hc, L, D]
    return np.ascontiguousarray(np.take_along_axis(rows, indices[..., None], axis=2))


def _validate(q, k, v, window, capacity, kernel, pooling, gqa, order, scale, dtype,
              accumulated=False):
    for name, x in (("queries", q), ("keys", k), ("values", v)):
        if x.ndim != 4:
            raise ValueError(f"{name} must have rank 4, got shape {x.shape}")
        if 0 in x.shape:
            raise ValueError(f"{name} has an empty dimension: shape {x.shape}")
    elems = [element_type(x, dtype) for x in (q, k, v)]
    if len(set(elems)) != 1:
        raise ValueError(f"queries, keys and values must share an element type, got {elems}")
    if k.shape != v.shape:
        raise ValueError(f"keys {k.shape} and values {v.shape} must have the same shape")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"batch mismatch: queries {q.shape[0]}, keys {k.shape[0]}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"head dim mismatch: queries {q.shape[3]}, keys {k.shape[3]}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} not a multiple of kv heads {k.shape[1]}")
    for name, value in (("window", window), ("capacity", capacity), ("kernel", kernel)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if capacity <= window:
        raise ValueError(f"capacity ({capacity}) must be greater than window ({window})")
    if kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"kernel must be odd and positive, got {kernel}")
    if not accumulated and q.shape[2] != window:
        raise ValueError(f"queries hold {q.shape[2]} window rows but window is {window}")
    if accumulated and not window <= q.shape[2] <= k.shape[2]:
        raise ValueError(f"queries hold {q.shape[2]} rows: scoring sum / norm_sum needs "
                         f"window ({window}) <= rows <= prompt length ({k.shape[2]})")
    if k.shape[2] < window:
        raise ValueError(f"prompt length {k.shape[2]} is shorter than window {window}")
    for name, value, allowed in (("pooling", pooling, POOLINGS), ("gqa", gqa, GQA_POLICIES),
                                 ("order", order, ORDERS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                              or not math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return elems[0]


# The i8 cache of ``snapkv-compress-kv-cache kv-dtype=i8`` (docs/model-rewrite.md, "An 8-bit
# cache"): a row of D values becomes D int8 values and the four bytes of its f32 scale.
SCALE_BYTES = 4


def quantize_rows(x):
    """``[..., D]`` float32 or f16 (bf16 as uint16 bits) -> ``[..., D + 4]`` int8, exactly as
    the compiled rewrite: ``s = absmax / 127`` in f32, ``q = clamp(roundeven(x / s), -127,
    127)`` (0 where s = 0), then s's bytes, little-endian."""
    x = np.asarray(x)
    x = bf16_to_f32(x) if x.dtype == np.uint16 else x.astype(np.float32)
    scale = (np.max(np.abs(x), axis=-1, keepdims=True, initial=np.float32(0))
             / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint(x / scale), -127, 127)
    q = np.where(scale > 0, q, 0).astype(np.int8)
    return np.concatenate([q, scale.astype("<f4").view(np.int8)], axis=-1)


def dequantize_rows(packed):
    """The packed rows of :func:`quantize_rows` read back as ``q * s`` (float32)."""
    packed = np.ascontiguousarray(packed, dtype=np.int8)
    scale = packed[..., -SCALE_BYTES:].copy().view("<f4")
    return packed[..., :-SCALE_BYTES].astype(np.float32) * scale
