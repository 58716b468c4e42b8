"""`python -m rpbench.leaderboard`: run folders (metrics.json, config.yaml, scores.jsonl as runs write them)
-> leaderboard.md/.csv/.png, ranks, seeds, flags, conflicts, missing cells and paired tests."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml
from PIL import Image

from rpbench.leaderboard import Rows, build, main
from rpbench.leaderboard.board import ranks
from rpbench.leaderboard.plot import figure

DATA = "a" * 64


def write_run(folder, model, evaluator, value, per_record, *, judge="none", data=DATA, version="0.1.0", ci=True, **run):
    """A run folder as the pipeline leaves it, with a RoleMRC-style judge headline or a ROUGE-L one; ``run``:
    its objective, data name and seed (none, sample, 42 unless given)."""
    folder.mkdir(parents=True)
    if judge == "none":
        entry = {"mean": value, **({"ci_low": value - 0.1, "ci_high": value + 0.1} if ci else {})}
        evaluation = {"metrics": {"overall": {"rougeL": entry}}}
        rows = [{"id": f"r{i}", "task": "t", "metrics": {"rougeL": v}} for i, v in enumerate(per_record)]
    else:
        evaluation = {"judge": {"overall": {"accuracy": value}}, "metrics": {"overall": {}}}
        evaluation["judge_cost"] = {
            "requests": len(per_record),
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "cost_usd": 0.5,
        }
        rows = [{"id": f"r{i}", "metrics": {}, "verdicts": {"role_style": v}} for i, v in enumerate(per_record)]
    results = {
        "model": model,
        "objective": run.get("objective", "none"),
        "data": run.get("data_name", "sample"),
        "evaluator": evaluator,
        "rpbench_version": version,
        "records": {"test": {"read": len(per_record), "records_sha256": data}},
        "eval": evaluation,
    }
    (folder / "metrics.json").write_text(json.dumps(results))
    backend, _, name = judge.partition(":")
    config = {"judge": {"backend": backend, "model": name or None}, "seed": run.get("seed", 42)}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_ranks_are_one_for_the_best_and_ties_share_their_mean():
    assert ranks({"a": 0.5, "b": 0.9, "c": 0.5, "d": 0.1}, higher_is_better=True) == {
        "b": 1,
        "a": 2.5,
        "c": 2.5,
        "d": 4,
    }
    assert ranks({"a": 3.0, "b": 1.0}, higher_is_better=False) == {"b": 1, "a": 2}


def test_leaderboard_of_runs_and_sweeps(tmp_path):
    sweep = tmp_path / "sweep"
    rng = np.random.default_rng(0)
    good = rng.uniform(0.5, 1.0, 30).round(3).tolist()
    bad = rng.uniform(0.0, 0.5, 30).round(3).tolist()
    # rolebench: three models; "big" has three seeds (median 0.7), "mid" one run, "small" one run
    for seed, value in enumerate([0.9, 0.7, 0.6]):
        write_run(sweep / f"{seed}_big_rb", "big", "rolebench", value, good)
    write_run(sweep / "3_mid_rb", "mid", "rolebench", 0.5, bad)
    write_run(tmp_path / "old" / "small_rb", "small", "rolebench", 0.2, bad, version="0.0.9")
    # rolemrc, judged by gpt-4o: big 0.8, small 0.6; mid judged by another model: flagged, not ranked
    write_run(sweep / "4_big_rm", "big", "rolemrc", 0.8, [1, 1, 0, 1], judge="openai:gpt-4o")
    write_run(sweep / "5_small_rm", "small", "rolemrc", 0.6, [1, 0, 0, 1], judge="openai:gpt-4o")
    write_run(sweep / "6_mid_rm", "mid", "rolemrc", 0.9, [1, 1, 1, 1], judge="openai:other")
    # mmrole: big twice on different test data: a conflict, never combined; no other model has it (missing)
    write_run(sweep / "7_big_mm", "big", "mmrole", 0.4, good)
    write_run(sweep / "8_big_mm", "big", "mmrole", 0.3, good, data="b" * 64)
    (sweep / "9_failed").mkdir()  # a job without results is not a run

    board = build([sweep, tmp_path / "old"])
    assert board.benchmarks == ["mmrole", "rolebench", "rolemrc"]
    big, mid, small = (board.cells[m, "rolebench"] for m in ("big", "mid", "small"))
    assert (big.value, big.seeds, big.run.endswith("1_big_rb")) == (0.7, 3, True)
    assert [board.rank[m, "rolebench"] for m in ("big", "mid", "small")] == [1, 2, 3]
    assert board.cells["mid", "rolemrc"].flag and ("mid", "rolemrc") not in board.rank
    assert board.rank["big", "rolemrc"] == 1 and board.rank["small", "rolemrc"] == 2
    assert board.cells["big", "mmrole"].conflict and board.cells["big", "mmrole"].value is None
    assert ("mid", "mmrole") not in board.cells
    # mean ranks: big (1+1)/2, mid 2 (rolebench only), small (3+2)/2
    assert board.rows == ["big", "mid", "small"]
    assert board.overall["small"] == {
        "mean_rank": 2.5,
        "min": 2,
        "max": 3,
        "std": np.std([3, 2], ddof=1),
        "benchmarks": 2,
    }
    # CI of a judge headline without one in metrics.json: bootstrapped from the run's verdicts
    assert board.cells["big", "rolemrc"].ci_low <= 0.75 <= board.cells["big", "rolemrc"].ci_high
    # adjacent pairs: big-mid on rolebench only (mid is not ranked on rolemrc), mid-small on rolebench
    pairs = [(t["upper"], t["lower"], t["benchmark"]) for t in board.adjacent]
    assert pairs == [("big", "mid", "rolebench"), ("mid", "small", "rolebench")]
    assert board.adjacent[0]["delta"] == pytest.approx(np.mean(bad) - np.mean(good)) and board.adjacent[0]["n"] == 30
    assert board.adjacent[0]["p_value"] < 0.01 and board.adjacent[1]["delta"] == 0

    out = tmp_path / "board"
    assert main([str(sweep), str(tmp_path / "old"), "--out", str(out)]) == 0
    text = (out / "leaderboard.md").read_text()
    assert "0.7000 [0.6000, 0.8000] (median of 3)" in text
    assert "judge differ" in text and "conflict (2 runs differ in data" in text and "| missing |" in text
    assert "small_rb | shown | ROUGE-L | none | aaaaaaaaaaaaaaaa | 0.0.9 |" in text
    assert "0.2000 [0.1000, 0.3000] (rpbench 0.0.9)" in text
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert len(rows) == 9 and {r["flag"] for r in rows if r["benchmark"] == "mmrole" and r["row"] != "big"} == {
        "missing"
    }
    big_rolemrc = next(r for r in rows if (r["row"], r["benchmark"]) == ("big", "rolemrc"))
    assert (big_rolemrc["judge_requests"], big_rolemrc["judge_tokens"], big_rolemrc["judge_cost_usd"]) == (
        "4",
        "12",
        "0.5",
    )
    assert (out / "leaderboard.png").stat().st_size > 0


def test_command_line_names_a_folder_without_runs_and_a_broken_metrics_file(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert f"no full run with a benchmark headline under {tmp_path}" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text('{"model": ')
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err  # the broken run is listed as skipped, naming its file
    assert "run/metrics.json: not JSON" in err and "error: no full run with a benchmark headline" in err


def _replace(folder, name, text):
    (folder / name).write_text(text) if isinstance(text, str) else (folder / name).write_bytes(text)


def _metrics_with(folder, change):
    results = json.loads((folder / "metrics.json").read_text())
    change(results)
    (folder / "metrics.json").write_text(json.dumps(results))


def _folder_for(folder, name):
    (folder / name).unlink()
    (folder / name).mkdir()


# Each a run folder broken in one way: (how, file named in the reason, words of the reason)
BROKEN = {
    "metrics.json a list": (lambda f: _replace(f, "metrics.json", "[1, 2]"), "metrics.json", "JSON object"),
    "metrics.json a folder": (lambda f: _folder_for(f, "metrics.json"), "metrics.json", "cannot be read"),
    "metrics.json not JSON": (lambda f: _replace(f, "metrics.json", '{"model": '), "metrics.json", "not JSON"),
    "metrics.json not UTF-8": (lambda f: _replace(f, "metrics.json", b"\xff\xfe{}"), "metrics.json", "cannot be"),
    "eval a list": (lambda f: _metrics_with(f, lambda r: r.update(eval=[1])), "metrics.json", "eval"),
    "evaluator a number": (lambda f: _metrics_with(f, lambda r: r.update(evaluator=3)), "metrics.json", "evaluator"),
    "NaN headline": (
        lambda f: _metrics_with(f, lambda r: r["eval"]["judge"]["overall"].update(accuracy=float("nan"))),
        "metrics.json",
        "is nan",
    ),
    "infinite headline": (
        lambda f: _metrics_with(f, lambda r: r["eval"]["judge"]["overall"].update(accuracy=float("inf"))),
        "metrics.json",
        "is inf",
    ),
    "judge_cost without tokens": (
        lambda f: _metrics_with(f, lambda r: r["eval"]["judge_cost"].pop("prompt_tokens")),
        "metrics.json",
        "prompt_tokens",
    ),
    "judge_cost a string": (
        lambda f: _metrics_with(f, lambda r: r["eval"].update(judge_cost="free")),
        "metrics.json",
        "judge_cost",
    ),
    "CI bound a string": (
        lambda f: _metrics_with(f, lambda r: r["eval"]["judge"]["overall"].update(ci_low="low")),
        "metrics.json",
        "ci_low",
    ),
    "config.yaml unparseable": (lambda f: _replace(f, "config.yaml", "judge: [unclosed"), "config.yaml", "YAML"),
    "config.yaml a list": (lambda f: _replace(f, "config.yaml", "- a\n- b\n"), "config.yaml", "mapping"),
    "config.yaml a folder": (lambda f: _folder_for(f, "config.yaml"), "config.yaml", "cannot be read"),
    "judge a string": (lambda f: _replace(f, "config.yaml", "judge: openai\n"), "config.yaml", "judge"),
    "judge.server a string": (
        lambda f: _replace(f, "config.yaml", "judge: {backend: local, server: big}\n"),
        "config.yaml",
        "judge.server",
    ),
    "evaluator.judges a string": (
        lambda f: _replace(f, "config.yaml", "judge: {backend: openai, model: m}\nevaluator: {judges: gpt}\n"),
        "config.yaml",
        "evaluator.judges",
    ),
    "scores row without id": (lambda f: _replace(f, "scores.jsonl", '{"verdicts": {}}\n'), "scores.jsonl", "id"),
    "scores row not JSON": (lambda f: _replace(f, "scores.jsonl", "{oops\n"), "scores.jsonl", "line 1"),
    "scores row a list": (lambda f: _replace(f, "scores.jsonl", "[1]\n"), "scores.jsonl", "line 1"),
    "verdict a string": (
        lambda f: _replace(f, "scores.jsonl", '{"id": "r0", "verdicts": {"role_style": "yes"}}\n'),
        "scores.jsonl",
        "role_style",
    ),
    "verdict NaN": (
        lambda f: _replace(f, "scores.jsonl", '{"id": "r0", "verdicts": {"role_style": NaN}}\n'),
        "scores.jsonl",
        "finite",
    ),
    "verdicts a list": (
        lambda f: _replace(f, "scores.jsonl", '{"id": "r0", "verdicts": [1]}\n'),
        "scores.jsonl",
        "verdicts",
    ),
    "scores.jsonl not UTF-8": (lambda f: _replace(f, "scores.jsonl", b"\xff\n"), "scores.jsonl", "cannot be read"),
    "scores.jsonl a folder": (lambda f: _folder_for(f, "scores.jsonl"), "scores.jsonl", "cannot be read"),
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(BROKEN))
def test_a_malformed_run_folder_is_skipped_naming_its_file_and_the_board_is_still_written(tmp_path, shape, capsys):
    break_it, named, reason = BROKEN[shape]
    sweep = tmp_path / "sweep"
    write_run(sweep / "good_a", "a", "rolemrc", 0.8, [1, 1, 0, 1], judge="openai:gpt-4o")
    write_run(sweep / "good_b", "b", "rolemrc", 0.6, [1, 0, 0, 1], judge="openai:gpt-4o")
    write_run(sweep / "broken", "broken", "rolemrc", 0.9, [1, 1, 1, 1], judge="openai:gpt-4o")
    break_it(sweep / "broken")
    board = build([sweep])
    assert board.rows == ["a", "b"] and board.rank == {("a", "rolemrc"): 1, ("b", "rolemrc"): 2}
    [(run, why)] = board.skipped
    assert run.endswith("broken") and f"broken/{named}" in why and reason in why
    out = tmp_path / "board"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert f"skipped {run}: {why}" in capsys.readouterr().err
    assert "## Runs without a cell" in (out / "leaderboard.md").read_text()


def test_a_nan_seed_is_never_the_median_or_ranked(tmp_path):
    for seed, value in enumerate([0.9, float("nan"), 0.7]):
        write_run(tmp_path / f"{seed}_big", "big", "rolebench", value, [0.5, 0.6])
    write_run(tmp_path / "small", "small", "rolebench", 0.8, [0.5, 0.6])
    board = build([tmp_path])
    big = board.cells["big", "rolebench"]
    assert (big.value, big.seeds) == (0.7, 2)  # the lower of the two finite seeds
    assert board.rank == {("small", "rolebench"): 1, ("big", "rolebench"): 2}
    [(run, why)] = board.skipped
    assert run.endswith("1_big") and "eval.metrics.overall.rougeL.mean (the ROUGE-L headline) is nan" in why


def test_out_a_file_is_an_error_naming_it(tmp_path, capsys):
    write_run(tmp_path / "run", "a", "rolebench", 0.5, [0.5])
    (tmp_path / "taken").write_text("")
    assert main([str(tmp_path / "run"), "--out", str(tmp_path / "taken")]) == 1
    assert f"--out {tmp_path / 'taken'}: a file" in capsys.readouterr().err


def test_model_names_cannot_inject_markdown_rows_or_spreadsheet_formulas(tmp_path):
    evil = "evil | 1.0 |\n| injected | row"
    write_run(tmp_path / "one", evil, "rolebench", 0.5, [0.5, 0.4])
    write_run(tmp_path / "two", '=HYPERLINK("http://x")', "rolebench", 0.4, [0.3, 0.4])
    out = tmp_path / "board"
    assert main([str(tmp_path / "one"), str(tmp_path / "two"), "--out", str(out)]) == 0
    lines = (out / "leaderboard.md").read_text().splitlines()
    assert not any(line.startswith("| injected") for line in lines)
    row = next(line for line in lines if line.startswith("| evil"))
    assert row.startswith("| evil \\| 1.0 \\| \\| injected \\| row | 1.00 (1-1, 1) |")
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert {r["row"] for r in rows} == {evil, '\'=HYPERLINK("http://x")'}


def test_a_run_that_rests_on_nothing_is_never_ranked(tmp_path):
    """A run marked failed (every judge request failed; its accuracy a number all the same) is skipped with
    why; the run beside it is ranked alone."""
    write_run(tmp_path / "ok", "big", "rolemrc", 0.8, [1, 1, 0, 1], judge="openai:gpt-4o")
    write_run(tmp_path / "dead", "small", "rolemrc", 0.0, [0, 0, 0, 0], judge="openai:gpt-4o")
    dead = json.loads((tmp_path / "dead" / "metrics.json").read_text())
    dead["failed"] = "evaluator=rolemrc: every request of judge (4 of 4) failed: the results rest on nothing"
    (tmp_path / "dead" / "metrics.json").write_text(json.dumps(dead))
    board = build([tmp_path])
    assert list(board.cells) == [("big", "rolemrc")] and board.rank == {("big", "rolemrc"): 1}
    assert [why for _, why in board.skipped] == [f"failed: {dead['failed']}"]


def make_short(folder, how):
    """Mark a run short as a real run records it: ``debug=<preset>`` in Hydra's .hydra/hydra.yaml, or
    ``trainer.fast_dev_run`` in its config.yaml."""
    if how == "trainer.fast_dev_run":
        config = yaml.safe_load((folder / "config.yaml").read_text())
        (folder / "config.yaml").write_text(yaml.safe_dump({**config, "trainer": {"fast_dev_run": True}}))
        return
    (folder / ".hydra").mkdir()
    choices = {"debug": how.removeprefix("debug="), "model": "tiny-qwen2", "objective": "sft", "experiment": None}
    (folder / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))


CUSTOM = "c" * 64
SHORT_TEST = "5" * 64  # debug presets cut the test split to 8 records: another sha256


def mixed_outputs(root):
    """The folder of issue 39: two seeds of the full default run, a custom-data run, another model's full run,
    two debug=short runs, a fast_dev_run, a 3-step GRPO run (debug=short) that scored best, and a failed run."""
    rng = np.random.default_rng(1)
    scores = lambda mean: rng.uniform(mean - 0.1, mean + 0.1, 20).round(3).tolist()  # noqa: E731
    sft = {"objective": "sft"}
    write_run(root / "sft-qwen" / "full_1", "tiny-qwen2", "rolebench", 0.36, scores(0.36), seed=1, **sft)
    write_run(root / "sft-qwen" / "full_2", "tiny-qwen2", "rolebench", 0.34, scores(0.34), seed=2, **sft)
    write_run(root / "sft-qwen-custom" / "full", "tiny-qwen2", "rolebench", 0.25, scores(0.25), data=CUSTOM,
              data_name="custom", **sft)  # fmt: skip
    write_run(root / "sft-llama" / "full", "tiny-llama", "rolebench", 0.30, scores(0.30), **sft)
    for name, how, value in [
        ("short_1", "debug=short", 0.05),
        ("short_2", "debug=short", 0.06),
        ("fast", "trainer.fast_dev_run", 0.0),
    ]:
        write_run(root / "sft-qwen" / name, "tiny-qwen2", "rolebench", value, scores(0.1), data=SHORT_TEST, **sft)
        make_short(root / "sft-qwen" / name, how)
    grpo = root / "grpo-qwen" / "short"
    write_run(grpo, "tiny-qwen2", "rolebench", 0.9, scores(0.8), objective="grpo")
    make_short(grpo, "debug=short")
    write_run(root / "sft-qwen" / "failed", "tiny-qwen2", "rolebench", 0.0, scores(0.1), **sft)
    dead = json.loads((root / "sft-qwen" / "failed" / "metrics.json").read_text())
    dead["failed"] = "evaluator=rolebench: the headline has no value"
    (root / "sft-qwen" / "failed" / "metrics.json").write_text(json.dumps(dead))


def test_short_runs_are_left_out_counted_and_listed_and_a_conflict_says_which_runs_differ_and_how_to_split(
    tmp_path, capsys
):
    mixed_outputs(tmp_path / "outputs")
    board = build([tmp_path / "outputs"])
    assert sorted(run.split("outputs/")[1] for run, _ in board.short) == [
        "grpo-qwen/short",
        "sft-qwen/fast",
        "sft-qwen/short_1",
        "sft-qwen/short_2",
    ]
    assert sorted(why for _, why in board.short) == ["debug=short"] * 3 + ["trainer.fast_dev_run=True"]
    assert [run.split("outputs/")[1] for run, _ in board.skipped] == ["sft-qwen/failed"]
    # the full runs of tiny-qwen2 + sft are on two test sets: a conflict naming each run and --by data
    qwen = board.cells["tiny-qwen2 + sft", "rolebench"]
    message = str(qwen.conflict)
    aaa, ccc = message.index("test sha256 " + "a" * 16), message.index("test sha256 " + "c" * 16)
    assert message.startswith("3 runs differ in data: ") and message.endswith("--by data gives each its own row")
    assert message.index("sft-qwen/full_1") > aaa and message.index("sft-qwen/full_2") > aaa
    assert message.index("sft-qwen/full_2") < ccc < message.index("sft-qwen-custom/full")
    assert board.rows == ["tiny-llama + sft", "tiny-qwen2 + sft"] and board.rank == {
        ("tiny-llama + sft", "rolebench"): 1
    }

    out = tmp_path / "board"
    assert main([str(tmp_path / "outputs"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "leaderboard: left out 4 short runs (--with-short shows them, unranked): " in err
    assert "sft-qwen/short_1 (debug=short)" in err and "sft-qwen/fast (trainer.fast_dev_run=True)" in err
    assert f"leaderboard: conflict in tiny-qwen2 + sft, rolebench: {message}" in err
    text = (out / "leaderboard.md").read_text()
    assert "## Short runs left out (4; --with-short shows them, unranked)" in text
    assert f"- tiny-qwen2 + sft, rolebench: {message}" in text
    # what produced the conflict: each run with its own test data
    produced = [line for line in text.splitlines() if line.startswith("| tiny-qwen2 + sft | rolebench |")]
    assert len(produced) == 3 and all("conflict: not combined" in line for line in produced)
    assert sorted(line.split(" | ")[6] for line in produced) == ["a" * 16, "a" * 16, "c" * 16]
    assert next(line for line in produced if "custom" in line).split(" | ")[6] == "c" * 16


def test_by_run_gives_every_full_run_its_own_row(tmp_path):
    mixed_outputs(tmp_path / "outputs")
    board = build([tmp_path / "outputs"], Rows(by="run"))
    full = ["sft-llama/full", "sft-qwen-custom/full", "sft-qwen/full_1", "sft-qwen/full_2"]
    assert sorted(row.split("outputs/")[1] for row in board.rows) == full
    assert all(board.cells[row, "rolebench"].seeds == 1 for row in board.rows)
    # the custom-data run is on other test data than most of the column: shown, flagged, not ranked
    custom = next(row for row in board.rows if "custom" in row)
    assert board.cells[custom, "rolebench"].flag == "data differ from the column's: not ranked"
    ranked = {row.split("outputs/")[1]: r for (row, _), r in board.rank.items()}
    assert ranked == {"sft-qwen/full_1": 1, "sft-qwen/full_2": 2, "sft-llama/full": 3}
    assert len(board.short) == 4


def test_by_data_and_by_seed_split_rows_by_what_the_runs_record(tmp_path):
    mixed_outputs(tmp_path / "outputs")
    by_data = build([tmp_path / "outputs"], Rows(by="data"))
    assert by_data.rows == [
        "tiny-qwen2 + sft · data sample (test aaaaaaaa)",
        "tiny-llama + sft · data sample (test aaaaaaaa)",
        "tiny-qwen2 + sft · data custom (test cccccccc)",
    ]
    assert by_data.cells[by_data.rows[0], "rolebench"].seeds == 2  # the two seeds: their median
    assert by_data.cells[by_data.rows[2], "rolebench"].flag == "data differ from the column's: not ranked"
    by_seed = build([tmp_path / "outputs"], Rows(by="seed"))
    assert sorted(by_seed.rows) == ["tiny-llama + sft · seed 42", *(f"tiny-qwen2 + sft · seed {s}" for s in (1, 2, 42))]
    assert all(c.seeds == 1 and c.conflict is None for c in by_seed.cells.values())


def test_with_short_shows_short_runs_in_rows_of_their_own_never_ranked(tmp_path, capsys):
    mixed_outputs(tmp_path / "outputs")
    board = build([tmp_path / "outputs"], Rows(by="data", with_short=True))
    assert board.short == []
    grpo = "tiny-qwen2 + grpo · data sample (test aaaaaaaa) [short: debug=short]"
    cell = board.cells[grpo, "rolebench"]
    assert (cell.value, cell.flag) == (0.9, "short run (debug=short): not ranked")
    assert (grpo, "rolebench") not in board.rank and board.overall[grpo]["mean_rank"] is None
    # the best score is a short run's: it is listed after every ranked row, whatever its value
    ranked_rows = [row for row in board.rows if board.overall[row]["mean_rank"] is not None]
    assert board.rows[: len(ranked_rows)] == ranked_rows and grpo in board.rows[len(ranked_rows) :]
    short_qwen = "tiny-qwen2 + sft · data sample (test 55555555) [short: debug=short]"
    assert board.cells[short_qwen, "rolebench"].seeds == 2
    # the short runs do not set the column's identity: the full runs are ranked as without them
    assert board.rank["tiny-qwen2 + sft · data sample (test aaaaaaaa)", "rolebench"] == 1
    out = tmp_path / "board"
    assert main([str(tmp_path / "outputs"), "--with-short", "--out", str(out)]) == 0
    assert "left out" not in capsys.readouterr().err
    assert "0.9000 [0.8000, 1.0000] ⚠ short run (debug=short): not ranked" in (out / "leaderboard.md").read_text()


def test_a_folder_of_short_runs_only_has_no_board_and_says_so(tmp_path, capsys):
    write_run(tmp_path / "short", "tiny-qwen2", "rolebench", 0.1, [0.1, 0.2])
    make_short(tmp_path / "short", "debug=short")
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "left out 1 short runs" in err and "error: no full run with a benchmark headline" in err
    assert main([str(tmp_path), "--with-short", "--out", str(tmp_path / "board")]) == 0


def test_the_short_run_metrics_json_records_is_read_before_the_hydra_record(tmp_path):
    """A run since metrics.json says why it is short (``short_run``) needs no Hydra record; a run written
    before it is read from its .hydra/ as before."""
    for name, marked in (("marked", "debug=short"), ("full", None), ("old", "no key")):
        write_run(tmp_path / name, "tiny-qwen2", "rolebench", 0.5, [0.4, 0.6])
        results = json.loads((tmp_path / name / "metrics.json").read_text())
        if marked != "no key":
            (tmp_path / name / "metrics.json").write_text(json.dumps({**results, "short_run": marked}))
    make_short(tmp_path / "old", "debug=fast_dev_run")
    assert sorted((run.rsplit("/", 1)[1], why) for run, why in build([tmp_path]).short) == [
        ("marked", "debug=short"),
        ("old", "debug=fast_dev_run"),
    ]
    full = json.loads((tmp_path / "full" / "metrics.json").read_text())
    (tmp_path / "full" / "metrics.json").write_text(json.dumps({**full, "short_run": 3}))
    [(run, why)] = build([tmp_path]).skipped
    assert why.endswith("full/metrics.json: short_run: why the run is short or null, got 3")


def test_an_unreadable_hydra_record_is_named(tmp_path):
    write_run(tmp_path / "run", "a", "rolebench", 0.5, [0.5])
    (tmp_path / "run" / ".hydra").mkdir()
    (tmp_path / "run" / ".hydra" / "hydra.yaml").write_text("hydra: [unclosed")
    [(run, why)] = build([tmp_path]).skipped
    assert "run/.hydra/hydra.yaml: cannot be read as YAML" in why


def test_the_png_shows_each_benchmark_headline_with_its_ci_and_whole_row_names(tmp_path):
    mixed_outputs(tmp_path / "outputs")
    write_run(tmp_path / "outputs" / "judged", "tiny-llama", "rolemrc", 0.7, [1, 0, 1, 1], judge="openai:gpt-4o",
              objective="sft")  # fmt: skip
    board = build([tmp_path / "outputs"], Rows(by="run", with_short=True))
    fig = figure(board)
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert sorted(panels) == ["rolebench", "rolemrc"]
    assert panels["rolebench"].get_xlabel() == "ROUGE-L (95% CI; higher is better)"
    assert panels["rolemrc"].get_xlabel() == "judge accuracy (95% CI; higher is better)"
    labels = [t.get_text() for t in panels["rolebench"].get_yticklabels()]
    unwrapped = [label.replace("\n", "").replace(" ", "") for label in labels]
    assert unwrapped == [row.replace(" ", "") for row in board.rows]  # whole names, wrapped on lines
    assert max(len(line) for label in labels for line in label.splitlines()) <= 36
    # each ranked cell: its dot and a line from CI bound to bound
    full_1 = next(row for row in board.rows if row.endswith("full_1"))
    cell = board.cells[full_1, "rolebench"]
    drawn = [line.get_xdata().tolist() for line in panels["rolebench"].get_lines()]
    assert [cell.ci_low, cell.ci_high] in drawn and [cell.value] in drawn
    notes = [t.get_text() for t in panels["rolemrc"].texts]
    assert notes.count("missing") == len(board.rows) - 1
    assert "rows by run" in fig.get_suptitle()
    main([str(tmp_path / "outputs"), "--by", "run", "--out", str(tmp_path / "board")])
    with Image.open(tmp_path / "board" / "leaderboard.png") as image:
        assert image.size[0] > 2 * 3.4 * 120  # a panel per benchmark beside the row names


def with_provenance(folder, prompts, temperature, base_url=None):
    """Record in ``folder``'s run the judge prompts' sha256 (metrics.json ``eval.prompts``, as the judged
    benchmarks write it), the evaluated model's decoding (config.yaml ``evaluator.generation``) and the judge's
    endpoint."""
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["eval"]["prompts"] = {name: {"origin": "rpbench", "sha256": sha} for name, sha in prompts.items()}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    config = yaml.safe_load((folder / "config.yaml").read_text())
    generation = {"temperature": temperature, "top_p": 1.0, "max_new_tokens": 16, "batch_size": 4, "progress": False}
    config["evaluator"] = {"generation": generation}
    config["judge"]["base_url"] = base_url
    (folder / "config.yaml").write_text(yaml.safe_dump(config))


def test_cells_of_other_prompts_decoding_or_judge_endpoint_are_never_ranked_together_and_footnoted(tmp_path):
    judged = {"judge": "openai:gpt-4o"}
    prompts, edited = {"role_style": "1" * 64}, {"role_style": "2" * 64}
    for name, model, value, used, temperature, url in [
        ("big_1", "big", 0.8, prompts, 0.0, None),
        ("big_2", "big", 0.7, edited, 0.0, None),  # the same row, another prompt: a conflict
        ("mid", "mid", 0.9, prompts, 0.7, None),  # sampled: flagged against its column
        ("small", "small", 0.6, prompts, 0.0, None),
        ("tiny", "tiny", 0.95, prompts, 0.0, "http://127.0.0.1:1/v1"),  # the judge at another endpoint
    ]:
        write_run(tmp_path / name, model, "rolemrc", value, [1, 0, 1, 1], **judged)
        with_provenance(tmp_path / name, used, temperature, url)
    board = build([tmp_path])
    big = board.cells["big", "rolemrc"]
    assert big.value is None and list(big.conflict.differ) == ["prompts"]
    assert board.cells["mid", "rolemrc"].flag == "decoding differ from the column's: not ranked"
    assert board.cells["tiny", "rolemrc"].flag == "judge differ from the column's: not ranked"
    assert board.cells["tiny", "rolemrc"].identity.judge == "openai:gpt-4o at http://127.0.0.1:1/v1"
    assert board.rank == {("small", "rolemrc"): 1}
    # batch size and progress bar say how generation runs, not what it writes: not part of the decoding
    assert board.cells["small", "rolemrc"].provenance.decoding == "max_new_tokens=16, temperature=0.0, top_p=1.0"

    out = tmp_path / "board"
    assert main([str(tmp_path), "--out", str(out), "--by", "run"]) == 0
    text = (out / "leaderboard.md").read_text()
    notes = text.split("## Provenance")[1]
    assert "| openai:gpt-4o | role_style 111111111111 | max_new_tokens=16, temperature=0.0, top_p=1.0 |" in notes
    assert "| openai:gpt-4o | role_style 222222222222 | max_new_tokens=16, temperature=0.0, top_p=1.0 |" in notes
    assert "| openai:gpt-4o | role_style 111111111111 | max_new_tokens=16, temperature=0.7, top_p=1.0 |" in notes
    assert notes.count("| P") == 4  # big_1 and small share one provenance
    rows = {r["runs"].rsplit("/", 1)[-1]: r for r in csv.DictReader((out / "leaderboard.csv").open())}
    assert rows["big_1"]["prompts_sha256"] == rows["small"]["prompts_sha256"] != rows["big_2"]["prompts_sha256"]
    assert rows["big_1"]["decoding_sha256"] == rows["big_2"]["decoding_sha256"] != rows["mid"]["decoding_sha256"]
    # a row per run: big_1 and small are alike and ranked; big_2 (its prompt), mid and tiny are not
    assert {name: row["rank"] for name, row in rows.items()} == {
        "big_1": "1.0",
        "small": "2.0",
        **dict.fromkeys(("big_2", "mid", "tiny"), ""),
    }
    produced = next(line for line in text.splitlines() if "small | rolemrc |" in line and "| shown |" in line)
    key = produced.rstrip(" |").rsplit("| ", 1)[-1]
    ranked = next(line for line in text.splitlines() if line.startswith("| ") and "small | 2.00 (2-2, 1) |" in line)
    assert ranked.endswith(f"0.6000 [0.2500, 1.0000] [{key}] |") and key.startswith("P")


def test_a_judge_snapshot_and_a_scoring_reward_model_are_part_of_the_judge(tmp_path):
    """A served judge's revision and the reward model that scores a run (its folder's name) tell judges apart:
    runs of one model under two of them are a conflict on judge."""
    for name, served, reward_model in [
        ("a", {"name": "judge-7b", "revision": "r1"}, "/models/CharacterRM"),
        ("b", {"name": "judge-7b", "revision": "r2"}, "/models/CharacterRM"),
        ("c", {"name": "judge-7b", "revision": "r1"}, "/elsewhere/OtherRM"),
    ]:
        write_run(tmp_path / name, "big", "rolemrc", 0.5, [1, 0], judge="local:judge-7b")
        config = yaml.safe_load((tmp_path / name / "config.yaml").read_text())
        config["judge"]["server"] = {"model": served}
        config["evaluator"] = {"reward_model": {"path": reward_model}}
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(config))
    differ = build([tmp_path]).cells["big", "rolemrc"].conflict.differ
    assert list(differ) == ["judge"]
    assert {judge: [run.rsplit("/", 1)[-1] for run in runs] for judge, runs in differ["judge"].items()} == {
        "local:judge-7b@r1+reward_model:CharacterRM": ["a"],
        "local:judge-7b@r2+reward_model:CharacterRM": ["b"],
        "local:judge-7b@r1+reward_model:OtherRM": ["c"],
    }
