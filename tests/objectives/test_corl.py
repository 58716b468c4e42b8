"""CoRL: its prompts and rewards by hand, and real Lightning Trainer runs on the tiny models."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf

from rpbench.data import readers
from rpbench.data.records import Turn
from rpbench.data.remid_prompts import JUDGE_TARGET, RolePlayInput, format_dialogue, remid_prompts
from rpbench.models import load
from rpbench.objectives import corl_cold_start
from rpbench.objectives.corl import CoRLModule, Schedule
from rpbench.objectives.corl_rewards import JudgeRatio, ResponseFormat, ThoughtFormat, ThoughtLength
from rpbench.scoring.rewards import REWARDS
from rpbench.training import train
from rpbench.validate import validate

SAMPLE = Path(__file__).resolve().parents[2] / "rpbench" / "resources" / "sample" / "rpgbench" / "rpgbench.json"
X = RolePlayInput("a baker", "{'name': 'Ada'}", "User Query 1: hi\nAgent Response 1: ")
PROMPTS = remid_prompts(None)
MARKER = PROMPTS.marker
HEADERS = "".join(f"### {section}\n" for section in PROMPTS.sections)


def thought_format(prompts, completions, references):
    return ThoughtFormat().with_prompts(PROMPTS)(prompts, completions, references)


def thought_length(prompts, completions, references, target_words=600):
    return ThoughtLength(target_words).with_prompts(PROMPTS)(prompts, completions, references)


def response_format(prompts, completions, references):
    return ResponseFormat().with_prompts(PROMPTS)(prompts, completions, references)


@REWARDS.register("test_corl_first_letter")
def first_letter_a_to_m(prompts, completions, references) -> list[float]:
    """Toy learnable reward: 1 when the completion's first non-space character is a letter a-m, else 0. It
    rests on the first sampled token alone (clean credit), and a random model starts near 0.4 (group variance)."""
    return [float(c.lstrip()[:1].lower() in set("abcdefghijklm")) if c.strip() else 0.0 for c in completions]


# -- prompts and rewards by hand --------------------------------------------------------------------------


def test_dialogue_is_formatted_as_the_authors_numbered_turns():
    turns = [Turn("user", "hi"), Turn("assistant", "hello"), Turn("user", "bye")]
    assert (
        format_dialogue(turns) == "User Query 1: hi\nAgent Response 1: hello\n\nUser Query 2: bye\n\nAgent Response 2: "
    )


def test_thought_prompt_hides_the_golden_response_and_core_features_are_the_last_fenced_block():
    user = PROMPTS.thought(X)[1].content
    assert "a baker" in user and PROMPTS["no_reference"].text in user and "{" not in PROMPTS["no_reference"].text
    assert len(PROMPTS.sections) == 7 and MARKER == "[Features of the Ideal Reply]"
    thought = f"intro\n```\n{MARKER}\n- warm tone\n```"
    assert PROMPTS.core_features(thought) == "\n- warm tone\n"
    assert PROMPTS.pxy(X, "F")[1].content.endswith("## Features of the Ideal Reply\n```F```\n\n")
    assert "Features of the Ideal Reply" not in PROMPTS.pxy(X, None)[1].content  # plain EMI: x alone


def test_thought_format_gives_half_for_the_fenced_block_and_half_for_all_seven_headers():
    fenced = f"```\n{MARKER}\nx\n```"
    assert thought_format(
        [], [fenced, HEADERS, HEADERS + fenced, HEADERS.replace("Step 2", "Step two") + fenced], []
    ) == [
        0.5,
        0.5,
        1.0,
        0.5,
    ]
    assert thought_format([], [f"{MARKER} without fences"], []) == [0.0]


def test_thought_length_counts_space_separated_words_of_the_core_features():
    words = " ".join(["w"] * 299)  # "\nw w ... w\n" splits on spaces into 299 pieces
    block = f"```{MARKER}\n{words}\n```"
    assert thought_length([], [block], []) == [pytest.approx(299 / 600)]
    assert thought_length([], [f"```{MARKER}\n{words} {words} {words}\n```"], []) == [1.0]
    assert thought_length([], [words], []) == [0.0]  # no fenced block
    assert thought_length([], [block], [], target_words=299) == [1.0]


def test_response_format_needs_the_reply_header():
    assert response_format([], ["##Agent Reply\nhi", "## Agent  Reply", "Agent Reply: hi"], []) == [
        1.0,
        0.0,
        0.0,
    ]


def test_judge_ratio_is_the_clipped_likelihood_ratio_of_100_percent():
    seen = []

    def scorer(conversations, targets):
        seen.extend(zip(conversations, targets))
        return [-1.0, -3.0, -2.5, -2.0, -2.0]  # three replies; then the golden candidate of each prompt

    reward = JudgeRatio().with_prompts(PROMPTS)
    reward.bind(scorer)
    scores = reward.with_features(["F1", "F2", "F2"])([X, X, X], ["reply one", "reply two", "three"], ["gold"] * 3)
    assert scores == [1.0, pytest.approx(math.exp(-1.0)), pytest.approx(math.exp(-0.5))]
    assert len(seen) == 5 and all(target == JUDGE_TARGET for _, target in seen)  # golden rows scored once each
    first, golden = seen[0][0][1].content, seen[3][0][1].content
    assert "Candidate reply: reply one" in first and "```F1```" in first
    assert f"Candidate reply: {PROMPTS.target('gold')}```" in golden and "```F1```" in golden


def test_model_rewards_say_when_no_model_is_bound():
    with pytest.raises(RuntimeError, match="needs a model"):
        REWARDS.get("corl_thought_likelihood")().with_prompts(PROMPTS)([X], ["t"], ["gold"])


def test_schedule_alternates_reasoner_and_dialogue_phases():
    schedule = Schedule(iterations=2, reasoner_steps=2, dialogue_steps=1)
    phases = [schedule.at(step) for step in range(7)]
    assert [(p.iteration, p.name, p.end) for p in phases[:6]] == [
        (1, "reasoner", 2),
        (1, "reasoner", 2),
        (1, "dialogue", 3),
        (2, "reasoner", 5),
        (2, "reasoner", 5),
        (2, "dialogue", 6),
    ]
    assert phases[6] is None and schedule.total == 6


# -- with models ------------------------------------------------------------------------------------------


def build(compose, *overrides: str):
    cfg = compose(
        "objective=corl", "data=sample_rpgbench", "logger=none", "trainer.enable_progress_bar=false", *overrides
    )
    run = validate(cfg)
    specs = CoRLModule.models_to_build(run.objective, run.model)
    loaded = {name: load(spec) for name, spec in specs.items()}
    return cfg, {n: m for n, (m, _) in loaded.items()}, {n: t for n, (_, t) in loaded.items()}


def test_thought_likelihood_is_exp_of_the_dialogue_policys_mean_log_prob(compose):
    cfg, models, tokenizers = build(compose)
    module = CoRLModule(models, tokenizers, validate(cfg).objective)
    reward = next(r.fn for r in module.rewards["reasoner"] if r.name == "corl_thought_likelihood")
    thought = f"```{MARKER}\nbe warm\n```"
    [value] = reward([X], [thought], ["Hello there"])

    tokenizer, model = tokenizers["dialogue"], models["dialogue"].eval()
    messages = [{"role": t.role, "content": t.content} for t in PROMPTS.pxy(X, "\nbe warm\n")]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(PROMPTS.target("Hello there") + "<|im_end|>", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + target_ids])
    with torch.no_grad():
        logps = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
    picked = logps[len(prompt_ids) - 1 :].gather(1, ids[0, len(prompt_ids) :, None]).squeeze(1)
    assert value == pytest.approx(math.exp(float(picked.mean())), rel=1e-4)


@pytest.fixture(scope="module")
def rpgbench_records(data_options):
    """The bundled RPGBench sample's training records (CoRL trains on the first 8, validates on the next 2)."""
    return readers.read("rpgbench", "train", SAMPLE, data_options("sample_rpgbench")).examples


