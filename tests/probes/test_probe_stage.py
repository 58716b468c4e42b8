"""The probe stage's parts: which probes need a model, prompt batches, labels, the before/after table."""

import json
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.core.paths import CONF_DIR
from rpbench.data.chat import ChatRenderer
from rpbench.data.records import EvalExample, Turn, as_messages, drop_images
from rpbench.eval.stats import aggregate
from rpbench.models import load
from rpbench.probes import before_after
from rpbench.probes.prompts import prompt_batches, record_dimensions
from rpbench.probes.stage import (
    PROBES,
    RESTRAINED_DIR,
    RESTRAINT_FILE,
    ProbeContext,
    compare_labels,
    run_probe,
)


def record(rid: str, question: str, dims=None, image=None) -> EvalExample:
    prompt = (Turn("system", "You are Sherlock Holmes."), Turn("user", question, image))
    return EvalExample(rid, prompt, "Elementary.", f"label_{rid}", {} if dims is None else {"dimensions": dims})


RECORDS = [
    record("a", "Who are you?", ["style"]),
    record("b", "Where do you live, and with whom?"),
    record("c", "What is your method?", ["style", "knowledge"]),
]


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return load(tiny_model())


def test_which_probes_need_a_model():
    assert PROBES.get("topk_freq").needs_model and PROBES.get("restraint").needs_model
    assert not PROBES.get("compare").needs_model and not PROBES.get("none").needs_model
    with pytest.raises(ValueError, match="unknown probe 'bogus'"):
        PROBES.get("bogus")


def test_record_dimensions_fall_back_to_the_task_label():
    assert record_dimensions(RECORDS[0]) == ["style"]
    assert record_dimensions(RECORDS[1]) == ["label_b"]
    assert record_dimensions(record("d", "q", [])) == ["label_d"]
    # RoleMRC rubrics count under the paper's five dimensions, each once
    rubrics = ["knowledge_boundary.outside", "role_style", "knowledge_boundary.within"]
    assert record_dimensions(record("f", "q", rubrics)) == ["knowledge_boundary", "role_style"]
    assert record_dimensions(record("g", "q", ["multi_turn.unanswerable"])) == ["multi_turn"]
    with pytest.raises(DataFormatError, match="record e: field 'meta.dimensions'"):
        record_dimensions(record("e", "q", "style"))


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("header", [False, True])
def test_prompt_batches_hold_the_rendered_prompts(tiny, side, header):
    """Without the header (the authors' interpret.py) the last token ends the user turn; with it, the
    assistant header."""
    _, tokenizer = tiny
    tokenizer.padding_side = side
    renderer = ChatRenderer(tokenizer, "<|im_end|>", 512)
    inputs = prompt_batches(RECORDS, tokenizer, renderer, 384, batch_size=2, generation_header=header)
    assert inputs.dims == [[["style"], ["label_b"]], [["style", "knowledge"]]]
    assert inputs.n_records == 3
    batches = list(inputs.batches)
    assert [b["input_ids"].shape[0] for b in batches] == [2, 1]
    rows = [(b, i) for b in batches for i in range(b["input_ids"].shape[0])]
    for example, (batch, row) in zip(RECORDS, rows, strict=True):
        text = tokenizer.apply_chat_template(as_messages(example.prompt), tokenize=False, add_generation_prompt=header)
        assert text.endswith("<|im_start|>assistant\n" if header else example.prompt[-1].content + "<|im_end|>\n")
        expected = tokenizer(text, add_special_tokens=False)["input_ids"]
        mask = batch["attention_mask"][row].bool()
        assert batch["input_ids"][row][mask].tolist() == expected
        assert bool(mask[-1] if side == "left" else mask[0])
        assert batch["position_ids"][row][mask].tolist() == list(range(len(expected)))
    assert set(batches[0]) == {"input_ids", "attention_mask", "position_ids"}


def test_records_with_images_are_refused_unless_dropped(tiny):
    _, tokenizer = tiny
    renderer = ChatRenderer(tokenizer, "<|im_end|>", 512)
    pictured = [*RECORDS, record("p", "What is in the picture?", image="x.jpg")]
    with pytest.raises(ValueError, match=r"1 test records have images \(first: \['p'\]\).*data.images=drop"):
        prompt_batches(pictured, tokenizer, renderer, 384, batch_size=2, generation_header=False)
    dropped, count = drop_images(pictured)  # data.images=drop reads them so
    assert count == 1 and prompt_batches(dropped, tokenizer, renderer, 384, 2, False).n_records == len(pictured)


