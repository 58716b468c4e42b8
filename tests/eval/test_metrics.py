"""Reference metrics against hand-computed values and the reference libraries on the same strings."""

from __future__ import annotations

import math

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from rpbench.eval import wordnet
from rpbench.eval.metrics import (
    METRICS,
    CJKRougeTokenizer,
    compute_metrics,
    corpus_bleu,
    fallback_model_path,
    load_bertscorer,
    meteor,
    rouge,
    sentence_bleu,
    word_tokenize,
)

ENGLISH = [
    ("The cats were sitting on the mat, happily.", "A cat sat on the mat.\nIt was happy!"),
    ("I am Captain Flint; I sail the 7 seas since 1750.", "I'm Captain Flint, sailing 7 seas since 1750."),
    ("Knowledge boundaries: I cannot answer that.", "That is outside what I know."),
    ("", "Empty prediction."),
]


# ---------------------------------------------------------------------------------------------- BLEU


def test_sentence_bleu_by_hand():
    # 1..4-gram precisions 3/4, 2/3, 1/2, 0/1; sacrebleu's exp smoothing turns the 0/1 into 1/2; BP = 1
    [value] = sentence_bleu(["the cat sat down"], ["the cat sat up"])
    assert value == pytest.approx(100 * (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25)
    # no 4-gram in a 3-word hypothesis: effective order 3, precisions all 1; BP = exp(1 - 4/3)
    [value] = sentence_bleu(["a dog ran"], ["a dog ran fast"])
    assert value == pytest.approx(100 * math.exp(1 - 4 / 3))


def test_corpus_bleu_by_hand():
    value = corpus_bleu(["the cat sat down", "a dog ran"], ["the cat sat up", "a dog ran fast"])
    # pooled matches: 6/7, 4/5, 2/3, 0/1 -> 1/2 (exp smoothing); hypothesis 7 tokens, reference 8
    assert value == pytest.approx(100 * math.exp(1 - 8 / 7) * (6 / 7 * 4 / 5 * 2 / 3 * 1 / 2) ** 0.25)


def test_bleu_equals_sacrebleu():
    preds, refs = zip(*ENGLISH)
    assert sentence_bleu(preds, refs) == [sacrebleu.sentence_bleu(p, [r]).score for p, r in ENGLISH]
    assert corpus_bleu(preds, refs) == sacrebleu.corpus_bleu(list(preds), [list(refs)]).score


# --------------------------------------------------------------------------------------------- ROUGE


def test_rouge_by_hand_with_stemming():
    scores = rouge(["the cats sat"], ["the cat sat on"])
    # tokens [the cat sat] vs [the cat sat on] ("cats" stems to "cat")
    assert scores["rouge1"] == [pytest.approx(2 * 1 * 0.75 / 1.75)]
    assert scores["rouge2"] == [pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))]
    assert scores["rougeL"] == scores["rouge1"]


def test_rouge_lsum_splits_sentences_on_newlines():
    scores = rouge(["the cat sat\non the mat"], ["on the mat\nthe cat sat"])
    assert scores["rougeL"] == [pytest.approx(0.5)]  # LCS over the whole text: 3 of 6 tokens
    assert scores["rougeLsum"] == [pytest.approx(1.0)]  # each reference sentence fully found


def test_rouge_equals_rouge_score_on_english():
    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    reference = rouge_scorer.RougeScorer(types, use_stemmer=True)
    ours = rouge([p for p, _ in ENGLISH], [r for _, r in ENGLISH])
    for i, (p, r) in enumerate(ENGLISH):
        expected = reference.score(r, p)
        assert {t: ours[t][i] for t in types} == {t: expected[t].fmeasure for t in types}


def test_rouge_scores_cjk_text():
    tokenizer = CJKRougeTokenizer()
    assert tokenizer.tokenize("Hello 世界, the cats!") == ["hello", "世", "界", "the", "cat"]
    assert tokenizer.tokenize("こんにちは") == list("こんにちは")
    # 4 shared characters of 6 and 5: P = 2/3, R = 4/5
    scores = rouge(["他喜欢吃苹果"], ["他爱吃苹果"])
    assert scores["rouge1"] == [pytest.approx(8 / 11)]
    assert scores["rouge2"][0] > 0  # 吃苹, 苹果
    default = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True).score("他爱吃苹果", "他喜欢吃苹果")
    assert default["rouge1"].fmeasure == 0  # what the project's tokenizer fixes


# -------------------------------------------------------------------------------------------- METEOR


