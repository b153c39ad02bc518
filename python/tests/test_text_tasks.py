"""snapkv.tasks.text: real-text passkey / needle / multikey prompts.

Most tests use a small deterministic fake tokenizer (words, single digits and single
punctuation marks, each with its leading whitespace, like a byte-level BPE's " word"; a BOS
first). The last test uses SmolLM2's real tokenizer.
"""

import math
import re
import types
import zlib

import numpy as np
import pytest

from snapkv.tasks import text

BOS = 1


class FakeTokenizer:
    """``tokenizer(text)`` -> ``.input_ids``; with ``offsets``, also
    ``return_offsets_mapping=True`` -> ``.offset_mapping`` (HF fast tokenizers' convention)."""

    # Trailing whitespace is a token of its own, as in byte-level BPE ("Ġ"): a text prefix
    # ending in a space then tokenizes differently from the whole text ("ĠThe").
    PIECE = re.compile(r"\s*(?:\d|[A-Za-z]+|[^\sA-Za-z\d])|\s+$")

    def __init__(self, offsets=True):
        self.offsets = offsets
        self.calls = 0
        self.vocab = {}  # id -> piece, for decode

    def __call__(self, text, add_special_tokens=True, **kwargs):
        if kwargs and (not self.offsets or set(kwargs) != {"return_offsets_mapping"}):
            raise TypeError(f"unexpected options {sorted(kwargs)}")
        self.calls += 1
        ids, offsets = [], []
        if add_special_tokens:
            ids.append(BOS)
            offsets.append((0, 0))
        for match in self.PIECE.finditer(text):
            piece = match.group()
            ids.append(2 + zlib.crc32(piece.encode()) % 100_000)
            self.vocab[ids[-1]] = piece
            offsets.append(match.span())
        if kwargs:
            return types.SimpleNamespace(input_ids=ids, offset_mapping=offsets)
        return types.SimpleNamespace(input_ids=ids)

    def decode(self, ids):
        return "".join(self.vocab.get(int(i), "") for i in ids)


def whole(word):
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(word) + r"(?![A-Za-z0-9])")


def sentence_span(sample):
    """(start, end) of the asked needle's sentence in the text."""
    a = re.escape(sample.answer)
    sentence = {"passkey": rf"The pass key is {a}\. Remember it\. {a} is the pass key\.",
                "needle": rf"The special magic words for \w+ are {a}\.",
                "multikey": rf"One of the special magic numbers for \w+ is: {a}\."}[sample.task]
    return re.search(sentence, sample.text).span()


@pytest.fixture
def tok():
    return FakeTokenizer()


@pytest.mark.parametrize("task", text.TASKS)
def test_deterministic_and_indices_differ(task, tok):
    a = text.generate(task, 400, 7, 0, tok)
    b = text.generate(task, 400, 7, 0, FakeTokenizer())
    assert (a.text, a.answer, a.depth) == (b.text, b.answer, b.depth)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.needle_positions, b.needle_positions)
    assert a.ids.dtype == np.int64 and a.needle_positions.dtype == np.int64
    assert list(a.ids) == tok(a.text).input_ids
    others = [text.generate(task, 400, 7, 1, tok), text.generate(task, 400, 8, 0, tok)]
    assert all(o.text != a.text for o in others)


@pytest.mark.parametrize("task", text.TASKS)
@pytest.mark.parametrize("length", [120, 537, 3000])
def test_length_bounds(task, length, tok):
    for index in range(3):
        sample = text.generate(task, length, 3, index, tok)
        # The documented guarantee: never more; less only by the next filler word's tokens.
        assert length - 16 <= sample.length <= length
        assert sample.length == len(sample.ids)


def test_length_is_usually_exact(tok):
    slack = [length - text.generate(task, length, 5, 0, tok).length
             for task in text.TASKS for length in (300, 1000, 2500)]
    assert np.mean(slack) <= 3, slack


def test_tokenizer_calls_are_logarithmic():
    tok = FakeTokenizer()
    length = 20_000
    text.generate("passkey", length, 0, 0, tok)
    # Sizing: ~log2(length) whole-prompt calls plus a few; span and answer: 2 more.
    assert tok.calls <= 2 * math.log2(length) + 8, tok.calls


@pytest.mark.parametrize("task", text.TASKS)
def test_depth_is_respected(task, tok):
    for depth in (0.0, 0.05, 0.3, 0.5, 0.77, 0.95, 1.0):
        sample = text.generate(task, 2000, 11, 2, tok, depth=depth)
        assert sample.depth == depth
        where = sample.needle_positions[0] / sample.length
        assert abs(where - depth) < 0.06, (depth, where)


