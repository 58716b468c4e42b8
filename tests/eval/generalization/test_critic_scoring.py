"""Critic log-probs on a tiny model against a direct forward per pair with the model's own logits."""

import functools
import math
from importlib import resources
from pathlib import Path

import pytest
import torch

from rpbench.core.errors import ConfigError
from rpbench.data import readers
from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.records import Turn, as_messages
from rpbench.data.remid_prompts import RolePlayInput, remid_prompts
from rpbench.eval.generalization.emi import negative_pairs, sampled_club_mi
from rpbench.eval.generalization.scoring import (
    PairScorer,
    SampledResponse,
    conditional_entropy,
    pair_logps,
    response_row,
)
from rpbench.eval.generalization.settings import EntropySettings
from rpbench.models import load

PROMPTS = [
    (
        Turn("system", "You are Captain Reed, a ship's captain. The user is a baker from Leeds."),
        Turn("user", "Good morning, captain!"),
        Turn("assistant", "Morning. The tide is with us."),
        Turn("user", "Where do we sail today?"),
    ),
    (Turn("system", "You are Mira, a botanist. The user is a retired teacher."), Turn("user", "What is that flower?")),
    (
        Turn("system", "You are Old Tom, a lighthouse keeper."),
        Turn("user", "Is the lamp lit?"),
        Turn("assistant", "Every night for forty years."),
        Turn("user", "Do you ever get lonely out here?"),
    ),
]
RESPONSES = ["North, past the cliffs.", "A wild orchid, rare in these parts.", "The gulls keep me company."]
REASONING = ["Nautical, brief.", "Name the plant, gently.", "Warm and wistful."]
SAMPLE = Path(str(resources.files("rpbench") / "resources" / "sample" / "rpgbench" / "rpgbench.json"))


@pytest.fixture(scope="module")
def tiny(tiny_settings):
    """tiny(family="qwen2") -> (the tiny model of that family, its chat renderer), built once per family."""

    @functools.cache
    def tiny(family: str = "qwen2"):
        model, tokenizer = load(tiny_settings(family, attn_implementation="eager"))
        return model.eval(), ChatRenderer(tokenizer, None, max_length=4096)

    return tiny


@pytest.fixture(scope="module")
def sample_records(data_options):
    return readers.read("rpgbench", "test", SAMPLE, data_options("sample_rpgbench")).examples


@pytest.fixture(scope="module")
def pxy_contexts(sample_records):
    """The critic's R-EMI contexts (pxy prompt with r's core features) of three bundled sample records."""

    def pxy_contexts():
        prompts = remid_prompts(None)
        records = sample_records[:3]
        return [prompts.pxy(RolePlayInput(**e.meta["x"]), prompts.core_features(r)) for e, r in zip(records, REASONING)]

    return pxy_contexts


def generation_prompt_ids(tokenizer, prompt) -> list[int]:
    """The token ids of ``prompt`` rendered by the tokenizer's chat template, up to the reply."""
    text = tokenizer.apply_chat_template(as_messages(prompt), tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def direct_mean_logp(tiny):
    """Peer: the prompt's generation text, then response + <|im_end|>, one full-logits forward."""

    def direct_mean_logp(family: str, prompt, response: str) -> tuple[float, int]:
        model, renderer = tiny(family)
        tokenizer = renderer.tokenizer
        prompt_ids = generation_prompt_ids(tokenizer, prompt)
        response_ids = tokenizer(response + "<|im_end|>", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt_ids + response_ids])
        with torch.no_grad():
            logps = model(input_ids=ids).logits[0].float().log_softmax(-1)
        start = len(prompt_ids)
        picked = [logps[start + k - 1, t].item() for k, t in enumerate(response_ids)]
        return sum(picked) / len(picked), len(picked)

    return direct_mean_logp


