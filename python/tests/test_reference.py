"""Unit tests of the numpy reference (docs/semantics.md) on hand-checkable cases."""

import math

import numpy as np
import pytest

from snapkv import bf16_to_f32, f32_to_bf16, select
from snapkv.reference import (
    accumulated_votes,
    block_sums,
    carried_select,
    keydiff_scores,
    pool,
    rank,
)


def from_weights(table, values=None):
    """q, k, v for one head whose window query t gives column j the softmax weight
    table[t][j] (up to the row's normaliser): D = W, q_t = e_t, k_j[t] = ln table[t][j],
    used with scale 1. Entries a query cannot see (j > P + t) are ignored; pass 1 there."""
    table = np.asarray(table, dtype=np.float64)
    window, length = table.shape
    q = np.eye(window, dtype=np.float32)[None, None]
    k = np.log(table).T.astype(np.float32)[None, None]
    if values is None:
        values = np.arange(length * window, dtype=np.float32).reshape(length, window)
    return q, k, np.asarray(values, dtype=np.float32)[None, None]


def worked_example():
    """The seed's L=8, W=2, C=5, D=2 example: exp-logit rows a (query 6) and b (query 7)."""
    a = [1, 2, 10, 8, 1, 1, 2, 1]
    b = [1, 1, 8, 12, 1, 1, 1, 1]
    k = np.array([[math.log(x), math.log(y)] for x, y in zip(a, b)], np.float32)
    q = np.array([[math.sqrt(2), 0], [0, math.sqrt(2)]], np.float32)
    v = np.array([[j, -j] for j in range(8)], np.float32)
    return q[None, None], k[None, None], v[None, None]


def test_worked_example():
    q, k, v = worked_example()
    result = select(q, k, v, window=2, capacity=5, kernel=3, pooling="avg")
    # Row 1 (query 6) sums to 25 over j <= 6, row 2 (query 7) to 26 over j <= 7.
    a, b = np.array([1, 2, 10, 8, 1, 1]), np.array([1, 1, 8, 12, 1, 1])
    votes = a / 25 + b / 26
    np.testing.assert_allclose(result.votes[0, 0], votes, rtol=1e-6)
    pooled = np.array([128, 588, 1045, 1019, 610, 102]) / (650 * 3)
    np.testing.assert_allclose(result.pooled[0, 0], pooled, rtol=1e-6)
    assert np.argmax(result.votes[0, 0]) == 3 and np.argmax(result.pooled[0, 0]) == 2
    assert result.indices.tolist() == [[[2, 3, 4, 6, 7]]]
    assert result.indices.dtype == np.int64
    assert result.values[0, 0].tolist() == [[j, -j] for j in [2, 3, 4, 6, 7]]
    assert np.array_equal(result.keys[0, 0], k[0, 0, [2, 3, 4, 6, 7]])
    # The top three pooled scores are already in position order.
    scored = select(q, k, v, window=2, capacity=5, kernel=3, order="score")
    assert scored.indices.tolist() == [[[2, 3, 4, 6, 7]]]


def test_blocks_of_the_worked_example():
    """docs/semantics.md "Blocks" on the worked example (test/Integration/CPU/block.mlir)."""
    q, k, v = worked_example()
    pooled = np.array([128, 588, 1045, 1019, 610, 102]) / (650 * 3)
    two = select(q, k, v, window=2, capacity=6, kernel=3, block=2)
    sums = np.repeat([pooled[0:2].sum(), pooled[2:4].sum(), pooled[4:6].sum()], 2)
    np.testing.assert_allclose(two.pooled[0, 0], sums, rtol=1e-6)
    assert two.indices.tolist() == [[[0, 1, 2, 3, 6, 7]]]
    assert select(q, k, v, window=2, capacity=6, kernel=3, block=2,
                  order="score").indices.tolist() == [[[2, 3, 0, 1, 6, 7]]]
    assert select(q, k, v, window=2, capacity=5, kernel=3, block=3).indices.tolist() == \
        [[[0, 1, 2, 6, 7]]]
    # block 1 is the selection without blocks.
    assert select(q, k, v, window=2, capacity=5, kernel=3, block=1).indices.tolist() == \
        [[[2, 3, 4, 6, 7]]]


