"""CoRL: co-evolving GRPO of a reasoning generator q1(r | x) and a dialogue policy q2(y | x, r) (R-EMID paper).

Training alternates phases, ``iterations`` times: a **reasoner phase** of ``reasoner_steps`` optimiser
steps, then a **dialogue phase** of ``dialogue_steps``. Each phase is GRPO (grpo.py's update,
``optimise_policy``) of one model with its own optimiser and learning-rate schedule; the phase of a step
is derived from the optimiser-step count (``trainer.global_step`` counts both optimisers' steps), so a
resumed run continues in the right phase.

- Reasoner phase: q1 samples G thoughts from the thought prompt of x (no golden response); rewards
  ``reasoner_rewards`` (paper: format, length, exp of q2's mean log-prob of the golden response given x
  and the thought's core features, under the CURRENT q2).
- Dialogue phase: each prompt's reasoning r is generated once per iteration by the current q1
  (``reasoning_temperature``, 0 = greedy; written to ``<run>/corl/reasoning_iter<k>.jsonl``), q2 samples
  G replies to x + r's core features; rewards ``dialogue_rewards`` (paper: ``## Agent Response`` format,
  and the judge's clipped likelihood ratio of "100%" for the reply against the golden response).

Models (``shared_base``): false, two models (``models_to_build``: ``dialogue`` first, the evaluated one,
then ``reasoner``, from ``reasoner_init_from`` when set), exported to ``model/dialogue`` and
``model/reasoner``; true, one base with two LoRA adapters (peft's ``default`` for the dialogue policy,
``reasoner``) switched per phase with ``set_adapter``, exported the same way. The judge is the model the
dialogue policy starts from without LoRA (``judge_model: null``: its LoRA-disabled base, or a frozen copy
of a fully fine-tuned one), or a model loaded from ``judge_model`` (the paper: the raw base model) that
shares the dialogue tokenizer. There is no KL term (the paper's beta = 0).

Where the authors' recipe differs (INFERRED or left out): the authors run each phase as a separate
script with an SFT of q2 on the generated thoughts (``RLMid_SFT_model_pxy``) before the dialogue phase of
iteration 1; rpbench leaves that SFT out (the cold-start SFT is the warm start, see
experiments/rpgbench/README.md). The thoughts given to q2 are INFERRED to be greedy (the authors'
generation script is missing; their R-EMI thought collection is greedy).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import nn

from rpbench.core.atomic import partial_path, publish
from rpbench.core.distributed import all_gather_objects, rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.core.typed import Problem
from rpbench.data.chat import ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.data.records import Turn
from rpbench.data.remid_prompts import RemidPrompts, RolePlayInput, remid_prompts
from rpbench.models import save_hf
from rpbench.models.forward import sequence_logps
from rpbench.models.generation import GenerationSettings, decode_completion, default_stop_ids, synced_gpus_needed
from rpbench.models.settings import ModelSettings
from rpbench.objectives.base import ObjectiveModule
from rpbench.objectives.config import once_per_key
from rpbench.objectives.grpo import (
    GroupSamplingSettings,
    GRPOModule,
    UpdateSettings,
    optimise_policy,
    prompt_and_reference,
    rollout_metrics,
)
from rpbench.objectives.reference import FrozenModel, is_peft_model, live_reference
from rpbench.objectives.registry import OBJECTIVES
from rpbench.objectives.sampling import (
    ROLLOUT_KEYS,
    Rollouts,
    generate_rows,
    generation_mode,
    repeat_each,
    rollout_options,
    sample_completions,
    sampling_seed,
)
from rpbench.scoring.chat.client import ClientOpener, open_client
from rpbench.scoring.rewards import RewardFn, build_reward_fns, reward_problems, score_rewards, weighted_sum

log = logging.getLogger(__name__)

DIALOGUE, REASONER = "dialogue", "reasoner"
ADAPTERS = {DIALOGUE: "default", REASONER: "reasoner"}  # shared base: peft adapter names
REASONING_DIR = "corl"


@dataclass(frozen=True)
class Phase:
    """Where an optimiser step lies in the schedule: iteration (from 1), phase name, the step it ends at."""

    iteration: int
    name: str
    end: int


@dataclass(frozen=True)
class Schedule:
    iterations: int
    reasoner_steps: int
    dialogue_steps: int

    @property
    def total(self) -> int:
        return self.iterations * (self.reasoner_steps + self.dialogue_steps)

    def at(self, step: int) -> Phase | None:
        """The phase of optimiser step ``step`` (counted from 0), None once the schedule is done."""
        if step >= self.total:
            return None
        period = self.reasoner_steps + self.dialogue_steps
        iteration, offset = divmod(step, period)
        start = iteration * period
        if offset < self.reasoner_steps:
            return Phase(iteration + 1, REASONER, start + self.reasoner_steps)
        return Phase(iteration + 1, DIALOGUE, start + period)


@dataclass(frozen=True, kw_only=True)
class CoRLSettings(GroupSamplingSettings):
    """conf/objective/corl.yaml."""

    shared_base: bool
    iterations: int
    reasoner_steps: int
    dialogue_steps: int
    max_prompt_length: int
    reasoner_max_completion_length: int
    dialogue_max_completion_length: int
    reasoning_temperature: float
    generation_cache: str
    gather_per_batch: bool
    reasoner_rewards: tuple[Mapping[str, Any], ...]
    dialogue_rewards: tuple[Mapping[str, Any], ...]
    score_batch_size: int
    score_max_length: int
    reasoner_init_from: str | None
    judge_model: str | None
    prompts_source: str | None

    def prompts(self) -> RemidPrompts:
        """The thought, pxy and judge templates: rpbench's, or the authors' from ``prompts.source``."""
        return remid_prompts(self.prompts_source)

    def problems(self) -> list[Problem]:
        found = super().problems()
        for key in (
            "iterations",
            "reasoner_steps",
            "dialogue_steps",
            "max_prompt_length",
            "score_batch_size",
            "score_max_length",
        ):
            if getattr(self, key) < 1:
                found.append((key, "an integer >= 1"))
        found += reward_problems(self.reasoner_rewards, "reasoner_rewards")
        found += reward_problems(self.dialogue_rewards, "dialogue_rewards")
        if self.shared_base and self.reasoner_init_from:
            found.append(("reasoner_init_from", "null with objective.shared_base=true (a reasoner of its own: false)"))
        reasoner_length = {"max_new_tokens": "reasoner_max_completion_length"}
        rollouts = [  # the phases' options share keys: each is reported once
            *self.generation(REASONER).problems_as({**ROLLOUT_KEYS, **reasoner_length}),
            *self.generation(DIALOGUE).problems_as(
                {**ROLLOUT_KEYS, "max_new_tokens": "dialogue_max_completion_length"}
            ),
            *self.reasoning_generation().problems_as(
                {**ROLLOUT_KEYS, **reasoner_length, "temperature": "reasoning_temperature"}
            ),
        ]
        return once_per_key(found, rollouts)

    def max_completion_length(self, phase: str) -> int:
        return self.reasoner_max_completion_length if phase == REASONER else self.dialogue_max_completion_length

    def generation(self, phase: str) -> GenerationSettings:
        """How a phase's completions are sampled."""
        return rollout_options(
            max_new_tokens=self.max_completion_length(phase),
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            cache=self.generation_cache,
            gather_per_batch=self.gather_per_batch,
        )

    def reasoning_generation(self) -> GenerationSettings:
        """How the reasoner writes the thoughts the dialogue phase conditions on."""
        return rollout_options(
            max_new_tokens=self.reasoner_max_completion_length,
            temperature=self.reasoning_temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            cache=self.generation_cache,
            gather_per_batch=self.gather_per_batch,
        )

    def update(self, phase: str) -> UpdateSettings:
        return UpdateSettings(
            mu=self.mu,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            aggregation=self.loss_aggregation,
            max_completion_length=self.max_completion_length(phase),
            mask_truncated=self.mask_truncated,
            chunk_size=self.backward_chunk_size,
            beta=0.0,
        )


