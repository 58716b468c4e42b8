"""Probes through the real pipeline: probe two tiny runs, compare them without a model, restrain neurons."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf, open_dict
from PIL import Image

import rpbench.pipeline as pipeline
from rpbench.data.prepare import read_split
from rpbench.data.records import as_messages
from rpbench.data.settings import data_spec
from rpbench.eval.evaluate import evaluate
from rpbench.models import load
from rpbench.probes import load_stats
from rpbench.probes.prompts import record_dimensions
from rpbench.probes.stage import ProbeContext, run_probe
from rpbench.validate import validate

BASE = ["objective=none", "logger=none", "data.max_test_samples=8"]
FAST = [
    *BASE,
    "evaluator=rolemrc",
    "evaluator.generation.max_new_tokens=4",
    "evaluator.generation.batch_size=8",
    "evaluator.metrics=[bleu,rougeL]",
    "evaluator.bootstrap.n_resamples=20",
]
# Scripted judge (first match wins): a blank reply fails; otherwise every rubric of a dimension gets one fixed
# verdict, matched on the rubric's criterion text.
VERDICTS = {
    "[Model reply to check]\n\n\n[Criterion]": "0",
    "Knowledge boundary (question": "0",
    "Role style. The reply must": "1",
    "Nested instruction.": "1",
    "Multi-turn instruction (final": "0",
    "Instruction priority.": "1",
}
EXPECTED_ACCURACY = {"knowledge_boundary": 0.0, "role_style": 1.0, "nested": 1.0, "multi_turn": 0.0, "prioritized": 1.0}


def job_config(compose, folder: Path, *overrides: str):
    """The config `python run.py <overrides>` hands the pipeline (no hydra node), writing to `folder`."""
    cfg = compose(*overrides)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(folder)
    return cfg


def run_in(compose, folder: Path, *overrides: str):
    cfg = job_config(compose, folder, *overrides)
    pipeline.run(validate(cfg))
    return cfg


def metrics_of(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def last_prompt_counts(cfg, examples) -> dict[str, np.ndarray]:
    """Peer: each prompt alone (no padding) through the model, o_proj outputs hooked with plain torch, read at
    the prompt's last token rendered without a generation header (the authors' interpret.py)."""
    model, tokenizer = load(validate(cfg).model)
    layers = model.model.layers
    seen: dict[int, torch.Tensor] = {}
    handles = [
        layer.self_attn.o_proj.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out))
        for i, layer in enumerate(layers)
    ]
    counts: dict[str, np.ndarray] = {}
    with torch.no_grad():
        for example in examples:
            messages = as_messages(example.prompt)
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
            model(torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]]))
            acts = torch.stack([seen[i][0, -1] for i in range(len(layers))])  # [layers, hidden]
            k = int(acts.shape[1] * 0.2)  # top 20% by value
            hits = (acts >= acts.topk(k, dim=1).values[:, -1:]).long().numpy()
            for dim in record_dimensions(example):
                counts[dim] = counts.get(dim, 0) + hits
    for handle in handles:
        handle.remove()
    return counts


@pytest.mark.slow
def test_probe_two_runs_then_compare_them_without_a_model(compose, tmp_path, monkeypatch):
    a, b = tmp_path / "init0", tmp_path / "init1"
    cfg_a = run_in(compose, a, *FAST, "probe=topk_freq", "++model.init_seed=0", "run_name=init0")
    cfg_b = run_in(compose, b, *BASE, "evaluator=none", "probe=topk_freq", "++model.init_seed=1", "run_name=init1")

    examples = read_split(data_spec(cfg_a.data), "test").examples
    assert len(examples) == 8
    stats = {name: load_stats(folder) for name, folder in (("init0", a), ("init1", b))}
    peer = last_prompt_counts(cfg_a, examples)
    assert sorted(peer) == stats["init0"].dims
    for dim, counts in peer.items():
        np.testing.assert_array_equal(stats["init0"].counts[dim].numpy(), counts)
        assert stats["init0"].num_observations(dim) == sum(dim in record_dimensions(e) for e in examples)
    probe = metrics_of(a)["probe"]
    assert probe["observations"] == {d: stats["init0"].num_observations(d) for d in stats["init0"].dims}
    assert probe["settings"]["top_percent"] == 20 and probe["records"] == 8
    assert "## Probe: top-p% activation frequencies" in (a / "report.md").read_text()
    assert (a / "predictions.jsonl").is_file() and not (b / "predictions.jsonl").exists()  # evaluator=none: probe only
    assert metrics_of(b)["probe"]["records"] == 8

    # Restrain the 4 most changed neurons per layer between the two runs (score: sum over dims of |f_b - f_a|).
    restrained = tmp_path / "restrained_run"
    run_in(compose, restrained, *FAST, "probe=restraint", f"probe.runs=[{a},{b}]", "probe.top_k=4")
    score = sum(
        np.abs(stats["init1"].frequencies(d).numpy() - stats["init0"].frequencies(d).numpy())
        for d in stats["init0"].dims
    )
    layers = stats["init0"].layers
    expected = {layer: np.argsort(-score[i], kind="stable")[:4].tolist() for i, layer in enumerate(layers)}
    chosen = metrics_of(restrained)["probe"]
    assert chosen["neurons"] == expected and chosen["source"] == "most changed between probe.runs"
    assert (restrained / "restrained" / "predictions.jsonl").is_file()

    def no_model(*args, **kwargs):
        raise AssertionError("probe=compare must not build a model")

    monkeypatch.setattr(pipeline, "load_tokenizer", no_model)  # every model the pipeline builds starts here
    out = tmp_path / "compare"
    run_in(compose, out, "objective=none", "evaluator=none", "logger=none", "probe=compare", f"probe.runs=[{a},{b}]")
    result = metrics_of(out)["probe"]
    assert result["labels"] == ["init0", "init1"] and result["dims"] == stats["init0"].dims
    peer_b = last_prompt_counts(cfg_b, examples)  # D_l from counts the plain-torch peer made for both runs
    for dim in result["dims"]:
        n = sum(dim in record_dimensions(e) for e in examples)
        f_a, f_b = peer[dim] / n, peer_b[dim] / n
        np.testing.assert_allclose(result["D_l"][dim], np.abs(f_b - f_a).mean(axis=1))
        assert result["D_l_mean"][dim] == pytest.approx(np.abs(f_b - f_a).mean())
        with Image.open(out / result["heatmaps"][dim]) as image:
            assert image.format == "PNG"
        top = result["top_neurons"][dim]["model.layers.1.self_attn.o_proj"][0]
        assert abs(top[1]) == pytest.approx(np.abs(f_b - f_a)[1].max())
    report = (out / "report.md").read_text()
    assert "### D_l (mean |f_b - f_a| per layer)" in report and "| 1 | model.layers.1.self_attn.o_proj |" in report
    assert "![role_style](heatmap_role_style.png)" in report
    assert (out / "probe_compare.md").is_file() and not (out / "predictions.jsonl").exists()


def dimension_means(scores_file: Path, examples, metric: str) -> dict[str, float]:
    """Peer: per-dimension means of a metric from an evaluation's per-record scores.jsonl; a record counts once
    under each of the paper's dimensions its rubrics belong to (knowledge_boundary.within -> knowledge_boundary)."""
    rows = {json.loads(line)["id"]: json.loads(line) for line in scores_file.read_text().splitlines()}
    values: dict[str, list[float]] = {}
    for example in examples:
        for dim in {rubric.split(".")[0] for rubric in example.meta["dimensions"]}:
            values.setdefault(dim, []).append(rows[example.id]["metrics"][metric])
    return {dim: float(np.mean(v)) for dim, v in values.items()}