def test_block_sums_short_last_block_and_nan():
    scores = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [1.0, np.nan, 0.0, 0.0, 2.0]])
    np.testing.assert_array_equal(block_sums(scores, 2)[0], [3, 3, 7, 7, 5])
    assert np.isnan(block_sums(scores, 2)[1, :2]).all()
    np.testing.assert_array_equal(block_sums(scores, 2)[1, 2:], [0, 0, 2])
    np.testing.assert_array_equal(block_sums(scores, 8)[0], [15] * 5)
    assert block_sums(scores, 1) is scores


@pytest.mark.parametrize("block, scoring, message", [
    (0, "votes", "block must be an integer >= 1, got 0"),
    (2.0, "votes", "block must be an integer >= 1, got 2.0"),
    (4, "votes", "block (4) must divide capacity - window (6 = 8 - 2)"),
    (2, "recent", "block only applies to the scorings that vote"),
])
def test_block_errors(block, scoring, message):
    q, k, v = worked_example()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        select(q, k, v, window=2, capacity=8, block=block, scoring=scoring)


def test_accumulated_votes_by_hand():
    # All-zero queries: query t (at position t when Q = L) spreads 1 / (t + 1) over the
    # columns 0 .. t. L = 4, W = 1, P = 3.
    q, k = np.zeros((1, 1, 4, 2)), np.ones((1, 1, 4, 2))
    votes = accumulated_votes(q, k, 1.0, window=1)
    np.testing.assert_allclose(votes[0, 0], [1 + 1 / 2 + 1 / 3 + 1 / 4, 1 / 2 + 1 / 3 + 1 / 4,
                                             1 / 3 + 1 / 4])
    # norm_sum divides by the queries that see the column: L - j of them.
    normed = accumulated_votes(q, k, 1.0, window=1, normalise=True)
    np.testing.assert_allclose(normed[0, 0], votes[0, 0] / [4, 3, 2])
    # The last Q = 2 queries (positions 2 and 3) see every prefix column: min(Q, L - j) = 2.
    last_two = accumulated_votes(q[:, :, 2:], k, 1.0, window=1, normalise=True)
    np.testing.assert_allclose(last_two[0, 0], [(1 / 3 + 1 / 4) / 2] * 3)


def test_accumulated_scoring_selects_by_all_queries():
    # Q = W: sum is the window's votes (the same softmax rows, summed the same way).
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)
    k = rng.standard_normal((1, 1, 12, 4)).astype(np.float32)
    window = select(q[:, :, 4:], k, k, window=2, capacity=6)
    summed = select(q[:, :, 4:], k, k, window=2, capacity=6, scoring="sum")
    np.testing.assert_array_equal(window.indices, summed.indices)
    np.testing.assert_allclose(window.votes, summed.votes)
    # More queries than the window: ranked by all six, the window still kept.
    six = select(q, k, k, window=2, capacity=6, scoring="norm_sum")
    expected = accumulated_votes(q.astype(np.float64), k.astype(np.float64), 0.5, 2,
                                 normalise=True)
    np.testing.assert_allclose(six.votes, expected)
    assert (six.indices[..., -2:] == [10, 11]).all()
    for rows, message in ((1, r"queries hold 1 rows: scoring sum / norm_sum needs window \(2\)"),
                          (13, r"rows <= prompt length \(12\)")):
        with pytest.raises(ValueError, match=message):
            select(np.zeros((1, 2, rows, 4), np.float32), k, k, window=2, capacity=6, scoring="sum")


def test_keydiff_by_hand():
    # Unit keys e0, e0, e1, e0, e1 sum to a = (3, 2): cos(e0, a) = 3 / sqrt(13) for rows 0,
    # 1, 3 and 2 / sqrt(13) for row 2 (the window row 4 counts in a, is not scored).
    k = np.array([[1, 0], [2, 0], [0, 3], [1, 0], [0, 1]], np.float32)[None, None]
    q = np.zeros((1, 1, 1, 2), np.float32)
    sel = select(q, k, k, window=1, capacity=3, kernel=1, scoring="keydiff")
    np.testing.assert_allclose(sel.votes[0, 0], 1 - np.array([3, 3, 2, 3]) / math.sqrt(13))
    # The most distinct row 2, then the tie among 0, 1, 3 to the lowest; the window.
    assert sel.indices[0, 0].tolist() == [0, 2, 4]
    # A zero key scores exactly 1 and adds nothing to the anchor.
    zero = k.copy()
    zero[0, 0, 1] = 0
    assert keydiff_scores(zero.astype(np.float64), 1)[0, 0, 1] == 1.0
    # A NaN key makes every score of its head NaN: the head keeps the first positions.
    bad = k.copy()
    bad[0, 0, 3, 0] = np.nan
    nan = select(q, bad, bad, window=1, capacity=3, kernel=1, scoring="keydiff")
    assert np.isnan(nan.votes).all() and nan.indices[0, 0].tolist() == [0, 1, 4]


