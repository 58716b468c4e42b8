"""Bad settings stop `python run.py` at startup with one message naming the key and what is allowed, never a
traceback; a run stopped before it ran leaves no folder.

One test runs run.py itself (exit status, stderr, the folder left); the others run the same pipeline in-process on
the config Hydra composes for those command-line overrides, which is what run.py hands it."""

from __future__ import annotations

import pytest

from rpbench.core.errors import ConfigError
from rpbench.data.readers import FORMATS
from rpbench.eval.benchmarks import judged_benchmarks
from rpbench.objectives.registry import OBJECTIVES
from rpbench.probes.io import STATS_FILE
from rpbench.probes.stage import PROBES
from rpbench.scoring.metrics import METRICS
from rpbench.validate import validate


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("objective.batch_size=-4", "objective.batch_size=-4: expected an integer >= 1"),
        ("objective.batch_size=0", "objective.batch_size=0: expected an integer >= 1"),
        ("objective.grad_accum=0", "objective.grad_accum=0: expected an integer >= 1"),
        ("objective.epochs=0", "objective.epochs=0: expected an integer >= 1"),
        ("data.val_fraction=1.5", "data.val_fraction=1.5: expected a held-out share, 0 <= f < 1"),
        ("objective.lr=abc", "objective.lr='abc': expected a finite number"),
        ("objective.lr=0", "objective.lr=0.0: expected a number > 0"),
        ("seed=abc", "seed='abc': expected an integer"),
        ("seed=-1", "seed=-1: expected an integer from 0 to 4294967295"),
    ],
)
def test_an_out_of_range_setting_is_named_with_what_is_allowed(compose, override, named, refused_at_startup):
    assert named in refused_at_startup(compose, override)


def test_a_model_config_that_leaves_out_a_shared_key_is_refused(compose, refused_at_startup):
    """conf/model/common/default.yaml marks what each model config must set with `???`."""
    message = refused_at_startup(compose, "model.end_of_turn=???", "model.family=???")
    assert "no value for model.end_of_turn, model.family" in message


def test_an_objective_with_two_optimizers_is_refused_under_deepspeed(compose, refused_at_startup):
    message = refused_at_startup(compose, "objective=corl", "data=sample_rpgbench", "trainer=deepspeed_zero2")
    assert "objective=corl steps 2 optimizers and a DeepSpeed engine steps one" in message


def test_every_problem_is_listed_in_one_message(compose, refused_at_startup):
    message = refused_at_startup(compose, "objective.batch_size=0", "seed=abc", "data.format=xml")
    assert message.count("\n  ") == 3 and f"data.format='xml': expected one of {', '.join(FORMATS.names())}" in message


def test_images_the_evaluator_cannot_see_stop_the_run_before_training(compose, refused_at_startup):
    message = refused_at_startup(compose, "data=sample_mmrole")
    assert "test record 'Mara_Voss_comment_Friends_13_40' has an image" in message
    assert "evaluator.backend=endpoint" in message and "data.images=drop" in message


def test_a_judge_without_its_api_key_stops_the_run_before_training(compose, monkeypatch, refused_at_startup):
    monkeypatch.setenv("OPENAI_API_KEY", "")
    message = refused_at_startup(compose, "judge=openai")
    assert "judge.api_key_env='OPENAI_API_KEY'" in message and "not set" in message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("evaluator", "data"),
    [
        ("rolemrc", "sample"),
        ("rpgbench", "sample_rpgbench"),
        ("characterllm", "sample_characterllm"),
        ("conversation", "sample_conversation"),
        ("mmrole", "sample_mmrole"),
    ],
)
def test_a_judged_evaluator_without_its_judge_s_reply_length_is_refused(compose, evaluator, data):
    """The judge's reply length is the judged benchmark's own setting (evaluator.judge_max_tokens): missing or out
    of range, it is named at startup, not after generating."""
    run = (f"evaluator={evaluator}", f"data={data}", "objective=none", "judge=local")
    with pytest.raises(ConfigError, match=r"evaluator\.judge_max_tokens: missing"):
        validate(compose(*run, "~evaluator.judge_max_tokens"))
    with pytest.raises(ConfigError, match=r"evaluator\.judge_max_tokens=0: expected an integer >= 1 \(tokens\)"):
        validate(compose(*run, "evaluator.judge_max_tokens=0"))


