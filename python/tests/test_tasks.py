"""The retrieval task generator (python/snapkv/tasks/retrieval.py): numpy only."""

import numpy as np
import pytest

from snapkv.tasks import retrieval as task

LENGTHS = [task.min_length("mixed"), 100, 512, 4096]


def _needle_tokens(needle):
    return [task.KEY, *needle.key, *needle.value, task.END]


def _check(sample, length):
    ids = sample.ids
    assert ids.dtype == np.int64 and ids.shape == (length,)
    assert ids[0] == task.BOS
    assert ((ids >= 0) & (ids < task.VOCAB_SIZE)).all()
    assert task.PAD not in ids
    # The question ends the prompt and asks for the asked needle's key.
    asked = sample.asked
    assert sample.question_position == length - task.QUESTION_LEN
    assert ids[-task.QUESTION_LEN:].tolist() == [task.QRY, *asked.key]
    assert task.QUESTION_LEN <= 16  # fits an observation window of 16
    # Every needle is where it says, inside [SINK, L - TAIL), without overlaps.
    covered = np.zeros(length, dtype=bool)
    for needle in sample.needles:
        span = slice(needle.start, needle.start + needle.length)
        assert ids[span].tolist() == _needle_tokens(needle)
        assert needle.start >= task.SINK and needle.start + needle.length <= length - task.TAIL
        assert not covered[span].any()
        covered[span] = True
    starts = [n.start for n in sample.needles]
    assert starts == sorted(starts)
    # Outside the needles, the BOS and the question there is filler only.
    rest = ~covered
    rest[0] = False
    rest[sample.question_position:] = False
    assert np.isin(ids[rest], np.asarray(task.FILLER)).all()
    # The answer is the asked value, at value_positions; needle_positions is its span.
    assert sample.answer.tolist() == list(asked.value)
    assert ids[sample.value_positions].tolist() == sample.answer.tolist()
    assert sample.needle_positions.tolist() == list(range(asked.start,
                                                          asked.start + asked.length))
    assert np.isin(sample.answer, np.asarray(task.VALUES)).all()
    # Unambiguous: keys unique, value tokens unique, exactly one asked needle.
    keys = [n.key for n in sample.needles]
    assert len(set(keys)) == len(keys)
    values = [t for n in sample.needles for t in n.value]
    assert len(set(values)) == len(values)
    assert [n.role for n in sample.needles].count("asked") == 1
    for needle in sample.needles:
        differ = sum(a != b for a, b in zip(needle.key, asked.key))
        if needle.role == "distractor":
            assert differ == 1
        elif needle.role == "other":
            assert differ == task.KEY_LEN


@pytest.mark.parametrize("variant", sorted(task.VARIANTS))
@pytest.mark.parametrize("length", LENGTHS)
def test_invariants(variant, length):
    for sample in task.samples(6, length, seed=3, variant=variant):
        _check(sample, length)
        assert sample.variant == variant and sample.length == length and sample.seed == 3


def test_variant_shapes():
    spec_counts = {
        "single": ({"asked": 1}, {1}),
        "multi": ({"asked": 1, "other": 3}, {1}),
        "distractor": ({"asked": 1, "distractor": 2}, {1}),
        "multitoken": ({"asked": 1}, {3}),
    }
    for variant, (roles, answer_lens) in spec_counts.items():
        for sample in task.samples(10, 256, seed=0, variant=variant):
            counts = {}
            for n in sample.needles:
                counts[n.role] = counts.get(n.role, 0) + 1
            assert counts == roles, variant
            assert len(sample.answer) in answer_lens
    mixed = task.samples(200, 256, seed=0)
    assert {len(s.needles) for s in mixed} == set(range(1, 7))
    assert {len(s.answer) for s in mixed} == {1, 2, 3}
    assert any(n.role == "distractor" for s in mixed for n in s.needles)


def test_deterministic_and_seeds_differ():
    a = task.samples(5, 512, seed=11)
    b = task.samples(5, 512, seed=11)
    for x, y in zip(a, b):
        assert np.array_equal(x.ids, y.ids) and x.needles == y.needles
    # generate(..., index=i) is the i-th of samples(); a longer draw extends a shorter one.
    assert np.array_equal(task.generate(512, 11, index=3).ids, a[3].ids)
    assert np.array_equal(task.samples(7, 512, seed=11)[4].ids, a[4].ids)
    # Other seeds (negative and huge ones too), indices and lengths give other prompts.
    others = [task.generate(512, s) for s in (12, -11, 2**70)] + [a[1]]
    for other in others:
        assert not np.array_equal(other.ids, a[0].ids)
    assert not np.array_equal(task.generate(513, 11).ids[:512], a[0].ids)
    # Different variants from one seed are drawn independently.
    assert not np.array_equal(task.generate(512, 11, "single").ids, a[0].ids)


def test_needles_anywhere():
    """The asked needle's position is spread over the whole prompt, not only near the end:
    a cache that keeps only the last L/8 positions misses most of them."""
    length = 1024
    starts = np.array([s.asked.start for s in task.samples(400, length, seed=5)])
    assert starts.min() < length // 10 and starts.max() > length - length // 10
    recent = starts >= length - length // 8
    assert recent.mean() < 0.2
    # Roughly uniform: each quarter holds a fair share.
    quarters = np.bincount(starts * 4 // length, minlength=4)
    assert quarters.min() > 60


@pytest.mark.parametrize("bad, message", [
    (dict(length=10), "too short for variant 'mixed'"),
    (dict(length=512.0), "length must be an integer"),
    (dict(seed="1"), "seed must be an integer"),
    (dict(seed=True), "seed must be an integer"),
    (dict(variant="nope"), "unknown variant 'nope'"),
    (dict(index=-1), "index must be >= 0"),
])
def test_bad_input(bad, message):
    args = dict(length=512, seed=0, variant="mixed", index=0)
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        task.generate(**args)


def test_bad_counts():
    with pytest.raises(ValueError, match="n must be >= 0"):
        task.samples(-1, 512, 0)
    assert task.samples(0, 512, 0) == []
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="distinct value tokens"):
        task.draw(rng, 4096, task.VariantSpec(needles=(30, 30), distractors=(0, 0),
                                              answer_len=(3, 3)))
    with pytest.raises(ValueError, match="cannot hold"):
        task.draw(rng, 64, task.VariantSpec(needles=(9, 9), distractors=(0, 0),
                                            answer_len=(1, 1)))


def test_min_length_is_enough():
    for variant in task.VARIANTS:
        shortest = task.min_length(variant)
        for sample in task.samples(20, shortest, seed=1, variant=variant):
            _check(sample, shortest)
