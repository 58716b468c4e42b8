"""Offline tokenizers for the tiny models: byte-level BPE trained on the bundled data.

Each family gets its real special tokens and chat template, so rendering, masking and generation
behave as with the released models.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from rpbench.models.chat_templates import load_chat_template

# The released Qwen2/Qwen2.5/Qwen3 tokenizers' pre-tokenization split: a run of newlines is one piece, so
# text is cut into the same pieces whether it is tokenized whole or at chat-template boundaries.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class TokenizerFamily:
    """A tiny tokenizer's special tokens, chat template and pre-tokenization split (each model family sets
    its own, as its released tokenizer has them)."""

    special_tokens: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str
    chat_template: str  # a shipped template's name (rpbench/resources/chat_templates)
    add_bos: bool
    split_pattern: str = QWEN_SPLIT
    added_tokens: tuple[str, ...] = ()  # single tokens that are not special (decoded even when skipping those)


# The sample folders the tiny tokenizers are trained on. Fixed: a new sample folder must not change the
# tokenizers (their merges decide token-level test expectations and the tiny models' learning curves).
CORPUS_FOLDERS = ("mmrole", "rolemrc", "rpgbench")


def bundled_texts() -> Iterator[str]:
    """Every string in the bundled sample data of ``CORPUS_FOLDERS``: the tiny tokenizers' training corpus."""
    root = resources.files("rpbench") / "resources" / "sample"
    stack = [root / folder for folder in CORPUS_FOLDERS]  # popped last first, as a walk from the root
    while stack:
        node = stack.pop()
        if node.is_dir():
            stack.extend(sorted(node.iterdir(), key=lambda p: p.name))
        elif node.name.endswith((".json", ".jsonl")):
            text = node.read_text(encoding="utf-8")
            docs = (
                [json.loads(line) for line in text.splitlines() if line.strip()]
                if node.name.endswith(".jsonl")
                else [json.loads(text)]
            )
            for doc in docs:
                yield from _strings(doc)


def _strings(obj: object) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def train_tokenizer(spec: TokenizerFamily, texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with ``spec``'s special tokens and chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec.split_pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(spec.special_tokens),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    if spec.add_bos:
        bos_id = tok.token_to_id(spec.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A {spec.bos} $B", special_tokens=[(spec.bos, bos_id)]
        )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec.bos,
        eos_token=spec.eos,
        pad_token=spec.pad,
        additional_special_tokens=[t for t in spec.special_tokens if t not in {spec.bos, spec.eos, spec.pad}],
        model_max_length=8192,
    )
    hf.add_tokens(list(spec.added_tokens))
    hf.chat_template = load_chat_template(spec.chat_template)
    return hf


@lru_cache(maxsize=8)
def _trained_once(spec: TokenizerFamily, vocab_size: int) -> PreTrainedTokenizerFast:
    return train_tokenizer(spec, bundled_texts(), vocab_size)


def tiny_tokenizer(spec: TokenizerFamily, vocab_size: int) -> PreTrainedTokenizerFast:
    """A tiny model's tokenizer: trained once per process on the bundled data (a fresh copy)."""
    return copy.deepcopy(_trained_once(spec, vocab_size))
