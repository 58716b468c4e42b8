"""The per-category R-EMID analysis end to end on the bundled RPGBench sample, with a tiny Qwen3 critic and the
packaged MiniLM encoder; its numbers against direct per-category scoring and the bound formulas by hand."""

import functools
import math
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from rpbench.data import readers
from rpbench.data.remid_prompts import RolePlayInput, remid_prompts
from rpbench.eval.generalization.analysis import Critic, analyze, split_by_category
from rpbench.eval.generalization.embed import load_text_embedder
from rpbench.eval.generalization.emi import sampled_club_mi
from rpbench.eval.generalization.scoring import PairScorer
from rpbench.eval.generalization.settings import AnalysisSettings, EntropySettings
from rpbench.models import load
from rpbench.models.config_tree import compose_model_config
from rpbench.models.loading import chat_renderer

SAMPLE = Path(str(resources.files("rpbench") / "resources" / "sample" / "rpgbench" / "rpgbench.json"))
N_NEGATIVES = 6
SEED = 3
SETTINGS = AnalysisSettings(
    weighting="equal",
    delta_form="sum",
    n_negatives=N_NEGATIVES,
    max_samples=None,
    seed=SEED,
    batch_size=8,
    convergence_sizes=[2],
    convergence_repeats=1,
    entropy=EntropySettings(samples=0, max_new_tokens=8, max_prompts=None, seed=0, quantile=0.9),
)
USER_CATEGORIES = ["german", "spanish", "chinese", "japanese", "korean"]
ANALYZED = ["IDTest", "german", "spanish", "Literature"]
SHIFTED_CATEGORIES = [
    *USER_CATEGORIES,
    *("Literature", "Film & Television", "Theater", "Gaming"),
    *("TurnLevelComposition", "WordLevelComposition"),
]


@functools.cache
def critic() -> Critic:
    cfg = compose_model_config("tiny-qwen3")
    model, tokenizer = load(cfg)
    return Critic(model.eval(), chat_renderer(cfg, tokenizer, 2048), remid_prompts(None), "tiny-qwen3", False)


@functools.cache
def embedder():
    return load_text_embedder(None, -1, 128, "mean", False, device="cpu")


@pytest.fixture(scope="module")
def sample_records(data_options):
    return readers.read("rpgbench", "test", SAMPLE, data_options("sample_rpgbench")).examples


@pytest.fixture(scope="module")
def analyzed(sample_records):
    # the sample's IDTest records and three shifted categories (two user shifts for the roll-up): every
    # category costs forwards and RJSD eigendecompositions, so the test keeps four of the twelve
    examples = [e for e in sample_records if e.meta["category"] in ANALYZED]
    predictions = {e.id: e.reference[::-1] for e in examples}
    empty = next(e for e in examples if e.meta["category"] == "german")
    predictions[empty.id] = "  "  # no text to embed: left out and counted
    reasoning = {e.id: f"Greet the user warmly and answer as {e.id} would." for e in examples}
    result = analyze(examples, predictions, critic(), embedder(), SETTINGS, reasoning, "fixed test text")
    return examples, predictions, reasoning, empty, result


@functools.cache
def plain_critic() -> Critic:
    """A second, different critic standing in for one trained without r."""
    cfg = compose_model_config("tiny-qwen2")
    model, tokenizer = load(replace(cfg, attn_implementation="eager"))
    return Critic(model.eval(), chat_renderer(cfg, tokenizer, 2048), remid_prompts(None), "tiny-qwen2", False)


def direct_emi(chosen, predictions, reasoning, c=None) -> tuple[float, float, float]:
    """(EMI, MI(model), perplexity of the golden responses) of one category's records, with the critic's
    contexts built here from the records (R-EMI: with r's core features)."""
    c = c or critic()
    p = c.prompts
    contexts = [
        p.pxy(RolePlayInput(**e.meta["x"]), None if reasoning is None else p.core_features(reasoning[e.id]))
        for e in chosen
    ]
    rows = range(len(chosen))
    model = PairScorer(c.model, c.renderer, contexts, [p.target(predictions[e.id]) for e in chosen], 4)
    golden = PairScorer(c.model, c.renderer, contexts, [p.target(e.reference) for e in chosen], 4)
    mi_model = sampled_club_mi(model, rows, N_NEGATIVES, SEED)
    mi_golden = sampled_club_mi(golden, rows, N_NEGATIVES, SEED)
    # perplexity: exp of the token-weighted NLL of each record's golden response given its own context
    nll = sum(-golden.values[i, i] * golden.tokens[i, i] for i in rows)
    ppl = math.exp(nll / sum(golden.tokens[i, i] for i in rows))
    return mi_model - mi_golden, mi_model, ppl


def test_the_sample_splits_into_idtest_and_each_subset_tag(sample_records):
    categories = split_by_category(sample_records)
    assert list(categories)[0] == "IDTest" and set(list(categories)[1:]) == set(SHIFTED_CATEGORIES)
    assert {c: len(rows) for c, rows in categories.items()} == {"IDTest": 6, **dict.fromkeys(SHIFTED_CATEGORIES, 3)}
    for c, rows in categories.items():
        records = [sample_records[i] for i in rows]
        if c == "IDTest":
            assert {e.meta["shift"] for e in records} == {"in_distribution"}
        else:
            assert {e.task for e in records} == {c}  # the subset tag