@pytest.mark.parametrize("task", text.TASKS)
def test_answer_only_in_the_needle(task, tok):
    for index in range(4):
        sample = text.generate(task, 1500, 1, index, tok)
        span = tok.decode(sample.ids[sample.needle_positions])
        assert sample.answer in span
        inside = len(whole(sample.answer).findall(span))
        assert inside == (2 if task == "passkey" else 1)
        # Nowhere else in the prompt.
        assert len(whole(sample.answer).findall(sample.text)) == inside


def test_answers():
    tok = FakeTokenizer()
    passkey = text.generate("passkey", 300, 0, 0, tok)
    assert re.fullmatch(r"[1-9]\d{4}", passkey.answer)
    assert f"The pass key is {passkey.answer}. Remember it." in passkey.text
    assert passkey.text.startswith(text.PASSKEY_INTRO)
    assert passkey.text.endswith("\nWhat is the pass key? The pass key is")

    needle = text.generate("needle", 300, 0, 0, tok)
    first, second = needle.answer.split(" and ")
    assert first in text.WORDS and second in text.WORDS and first != second
    city = re.search(r"magic words for (\w+) are", needle.text).group(1)
    assert city in text.CITIES
    assert f"The special magic words for {city} are {needle.answer}." in needle.text
    assert needle.text.endswith(f"The special magic words for {city} are")

    multikey = text.generate("multikey", 600, 0, 0, tok)
    assert re.fullmatch(r"[1-9]\d{6}", multikey.answer)
    found = re.findall(r"One of the special magic numbers for (\w+) is: (\d+)\.", multikey.text)
    assert len(found) == text.DEFAULT_NEEDLES
    keys, numbers = zip(*found)
    assert len(set(keys)) == len(keys) and len(set(numbers)) == len(numbers)
    asked = dict(found)[re.search(r"number for (\w+)\? ", multikey.text).group(1)]
    assert asked == multikey.answer
    assert multikey.text.endswith(":")


def test_multikey_needles_option(tok):
    for needles in (1, 2, 8):
        sample = text.generate("multikey", 1200, 4, 0, tok, needles=needles)
        assert sample.text.count("One of the special magic numbers") == needles
    # The same draws but the count: the asked needle is the same.
    assert (text.generate("multikey", 1200, 4, 0, tok, needles=2).answer
            == text.generate("multikey", 1200, 4, 0, tok, needles=3).answer)


def test_max_new_tokens(tok):
    for task in text.TASKS:
        sample = text.generate(task, 500, 2, 0, tok)
        answer_tokens = len(tok(" " + sample.answer, add_special_tokens=False).input_ids)
        assert sample.max_new_tokens == answer_tokens + text.ANSWER_MARGIN
    assert text.generate("passkey", 500, 2, 0, tok).max_new_tokens == 5 + text.ANSWER_MARGIN


@pytest.mark.parametrize("task", text.TASKS)
def test_span_without_offsets_matches_offsets(task):
    """The prefix-tokenization fallback finds the same span as the character offsets."""
    for depth in (0.0, 0.4, 1.0):
        sample = text.generate(task, 800, 9, 1, FakeTokenizer(), depth=depth)
        start, end = sentence_span(sample)
        plain = FakeTokenizer(offsets=False)
        positions = text._span(plain, sample.text, list(sample.ids), start, end)
        np.testing.assert_array_equal(positions, sample.needle_positions)
        tok = FakeTokenizer()
        tok(sample.text)
        span = tok.decode(sample.ids[sample.needle_positions]).strip()
        assert span.startswith(("The ", "One ")) and span.endswith(".")


def test_depth_without_offsets():
    """Without offsets the needles are placed by characters: roughly at their depth too."""
    tok = FakeTokenizer(offsets=False)
    for task in text.TASKS:
        for depth in (0.1, 0.5, 0.9):
            sample = text.generate(task, 2000, 11, 0, tok, depth=depth)
            assert abs(sample.needle_positions[0] / sample.length - depth) < 0.1


def test_default_depth(tok):
    drawn = [text.generate("needle", 400, 3, i, tok) for i in range(6)]
    assert all(text.DEPTHS[0] <= s.depth <= text.DEPTHS[1] for s in drawn)
    assert len({s.depth for s in drawn}) == 6
    assert [s.depth for s in drawn] == [text.generate("needle", 900, 3, i, tok).depth
                                        for i in range(6)]
    # Giving the depth changes only where the needle goes.
    given = text.generate("needle", 400, 3, 0, tok, depth=0.9)
    assert given.answer == drawn[0].answer and given.text != drawn[0].text


def test_length_sweep_keeps_the_needle(tok):
    short, long = (text.generate("needle", n, 6, 3, tok) for n in (300, 3000))
    assert short.answer == long.answer
    assert short.text.splitlines()[-1] == long.text.splitlines()[-1]


