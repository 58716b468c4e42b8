"""`python -m rpbench.leaderboard`: run folders (metrics.json, config.yaml, scores.jsonl as runs write them)
-> leaderboard.md/.csv/.png, ranks, seeds, flags, conflicts, missing cells and paired tests."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml

from rpbench.leaderboard import build, main
from rpbench.leaderboard.board import ranks

DATA = "a" * 64


def write_run(folder, model, evaluator, value, per_record, *, judge="none", data=DATA, version="0.1.0", ci=True):
    """A run folder as the pipeline leaves it, with a RoleMRC-style judge headline or a ROUGE-L one."""
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
        "objective": "none",
        "evaluator": evaluator,
        "rpbench_version": version,
        "records": {"test": {"read": len(per_record), "records_sha256": data}},
        "eval": evaluation,
    }
    (folder / "metrics.json").write_text(json.dumps(results))
    backend, _, name = judge.partition(":")
    (folder / "config.yaml").write_text(yaml.safe_dump({"judge": {"backend": backend, "model": name or None}}))
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
    assert "| small | rolebench | ROUGE-L | none | aaaaaaaaaaaaaaaa | 0.0.9 |" in text
    assert "0.2000 [0.1000, 0.3000] (rpbench 0.0.9)" in text
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert len(rows) == 9 and {r["flag"] for r in rows if r["benchmark"] == "mmrole" and r["model"] != "big"} == {
        "missing"
    }
    big_rolemrc = next(r for r in rows if (r["model"], r["benchmark"]) == ("big", "rolemrc"))
    assert (big_rolemrc["judge_requests"], big_rolemrc["judge_tokens"], big_rolemrc["judge_cost_usd"]) == (
        "4",
        "12",
        "0.5",
    )
    assert (out / "leaderboard.png").stat().st_size > 0


def test_command_line_names_a_folder_without_runs_and_a_broken_metrics_file(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert f"no run with a benchmark headline under {tmp_path}" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.json").write_text('{"model": ')
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err  # the broken run is listed as skipped, naming its file
    assert "run/metrics.json: not JSON" in err and "error: no run with a benchmark headline" in err


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
    assert {r["model"] for r in rows} == {evil, '\'=HYPERLINK("http://x")'}


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
