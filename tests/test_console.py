"""What a run's terminal and folder show: progress and results, not library chatter; the expected PNGs."""

from __future__ import annotations

import json
import logging

import pytest
from PIL import Image

from rpbench.eval.report import CHART_DPI, CHART_FILE, chart_bars, chart_size
from rpbench.scoring.judge.rolemrc_rubrics import DIMENSIONS
from rpbench.training.progress import CURVE_DPI, CURVE_FILE, CURVE_SIZE_INCHES

NOISE = [
    "💡 Tip",  # litlogger / litmodels advertisements
    "LeafSpec",  # Lightning's use of a deprecated torch API
    "Setting accelerator to CPU",  # DeepSpeed's import-time guess
    "module(s) in eval mode",
    "Previous log files",  # the CSV logger on our run folder
    "Total FLOPs",  # Lightning's model summary table
    "FLOPs",
    "HTTP/1.1",  # one httpx line per judge request
]


def pixels(size_inches: tuple[float, float], dpi: int) -> tuple[int, int]:
    return round(size_inches[0] * dpi), round(size_inches[1] * dpi)


@pytest.mark.slow
def test_a_short_default_run_shows_progress_and_results_and_no_library_noise(tmp_path, run_script):
    out = tmp_path / "run"
    result = run_script(
        "run.py",
        f"hydra.run.dir={out}",
        "trainer.max_steps=4",
        "objective.log_every_n_steps=2",
        "data.max_test_samples=8",
        "evaluator.generation.max_new_tokens=8",
        "evaluator.metrics=[bleu,rougeL,meteor]",
        "judge=local",
    )
    # the tiny random judge answers no rubric's format: the run is written, marked failed, and exits 1 saying why
    assert result.returncode == 1, result.stderr[-3000:]
    assert "the results rest on nothing" in result.stderr and "Traceback" not in result.stderr
    console = result.stdout + result.stderr
    log = (out / "run.log").read_text()
    for noise in NOISE:
        assert noise not in console, noise
        assert noise not in log, noise
    # Lightning's INFO lines once (through the run's handler), not a second time as "INFO: ..." on stderr
    assert console.count("GPU available:") == 1 and "INFO: " not in result.stderr
    # progress: the rich bar, and a line per log_every_n_steps optimizer steps with the ETA
    assert "Epoch 0/" in console
    for step in (2, 4):
        assert f"step {step}/4  loss " in result.stdout and f"step {step}/4  loss " in log
    assert "ETA 0:00:00" in log  # at the last step nothing is left
    metrics = json.loads((out / "metrics.json").read_text())
    held_out = metrics["train"]["held_out"]
    # results: held-out loss and the test metrics, as metrics.json has them
    assert f"held-out loss {held_out['before']['loss']:.4f} -> {held_out['after']['loss']:.4f}" in result.stdout
    assert f"rougeL {metrics['eval']['metrics']['overall']['rougeL']['mean']:.4f}" in result.stdout
    # the PNGs docs/outputs.md lists, decodable and of the size they are drawn at
    assert metrics["train"]["loss_curve"] == CURVE_FILE
    with Image.open(out / CURVE_FILE) as image:
        image.verify()
    with Image.open(out / CURVE_FILE) as image:
        assert image.format == "PNG" and image.size == pixels(CURVE_SIZE_INCHES, CURVE_DPI)
    bars, _ = chart_bars(metrics["eval"], "rougeL")  # a bar per dimension of the 8 records
    assert set(bars) == {DIMENSIONS[d] for d in metrics["eval"]["metrics"]["dimension"]}
    with Image.open(out / CHART_FILE) as image:
        assert image.format == "PNG" and image.size == pixels(chart_size(len(bars)), CHART_DPI)
    # the tiny random judge answers no rubric's format: its parse failures are reported, not silent
    judge = metrics["eval"]["judge"]
    rate = judge["overall"]["parse_failures"] / judge["overall"]["n"]
    assert rate > 0.2
    warning = metrics["eval"]["judge_warning"]
    assert "could not be parsed" in warning and "could not be parsed" in log
    assert warning in (out / "report.md").read_text()