@pytest.fixture(scope="module")
def run_corl(rpgbench_records):
    """(report, module models, logged rows) of a CoRL run on 8 RPGBench prompts."""

    def run_corl(compose, out_dir: Path, *overrides: str):
        cfg, models, tokenizers = build(compose, "save_model=false", *overrides)
        report = train(
            validate(cfg).training,
            models,
            tokenizers,
            rpgbench_records[:8],
            rpgbench_records[8:10],
            out_dir,
            logger=CSVLogger(str(out_dir), name="csv", version=0),
        )
        with open(out_dir / "csv" / "version_0" / "metrics.csv", newline="") as f:
            rows = [row for row in csv.DictReader(f) if row.get("train/reward")]
        return report, models, rows

    return run_corl


TOY = [  # the model-scored rewards weigh little: a random model's barely move (the judge ratio is clipped at 1)
    "objective.reasoner_rewards=[{name: test_corl_first_letter, weight: 1}, "
    "{name: corl_thought_likelihood, weight: 0.1}]",
    "objective.dialogue_rewards=[{name: test_corl_first_letter, weight: 1.0}, {name: corl_judge_ratio, weight: 0.1}]",
    "objective.lr=2e-2",
    "objective.reasoner_max_completion_length=8",
    "objective.dialogue_max_completion_length=8",
    "objective.max_prompt_length=512",
]