def test_a_judge_for_an_evaluator_without_a_judge_protocol_is_refused(compose, refused_at_startup):
    message = refused_at_startup(compose, "data=sample", "evaluator=rolebench", "judge=local")
    assert f"evaluator=rolebench has no judge protocol; judged evaluators: {', '.join(judged_benchmarks())}" in message


def test_compare_to_a_folder_without_scores_is_refused(compose, tmp_path, refused_at_startup):
    other = tmp_path / "other"
    other.mkdir()
    message = refused_at_startup(compose, f"evaluator.compare_to={other}")
    assert f"evaluator.compare_to='{other}': expected an evaluated run's folder (with scores.jsonl)" in message


def test_probe_runs_without_probe_statistics_are_refused(compose, tmp_path, refused_at_startup):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / STATS_FILE).write_bytes(b"")
    message = refused_at_startup(compose, "objective=none", "evaluator=none", "probe=compare", f"probe.runs=[{a},{b}]")
    assert f"probe.runs: {b} holds no {STATS_FILE}" in message and f"{a} holds" not in message


@pytest.mark.slow
def test_a_run_refused_before_it_ran_is_one_message_and_leaves_no_run_folder(tmp_path, run_script, quick):
    """`python run.py` itself: exit status 1, the message alone on stderr, and neither the run's folder nor
    outputs/<run_name>/ above it left behind (nothing in it but Hydra's record, run.log and the error)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversations": [{"role": "User", "content": "hi"}]}\n')
    outputs = tmp_path / "outputs"
    for refused, message in (
        ([f"data.files.train={bad}"], f"error: {bad}: record 1: field "),  # read before the model loads
        (["seed=-1"], "error: invalid configuration:\n  seed=-1: expected an integer"),  # validation
    ):
        result = run_script("run.py", f"paths.output_root={outputs}", *quick, *refused, "evaluator=none")
        assert result.returncode == 1, result.stderr[-3000:]
        assert result.stderr.startswith(message) and "Traceback" not in result.stderr + result.stdout
        assert "run.log" not in result.stderr  # no log to point at
        assert list(outputs.iterdir()) == []


def test_choices_come_from_the_registries(compose):
    with pytest.raises(ValueError) as error:
        validate(
            compose("objective.name=ppo", "probe.name=saliency", "judge.backend=mystery", "evaluator.metrics=[bleurt]")
        )
    message = str(error.value)
    assert f"evaluator.metrics=['bleurt']: expected names from {', '.join(METRICS.names())}" in message
    assert f"objective.name='ppo': choose one of {', '.join([*OBJECTIVES.names(), 'none'])}" in message
    assert f"probe.name='saliency': choose one of {', '.join(PROBES.names())}" in message
    assert "judge.backend='mystery': choose one of" in message


@pytest.mark.slow
def test_the_shipped_experiments_and_defaults_validate(compose, monkeypatch):
    """(The DPO experiments start from the SFT runs' folders, so they validate once those exist. The GPU recipes
    are validated as on their GPU machine: torch reports a CUDA device.)"""
    import torch

    monkeypatch.setenv("OPENAI_API_KEY", "set")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    shipped = [
        [],
        ["judge=openai"],
        ["judge=local"],
        ["objective=dpo"],
        ["objective=grpo"],
        ["evaluator=rpgbench", "data=sample_rpgbench"],
    ]
    shipped += [["experiment=rolemrc_sft_qwen2.5-7b"], ["experiment=rolemrc_sft_llama3.1-8b"]]
    for overrides in shipped:
        validate(compose(*overrides))
    validate(compose("data=sample_mmrole", "evaluator=mmrole", "data.images=drop", "judge=local"))
    validate(compose("experiment=mmrole_agent"))


def test_a_model_marked_unsupported_is_refused_with_its_reason(compose):
    with pytest.raises(ConfigError, match=r"model=qwen-vl-chat: Qwen-VL-Chat's remote code .* model=qwen2-vl-7b"):
        validate(compose("model=qwen-vl-chat"))


def test_a_probe_run_folder_with_statistics_passes(compose, tmp_path):
    runs = []
    for name in "ab":
        (tmp_path / name).mkdir()
        (tmp_path / name / STATS_FILE).write_bytes(b"")
        runs.append(str(tmp_path / name))
    validate(compose("objective=none", "evaluator=none", "probe=compare", f"probe.runs=[{runs[0]},{runs[1]}]"))
