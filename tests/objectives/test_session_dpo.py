"""Multi-turn DPO on whole-session pairs (``data=session_pairs``): a side's log-prob is the sum over its character
turns, checked against single-turn DPO (a one-turn session pair gives its loss) and against the turns' log-probs
computed one by one; and a run ``objective=dpo data=session_pairs`` end to end."""

from __future__ import annotations

import json

import pytest
import torch

from rpbench.data.chat import ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.data.records import PreferenceExample, SessionPreferenceExample, Turn
from rpbench.models import load
from rpbench.objectives.dpo import DPOModule

PROMPT = (Turn("system", "You are Mara, a lighthouse keeper."), Turn("user", "Hello! Which way to the harbour?"))
CHOSEN = (
    Turn("assistant", "Ahoy, sailor. Follow the shore north."),
    Turn("user", "And past the rocks?"),
    Turn("assistant", "Keep the light on your left and you are home."),
)
REJECTED = (
    Turn("assistant", "As an AI I cannot say."),
    Turn("user", "Please, it is getting dark."),
    Turn("assistant", "Look it up online."),
)
BETA = 0.3


@pytest.fixture(scope="module")
def dpo(tiny_model, objective_config):
    """DPO with a live reference on tiny-qwen2, the policy moved away from it."""
    model, tokenizer = load(tiny_model())
    module = DPOModule(model, tokenizer, objective_config("dpo", lr=1e-3, beta=BETA, precompute_ref=False))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    return module, tokenizer, ChatRenderer(tokenizer, "<|im_end|>", 1024)


def pair_terms(module, renderer, example):
    samples, empty = DPOModule.render([example], renderer)
    assert empty == []
    with torch.no_grad():
        return module.pair_terms(DPOModule.collate(samples, renderer.tokenizer.pad_token_id))


def test_a_one_turn_session_pair_gives_the_single_turn_dpo_loss(dpo):
    module, _, renderer = dpo
    single = PreferenceExample("p", PROMPT, CHOSEN[0].content, REJECTED[0].content)
    session = SessionPreferenceExample("p", PROMPT, CHOSEN[:1], REJECTED[:1])
    one, other = pair_terms(module, renderer, single), pair_terms(module, renderer, session)
    for key in ("losses", "chosen_rewards", "rejected_rewards", "chosen_logps", "rejected_logps"):
        assert other[key].item() == pytest.approx(one[key].item(), rel=1e-5), key
    assert one["losses"].item() != pytest.approx(0.6931, abs=1e-3)  # the policy differs from its reference


def test_the_multi_turn_loss_sums_the_character_turns_of_each_session(dpo, naive_sequence_logps):
    """-log sigmoid(beta * (sum_t [log pi - log ref](chosen turn t) - sum_t [log pi - log ref](rejected turn t))),
    each turn's log-probs from its own row: the turns before it as the prompt, the turn as the only reply."""
    module, tokenizer, renderer = dpo

    def turn_by_turn(net, session) -> float:
        rows = [
            renderer.render_completion([*PROMPT, *session[:t]], turn.content).as_sample()
            for t, turn in enumerate(session)
            if turn.role == "assistant"
        ]
        with torch.no_grad():
            return naive_sequence_logps(net, pad_collate(rows, tokenizer.pad_token_id))[0].sum().item()

    reference = module.reference.model
    chosen = turn_by_turn(module.model, CHOSEN) - turn_by_turn(reference, CHOSEN)
    rejected = turn_by_turn(module.model, REJECTED) - turn_by_turn(reference, REJECTED)
    expected = -torch.nn.functional.logsigmoid(torch.tensor(BETA * (chosen - rejected))).item()
    terms = pair_terms(module, renderer, SessionPreferenceExample("p", PROMPT, CHOSEN, REJECTED))
    assert terms["losses"].item() == pytest.approx(expected, rel=1e-4)
    assert terms["chosen_rewards"].item() == pytest.approx(BETA * chosen, rel=1e-3, abs=1e-5)
    assert terms["rejected_rewards"].item() == pytest.approx(BETA * rejected, rel=1e-3, abs=1e-5)


def test_dpo_trains_on_session_pairs(tmp_path, tiny_model, run_in_process):
    def messages(session):
        return [t.as_message() for t in session]

    path = tmp_path / "pairs.jsonl"
    record = {"system": PROMPT[0].content, "opening": PROMPT[1].content}
    path.write_text(
        "".join(
            json.dumps(record | {"id": f"p{i}", "chosen": messages(CHOSEN), "rejected": messages(REJECTED[:i])}) + "\n"
            for i in (1, 3)
        )
    )
    out = tmp_path / "run"
    results = run_in_process(
        out,
        "objective=dpo",
        "data=session_pairs",
        f"data.files.pairs={path}",
        "logger=none",
        "save_model=false",
        "trainer.enable_progress_bar=false",
        "objective.batch_size=2",
        "objective.grad_accum=1",
        "objective.epochs=1",
    )
    train = results["train"]
    assert train["optimizer_steps"] == 1 and train["samples"]["train"] == 2
    tokenizer = load(tiny_model())[1]

    def tokens(*turns):
        return sum(len(tokenizer(t.content + "<|im_end|>")["input_ids"]) for t in turns if t.role == "assistant")

    # every character turn of both sides: both of each chosen session's, one then both of the rejected ones'
    supervised = {"chosen": 2 * tokens(*CHOSEN), "rejected": tokens(REJECTED[0]) + tokens(*REJECTED)}
    assert train["samples"]["supervised_tokens"]["train"] == supervised
    assert results["data"] == "session_pairs"
