"""Reward functions on hand-checked strings, and the registry built from config entries."""

import math
import re

import pytest
from rouge_score import rouge_scorer

from rpbench.scoring import rewards
from rpbench.scoring.rewards import (
    REWARDS,
    RewardFn,
    bleu,
    build_reward_fns,
    length_penalty,
    no_role_break,
    non_empty,
    reward_problems,
    rouge_l,
    score_rewards,
    weighted_sum,
    word_tokens,
)


def test_non_empty():
    assert non_empty([], ["", " \n\t", "hi"], []) == [0.0, 0.0, 1.0]


def test_word_tokens_split_cjk_characters_and_words():
    assert word_tokens("Hello, World! 我喜欢猫 don't") == [
        "hello",
        "world",
        "我",
        "喜",
        "欢",
        "猫",
        "don",
        "t",
    ]


def test_length_penalty_words():
    completions = ["a", "a b c", "a b c d e f", "", " ".join("x" * 12), "我喜欢猫"]
    # below 2: (2 - n) / 2; above 4: (n - 4) / 4, floored at -1; CJK characters count one each
    assert length_penalty([], completions, [], min_len=2, max_len=4, unit="words") == [-0.5, 0.0, -0.5, -1.0, -1.0, 0.0]


def test_length_penalty_chars():
    assert length_penalty([], ["  abc  ", "abcdefgh"], [], min_len=4, max_len=6, unit="chars") == [
        -0.25,
        -1 / 3,
    ]


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("length_penalty", {"min_len": 5, "max_len": 4, "unit": "words"}, r"kwargs\.max_len=4: expected an integer"),
        ("length_penalty", {"min_len": 0, "max_len": 0, "unit": "words"}, r"kwargs\.max_len=0"),
        (
            "length_penalty",
            {"min_len": 1, "max_len": 2, "unit": "bytes"},
            r"kwargs\.unit='bytes': expected words or chars",
        ),
        ("length_penalty", {"min_len": 1.5, "max_len": 2, "unit": "words"}, r"kwargs\.min_len=1\.5: expected integers"),
        ("no_role_break", {"markers": "User:"}, r"kwargs\.markers='User:': expected a non-empty list"),
        ("no_role_break", {"markers": ["User:", ""]}, r"kwargs\.markers=.*expected a non-empty list"),
        (
            "judge",
            {"judge": {}, "rubric": "role_styl", "max_tokens": 16, "failure_reward": 0.0},
            r"kwargs\.rubric='role_styl': expected one of",
        ),
        (
            "judge",
            {"judge": {}, "rubric": "role_style", "max_tokens": 0, "failure_reward": 0.0},
            r"kwargs\.max_tokens=0: expected the judge's reply length, an integer >= 1",
        ),
    ],
)
def test_reward_kwargs_rules_are_named_at_startup(name, kwargs, match):
    """A reward's own kwargs rules are read with its entry, before any model loads or any scoring."""
    (problem,) = reward_problems([{"name": name, "weight": 1.0, "kwargs": kwargs}], "objective.rewards")
    assert re.search(r"objective\.rewards\[0\]\." + match, problem), problem


def test_judge_reward_needs_its_judge_s_reply_length(judge_settings):
    """A judge reward's reply length is its own kwarg (as a judged evaluator's is its own setting), not the judge's."""
    entry = {"name": "judge", "weight": 1.0, "kwargs": {"judge": judge_settings(), "rubric": "role_style"}}
    entry["kwargs"]["failure_reward"] = 0.0
    (problem,) = reward_problems([entry], "objective.rewards")
    assert "objective.rewards[0].kwargs.max_tokens: missing" in problem, problem


def test_no_role_break_with_the_markers_of_grpo_yaml(objective_settings):
    (markers,) = [r["kwargs"]["markers"] for r in objective_settings("grpo")["rewards"] if r["name"] == "no_role_break"]
    completions = ["I draw my sword.", "Fine.\nUser: and then?", "ok<|im_start|>user\nhi", "The user: field"]
    assert no_role_break([], completions, [], markers=markers) == [1.0, 0.0, 0.0, 1.0]
    assert no_role_break([], ["Harry: hello", "hello"], [], markers=["Harry:"]) == [0.0, 1.0]