@pytest.mark.slow
def test_categories_counts_and_excluded_empty_predictions(analyzed):
    examples, _, _, empty, result = analyzed
    categories = list(split_by_category(examples))
    assert categories == ANALYZED  # IDTest first, then each subset tag in record order
    assert list(result["emi_critic_without_r"]) == list(result["r_emi"]) == categories
    assert list(result["r_emid"]) == list(result["emid_critic_without_r"]) == list(result["bound"]) == categories[1:]
    assert "emi" not in result and "emid" not in result and result["plain_critic"] is None  # no plain critic
    assert result["excluded_empty_predictions"] == {"german": 1}
    assert [result["r_emi"][c]["excluded_empty_predictions"] for c in categories] == [0, 1, 0, 0]
    assert result["n_records_per_category"]["german"] == 3 and result["n_per_category"]["german"] == 2
    assert result["n_per_category"]["IDTest"] == 6
    for table in (result["emi_critic_without_r"], result["r_emi"]):
        for c, entry in table.items():
            n = result["n_per_category"][c]
            assert entry["n"] == n and entry["n_negatives"] == min(n * (n - 1), N_NEGATIVES)
    assert result["emi_critic_without_r"]["german"]["n_negatives"] == 2  # 2 records left: both off-diagonal pairs
    assert result["reasoning_source"] == "fixed test text" and result["critic"] == "tiny-qwen3"
    assert result["embedder"]["fallback_reason"] is None and result["embedder"]["pooling"] == "mean"
    assert "entropy" not in result and "Ĥ = 1" in result["bound_form"]
    assert all(math.isfinite(v) for ppl in result["perplexity"].values() for v in ppl.values())


@pytest.mark.slow
def test_remid_is_id_emi_minus_category_emi_and_rollups_are_category_means(analyzed):
    _, _, _, _, result = analyzed
    for key, table in (("r_emid", "r_emi"), ("emid_critic_without_r", "emi_critic_without_r")):
        for c, value in result[key].items():
            assert value == pytest.approx(result[table]["IDTest"]["emi"] - result[table][c]["emi"], abs=1e-12)
    user = result["by_shift"]["user"]
    assert user["categories"] == ["german", "spanish"]
    assert user["n"] == 2 + 3  # german lost its empty prediction
    assert user["r_emid"] == pytest.approx((result["r_emid"]["german"] + result["r_emid"]["spanish"]) / 2, abs=1e-12)
    without_r = result["emid_critic_without_r"]
    assert user["emid_critic_without_r"] == pytest.approx((without_r["german"] + without_r["spanish"]) / 2, abs=1e-12)
    assert user["r_emi"] == pytest.approx(
        (result["r_emi"]["german"]["emi"] + result["r_emi"]["spanish"]["emi"]) / 2, abs=1e-12
    )
    assert user["bound"] == pytest.approx(
        (result["bound"]["german"]["value"] + result["bound"]["spanish"]["value"]) / 2, abs=1e-12
    )
    assert list(result["by_shift"]) == ["in_distribution", "user", "character"]
    assert result["by_shift"]["character"]["categories"] == ["Literature"]
    assert result["by_shift"]["character"]["r_emid"] == result["r_emid"]["Literature"]
    assert "r_emid" not in result["by_shift"]["in_distribution"]


def test_emi_and_remi_equal_direct_scoring_of_each_category(analyzed):
    examples, predictions, reasoning, empty, result = analyzed
    for category in ("IDTest", "german"):
        chosen = [e for e in examples if e.meta["category"] == category and e.id != empty.id]
        for table, r, ppl_key in (
            ("emi_critic_without_r", None, "critic_without_r"),
            ("r_emi", reasoning, "with_reasoning"),
        ):
            emi, mi_model, ppl = direct_emi(chosen, predictions, r)
            # other batches (other padding) than the analysis': float32 rounding only
            assert result[table][category]["emi"] == pytest.approx(emi, abs=1e-6)
            assert result[table][category]["mi_model"] == pytest.approx(mi_model, abs=1e-6)
            assert result["perplexity"][category][ppl_key] == pytest.approx(ppl, rel=1e-6)
    # r's core features enter the critic's context: R-EMI and EMI differ
    assert result["r_emi"]["IDTest"]["mi_golden"] != result["emi_critic_without_r"]["IDTest"]["mi_golden"]
    assert "without_reasoning" not in result["perplexity"]["IDTest"]  # the paper's name needs a plain critic


