"""Reference metrics against hand-computed values and the reference libraries on the same strings."""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch
from rouge_score import rouge_scorer

from rpbench.eval.stats import summarize
from rpbench.scoring import wordnet
from rpbench.scoring.metrics import (
    METRICS,
    CJKRougeTokenizer,
    bleu_tokens,
    compute_metrics,
    corpus_bleu,
    fallback_model_path,
    load_bertscorer,
    meteor,
    paper_bleu,
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


def test_paper_bleu_by_hand():
    # 13a tokens; precisions 5/6, 3/5, 2/4, 1/3 ("the cat sat on"); equal lengths: BP = 1
    [value] = paper_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert value == pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    # no smoothing: a 3-token prediction has no 4-gram, so BLEU is 0 (the smoothed one is not)
    assert paper_bleu(["a dog ran"], ["a dog ran fast"]) == [0.0]
    # all precisions 1, 5 tokens against 7 ("mat." is two 13a tokens): BP = exp(1 - 7/5)
    [value] = paper_bleu(["the cat sat on the"], ["the cat sat on the mat."])
    assert value == pytest.approx(math.exp(1 - 7 / 5))


def test_paper_bleu_leaves_empty_texts_out_of_the_mean_as_the_release():
    # The release's evaluate BLEU divides by zero on an empty side (ratio 0/r or c/0); the NaN is skipped
    # by its summary. Whitespace-only tokenizes to nothing too.
    predictions = ["the cat sat on the mat", "", "  ", "x"]
    references = ["the cat sat on a mat", "a reference", "a reference", ""]
    values = paper_bleu(predictions, references)
    assert values[1:] == [None, None, None]
    summary = summarize(values, n_resamples=10)
    assert (summary["n"], summary["n_missing"]) == (1, 3)
    assert summary["mean"] == pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    assert paper_bleu(predictions, references, empty="zero")[1:] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="evaluator.bleu.empty"):
        paper_bleu(predictions, references, empty="nan")


PEER_PAIRS = [
    *ENGLISH[:3],
    ("The cat sat on the mat (quietly), didn't it?", "The cat sat on the mat, didn't it? Quietly."),
    ("In 1750 the ship -- a brig -- sailed west.", "In 1750 the ship, a brig, sailed to the west."),
    ("Yes! Yes! Yes! I will do it.", "Yes, I will do it, I promise."),
]


def test_paper_bleu_equals_unsmoothed_sacrebleu_and_nltk():
    from nltk.translate.bleu_score import sentence_bleu as nltk_sentence_bleu

    preds, refs = zip(*PEER_PAIRS)
    ours = paper_bleu(preds, refs)
    unsmoothed = sacrebleu.BLEU(smooth_method="none", tokenize="13a")
    assert ours == pytest.approx([unsmoothed.sentence_score(p, [r]).score / 100 for p, r in PEER_PAIRS], abs=1e-12)
    nltk_values = [nltk_sentence_bleu([bleu_tokens(r)], bleu_tokens(p)) for p, r in PEER_PAIRS]
    assert ours == pytest.approx(nltk_values, abs=1e-12)
    assert sum(v > 0 for v in ours) >= 3 and 0.0 in ours  # the pairs exercise both cases