def test_keydiff_ranks_like_kvpress_and_ignores_gqa():
    # kvpress's KeyDiffPress: -cosine_similarity(k, mean of the normalised keys), per kv head.
    rng = np.random.default_rng(5)
    k = rng.standard_normal((1, 2, 40, 8)).astype(np.float32)
    q = rng.standard_normal((1, 4, 4, 8)).astype(np.float32)
    k64 = k.astype(np.float64)
    unit = k64 / np.linalg.norm(k64, axis=-1, keepdims=True)
    anchor = unit.mean(axis=2, keepdims=True)
    kvpress = -(unit * anchor).sum(-1) / np.linalg.norm(anchor, axis=-1)
    ours = keydiff_scores(k64, 4)
    for h in range(2):
        assert rank(ours[0, h]).tolist() == rank(kvpress[0, h, :36]).tolist()
    mean = select(q, k, k, window=4, capacity=12, kernel=1, gqa="mean", scoring="keydiff")
    top = select(q, k, k, window=4, capacity=12, kernel=1, gqa="max", scoring="keydiff")
    expand = select(q, k, k, window=4, capacity=12, kernel=1, scoring="keydiff")
    np.testing.assert_array_equal(mean.indices, top.indices)
    np.testing.assert_array_equal(expand.indices, np.repeat(mean.indices, 2, axis=1))
    # Pooled like the votes.
    pooled = select(q, k, k, window=4, capacity=12, kernel=5, gqa="mean", scoring="keydiff")
    np.testing.assert_allclose(pooled.pooled, pool(ours, 5, "avg"))
    with pytest.raises(ValueError, match="block only applies to the scorings that vote"):
        select(q, k, k, window=4, capacity=12, gqa="mean", scoring="keydiff", block=4)


def test_carried_select_by_hand():
    """Carried scores: a row's total is its carried score plus the chunk's accumulated votes
    (window 1: every row but the last; not pooled); the top C - W of the first L - W rows by
    total and the last W rows are kept, and their totals carried on."""
    # All-zero queries over T = 2 cache rows and a chunk of 4: chunk query t (at row 2 + t)
    # spreads 1 / (t + 3) over rows 0 .. 2 + t.
    q, k = np.zeros((1, 1, 4, 2), np.float32), np.ones((1, 1, 6, 2), np.float32)
    v = np.arange(12, dtype=np.float32).reshape(1, 1, 6, 2)
    votes = accumulated_votes(q.astype(np.float64), k.astype(np.float64), 1.0, window=1)[0, 0]
    carried = np.array([[[0.0, 5.0]]])
    sel = carried_select(q, k, v, carried, window=2, capacity=4, gqa="mean")
    np.testing.assert_allclose(sel.totals[0, 0], [votes[0], votes[1] + 5.0, *votes[2:], 0.0])
    # Rows 0 .. 3 compete: row 1 (carried 5) first, then row 0 (the most votes); 4, 5 kept.
    np.testing.assert_array_equal(sel.indices[0, 0], [0, 1, 4, 5])
    np.testing.assert_array_equal(sel.values, v[:, :, [0, 1, 4, 5]])
    np.testing.assert_allclose(sel.scores[0, 0], sel.totals[0, 0, [0, 1, 4, 5]])
    # Without a carry row 0 outranks row 1 (more queries see it)...
    plain = carried_select(q, k, v, np.zeros((1, 1, 2)), window=2, capacity=3, gqa="mean")
    np.testing.assert_array_equal(plain.indices[0, 0], [0, 4, 5])
    # ...which the carry reverses; shorter than the capacity, every row is kept and scored.
    np.testing.assert_array_equal(
        carried_select(q, k, v, carried, window=2, capacity=3, gqa="mean").indices[0, 0],
        [1, 4, 5])
    short = carried_select(q, k, v, carried, window=2, capacity=8, gqa="mean")
    np.testing.assert_array_equal(short.indices[0, 0], np.arange(6))
    np.testing.assert_allclose(short.scores, short.totals)
    # norm_sum divides each row's votes by the queries that see it (min(4, 6 - j)).
    normed = carried_select(q, k, v, carried, window=2, capacity=4, gqa="mean",
                            scoring="norm_sum")
    np.testing.assert_allclose(normed.totals[0, 0, :5] - [0, 5, 0, 0, 0],
                               votes / [4, 4, 4, 3, 2])
    for bad, message in ((dict(carried=np.zeros((1, 1, 3))), r"one per cache row"),
                         (dict(scoring="votes"), r"scoring must be one of"),
                         (dict(gqa="expand"), r"gqa must be mean or max")):
        args = dict(carried=carried, scoring="sum", gqa="mean") | bad
        with pytest.raises(ValueError, match=message):
            carried_select(q, k, v, args.pop("carried"), window=2, capacity=4, **args)