def test_rouge_l_hand_computed():
    # LCS("the cat on the mat", "the cat sat on the mat") = 5: P = 5/5, R = 5/6, F = 10/11
    # CJK: one token per character, LCS 3 of 4 each way: F = 0.75
    got = rouge_l([], ["the cat on the mat", "我喜欢狗", "dogs"], ["the cat sat on the mat", "我喜欢猫", "cats"])
    assert got == pytest.approx([10 / 11, 0.75, 0.0])


def test_rouge_l_equals_rouge_score_with_stemming_on_ascii():
    default = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    pairs = [
        ("Well, I'd say: it's 42!", "It is 42, I'd say."),
        ("The_quick brown FOX", "the quick brown fox jumps"),
        ("the foxes were jumping", "a fox jumped"),
    ]
    got = rouge_l([], [h for h, _ in pairs], [r for _, r in pairs])
    assert got == pytest.approx([default.score(r, h)["rougeL"].fmeasure for h, r in pairs])


def test_bleu_hand_computed():
    # n-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths so no brevity penalty: BLEU = (1/12) ** (1/4)
    # CJK: 3/4, 2/3, 1/2 and a zero 4-gram count smoothed to 1 / (2 * 1): BLEU = (1/8) ** (1/4)
    hyps, refs = ["the cat sat on a mat", "我喜欢狗", "the cat"], ["the cat sat on the mat", "我喜欢猫", "the cat"]
    got = bleu([], hyps, refs, tokenize="zh")
    assert got == pytest.approx([(1 / 12) ** 0.25, (1 / 8) ** 0.25, 1.0])


def test_reference_rewards_need_a_reference_per_completion():
    with pytest.raises(ValueError, match=r"rouge_l: completions \[1\] have no reference"):
        rouge_l([], ["a", "b"], ["a", None])
    with pytest.raises(ValueError, match="bleu: 1 references for 2 completions"):
        bleu([], ["a", "b"], ["a"], tokenize="zh")