@pytest.fixture(scope="module")
def direct_span_logp(tiny):
    """Peer: mean log-prob of the tokens of ``text`` starting at or after character ``scored_from`` (found
    from the tokenizer's offsets), then <|im_end|> when ``end_of_turn``; one full-logits forward."""

    def direct_span_logp(family: str, prompt, text: str, scored_from: int, end_of_turn: bool) -> float:
        model, renderer = tiny(family)
        tokenizer = renderer.tokenizer
        prompt_ids = generation_prompt_ids(tokenizer, prompt)
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = encoded["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        scored = [k for k, (start, _) in enumerate(encoded["offset_mapping"]) if start >= scored_from]
        scored += [len(ids) - 1] if end_of_turn else []
        with torch.no_grad():
            logps = model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].float().log_softmax(-1)
        picked = [logps[len(prompt_ids) + k - 1, ids[k]].item() for k in scored]
        return sum(picked) / len(picked)

    return direct_span_logp


class RowCounter:
    """Counts the rows that go through the model's backbone (every scoring forward passes it)."""

    def __init__(self, model):
        self.rows = 0
        self.handle = model.base_model.register_forward_pre_hook(self.count, with_kwargs=True)

    def count(self, module, args, kwargs):
        self.rows += (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_scored_span_is_the_response_and_its_end_of_turn_only(family, tiny):
    _, renderer = tiny(family)
    row = response_row(renderer, PROMPTS[0], RESPONSES[0])
    scored = [t for t, label in zip(row.input_ids, row.labels) if label != IGNORE_INDEX]
    assert renderer.tokenizer.decode(scored) == RESPONSES[0] + renderer.end_of_turn
    assert "The tide is with us" in renderer.tokenizer.decode(row.input_ids)  # the context's agent turn: not scored


@pytest.mark.parametrize("layout", ["chat", "pxy"])
def test_pair_logps_equal_a_direct_forward_per_pair(layout, pxy_contexts, direct_mean_logp, tiny):
    model, renderer = tiny()
    contexts = PROMPTS if layout == "chat" else pxy_contexts()
    targets = RESPONSES if layout == "chat" else [remid_prompts(None).target(y) for y in RESPONSES]
    pairs = [(0, 0), (0, 2), (1, 0), (2, 1), (2, 2)]
    logps, counts = pair_logps(model, renderer, contexts, targets, pairs, batch_size=2)
    assert logps.dtype == torch.float64 and logps.shape == counts.shape == (5,)
    for k, (i, j) in enumerate(pairs):
        expected, n = direct_mean_logp("qwen2", contexts[i], targets[j])
        assert logps[k].item() == pytest.approx(expected, abs=1e-4)
        assert counts[k].item() == n


def test_pair_scorer_equals_direct_forwards_and_scores_each_pair_once(direct_mean_logp, tiny):
    model, renderer = tiny()
    scorer = PairScorer(model, renderer, PROMPTS, RESPONSES, batch_size=2)
    assert len(scorer) == 3
    direct = {(i, j): direct_mean_logp("qwen2", PROMPTS[i], RESPONSES[j]) for i in range(3) for j in range(3)}
    with RowCounter(model) as counter:
        first = scorer([(0, 1), (2, 2), (0, 1), (1, 0)])  # a repeat within one call is scored once
        assert counter.rows == 3 and len(scorer.values) == 3
        assert first.dtype == torch.float64
        assert first.tolist() == pytest.approx([direct[p][0] for p in [(0, 1), (2, 2), (0, 1), (1, 0)]], abs=1e-4)
        again = scorer([(1, 0), (0, 1), (1, 1)])  # only (1, 1) is new
        assert counter.rows == 4 and len(scorer.values) == 4
        assert again[:2].tolist() == [first[3].item(), first[0].item()]
        assert again[2].item() == pytest.approx(direct[1, 1][0], abs=1e-4)
        assert scorer.tokens[1, 1] == direct[1, 1][1]
        # perplexity of rows 0..2's own targets: exp(Σ n_i · (-ℓ_i) / Σ n_i), token-weighted (not a mean of ℓ)
        diagonal = [direct[i, i] for i in range(3)]
        expected_ppl = math.exp(-sum(v * n for v, n in diagonal) / sum(n for _, n in diagonal))
        assert scorer.perplexity(range(3)) == pytest.approx(expected_ppl, rel=1e-4)
        assert counter.rows == 5 and len(scorer.values) == 5  # (1, 1) and (2, 2) were cached: only (0, 0) is new
    with pytest.raises(ValueError, match="2 targets for 3 contexts"):
        PairScorer(model, renderer, PROMPTS, RESPONSES[:2], batch_size=2)


@pytest.mark.slow
def test_club_on_a_pair_scorer_equals_the_formula_on_direct_log_probs(pxy_contexts, direct_mean_logp, tiny):
    model, renderer = tiny()
    contexts = pxy_contexts()  # R-EMI: the critic conditioned on x and r's core features
    target = remid_prompts(None).target
    golden = [target(y) for y in RESPONSES]
    generated = [target(y) for y in ["Aye.", "It is a flower.", "Sometimes, yes."]]
    negatives = negative_pairs(3, 4, seed=5)

    def direct_mi(targets):
        positive = sum(direct_mean_logp("qwen2", contexts[i], targets[i])[0] for i in range(3)) / 3
        negative = sum(direct_mean_logp("qwen2", contexts[i], targets[j])[0] for i, j in negatives) / 4
        return positive - negative

    golden_scorer = PairScorer(model, renderer, contexts, golden, batch_size=4)
    model_scorer = PairScorer(model, renderer, contexts, generated, batch_size=4)
    mi_golden = sampled_club_mi(golden_scorer, range(3), n_negatives=4, seed=5)
    assert mi_golden == pytest.approx(direct_mi(golden), abs=1e-4)
    assert len(golden_scorer.values) == 3 + 4  # the positives and exactly the sampled negatives
    emi = sampled_club_mi(model_scorer, range(3), 4, 5) - mi_golden
    assert emi == pytest.approx(direct_mi(generated) - direct_mi(golden), abs=1e-4)


def test_constructed_shift_gives_remid_equal_to_the_lost_golden_information(tiny):
    # ID: the model answers exactly the golden responses -> R-EMI(ID) = 0. OOD: one fixed reply for
    # every prompt -> with all negatives, MI(x; ŷ) = 0 exactly, so R-EMID = MI(x; golden on OOD).
    model, renderer = tiny()
    golden = PairScorer(model, renderer, PROMPTS, RESPONSES, batch_size=4)
    fixed = PairScorer(model, renderer, PROMPTS, ["I see."] * 3, batch_size=4)
    mi_golden = sampled_club_mi(golden, range(3), 6, 0)
    id_emi = sampled_club_mi(golden, range(3), 6, 0) - mi_golden
    mi_fixed = sampled_club_mi(fixed, range(3), 6, 0)
    assert id_emi == 0.0
    assert mi_fixed == pytest.approx(0.0, abs=1e-9)
    assert id_emi - (mi_fixed - mi_golden) == pytest.approx(mi_golden, abs=1e-9)


def test_conditional_entropy_against_direct_values(direct_mean_logp, tiny):
    model, renderer = tiny()
    samples = [RESPONSES[:2], [RESPONSES[2]], RESPONSES]
    ended = [[SampledResponse(y, "", True) for y in drawn] for drawn in samples]
    entropy = conditional_entropy(model, renderer, PROMPTS, ended, batch_size=2)
    for i, drawn in enumerate(samples):
        expected = -sum(direct_mean_logp("qwen2", PROMPTS[i], y)[0] for y in drawn) / len(drawn)
        assert entropy[i].item() == pytest.approx(expected, abs=1e-4)
    a, b = SampledResponse("a", "", True), SampledResponse("b", "", True)
    with pytest.raises(ValueError, match="context 1: no sampled responses"):
        conditional_entropy(model, renderer, PROMPTS, [[a], [], [b]], batch_size=2)
    with pytest.raises(ValueError, match="2 sample lists for 3 contexts"):
        conditional_entropy(model, renderer, PROMPTS, [[a], [b]], batch_size=2)


def test_a_sample_is_scored_after_its_header_and_without_an_unseen_end_of_turn(direct_span_logp, tiny):
    model, renderer = tiny()
    header, reply = "## Agent Response\n", "North, past the cliffs."
    text = header + reply
    cases = [
        (SampledResponse(text, header, True), len(header), True),
        (SampledResponse(text, header, False), len(header), False),
        (SampledResponse(reply, "", False), 0, False),
    ]
    got = conditional_entropy(model, renderer, PROMPTS[:1] * 3, [[c[0]] for c in cases], batch_size=2).tolist()
    for value, (sample, start, ended) in zip(got, cases):
        assert value == pytest.approx(-direct_span_logp("qwen2", PROMPTS[0], sample.text, start, ended), abs=1e-4)
    assert got[0] != pytest.approx(got[1], abs=1e-4)  # the end-of-turn token counts only when it was written
    with pytest.raises(ValueError, match="no token to score after its header"):
        response_row(renderer, PROMPTS[0], header, header, end_of_turn=False)


def test_cut_samples_and_headers_are_found_from_the_text(tiny):
    from rpbench.eval.generalization.analysis import as_sampled

    _, renderer = tiny()
    tokenizer = renderer.tokenizer
    text = "## Agent Response\n  North, past the cliffs, and on to the harbour."
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    # cut: the re-encoded text reaches max_new_tokens - 2 (its stripped whitespace may have been tokens)
    assert not as_sampled(tokenizer, text, n + 2, "## Agent Response").ended
    assert as_sampled(tokenizer, text, n + 3, "## Agent Response").ended
    assert as_sampled(tokenizer, text, n + 3, "## Agent Response").header == "## Agent Response\n  "
    assert as_sampled(tokenizer, "North.", 64, "## Agent Response").header == ""
    assert as_sampled(tokenizer, text, 64, None).header == ""


def test_h_hat_max_mean_and_quantile_by_hand():
    from rpbench.eval.generalization.analysis import entropy_sums

    both = [
        {"model": torch.tensor([1.0, 2.0]), "golden": torch.tensor([0.5, 0.5])},
        {"model": torch.tensor([3.0, 0.0, 1.0]), "golden": torch.tensor([1.0, 0.25, 0.25])},
    ]
    # sums 1.5, 2.5, 4.0, 0.25, 1.25 -> sorted 0.25, 1.25, 1.5, 2.5, 4.0; q0.9 at rank 0.9 * 4 = 3.6:
    # 2.5 + 0.6 * (4.0 - 2.5) = 3.4
    assert entropy_sums(both, 0.9) == pytest.approx({"max": 4.0, "mean": 9.5 / 5, "quantile": 3.4})


def test_a_response_cut_by_max_length_is_an_error(tiny):
    model, renderer = tiny()
    short = ChatRenderer(renderer.tokenizer, None, max_length=20)
    with pytest.raises(ValueError, match="does not fit in max_length=20"):
        pair_logps(model, short, PROMPTS, RESPONSES, [(0, 0)], batch_size=1)


def test_category_entropies_and_the_estimated_bound_by_direct_forwards(
    direct_mean_logp, direct_span_logp, tiny, sample_records
):
    # Ĥ(ID vs german) = max over the ID and german prompts of H(model | x) + H(golden | x): the model's
    # entropy from its samples under its own prompt, the golden one from the critic's samples under the
    # critic's pxy context (with r); both -mean_k ℓ(y_k | ·), length-normalised
    from rpbench.eval.generalization.analysis import Critic, EntropyInputs, category_entropies, entropy_prompts
    from rpbench.eval.generalization.bound import bound_of, entropy_bound
    from rpbench.eval.generalization.severity import ShiftSeverity

    model, renderer = tiny()
    prompts = remid_prompts(None)
    records = sample_records
    examples = [e for e in records if e.meta["category"] == "IDTest"][:2]
    examples += [e for e in records if e.meta["category"] == "german"][:2]
    reasoning = {e.id: f"Reply as {e.id}, briefly." for e in examples}
    critic = Critic(model, renderer, prompts, "tiny qwen2", is_evaluated_model=True)
    model_samples = {e.id: [RESPONSES[k % 3], "Aye."] for k, e in enumerate(examples)}
    critic_samples = {e.id: [prompts.target(RESPONSES[(k + 1) % 3])] for k, e in enumerate(examples)}
    model_samples.pop(examples[1].id)  # a record that was not sampled is left out
    inputs = EntropyInputs(model, renderer, model_samples, critic_samples)
    entropies, counts = category_entropies(critic, examples, reasoning, inputs, batch_size=2, max_new_tokens=64)
    assert counts["german"] == {
        "model_samples": 4,
        "model_cut": 0,
        "critic_samples": 2,
        "critic_cut": 0,
        "critic_without_header": 0,
    }
    assert list(entropies) == ["IDTest", "german"]
    assert [len(entropies[c]["model"]) for c in entropies] == [1, 2]

    def h(prompt, drawn):
        return -sum(direct_mean_logp("qwen2", prompt, y)[0] for y in drawn) / len(drawn)

    def h_after_header(prompt, drawn):  # the critic's target header is context, not scored
        header = prompts.target("")
        assert all(y.startswith(header) for y in drawn) and header.strip() == prompts.response_header
        return -sum(direct_span_logp("qwen2", prompt, y, len(header), True) for y in drawn) / len(drawn)

    kept = [examples[0], examples[2], examples[3]]
    direct_model = [h(e.prompt, model_samples[e.id]) for e in kept]
    direct_golden = [
        h_after_header(
            prompts.pxy(RolePlayInput(**e.meta["x"]), prompts.core_features(reasoning[e.id])), critic_samples[e.id]
        )
        for e in kept
    ]
    got_model = torch.cat([entropies["IDTest"]["model"], entropies["german"]["model"]]).tolist()
    got_golden = torch.cat([entropies["IDTest"]["golden"], entropies["german"]["golden"]]).tolist()
    assert got_model == pytest.approx(direct_model, abs=1e-4)
    assert got_golden == pytest.approx(direct_golden, abs=1e-4)
    h_hat = entropy_bound(torch.tensor(got_model), torch.tensor(got_golden))
    assert h_hat == pytest.approx(max(m + g for m, g in zip(direct_model, direct_golden)), abs=1e-4)
    # the estimated bound scales the input term by Ĥ (roots 0.2, 0.3, 0.4; δ fourth roots 0.2, 0.3)
    severity = ShiftSeverity(0.04, 0.09, 0.16, 0.0016, 0.0081, 2, 2, "equal")
    bound = bound_of(severity, h_hat, "max")
    assert bound.entropy_form == "estimated" and bound.value == pytest.approx(math.sqrt(2 / 3) * h_hat * 0.9 + 2.4)

    # prompt choice: at most max_prompts per category, seeded; none when off
    def entropy(samples: int, max_prompts: int | None, quantile: float = 0.9) -> EntropySettings:
        values = {"samples": samples, "max_new_tokens": 8, "max_prompts": max_prompts, "seed": 0, "quantile": quantile}
        return EntropySettings.parse(values, "evaluator.generalization.entropy")

    assert entropy_prompts(examples, entropy(2, None)) == examples
    picked = entropy_prompts(examples, entropy(2, 1))
    assert len(picked) == 2 and {e.meta["category"] for e in picked} == {"IDTest", "german"}
    assert picked == entropy_prompts(examples, entropy(2, 1))
    assert entropy_prompts(examples, entropy(0, None)) == []
    with pytest.raises(ConfigError, match=r"entropy.max_prompts=0: expected null \(every record\) or an integer >= 1"):
        entropy(2, 0)
    with pytest.raises(ConfigError, match=r"entropy.quantile=1.0: expected a quantile in \(0, 1\)"):
        entropy(2, None, quantile=1.0)