def test_counter_example_full_softmax_denominator():
    # Prefix A, B (positions 0, 1), window queries at 2 and 3. Full-softmax weights:
    # query 2: A .09, B .01, itself .9; query 3: A .225, B .675, window columns .05 + .05.
    q, k, v = from_weights([[9, 1, 90, 1], [9, 27, 2, 2]])
    result = select(q, k, v, window=2, capacity=3, kernel=1, scale=1.0)
    np.testing.assert_allclose(result.votes[0, 0], [0.315, 0.685], rtol=1e-6)
    assert result.indices.tolist() == [[[1, 2, 3]]]  # B
    # The case discriminates: with the window columns' weight (nearly) removed, the full
    # softmax IS the prefix-only normalisation, which gives A 1.15, B 0.85 and keeps A.
    tiny = 1e-30
    q, k, v = from_weights([[9, 1, tiny, 1], [9, 27, tiny, tiny]])
    prefix_only = select(q, k, v, window=2, capacity=3, kernel=1, scale=1.0)
    np.testing.assert_allclose(prefix_only.votes[0, 0], [1.15, 0.85], rtol=1e-6)
    assert prefix_only.indices.tolist() == [[[0, 2, 3]]]  # A


def test_masked_future_columns_are_ignored():
    # Query 6 of the worked example must not see position 7: changing that weight is a no-op.
    q, k, v = worked_example()
    base = select(q, k, v, window=2, capacity=5, kernel=3)
    k2 = k.copy()
    k2[0, 0, 7, 0] = 50.0
    changed = select(q, k2, v, window=2, capacity=5, kernel=3)
    np.testing.assert_array_equal(base.votes, changed.votes)


def test_exact_ties_go_to_lower_position():
    # All-zero queries: every visible column gets the same weight, so all votes tie.
    rng = np.random.default_rng(1)
    k = rng.standard_normal((1, 1, 7, 4)).astype(np.float32)
    q = np.zeros((1, 1, 1, 4), np.float32)
    for order in ("position", "score"):
        result = select(q, k, k, window=1, capacity=4, kernel=1, order=order)
        assert result.indices.tolist() == [[[0, 1, 2, 6]]]
    # Identical key rows 1, 3, 5 tie exactly; only two of them fit after position 4.
    q, k, v = from_weights([[1, 5, 1, 5, 9, 5, 1, 1]])
    k[0, 0, 3] = k[0, 0, 5] = k[0, 0, 1]
    result = select(q, k, v, window=1, capacity=4, kernel=1, scale=1.0)
    assert result.votes[0, 0, 1] == result.votes[0, 0, 3] == result.votes[0, 0, 5]
    assert result.indices.tolist() == [[[1, 3, 4, 7]]]
    scored = select(q, k, v, window=1, capacity=4, kernel=1, scale=1.0, order="score")
    assert scored.indices.tolist() == [[[4, 1, 3, 7]]]


def test_pooled_ties_after_max_pooling():
    q, k, v = worked_example()
    # votes*650 = [51, 77, 460, 508, 51, 51]; max kernel 5 = [460, 508, 508, 508, 508, 508].
    result = select(q, k, v, window=2, capacity=5, kernel=5, pooling="max")
    assert result.indices.tolist() == [[[1, 2, 3, 6, 7]]]


def test_nan_ranks_below_every_number():
    scores = np.array([np.nan, 0.1, np.nan, 0.3, 0.1, 0.0])
    assert rank(scores).tolist() == [3, 1, 4, 5, 0, 2]
    # A NaN key makes every vote NaN (softmax rows are poisoned): the ties among NaN go low.
    q, k, v = worked_example()
    k = k.copy()
    k[0, 0, 4, 0] = np.nan
    result = select(q, k, v, window=2, capacity=5, kernel=3)
    assert np.isnan(result.pooled).all()
    assert result.indices.tolist() == [[[0, 1, 2, 6, 7]]]