# ---------------------------------------------------------------------------------------------------------
# Registry and config


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, so rewards registered by a test do not leak into others."""
    monkeypatch.setattr(rewards.REWARDS, "_entries", dict(rewards.REWARDS._entries))
    return rewards.REWARDS


class KeywordCount:
    """A stateful reward registered as a class: built once from kwargs, then called per batch."""

    def __init__(self, keyword):
        self.keyword = keyword

    def __call__(self, prompts, completions, references):
        return [float(c.count(self.keyword)) for c in completions]


def test_build_reward_fns_from_names_targets_and_classes(registry):
    REWARDS.register("keyword_count")(KeywordCount)
    fns = build_reward_fns(
        [
            {"name": "non_empty", "weight": 1},
            {"name": "length_penalty", "weight": 0.5, "kwargs": {"min_len": 1, "max_len": 1, "unit": "words"}},
            {
                "target": "rpbench.scoring.rewards:no_role_break",
                "name": "no_break",
                "weight": 2,
                "kwargs": {"markers": ["User:"]},
            },
            {"name": "keyword_count", "weight": -1.0, "kwargs": {"keyword": "ha"}},
        ],
        "objective.rewards",
    )
    assert [(f.name, f.weight) for f in fns] == [
        ("non_empty", 1.0),
        ("length_penalty", 0.5),
        ("no_break", 2.0),
        ("keyword_count", -1.0),
    ]
    completions = ["haha", "", "ok User: ha"]
    scores = score_rewards(fns, ["p"] * 3, completions, [None] * 3)
    assert scores == {
        "non_empty": [1.0, 0.0, 1.0],
        "length_penalty": [0.0, -1.0, -1.0],
        "no_break": [1.0, 1.0, 0.0],
        "keyword_count": [2.0, 0.0, 1.0],
    }
    total = weighted_sum(scores, {f.name: f.weight for f in fns})
    assert total == pytest.approx([1 + 0 + 2 - 2, 0 - 0.5 + 2 - 0, 1 - 0.5 + 0 - 1])


def test_target_name_defaults_to_the_function_name():
    (fn,) = build_reward_fns([{"target": "rpbench.scoring.rewards:rouge_l", "weight": 1}], "objective.rewards")
    assert fn.name == "rouge_l" and fn.fn(["p"], ["a b"], ["a b"]) == [1.0]


def test_register_rejects_a_taken_name(registry):
    with pytest.raises(ValueError, match="already registered"):
        REWARDS.register("bleu")(KeywordCount)


BLEU = {"name": "bleu", "weight": 1, "kwargs": {"tokenize": "zh"}}


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ([], "non-empty list"),
        ({"name": "bleu"}, "non-empty list"),
        ([{"weight": 1.0}], r"objective.rewards\[0\]: needs 'name'"),
        ([BLEU, {"name": "blue"}], r"objective.rewards\[1\]\.name: unknown reward 'blue'"),
        ([{**BLEU, "wieght": 1}], r"unknown fields \['wieght'\]"),
        ([{"name": "bleu", "kwargs": {"tokenize": "zh"}}], r"objective.rewards\[0\]\.weight: missing"),
        ([{**BLEU, "weight": "1"}], r"objective.rewards\[0\]\.weight"),
        ([{**BLEU, "weight": math.nan}], r"objective.rewards\[0\]\.weight"),
        ([{**BLEU, "kwargs": {"tokenise": "zh"}}], r"objective.rewards\[0\]\.kwargs: \['tokenise'\] do not fit"),
        ([{"name": "bleu", "weight": 1}], r"objective.rewards\[0\]\.kwargs\.tokenize: missing"),
        (
            [{"name": "length_penalty", "weight": 1, "kwargs": {"min_len": 1, "unit": "words"}}],
            r"objective.rewards\[0\]\.kwargs\.max_len: missing",
        ),
        (
            [BLEU, {"name": "judge", "weight": 1, "kwargs": {"judge": {}, "rubric": "role_style", "max_tokens": 16}}],
            r"objective.rewards\[1\]\.kwargs\.failure_reward: missing",
        ),
        ([BLEU, BLEU], r"objective.rewards\[1\]\.name: reward 'bleu' appears twice"),
        (
            [{"target": "rpbench.scoring.rewards.rouge_l"}],
            r"objective.rewards\[0\]\.target: expected 'module.path:function'",
        ),
        ([{"target": "rpbench.no_such_module:f"}], r"objective.rewards\[0\]\.target: cannot import"),
        (
            [{"target": "rpbench.scoring.rewards:nope"}],
            r"objective.rewards\[0\]\.target: .* has no attribute 'nope'",
        ),
    ],
)
def test_build_reward_fns_rejects_bad_config(cfg, match):
    """The same problems ``reward_problems`` reports at startup, before anything is built."""
    (problem,) = reward_problems(cfg, "objective.rewards")
    with pytest.raises(ValueError, match=match):
        build_reward_fns(cfg, "objective.rewards")
    assert problem == str(pytest.raises(ValueError, build_reward_fns, cfg, "objective.rewards").value)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (["bleu"], r"rewards\[0\]: expected a mapping"),
        ([{"name": "bleu", "weight": 1, "kwargs": ["zh"]}], r"rewards\[0\]\.kwargs: expected a mapping"),
        (
            [{"target": "rpbench.scoring.rewards:REWARDS", "weight": 1}],
            r"rewards\[0\]\.target: .* is not callable",
        ),
    ],
)
def test_build_reward_fns_rejects_wrong_types(cfg, match):
    with pytest.raises(TypeError, match=match):
        build_reward_fns(cfg, "objective.rewards")


def test_grpo_startup_names_a_reward_kwarg_missing_from_the_yaml(objective_settings):
    from rpbench.objectives.grpo import GRPOSettings

    entries = objective_settings("grpo")["rewards"]
    (penalty,) = [e for e in entries if e["name"] == "length_penalty"]
    without_unit = {**penalty, "kwargs": {k: v for k, v in penalty["kwargs"].items() if k != "unit"}}
    cut = [without_unit if e is penalty else e for e in entries]
    with pytest.raises(ValueError, match=r"objective.rewards\[2\]\.kwargs\.unit: missing"):
        GRPOSettings.parse(objective_settings("grpo", rewards=cut), "objective")


def test_score_rewards_rejects_bad_outputs():
    short = RewardFn("short", 1.0, lambda p, c, r: [1.0])
    nan = RewardFn("nan", 1.0, lambda p, c, r: [1.0, math.nan])
    with pytest.raises(ValueError, match="reward 'short' returned 1 values for 2 completions"):
        score_rewards([short], ["p", "p"], ["a", "b"], [None, None])
    with pytest.raises(ValueError, match="reward 'nan' returned nan for completion 1"):
        score_rewards([nan], ["p", "p"], ["a", "b"], [None, None])


def test_weighted_sum_checks_names_and_lengths():
    assert weighted_sum({"a": [1.0, 2.0], "b": [3.0, -1.0]}, {"a": 0.5, "b": 2.0}) == [6.5, -1.0]
    with pytest.raises(ValueError, match="same rewards"):
        weighted_sum({"a": [1.0]}, {"b": 1.0})
    with pytest.raises(ValueError, match="different lengths"):
        weighted_sum({"a": [1.0], "b": [1.0, 2.0]}, {"a": 1.0, "b": 1.0})


def test_judge_reward_scores_each_completion_through_a_real_judge_server(scripted, judge_settings):

    from rpbench.scoring.judge.rolemrc_rubrics import REASK
    from rpbench.serve.model import load_served_model
    from rpbench.serve.running import serve_in_thread

    replies = {"GOOD-REPLY": "1", "BAD-REPLY": "0", "ODD-REPLY": "maybe", REASK: "still not sure"}
    prompts = [[{"role": "system", "content": "You are Ada, a sailor."}, {"role": "user", "content": "Hi?"}]] * 3
    with serve_in_thread(load_served_model("tiny-qwen2"), make_server=scripted(replies=replies)) as server:
        (fn,) = build_reward_fns(
            [
                {
                    "name": "judge",
                    "weight": 1,
                    "kwargs": {
                        "judge": judge_settings(base_url=server.base_url, model=server.model_name, parse_tries=2),
                        "rubric": "role_style",
                        "max_tokens": 16,
                        "failure_reward": -1.0,
                    },
                }
            ],
            "objective.rewards",
        )
        scores = fn.fn(prompts, ["GOOD-REPLY", "BAD-REPLY", "ODD-REPLY"], [None] * 3)
        fn.fn.close()
    assert scores == [1.0, 0.0, -1.0]
    assert fn.fn.failures == 1


def test_reward_model_reward_equals_the_classifier_on_each_unpadded_sample(
    tmp_path, save_tiny_reward_model, tiny_model
):
    import torch
    from transformers import Qwen2ForSequenceClassification

    from rpbench.models import load_tokenizer

    save_tiny_reward_model(tmp_path)
    tokenizer = load_tokenizer(tiny_model())
    entry = {"name": "reward_model", "weight": 1, "kwargs": {"name_or_path": str(tmp_path), "batch_size": 2}}
    (fn,) = build_reward_fns([{**entry, "kwargs": {**entry["kwargs"], "dtype": "float32"}}], "objective.rewards")
    prompts = [[{"role": "user", "content": "Who are you?"}]] * 3
    completions = ["A sailor.", "I am Ada, captain of the Gull, and I have sailed far.", "Hm."]
    got = fn.fn(prompts, completions, [None] * 3)
    model = Qwen2ForSequenceClassification.from_pretrained(tmp_path).eval()
    for prompt, completion, score in zip(prompts, completions, got):
        text = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": completion}], tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        with torch.no_grad():
            assert score == pytest.approx(model(**ids).logits[0, 0].item(), abs=1e-5)
    assert len(set(got)) == 3
