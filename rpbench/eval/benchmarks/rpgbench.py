"""RPGBench: reference metrics per subset tag and per distribution shift; WinRate against the golden
responses from a judge ensemble (position-swapped); the generalization analysis (JS per shift,
EMI / EMID, R-EMI / R-EMID, the bound in its scale-adjusted form and with Ĥ estimated from samples,
its convergence, ground-truth perplexity; see ``rpbench.eval.generalization.analysis``) with the
evaluated model as critic."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from rpbench.data.records import EvalExample, Turn
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark, as_container, read_jsonl, write_jsonl
from rpbench.eval.benchmarks.rpgbench_report import plot_convergence, plot_severity, report_sections

if TYPE_CHECKING:
    from rpbench.eval.generalization.analysis import EntropySettings

log = logging.getLogger(__name__)

REASONING_INSTRUCTION = (
    "Before the agent replies: describe in two or three sentences the core features the agent's next "
    "response should have (content, tone, character traits). Do not write the response itself."
)


def judge_configs(cfg: DictConfig) -> list[dict[str, Any]]:
    """The ensemble: ``cfg.judge`` with each entry of ``evaluator.judges`` merged over it (none: ``cfg.judge``)."""
    overrides = list(cfg.evaluator.judges) or [{}]
    return [as_container(OmegaConf.merge(cfg.judge, override)) for override in overrides]


def generated_reasoning(cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], out_dir: Path) -> list[str]:
    """r from x alone with the evaluated model (``reasoning_generator: self``), kept in reasoning.jsonl."""
    from rpbench.eval.generate import generate_predictions

    asked = [
        replace(e, prompt=(*e.prompt[:-1], Turn("user", f"{e.prompt[-1].content}\n\n{REASONING_INSTRUCTION}")))
        for e in examples
    ]
    options = as_container(cfg.evaluator.generation)
    options.setdefault("max_prompt_length", int(cfg.data.max_prompt_length))
    generate_predictions(model, tokenizer, asked, out_dir / "reasoning.jsonl", options)
    by_id = {row["id"]: row["prediction"] for row in read_jsonl(out_dir / "reasoning.jsonl")}
    empty = [e.id for e in examples if not by_id[e.id].strip()]
    if empty:
        raise ValueError(f"the reasoning generator wrote empty reasoning for {len(empty)} records (first: {empty[:5]})")
    return [by_id[e.id] for e in examples]


def own_samples(
    cfg: DictConfig, model, tokenizer, examples: Sequence[EvalExample], entropy: EntropySettings, out_dir: Path
) -> dict[str, list[str]]:
    """``entropy.samples`` responses per record from the evaluated model at temperature 1, no top-p / top-k
    (an estimate of H(P_θ(· | x)) needs the model's own distribution), seeded; kept in entropy_samples.jsonl."""
    from rpbench.eval.generate import generate_predictions

    copies = [replace(e, id=f"{e.id}#{j}") for e in examples for j in range(entropy.samples)]
    options = {
        **as_container(cfg.evaluator.generation),
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": entropy.max_new_tokens,
        "seed": entropy.seed,
    }
    options.setdefault("max_prompt_length", int(cfg.data.max_prompt_length))
    generate_predictions(model, tokenizer, copies, out_dir / "entropy_samples.jsonl", options)
    drawn: dict[str, list[str]] = {}
    for row in read_jsonl(out_dir / "entropy_samples.jsonl"):
        drawn.setdefault(row["id"].rsplit("#", 1)[0], []).append(row["prediction"])
    return drawn


class RPGBench(Benchmark):
    judged = True

    def groupings(self, examples: Sequence[EvalExample]) -> dict[str, list]:
        """Task label, and the shift each subset tag belongs to (in distribution, user, character, ...)."""
        return {**super().groupings(examples), "shift": [e.meta["shift"] for e in examples]}

    def judge(
        self,
        cfg: DictConfig,
        examples: Sequence[EvalExample],
        predictions: Mapping[str, str],
        out_dir: Path,
        prepared: Any,
        results: dict[str, Any],
        scores: list[dict[str, Any]],
    ) -> None:
        """``winrate``: model vs golden, both orders, per judge and as the judges' mean WinRate; overall,
        per category and per shift. The judge sees each record's character, persona and dialogue."""
        from rpbench.scoring.judge import JudgeConfig
        from rpbench.scoring.judge.health import parse_failure_warning
        from rpbench.scoring.judge.winrate import judge_winrate

        judged = judge_winrate(examples, predictions, judge_configs(cfg))
        records = judged.pop("records")
        write_jsonl(out_dir / "judgements.jsonl", records)
        overall = judged["overall"]
        limit = JudgeConfig.from_mapping(as_container(cfg.judge)).warn_parse_failure_rate
        warning = parse_failure_warning(overall["parse_failures"], overall["n"], limit)
        if warning:
            judged["warning"] = warning
        results["winrate"] = judged
        wins: dict[str, list] = {}
        for row in records:
            wins.setdefault(row["id"], []).append(row["model_won"])
        for row in scores:
            row["verdicts"] = {"winrate": wins[row["id"]]}

    def analyze(
        self,
        cfg: DictConfig,
        model,
        tokenizer,
        examples: Sequence[EvalExample],
        predictions: Mapping[str, str],
        out_dir: Path,
        results: dict[str, Any],
    ) -> None:
        """JS, EMI / R-EMI, EMID / R-EMID, bound, convergence and perplexity into ``results``; plots."""
        from rpbench.eval.generalization.analysis import (
            AnalysisSettings,
            EntropySettings,
            analyze,
            entropy_prompts,
            record_reasoning,
        )
        from rpbench.eval.generalization.embed import load_text_embedder
        from rpbench.models.loading import chat_renderer

        g = cfg.evaluator.generalization
        if not g.enabled:
            return
        if model is None:
            raise ValueError("evaluator=rpgbench: the generalization analysis scores with the model (backend=local)")
        reasoning, source = record_reasoning(examples), "records' reasoning field"
        if reasoning is None and g.reasoning_generator == "self":
            reasoning, source = (
                generated_reasoning(cfg, model, tokenizer, examples, out_dir),
                "generated by the evaluated model",
            )
        elif reasoning is None and g.reasoning_generator is not None:
            raise ValueError(
                f"evaluator.generalization.reasoning_generator={g.reasoning_generator!r}: choose null or self"
            )
        elif reasoning is None:
            source = "none: no reasoning field and no reasoning generator, so plain EMI / EMID only (no R-EMI)"
        embedder = load_text_embedder(g.encoder, int(g.layer), int(g.max_length), str(model.device))
        settings = AnalysisSettings(
            str(g.weighting),
            str(g.delta_form),
            int(g.n_negatives),
            int(g.seed),
            int(g.max_pairs_n),
            int(g.batch_size),
            [int(n) for n in g.convergence_sizes],
            int(g.convergence_repeats),
            EntropySettings(
                int(g.entropy.samples),
                int(g.entropy.max_new_tokens),
                None if g.entropy.max_prompts is None else int(g.entropy.max_prompts),
                int(g.entropy.seed),
            ),
        )
        sampled = entropy_prompts(examples, settings.entropy)
        drawn = own_samples(cfg, model, tokenizer, sampled, settings.entropy, out_dir) if sampled else None
        renderer = chat_renderer(cfg.model, tokenizer, int(cfg.data.max_length))
        model.eval()
        analysis = analyze(examples, predictions, model, renderer, embedder, settings, reasoning, source, drawn)
        top = ("jsd", "emi", "emid", "r_emi", "r_emid", "bound", "bound_estimated", "entropy", "perplexity")
        results["generalization"] = {k: v for k, v in analysis.items() if k not in top}
        for key in top:
            if key in analysis:
                results[key] = analysis[key]
        plot_severity(results, out_dir / "js_vs_winrate.png")
        plot_convergence(analysis["convergence"], out_dir / "bound_convergence.png")

    def report_sections(self, results: Mapping[str, Any]) -> list[str]:
        return report_sections(results)


BENCHMARKS.register("rpgbench")(RPGBench())