@pytest.mark.slow
def test_a_plain_critic_gives_the_papers_naive_emi_under_its_name(sample_records):
    examples = [e for e in sample_records if e.meta["category"] in ("IDTest", "spanish")]
    predictions = {e.id: e.reference[::-1] for e in examples}
    reasoning = {e.id: f"Answer as {e.id} would." for e in examples}
    result = analyze(
        examples, predictions, critic(), embedder(), SETTINGS, reasoning, "fixed", plain_critic=plain_critic()
    )
    assert result["plain_critic"] == "tiny-qwen2"
    for category in ("IDTest", "spanish"):
        chosen = [e for e in examples if e.meta["category"] == category]
        emi, mi_model, ppl = direct_emi(chosen, predictions, None, plain_critic())
        assert result["emi"][category]["emi"] == pytest.approx(emi, abs=1e-6)
        assert result["emi"][category]["mi_model"] == pytest.approx(mi_model, abs=1e-6)
        assert result["perplexity"][category]["without_reasoning"] == pytest.approx(ppl, rel=1e-6)
        # the R-EMI critic without r is still reported, under its own name, and differs
        own, _, own_ppl = direct_emi(chosen, predictions, None)
        assert result["emi_critic_without_r"][category]["emi"] == pytest.approx(own, abs=1e-6)
        assert result["perplexity"][category]["critic_without_r"] == pytest.approx(own_ppl, rel=1e-6)
        assert own_ppl != pytest.approx(ppl, rel=1e-3)
    assert result["emid"]["spanish"] == pytest.approx(
        result["emi"]["IDTest"]["emi"] - result["emi"]["spanish"]["emi"], abs=1e-12
    )
    assert result["by_shift"]["user"]["emid"] == result["emid"]["spanish"]


def test_bounds_follow_the_formulas_on_the_reported_js_terms(analyzed):
    _, _, _, _, result = analyzed
    for c, bound in result["bound"].items():
        js = result["jsd"][c]
        assert js["weighting"] == "equal" and js["n_id"] == 6 and js["n_ood"] == result["n_per_category"][c]
        roots = sum(math.sqrt(max(js[f], 0.0)) for f in ("user", "character", "dialogue"))
        dp, dq = max(js["delta_p"], 0.0), max(js["delta_q"], 0.0)
        # Theorem 3.4, sum form, Ĥ = 1 (entropy off): sqrt(2/3) Σ sqrt(JS_s) + 8 (δ_P + δ_Q)^¼
        assert bound["delta_form"] == "sum" and bound["entropy_form"] == "scale_adjusted"
        assert bound["value"] == pytest.approx(math.sqrt(2 / 3) * roots + 8 * (dp + dq) ** 0.25, abs=1e-9)
        # the EMID code's: Σ sqrt(JS_s) + δ_P^¼ + δ_Q^¼
        assert result["bound_emid_code"][c] == pytest.approx(roots + dp**0.25 + dq**0.25, abs=1e-9)
        assert 0 < js["delta_p"] <= math.log(2) + 1e-9  # reversed references are not the references


def test_convergence_points_cover_the_sizes_up_to_the_smaller_category(analyzed):
    _, _, _, _, result = analyzed
    convergence = result["convergence"]
    assert convergence["empirical"] == "r_emid"
    assert [p["n"] for p in convergence["points"]["german"]] == [2]
    assert [p["n"] for p in convergence["points"]["Literature"]] == [2, 3]
    for points in convergence["points"].values():
        assert all(p["repeat"] == 0 and math.isfinite(p["empirical"]) and p["bound"] > 0 for p in points)


@pytest.mark.slow
def test_winrate_judges_exactly_the_records_the_analysis_scores(chat_stub, judge_config, group_values, analyzed):
    from rpbench.eval.benchmarks.rpgbench.evaluator import RPGBench
    from rpbench.scoring.judge.winrate import judge_winrate

    examples, predictions, _, empty, result = analyzed
    raw = predictions | {empty.id: "<think>never closed"}  # as generated: scored as an empty reply
    scored, counts = RPGBench().scored_predictions(raw)
    assert counts["think"]["unclosed"] == 1 and scored == predictions | {empty.id: ""}
    with chat_stub(lambda body: "A") as server:
        judges = [judge_config(base_url=server.url, model="m", parse_tries=1)]
        judged = judge_winrate(
            examples, scored, judges, group_values("evaluator", "rpgbench", "evaluator")["judge_max_tokens"]
        )
    assert {r["id"] for r in judged["records"]} == {e.id for e in examples} - {empty.id}
    for category, n in result["n_per_category"].items():  # every remaining record (max_samples: null)
        entry = judged["by_category"][category]
        assert entry["n"] == 2 * n  # both orders
        assert entry["excluded_empty_predictions"] == result["r_emi"][category]["excluded_empty_predictions"]
    assert judged["overall"]["excluded_empty_predictions"] == sum(result["excluded_empty_predictions"].values()) == 1


def test_too_few_records_with_predictions_is_an_error(sample_records):
    examples = [e for e in sample_records if e.meta["category"] in ANALYZED]
    literature = [e.id for e in examples if e.meta["category"] == "Literature"]
    blank = {e.id: "" if e.id in literature[:2] else e.reference[::-1] for e in examples}
    reasoning = {e.id: "Greet the user." for e in examples}
    with pytest.raises(ValueError, match=r"'Literature': 1.*empty predictions left out: \{.*'Literature': 2"):
        analyze(examples, blank, critic(), embedder(), SETTINGS, reasoning, "fixed test text")