@pytest.mark.slow
def test_a_few_iterations_raise_both_phases_rewards(compose, tmp_path, run_corl):
    """8 steps per phase learn the first-letter reward. A 512-token vocabulary lets each step's 32 samples
    cover the first token's choices; constant lr 5e-2. Seeds 42, 7, 123, 5: first 3 steps ~0.33-0.49, last 3
    ~0.69-1.0 (seed 42's dialogue phase is the slowest: 0.69-0.73 from run to run, with the thread count); with
    the advantage's sign flipped, the last 3 fell to ~0.0-0.07 (measured on the earlier tiny initialisation)."""
    learn = [
        "model.tiny.vocab_size=512",
        "objective.lr=5e-2",
        "objective.scheduler=constant",
        "objective.reasoner_max_completion_length=2",
        "objective.dialogue_max_completion_length=2",
        "objective.batch_size=4",
        "objective.num_generations=8",
    ]
    steps = ("objective.reasoner_steps=8", "objective.dialogue_steps=8")
    report, _, rows = run_corl(compose, tmp_path, *TOY, *learn, *steps)
    assert report["optimizer_steps"] == 16
    for phase in ("reasoner", "dialogue"):
        key = f"train/{phase}/rewards/test_corl_first_letter/mean"
        rewards = [float(r[key]) for r in rows if r.get(key)]
        assert len(rewards) == 8
        first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
        assert last > 0.55 and last > first + 0.25, (phase, rewards)


@pytest.mark.slow
def test_each_iteration_writes_the_reasoning_its_dialogue_phase_used(compose, tmp_path, run_corl):
    report, _, rows = run_corl(
        compose, tmp_path, *TOY, "objective.iterations=2", "objective.reasoner_steps=1", "objective.dialogue_steps=1"
    )
    assert report["optimizer_steps"] == 4
    assert [float(r["train/phase"]) for r in rows] == [0.0, 1.0, 0.0, 1.0]
    for iteration in (1, 2):
        lines = (tmp_path / "corl" / f"reasoning_iter{iteration}.jsonl").read_text().splitlines()
        entries = [json.loads(line) for line in lines]
        assert len(entries) == 4 and {e["iteration"] for e in entries} == {iteration}  # one batch of 4 prompts
        assert all(e["core_features"] == PROMPTS.core_features(e["reasoning"]) for e in entries)


@pytest.mark.slow
def test_shared_base_trains_two_adapters_and_exports_both(compose, tmp_path, rpgbench_records):
    lora = "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj]}"
    cfg, models, tokenizers = build(compose, "objective.shared_base=true", lora, *TOY[:2])
    assert list(models) == ["dialogue"]
    cfg.save_model = True
    cfg.objective.reasoner_steps = cfg.objective.dialogue_steps = 1
    report = train(
        validate(cfg).training, models, tokenizers, rpgbench_records[:8], rpgbench_records[8:10], tmp_path, logger=None
    )
    assert report["optimizer_steps"] == 2
    model = replace(validate(cfg).model, lora=None)
    base, _ = load(model)  # the same random initial weights
    weights = {"base": dict(base.named_parameters())}
    for name in ("dialogue", "reasoner"):
        exported, _ = load(replace(model, name_or_path=str(tmp_path / "model" / name)))
        assert not any("lora" in n for n, _ in exported.named_parameters())
        weights[name] = dict(exported.named_parameters())
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(weights["dialogue"][q_proj], weights["base"][q_proj])  # each adapter trained
    assert not torch.equal(weights["reasoner"][q_proj], weights["base"][q_proj])
    assert not torch.equal(weights["reasoner"][q_proj], weights["dialogue"][q_proj])  # and separately


