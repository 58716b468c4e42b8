"""The synthesis run: the configured stages in order, each resumable, then the RoleMRC files and the summary.

Files in ``out_dir``: ``personas.jsonl``, ``profiles.jsonl`` (+ ``profiles_rejected.jsonl``),
``retrieval.jsonl``, ``dialogues.jsonl`` (+ ``dialogues_rejected.jsonl``), the RoleMRC files
``rolemrc_train-sft.jsonl``, ``rolemrc_train-rl.jsonl``, ``rolemrc_test.jsonl``, and ``synthesis.json``:
per stage what it planned, wrote, rejected (by reason) and failed, requests, cache hits, tokens and cost in
this run and over all runs; the templates' origin and sha256; the encoder; the counts per label read back by
rpbench's RoleMRC readers; the train/test overlap.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rpbench.core.atomic import partial_path, publish
from rpbench.core.errors import ConfigError, RpbenchError
from rpbench.core.progress_bar import progress_bar
from rpbench.data.files import package_path
from rpbench.data.hygiene import check_overlap
from rpbench.data.readers import STRICT
from rpbench.data.rolemrc import RoleMRCOptions, read_pairs, read_sft, read_test
from rpbench.data.templates import Template
from rpbench.scoring.chat import ChatClient, ChatRequest, EndpointSettings, LocalServer, open_client
from rpbench.synth import dialogues
from rpbench.synth.calls import USAGE_KEYS, NothingAccepted, StageTally, Task, run_tasks
from rpbench.synth.config import SynthSettings
from rpbench.synth.personas import sample_personas
from rpbench.synth.profiles import check_profile, retrieval_text
from rpbench.synth.prompts import synthesis_templates
from rpbench.synth.retrieval import load_encoder, open_pool_index, retrieve
from rpbench.synth.stagefile import StageFile

log = logging.getLogger(__name__)

SUMMARY = "synthesis.json"
OUTPUTS = {"train": "rolemrc_train-sft.jsonl", "pairs": "rolemrc_train-rl.jsonl", "test": "rolemrc_test.jsonl"}
PAPER_ENCODER = "Salesforce/SFR-Embedding-Mistral"


def write_json(path: Path, data: Any) -> None:
    partial = partial_path(path)
    partial.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    publish(partial, path)


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    partial = partial_path(path)
    partial.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    publish(partial, path)


class Run:
    """One synthesis run over ``out_dir``; ``client`` is None when no stage asks the generator."""

    def __init__(
        self,
        config: SynthSettings,
        client: ChatClient | None,
        templates: Mapping[str, Template],
        seed: int,
        progress: bool,
    ):
        self.config, self.client, self.templates, self.seed, self.progress = config, client, templates, seed, progress
        self.out = Path(config.out_dir)
        self.spent_usd = 0.0

    def file(self, name: str) -> StageFile:
        return StageFile(self.out / f"{name}.jsonl")

    def ask(self, stage: str, tasks: list[Task], tries: int) -> StageTally:
        accepted, rejected = self.file(stage), self.file(f"{stage}_rejected")
        tally = run_tasks(
            self.client,
            stage,
            tasks,
            accepted,
            rejected,
            tries=tries,
            batch_size=self.config.batch_size,
            budget_usd=self.config.budget_usd,
            spent_before_usd=self.spent_usd,
            reask=self.templates["reask"].text,
            progress=self.progress,
        )
        self.spent_usd += tally.usage["cost_usd"]
        return tally

    def check_outcome(self, stage: str, result: Mapping[str, Any]) -> None:
        """After a stage's summary is written: failed requests and a stage that kept nothing are errors,
        rejected replies a warning with their reasons."""
        if result["failed_requests"]:
            raise RpbenchError(
                f"stage {stage}: {result['failed_requests']} requests got no reply after the generator's retries "
                f"(judge.max_retries; first: {result['first_error']}); rerun the same command to ask them again "
                "(done items are kept)"
            )
        reasons = ", ".join(f"{name} x{n}" for name, n in result["rejection_reasons"].items())
        if result["rejected"] and not self.file(stage).records():
            raise NothingAccepted(
                f"stage {stage}: 0 of {result['planned']} items accepted (rejected replies: {reasons}): the "
                f"generator cannot follow the format; its replies are in {self.out / f'{stage}_rejected.jsonl'}"
            )
        if result["rejected"]:
            log.warning(
                "synthesis: stage %s: %d of %d items rejected after every try (rejected replies: %s); see %s",
                stage,
                result["rejected"],
                result["planned"],
                reasons,
                self.out / f"{stage}_rejected.jsonl",
            )

    def personas(self) -> list[dict[str, Any]]:
        path = self.out / "personas.jsonl"
        if not path.is_file():
            raise ConfigError(f"{path}: no personas yet; run stage personas first")
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def profiles(self) -> list[dict[str, Any]]:
        wanted = {p["id"] for p in self.personas()}
        return [p for p in self.file("profiles").records() if p["id"] in wanted]

    def why_no_retrieved_profiles(self) -> str:
        """What the profiles and retrieval stages left, when no profile has retrieved triplets."""
        accepted, rejected = len(self.profiles()), len(self.file("profiles_rejected").records())
        if accepted:
            return f"none of the {accepted} accepted profiles has retrieved triplets: run stage retrieval first"
        if rejected:
            return (
                f"0 of {rejected} profiles accepted: the generator cannot follow the format; its replies are in "
                f"{self.out / 'profiles_rejected.jsonl'}"
            )
        return "no profiles yet: run stages profiles and retrieval first"

    # -- stages ------------------------------------------------------------------------------------------
    def stage_personas(self) -> dict[str, Any]:
        sampled, counts = sample_personas(package_path(self.config.personas_file), self.config.n_personas, self.seed)
        write_jsonl(self.out / "personas.jsonl", sampled)
        return {"sampled": len(sampled), **counts}

    def stage_profiles(self) -> dict[str, Any]:
        template = self.templates["profile"]
        tasks = [
            Task(
                p["id"],
                ChatRequest(
                    ({"role": "user", "content": template.render(persona=p["persona"])},),
                    self.config.max_tokens["profile"],
                    f"{template.name}:{template.sha256[:16]}",
                ),
                check_profile,
                {"persona": p["persona"]},
            )
            for p in self.personas()
        ]
        return self.ask("profiles", tasks, self.config.profile_tries).as_dict()

    def stage_retrieval(self) -> dict[str, Any]:
        out = self.file("retrieval")
        pending = [p for p in self.profiles() if p["id"] not in out.done]
        encoder = load_encoder(self.config.encoder)
        index, built = open_pool_index(
            package_path(self.config.pool_file), encoder, self.config.embed_batch_size, folder=self.config.index_dir
        )
        with progress_bar(desc="retrieval", total=len(pending), unit="profile", disable=not self.progress) as bar:
            for start in range(0, len(pending), self.config.batch_size):
                batch = pending[start : start + self.config.batch_size]
                texts = [retrieval_text(p["profile"]) for p in batch]
                out.append(retrieve(index, encoder, batch, texts, self.config.top_k, self.config.embed_batch_size))
                bar.update(len(batch))
        return {
            "profiles": len(pending),
            "pool_records": len(index),
            "index": "built" if built else "reused",
            "encoder": encoder.name,
            "paper_encoder": PAPER_ENCODER,
            "faiss_gpu": index.on_gpu,
        }

    def stage_dialogues(self) -> dict[str, Any]:
        retrieved = {r["id"]: r for r in self.file("retrieval").records()}
        profiles = [p for p in self.profiles() if p["id"] in retrieved]
        if not profiles:
            raise ConfigError(f"{self.out}: stage dialogues: {self.why_no_retrieved_profiles()}")
        order = sorted(p["id"] for p in profiles)
        random.Random(f"{self.seed}:test_profiles").shuffle(order)
        n_test = round(self.config.test_fraction * len(order))
        test_ids = set(order[:n_test])
        train = [p for p in profiles if p["id"] not in test_ids]
        test = [p for p in profiles if p["id"] in test_ids]
        table, paper = self.config.table2_single_label, self.config.paper_profiles
        planned, short = dialogues.plan(
            train,
            retrieved,
            dialogues.category_counts(table, paper, len(train), list(dialogues.LABELS)),
            "train",
            self.seed,
        )
        if test:
            test_items, test_short = dialogues.plan(
                test, retrieved, dialogues.category_counts(table, paper, len(test), dialogues.MRC), "test", self.seed
            )
            planned += test_items
            short = {f"train.{k}": v for k, v in short.items()} | {f"test.{k}": v for k, v in test_short.items()}
        builder = dialogues.Builder(self.templates, self.config.max_tokens, self.config.chat_exchanges, self.seed)
        by_id = {p["id"]: p for p in profiles}
        tasks = [builder.task(item, by_id[item.profile_id]["profile"], retrieved[item.profile_id]) for item in planned]
        tally = self.ask("dialogues", tasks, self.config.dialogue_tries)
        return {
            "profiles": {"train": len(train), "test": len(test)},
            "planned_per_category": dict(Counter(f"{i.split}.{i.category}" for i in planned)),
            "short_of_eligible_profiles": short,
            **tally.as_dict(),
            "_ids": [i.id for i in planned],  # for assemble; not part of the summary
        }

    # -- outputs -----------------------------------------------------------------------------------------
    def assemble(self, planned_ids: list[str], rolemrc: RoleMRCOptions) -> dict[str, Any]:
        """The RoleMRC files from the written dialogues, read back by rpbench's readers, and the overlap."""
        wanted = set(planned_ids)
        written = [r for r in self.file("dialogues").records() if r["id"] in wanted]
        files = {
            "train": [{"id": r["id"], **r["sft"]} for r in written if r["split"] == "train"],
            "pairs": [{"id": r["id"], **r["pair"]} for r in written if r["split"] == "train" and "pair" in r],
            "test": [{"id": r["id"], **r["test"]} for r in written if r["split"] == "test" and "test" in r],
        }
        read: dict[str, Any] = {}
        readers: dict[str, Callable] = {"train": read_sft, "pairs": read_pairs, "test": read_test}
        examples = {}
        for split, records in files.items():
            path = self.out / OUTPUTS[split]
            if not records:  # e.g. no test profiles (test_fraction=0): no file, rather than an unreadable empty one
                path.unlink(missing_ok=True)
                examples[split], read[split] = [], {"file": None, "records": 0, "per_label": {}}
                continue
            write_jsonl(path, records)
            result = readers[split](path, rolemrc, STRICT)
            examples[split] = result.examples
            read[split] = {
                "file": OUTPUTS[split],
                "records": len(result.examples),
                "per_label": dict(sorted(Counter(r["task"] for r in records).items())),
            }
        against = self.config.overlap_test_file
        if against is None:
            test_examples, test_name = examples["test"], read["test"]["file"]
        else:  # named by its file name: no machine path in the summary
            test_examples, test_name = read_test(against, rolemrc, STRICT).examples, Path(against).name
        overlap = {
            "test_file": test_name,
            **{
                split: check_overlap(
                    examples[split],
                    test_examples,
                    allow_overlap=self.config.allow_overlap,
                    train_name=OUTPUTS[split],
                    test_name=str(test_name),
                )
                for split in ("train", "pairs")
            },
        }
        return {"files": read, "overlap": overlap}


