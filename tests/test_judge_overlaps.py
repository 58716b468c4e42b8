"""One model in two parts of a judged conversation run (rpbench.scoring.judge.parties): the user simulator and
the judge, the simulator and a reward judge, or the evaluation judge and a judge that rewarded the evaluated
model's training (this run's, or a recorded run's that init_from started from) are refused at startup naming
the overlap and the setting that allows it; allowed, the overlap is the run's warning. A judge of the evaluated
model's family is a warning. (The tiny models' tuning allows the overlaps: these runs set the flags.)"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.validate import validate

JUDGE_URL = "http://localhost:9/v1"
USER_URL = "http://localhost:8/v1"
JUDGE = ("judge=openai", f"judge.base_url={JUDGE_URL}", "judge.model=judge-7b", "judge.api_key_env=null")
EVALUATION = ("objective=none", "data=sample_conversation", "evaluator.allow_shared_judge=false")
OWN_USER = (f"evaluator.simulator.base_url={USER_URL}", "evaluator.simulator.model=user-7b")
GRPO = ("objective=grpo", "env=conversation", "data=sample_conversation", "env.allow_shared_judge=false")


@pytest.mark.parametrize(
    ("overrides", "shared"),
    [
        (JUDGE, f"judge-7b ({JUDGE_URL})"),  # no simulator of its own: the judge's endpoint plays the user
        # the same endpoint (a trailing slash, the host's case) and model (its case), named twice
        (
            (*JUDGE, "evaluator.simulator.base_url=HTTP://LocalHost:9/v1/", "evaluator.simulator.model=Judge-7B"),
            f"Judge-7B ({JUDGE_URL})",
        ),
        (("judge=local", "evaluator.simulator.server=tiny-qwen2"), "tiny-qwen2 (served by the run)"),
    ],
)
def test_one_model_as_user_and_judge_is_refused_naming_the_overlap_and_the_flag(
    compose, refused_at_startup, overrides, shared
):
    message = refused_at_startup(compose, *EVALUATION, *overrides)
    assert (
        f"the user simulator (evaluator.simulator) and the judge (judge) are one model, {shared}: give each part its "
        "own endpoint or model, or set evaluator.allow_shared_judge=true to run anyway" in message
    )


@pytest.mark.slow
def test_a_simulator_of_its_own_is_no_overlap_and_an_allowed_one_is_the_runs_warning(compose):
    same_endpoint_other_model = (f"evaluator.simulator.base_url={JUDGE_URL}", "evaluator.simulator.model=user-7b")
    assert validate(compose(*EVALUATION, *JUDGE, *same_endpoint_other_model)).overlaps == ()
    assert (
        validate(compose(*EVALUATION, "judge=local", "evaluator.simulator.server=tiny-llama"))
        .overlaps[0]
        .startswith(
            "the judge (judge), tiny-qwen2 (served by the run), is of the evaluated model's family (qwen: tiny-qwen2)"
        )
    )
    allowed = validate(compose(*EVALUATION, *JUDGE, "evaluator.allow_shared_judge=true")).overlaps
    assert allowed == (
        f"the user simulator (evaluator.simulator) and the judge (judge) are one model, judge-7b ({JUDGE_URL}) "
        "(allowed by evaluator.allow_shared_judge=true)",
    )


def test_a_judge_of_the_evaluated_models_family_is_a_warning(compose):
    qwen = validate(compose(*EVALUATION, *JUDGE, *OWN_USER, "judge.model=Qwen/Qwen2.5-72B-Instruct")).overlaps
    assert qwen == (
        f"the judge (judge), Qwen/Qwen2.5-72B-Instruct ({JUDGE_URL}), is of the evaluated model's family (qwen: "
        "tiny-qwen2): a judge may favour its own family's replies, and its self-preference could not be measured: "
        "no judge of another family scores the same sessions (add one to evaluator.judges to measure it)",
    )
    assert validate(compose(*EVALUATION, *JUDGE, *OWN_USER, "model=tiny-llama")).overlaps == ()
    # beside a judge of another family, its self-preference is measured after judging
    ensemble = "evaluator.judges=[{model: qwen2.5-7b}, {model: llama-3-8b}]"
    measured = validate(compose(*EVALUATION, *JUDGE, *OWN_USER, ensemble)).overlaps
    assert measured == (
        f"judge 0 of the ensemble (evaluator.judges[0]), qwen2.5-7b ({JUDGE_URL}), is of the evaluated model's family "
        "(qwen: tiny-qwen2): a judge may favour its own family's replies; its self-preference on these sessions is "
        "measured against the judges of other families after judging (eval.conversation.self_preference)",
    )


@pytest.mark.slow
def test_the_session_judge_that_rewarded_the_policy_cannot_judge_it_unless_allowed(tmp_path, compose):
    """A GRPO run rewarded by judge-7b (its config.yaml as the pipeline writes it), an SFT run started from it:
    evaluating the SFT run's model with judge-7b is refused, naming the GRPO run; another judge is not."""
    trained = validate(compose(*GRPO, *JUDGE, "env.simulator.base_url=" + USER_URL, "env.simulator.model=u"))
    grpo, sft = tmp_path / "grpo-run", tmp_path / "sft-run"
    for run, composed in (
        (grpo, dict(trained.composed)),
        (sft, {"init_from": str(grpo), "objective": {"name": "sft"}}),
    ):
        (run / "model").mkdir(parents=True)
        (run / "config.yaml").write_text(OmegaConf.to_yaml(composed))
    start = f"init_from={sft}"
    with pytest.raises(ConfigError) as refused:
        validate(compose(*EVALUATION, *JUDGE, *OWN_USER, start))
    assert (
        "the judge (judge) and the reward judge of run grpo-run (env.rewards[0].kwargs.judge) are one model, "
        f"judge-7b ({JUDGE_URL}): give each part its own endpoint or model, or set evaluator.allow_shared_judge=true"
    ) in str(refused.value)
    assert validate(compose(*EVALUATION, *JUDGE, *OWN_USER, start, "judge.model=judge-70b")).overlaps == ()
    allowed = validate(compose(*EVALUATION, *JUDGE, *OWN_USER, start, "evaluator.allow_shared_judge=true")).overlaps
    assert [w for w in allowed if "reward judge of run grpo-run" in w and w.endswith("allow_shared_judge=true)")]

    (grpo / "config.yaml").write_text(
        "init_from: null\nobjective: {name: grpo}\nenv: {name: conversation, rewards: "
        "[{name: session_judge, weight: 1.0, kwargs: {judge: {backend: openai}}}]}\n"
    )
    with pytest.raises(
        DataFormatError, match=r"grpo-run/config.yaml: record env.rewards\[0\].kwargs.judge: field 'model'"
    ):
        validate(compose(*EVALUATION, *JUDGE, *OWN_USER, start))


@pytest.mark.slow
def test_training_on_sessions_refuses_one_model_as_user_and_reward_judge_and_as_its_own_evaluation_judge(compose):
    with pytest.raises(ConfigError) as refused:
        validate(compose(*GRPO, *JUDGE, "evaluator=none"))
    assert (
        "the user simulator (env.simulator) and the reward judge (env.rewards[0].kwargs.judge) are one model, "
        f"judge-7b ({JUDGE_URL}): give each part its own endpoint or model, or set env.allow_shared_judge=true"
    ) in str(refused.value)
    own_user = (f"env.simulator.base_url={USER_URL}", "env.simulator.model=user-7b")
    assert validate(compose(*GRPO, *JUDGE, *own_user, "evaluator=none")).overlaps == ()
    with pytest.raises(ConfigError) as refused:  # evaluated in the same run by the judge it was trained against
        validate(
            compose(*GRPO, *JUDGE, *own_user, *OWN_USER, "evaluator=conversation", "evaluator.allow_shared_judge=false")
        )
    assert "the judge (judge) and the reward judge of this run (env.rewards[0].kwargs.judge)" in str(refused.value)
