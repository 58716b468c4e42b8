"""Group relative policy optimisation with rewards from the registry (rewards.py).

Each training step takes a micro-batch of prompts (``batch_size`` per rank), samples ``num_generations`` (G)
completions per prompt, scores them with the weighted sum of the configured rewards, turns the rewards into
group-normalised advantages, and then makes ``mu`` optimiser steps over that generation batch with the
clipped-ratio loss (old log-probs from before the first step), plus ``beta`` times the k3 KL to the reference
(``beta: 0`` loads no reference). Rollouts come from the policy's own batched ``generate``
(``generation_cache`` dynamic or static) or an in-process vLLM engine given the policy's weights before each
generation batch (``rollout_backend: vllm``; rpbench.models.vllm_engine). Optimisation is manual: each
optimiser step accumulates the backward of ``backward_chunk_size`` completions at a time (every rank as many
times), clips the gradient norm to ``clip_grad_norm`` and steps. Steps are optimiser steps throughout:
``max_steps`` stops training after that many (mid-batch if need be), the learning-rate schedule is sized in
them and advances with each, and every logged row carries ``train/optimizer_step`` (rows are logged per
generation batch).

The loss of an optimiser step is the configured aggregation (token_mean / seq_mean / dr_grpo) over every
completion of the step on every rank: each chunk's aggregate is weighted by its share of the global token
(or completion) count, times the world size that DDP/DeepSpeed average over. Repeated micro-batches that
only even out ranks (``loss_scale`` 0) run the same calls with weight 0.

Prompts come from any record type: an SFT conversation up to its last assistant turn (reference: that
turn), a preference pair (reference: the chosen reply), a test record (its reference). Validation reports
the held-out NLL of those references. With ``env=conversation`` the prompts are conversation scenarios and a
rollout is a whole session with a simulated user, only the character's tokens in the loss, rewarded by
``env.rewards`` (rpbench.objectives.conversation_env); ``objective.advantage`` picks how a session's rewards
(and its ``env.turn_rewards``) credit its turns, the tokens of turn t getting turn t's advantage
(rpbench.objectives.turn_credit; ``session_grpo``, the default, is one advantage per session).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from rpbench.core.distributed import all_gather_objects, rank_and_world
from rpbench.core.errors import ConfigError
from rpbench.core.typed import Elsewhere, Problem
from rpbench.data.chat import IGNORE_INDEX, ChatRenderer
from rpbench.data.collate import pad_collate
from rpbench.data.records import EvalExample, PreferenceExample, SFTExample, Turn, as_messages
from rpbench.models.forward import labelled_logps
from rpbench.models.generation import GenerationSettings, decode_completion, default_stop_ids, synced_gpus_needed
from rpbench.models.vllm_engine import VLLMEngine
from rpbench.models.zero3 import is_partitioned
from rpbench.objectives.base import ObjectiveModule, is_deepspeed
from rpbench.objectives.config import ObjectiveSettings, once_per_key
from rpbench.objectives.conversation_env import ConversationEnv, ConversationEnvSettings, scenario_of, session_metrics
from rpbench.objectives.losses import (
    ADVANTAGE_SCALES,
    AGGREGATION_MODES,
    aggregate_loss,
    clipped_policy_loss,
    group_advantages,
    k3_kl,
)
from rpbench.objectives.reference import drop_reference_weights, live_reference, restore_reference_weights
from rpbench.objectives.registry import OBJECTIVES
from rpbench.objectives.sampling import (
    ROLLOUT_KEYS,
    Rollouts,
    repeat_each,
    rollout_options,
    sample_completions,
    sample_with_engine,
    sampling_seed,
)
from rpbench.objectives.turn_credit.advantages import TURN_ADVANTAGES, TurnBatch, TurnCreditSettings
from rpbench.objectives.turn_credit.rewards import TurnRewards
from rpbench.objectives.turn_credit.tokens import token_advantages
from rpbench.scoring.chat.client import ClientOpener, open_client
from rpbench.scoring.judge.conversation import simulator_key_problems
from rpbench.scoring.judge.parties import Overlap
from rpbench.scoring.rewards import build_reward_fns, reward_problems, score_rewards, weighted_sum


def prompt_and_reference(example: SFTExample | PreferenceExample | EvalExample) -> tuple[tuple[Turn, ...], str]:
    """The turns to generate from and the golden reply, for any record type."""
    if isinstance(example, SFTExample):
        last = max(i for i, turn in enumerate(example.turns) if turn.role == "assistant")
        return example.turns[:last], example.turns[last].content
    if isinstance(example, PreferenceExample):
        return example.prompt, example.chosen
    if isinstance(example, EvalExample):
        return example.prompt, example.reference
    raise TypeError(f"GRPO takes SFT, preference or evaluation records, got {type(example).__name__}")


def rank_slice_of_batch_advantages(parts: Sequence[Sequence[float | None]], rank: int, group_size: int) -> torch.Tensor:
    """``rank``'s share of the batch-std advantages of every rank's rewards (``parts``, in rank order, None: a
    completion without a reward; a rank whose micro-batch only evens out the step contributes an empty part)."""
    offset = sum(len(p) for p in parts[:rank])
    values = [r for p in parts for r in p]
    rewards = torch.tensor([0.0 if r is None else r for r in values])
    scored = torch.tensor([r is not None for r in values])
    everything = group_advantages(rewards, group_size, "batch", scored=scored)
    return everything[offset : offset + len(parts[rank])]


def completion_logps(model, batch: Mapping[str, Any], lengths: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of each row's completion, ``[rows, longest]``, and the mask of real tokens."""
    out = labelled_logps(model, batch)
    if out.n_tokens != sum(lengths):
        raise RuntimeError(f"{out.n_tokens} labelled tokens for completions of {sum(lengths)} tokens")
    values = pad_sequence(list(out.token_logps.split(list(lengths))), batch_first=True)
    mask = pad_sequence([torch.ones(n, dtype=torch.bool, device=values.device) for n in lengths], batch_first=True)
    return values, mask