def test_samples(tok):
    batch = text.samples("passkey", 5, 300, 2, tok)
    assert [s.index for s in batch] == list(range(5))
    assert [s.depth for s in batch] == pytest.approx([0.05, 0.275, 0.5, 0.725, 0.95])
    assert batch[3].text == text.generate("passkey", 300, 2, 3, tok, depth=batch[3].depth).text
    assert [s.depth for s in text.samples("needle", 2, 300, 2, tok, depth=0.2)] == [0.2, 0.2]
    assert [s.depth for s in text.samples("needle", 1, 300, 2, tok)] == [0.5]
    assert text.samples("needle", 0, 300, 2, tok) == []
    multikey = text.samples("multikey", 2, 500, 2, tok, needles=2)
    assert all(s.text.count("magic numbers for") == 2 for s in multikey)


def test_correct(tok):
    passkey = text.generate("passkey", 300, 0, 0, tok)
    key = passkey.answer
    for good in (key, " " + key, f" {key}.", f"  {key} is the pass key", f"\n{key}\n", f"'{key}'"):
        assert text.correct(passkey, good), good
    for bad in ("", " ", key[:-1], f" {key}0", f"1{key}", f"{key}x", f" {int(key) + 1}",
                " ".join(key)):
        assert not text.correct(passkey, bad), bad

    needle = text.generate("needle", 300, 0, 0, tok)
    word = needle.answer
    assert text.correct(needle, f" {word}.")
    assert not text.correct(needle, f" {word}s")
    assert not text.correct(needle, f" un{word}")
    assert not text.correct(needle, f" {word.upper()}")


def test_errors(tok):
    with pytest.raises(ValueError, match="unknown task 'niah'.*passkey, needle, multikey"):
        text.generate("niah", 500, 0, 0, tok)
    with pytest.raises(ValueError, match="length 20 is too short.*take \\d+ tokens"):
        text.generate("passkey", 20, 0, 0, tok)
    with pytest.raises(ValueError, match="length must be >= 1"):
        text.generate("passkey", 0, 0, 0, tok)
    with pytest.raises(ValueError, match="length must be an integer"):
        text.generate("passkey", 500.0, 0, 0, tok)
    for depth in (-0.1, 1.5, float("nan"), "0.5"):
        with pytest.raises(ValueError, match="depth must be a number in \\[0, 1\\]"):
            text.generate("needle", 500, 0, 0, tok, depth=depth)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        text.generate("needle", 500, -1, 0, tok)
    with pytest.raises(ValueError, match="index must be >= 0"):
        text.generate("needle", 500, 0, -2, tok)
    with pytest.raises(ValueError, match="unknown option\\(s\\) needles for task 'passkey'"):
        text.generate("passkey", 500, 0, 0, tok, needles=3)
    with pytest.raises(ValueError, match="needles must be >= 1"):
        text.generate("multikey", 500, 0, 0, tok, needles=0)
    with pytest.raises(ValueError, match="needles must be at most"):
        text.generate("multikey", 500, 0, 0, tok, needles=1000)
    with pytest.raises(ValueError, match="n must be >= 0"):
        text.samples("needle", -1, 500, 0, tok)


def test_real_tokenizer_smollm2():
    """SmolLM2's tokenizer (byte-level BPE, digits split one per token): the bounds hold, the
    needle span holds the answer, and the pass key's digits are single tokens inside it.

    Needs transformers and the converted checkpoint that snapkv.models.path names (the lead's
    snapkv/models.py): not skipped when missing, on purpose (the project allows only "no CUDA
    device" skips).
    """
    from transformers import AutoTokenizer

    from snapkv import models

    tok = AutoTokenizer.from_pretrained(str(models.path("smollm2-135m-instruct")))
    for task in text.TASKS:
        for depth in (0.1, 0.6):
            sample = text.generate(task, 1024, 0, 0, tok, depth=depth)
            assert 1024 - 16 <= sample.length <= 1024
            assert list(sample.ids) == tok(sample.text).input_ids
            span = list(sample.ids[sample.needle_positions])
            assert sample.answer in tok.decode(span)
            # The fallback for tokenizers without offsets (prefix tokenization) agrees.
            start, end = sentence_span(sample)
            np.testing.assert_array_equal(
                text._span(lambda t: tok(t), sample.text, list(sample.ids), start, end),
                sample.needle_positions)
            assert abs(sample.needle_positions[0] / sample.length - depth) < 0.1
            if task != "needle":
                # One token per digit, in order, inside the span.
                digits = [tok.convert_tokens_to_ids(d) for d in sample.answer]
                assert any(span[i:i + len(digits)] == digits for i in range(len(span))), (
                    tok.convert_ids_to_tokens(span))
            answer_tokens = tok(" " + sample.answer, add_special_tokens=False).input_ids
            assert sample.max_new_tokens == len(answer_tokens) + text.ANSWER_MARGIN