@pytest.mark.slow
def test_restraint_reports_before_and_after_per_dimension(compose, tmp_path, scripted_judge):
    # The untrained tiny model replies with blank lines; every attention output scaled x20 makes it speak.
    run = tmp_path / "restraint"
    neurons = (
        "{" + ",".join(f"model.layers.{i}.self_attn.o_proj:[{','.join(map(str, range(64)))}]" for i in range(2)) + "}"
    )
    cfg = job_config(
        compose,
        run,
        *FAST,
        "judge=local",
        f"judge.cache_path={tmp_path / 'judge.sqlite'}",
        "judge.progress=false",
        "probe=restraint",
        f"probe.neurons={neurons}",
        "probe.factor=20.0",
        "evaluator.metrics=[bleu,rougeL,bertscore]",
    )
    pipeline.run(validate(cfg), local_judge_server=scripted_judge(replies=VERDICTS))

    metrics = metrics_of(run)
    probe = metrics["probe"]
    assert probe["n_neurons"] == 128 and probe["factor"] == 20.0 and not probe["factor_is_identity_in_model_dtype"]
    baseline = [json.loads(line)["prediction"] for line in (run / "predictions.jsonl").read_text().splitlines()]
    restrained = [
        json.loads(line)["prediction"] for line in (run / "restrained" / "predictions.jsonl").read_text().splitlines()
    ]
    assert len(baseline) == len(restrained) == 8 and baseline != restrained and all(restrained)

    examples = read_split(data_spec(cfg.data), "test").examples
    table = probe["before_after"]
    for phase, folder in (("before", run), ("after", run / "restrained")):
        for metric in ("rougeL", "bertscore"):
            for dim, mean in dimension_means(folder / "scores.jsonl", examples, metric).items():
                assert table["metrics"][dim][metric][phase] == pytest.approx(mean)
    assert all(table["metrics"][dim]["bertscore"]["delta"] != 0 for dim in table["metrics"])
    assert not any(baseline)  # the untrained model's blank replies all fail, the restrained replies do not
    judged = {dim: row for dim, row in table["judge"].items() if dim != "overall"}
    assert list(judged) == ["knowledge_boundary", "role_style"]
    for dim, row in judged.items():
        assert (row["before"], row["after"], row["delta"]) == (0.0, EXPECTED_ACCURACY[dim], EXPECTED_ACCURACY[dim])
    assert table["judge"]["overall"]["after"] == pytest.approx(4 / 12)  # 4 role_style of 12 judgements
    assert metrics["eval"]["judge"]["dimensions"]["role_style"]["accuracy"] == 0.0
    report = (run / "report.md").read_text()
    assert "## Probe: neuron restraint" in report and "| accuracy baseline |" in report
    assert "| bertscore Δ |" in report and "128 neurons in 2 hook points (explicit)" in report


