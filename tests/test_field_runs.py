"""`rpbench field`: the field's benchmarks for one model, a run each under one parent folder: not configured ones
skipped with why, finished ones reused, killed ones resumed, another model's or settings' folder never reused;
then the parent's leaderboard, a column per benchmark with each cell's provenance."""

from __future__ import annotations

import json

import pytest
import yaml

from rpbench.cli.field import FIELD_FILE, FieldSettings, composed_run, earlier, field_settings, fingerprint, main
from rpbench.core.errors import ConfigError
from rpbench.core.paths import CONF_DIR


def statuses(parent) -> dict[str, str]:
    """benchmark -> status, from the field.md the command writes into ``parent``."""
    rows = [line.split(" | ") for line in (parent / "field.md").read_text().splitlines() if line.startswith("| ")]
    return {row[0].lstrip("| "): row[1] for row in rows[2:]}


def why(parent, benchmark: str) -> str:
    line = next(x for x in (parent / "field.md").read_text().splitlines() if x.startswith(f"| {benchmark} |"))
    return line.split(" | ", 2)[2]


def test_the_field_file_parses_and_each_set_names_its_data_configs():
    settings = field_settings()
    assert settings.default_set in settings.sets
    for chosen in settings.sets.values():
        for overrides in chosen.values():
            data = [o.split("=", 1)[1] for o in overrides if o.startswith("data=")]
            assert len(data) == 1 and (CONF_DIR / "data" / f"{data[0]}.yaml").is_file()
    raw = yaml.safe_load(FIELD_FILE.read_text())
    with pytest.raises(ConfigError, match="default_set='nowhere': expected one of"):
        FieldSettings.parse({**raw, "default_set": "nowhere"}, "field.yaml")


