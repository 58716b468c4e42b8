"""`python sweep.py`: multiruns through submitit, the Slurm job script, and the summary grouped over seeds."""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from rpbench.sweep_summary import flatten, summarize


def test_flatten_keeps_scalars_and_drops_lists():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": None}) == {"a/b": 1, "d": "x", "e": None}


def job_folder(sweep: Path, name: str, overrides: list[str], metrics: dict | None = None, error: str | None = None):
    """A job folder as a multirun leaves it: .hydra/overrides.yaml, then metrics.json or error.txt."""
    folder = sweep / name
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if metrics is not None:
        (folder / "metrics.json").write_text(json.dumps(metrics))
    if error is not None:
        (folder / "error.txt").write_text(error)


def partly_failed_sweep(sweep: Path) -> None:
    # objective=sft over seeds 1, 2, 3 (loss 1, 2, 4); objective=dpo: seed 1 finished, seed 2 raised,
    # seed 3 left nothing (killed). Every job shares data=sample, which names no group.
    for num, (objective, seed, loss) in enumerate([("sft", 1, 1.0), ("sft", 2, 2.0), ("sft", 3, 4.0), ("dpo", 1, 0.5)]):
        metrics = {"train": {"held_out": {"after": {"loss": loss}}, "samples": {"train": 10}}, "run_name": "x"}
        job_folder(sweep, f"{num}_job", [f"objective={objective}", "data=sample", f"seed={seed}"], metrics)
    job_folder(sweep, "4_job", ["objective=dpo", "data=sample", "seed=2"], error="ConfigError: init_from=x: no model")
    job_folder(sweep, "5_job", ["objective=dpo", "data=sample", "seed=3"])


def test_summary_groups_seeds_with_median_mean_std_min_max(tmp_path):
    partly_failed_sweep(tmp_path)
    summarize(tmp_path)
    rows = {(r["group"], r["metric"]): r for r in csv.DictReader((tmp_path / "summary.csv").open())}
    sft = rows[("objective=sft", "train/held_out/after/loss")]
    # by hand: median(1, 2, 4) = 2; mean 7/3; sample std sqrt(((1-7/3)^2 + (2-7/3)^2 + (4-7/3)^2) / 2) = sqrt(7/3)
    assert (sft["n"], sft["seeds"], sft["median"], sft["min"], sft["max"]) == ("3", "1 2 3", "2.0", "1.0", "4.0")
    assert sft["mean"] == "2.3333" and sft["std"] == "1.5275"
    dpo = rows[("objective=dpo", "train/held_out/after/loss")]
    assert (dpo["n"], dpo["median"], dpo["std"]) == ("1", "0.5", "")  # one finished run: no std
    markdown = (tmp_path / "summary.md").read_text()
    assert "| objective=sft | train/held_out/after/loss | 3 | 2.0 | 2.3333 | 1.5275 | 1.0 | 4.0 |" in markdown
    assert "train/samples/train" not in markdown  # equal in every run: left to the csv files
    assert "Overrides of every job: `data=sample`" in markdown