def test_avg_pooling_divides_by_kernel_at_borders():
    np.testing.assert_allclose(pool(np.array([1.0, 1.0, 1.0]), 3, "avg"), [2 / 3, 1, 2 / 3])
    np.testing.assert_allclose(pool(np.array([1.0, 2.0]), 5, "avg"), [3 / 5, 3 / 5])
    # Prefix votes ~[.30, .30, 0, .33]: with zero padding position 2 wins (.21 vs .20);
    # dividing the border by its 2 in-range neighbours would pick position 0 (.30).
    q, k, v = from_weights([[0.30, 0.30, 1e-9, 0.33, 0.07]])
    result = select(q, k, v, window=1, capacity=2, kernel=3, scale=1.0)
    np.testing.assert_allclose(result.pooled[0, 0], [0.2, 0.2, 0.21, 0.11], rtol=1e-5)
    assert result.indices.tolist() == [[[2, 4]]]


def test_max_pooling_uses_in_range_neighbours_only():
    # Negative scores show that out-of-range neighbours are not zeros.
    np.testing.assert_array_equal(pool(np.array([-1.0, -2.0, -3.0]), 3, "max"),
                                  [-1.0, -1.0, -2.0])
    np.testing.assert_array_equal(pool(np.array([3.0, 1.0, 2.0, 0.0]), 3, "max"),
                                  [3.0, 3.0, 2.0, 2.0])
    assert pool(np.array([4.0, 5.0]), 1, "max").tolist() == [4.0, 5.0]


