"""What the serving tests share (imported like conftest): the bundled retrieval model with
the SnapKV setting test_threads.py compiles too (so the runner's cache holds it once), and a
word-level tokenizer for its 256 ids (``<0>`` .. ``<255>``; it ships none), with a chat
template, so that text prompts, chat messages and stop strings can be tested on it."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "retrieval-llama"
WINDOW, CAPACITY = 16, 64
CHAT_TEMPLATE = ("{% for m in messages %}<4> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<2> {% endif %}")


def words(ids) -> str:
    """The tokenizer's text of `ids`."""
    return " ".join(f"<{int(i)}>" for i in ids)


def said(tokens) -> str:
    """The text of generated `tokens`: special tokens (<0>, <1>, <3>) left out."""
    return words(t for t in tokens if t not in (0, 1, 3))


def write_tokenizer(directory: Path) -> Path:
    """A tokenizer for the retrieval model's ids, saved in `directory`: ``<N>`` is id N;
    <0> (pad), <1> (bos) and <3> (eos, the model's END) are special."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<{i}>": i for i in range(256)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<0>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<0>", bos_token="<1>",
                                   eos_token="<3>", unk_token="<0>")
    fast.chat_template = CHAT_TEMPLATE
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(directory))
    return directory


def load_engine(tokenizer=None, **options):
    """An engine over the retrieval model with SnapKV W=16, C=64 (compiled once, cached)."""
    from snapkv import hf
    from snapkv.serving import load_engine as load

    return load(MODEL, hf.Compaction(window=WINDOW, capacity=CAPACITY), tokenizer=tokenizer,
                **options)
