"""Bad settings stop `python run.py` at startup with one message naming the key and what is allowed;
the traceback goes to run.log, never to the console."""

from __future__ import annotations

import pytest

from conftest import run_script
from rpbench.data.errors import ConfigError
from rpbench.data.readers import FORMATS
from rpbench.eval.benchmarks import judged_benchmarks
from rpbench.objectives.registry import OBJECTIVES
from rpbench.probes.io import STATS_FILE
from rpbench.probes.stage import PROBES
from rpbench.scoring.metrics import METRICS
from rpbench.validate import validate

QUICK = ["trainer.enable_progress_bar=false", "data.max_train_samples=8"]  # if a check let it through


def failed_at_startup(tmp_path, *overrides: str, **env: str) -> str:
    """Run, expect exit 1 with nothing trained or evaluated; the stderr."""
    out = tmp_path / "run"
    result = run_script("run.py", f"hydra.run.dir={out}", *QUICK, *overrides, **env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("error: ") and "run.log" in result.stderr
    assert "Traceback" in (out / "run.log").read_text()
    assert not (out / "checkpoints").exists() and not (out / "metrics.json").exists()
    assert not (out / "predictions.jsonl").exists()
    return result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("objective.batch_size=-4", "objective.batch_size=-4: expected an integer >= 1"),
        ("objective.batch_size=0", "objective.batch_size=0: expected an integer >= 1"),
        ("objective.grad_accum=0", "objective.grad_accum=0: expected an integer >= 1"),
        ("objective.epochs=0", "objective.epochs=0: expected an integer >= 1"),
        ("data.val_fraction=1.5", "data.val_fraction=1.5: expected a held-out share, 0 <= f < 1"),
        ("objective.lr=abc", "objective.lr='abc': expected a number > 0"),
        ("seed=abc", "seed='abc': expected an integer from 0 to 4294967295"),
    ],
)
def test_an_out_of_range_setting_is_named_with_what_is_allowed(tmp_path, override, named):
    assert named in failed_at_startup(tmp_path, override)


@pytest.mark.slow
def test_every_problem_is_listed_in_one_message(tmp_path):
    stderr = failed_at_startup(tmp_path, "objective.batch_size=0", "seed=abc", "data.format=xml")
    assert stderr.count("\n  ") == 3 and f"data.format='xml': choose one of {', '.join(FORMATS.names())}" in stderr


@pytest.mark.slow
def test_images_the_evaluator_cannot_see_stop_the_run_before_training(tmp_path):
    stderr = failed_at_startup(tmp_path, "data=sample_mmrole")
    assert "test record 'Mara_Voss_comment_Friends_13_40' has an image" in stderr
    assert "evaluator.backend=endpoint" in stderr and "evaluator.images=drop" in stderr


@pytest.mark.slow
def test_a_judge_without_its_api_key_stops_the_run_before_training(tmp_path):
    stderr = failed_at_startup(tmp_path, "judge=openai", OPENAI_API_KEY="")
    assert "judge.api_key_env='OPENAI_API_KEY'" in stderr and "not set" in stderr


@pytest.mark.slow
def test_a_judge_for_an_evaluator_without_a_judge_protocol_is_refused(tmp_path):
    stderr = failed_at_startup(tmp_path, "data=sample", "evaluator=rolebench", "judge=local")
    assert f"evaluator=rolebench has no judge protocol; judged evaluators: {', '.join(judged_benchmarks())}" in stderr


@pytest.mark.slow
def test_compare_to_a_folder_without_scores_is_refused(tmp_path):
    (tmp_path / "other").mkdir()
    stderr = failed_at_startup(tmp_path, f"evaluator.compare_to={tmp_path / 'other'}")
    other = tmp_path / "other"
    assert f"evaluator.compare_to={other}: expected an evaluated run's folder (with scores.jsonl)" in stderr


@pytest.mark.slow
def test_probe_runs_without_probe_statistics_are_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / STATS_FILE).write_bytes(b"")
    stderr = failed_at_startup(tmp_path, "objective=none", "evaluator=none", "probe=compare", f"probe.runs=[{a},{b}]")
    assert f"probe.runs: {b} holds no {STATS_FILE}" in stderr and f"{a} holds" not in stderr


@pytest.mark.slow
def test_a_bad_data_record_is_one_message_and_the_traceback_is_in_the_run_log(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversations": [{"role": "User", "content": "hi"}]}\n')
    stderr = failed_at_startup(tmp_path, f"data.files.train={bad}", "evaluator=none")
    assert stderr.splitlines()[0].startswith(f"error: {bad}: record 1: field ")
    assert "DataFormatError" in (tmp_path / "run" / "run.log").read_text()


def test_choices_come_from_the_registries(compose):
    with pytest.raises(ValueError) as error:
        validate(
            compose("objective.name=ppo", "probe.name=saliency", "judge.backend=mystery", "evaluator.metrics=[bleurt]")
        )
    message = str(error.value)
    assert f"evaluator.metrics='bleurt': choose one of {', '.join(METRICS.names())}" in message
    assert f"objective.name='ppo': choose one of {', '.join([*OBJECTIVES.names(), 'none'])}" in message
    assert f"probe.name='saliency': choose one of {', '.join(PROBES.names())}" in message
    assert "judge.backend='mystery': choose one of" in message


def test_the_shipped_experiments_and_defaults_validate(compose, monkeypatch):
    """(The DPO experiments start from the SFT runs' folders, so they validate once those exist.)"""
    monkeypatch.setenv("OPENAI_API_KEY", "set")
    shipped = [[], ["judge=openai"], ["judge=local"], ["objective=dpo"], ["objective=grpo"], ["evaluator=rpgbench"]]
    shipped += [["experiment=rolemrc_sft_qwen2.5-7b"], ["experiment=rolemrc_sft_llama3.1-8b"]]
    for overrides in shipped:
        validate(compose(*overrides))
    validate(compose("data=sample_mmrole", "evaluator=mmrole", "evaluator.images=drop", "judge=local"))
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