@pytest.mark.slow
def test_resume_mid_dialogue_phase_restores_both_models_optimisers_and_thoughts(compose, tmp_path, run_corl):
    """Two batches per epoch; steps: R, D | D, D | R, D | D, D. Stopped at step 2 (an epoch end: Lightning
    resumes a run stopped by max_steps at the next epoch), resumed inside the first dialogue phase. Sampled
    thoughts (reasoning_temperature 1) would differ if regenerated: the resumed run reads them back."""
    settings = [
        *TOY,
        "objective.iterations=2",
        "objective.reasoner_steps=1",
        "objective.dialogue_steps=3",
        "objective.reasoning_temperature=1.0",
    ]
    _, straight, _ = run_corl(compose, tmp_path / "straight", *settings)
    report, _, _ = run_corl(compose, tmp_path / "resumed", *settings, "trainer.max_steps=2")
    assert report["optimizer_steps"] == 2
    report, resumed, rows = run_corl(compose, tmp_path / "resumed", *settings)
    assert report["optimizer_steps"] == 8
    assert [float(r["train/optimizer_step"]) for r in rows][-6:] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    for name in ("dialogue", "reasoner"):
        for (key, a), (_, b) in zip(straight[name].named_parameters(), resumed[name].named_parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{name}: {key}")
    for iteration in (1, 2):
        name = f"corl/reasoning_iter{iteration}.jsonl"
        assert (tmp_path / "resumed" / name).read_text() == (tmp_path / "straight" / name).read_text()


def test_reasoner_init_from_takes_a_runs_reasoner_folder(compose, tmp_path):
    folder = tmp_path / "run" / "model" / "reasoner"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    cfg = compose("objective=corl", f"objective.reasoner_init_from={tmp_path / 'run'}")
    run = validate(cfg)
    specs = CoRLModule.models_to_build(run.objective, run.model)
    assert list(specs) == ["dialogue", "reasoner"] and specs["reasoner"].name_or_path == str(folder)


def test_records_without_persona_and_character_are_named(compose, data_options):
    rolemrc = readers.read(
        "rolemrc", "train", SAMPLE.parents[1] / "rolemrc" / "train-sft.jsonl", data_options("sample")
    ).examples[:1]
    cfg, models, tokenizers = build(compose)
    from rpbench.models import chat_renderer

    with pytest.raises(ValueError, match=f"record {rolemrc[0].id!r}: CoRL needs RPGBench records"):
        CoRLModule.render_for(
            validate(cfg).objective, rolemrc, chat_renderer(validate(cfg).model, tokenizers["dialogue"], 1024)
        )


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["llama3-8b", "qwen3-4b"])
def test_experiment_configs_compose(compose, model_name):
    if not (Path(__file__).resolve().parents[2] / "conf" / "model" / f"{model_name}.yaml").exists():
        pytest.skip(f"conf/model/{model_name}.yaml is not on this branch")
    cfg = compose(f"experiment=rpgbench_corl_{model_name}")
    assert cfg.objective.name == "corl" and cfg.objective.data_split == "test" and cfg.data.allow_overlap
    assert cfg.objective.judge_model == cfg.model.name_or_path
    assert cfg.model.lora.r == 16 and cfg.model.lora.alpha == 32
    CoRLModule.config_class.parse(OmegaConf.to_container(cfg.objective, resolve=True), "objective")  # accepted
    assert compose("experiment=rpgbench_corl_qwen3-4b", "model=llama3-8b").model.name == "llama3-8b"


@pytest.mark.slow
def test_run_py_trains_corl_on_the_bundled_rpgbench_sample_and_reports(tmp_path, run_in_process):
    """What run.py runs, in-process."""
    out = tmp_path / "run"
    run_in_process(out, "objective=corl", "data=sample_rpgbench", "debug=short")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["objective"] == "corl" and metrics["train"]["optimizer_steps"] == 3  # R, R, D
    assert "held_out" in metrics["train"] and "eval" in metrics
    assert (out / "report.md").exists() and (out / "corl" / "reasoning_iter1.jsonl").exists()
    columns = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/reasoner/reward", "train/dialogue/reward", "train/phase", "val/loss"} <= set(columns)