def test_collect_rebuilds_the_summary_of_a_partly_failed_sweep(tmp_path, run_script):
    partly_failed_sweep(tmp_path)
    result = run_script("sweep.py", "--collect", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"sweep summary: {tmp_path / 'summary.md'} (6 jobs, 2 failed)" in result.stdout
    markdown = (tmp_path / "summary.md").read_text()
    assert markdown.startswith("# Sweep summary: 6 jobs, 4 finished, 2 failed")
    assert "| 4_job | objective=dpo data=sample seed=2 | ConfigError: init_from=x: no model |" in markdown
    assert "| 5_job | objective=dpo data=sample seed=3 | no metrics.json and no error.txt" in markdown
    runs = list(csv.DictReader((tmp_path / "runs.csv").open()))
    assert [r["status"] for r in runs] == ["finished"] * 4 + ["failed"] * 2
    assert [r["seed"] for r in runs] == ["1", "2", "3", "1", "2", "3"]


def test_summary_of_evaluated_runs_writes_the_leaderboard(tmp_path):
    for num, (model, rouge) in enumerate([("small", 0.2), ("big", 0.4)]):
        evaluation = {"metrics": {"overall": {"rougeL": {"mean": rouge, "ci_low": rouge - 0.1, "ci_high": rouge}}}}
        metrics = {"model": model, "objective": "none", "evaluator": "rolebench", "eval": evaluation}
        job_folder(tmp_path, f"{num}_job", [f"model={model}", "evaluator=rolebench"], metrics)
    summarize(tmp_path)
    board = (tmp_path / "leaderboard.md").read_text()
    assert board.index("| big | 1.00 (1-1, 1) | 0.4000 [0.3000, 0.4000] [P1] |") < board.index("| small | 2.00")


def test_collect_on_a_folder_without_jobs_says_so(tmp_path, run_script):
    result = run_script("sweep.py", "--collect", str(tmp_path))
    assert result.returncode == 1 and "no job folders" in result.stderr


def test_cfg_hydra_prints_the_slurm_launcher_instead_of_crashing(run_script):
    result = run_script("sweep.py", "--cfg", "hydra", "hydra/launcher=slurm")
    assert result.returncode == 0, result.stderr[-3000:]
    launcher = yaml.safe_load(result.stdout)["hydra"]["launcher"]
    assert launcher["name"] == "rpbench_${sweep_name}" and launcher["nodes"] == "${trainer.num_nodes}"


def fake_cluster(bin_dir: Path) -> None:
    """srun and sbatch on PATH; sbatch keeps the job script it is given and refuses it."""
    bin_dir.mkdir()
    scripts = {"srun": "exit 1", "sbatch": 'cp "$1" "$SBATCH_COPY"\necho "sbatch: no cluster here" >&2\nexit 1'}
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(stat.S_IRWXU)


@pytest.mark.slow
def test_slurm_job_script_takes_nodes_tasks_and_gpus_from_the_trainer(tmp_path, run_script):
    fake_cluster(tmp_path / "bin")
    script = tmp_path / "job.sh"
    result = run_script(
        "sweep.py",
        "hydra/launcher=slurm",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "sweep_name=sft-seeds",
        "trainer=gpu",
        "trainer.devices=4",
        "trainer.num_nodes=2",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=lab",
        "hydra.launcher.qos=high",
        "seed=1,2,3",
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        SBATCH_COPY=str(script),
    )
    assert result.returncode == 1 and "sbatch: no cluster here" in result.stderr  # submitted, then refused
    lines = {line for line in script.read_text().splitlines() if line.startswith("#SBATCH")}
    expected = {
        "--job-name=rpbench_sft-seeds",
        "--partition=gpu",
        "--account=lab",
        "--qos=high",
        "--nodes=2",
        "--ntasks-per-node=4",  # one task per device: SLURM_NTASKS = nodes x devices, as Lightning requires
        "--gpus-per-node=4",
        "--array=0-2%3",  # one job per seed
        "--signal=USR2@120",  # submitit's preemption signal, then requeue
        "--requeue",
    }
    assert {f"#SBATCH {flag}" for flag in expected} <= lines, lines


def test_slurm_launcher_refuses_devices_it_cannot_count(tmp_path, run_script):
    fake_cluster(tmp_path / "bin")
    result = run_script(
        "sweep.py",
        "hydra/launcher=slurm",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "trainer=ddp",  # devices: -1 (all visible), unknown before the job runs
        "seed=1,2",
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        SBATCH_COPY=str(tmp_path / "job.sh"),
    )
    assert result.returncode == 1 and "trainer.devices=-1: under Slurm give the number of GPUs" in result.stderr
    assert not (tmp_path / "job.sh").exists()  # nothing submitted


@pytest.mark.slow
def test_submitit_local_sweep_runs_each_seed_in_its_own_process_and_one_wandb_group(tmp_path, run_script, run_records):
    sweep = tmp_path / "sweep"
    result = run_script(
        "sweep.py",
        "hydra/launcher=submitit_local",
        f"hydra.sweep.dir={sweep}",
        "sweep_name=seeds",
        "evaluator=none",
        "trainer.enable_progress_bar=false",
        "data.max_train_samples=16",
        "trainer.max_steps=2",
        "save_model=false",
        "logger=wandb",
        "seed=1,2",
        WANDB_MODE="offline",
        OMP_NUM_THREADS="1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"sweep summary: {sweep / 'summary.md'} (2 jobs, 0 failed)" in result.stdout
    jobs = sorted(p.parent for p in sweep.glob("*/metrics.json"))
    assert len(jobs) == 2 and len(list((sweep / ".submitit").glob("*/*_0_log.out"))) == 2  # two submitit jobs
    loss = [json.loads((job / "metrics.json").read_text())["train"]["held_out"]["after"]["loss"] for job in jobs]
    rows = {r["metric"]: r for r in csv.DictReader((sweep / "summary.csv").open())}
    after = rows["train/held_out/after/loss"]
    assert (after["group"], after["n"], after["seeds"]) == ("(all)", "2", "1 2")
    assert float(after["median"]) == pytest.approx(sum(loss) / 2, abs=1e-4)
    for job in jobs:
        (run,) = run_records(job / "wandb")
        assert (run["group"], run["job_type"], run["exit_code"]) == ("seeds", "train", 0)
        assert run["id"] == (job / "wandb_run_id.txt").read_text().strip()


@pytest.mark.slow
def test_a_failed_job_is_listed_and_the_others_are_summarised(tmp_path, run_script):
    sweep = tmp_path / "sweep"
    result = run_script(
        "sweep.py",
        f"hydra.sweep.dir={sweep}",
        "objective=none",
        "data.max_test_samples=2",
        "evaluator.generation.max_new_tokens=2",
        "evaluator.metrics=[bleu]",
        "data.files.test=pkg://rpbench/resources/sample/rolemrc/test.jsonl,missing.jsonl",
        OMP_NUM_THREADS="1",
    )
    assert result.returncode == 1  # the sweep reports its failure
    assert f"sweep summary: {sweep / 'summary.md'} (2 jobs, 1 failed)" in result.stdout
    runs = {r["job"].split("_")[0]: r for r in csv.DictReader((sweep / "runs.csv").open())}
    assert runs["0"]["status"] == "finished" and float(runs["0"]["eval/corpus_bleu"]) >= 0
    assert runs["1"]["status"] == "failed" and runs["1"]["error"].startswith("ConfigError: data.files.test:")
    assert "ConfigError: data.files.test:" in (sweep / "summary.md").read_text()