@pytest.mark.gpu
def test_training_lines_on_cuda_show_the_peak_gpu_memory(tmp_path, run_script):
    import re

    out = tmp_path / "run"
    result = run_script(
        "run.py",
        f"hydra.run.dir={out}",
        "trainer=gpu",
        "trainer.devices=1",
        "trainer.max_steps=2",
        "objective.log_every_n_steps=1",
        "evaluator=none",
        "logger=none",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    peaks = re.findall(r"step \d/2 .* ETA \S+  peak GPU memory ([\d,]+) MiB", (out / "run.log").read_text())
    assert len(peaks) == 2 and all(int(p.replace(",", "")) > 0 for p in peaks)


def test_a_judge_without_a_single_verdict_prints_no_accuracy():
    from rpbench.run_report import headline

    tally = {"n": 8, "judged": 0, "parse_failures": 8, "request_failures": 0, "accuracy": 0.0}
    lines = headline({"evaluator": "rolemrc", "eval": {"judge": {"overall": tally}}})
    assert "judge accuracy none (0 of 8 judged; 8 unparsed, 0 unanswered)" in lines
    tally = {**tally, "judged": 4, "parse_failures": 4, "accuracy": 0.25}
    lines = headline({"evaluator": "rolemrc", "eval": {"judge": {"overall": tally}}})
    assert any(line.startswith("judge accuracy 25.00% (4 of 8") for line in lines)


def test_a_library_warning_is_one_logged_line_without_its_file_path(tmp_path, caplog, capfd):
    """Lightning's own warning from a real fit (fewer batches than the logging interval): a line under the
    emitting module's name, not Lightning's `<site-packages path>:<line>: <message>` on stderr."""
    import warnings

    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel
    from lightning.pytorch.loggers import CSVLogger

    from rpbench.core.quiet import quiet_libraries

    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        quiet_libraries()
        trainer = Trainer(
            max_steps=1,
            limit_train_batches=2,
            limit_val_batches=0,
            log_every_n_steps=50,
            logger=CSVLogger(tmp_path),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(BoringModel())
    [record] = [r for r in caplog.records if "smaller than the logging interval" in r.getMessage()]
    assert record.name == "lightning.pytorch.loops.fit_loop" and record.levelno == logging.WARNING
    assert record.getMessage().startswith("The number of training batches (2) is smaller")
    assert "site-packages" not in capfd.readouterr().err


def test_the_bertscore_fallback_is_one_info_line_and_a_note_in_the_results(tmp_path, caplog):
    """The default config chooses the fallback (evaluator.bertscore.fallback=true): the log says so once at
    INFO, no warning; what the values are is written where the results are read (metrics.json, report.md)."""
    from rpbench.eval.report import sections
    from rpbench.scoring.metrics import load_bertscorer

    load_bertscorer.cache_clear()
    with caplog.at_level(logging.INFO, logger="rpbench.scoring.metrics"):
        for _ in range(2):  # a run scores several splits: one line
            described = load_bertscorer("rpbench-test/not-a-cached-model").describe()
    [line] = [r for r in caplog.records if r.name == "rpbench.scoring.metrics"]
    assert line.levelno == logging.INFO and "not comparable with the paper's roberta-large" in line.getMessage()
    assert described["note"].startswith(
        "BERTScore was computed with sentence-transformers/all-MiniLM-L6-v2 (layer 6) because "
        "'rpbench-test/not-a-cached-model' is not in the local Hugging Face cache: its values are not comparable"
    )
    results = {
        "metrics": {"overall": {"bertscore": {"mean": 0.5, "std": 0.1, "n": 2, "ci_low": 0.4, "ci_high": 0.6}}},
        "generation": {"n_generated": 2, "n_resumed": 0},
        "n_records": 2,
        "bertscore_backbone": described,
    }
    assert f"**Note:** {described['note']}." in sections(results, "bertscore", tmp_path, "run", [])


def test_asking_for_a_bertscore_backbone_that_is_not_here_stops_at_startup(compose, refused_at_startup):
    """evaluator.bertscore.fallback=false asks for the configured backbone itself: without it the run stops before
    anything loads (it used to generate every reply, then fail with an OSError's traceback)."""
    message = refused_at_startup(
        compose, "evaluator.bertscore.model=rpbench-test/not-a-cached-model", "evaluator.bertscore.fallback=false"
    )
    assert "evaluator.bertscore.model='rpbench-test/not-a-cached-model': expected with bertscore.fallback=false" in (
        message
    )
    assert "hf download rpbench-test/not-a-cached-model" in message