def evaluation(per_sample: dict, dims: list, judge: dict | None = None) -> dict:
    """An evaluate()-shaped result built by the real aggregation code."""
    result = {"metrics": aggregate(per_sample, {"task": ["t"] * len(dims), "dimension": dims}, n_resamples=10)}
    if judge is not None:
        result["judge"] = judge
    return result


def tally(correct: int, judged: int, n: int) -> dict:
    return {"n": n, "judged": judged, "correct": correct, "accuracy": correct / judged if judged else None}


def test_before_after_table_by_hand():
    dims = [["style"], ["style", "knowledge"], ["knowledge"]]
    base = evaluation(
        {"bleu": [0.1, 0.2, 0.3], "rougeL": [0.5, 0.25, 0.0]},
        dims,
        {"dimensions": {"style": tally(1, 2, 2), "knowledge": tally(0, 1, 2)}, "overall": tally(1, 4, 4)},
    )
    restrained = evaluation(
        {"bleu": [0.0, 0.2, 0.6], "rougeL": [0.5, 0.75, 0.5]},
        dims,
        {"dimensions": {"style": tally(2, 2, 2), "knowledge": tally(1, 2, 2)}, "overall": tally(3, 4, 4)},
    )
    table = before_after.before_after(base, restrained)
    metrics = table["metrics"]
    assert list(metrics) == ["overall", "knowledge", "style"]
    assert metrics["overall"]["bleu"] == {
        "n": 3,
        "before": pytest.approx(0.2),
        "after": pytest.approx(0.8 / 3),
        "delta": pytest.approx(0.2 / 3),
    }
    assert metrics["style"]["bleu"] == pytest.approx({"n": 2, "before": 0.15, "after": 0.1, "delta": -0.05})
    assert metrics["knowledge"]["rougeL"] == {"n": 2, "before": 0.125, "after": 0.625, "delta": 0.5}
    judge = table["judge"]
    assert judge["knowledge"] == {
        "n": 2,
        "judged_before": 1,
        "judged_after": 2,
        "before": 0.0,
        "after": 0.5,
        "delta": 0.5,
    }
    assert judge["overall"]["before"] == 0.25 and judge["overall"]["delta"] == 0.5
    text = before_after.markdown(table)
    assert "| judge | style | knowledge | overall |" in text
    assert "| accuracy baseline | 50.00% | 0.00% | 25.00% |" in text  # judge accuracy in % (paper Table 6)
    assert "| accuracy Δ | +50.00% | +50.00% | +50.00% |" in text
    assert "| metric | overall | knowledge | style |" in text
    assert "| bleu baseline | 0.2000 | 0.2500 | 0.1500 |" in text  # metrics 0-1, four decimals (paper Table 6)
    assert "| rougeL restrained | 0.5833 | 0.6250 | 0.6250 |" in text
    assert "knowledge 1 / 2 of 2" in text
    without_judge = before_after.before_after(base, {"metrics": restrained["metrics"]})
    assert "judge" not in without_judge and "judge" not in before_after.markdown(without_judge)


def test_before_after_has_the_rubric_split_as_a_second_table():
    rubrics = [["knowledge_boundary.within", "role_style"], ["knowledge_boundary.outside"], ["role_style"]]
    dims = [["knowledge_boundary", "role_style"], ["knowledge_boundary"], ["role_style"]]

    def judged(evaluation: dict, within: int, outside: int, style: int) -> dict:
        evaluation["judge"] = {
            "dimensions": {"knowledge_boundary": tally(within + outside, 2, 2), "role_style": tally(style, 2, 2)},
            "rubrics": {
                "knowledge_boundary.within": tally(within, 1, 1),
                "knowledge_boundary.outside": tally(outside, 1, 1),
                "role_style": tally(style, 2, 2),
            },
            "overall": tally(within + outside + style, 4, 4),
        }
        return evaluation

    def evaluation(values):
        groupings = {"task": ["t"] * 3, "dimension": dims, "rubric": rubrics}
        return {"metrics": aggregate({"rougeL": values}, groupings, n_resamples=10)}

    base = judged(evaluation([0.2, 0.4, 0.6]), 0, 1, 1)
    restrained = judged(evaluation([0.3, 0.4, 0.9]), 1, 1, 2)
    table = before_after.before_after(base, restrained)
    assert list(table["metrics"]) == ["overall", "knowledge_boundary", "role_style"]
    assert table["metrics"]["knowledge_boundary"]["rougeL"] == pytest.approx(
        {"n": 2, "before": 0.3, "after": 0.35, "delta": 0.05}
    )
    assert table["metrics_by_rubric"]["knowledge_boundary.within"]["rougeL"] == pytest.approx(
        {"n": 1, "before": 0.2, "after": 0.3, "delta": 0.1}
    )
    assert table["judge_by_rubric"]["knowledge_boundary.within"]["delta"] == 1.0
    assert "overall" not in table["judge_by_rubric"]
    text = before_after.markdown(table)
    assert text.index("| judge | knowledge_boundary | role_style | overall |") < text.index("Finer split (rubrics):")
    assert "| rougeL baseline | 0.4000 | 0.2000 | 0.4000 |" in text  # outside 0.4, within 0.2, style (0.2 + 0.6) / 2