def test_word_tokenize_without_punkt():
    assert word_tokenize("Hello there. How are you? I'm fine.") == [
        "Hello",
        "there",
        ".",
        "How",
        "are",
        "you",
        "?",
        "I",
        "'m",
        "fine",
        ".",
    ]
    assert word_tokenize("我很好。") == ["我", "很", "好", "。"]


@pytest.mark.wordnet
def test_meteor_by_hand():
    # 3 matches, P = 1, R = 1/2, one chunk: fragmentation 1/3
    fmean = 1 * 0.5 / (0.9 * 1 + 0.1 * 0.5)
    assert meteor(["the cat sat"], ["the cat sat on a mat"]) == [pytest.approx(fmean * (1 - 0.5 * (1 / 3) ** 3))]
    assert meteor(["the cat"], ["dogs bark"]) == [0.0]


@pytest.mark.wordnet
def test_meteor_uses_wordnet_synonyms():
    synonym, unrelated = meteor(["I bought a new auto", "I bought a new tree"], ["I bought a new car"] * 2)
    assert synonym == pytest.approx(1 - 0.5 * (1 / 5) ** 3)  # "auto" matched to "car" through WordNet
    assert unrelated == pytest.approx(0.8 * (1 - 0.5 * (1 / 4) ** 3))
    assert synonym > unrelated


@pytest.mark.wordnet
def test_wordnet_lexnames_match_the_database():
    wn = wordnet.load_wordnet()
    assert wn.get_version() == "3.0"
    assert len(wordnet.LEXNAMES) == 45
    assert wn.synset("dog.n.01").lexname() == "noun.animal"
    assert wn.synset("run.v.01").lexname() == "verb.motion"
    assert wn.synset("good.a.01").lexname() == "adj.all"
    assert wn.synset("quickly.r.01").lexname() == "adv.all"


# ----------------------------------------------------------------------------------------- BERTScore


@pytest.fixture(scope="module")
def minilm():
    return load_bertscorer(fallback_model_path(), layer=4)


@pytest.mark.slow
def test_bertscore_equals_bert_score_library(minilm):
    import bert_score

    preds = [p for p, _ in ENGLISH[:3]] + ["他喜欢吃苹果", "identical words here"]
    refs = [r for _, r in ENGLISH[:3]] + ["他爱吃苹果", "identical words here"]
    _, _, expected = bert_score.score(preds, refs, model_type=fallback_model_path(), num_layers=4)
    assert minilm.f1(preds, refs) == pytest.approx(expected.tolist(), abs=1e-5)
    assert minilm.describe() == {
        "backbone": fallback_model_path(),
        "layer": 4,
        "fell_back": False,
        "fallback_reason": None,
    }


@pytest.mark.slow
def test_bertscore_identical_and_empty(minilm):
    identical, empty = minilm.f1(["The knight bows to the queen.", ""], ["The knight bows to the queen.", "Hi."])
    assert identical == pytest.approx(1.0, abs=1e-5)
    assert empty == 0.0


@pytest.mark.slow
def test_bertscore_falls_back_to_packaged_model_and_says_so():
    scorer = load_bertscorer("rpbench-test/not-a-cached-model")
    assert scorer.describe() == {
        "backbone": "sentence-transformers/all-MiniLM-L6-v2",
        "layer": 6,
        "fell_back": True,
        "fallback_reason": "'rpbench-test/not-a-cached-model' not in the local Hugging Face cache",
    }
    with pytest.raises(OSError, match="not in the local Hugging Face cache"):
        load_bertscorer("rpbench-test/not-a-cached-model", fallback=False)


# ------------------------------------------------------------------------------------------ together


@pytest.mark.wordnet
def test_compute_metrics_per_sample(minilm):
    preds, refs = ["the cats sat", "他喜欢吃苹果"], ["the cat sat on", "他爱吃苹果"]
    names = ["rouge1", "bleu", "meteor", "bertscore"]
    scores = compute_metrics(preds, refs, names, bertscorer=minilm)
    assert list(scores) == names
    assert all(len(v) == 2 for v in scores.values())
    assert scores["rouge1"] == rouge(preds, refs, ["rouge1"])["rouge1"]
    assert scores["bleu"] == sentence_bleu(preds, refs)
    assert set(compute_metrics(preds, refs, ["bleu"])) == {"bleu"}
    assert set(METRICS) == {"bleu", "rouge1", "rouge2", "rougeL", "rougeLsum", "meteor", "bertscore"}


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown metrics \\['bleurt'\\]"):
        compute_metrics(["a"], ["a"], ["bleurt"])
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        compute_metrics(["a", "b"], ["a"], ["bleu"])
    with pytest.raises(TypeError, match=r"predictions\[1\] is NoneType"):
        compute_metrics(["a", None], ["a", "b"], ["rouge1"])
