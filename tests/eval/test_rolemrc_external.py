"""experiment=rolemrc_external: one multirun job per external evaluation of RoleMRC (Tables 4, 5, 7, 10); each
part run here in process on the tiny model, the data where the data configs look for them (./RoleBench,
./trainable-agents: the bundled stand-ins copied there)."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import OmegaConf

from rpbench.core.paths import CONF_DIR
from rpbench.data.files import package_path

PARTS = ["rolebench_instruction", "rolebench_role", "characterllm", "general"]
TINY = ["experiment=rolemrc_external", "model=tiny-qwen2", "trainer=cpu", "logger=none"]


def test_the_experiment_sweeps_the_four_parts(tmp_path, composed):
    cfg = composed(tmp_path, *TINY)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert cfg.hydra.sweeper.params.external.split(",") == PARTS
    assert {p.stem for p in (CONF_DIR / "external").glob("*.yaml")} == set(PARTS)
    expected = {
        "rolebench_instruction": ("rolebench_instruction", "rolebench", "none"),
        "rolebench_role": ("rolebench_role", "rolebench", "none"),
        "characterllm": ("characterllm", "characterllm", "openai"),
        "general": (cfg.data.name, "general", "none"),
    }
    for part, (data, evaluator, judge) in expected.items():
        part_cfg = composed(tmp_path, *TINY, f"external={part}")
        assert (part_cfg.data.name, part_cfg.evaluator.name, part_cfg.judge.backend) == (data, evaluator, judge)
        assert part_cfg.objective.name == "none"


@pytest.fixture
def workdir(tmp_path, monkeypatch, write_task):
    """A working directory holding the data where the data configs look, and a custom lm-eval task."""
    shutil.copytree(package_path("pkg://rpbench/resources/sample/rolebench"), tmp_path / "RoleBench")
    shutil.copytree(package_path("pkg://rpbench/resources/sample/characterllm"), tmp_path / "trainable-agents")
    rows = [
        {"question": "Ice is", "choices": ["cold", "hot"], "answer": 0},
        {"question": "Fire is", "choices": ["cold", "hot"], "answer": 1},
    ]
    write_task(tmp_path / "tasks", "tiny_choice", rows)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return tmp_path


def judge_reply(body: dict) -> str:
    text = body["messages"][-1]["content"]
    return "What do you remember best?" if "Write only your next utterance" in text else "Fine.\n4\n4"


@pytest.mark.slow
def test_each_part_runs_on_the_tiny_model(workdir, run_in_process, chat_stub):
    common = [*TINY, "evaluator.bootstrap.n_resamples=10"]
    general = [
        "evaluator.include_path=tasks",
        "evaluator.include_defaults=false",
        "evaluator.tasks=[{label: Tiny, name: tiny_choice, num_fewshot: 0, metric: 'acc,none'}]",
    ]
    outputs = {}
    for part in ("rolebench_instruction", "rolebench_role"):
        outputs[part] = run_in_process(
            workdir / part, *common, f"external={part}", "evaluator.generation.max_new_tokens=4"
        )
    with chat_stub(judge_reply) as judge:
        outputs["characterllm"] = run_in_process(
            workdir / "characterllm",
            *common,
            "external=characterllm",
            "evaluator.max_turns=1",
            "evaluator.generation.max_new_tokens=4",
            f"judge.base_url={judge.url}",
            "judge.api_key_env=null",
            "judge.cache_path=null",
            "judge.progress=false",
        )
    start = run_in_process(workdir / "start", *common, "external=general", "model.init_seed=3", *general)
    outputs["general"] = run_in_process(
        workdir / "general", *common, "external=general", *general, f"general_baseline={workdir / 'start'}"
    )
    assert (
        outputs["rolebench_instruction"]["eval"]["n_records"] == 5
        and outputs["rolebench_role"]["eval"]["n_records"] == 3
    )
    assert outputs["characterllm"]["eval"]["characterllm"]["turns"]["average"] == 4.0
    delta = outputs["general"]["eval"]["general_delta"]
    gap = (
        outputs["general"]["eval"]["general"]["tiny_choice"]["summary"]["mean"]
        - start["eval"]["general"]["tiny_choice"]["summary"]["mean"]
    )
    assert delta["mean_delta"] == pytest.approx(100 * gap)
    for part, results in outputs.items():
        assert results["run_name"] == OmegaConf.load(CONF_DIR / "external" / f"{part}.yaml").run_name
        assert (workdir / part / "metrics.json").is_file() and (workdir / part / "report.md").is_file()