def reasoner_source(path: str) -> str:
    """The model folder of ``reasoner_init_from``: a run folder (its ``model/reasoner`` or ``model``) or a model."""
    root = Path(path)
    for candidate in (root / "model" / REASONER, root / "model", root / REASONER, root):
        if (candidate / "config.json").is_file():
            return str(candidate)
    raise ConfigError(
        f"objective.reasoner_init_from={path}: no saved model (config.json) in it or in its model/ folder"
    )


class LoadedJudge(FrozenModel):
    """A frozen judge loaded from ``judge_model`` (not a copy of the policy); its weights stay out of checkpoints."""


def load_judge(name_or_path: str, like: nn.Module, tokenizer) -> LoadedJudge:
    """``name_or_path`` as a frozen causal LM in ``like``'s dtype; it must share ``tokenizer``'s vocabulary."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=next(like.parameters()).dtype)
    if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
        raise ValueError(
            f"objective.judge_model={name_or_path}: its vocabulary is smaller than the dialogue tokenizer's"
        )
    return LoadedJudge(model)


@OBJECTIVES.register("corl")
class CoRLModule(GRPOModule):
    """Reuses GRPOModule's hooks (clipping, DeepSpeed checks, advantages, judge weights out of checkpoints,
    reward closing); its own ``__init__``, optimisers, steps and export."""

    data_split = "train"
    needs_tuned_start = True
    supports_packing = False
    optimizer_count = 2  # one per phase
    environments = ()  # its episodes are its own two phases
    config_class = CoRLSettings

    @classmethod
    def models_to_build(cls, config: CoRLSettings, model: ModelSettings) -> dict[str, ModelSettings]:
        """The dialogue policy (evaluated) and the reasoner; one LoRA base for both when ``shared_base``."""
        if config.shared_base:
            if model.lora is None:
                raise ConfigError("objective.shared_base=true trains two LoRA adapters of one base: set model.lora")
            return {DIALOGUE: model}
        reasoner = model
        if config.reasoner_init_from:
            reasoner = replace(model, name_or_path=reasoner_source(config.reasoner_init_from))
        return {DIALOGUE: model, REASONER: reasoner}

    @classmethod
    def render_for(
        cls, config: CoRLSettings, examples: Sequence, renderer: ChatRenderer
    ) -> tuple[list[dict], list[str]]:
        """Per record: its input x and golden response, and (for the held-out loss) the golden target after
        the pxy prompt with the record's own ``reasoning`` (empty core features without one)."""
        prompts = config.prompts()
        samples, empty = [], []
        for example in examples:
            _, golden = prompt_and_reference(example)
            if "x" not in example.meta:
                raise ValueError(
                    f"record {example.id!r}: CoRL needs RPGBench records (user persona, agent character and "
                    "dialogue context); its meta has no 'x'"
                )
            x = RolePlayInput(**example.meta["x"])
            reasoning = example.meta.get("reasoning")
            rendered = renderer.render_completion(
                prompts.pxy(x, prompts.core_features(reasoning) if reasoning else ""), prompts.target(golden)
            )
            if not rendered.n_supervised:
                empty.append(example.id)
                continue
            samples.append({**rendered.as_sample(), "id": example.id, "x": asdict(x), "reference": golden})
        return samples, empty

    def __init__(self, model, tokenizer, cfg: CoRLSettings, judges: ClientOpener = open_client):
        ObjectiveModule.__init__(self, model, tokenizer, cfg)
        cfg = self.config
        self.automatic_optimization = False
        self.engine = None  # GRPO's vLLM rollout engine: CoRL has none (rollout_engine)
        self.num_generations, self.mu = cfg.num_generations, cfg.mu
        self.advantage_scale = cfg.advantage_scale
        self.chunk_size, self.clip_grad_norm = cfg.backward_chunk_size, cfg.clip_grad_norm
        self.schedule = Schedule(cfg.iterations, cfg.reasoner_steps, cfg.dialogue_steps)
        self.seed = cfg.generation_seed
        self.rewards = {
            REASONER: build_reward_fns(cfg.reasoner_rewards, "objective.reasoner_rewards", judges),
            DIALOGUE: build_reward_fns(cfg.dialogue_rewards, "objective.dialogue_rewards", judges),
        }
        self.reward_fns = self.rewards[REASONER] + self.rewards[DIALOGUE]
        self.prompts = cfg.prompts()
        for reward in self.reward_fns:
            if callable(getattr(reward.fn, "with_prompts", None)):
                reward.fn.with_prompts(self.prompts)
        for reward in self.rewards[REASONER]:
            if callable(getattr(reward.fn, "bind", None)):
                reward.fn.bind(self.score_with_dialogue)
        for reward in self.rewards[DIALOGUE]:
            if callable(getattr(reward.fn, "bind", None)):
                reward.fn.bind(self.score_with_judge)
        self.reasoning: dict[str, str] = {}  # sample id -> the current iteration's thought
        self._reasoning_iteration = 0
        self._step_tokens = 0

    def on_models_built(self) -> None:
        cfg = self.config
        self.shared = cfg.shared_base
        if self.shared:
            self._add_reasoner_adapter()
        dialogue_tokenizer = self.tokenizers[self.model_names[0]]
        self.reference = (
            live_reference(self.model, self.policy_builder())
            if cfg.judge_model is None
            else load_judge(cfg.judge_model, self.model, dialogue_tokenizer)
        )
        self.phase_tokenizers = {DIALOGUE: dialogue_tokenizer, REASONER: self.tokenizers[self.model_names[-1]]}
        models = self.named_models()
        self.stop_ids = {
            DIALOGUE: default_stop_ids(self.model, dialogue_tokenizer),
            REASONER: default_stop_ids(models.get(REASONER, self.model), self.phase_tokenizers[REASONER]),
        }
        self.renderers = {
            name: ChatRenderer(tok, tok.convert_ids_to_tokens(self.stop_ids[name][0]), cfg.score_max_length)
            for name, tok in self.phase_tokenizers.items()
        }

    def _add_reasoner_adapter(self) -> None:
        if not is_peft_model(self.model):
            raise ConfigError("objective.shared_base=true trains two LoRA adapters of one base: set model.lora")
        config = copy.deepcopy(self.model.peft_config[ADAPTERS[DIALOGUE]])
        self.model.add_adapter(ADAPTERS[REASONER], config)
        self._activate(DIALOGUE)

    def _activate(self, phase: str) -> None:
        """Shared base: ``phase``'s adapter computes; both stay trainable (peft's ``set_adapter`` freezes the
        inactive one), so that DDP, which registers the trainable parameters once, reduces both."""
        self.model.set_adapter(ADAPTERS[phase])
        for _, param in self.phase_parameters(DIALOGUE) + self.phase_parameters(REASONER):
            param.requires_grad_(True)

    # -- models per phase -------------------------------------------------------------------------
    @contextmanager
    def acting(self, phase: str) -> Iterator[nn.Module]:
        """The model playing ``phase``'s part (shared base: with that adapter active, the dialogue's after)."""
        if not self.shared:
            yield self.named_models()[phase]
            return
        self._activate(phase)
        try:
            yield self.model
        finally:
            self._activate(DIALOGUE)

    def phase_parameters(self, phase: str) -> list[tuple[str, nn.Parameter]]:
        """The parameters a phase trains: its model's, or (shared base) its adapter's."""
        if not self.shared:
            return list(self.named_models()[phase].named_parameters())
        marker = f".{ADAPTERS[phase]}."
        return [(n, p) for n, p in self.model.named_parameters() if "lora_" in n and marker in n]

    def configure_optimizers(self):
        """One optimiser and schedule per phase (dialogue first), each sized in its phase's steps."""
        s = self.schedule
        return [
            self.optimizer_and_schedule(self.phase_parameters(DIALOGUE), s.iterations * s.dialogue_steps),
            self.optimizer_and_schedule(self.phase_parameters(REASONER), s.iterations * s.reasoner_steps),
        ]

    def on_fit_start(self) -> None:
        super().on_fit_start()
        strategy = self.trainer.strategy
        if isinstance(strategy, DDPStrategy) and not strategy._ddp_kwargs.get("find_unused_parameters"):
            raise ValueError(
                "CoRL trains one model (or adapter) per phase, so DDP sees parameters without gradients: "
                "set trainer.strategy=ddp_find_unused_parameters_true"
            )

    def rollout_engine(self) -> None:
        """CoRL samples both policies with their own batched generate (no vLLM backend)."""
        return None

    def planned_optimizer_steps(self) -> int:
        steps = self.schedule.total
        return min(steps, self.trainer.max_steps) if self.trainer.max_steps != -1 else steps

    # -- scoring ----------------------------------------------------------------------------------
    def mean_logps(
        self, model: nn.Module, conversations: Sequence[Sequence[Turn]], targets: Sequence[str]
    ) -> list[float]:
        """Mean log-prob of each target reply (its tokens and end-of-turn token) after its conversation."""
        renderer = self.renderers[DIALOGUE]
        rows = [renderer.render_completion(c, t) for c, t in zip(conversations, targets, strict=True)]
        if any(not row.n_supervised for row in rows):
            raise ValueError("a reward's scored prompt fills objective.score_max_length tokens: raise it")
        size, values = int(self.config.score_batch_size), []
        for start in range(0, len(rows), size):
            batch = pad_collate([r.as_sample() for r in rows[start : start + size]], renderer.tokenizer.pad_token_id)
            batch = self.transfer_batch_to_device(batch, self.device, 0)
            sums, counts = sequence_logps(model, batch)
            values += (sums / counts).tolist()
        return values

    def score_with_dialogue(self, conversations, targets) -> list[float]:
        """Under the current dialogue policy (eval mode, no gradients)."""
        with self.acting(DIALOGUE) as model, generation_mode(model):
            return self.mean_logps(model, conversations, targets)

    def score_with_judge(self, conversations, targets) -> list[float]:
        with self.reference.forward_model() as model:
            return self.mean_logps(model, conversations, targets)

    # -- reasoning for the dialogue phase ---------------------------------------------------------
    def reasoning_file(self, iteration: int) -> Path:
        return Path(self.trainer.default_root_dir) / REASONING_DIR / f"reasoning_iter{iteration}.jsonl"

    def thoughts_for(self, batch, iteration: int) -> list[str]:
        """Each prompt's thought of this iteration: written once by the current reasoner, kept in the run's
        reasoning file (rewritten whole on each addition) and read back on resume."""
        if self._reasoning_iteration != iteration:
            path = self.reasoning_file(iteration)
            lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
            self.reasoning = {row["id"]: row["reasoning"] for row in map(json.loads, lines)}
            self._reasoning_iteration = iteration
        missing = [i for i, sample_id in enumerate(batch["id"]) if sample_id not in self.reasoning]
        new: dict[str, str] = {}
        rank, world_size = rank_and_world()
        options = self.config.reasoning_generation()
        with self.acting(REASONER) as model:
            synced = synced_gpus_needed(model, options, world_size)  # then every rank generates, in step
            if any(all_gather_objects(bool(missing))) if synced else missing:  # every rank asks, or none
                rows = missing or [0]  # [0]: a throw-away row, so this rank generates in step with the others
                prompts = [
                    self.fit_prompt(REASONER, self.prompts.thought(RolePlayInput(**batch["x"][i]))) for i in rows
                ]
                rollouts = generate_rows(
                    model,
                    prompts,
                    options,
                    self.stop_ids[REASONER],
                    self.phase_tokenizers[REASONER].pad_token_id,
                    seed=sampling_seed(self.seed, self.global_step, rank, world_size),
                    synced_gpus=synced,
                )
                texts = self.decode(REASONER, rollouts)[: len(missing)]
                new = {batch["id"][i]: text for i, text in zip(missing, texts, strict=True)}
        for part in all_gather_objects(new):  # every rank calls it, with or without new thoughts
            self.reasoning.update(part)
        if any(all_gather_objects(bool(new))) and self.trainer.is_global_zero:
            self.write_reasoning(iteration)
        return [self.reasoning[sample_id] for sample_id in batch["id"]]

    def write_reasoning(self, iteration: int) -> None:
        path = self.reasoning_file(iteration)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = partial_path(path)
        with partial.open("w", encoding="utf-8") as f:
            for sample_id, thought in self.reasoning.items():
                row = {
                    "id": sample_id,
                    "iteration": iteration,
                    "reasoning": thought,
                    "core_features": self.prompts.core_features(thought),
                }
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        publish(partial, path)

    # -- steps ------------------------------------------------------------------------------------
    def fit_prompt(self, phase: str, turns: Sequence[Turn]) -> list[int]:
        return self.renderers[phase].render_prompt(turns, int(self.config.max_prompt_length))

    def decode(self, phase: str, rollouts: Rollouts) -> list[str]:
        return [
            decode_completion(self.phase_tokenizers[phase], ids, self.stop_ids[phase])
            for ids in rollouts.completion_ids
        ]

    def on_train_batch_start(self, batch, batch_idx):
        super().on_train_batch_start(batch, batch_idx)
        if self.schedule.at(self.global_step) is None:  # the schedule is done: stop (epochs only cap the data passes)
            self.trainer.should_stop = True
            return -1
        return None

    def training_step(self, batch, batch_idx):
        phase = self.schedule.at(self.global_step)
        live = bool(batch["loss_scale"] > 0)
        prompts_x = [RolePlayInput(**x) for x in batch["x"]]
        thoughts = None
        if phase.name == REASONER:
            prompt_ids = [self.fit_prompt(REASONER, self.prompts.thought(x)) for x in prompts_x]
        else:
            thoughts = [self.prompts.core_features(t) for t in self.thoughts_for(batch, phase.iteration)]
            prompt_ids = [
                self.fit_prompt(DIALOGUE, self.prompts.pxy(x, f)) for x, f in zip(prompts_x, thoughts, strict=True)
            ]
        rank, world_size = rank_and_world()
        options = self.config.generation(phase.name)
        with self.acting(phase.name) as model:
            rollouts = sample_completions(
                model,
                prompt_ids,
                self.num_generations,
                options,
                self.stop_ids[phase.name],
                self.phase_tokenizers[phase.name].pad_token_id,
                seed=sampling_seed(self.seed, self.global_step // self.mu, rank, world_size),
                synced_gpus=synced_gpus_needed(model, options, world_size),
            )
        if live:
            scores, rewards = self.score(phase.name, batch, rollouts, thoughts)
        else:  # a repeated micro-batch that only evens out ranks: weight 0, so no reward calls
            scores, rewards = {}, torch.zeros(len(rollouts.completion_ids))
        advantages = self.advantages(rewards, live).to(self.device)
        index = 0 if phase.name == DIALOGUE else 1
        with self.acting(phase.name) as model:
            stats = optimise_policy(
                self,
                model,
                self.phase_tokenizers[phase.name].pad_token_id,
                rollouts,
                advantages,
                live,
                self.config.update(phase.name),
                self.optimizers()[index],
                self.lr_schedulers()[index],
                last_step=phase.end,
            )
        self._step_tokens = sum(len(p) for p in rollouts.prompt_ids) + rollouts.n_tokens
        if live:
            self._log_phase(phase, rollouts, scores, rewards, advantages, stats)

    def score(self, phase: str, batch, rollouts: Rollouts, thoughts: list[str] | None):
        """Every reward of ``phase`` on the decoded completions, and their weighted sum."""
        rewards: list[RewardFn] = self.rewards[phase]
        if thoughts is not None:
            for reward in rewards:
                if callable(getattr(reward.fn, "with_features", None)):
                    reward.fn.with_features(repeat_each(thoughts, self.num_generations))
        scores = score_rewards(
            rewards,
            repeat_each([RolePlayInput(**x) for x in batch["x"]], self.num_generations),
            self.decode(phase, rollouts),
            repeat_each(batch["reference"], self.num_generations),
        )
        weights = {r.name: r.weight for r in rewards}
        return scores, torch.tensor(weighted_sum(scores, weights), dtype=torch.float32)

    def _log_phase(self, phase: Phase, rollouts, scores, rewards, advantages, stats) -> None:
        prefix = f"train/{phase.name}/"
        metrics = rollout_metrics(rollouts, scores, rewards, advantages, stats, self.num_generations, prefix)
        loss = stats["loss"] / max(stats["units"], 1.0)
        metrics.update(
            {
                f"{prefix}loss": loss,
                f"{prefix}reward": rewards.mean(),
                "train/iteration": float(phase.iteration),
                "train/phase": float(phase.name == DIALOGUE),  # 0 reasoner, 1 dialogue
                "train/optimizer_step": float(self.global_step),
            }
        )
        self.log("train/loss", loss, prog_bar=True, rank_zero_only=True)
        self.log("train/reward", rewards.mean(), prog_bar=True, rank_zero_only=True)
        self.log_dict({k: float(v) for k, v in metrics.items()}, rank_zero_only=True)

    def on_train_end(self) -> None:
        if self.schedule.at(self.global_step) is not None and self.trainer.max_steps in (-1, None):
            log.warning(
                "CoRL stopped at optimiser step %d of %d: the data ran out; raise objective.epochs",
                self.global_step,
                self.schedule.total,
            )

    # -- export -----------------------------------------------------------------------------------
    def export_hf(self, out_dir: str | Path, lora_adapter: bool = False) -> Path | None:
        """``model/dialogue`` and ``model/reasoner``; with a shared base, each adapter merged into its own copy."""
        if not self.shared:
            return super().export_hf(out_dir, lora_adapter)
        if self.trainer.is_global_zero:
            reasoner = copy.deepcopy(self.model)
            reasoner.set_adapter(ADAPTERS[REASONER])
            reasoner.delete_adapter(ADAPTERS[DIALOGUE])
            save_hf(reasoner, self.phase_tokenizers[REASONER], Path(out_dir) / REASONER, lora_adapter=lora_adapter)
            del reasoner
            self.model.delete_adapter(ADAPTERS[REASONER])  # the evaluated dialogue policy keeps its own adapter
            save_hf(self.model, self.phase_tokenizers[DIALOGUE], Path(out_dir) / DIALOGUE, lora_adapter=lora_adapter)
        return Path(out_dir) if self.trainer.is_global_zero else None