@pytest.mark.slow
def test_default_factor_is_a_no_op_in_bfloat16_and_says_so(compose, tmp_path, evaluation_of):
    cfg = job_config(
        compose,
        tmp_path,
        *FAST,
        "model.dtype=bfloat16",
        "data.max_test_samples=2",
        "probe=restraint",
        "probe.neurons={model.layers.0.self_attn.o_proj:[0,1,2,3]}",
    )
    model, tokenizer = load(validate(cfg).model)
    examples = read_split(data_spec(cfg.data), "test").examples
    evaluation = evaluation_of(cfg, tmp_path, model, tokenizer, examples)
    baseline = evaluate(evaluation)
    lengths = int(cfg.data.max_length), int(cfg.data.max_prompt_length)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    again = lambda folder: evaluate(evaluation.into(folder))  # noqa: E731
    probing = ProbeContext(
        validate(cfg).probe, model, tokenizer, examples, tmp_path, model_cfg, *lengths, again, baseline
    )
    result = run_probe(probing)
    assert result["factor"] == pytest.approx(1 - 1e-6) and result["factor_is_identity_in_model_dtype"]
    assert "rounds to 1 in bfloat16" in result["report_sections"][0]
    assert (tmp_path / "restrained" / "predictions.jsonl").read_text() == (tmp_path / "predictions.jsonl").read_text()
    rows = [row for group in result["before_after"]["metrics"].values() for row in group.values()]
    # BLEU of the tiny model's token-less predictions has no value (n 0): no delta, the rest are exactly 0
    assert all(row["delta"] == 0 if row["n"] else row["delta"] is None for row in rows) and any(r["n"] for r in rows)


@pytest.mark.slow
def test_compare_as_documented_loads_no_model_generates_nothing_and_names_runs_by_folder(compose, tmp_path):
    """`python run.py objective=none probe=compare probe.runs=[A,B]`, no evaluator given, on two probe runs
    of one run name (as two runs of one command are): no model, no predictions, no evaluation tables."""
    runs = [tmp_path / "none-tiny-qwen2-sample-probe-topk_freq" / stamp for stamp in ("10-00-00", "11-00-00")]
    for seed, folder in enumerate(runs):
        run_in(compose, folder, *BASE, "evaluator=none", "probe=topk_freq", f"++model.init_seed={seed}")
    out = tmp_path / "compare"
    cfg = run_in(compose, out, "objective=none", "logger=none", "probe=compare", f"probe.runs=[{runs[0]},{runs[1]}]")
    assert cfg.evaluator.name == "none"
    metrics = metrics_of(out)
    assert metrics["model"] == "not loaded" and "eval" not in metrics and metrics["records"] == {}
    names = ["none-tiny-qwen2-sample-probe-topk_freq/10-00-00", "none-tiny-qwen2-sample-probe-topk_freq/11-00-00"]
    assert metrics["probe"]["labels"] == names
    assert not (out / "predictions.jsonl").exists() and not (out / "scores.jsonl").exists()
    report = (out / "report.md").read_text()
    assert f"## Probe: activation frequency change, {names[1]} vs {names[0]}" in report
    assert "| 0.0000 |" not in report.split("## Probe")[0]  # nothing before the probe's own section is a score table
