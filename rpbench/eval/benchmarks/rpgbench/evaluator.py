"""RPGBench: reference metrics per category (each shift subtype and the ID set) and per distribution shift;
WinRate against the golden responses from a judge ensemble (position-swapped); the R-EMID paper's
generalization analysis per category (``rpbench.eval.generalization.analysis``) with one fixed estimator
pair (``evaluator.critic`` / ``evaluator.reasoner``, optionally ``plain_critic``;
``rpbench.eval.generalization.estimator``) scoring every evaluated model. Predictions are scored without
their think block (``<think>...</think>``); one whose block never closes has no reply and is counted
(``think.unclosed``). WinRate and the analysis score the same records (``rpbench.data.rpgbench.
replied_records``): an empty reply is left out of both and counted per category
(``excluded_empty_predictions``)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.data.records import EvalExample, generated_reply
from rpbench.data.remid_prompts import RemidPrompts, RolePlayInput, remid_prompts
from rpbench.data.rpgbench import ID_CATEGORY, TEST_SPLITS, RPGBenchOptions
from rpbench.data.settings import DataSettings
from rpbench.eval.benchmarks.base import (
    BENCHMARKS,
    Benchmark,
    Headline,
    Judged,
    JudgeTally,
    read_jsonl,
    tally_of,
    write_jsonl,
)
from rpbench.eval.benchmarks.rpgbench.report import plot_convergence, plot_severity, report_sections
from rpbench.eval.context import EvalContext
from rpbench.eval.generalization.estimator import resolve_spec
from rpbench.eval.generalization.settings import EntropySettings, GeneralizationSettings
from rpbench.eval.settings import JudgedSettings
from rpbench.models.checks import generation_length_problems, model_context
from rpbench.models.generation import GenerationSettings
from rpbench.scoring.chat.client import EndpointSettings

log = logging.getLogger(__name__)
REASONING_LENGTH = "evaluator.generalization.reasoning.max_new_tokens"
ROLES = ("critic", "reasoner")  # the estimators always named; plain_critic is optional
JudgeValue = bool | int | float | str | None  # a judge of the ensemble changes the judge group's scalar settings


def judge_configs(judge: EndpointSettings, judges: Sequence[Mapping[str, JudgeValue]]) -> list[EndpointSettings]:
    """The ensemble: ``judge`` with each entry of ``evaluator.judges`` over it (none: ``judge``)."""
    if not judges:
        return [judge]
    return [
        EndpointSettings.parse({**judge.plain(), **over}, f"evaluator.judges[{i}]") for i, over in enumerate(judges)
    ]


def generated_reasoning(
    reasoner,
    tokenizer,
    prompts: RemidPrompts,
    examples: Sequence[EvalExample],
    options: GenerationSettings,
    out_dir: Path,
) -> dict[str, str]:
    """r from x alone with the reasoner (its thought prompt, no golden response), kept in reasoning.jsonl."""
    from rpbench.eval.generate import generate_predictions

    asked = [replace(e, prompt=tuple(prompts.thought(RolePlayInput(**e.meta["x"])))) for e in examples]
    generate_predictions(
        reasoner,
        tokenizer,
        asked,
        out_dir / "reasoning.jsonl",
        options,
        what="rpgbench reasoning r (reasoner)",
        key=REASONING_LENGTH,
    )
    by_id = {row["id"]: row["prediction"] for row in read_jsonl(out_dir / "reasoning.jsonl")}
    empty = [e.id for e in examples if not by_id[e.id].strip()]
    if empty:
        raise ValueError(f"the reasoner wrote empty reasoning for {len(empty)} records (first: {empty[:5]})")
    return {e.id: by_id[e.id] for e in examples}


def sampled_responses(
    model,
    tokenizer,
    examples: Sequence[EvalExample],
    entropy: EntropySettings,
    path: Path,
    options: GenerationSettings,
    role: str,
) -> dict[str, list[str]]:
    """``entropy.samples`` responses per record at temperature 1, no top-p / top-k / repetition penalty, in the
    model's own chat template, neither cut at stop strings nor tags (an estimate of H(p(· | x)) needs the
    model's own distribution, scored under its own template), seeded; kept in ``path``. ``role``: whose
    samples (the progress bar's label)."""
    from rpbench.eval.generate import generate_predictions

    copies = [replace(e, id=f"{e.id}#{j}") for e in examples for j in range(entropy.samples)]
    sampling = replace(
        options,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.0,
        chat_template=None,
        generation_prompt=True,
        stop=(),
        reply_tag=None,
        max_new_tokens=entropy.max_new_tokens,
        seed=entropy.seed,
    )
    what, key = f"rpgbench entropy samples ({role})", "evaluator.generalization.entropy.max_new_tokens"
    generate_predictions(model, tokenizer, copies, path, sampling, what=what, key=key)
    drawn: dict[str, list[str]] = {}
    for row in read_jsonl(path):
        drawn.setdefault(row["id"].rsplit("#", 1)[0], []).append(row["prediction"])
    return drawn


def encoder_problems(generalization: GeneralizationSettings) -> list[str]:
    """The JS encoder is available locally, or its fallback was chosen (``embed.encoder_problem``)."""
    from rpbench.eval.generalization.embed import encoder_problem

    g = generalization
    problem = encoder_problem(g.encoder, g.encoder_fallback, "evaluator.generalization.encoder")
    return [] if problem is None else [problem]


def _test_splits(data: DataSettings) -> str:
    """``data.test_splits=[...], `` when the data is RPGBench's (its reader's test splits), else nothing."""
    return f"data.test_splits={list(data.options.test_splits)}, " if isinstance(data.options, RPGBenchOptions) else ""


@dataclass(frozen=True, kw_only=True)
class RPGBenchSettings(JudgedSettings):
    judges: tuple[Mapping[str, JudgeValue], ...]  # the ensemble: each judge's settings over the judge group's
    critic: str | None  # the R-EMID estimators: a CoRL run folder, a model folder, a conf/model name, or self
    reasoner: str | None
    critic_adapters: tuple[str, ...]  # LoRA adapter folders merged in this order
    reasoner_adapters: tuple[str, ...]
    plain_critic: str | None  # a critic trained without r (the paper's naive EMI); None: none
    plain_critic_adapters: tuple[str, ...]
    generalization: GeneralizationSettings


class RPGBench(Benchmark):
    headlines = (Headline("WinRate", ("winrate", "overall"), "winrate", "verdicts", needs="a judge: judge=<backend>"),)
    judged = True
    settings_class = RPGBenchSettings

    def summary_lines(self, results: Mapping[str, Any]) -> list[str]:
        """The paper's two numbers per shift type: the ensemble WinRate (with its verdict count) and R-EMID (with
        its record count); both point estimates, the results hold no CI of either."""
        lines = []
        if "winrate" in results:
            winrate = results["winrate"]
            overall = winrate["overall"]
            by_shift = ", ".join(f"{shift} {_number(g['winrate'])}" for shift, g in winrate["by_shift"].items())
            lines.append(
                f"WinRate by shift type: {by_shift} ({overall['judged']} of {overall['n']} verdicts, "
                f"{overall['n_judges']} judge(s); no CI computed)"
            )
        if "by_shift" not in results:
            return [*lines, "R-EMID: none (evaluator.generalization.enabled=false)"]
        shifted = {shift: g for shift, g in results["by_shift"].items() if "r_emid" in g}
        by_shift = ", ".join(f"{shift} {_number(g['r_emid'])} (n={g['n']})" for shift, g in shifted.items())
        return [
            *lines,
            f"R-EMID by shift type: {by_shift} (point estimates: no CI computed; per category in report.md)",
        ]

    def judge_requests(self, settings: RPGBenchSettings, examples: Sequence[EvalExample]) -> list[int]:
        return [2 * max(1, len(settings.judges))] * len(examples)  # each judge, both orders

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        """Task label, the category R-EMID is estimated on (IDTest, each shift subtype) and its shift type."""
        return {
            **super().groupings(examples),
            "category": [e.meta["category"] for e in examples],
            "shift": [e.meta["shift"] for e in examples],
        }

    def problems(self, settings: RPGBenchSettings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        """Each judge of the ensemble is a judge's settings over the judge group's; the estimator pair is named
        (and usable) and the JS encoder is there (or its fallback chosen) when the generalization analysis is on."""
        found: list[str] = []
        for i, over in enumerate(settings.judges if judge is not None else ()):
            EndpointSettings.collect({**judge.plain(), **over}, f"evaluator.judges[{i}]", found)
        if not settings.generalization.enabled:  # the estimator pair across groups: validate's view
            return found
        options = data.options  # the rpgbench reader's test splits (conf/data/rpgbench.yaml)
        splits = options.test_splits if isinstance(options, RPGBenchOptions) else None
        if splits is not None and (ID_CATEGORY not in splits or set(splits) <= {ID_CATEGORY}):
            found.append(
                f"data.test_splits={list(splits)}: the R-EMID analysis (evaluator.generalization.enabled) compares "
                f"the in-distribution split {ID_CATEGORY} with shifted ones (e.g. {', '.join(TEST_SPLITS[1:])}): "
                "read both, or set evaluator.generalization.enabled=false"
            )
        for role in ("critic", "reasoner", "plain_critic"):
            if role == "plain_critic" and settings.plain_critic is None:
                continue
            try:
                spec = resolve_spec(role, getattr(settings, role), getattr(settings, f"{role}_adapters"))
            except ConfigError as error:
                found.append(str(error))
                continue
            if role == "reasoner" and spec.model_cfg is not None:  # its thoughts must fit its context
                length = settings.generalization.reasoning.max_new_tokens
                found += generation_length_problems(
                    length, model_context(spec.model_cfg), REASONING_LENGTH, spec.model_cfg.name
                )
        return found + encoder_problems(settings.generalization)

    def record_problems(
        self, settings: RPGBenchSettings, data: DataSettings, examples: Sequence[EvalExample]
    ) -> list[str]:
        """The generalization analysis compares IDTest with each shifted category: at least 2 test records in
        each (an estimate over pairs), IDTest and one shifted category at least."""
        if not settings.generalization.enabled:
            return []
        where = f"data.files.test={data.files.get('test')}"
        no_category = next((e.id for e in examples if "category" not in e.meta), None)
        if no_category is not None:
            return [f"{where}: test record {no_category!r} has no RPGBench category (data.format=rpgbench reads them)"]
        splits: dict[str, set[str]] = {}
        for e in examples:
            splits.setdefault(str(e.meta["category"]), set()).add(str(e.meta["split"]))
        counts = Counter(str(e.meta["category"]) for e in examples)
        lacking = [] if counts[ID_CATEGORY] else [f"no {ID_CATEGORY} records (split {ID_CATEGORY})"]
        lacking += [] if set(counts) - {ID_CATEGORY} else [f"no shifted records (splits {', '.join(TEST_SPLITS[1:])})"]
        lacking += [f"{n} {c} record (split {'/'.join(sorted(splits[c]))})" for c, n in counts.items() if n < 2]
        if not lacking:
            return []
        return [
            f"{where}: the R-EMID analysis (evaluator.generalization.enabled) needs at least 2 test records of "
            f"{ID_CATEGORY} and of each shifted category, and one shifted category at least; read: "
            f"{'; '.join(lacking)} ({_test_splits(data)}data.max_test_samples="
            f"{data.max_test_samples}; or evaluator.generalization.enabled=false)"
        ]

    def scored_predictions(self, predictions: Mapping[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
        """Predictions without their think block, and the counts per reading (``generated_reply``)."""
        read = {key: generated_reply(text) for key, text in predictions.items()}
        counts = {kind: sum(how == kind for _, how in read.values()) for kind in ("plain", "stripped", "unclosed")}
        return {key: reply for key, (reply, _) in read.items()}, {"think": counts}

    def judge(self, ctx: EvalContext, predictions: Mapping[str, str], prepared: Any) -> Judged:
        """``winrate``: model vs golden, both orders, per judge and as the judges' mean WinRate; overall,
        per category and per shift. The judge sees each record's character, persona and dialogue; records with
        an empty reply are left out (as from the analysis) and counted beside each tally."""
        from rpbench.scoring.judge.winrate import judge_winrate

        judges = judge_configs(ctx.judge, ctx.settings.judges)
        judged = judge_winrate(ctx.examples, predictions, judges, ctx.settings.judge_max_tokens, ctx.open_client)
        records = judged.pop("records")
        write_jsonl(ctx.out_dir / "judgements.jsonl", records)
        wins: dict[str, dict[str, list]] = {}
        for row in records:
            wins.setdefault(row["id"], {"winrate": []})["winrate"].append(row["model_won"])
        return Judged({"winrate": judged}, wins)

    def judge_tally(self, results: Mapping[str, Any]) -> JudgeTally | None:
        return tally_of(results["winrate"]["overall"]) if "winrate" in results else None

    def analyze(self, ctx: EvalContext, predictions: Mapping[str, str], results: Mapping[str, Any]) -> dict[str, Any]:
        """JS, EMI / R-EMI, EMID / R-EMID, bounds, convergence and perplexity per category; reasoning from the
        reasoner, scores from the critic; plots (JS against the judged WinRate in ``results``)."""
        import torch

        from rpbench.eval.generalization.analysis import CONDITIONS, Critic, EntropyInputs, analyze, entropy_prompts
        from rpbench.eval.generalization.embed import load_text_embedder
        from rpbench.eval.generalization.estimator import load_estimator, provenance
        from rpbench.eval.generalization.provenance import analysis_provenance
        from rpbench.models.loading import chat_renderer

        ev, g = ctx.settings, ctx.settings.generalization
        model, tokenizer, examples, out_dir = ctx.model, ctx.tokenizer, ctx.examples, ctx.out_dir
        prompts = remid_prompts(ctx.prompts_source)
        added: dict[str, Any] = {"prompts": prompts.records()}  # the policy's prompt is among them, analysed or not
        if not g.enabled:
            return added
        specs = {role: resolve_spec(role, getattr(ev, role), getattr(ev, f"{role}_adapters")) for role in ROLES}
        if ev.plain_critic is not None:
            specs["plain_critic"] = resolve_spec("plain_critic", ev.plain_critic, ev.plain_critic_adapters)
        critic_spec, reasoner_spec = specs["critic"], specs["reasoner"]
        entropy = g.entropy
        if model is None and (any(spec.model_cfg is None for spec in specs.values()) or entropy.samples):
            raise ValueError(
                "evaluator=rpgbench with backend=endpoint: the generalization analysis needs the evaluated model "
                "in-process for critic=self and for Ĥ (entropy.samples > 0); use backend=local, or a fixed critic "
                "and entropy.samples=0"
            )
        estimators = {role: provenance(spec) for role, spec in specs.items()}
        device = model.device if model is not None else torch.device("cpu")
        generation = ev.generation
        reasoner, reasoner_tokenizer = load_estimator(reasoner_spec, device)
        reasoning_options = g.reasoning
        reasoning = generated_reasoning(reasoner, reasoner_tokenizer, prompts, examples, reasoning_options, out_dir)
        del reasoner

        def scorer(spec) -> Critic:
            if spec.model_cfg is None:
                scoring_model, scoring_tokenizer, scoring_cfg = model, tokenizer, ctx.model_config
            else:
                (scoring_model, scoring_tokenizer), scoring_cfg = load_estimator(spec, device), spec.model_cfg
            renderer = chat_renderer(scoring_cfg, scoring_tokenizer, g.critic_max_length)
            return Critic(scoring_model, renderer, prompts, spec.description, spec.model_cfg is None)

        critic = scorer(critic_spec)
        plain_critic = scorer(specs["plain_critic"]) if "plain_critic" in specs else None
        critic_model, critic_tokenizer = critic.model, critic.renderer.tokenizer
        sampled = entropy_prompts(examples, entropy)
        inputs = None
        if sampled:
            own = sampled_responses(
                model,
                tokenizer,
                sampled,
                entropy,
                out_dir / "entropy_samples.jsonl",
                replace(generation, max_prompt_length=ctx.data.max_prompt_length),
                "evaluated model",
            )
            with_r = [replace(e, prompt=tuple(critic.context(e, reasoning[e.id]))) for e in sampled]
            critics = sampled_responses(
                critic_model,
                critic_tokenizer,
                with_r,
                entropy,
                out_dir / "critic_samples.jsonl",
                replace(generation, max_prompt_length=g.critic_max_length),
                "critic",
            )
            renderer = chat_renderer(ctx.model_config, tokenizer, ctx.data.max_length)
            inputs = EntropyInputs(model, renderer, own, critics)
        embedder = load_text_embedder(g.encoder, g.layer, g.max_length, g.pooling, g.encoder_fallback, str(device))
        settings = g.analysis()
        decoding = f"temperature {reasoning_options.temperature}" if reasoning_options.temperature else "greedy"
        decoding += f", repetition penalty {reasoning_options.repetition_penalty}"
        decoding += f", chat template {reasoning_options.chat_template or 'its own'}"
        source = f"the reasoner ({reasoner_spec.description}), {decoding}"
        analysis = analyze(examples, predictions, critic, embedder, settings, reasoning, source, inputs, plain_critic)
        tables = [name for names in CONDITIONS.values() for name in names[:2]]
        top = ("jsd", *tables, "bound", "bound_emid_code", "entropy", "perplexity", "by_shift")
        added["generalization"] = {k: v for k, v in analysis.items() if k not in top}
        added["generalization"]["provenance"] = analysis_provenance(
            estimators,
            embedder.describe(),
            added["prompts"],
            analysis["settings"],
            asdict(reasoning_options),
            g.critic_max_length,
        )
        added.update({key: analysis[key] for key in top if key in analysis})
        plot_severity({**results, **added}, ctx.run_name, out_dir / "js_vs_winrate.png")
        plot_convergence(analysis["convergence"], ctx.run_name, out_dir / "bound_convergence.png")
        return added

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        return report_sections(results)


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


BENCHMARKS.register("rpgbench")(RPGBench())