def _accumulated(previous: Mapping[str, Any] | None, this_run: Mapping[str, Any]) -> dict[str, float]:
    before = (previous or {}).get("all_runs", {})
    return {k: round(before.get(k, 0) + this_run.get(k, 0), 6) for k in USAGE_KEYS if k in this_run}


def synthesize(
    config: SynthSettings,
    judge: EndpointSettings | None,
    *,
    seed: int,
    prompts_source: str | None,
    rolemrc: RoleMRCOptions,
    local_judge_server: LocalServer | None = None,
) -> dict[str, Any]:
    """Run ``config.stages`` and write ``synthesis.json``; returns the summary. ``judge``: the generator (None:
    judge=none, for the stages that ask nothing); ``local_judge_server`` serves a ``judge=local`` generator
    (``rpbench.serve.running.local_judge``; None: no local generator)."""
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / SUMMARY
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"stages": {}}
    templates = synthesis_templates(prompts_source)
    summary.update(
        generator={"backend": judge.backend, "model": judge.model} if judge else {"backend": "none", "model": None},
        seed=seed,
        templates={name: t.record() for name, t in templates.items()},
    )
    asks = any(s in config.stages for s in ("profiles", "dialogues"))
    progress = judge is not None and judge.progress  # judge=none: the retrieval stage alone, no bar
    opened = open_client(replace(judge, progress=False), local_judge_server) if asks else nullcontext(None)
    with opened as client:
        run = Run(config, client, templates, seed, progress)
        for stage in config.stages:
            log.info("synthesis: stage %s", stage)
            result = getattr(run, f"stage_{stage}")()
            planned_ids = result.pop("_ids", None)
            if "requests" in result:
                this_run = {k: result.pop(k) for k in USAGE_KEYS}
                result["usage"] = {
                    "this_run": this_run,
                    "all_runs": _accumulated(summary["stages"].get(stage, {}).get("usage"), this_run),
                }
            summary["stages"][stage] = result
            write_json(summary_path, summary)
            if "usage" in result:  # a stage that asked the generator
                run.check_outcome(stage, result)
            if planned_ids is not None:
                summary["output"] = run.assemble(planned_ids, rolemrc)
                write_json(summary_path, summary)
    log.info("synthesis written to %s (summary: %s)", out, SUMMARY)
    return summary


@dataclass(frozen=True, kw_only=True)
class SynthesisRun:
    """``task=synthesize`` as ``validate`` parses it: the recipe (``synth``), the generator (the judge group;
    None: judge=none), ``seed``, ``prompts.source`` and the RoleMRC test labels of ``data``."""

    synth: SynthSettings
    judge: EndpointSettings | None
    seed: int
    prompts_source: str | None
    rolemrc: RoleMRCOptions  # the RoleMRC data config's options: its test labels' rubrics


def synthesize_run(run: SynthesisRun, local_judge_server: LocalServer | None = None) -> dict[str, Any]:
    """``task=synthesize``; ``local_judge_server`` serves ``judge=local`` (run.py hands in rpbench's server)."""
    return synthesize(
        run.synth,
        run.judge,
        seed=run.seed,
        prompts_source=run.prompts_source,
        rolemrc=run.rolemrc,
        local_judge_server=local_judge_server,
    )