@pytest.mark.slow  # composes and validates runs (imports the benchmarks)
def test_what_a_folder_holds_decides_reuse_resume_or_refusal(tmp_path):
    from rpbench.data.files import package_path
    from rpbench.pipeline import read_data

    test_file = tmp_path / "test.jsonl"
    test_file.write_text(package_path("pkg://rpbench/resources/sample/rolemrc/test.jsonl").read_text())
    run = tmp_path / "rolemrc"
    spec = composed_run(["objective=none", "data=sample", f"data.files.test={test_file}"], run)
    config = dict(spec.composed)
    assert earlier(run, spec) == ("new", "")
    run.mkdir()
    assert earlier(run, spec)[0] == "killed"  # killed before it wrote its config
    # the folder, run name and progress bars differ between launches: not settings
    shown = {**config, "paths": {"output_dir": "b"}, "run_name": "x"}
    (run / "config.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(shown, default=str))))
    assert earlier(run, spec) == ("killed", "no metrics.json")
    (run / "metrics.json").write_text(json.dumps({"eval": {}, "failed": "every judge request failed"}))
    assert earlier(run, spec)[0] == "killed"
    _, records = read_data(spec.data, None, need_test=True)
    (run / "metrics.json").write_text(json.dumps({"eval": {}, "records": records}))
    assert earlier(run, spec)[0] == "finished"
    other = composed_run(["objective=none", "data=sample", f"data.files.test={test_file}", "model=tiny-llama"], run)
    assert earlier(run, other)[0] == "other" and "model.name: 'tiny-qwen2' -> 'tiny-llama'" in earlier(run, other)[1]
    assert fingerprint(config) != fingerprint(dict(other.composed))
    # the test file replaced at the same path (one record fewer): the same settings, other records
    test_file.write_text("".join(test_file.read_text().splitlines(keepends=True)[1:]))
    state, why = earlier(run, spec)
    assert state == "other" and why.startswith(f"data.files.test ({test_file}): its records are not those the run")
    assert records["test"]["records_sha256"][:12] in why
    (run / "metrics.json").write_text(json.dumps({"eval": {}}))  # a metrics.json that records no records
    assert "no records_sha256 recorded" in earlier(run, spec)[1]


def test_the_rpbench_command_names_benchmarks_not_in_the_set(capsys):
    from rpbench.cli.commands import main as rpbench

    with pytest.raises(SystemExit) as stop:
        rpbench(["field", "--only", "rolemrc,nowhere"])
    assert stop.value.code == 2
    assert "--only nowhere: not in set samples (rolemrc, rolebench, characterllm" in capsys.readouterr().err


def judge_reply(body: dict) -> str:
    """A CharacterLLM judge and interviewer: a question for the interviewer's cue, else a score of 5."""
    text = body["messages"][-1]["content"]
    return "Where were you born?" if "Write only your next utterance" in text else "Steady enough.\n5"


@pytest.mark.slow
def test_the_field_runs_skips_resumes_reuses_and_never_takes_another_models_run(tmp_path, chat_stub, small_eval):
    parent = tmp_path / "field"
    common = ["--out", str(parent), "logger=none", "trainer.enable_progress_bar=false", *small_eval]
    unjudged = ["--only", "rolemrc,rolebench,characterllm", *common]
    assert main(unjudged) == 0
    assert statuses(parent) == {"rolemrc": "ran", "rolebench": "ran", "characterllm": "skipped"}
    assert "evaluator=characterllm is scored by a judge" in why(parent, "characterllm")
    assert not (parent / "characterllm").exists()

    # rolebench killed after 3 of its replies: its folder holds their predictions, no metrics.json
    rolemrc_metrics = (parent / "rolemrc" / "metrics.json").read_text()
    total = json.loads((parent / "rolebench" / "metrics.json").read_text())["eval"]["generation"]["n_total"]
    (parent / "rolebench" / "metrics.json").unlink()
    predictions = parent / "rolebench" / "predictions.jsonl"
    predictions.write_text("".join(predictions.read_text().splitlines(keepends=True)[:3]))
    assert main(unjudged) == 0
    assert statuses(parent) == {"rolemrc": "finished", "rolebench": "resumed", "characterllm": "skipped"}
    assert (parent / "rolemrc" / "metrics.json").read_text() == rolemrc_metrics  # reused, not run again
    generation = json.loads((parent / "rolebench" / "metrics.json").read_text())["eval"]["generation"]
    assert (generation["n_resumed"], generation["n_generated"]) == (3, total - 3) and total > 3

    with chat_stub(judge_reply) as judge:
        judged = [f"judge.base_url={judge.url}", "judge.api_key_env=null", "judge.cache_path=null"]
        args = ["--only", "characterllm", *common, "evaluator.max_turns=2", "judge=openai", *judged]
        assert main(args) == 0
    assert statuses(parent) == {"characterllm": "ran"}
    board = (parent / "leaderboard.md").read_text()
    header = next(line for line in board.splitlines() if line.startswith("| row"))
    assert header.endswith("| characterllm | rolebench | rolemrc |")
    provenance = board.split("## Provenance")[1]
    judged_note = next(line for line in provenance.splitlines() if f"at {judge.url}" in line)
    recorded = json.loads((parent / "characterllm" / "metrics.json").read_text())["eval"]["prompts"]
    assert recorded and all(f"{name} {p['sha256'][:12]}" in judged_note for name, p in recorded.items())
    assert "max_new_tokens=16" in judged_note and "temperature=" in judged_note

    # another model into the same parent: the folder holds tiny-qwen2's run, never reused nor overwritten
    assert main(["--only", "rolemrc", *common, "model=tiny-llama"]) == 1
    assert statuses(parent) == {"rolemrc": "failed"}
    assert "not reused" in why(parent, "rolemrc") and "model." in why(parent, "rolemrc")
    assert (parent / "rolemrc" / "metrics.json").read_text() == rolemrc_metrics


def test_the_judge_is_given_only_to_benchmarks_with_a_judge_protocol():
    """`rpbench field judge=local` runs rolebench (no judge protocol: rpbench eval would refuse a judge) without
    the judge's overrides, and characterllm with them."""
    from rpbench.cli.field import without_judge

    judge = ["judge=local", "judge.server.model=tiny-llama", "+judge.extra=1"]
    kept, dropped = without_judge(["objective=none", "data=sample_rolebench"], ["model=tiny-qwen2", *judge])
    assert kept == ["model=tiny-qwen2"] and dropped == judge
    assert without_judge(["objective=none", "data=sample_characterllm"], judge) == (judge, [])
    assert without_judge(["data=sample_rolebench"], ["model=tiny-qwen2"]) == (["model=tiny-qwen2"], [])


def test_a_refusal_of_several_problems_is_one_line_that_keeps_them_apart():
    from rpbench.cli.field import one_line

    refusal = "invalid configuration:\n  a and b are one model: set x\n  c and b are one model: set y"
    assert one_line(refusal) == "invalid configuration: a and b are one model: set x; c and b are one model: set y"
    assert one_line("no such key\n  in  the   config") == "no such key in the config"
