"""Critic log-probs on a tiny model against a direct forward per pair with the model's own logits."""

import functools
import math

import pytest
import torch

from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.records import Turn, as_messages
from rpbench.eval.generalization.emi import negative_pairs
from rpbench.eval.generalization.scoring import (
    REASONING_HEADER,
    club_mutual_information,
    conditional_entropy,
    estimate_emi,
    pair_logp_matrix,
    pair_logps,
    perplexity,
    response_row,
)
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


@functools.cache
def tiny(family: str = "qwen2"):
    model, tokenizer = load({"name_or_path": f"tiny:{family}", "attn_implementation": "eager"})
    return model.eval(), ChatRenderer(tokenizer, max_length=4096)


def direct_mean_logp(family: str, prompt, response: str, reasoning: str | None = None) -> tuple[float, int]:
    """Peer: the prompt's generation text, then response + <|im_end|>, one full-logits forward."""
    model, renderer = tiny(family)
    tokenizer = renderer.tokenizer
    messages = as_messages(prompt)
    if reasoning is not None:
        messages[-1]["content"] += f"\n\n{REASONING_HEADER}\n```\n{reasoning}\n```"
    prompt_ids = tokenizer(
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )["input_ids"]
    response_ids = tokenizer(response + "<|im_end|>", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logps = model(input_ids=ids).logits[0].float().log_softmax(-1)
    start = len(prompt_ids)
    picked = [logps[start + k - 1, t].item() for k, t in enumerate(response_ids)]
    return sum(picked) / len(picked), len(picked)


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_scored_span_is_the_response_and_its_end_of_turn_only(family):
    _, renderer = tiny(family)
    row = response_row(renderer, PROMPTS[0], RESPONSES[0])
    scored = [t for t, label in zip(row.input_ids, row.labels) if label != IGNORE_INDEX]
    assert renderer.tokenizer.decode(scored) == RESPONSES[0] + renderer.end_of_turn
    assert "The tide is with us" in renderer.tokenizer.decode(row.input_ids)  # the context's agent turn: not scored


@pytest.mark.parametrize("with_reasoning", [False, True])
def test_pair_logps_equal_a_direct_forward_per_pair(with_reasoning):
    model, renderer = tiny()
    reasoning = REASONING if with_reasoning else None
    pairs = [(0, 0), (0, 2), (1, 0), (2, 1), (2, 2)]
    got = pair_logps(model, renderer, PROMPTS, RESPONSES, pairs, reasoning, batch_size=2)
    for k, (i, j) in enumerate(pairs):
        expected, n = direct_mean_logp("qwen2", PROMPTS[i], RESPONSES[j], reasoning[i] if reasoning else None)
        assert got.mean_logp[k].item() == pytest.approx(expected, abs=1e-4)
        assert got.n_tokens[k].item() == n
    assert got.n_history_dropped == 0


def test_club_and_emi_equal_the_formula_on_direct_log_probs():
    model, renderer = tiny()
    golden = RESPONSES
    generated = ["Aye.", "It is a flower.", "Sometimes, yes."]
    negatives = negative_pairs(3, 4, seed=5)

    def direct_mi(responses):
        positive = sum(direct_mean_logp("qwen2", PROMPTS[i], responses[i], REASONING[i])[0] for i in range(3)) / 3
        negative = sum(direct_mean_logp("qwen2", PROMPTS[i], responses[j], REASONING[i])[0] for i, j in negatives) / 4
        return positive - negative

    mi = club_mutual_information(model, renderer, PROMPTS, golden, REASONING, n_negatives=4, seed=5)
    assert mi == pytest.approx(direct_mi(golden), abs=1e-4)
    result = estimate_emi(model, renderer, PROMPTS, generated, golden, REASONING, n_negatives=4, seed=5)
    assert result.reasoning and result.n == 3 and result.n_negatives == 4
    assert result.emi == pytest.approx(direct_mi(generated) - direct_mi(golden), abs=1e-4)


def test_constructed_shift_gives_remid_equal_to_the_lost_golden_information():
    # ID: the model answers exactly the golden responses -> R-EMI(ID) = 0. OOD: one fixed reply for
    # every prompt -> with all negatives, MI(x; ŷ) = 0 exactly, so R-EMID = MI(x; golden on OOD).
    model, renderer = tiny()
    id_emi = estimate_emi(model, renderer, PROMPTS, RESPONSES, RESPONSES, REASONING, n_negatives=6, seed=0)
    ood_emi = estimate_emi(model, renderer, PROMPTS, ["I see."] * 3, RESPONSES, REASONING, n_negatives=6, seed=0)
    assert id_emi.emi == 0.0
    assert ood_emi.mi_model == pytest.approx(0.0, abs=1e-9)
    assert id_emi.emi - ood_emi.emi == pytest.approx(ood_emi.mi_golden, abs=1e-9)


def test_matrix_perplexity_and_entropy_against_direct_values():
    model, renderer = tiny()
    matrix = pair_logp_matrix(model, renderer, PROMPTS, RESPONSES)
    direct = [[direct_mean_logp("qwen2", PROMPTS[i], RESPONSES[j]) for j in range(3)] for i in range(3)]
    assert torch.allclose(matrix, torch.tensor([[v for v, _ in row] for row in direct], dtype=torch.float64), atol=1e-4)
    diagonal = [direct[i][i] for i in range(3)]
    expected_ppl = math.exp(-sum(v * n for v, n in diagonal) / sum(n for _, n in diagonal))
    assert perplexity(model, renderer, PROMPTS, RESPONSES) == pytest.approx(expected_ppl, rel=1e-4)
    samples = [RESPONSES[:2], [RESPONSES[2]], RESPONSES]
    entropy = conditional_entropy(model, renderer, PROMPTS, samples)
    for i, drawn in enumerate(samples):
        expected = -sum(direct_mean_logp("qwen2", PROMPTS[i], y)[0] for y in drawn) / len(drawn)
        assert entropy[i].item() == pytest.approx(expected, abs=1e-4)


def test_a_response_cut_by_max_length_is_an_error():
    model, renderer = tiny()
    short = ChatRenderer(renderer.tokenizer, max_length=20)
    with pytest.raises(ValueError, match="does not fit in max_length=20"):
        pair_logps(model, short, PROMPTS, RESPONSES, [(0, 0)])


def test_estimated_entropy_is_twice_the_largest_per_prompt_entropy_by_direct_forwards():
    # Ĥ(ID vs user) = max over the ID and user prompts of H(model | x) + H(golden | x); the critic is the
    # model, so both terms are -mean_k ℓ(ŷ_k | x) of the same samples (length-normalised)
    from rpbench.data.records import EvalExample
    from rpbench.eval.generalization.analysis import (
        EntropySettings,
        entropy_prompts,
        estimated_entropy,
        split_entropies,
    )
    from rpbench.eval.generalization.bound import bound_of
    from rpbench.eval.generalization.shift import ShiftSeverity

    model, renderer = tiny()
    shifts = ["in_distribution", "user", "in_distribution", "character"]
    examples = [EvalExample(f"r{i}", PROMPTS[i % 3], "g", "tag", {"shift": s}) for i, s in enumerate(shifts)]
    samples = {"r0": RESPONSES[:2], "r1": [RESPONSES[2], "Aye."], "r2": ["Sometimes, yes.", "No."], "r3": ["Hm."]}
    entropies = split_entropies(model, renderer, examples, samples, batch_size=2)
    direct = {
        e.id: -sum(direct_mean_logp("qwen2", e.prompt, y)[0] for y in samples[e.id]) / len(samples[e.id])
        for e in examples
    }
    assert entropies["in_distribution"].tolist() == pytest.approx([direct["r0"], direct["r2"]], abs=1e-4)
    h_hat = estimated_entropy(entropies, "user")
    assert h_hat == pytest.approx(2 * max(direct["r0"], direct["r1"], direct["r2"]), abs=1e-4)
    # the estimated bound scales the input term by Ĥ (roots 0.2, 0.3, 0.4; δ fourth roots 0.2, 0.3)
    severity = ShiftSeverity(0.04, 0.09, 0.16, 0.0016, 0.0081, 2, 2, "equal")
    bound = bound_of(severity, h_hat)
    assert bound.entropy_form == "estimated" and bound.value == pytest.approx(math.sqrt(2 / 3) * h_hat * 0.9 + 2.4)
    # prompt choice: at most max_prompts per shift, seeded; none when off
    assert [e.id for e in entropy_prompts(examples, EntropySettings(2, 8, None, 0))] == ["r0", "r1", "r2", "r3"]
    picked = entropy_prompts(examples, EntropySettings(2, 8, 1, 0))
    assert len(picked) == 3 and {e.meta["shift"] for e in picked} == set(shifts)
    assert picked == entropy_prompts(examples, EntropySettings(2, 8, 1, 0))
    assert entropy_prompts(examples, EntropySettings(0, 8, None, 0)) == []
    with pytest.raises(ValueError, match="max_prompts >= 1 or null"):
        EntropySettings(2, 8, 0, 0)
