"""Progress where stderr is no terminal (a log file, a pipe, pytest's capture): plain logged lines naming what is
done, never tqdm's carriage returns."""

from __future__ import annotations

import logging

import pytest

from rpbench.core import progress_bar as progress
from rpbench.data.records import EvalExample, Turn
from rpbench.eval.generate import generate_predictions


@pytest.mark.slow
def test_generation_off_a_terminal_logs_a_plain_line_naming_what_it_generated(
    tmp_path, tiny_settings, generation_options, caplog, capfd
):
    from rpbench.models import load

    model, tokenizer = load(tiny_settings())
    examples = [
        EvalExample(id=f"r{i}", prompt=(Turn("user", f"Hello, traveller {i}."),), reference="Hi.", task="t")
        for i in range(3)
    ]
    options = generation_options(max_new_tokens=4, progress=True)
    with caplog.at_level(logging.INFO, logger="rpbench.core.progress_bar"):
        generate_predictions(model, tokenizer, examples, tmp_path / "p.jsonl", options, what="sample replies")
    assert "\r" not in capfd.readouterr().err  # no bar redrawn in place
    [line] = [r.getMessage() for r in caplog.records if r.name == "rpbench.core.progress_bar"]
    assert line.startswith("generate sample replies: 3/3 completions (100%), 0:00:0")


def test_a_long_loop_says_how_far_it_is_every_interval_then_once_at_the_end(monkeypatch, caplog):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # every update is past the interval
    with caplog.at_level(logging.INFO, logger="rpbench.core.progress_bar"):
        for _ in progress.progress_bar(range(4), desc="judge", unit="request"):
            pass
        with progress.progress_bar(desc="embed pool", unit="record") as bar:  # no total known
            bar.update(5)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(",")[0] for line in lines] == [
        "judge: 1/4 requests (25%)",
        "judge: 2/4 requests (50%)",
        "judge: 3/4 requests (75%)",
        "judge: 4/4 requests (100%)",
        "judge: 4/4 requests (100%)",  # closed
        "embed pool: 5 records",
        "embed pool: 5 records",
    ]
    assert "ETA" in lines[0] and "ETA" not in lines[3]  # nothing is left at the end
