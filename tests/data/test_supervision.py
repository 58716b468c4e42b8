"""data.supervise (all | last | a per-turn field) and data.speaker: the loss masks token by token on the tiny
models' stock chat templates, the counts the run reports, and named errors for bad values."""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict

from rpbench.core.errors import ConfigError, DataFormatError
from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.prepare import read_split
from rpbench.data.settings import data_spec
from rpbench.models.loading import chat_renderer, load_tokenizer
from rpbench.objectives.sft import SFTModule
from rpbench.validate import validate

TAVERN = [
    {"role": "system", "content": "A tavern at night."},
    {"role": "user", "content": "Barkeep, a drink!"},
    {"role": "assistant", "name": "Mira", "content": "Here you go, traveller.", "train": True},
    {"role": "user", "content": "And one for my friend?"},
    {"role": "assistant", "name": "Tom", "content": "Tom grabs the cup first.", "train": False},
    {"role": "user", "content": "Cheers, then."},
    {"role": "assistant", "name": "Mira", "content": "Cheers to you both."},
]
MIRA_1, TOM, MIRA_2 = (TAVERN[i]["content"] for i in (2, 4, 6))
PLAIN = [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": "Hello, friend."}]


@pytest.fixture
def tavern(tmp_path):
    path = tmp_path / "tavern.jsonl"
    path.write_text(json.dumps({"messages": TAVERN}) + "\n" + json.dumps({"messages": PLAIN}) + "\n")
    return path


def with_data(cfg, **values):
    """``cfg`` with these ``data`` settings (one composition serves a test's variants)."""
    with open_dict(cfg):
        cfg.data.update(values)
    return cfg


def supervised_runs(sample: dict) -> list[list[int]]:
    """The runs of consecutive supervised tokens; each supervised label is its input token."""
    runs, previous = [], False
    for token, label in zip(sample["input_ids"], sample["labels"], strict=True):
        supervised = label != IGNORE_INDEX
        if supervised:
            assert label == token
            runs.append([token]) if not previous else runs[-1].append(token)
        previous = supervised
    return runs


@pytest.mark.parametrize("model", ["tiny-qwen2", "tiny-llama", "tiny-qwen3"])
def test_masks_token_by_token_on_stock_templates(compose, tavern, model):
    cfg = compose("data=custom", f"data.files.train={tavern}", f"model={model}")
    tokenizer = load_tokenizer(validate(cfg).model)
    renderer = chat_renderer(validate(cfg).model, tokenizer, 512)
    eot = renderer.end_of_turn
    expected = {
        ("all", None): [MIRA_1, TOM, MIRA_2],  # the `train` fields are read only when data.supervise names them
        ("last", None): [MIRA_2],
        ("train", None): [MIRA_1, MIRA_2],
        ("all", "Mira"): [MIRA_1, MIRA_2],
        ("all", "Tom"): [TOM],
        ("last", "Tom"): [TOM],  # the conversation up to Tom's last turn
    }
    for (supervise, speaker), contents in expected.items():
        examples = read_split(data_spec(with_data(cfg, supervise=supervise, speaker=speaker).data), "train").examples
        examples = [e for e in examples if len(e.turns) > 2]
        samples, empty = SFTModule.render(examples, renderer)
        assert not empty and len(samples) == 1, (supervise, speaker)
        runs = supervised_runs(samples[0])
        assert [tokenizer.decode(run) for run in runs] == [c + eot for c in contents], (model, supervise, speaker)
        assert samples[0]["turns"] == len(contents)
        rendered = tokenizer.decode(samples[0]["input_ids"])
        replies = [MIRA_1, TOM, MIRA_2]
        before_last = replies[: replies.index(contents[-1])]
        assert all(reply in rendered for reply in before_last)  # the turns not trained on stay, as context


def test_counts_of_supervised_and_context_turns(compose, tavern):
    cfg = compose("data=custom", f"data.files.train={tavern}", "data.speaker=Tom")
    result = read_split(data_spec(cfg.data), "train")
    assert len(result.examples) == 1  # the record Tom never speaks in has no turn to train: dropped, counted
    assert {k: result.counts[k] for k in ("supervised_turns", "context_turns", "without_supervised_turn")} == {
        "supervised_turns": 1,
        "context_turns": 2,
        "without_supervised_turn": 1,
    }
    result = read_split(data_spec(with_data(cfg, supervise="train", speaker=None).data), "train")
    assert result.counts["supervised_turns"] == 3 and result.counts["context_turns"] == 1


def test_bad_values_are_named_errors(compose, tavern, tmp_path):
    cfg = compose("data=custom", f"data.files.train={tavern}", "data.supervise=trian")
    with pytest.raises(ConfigError, match=r"data.supervise=trian: no turn of data.files.train has a 'trian' field"):
        read_split(data_spec(cfg.data), "train")
    with pytest.raises(ConfigError, match=r"data.speaker='Nobody': no turn of data.files.train is spoken by"):
        read_split(data_spec(with_data(cfg, supervise="all", speaker="Nobody").data), "train")
    weighted = tmp_path / "weighted.jsonl"
    bad = [dict(m) for m in TAVERN]
    bad[4]["train"] = 0.5
    weighted.write_text(json.dumps({"messages": bad}) + "\n")
    with_data(cfg, supervise="train", speaker=None, files={"train": str(weighted)})
    with pytest.raises(DataFormatError, match=r"weighted.jsonl: record 1: field 'messages\[4\].train': true/false"):
        read_split(data_spec(cfg.data), "train")
    bad[4]["train"], bad[1]["train"] = False, True
    weighted.write_text(json.dumps({"messages": bad}) + "\n")
    with pytest.raises(DataFormatError, match=r"field 'messages\[1\].train': false on a user turn"):
        read_split(data_spec(cfg.data), "train")
    with pytest.raises(ConfigError) as error:
        validate(with_data(cfg, supervise="", speaker=""))
    assert "data.supervise='': expected all, last" in str(error.value)
    assert "data.speaker='': expected null (every speaker)" in str(error.value)


def test_rolemrc_reads_the_turn_field_and_rpgbench_has_none(compose, tmp_path):
    path = tmp_path / "rolemrc.jsonl"
    turns = [{k: v for k, v in m.items() if k != "name"} for m in TAVERN]
    path.write_text(json.dumps({"conversations": turns}) + "\n")
    cfg = compose("data=rolemrc", f"data.files.train={path}", "data.supervise=train")
    (example,) = read_split(data_spec(cfg.data), "train").examples
    assert [t.trained for t in example.turns if t.role == "assistant"] == [True, False, True]
    rpg = compose("data=sample_rpgbench", "data.supervise=train")
    with pytest.raises(ConfigError, match=r"no turn of data.files.train has a 'train' field"):
        read_split(data_spec(rpg.data), "train")


def test_metrics_count_supervised_turns_per_split(tavern, tmp_path, run_in_process):
    results = run_in_process(
        tmp_path / "run",
        "data=custom",
        f"data.files.train={tavern}",
        "data.supervise=train",
        "data.val_fraction=0",
        "evaluator=none",
        "logger=none",
        "trainer.max_steps=1",
        "trainer.enable_progress_bar=false",
        "save_model=false",
    )
    assert results["train"]["supervision"] == {"supervise": "train", "speaker": None, "turns": {"train": 3, "val": 0}}
    assert results["records"]["train"]["context_turns"] == 1