def test_labels_come_from_the_runs_config(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "config.yaml").write_text("run_name: sft-qwen\n")
    assert compare_labels(None, [a, b]) == ("sft-qwen", "b")
    (b / "config.yaml").write_text("run_name: sft-qwen\n")
    assert compare_labels(None, [a, b]) == ("sft-qwen/a", "sft-qwen/b")  # one run name: told apart by folder
    c, d = tmp_path / "x" / "run", tmp_path / "y" / "run"
    for folder in (c, d):
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("run_name: sft-qwen\n")
    assert compare_labels(None, [c, d]) == (str(c), str(d))  # same name, same folder name: the paths
    assert compare_labels(("SFT", "DPO"), [a, b]) == ("SFT", "DPO")
    with pytest.raises(ValueError, match="two different labels"):
        compare_labels(("x", "x"), [a, b])


def probe_context(tmp_path, model=None, tokenizer=None, examples=None, baseline=None, **probe) -> ProbeContext:
    """The probe stage's input for the probe group ``probe`` (its YAML's values, then ``probe`` over them)."""
    defaults = OmegaConf.load(CONF_DIR / "probe" / f"{probe['name']}.yaml")
    values = {k: v for k, v in OmegaConf.to_container(defaults).items() if k != "defaults"} | probe
    settings = PROBES.get(probe["name"]).settings_class.parse(values, "probe")
    return ProbeContext(settings, model, tokenizer, examples, tmp_path, {}, 512, 384, baseline_eval=baseline)


def test_compare_needs_two_probed_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"probe.runs=\['.*'\]: expected two folders \[a, b\]"):
        probe_context(tmp_path, name="compare", runs=[str(tmp_path)])
    with pytest.raises(ConfigError, match="x holds no probe_stats.pt"):
        probe_context(tmp_path, name="compare", runs=[str(tmp_path / "x"), str(tmp_path / "y")])


def test_restraint_needs_a_model_and_a_baseline_evaluation(tiny, tmp_path):
    model, tokenizer = tiny
    explicit = {"name": "restraint", "neurons": {"model.layers.0.self_attn.o_proj": [1]}}
    with pytest.raises(ValueError, match="needs the run's model"):
        run_probe(probe_context(tmp_path, examples=RECORDS, **explicit))
    with pytest.raises(ValueError, match="choose an evaluator"):
        run_probe(probe_context(tmp_path, model, tokenizer, RECORDS, **explicit))


def test_a_folder_restrained_differently_is_refused(tiny, tmp_path):
    model, tokenizer = tiny
    folder = tmp_path / RESTRAINED_DIR
    folder.mkdir()
    (folder / RESTRAINT_FILE).write_text(json.dumps({"factor": 0.5, "source": "explicit", "neurons": {"k": [1]}}))
    restraint = {"name": "restraint", "neurons": {"model.layers.0.self_attn.o_proj": [1]}, "factor": 0.5}
    ctx = replace(probe_context(tmp_path, model, tokenizer, RECORDS, {"metrics": {}}, **restraint), evaluate=print)
    with pytest.raises(ValueError, match="holds predictions under another restraint"):
        run_probe(ctx)
    assert json.loads((folder / RESTRAINT_FILE).read_text())["neurons"] == {"k": [1]}  # left as it was