def test_short_prompt_bypasses_selection():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 4, 2, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 4, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 4, 8)).astype(np.float32)
    result = select(q, k, v, window=2, capacity=5)
    assert result.indices.shape == (2, 4, 4)
    assert (result.indices == np.arange(4)).all()
    assert result.votes.shape == result.pooled.shape == (2, 4, 0)
    for h in range(4):  # query head h reads kv head h // G (G = 2)
        assert np.array_equal(result.keys[:, h], k[:, h // 2])
        assert np.array_equal(result.values[:, h], v[:, h // 2])
    mean = select(q, k, v, window=2, capacity=5, gqa="mean")
    assert mean.indices.shape == (2, 2, 4) and np.array_equal(mean.keys, k)


def test_prompt_equal_to_capacity_goes_through_selection():
    q, k, v = worked_example()
    result = select(q, k, v, window=2, capacity=8, kernel=3)
    assert result.indices.tolist() == [[list(range(8))]]
    assert result.votes.shape == (1, 1, 6)
    scored = select(q, k, v, window=2, capacity=8, kernel=3, order="score")
    # pooled*1950 = [128, 588, 1045, 1019, 610, 102]
    assert scored.indices.tolist() == [[[2, 3, 4, 1, 0, 5, 6, 7]]]


def test_window_equal_to_prompt_has_no_prefix():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    k = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    result = select(q, k, k, window=3, capacity=4)
    assert result.indices.tolist() == [[[0, 1, 2]]] and result.votes.shape == (1, 1, 0)


def gqa_case():
    """Hq = 2 query heads on one kv head; position 3 is the single window query.
    Prefix votes: head 0 [.6, 0, .35], head 1 [0, .5, .45]."""
    a = [0.6, 1e-9, 0.35, 0.05]
    b = [1e-9, 0.5, 0.45, 0.05]
    k = np.log(np.array([a, b])).T.astype(np.float32)[None, None]  # [1, 1, 4, 2]
    q = np.eye(2, dtype=np.float32).reshape(1, 2, 1, 2)
    v = np.arange(8, dtype=np.float32).reshape(1, 1, 4, 2)
    return q, k, v


@pytest.mark.parametrize("gqa, heads, expected", [
    ("expand", 2, [[0, 3], [1, 3]]),  # each query head its own choice
    ("mean", 1, [[2, 3]]),            # mean [.3, .25, .4]
    ("max", 1, [[0, 3]]),             # max [.6, .5, .45]
])
def test_gqa_policies(gqa, heads, expected):
    q, k, v = gqa_case()
    result = select(q, k, v, window=1, capacity=2, kernel=1, gqa=gqa, scale=1.0)
    assert result.indices.tolist() == [expected]
    assert result.keys.shape == (1, heads, 2, 2)
    for h in range(heads):
        assert np.array_equal(result.keys[0, h], k[0, 0, expected[h]])
        assert np.array_equal(result.values[0, h], v[0, 0, expected[h]])


def test_expand_maps_query_head_to_kv_head_by_division():
    # Hq = 4, Hkv = 2: heads 0, 1 read kv head 0 and heads 2, 3 read kv head 1 (not h % Hkv).
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 4, 2, 4)).astype(np.float32)
    k = rng.standard_normal((1, 2, 9, 4)).astype(np.float32)
    v = rng.standard_normal((1, 2, 9, 4)).astype(np.float32)
    result = select(q, k, v, window=2, capacity=5, kernel=3)
    for h in range(4):
        alone = select(q[:, h:h + 1], k[:, h // 2:h // 2 + 1], v[:, h // 2:h // 2 + 1],
                       window=2, capacity=5, kernel=3)
        assert np.array_equal(result.indices[:, h], alone.indices[:, 0])
        assert np.array_equal(result.keys[:, h], k[0, h // 2][result.indices[0, h]][None])


def test_score_order():
    q, k, v = from_weights([[0.1, 0.4, 0.2, 0.3, 1.0]])
    position = select(q, k, v, window=1, capacity=4, kernel=1, scale=1.0)
    assert position.indices.tolist() == [[[1, 2, 3, 4]]]
    score = select(q, k, v, window=1, capacity=4, kernel=1, scale=1.0, order="score")
    assert score.indices.tolist() == [[[1, 3, 2, 4]]]
    assert np.array_equal(score.values[0, 0], v[0, 0, [1, 3, 2, 4]])


def test_default_scale_and_max_subtraction():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 2, 2, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, 10, 16)).astype(np.float32)
    implicit = select(q, k, k, window=2, capacity=6)
    explicit = select(q, k, k, window=2, capacity=6, scale=0.25)
    np.testing.assert_array_equal(implicit.votes, explicit.votes)
    # Logits around 1e4 overflow exp() without max-subtraction.
    big = select(q * 100, k * 100, k, window=2, capacity=6, scale=1.0)
    assert np.isfinite(big.votes).all()


def test_half_precision_rows_are_copied_bit_exactly():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 1, 6, 4)).astype(np.float32)
    q = rng.standard_normal((1, 1, 2, 4)).astype(np.float32)
    half = select(q.astype(np.float16), x.astype(np.float16), x.astype(np.float16),
                  window=2, capacity=4, kernel=3)
    assert half.keys.dtype == np.float16
    bits = f32_to_bf16(x)
    bf = select(f32_to_bf16(q), bits, bits, window=2, capacity=4, kernel=3, dtype="bf16")
    assert bf.keys.dtype == np.uint16
    assert np.array_equal(bf.keys[0, 0], bits[0, 0][bf.indices[0, 0]])


def test_bf16_conversions():
    bits = f32_to_bf16(np.array([1.0, -2.5, 1 + 2 ** -8, 1 + 3 * 2 ** -8, np.nan], np.float32))
    assert bits[:4].tolist() == [0x3F80, 0xC020, 0x3F80, 0x3F82]  # ties to even
    assert np.isnan(bf16_to_f32(bits)[4])
    assert bf16_to_f32(np.array([0x4049], np.uint16)).tolist() == [3.140625]


def good_inputs():
    q = np.zeros((1, 4, 2, 8), np.float32)
    k = np.zeros((1, 2, 8, 8), np.float32)
    return q, k, k.copy()


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v, o: (q[0], k, v, o), "queries must have rank 4"),
    (lambda q, k, v, o: (q, k[:, :, :, :4], v[:, :, :, :4], o), "head dim mismatch"),
    (lambda q, k, v, o: (q, np.concatenate([k, k]), np.concatenate([v, v]), o),
     "batch mismatch"),
    (lambda q, k, v, o: (q[:, :3], k, v, o), "not a multiple of kv heads"),
    (lambda q, k, v, o: (q, k, v[:, :, :7], o), "must have the same shape"),
    (lambda q, k, v, o: (q, k.astype(np.float16), v, o), "share an element type"),
    (lambda q, k, v, o: (q.astype(np.float64), k, v, o), "float32, float16 or bf16"),
    (lambda q, k, v, o: (q.view(np.uint16), k, v, o), "dtype='bf16'"),
    (lambda q, k, v, o: (q, k, v, {**o, "window": 0}), "window must be >= 1"),
    (lambda q, k, v, o: (q, k, v, {**o, "capacity": 2}), "must be greater than window"),
    (lambda q, k, v, o: (q, k, v, {**o, "kernel": 4}), "kernel must be odd"),
    (lambda q, k, v, o: (q, k, v, {**o, "kernel": -1}), "kernel must be odd"),
    (lambda q, k, v, o: (q, k, v, {**o, "kernel": 3.0}), "kernel must be an integer"),
    (lambda q, k, v, o: (q, k, v, {**o, "window": 3}), "hold 2 window rows"),
    (lambda q, k, v, o: (q, k[:, :, :1], v[:, :, :1], o), "shorter than window"),
    (lambda q, k, v, o: (q, k, v, {**o, "pooling": "sum"}), "pooling must be one of"),
    (lambda q, k, v, o: (q, k, v, {**o, "gqa": "share"}), "gqa must be one of"),
    (lambda q, k, v, o: (q, k, v, {**o, "order": "random"}), "order must be one of"),
    (lambda q, k, v, o: (q, k, v, {**o, "scale": float("nan")}), "scale must be a finite"),
    (lambda q, k, v, o: (q, k, v, {**o, "dtype": "f64"}), "dtype must be one of"),
])
def test_argument_errors(change, message):
    q, k, v, options = change(*good_inputs(), {"window": 2, "capacity": 5})
    with pytest.raises(ValueError, match=message):
        select(q, k, v, **options)