def completion_batch(rollouts: Rollouts, rows: Sequence[int], pad_token_id: int) -> dict[str, Any]:
    """Padded prompt + completion rows with only the policy's completion tokens labelled."""
    return pad_collate(
        [
            {
                "input_ids": rollouts.prompt_ids[i] + rollouts.completion_ids[i],
                "labels": [IGNORE_INDEX] * len(rollouts.prompt_ids[i]) + rollouts.policy_labels(i),
            }
            for i in rows
        ],
        pad_token_id,
    )


ROLLOUT_BACKENDS = ("hf", "vllm")


@dataclass(frozen=True)
class UpdateSettings:
    """How one generation batch updates a policy: ``mu`` optimiser steps of the clipped loss (plus ``beta``
    times the k3 KL when a reference is given), aggregated as ``aggregation``, ``chunk_size`` completions
    per backward (None: all at once)."""

    mu: int
    eps_low: float
    eps_high: float
    aggregation: str
    max_completion_length: int
    mask_truncated: bool
    chunk_size: int | None
    beta: float


def optimise_policy(
    module: ObjectiveModule,
    model,
    pad_token_id: int,
    rollouts: Rollouts,
    advantages: torch.Tensor,
    live: bool,
    settings: UpdateSettings,
    optimizer,
    scheduler,
    reference=None,
    last_step: int | None = None,
) -> dict[str, float]:
    """``settings.mu`` optimiser steps of ``model`` over a generation batch, with ``optimizer`` and its
    ``scheduler`` (Lightning's wrapped ones of ``module``), stopping early at ``trainer.max_steps`` or at
    optimiser step ``last_step`` (a phase's end). Returns the sums the step metrics are built from."""
    lengths = rollouts.policy_lengths
    size = int(settings.chunk_size or len(lengths))
    chunks = [list(range(start, min(start + size, len(lengths)))) for start in range(0, len(lengths), size)]
    batches = [
        module.transfer_batch_to_device(completion_batch(rollouts, rows, pad_token_id), module.device, 0)
        for rows in chunks
    ]
    keep = torch.tensor([not (settings.mask_truncated and t) for t in rollouts.truncated], device=module.device)
    token_mean = settings.aggregation == "token_mean"

    def logps_of(net, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        values, mask = completion_logps(net, batches[k], [lengths[i] for i in chunks[k]])
        return values, mask & keep[chunks[k], None]

    def units(mask: torch.Tensor) -> float:  # what the aggregation divides by: tokens or completions
        return float(mask.sum()) if token_mean else float(mask.shape[0])

    old = ref = None
    if settings.mu > 1:  # with one step the ratio is 1 and old log-probs are the current ones, detached
        with torch.no_grad():
            old = [logps_of(model, k)[0] for k in range(len(chunks))]
    if reference is not None:
        with reference.forward_model() as reference_model:
            ref = [logps_of(reference_model, k)[0] for k in range(len(chunks))]
    # each chunk's aggregate weighs its share of the step's tokens (or completions) over all ranks,
    # times the world size that DDP/DeepSpeed average gradients over
    kept = [n for n, k in zip(lengths, keep.tolist(), strict=True) if k]
    local_units = float(sum(kept)) if token_mean else float(len(lengths))
    total = module.trainer.strategy.reduce(torch.tensor(local_units * live, device=module.device), reduce_op="sum")
    share = rank_and_world()[1] * live / float(total.clamp(min=1))
    stats = {"loss": 0.0, "kl": 0.0, "clipped": 0.0, "tokens": 0.0, "first_tokens": 0.0, "units": local_units}
    # every rank makes as many backward calls (each all-reduces under DDP): a rank with fewer completions
    # (a smaller last batch) repeats its first chunk with weight 0
    n_chunks = max(all_gather_objects(len(chunks)))
    for iteration in range(settings.mu):
        if 0 <= module.trainer.max_steps <= module.global_step:  # max_steps counts optimiser steps
            break
        if last_step is not None and module.global_step >= last_step:
            break
        optimizer.zero_grad()
        for slot in range(n_chunks):
            real = slot < len(chunks)
            k = slot if real else 0
            rows = chunks[k]
            logps, mask = logps_of(model, k)
            old_logps = logps.detach() if old is None else old[k]
            chunk_advantages = advantages[rows]
            if chunk_advantages.dim() == 2:  # per token (turn credit), padded to the batch's longest
                chunk_advantages = chunk_advantages[:, : logps.shape[1]]
            per_token, clip_fraction = clipped_policy_loss(
                logps, old_logps, chunk_advantages, mask, settings.eps_low, settings.eps_high
            )
            kl = k3_kl(logps, ref[k]) if ref is not None else None
            if kl is not None:
                per_token = per_token + settings.beta * kl
            loss = aggregate_loss(per_token, mask, settings.aggregation, settings.max_completion_length)
            module.manual_backward(loss * (units(mask) * share * real))
            if not real:
                continue
            tokens = float(mask.sum())
            stats["clipped"] += float(clip_fraction) * tokens
            stats["tokens"] += tokens
            if iteration == 0:
                stats["loss"] += float(loss.detach()) * units(mask)
                stats["first_tokens"] += tokens
                if kl is not None:
                    stats["kl"] += float((kl.detach() * mask).sum())
        optimizer.step()
        scheduler.step()
    return stats


def sample_std(values: torch.Tensor) -> torch.Tensor:
    """The sample std (Bessel), NaN for fewer than two values (all but one left out without a reward)."""
    return values.std() if values.numel() > 1 else torch.tensor(float("nan"))


def rollout_metrics(
    rollouts: Rollouts,
    scores: Mapping[str, Sequence[float | None]],
    rewards: torch.Tensor,
    advantages: torch.Tensor,
    stats: Mapping[str, float],
    group_size: int,
    prefix: str,
    scored: torch.Tensor | None = None,
) -> dict[str, torch.Tensor | float]:
    """The logged statistics of a generation batch (rewards, advantages, clipping, lengths), keys ``prefix...``;
    the rewards' over the ``scored`` completions (None: all), and the share left out without a reward."""
    scored = torch.ones_like(rewards, dtype=torch.bool) if scored is None else scored
    kept, groups = scored.view(-1, group_size), rewards.view(-1, group_size)
    high, low = groups.masked_fill(~kept, -torch.inf).amax(1), groups.masked_fill(~kept, torch.inf).amin(1)
    lengths = torch.tensor(rollouts.policy_lengths, dtype=torch.float32)
    metrics = {
        "reward/std": sample_std(rewards[scored]),
        "left_out_fraction": (~scored).float().mean(),
        "advantages/mean": advantages.mean(),
        "advantages/std": advantages.std(),
        "advantages/abs_mean": advantages.abs().mean(),
        "zero_std_groups": ((kept.sum(1) < 2) | (high == low)).float().mean(),
        "clip_fraction": stats["clipped"] / max(stats["tokens"], 1.0),
        "completion_length/mean": lengths.mean(),
        "completion_length/min": lengths.min(),
        "completion_length/max": lengths.max(),
        "truncated_fraction": sum(rollouts.truncated) / len(rollouts.truncated),
        "generation_tokens_per_s": rollouts.n_tokens / max(rollouts.seconds, 1e-9),
    }
    for name, values in scores.items():
        values_t = torch.tensor([v for v in values if v is not None])
        metrics[f"rewards/{name}/mean"] = values_t.mean()
        metrics[f"rewards/{name}/std"] = sample_std(values_t)
    return {f"{prefix}{key}": value for key, value in metrics.items()}


def turn_metrics(
    turns: TurnRewards, session_rewards: torch.Tensor, scored: torch.Tensor, cut: Sequence[bool]
) -> dict[str, float]:
    """The turn rewards of the scored sessions (each turn once), the session rewards beside them, and the sessions
    left out for a missing turn reward."""
    kept = [i for i, ok in enumerate(scored.tolist()) if ok]
    combined = [v for i in kept for v in turns.combined[i]]
    metrics = {
        "train/session_reward_mean": float(session_rewards[scored].mean()) if kept else float("nan"),
        "train/turn_reward_mean": sum(combined) / len(combined) if combined else float("nan"),
        "train/turn_reward_missing": float(sum(c is None and not x for c, x in zip(turns.combined, cut, strict=True))),
    }
    for name, values in turns.by_name.items():
        flat = [v for i in kept for v in values[i]]
        metrics[f"train/turn_rewards/{name}/mean"] = sum(flat) / len(flat) if flat else float("nan")
    return metrics


@dataclass(frozen=True, kw_only=True)
class GroupSamplingSettings(ObjectiveSettings):
    """What GRPO and CoRL share: groups of sampled completions, the clipped update, manual optimisation."""

    num_generations: int
    temperature: float
    top_p: float
    top_k: int
    mu: int
    epsilon_low: float
    epsilon_high: float
    loss_aggregation: str
    advantage_scale: str
    mask_truncated: bool
    generation_seed: int
    backward_chunk_size: int | None
    clip_grad_norm: float | None

    def problems(self) -> list[Problem]:
        manual = f"objective={self.name} optimises manually"
        found: list[Problem] = []
        if self.grad_accum != 1:
            found.append(("grad_accum", f"1, as {manual}; objective.backward_chunk_size splits a step instead"))
        if self.max_grad_norm is not None:
            found.append(("max_grad_norm", f"null, as {manual}; objective.clip_grad_norm clips instead"))
        if self.num_generations < 2:
            found.append(("num_generations", "an integer >= 2 (advantages compare completions)"))
        if self.mu < 1:
            found.append(("mu", "an integer >= 1"))
        if self.loss_aggregation not in AGGREGATION_MODES:
            found.append(("loss_aggregation", f"one of {', '.join(AGGREGATION_MODES)}"))
        if self.advantage_scale not in ADVANTAGE_SCALES:
            found.append(("advantage_scale", f"one of {', '.join(ADVANTAGE_SCALES)}"))
        if not self.temperature > 0:
            found.append(("temperature", "a number > 0 (a group of greedy completions is identical)"))
        for key in ("epsilon_low", "epsilon_high"):
            if getattr(self, key) < 0:
                found.append((key, "a number >= 0 (the clip range is [1 - epsilon_low, 1 + epsilon_high])"))
        if self.backward_chunk_size is not None and self.backward_chunk_size < 1:
            found.append(("backward_chunk_size", "null (all at once) or an integer >= 1"))
        return once_per_key(found, super().problems())  # grad_accum and max_grad_norm: the rule above

    def deepspeed_problems(self, zero3: bool) -> list[str]:
        found = []
        if self.backward_chunk_size is not None:
            found.append(
                f"objective.backward_chunk_size={self.backward_chunk_size}: under DeepSpeed each optimiser step "
                "must be one backward: set objective.backward_chunk_size=null"
            )
        if self.clip_grad_norm:  # the engine steps and clips itself; Lightning's clip_gradients refuses it
            found.append(
                f"objective.clip_grad_norm={self.clip_grad_norm}: DeepSpeed clips gradients itself: set "
                "objective.clip_grad_norm=null and trainer.strategy.config.gradient_clipping instead"
            )
        return found


@dataclass(frozen=True, kw_only=True)
class GRPOSettings(GroupSamplingSettings):
    """conf/objective/grpo.yaml."""

    max_completion_length: int
    beta: float
    rewards: tuple[Mapping[str, Any], ...]
    rollout_backend: str
    generation_cache: str
    gather_per_batch: bool
    vllm_gpu_memory_utilization: float
    env: Mapping[str, Any]  # the env group (``${env}``): none, or conversation (whole sessions)
    advantage: str  # a registered turn-level estimator (rpbench.objectives.turn_credit.advantages)
    turn_credit: TurnCreditSettings

    def problems(self) -> list[Problem]:
        found = super().problems()
        found += self.advantage_problems()
        if self.beta < 0:
            found.append(("beta", "a number >= 0 (0: no KL term)"))
        if self.rollout_backend not in ROLLOUT_BACKENDS:
            found.append(("rollout_backend", f"one of {', '.join(ROLLOUT_BACKENDS)}"))
        elif self.env["name"] == "conversation" and self.rollout_backend != "hf":
            found.append(("rollout_backend", "hf with env=conversation (sessions roll out with the policy's generate)"))
        if self.env["name"] == "conversation":
            found += self.env_problems()
        elif self.env["name"] != "none":
            found.append(Elsewhere(f"env.name={self.env['name']!r}: expected none or conversation (objective=grpo)"))
        found += reward_problems(self.rewards, "rewards")
        return once_per_key(found, self.generation().problems_as(ROLLOUT_KEYS))

    def advantage_problems(self) -> list[Problem]:
        """``advantage`` checked against the registry, the scale and the environment."""
        if self.advantage not in TURN_ADVANTAGES.names():
            return [("advantage", f"a registered estimator ({', '.join(TURN_ADVANTAGES.names())})")]
        if self.advantage == "session_grpo":
            return []
        found: list[Problem] = []
        if self.env["name"] != "conversation":
            found.append(("advantage", "session_grpo without env=conversation (turns exist in sessions only)"))
        if self.advantage_scale == "batch":
            found.append(("advantage_scale", f"group or none with objective.advantage={self.advantage}"))
        if self.advantage == "utterance_share" and not self.env.get("turn_rewards"):
            found.append(Elsewhere("env.turn_rewards: at least one turn reward (utterance_share's shares)"))
        return found

    def deepspeed_problems(self, zero3: bool) -> list[str]:
        found = super().deepspeed_problems(zero3)
        if zero3 and self.env["name"] == "conversation":
            found.append(
                "env=conversation under ZeRO-3: ranks play sessions of different lengths, which a partitioned "
                "model cannot generate in step; train with trainer=ddp or deepspeed_zero2"
            )
        return found

    def env_problems(self) -> list[Problem]:
        """What is wrong with ``env=conversation``'s settings and rewards, named as the user sets them
        (``env.*``: ``objective.env`` only holds ``${env}``)."""
        found: list[str] = []
        env = ConversationEnvSettings.collect(self.env, "env", found)
        if env is not None:
            found += reward_problems(env.rewards, "env.rewards")
            found += simulator_key_problems(env.simulator, "env.simulator")
        return [Elsewhere(problem) for problem in found]

    def overlaps(self) -> list[Overlap]:
        """``env=conversation``'s: the user simulator and a reward judge played by one model."""
        env = self.conversation_env()
        return env.overlaps() if env is not None else []

    def update(self) -> UpdateSettings:
        """How a generation batch updates the policy."""
        return UpdateSettings(
            mu=self.mu,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            aggregation=self.loss_aggregation,
            max_completion_length=self.max_completion_length,
            mask_truncated=self.mask_truncated,
            chunk_size=self.backward_chunk_size,
            beta=self.beta,
        )

    def conversation_env(self) -> ConversationEnvSettings | None:
        """The typed ``env=conversation`` settings; None without an environment."""
        return ConversationEnvSettings.parse(self.env, "env") if self.env["name"] == "conversation" else None

    def generation(self) -> GenerationSettings:
        """How completions are sampled."""
        return rollout_options(
            max_new_tokens=self.max_completion_length,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            cache=self.generation_cache,
            gather_per_batch=self.gather_per_batch,
        )


@OBJECTIVES.register("grpo")
class GRPOModule(ObjectiveModule):
    data_split = "train"
    needs_tuned_start = True
    supports_packing = False
    supports_images = False  # rollouts are generated from the prompt tokens alone
    opens_judges = True  # judge rewards (objective.rewards) ask an LLM judge
    environments = ("conversation",)
    record_types = (SFTExample, PreferenceExample, EvalExample)  # a prompt and its reference, or a scenario
    config_class = GRPOSettings
    env: ConversationEnv | None = None  # env=conversation's sessions (built in __init__)
    _turns: TurnRewards | None = None  # the last scored sessions' turn rewards (env.turn_rewards)

    @staticmethod
    def render(examples: Sequence, renderer: ChatRenderer) -> tuple[list[dict], list[str]]:
        """One prompt per record (plus its reference rendered for the held-out NLL); records without a
        prompt turn are reported."""
        samples, empty = [], []
        for example in examples:
            prompt, reference = prompt_and_reference(example)
            if not prompt:
                empty.append(example.id)
                continue
            samples.append(
                {
                    **renderer.render_completion(prompt, reference).as_sample(),
                    "id": example.id,
                    "prompt_ids": renderer.render_prompt(prompt),
                    "messages": as_messages(prompt),
                    "reference": reference,
                }
            )
        return samples, empty

    @classmethod
    def render_for(
        cls, config: GRPOSettings, examples: Sequence, renderer: ChatRenderer
    ) -> tuple[list[dict], list[str]]:
        """With ``env=conversation`` one sample per scenario (its system prompt and opening; nothing labelled),
        else ``render``."""
        if config.env["name"] != "conversation":
            return cls.render(examples, renderer)
        samples = []
        for example in examples:
            if not (isinstance(example, EvalExample) and "turns" in example.meta):
                raise ConfigError(
                    f"env=conversation trains on conversation scenarios (data format conversation); record "
                    f"{example.id!r} is a {type(example).__name__}"
                )
            ids = renderer.render_prompt(example.prompt)
            scenario = dataclasses.asdict(example)  # a batch carries plain data
            samples.append(
                {"input_ids": ids, "labels": [IGNORE_INDEX] * len(ids), "id": example.id, "scenario": scenario}
            )
        return samples, []

    @staticmethod
    def sample_weight(sample: dict) -> int:
        """Every prompt weighs the same (the loss is normalised over completions or tokens globally)."""
        return 1

    def __init__(
        self,
        model,
        tokenizer,
        cfg: GRPOSettings,
        judges: ClientOpener = open_client,
        renderer: ChatRenderer | None = None,
    ):
        """``renderer``: the run's chat renderer (an environment renders the turns it adds with it)."""
        super().__init__(model, tokenizer, cfg)
        cfg = self.config
        self.automatic_optimization = False
        self.num_generations, self.mu, self.beta = cfg.num_generations, cfg.mu, cfg.beta
        self.advantage_scale = cfg.advantage_scale
        self.chunk_size, self.clip_grad_norm = cfg.backward_chunk_size, cfg.clip_grad_norm
        self.generation = cfg.generation()
        self.update = cfg.update()
        env = cfg.conversation_env()
        if env is not None and renderer is None:
            raise ValueError("env=conversation needs the run's chat renderer (renderer=...)")
        self.env = ConversationEnv(env, judges, renderer) if env is not None else None
        self.reward_fns = (
            self.env.reward_fns if self.env is not None else build_reward_fns(cfg.rewards, "objective.rewards", judges)
        )
        self.reward_weights = {r.name: r.weight for r in self.reward_fns}
        self.counts_failures = any(hasattr(r.fn, "failures") for r in self.reward_fns)
        self.seed = cfg.generation_seed
        self.engine: VLLMEngine | None = None  # built at fit start for rollout_backend=vllm
        self._step_tokens = 0

    def on_models_built(self) -> None:
        self.reference = live_reference(self.model, self.policy_builder()) if self.config.beta > 0 else None
        self.stop_ids = default_stop_ids(self.model, self.tokenizer)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if is_deepspeed(type(self.trainer.strategy).__name__):  # validate checked the configured strategy
            refused = self.config.deepspeed_problems(is_partitioned(self.model))
            if refused:
                raise ValueError("; ".join(refused))
        if self.engine is None:
            self.engine = self.rollout_engine()

    def rollout_engine(self) -> VLLMEngine | None:
        """The in-process vLLM engine of ``rollout_backend=vllm``; None: the model's own batched generate."""
        if self.config.rollout_backend != "vllm":
            return None
        if rank_and_world()[1] > 1:
            raise ValueError("objective.rollout_backend=vllm runs in one process: train with trainer.devices=1")
        return VLLMEngine(
            self.model,
            self.tokenizer,
            gpu_memory_utilization=float(self.config.vllm_gpu_memory_utilization),
            what="objective.rollout_backend=vllm",
            seed=self.seed,
        )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        drop_reference_weights(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_reference_weights(self, checkpoint)

    # -- rollouts and rewards ---------------------------------------------------------------------
    def rollouts(self, batch) -> Rollouts:
        rank, world_size = rank_and_world()
        seed = sampling_seed(self.seed, self.global_step // self.mu, rank, world_size)
        if self.env is not None:
            rollouts, self._sessions = self.env.play(
                self.model,
                [scenario_of(s) for s in batch["scenario"]],
                self.num_generations,
                self.generation,
                self.stop_ids,
                self.tokenizer.pad_token_id,
                seed,
            )
            return rollouts
        if self.engine is not None:
            return sample_with_engine(
                self.engine, self.model, batch["prompt_ids"], self.num_generations, self.generation, self.stop_ids, seed
            )
        return sample_completions(
            self.model,
            batch["prompt_ids"],
            self.num_generations,
            self.generation,
            self.stop_ids,
            self.tokenizer.pad_token_id,
            seed=seed,
            synced_gpus=synced_gpus_needed(self.model, self.generation, world_size),
        )

    def score(self, batch, rollouts: Rollouts) -> tuple[dict[str, list[float | None]], torch.Tensor, torch.Tensor]:
        """Every reward's scores of the decoded completions (an environment's: of its sessions), their weighted
        sum, and which completions have a reward (an environment's session cut short, or without a verdict,
        has none)."""
        if self.env is not None:
            return self.score_sessions()
        texts = [decode_completion(self.tokenizer, ids, self.stop_ids) for ids in rollouts.completion_ids]
        scores = score_rewards(
            self.reward_fns,
            repeat_each(batch["messages"], self.num_generations),
            texts,
            repeat_each(batch["reference"], self.num_generations),
        )
        rewards = torch.tensor(weighted_sum(scores, self.reward_weights), dtype=torch.float32)
        return scores, rewards, torch.ones_like(rewards, dtype=torch.bool)

    def score_sessions(self) -> tuple[dict[str, list[float | None]], torch.Tensor, torch.Tensor]:
        """``env.score``; with turn rewards, each session's reward is its session reward plus the sum of its turn
        rewards (a session missing a turn reward is not scored), its session reward and turn rewards kept."""
        scores, rewards, scored = self.env.score(self._sessions)
        self._session_rewards, self._turns = rewards, None
        if self.env.settings.turn_rewards:
            self._turns = self.env.score_turns(self._sessions)
            has = torch.tensor([c is not None for c in self._turns.combined])
            rewards = rewards + torch.tensor([sum(c) if c else 0.0 for c in self._turns.combined])
            scored = scored & has
        return scores, rewards, scored

    def turn_advantages(self, rollouts: Rollouts, scored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``objective.advantage``'s per-turn advantages of the sessions, and the same spread over each row's
        policy tokens (``(rows, longest)``)."""
        sessions = self._sessions
        lengths = torch.tensor([s.character_turns for s in sessions])
        turns = torch.zeros(len(sessions), max(int(lengths.max()), 1))
        combined = self._turns.combined if self._turns is not None else [None] * len(sessions)
        for i, values in enumerate(combined):
            if values:
                turns[i, : len(values)] = torch.tensor(values)
        batch = TurnBatch(
            self._session_rewards,
            turns,
            lengths.clamp(min=1),
            scored,
            self.num_generations,
            self.advantage_scale,
            self.config.turn_credit,
        )
        per_turn = TURN_ADVANTAGES.get(self.config.advantage)(batch)
        return per_turn[batch.reach], token_advantages(per_turn, rollouts.policy_turns)

    def advantages(self, rewards: torch.Tensor, live: bool, scored: torch.Tensor | None = None) -> torch.Tensor:
        """Group-normalised advantages over the ``scored`` completions (None: all; the others get 0); the
        ``batch`` scale takes the std over every rank's live scored rewards."""
        rank, world_size = rank_and_world()
        if self.advantage_scale != "batch" or world_size == 1:
            return group_advantages(rewards, self.num_generations, self.advantage_scale, scored=scored)
        scored = torch.ones_like(rewards, dtype=torch.bool) if scored is None else scored
        mine = [r if s else None for r, s in zip(rewards.tolist(), scored.tolist(), strict=True)]
        parts = all_gather_objects(mine if live else [])
        return rank_slice_of_batch_advantages(parts, rank, self.num_generations) if live else torch.zeros_like(rewards)

    # -- optimisation -----------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        live = bool(batch["loss_scale"] > 0)
        rollouts = self.rollouts(batch)
        failures_before = self.reward_failures()
        if live:
            scores, rewards, scored = self.score(batch, rollouts)
        else:  # a repeated micro-batch that only evens out ranks: weight 0, so no reward calls (judges cost)
            scores, rewards = {}, torch.zeros(len(rollouts.completion_ids))
            scored = torch.ones_like(rewards, dtype=torch.bool)
        failed = self._sum_over_ranks(self.reward_failures() - failures_before) if self.counts_failures else None
        if live and self.config.advantage != "session_grpo":
            logged, advantages = self.turn_advantages(rollouts, scored)
        else:
            advantages = logged = self.advantages(rewards, live, scored)
        stats = self.optimise(rollouts, advantages.to(self.device), live)
        if failed is not None:
            stats["reward_failures"] = failed
        self._step_tokens = sum(len(p) for p in rollouts.prompt_ids) + rollouts.n_tokens
        if live:
            self._log_step(rollouts, scores, rewards, scored, logged, stats)

    def reward_failures(self) -> int:
        """Scores the rewards could not give so far on this rank (an LLM judge's unparseable verdicts)."""
        return sum(int(getattr(reward.fn, "failures", 0)) for reward in self.reward_fns)

    def _sum_over_ranks(self, value: float) -> float:
        return float(self.trainer.strategy.reduce(torch.tensor(float(value), device=self.device), reduce_op="sum"))

    def teardown(self, stage: str) -> None:
        """Close the rewards that hold resources (a judge client, a judge server) when training ends."""
        if stage == "fit":
            if self.env is not None:
                self.env.close()  # its rewards too
            for reward in self.reward_fns if self.env is None else ():
                if callable(getattr(reward.fn, "close", None)):
                    reward.fn.close()
            if self.engine is not None:
                self.engine.close()
                self.engine = None

    def optimise(self, rollouts: Rollouts, advantages: torch.Tensor, live: bool) -> dict[str, float]:
        """``mu`` optimiser steps over the generation batch, ``backward_chunk_size`` completions per backward."""
        return optimise_policy(
            self,
            self.model,
            self.tokenizer.pad_token_id,
            rollouts,
            advantages,
            live,
            self.update,
            self.optimizers(),
            self.lr_schedulers(),
            self.reference,
        )

    def planned_optimizer_steps(self) -> int:
        """``mu`` optimiser steps per generation batch, capped by ``max_steps`` (which counts optimiser steps)."""
        self.trainer.estimated_stepping_batches  # noqa: B018 (sets up the training data)
        steps = int(self.trainer.num_training_batches) * max(int(self.trainer.max_epochs), 1) * self.mu
        return min(steps, self.trainer.max_steps) if self.trainer.max_steps != -1 else steps

    def on_before_optimizer_step(self, optimizer) -> None:
        super().on_before_optimizer_step(optimizer)  # logs the norm before clipping, as in automatic mode
        if self.clip_grad_norm:
            self.clip_gradients(optimizer, gradient_clip_val=self.clip_grad_norm, gradient_clip_algorithm="norm")

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        elapsed = time.perf_counter() - self._batch_started
        if elapsed > 0:
            self.log("train/tokens_per_s", self._step_tokens / elapsed, rank_zero_only=True)

    def _log_step(
        self,
        rollouts: Rollouts,
        scores: Mapping[str, Sequence[float | None]],
        rewards: torch.Tensor,
        scored: torch.Tensor,
        advantages: torch.Tensor,
        stats: Mapping[str, float],
    ) -> None:
        metrics = rollout_metrics(rollouts, scores, rewards, advantages, stats, self.num_generations, "train/", scored)
        if self.reference is not None:
            metrics["train/kl"] = stats["kl"] / max(stats["first_tokens"], 1.0)
        metrics["train/optimizer_step"] = float(self.global_step)
        if self.env is not None:
            metrics |= {f"train/{key}": value for key, value in session_metrics(self._sessions).items()}
            batches = self.env.sessions_per_generate
            metrics["train/env/sessions_per_generate"] = sum(batches) / len(batches)  # of this rank's rollouts
            if self._turns is not None:
                cut = [s.left_out for s in self._sessions]
                metrics |= turn_metrics(self._turns, self._session_rewards, scored, cut)
        if "reward_failures" in stats:  # this step's, summed over ranks
            metrics["train/reward_failures"] = stats["reward_failures"]
        self.log("train/loss", stats["loss"] / max(stats["units"], 1.0), prog_bar=True, rank_zero_only=True)
        self.log("train/reward", rewards[scored].mean(), prog_bar=True, rank_zero_only=True)
        self.log_dict({k: float(v) for k, v in metrics.items()}, rank_zero_only=True)