def test_cold_start_files_hold_the_thought_and_pxy_sft_chats_and_read_as_custom_data(tmp_path, data_options):
    document = json.loads(SAMPLE.read_text())
    thought = f"### {PROMPTS.sections[0]}\n```\n{MARKER}\n- be kind\n```"
    samples = document["IDTrain"][:3]
    for sample in samples:
        sample["reasoning"] = thought
    source = tmp_path / "rpgbench.json"
    source.write_text(json.dumps({"IDTrain": samples}))
    corl_cold_start.main([str(source), str(tmp_path / "out")])
    thoughts = readers.read("custom", "train", tmp_path / "out" / "thought_sft.jsonl", data_options("custom")).examples
    pxy = readers.read("custom", "train", tmp_path / "out" / "pxy_sft.jsonl", data_options("custom")).examples
    assert len(thoughts) == len(pxy) == 3
    assert thoughts[0].turns[-1].content == thought and PROMPTS["no_reference"].text in thoughts[0].turns[1].content
    assert pxy[0].turns[-1].content == PROMPTS.target(samples[0]["agent_golden_response"])
    assert "```\n- be kind\n```" in pxy[0].turns[1].content
    del samples[1]["reasoning"]
    source.write_text(json.dumps({"IDTrain": samples}))
    with pytest.raises(ValueError, match="1 of 3 records have no 'reasoning'"):
        corl_cold_start.main([str(source), str(tmp_path / "out")])


def test_a_judge_model_from_a_folder_scores_like_the_policys_frozen_start_and_stays_out_of_checkpoints(
    compose, tmp_path
):
    cfg, models, tokenizers = build(compose)
    models["dialogue"].save_pretrained(tmp_path / "judge")  # the same random start as the dialogue policy
    module = CoRLModule(models, tokenizers, validate(cfg).objective)
    cfg, models, tokenizers = build(compose, f"objective.judge_model={tmp_path / 'judge'}")
    loaded = CoRLModule(models, tokenizers, validate(cfg).objective)
    assert type(loaded.reference).__name__ == "LoadedJudge"
    conversation = [PROMPTS.pxy(X, "F")]
    assert loaded.score_with_judge(conversation, ["100%"]) == pytest.approx(
        module.score_with_judge(conversation, ["100%"]), rel=1e-5
    )
    checkpoint = {"state_dict": loaded.state_dict()}
    loaded.on_save_checkpoint(checkpoint)
    assert checkpoint["state_dict"] and not any(k.startswith("reference.") for k in checkpoint["state_dict"])


def test_shared_base_keeps_both_adapters_trainable_and_the_dialogue_adapter_active(compose):
    lora = "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: [q_proj, v_proj]}"
    cfg, models, tokenizers = build(compose, "objective.shared_base=true", lora)
    module = CoRLModule(models, tokenizers, validate(cfg).objective)
    adapters = [p for n, p in module.model.named_parameters() if "lora_" in n]
    assert len(adapters) == 2 * len(module.phase_parameters("dialogue")) > 0
    with module.acting("reasoner") as model:
        assert model.active_adapter == "reasoner" and all(p.requires_grad for p in adapters)
    assert module.model.active_adapter == "default" and all(p.requires_grad for p in adapters)


@pytest.mark.slow
def test_two_cpu_ranks_train_a_shared_base(tmp_path, run_script):
    out = tmp_path / "run"
    settings = ["objective=corl", "data=sample_rpgbench", "evaluator=none", "logger=none", "objective.batch_size=2"]
    shared = [
        "objective.shared_base=true",
        "model.lora={r: 4, alpha: 8, dropout: 0.0, target_modules: null}",
        "trainer.devices=2",
    ]
    result = run_script(
        "run.py", f"hydra.run.dir={out}", *settings, *shared, "trainer.strategy=ddp_find_unused_parameters_true"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["train"]["optimizer_steps"] == 4
    assert len((out / "corl" / "reasoning_iter1.jsonl").read_text().splitlines()) == 8  # 2 ranks x 2 prompts x 2 steps