def test_infinite_logits_follow_the_hostile_value_rules():
    # docs/hostile-values.md rule 1 (the compiled kernels' behaviour, hostile_values.mlir):
    # L = 6, W = 2, D = 1, q = 1, scale 1, kernel 1, so the logits are the keys.
    q = np.ones((1, 1, 2, 1), np.float32)

    def pooled(keys):
        k = np.array(keys, np.float32).reshape(1, 1, 6, 1)
        return select(q, k, k, window=2, capacity=4, kernel=1, scale=1.0)

    # One +inf column takes each row's whole mass (not inf - inf = NaN).
    one = pooled([0, 0, np.inf, 0, 0, 0])
    np.testing.assert_array_equal(one.pooled, [[[0, 0, 2, 0]]])
    np.testing.assert_array_equal(one.indices, [[[0, 2, 4, 5]]])
    # Two share it.
    np.testing.assert_array_equal(pooled([np.inf, 0, np.inf, 0, 0, 0]).pooled, [[[1, 0, 1, 0]]])
    # All visible logits -inf: uniform over the visible columns only (5 for the first window
    # query, 6 for the second), never over the masked future column.
    uniform = pooled([-np.inf] * 6)
    np.testing.assert_allclose(uniform.pooled, np.full((1, 1, 4), 1 / 5 + 1 / 6))
    np.testing.assert_array_equal(uniform.indices, [[[0, 1, 4, 5]]])


def test_layer_capacities():
    """The rewrite's per-layer budgets (test/Unit/budgets.test checks the C++ side on the same
    shapes): uniform everywhere, or PyramidKV's endpoints joined by a floored line."""
    from snapkv.reference import layer_capacities

    assert layer_capacities("uniform", 32, 256, 4) == [256] * 4
    smollm2 = layer_capacities("pyramid", 32, 256, 30)
    assert smollm2[:3] == [469, 454, 439] and smollm2[-3:] == [72, 57, 43]
    assert sum(c - 32 for c in smollm2) == 6706 <= 30 * 224
    assert all(a >= b for a, b in zip(smollm2, smollm2[1:]))
    assert layer_capacities("pyramid", 4, 16, 2, beta=2) == [22, 10]
    assert layer_capacities("pyramid", 4, 8, 3) == [11, 8, 5]
    assert layer_capacities("pyramid", 4, 8, 1) == [8]
    assert layer_capacities("inverted-pyramid", 32, 256, 30) == smollm2[::-1]
    with pytest.raises(ValueError, match="uniform, pyramid or inverted-pyramid"):
        layer_capacities("cone", 4, 8, 2)