def test_japanese_bleu_and_rouge_split_every_character_alike():
    # sacrebleu's zh tokenizer would keep the kana run "が" / "きです" whole; here every character is a token
    text = "猫が大好きです。ＡＩ、안녕"
    assert bleu_tokens(text) == list("猫が大好きです。ＡＩ、안녕")
    assert CJKRougeTokenizer().tokenize(text) == [t.lower() for t in "猫が大好きですＡＩ안녕"]  # ROUGE drops 。、
    # prediction 猫が好きです (6 tokens) against 猫が大好きです (7): matches 6/6, 4/5, 2/4, 1/3; BP exp(1 - 7/6)
    [bleu] = paper_bleu(["猫が好きです"], ["猫が大好きです"])
    assert bleu == pytest.approx(math.exp(1 - 7 / 6) * (1 * 4 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    scores = rouge(["猫が好きです"], ["猫が大好きです"], ["rouge1", "rouge2"], tokenizer="cjk")
    assert scores["rouge1"] == [pytest.approx(12 / 13)]  # P 6/6, R 6/7
    assert scores["rouge2"] == [pytest.approx(8 / 11)]  # P 4/5, R 4/6


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
    assert scores["rougeLsum"] == [pytest.approx(1.0)]  # each line fully found in the other text


def test_rouge_equals_rouge_score_on_english_in_either_order():
    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    reference = rouge_scorer.RougeScorer(types, use_stemmer=True)
    released = rouge([p for p, _ in ENGLISH], [r for _, r in ENGLISH])
    documented = rouge([p for p, _ in ENGLISH], [r for _, r in ENGLISH], order="reference_first")
    for i, (p, r) in enumerate(ENGLISH):
        # the released evaluation.py: rouge_score.score(response, reference)
        assert {t: released[t][i] for t in types} == {t: s.fmeasure for t, s in reference.score(p, r).items()}
        assert {t: documented[t][i] for t in types} == {t: s.fmeasure for t, s in reference.score(r, p).items()}


def test_rouge_lsum_follows_the_released_argument_order_on_multi_line_texts():
    # tokens "i agree" twice (agree -> agre). Response first (the release): each of the response's two
    # lines finds its 2 tokens in the one-line reference, 4 hits of 4 on both sides: F1 = 1. Reference
    # first: the reference's one line takes the union of its LCS with each response line, the same 2
    # positions, so 2 hits: P = R = 2/4, F1 = 0.5.
    response, reference = "I agree\nI agree", "I agree I agree"
    assert rouge([response], [reference], ["rougeLsum"])["rougeLsum"] == [pytest.approx(1.0)]
    assert rouge([response], [reference], ["rougeLsum"], order="reference_first")["rougeLsum"] == [pytest.approx(0.5)]
    # ROUGE-L F1 is symmetric: both orders give 1 here
    assert rouge([response], [reference], ["rougeL"], order="reference_first")["rougeL"] == [pytest.approx(1.0)]
    with pytest.raises(ValueError, match="ROUGE order"):
        rouge([response], [reference], ["rougeLsum"], order="backwards")


def test_rouge_scores_cjk_text():
    tokenizer = CJKRougeTokenizer()
    assert tokenizer.tokenize("Hello 世界, the cats!") == ["hello", "世", "界", "the", "cat"]
    assert tokenizer.tokenize("こんにちは") == list("こんにちは")
    # 4 shared characters of 6 and 5: P = 2/3, R = 4/5
    scores = rouge(["他喜欢吃苹果"], ["他爱吃苹果"], tokenizer="cjk")
    assert scores["rouge1"] == [pytest.approx(8 / 11)]
    assert scores["rouge2"][0] > 0  # 吃苹, 苹果
    default = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True).score("他爱吃苹果", "他喜欢吃苹果")
    assert default["rouge1"].fmeasure == 0  # what the CJK tokenizer fixes
    assert rouge(["他喜欢吃苹果"], ["他爱吃苹果"], ["rouge1"])["rouge1"] == [0.0]  # the default is rouge-score's
    with pytest.raises(ValueError, match="ROUGE tokenizer"):
        rouge(["a"], ["a"], tokenizer="spacy")


FRENCH = [
    ("Le café est très chaud ce matin.", "Le thé était chaud hier soir."),
    ("L'élève a réussi son épreuve de français.", "Les élèves ont préparé leur épreuve."),
    ("Où est la gare, s'il vous plaît ?\nÀ côté du marché.", "La gare est à côté du marché.\nOù ça ?"),
]


def test_rouge_equals_rouge_score_on_accented_latin_text():
    """The default tokenizer is rouge-score's own (the released RoleMRC and RoleBench evaluations'): on
    French it splits words at accented letters; the CJK tokenizer keeps them whole and scores otherwise."""
    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    reference = rouge_scorer.RougeScorer(types, use_stemmer=True)
    ours = rouge([p for p, _ in FRENCH], [r for _, r in FRENCH])
    for i, (p, r) in enumerate(FRENCH):
        assert {t: ours[t][i] for t in types} == {t: s.fmeasure for t, s in reference.score(p, r).items()}
    # by hand: rouge-score's tokens [le caf est tr s chaud ce matin] and [le th tait chaud hier soir] share le,
    # chaud: P 2/8, R 2/6, F1 2/7; whole words [le café est très chaud ce matin] / [le thé était chaud hier
    # soir]: P 2/7, R 2/6, F1 4/13
    assert ours["rouge1"][0] == pytest.approx(2 / 7)
    cjk = rouge([p for p, _ in FRENCH], [r for _, r in FRENCH], ["rouge1"], tokenizer="cjk")["rouge1"]
    assert cjk[0] == pytest.approx(4 / 13) and all(a != b for a, b in zip(cjk, ours["rouge1"]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "tokenizer"),
    [
        (["evaluator=rolemrc"], "rouge_score"),
        (["evaluator=rolebench"], "rouge_score"),
        (["evaluator=rpgbench", "evaluator.generalization.enabled=false"], "cjk"),  # multilingual
    ],
)
def test_each_rouge_type_is_scored_with_the_configured_tokenizer(
    compose, tmp_path, overrides, tokenizer, evaluation_of
):

    settings = evaluation_of(compose(*overrides), tmp_path).settings
    options = settings.metric_options()
    names = [t for t in ("rouge1", "rouge2", "rougeL", "rougeLsum") if t in settings.metrics]
    assert names and all(options[n]["tokenizer"] == tokenizer for n in names)
    [(p, r)] = FRENCH[:1]
    values = compute_metrics([p], [r], names, options)
    expected = {n: rouge([p], [r], [n], tokenizer=tokenizer)[n] for n in names}
    assert values == expected and values["rougeL"] == [pytest.approx(2 / 7 if tokenizer == "rouge_score" else 4 / 13)]


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
    # nltk.word_tokenize's output (punkt splits after a closing quote, which a split on ". " misses)
    assert word_tokenize('He said "hi." Then he left.') == [
        "He",
        "said",
        "``",
        "hi",
        ".",
        "''",
        "Then",
        "he",
        "left",
        ".",
    ]
    # a known difference: without the English punkt model's abbreviations nltk's "Dr." becomes "Dr", "."
    assert word_tokenize("Dr. Smith sat.") == ["Dr", ".", "Smith", "sat", "."]


@pytest.mark.slow
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


def greedy_matching_f1(model, prediction: str, reference: str) -> float:
    """BERTScore F1 by hand from sentence-transformers' token embeddings (the last layer): cosine
    similarity, each token matched to its most similar token on the other side, [CLS]/[SEP] matched
    against but not averaged over, no idf."""
    cand, ref = (
        torch.nn.functional.normalize(model.encode(t, output_value="token_embeddings"), dim=-1)
        for t in (prediction, reference)
    )
    sim = cand @ ref.T
    precision = sim.max(dim=1).values[1:-1].mean()
    recall = sim.max(dim=0).values[1:-1].mean()
    return float(2 * precision * recall / (precision + recall))


@pytest.mark.slow
def test_bertscore_equals_greedy_cosine_matching_of_sentence_transformers_token_embeddings():
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(fallback_model_path(), device="cpu")
    scorer = load_bertscorer(fallback_model_path(), layer=6)  # MiniLM's last layer, what st encodes with
    preds = [p for p, _ in ENGLISH[:3]] + ["他喜欢吃苹果"]
    refs = [r for _, r in ENGLISH[:3]] + ["他爱吃苹果"]
    expected = [greedy_matching_f1(st, p, r) for p, r in zip(preds, refs)]
    assert scorer.f1(preds, refs) == pytest.approx(expected, abs=1e-5)
    assert scorer.describe() == {
        "backbone": fallback_model_path(),
        "layer": 6,
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
    reason = "'rpbench-test/not-a-cached-model' is not in the local Hugging Face cache"
    assert scorer.describe() == {
        "backbone": "sentence-transformers/all-MiniLM-L6-v2",
        "layer": 6,
        "fell_back": True,
        "fallback_reason": reason,
        "note": f"BERTScore was computed with sentence-transformers/all-MiniLM-L6-v2 (layer 6) because {reason}: its "
        "values are not comparable with scores on the configured backbone (RoleMRC's Table 3: bert-score's default, "
        "roberta-large layer 17)",
    }
    with pytest.raises(OSError, match="not in the local Hugging Face cache"):
        load_bertscorer("rpbench-test/not-a-cached-model", fallback=False)


# ------------------------------------------------------------------------------------------ together


@pytest.mark.wordnet
def test_compute_metrics_per_sample_by_hand():
    preds, refs = ["the black cat sat down", "猫が好きです"], ["the cat sat down quietly", "猫が大好きです"]
    names = ["bleu", "bleu_smoothed", "rouge1", "rouge2", "meteor"]
    cjk = {"tokenizer": "cjk"}
    scores = compute_metrics(preds, refs, names, {"rouge1": cjk, "rouge2": cjk})
    assert list(scores) == names
    # English: matches 4/5, 2/4, 1/3, 0/2; BP 1. Unsmoothed BLEU 0; exp smoothing turns 0/2 into 1/(2*2)
    assert scores["bleu"][0] == 0.0
    assert scores["bleu_smoothed"][0] == pytest.approx(100 * (4 / 5 * 2 / 4 * 1 / 3 * 1 / 4) ** 0.25)
    assert scores["bleu"][1] == pytest.approx(math.exp(1 - 7 / 6) * (4 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    assert scores["rouge1"] == pytest.approx([4 / 5, 12 / 13])
    assert scores["rouge2"] == pytest.approx([2 / 4, 8 / 11])
    # METEOR: English 4 matches in 2 chunks (the | cat sat down): Fmean 0.8, penalty 0.5 (2/4)^3;
    # Japanese P 1, R 6/7, 2 chunks of 6 matches
    fmean = (6 / 7) / (0.9 + 0.1 * 6 / 7)
    assert scores["meteor"] == pytest.approx([0.8 * (1 - 0.5 * 0.5**3), fmean * (1 - 0.5 * (1 / 3) ** 3)])
    assert set(METRICS.names()) == {
        "bleu",
        "bleu_smoothed",
        "rouge1",
        "rouge2",
        "rougeL",
        "rougeLsum",
        "meteor",
        "bertscore",
    }


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown metrics \\['bleurt'\\]"):
        compute_metrics(["a"], ["a"], ["bleurt"])
    with pytest.raises(ValueError, match="2 predictions but 1 references"):
        compute_metrics(["a", "b"], ["a"], ["bleu"])
    with pytest.raises(TypeError, match=r"predictions\[1\] is NoneType"):
        compute_metrics(["a", None], ["a", "b"], ["rouge1"])


def test_chinese_rouge_and_bleu_count_characters_by_hand():
    """CharacterEval-style Chinese: ROUGE with tokenizer=cjk and BLEU take each character as a token
    (full-width punctuation is no ROUGE token); the values by hand."""
    # 4 characters shared in another order: ROUGE-1 1; bigrams 他吃, 苹果 of 3 each; LCS 2 of 4
    scores = rouge(["苹果，他吃。"], ["他吃苹果"], ["rouge1", "rouge2", "rougeL"], tokenizer="cjk")
    assert scores == {"rouge1": [pytest.approx(1.0)], "rouge2": [pytest.approx(2 / 3)], "rougeL": [pytest.approx(0.5)]}
    # 6 vs 5 characters: clipped precisions 5/6, 3/5, 2/4, 1/3; no brevity penalty (6 > 5)
    assert paper_bleu(["他很爱吃苹果"], ["他爱吃苹果"]) == [pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)]