def test_adaptive_counts_rank_all_heads_together():
    """budget=adaptive (Ada-KV's allocation): the layer's Hc * (C - W)
    prefix slots go to the best (head, position) pairs of all heads; ties to the lower head,
    then the lower position; `floor` positions per head first; NaN below every number."""
    from snapkv.reference import adaptive_counts, adaptive_indices

    concentrated = [10.0, 0, 0, 0, 0, 0]
    flat = [1.0] * 6
    # Budget 2 * 2 = 4: head 0's one high score, then head 1's flat ones.
    assert adaptive_counts([concentrated, flat], keep=2).tolist() == [1, 3]
    # All equal: ties go to the lower head, which takes every one of its positions.
    assert adaptive_counts([[1.0] * 6, [1.0] * 6], keep=3).tolist() == [6, 0]
    # ... unless each head first takes its floor.
    assert adaptive_counts([[1.0] * 6, [1.0] * 6], keep=3, floor=1).tolist() == [5, 1]
    # The budget holds every position: every head keeps its whole prefix.
    assert adaptive_counts([flat[:2], concentrated[:2]], keep=3).tolist() == [2, 2]
    # NaN ranks below every number, so head 1's NaNs are taken last.
    nan = float("nan")
    assert adaptive_counts([[0.5, 0.25, 0.0, -1.0], [nan, nan, 2.0, nan]], keep=2).tolist() \
        == [3, 1]
    # The counts always spend the whole budget.
    scores = np.random.default_rng(0).standard_normal((4, 50))
    for keep, floor in ((1, 0), (10, 3), (10, 10), (49, 5)):
        counts = adaptive_counts(scores, keep, floor)
        assert counts.sum() == 4 * keep and counts.min() >= floor
    with pytest.raises(ValueError, match="floor must be between 0 and capacity - window"):
        adaptive_counts(scores, keep=3, floor=4)
    # Each head keeps its own best positions, then the window.
    kept = adaptive_indices([concentrated, [0, 1.0, 2.0, 3.0, 0, 0]], keep=2, window=2)
    assert [k.tolist() for k in kept] == [[0, 6, 7], [1, 2, 3, 6, 7]]
    best_first = adaptive_indices([concentrated, [0, 1.0, 2.0, 3.0, 0, 0]], keep=2, window=2,
                                  order="score")
    assert best_first[1].tolist() == [3, 2, 1, 6, 7]


def test_select_adaptive_packs_each_heads_rows():
    """reference.select_adaptive (snapkv.select_adaptive): each head's kept positions, then its
    window, packed head after head, with offsets; rows copied from the head's kv head."""
    from snapkv.reference import adaptive_indices, select_adaptive

    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 20, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 20, 8)).astype(np.float32)
    out = select_adaptive(q, k, v, window=2, capacity=6, floor=1, kernel=3, gqa="expand")
    per_head = adaptive_indices(out.pooled[0], keep=4, window=2, floor=1)
    assert out.offsets[0].tolist() == [0, *np.cumsum([len(p) for p in per_head]).tolist()]
    assert out.offsets[0, -1] == 4 * 6 and out.indices.shape == (1, 24)
    for h, positions in enumerate(per_head):
        rows = slice(out.offsets[0, h], out.offsets[0, h + 1])
        assert out.indices[0, rows].tolist() == positions.tolist()
        assert np.array_equal(out.keys[0, rows], k[0, h // 2, positions])
        assert np.array_equal(out.values[0, rows], v[0, h // 2, positions])
    # A short prompt keeps every position of every head.
    short = select_adaptive(q, k[:, :, :5], v[:, :, :5], window=2, capacity=6)
    assert short.indices.tolist() == [list(range(5)) * 4]
    assert short.offsets.tolist() == [[0, 5, 10, 15, 20]]
    with pytest.raises(ValueError, match="floor must be between 0 and capacity - window"):
        select_adaptive(q, k, v, window=2, capacity=6, floor=5)
    with pytest.raises(ValueError, match="scoring must be votes or prefix_votes"):
        select_adaptive(q, k, v, window=2, capacity=6, scoring="recent")


def test_chunk_bounds():
    """Chunked prefill's chunks: N at a time; a last chunk shorter than the window joins the
    one before it; one chunk when the prompt fits."""
    from snapkv.reference import chunk_bounds

    assert chunk_bounds(100, 32, 8) == [(0, 32), (32, 64), (64, 100)]    # 4 < 8 joins
    assert chunk_bounds(104, 32, 8) == [(0, 32), (32, 64), (64, 96), (96, 104)]
    assert chunk_bounds(100, 32) == [(0, 32), (32, 64), (64, 96), (96, 100)]
    assert chunk_bounds(32, 32, 8) == [(0, 32)]
    assert chunk_bounds(20, 32, 8) == [(0, 20)]
    assert chunk_bounds(35, 32, 8) == [(0, 35)]                            # 3 < 8 joins
    with pytest.raises(ValueError, match=r"chunk \(4\) is shorter than the window \(8\)"):
        chunk_bounds(100, 4, 8)
    with pytest.raises(ValueError, match="need length, chunk and minimum >= 1"):
        chunk_bounds(0, 32, 8)
