"""Training throughput of rpbench and TRL side by side: SFT, DPO and GRPO on the same data and model shape.

    python experiments/throughput/bench.py                                  # CPU, tiny shape, a few minutes
    python experiments/throughput/bench.py --shape cpu-152k --repeats 5     # CPU, Qwen's 152k vocabulary
    python experiments/throughput/bench.py --shape smollm2-135m             # CPU, a real model's shape
    python experiments/throughput/bench.py --shape qwen2.5-1.5b --peak-tflops 989 --csv out.csv   # one GPU

Every run builds a fresh random-init model of the shape (published config.json values, no download) with a
fixed seed, trains it for ``--steps`` optimiser steps through the framework's own trainer (rpbench: its
objective module under its Lightning Trainer, as ``run.py`` builds them; TRL: SFTTrainer / DPOTrainer /
GRPOTrainer), and times the steps after ``--warmup`` with a callback (CUDA synchronised). Setup before the
first step (dataset preparation, reference log-probs precomputed) is reported apart as ``setup_s``.
Frameworks are interleaved and repeated (``--repeats``; the order reverses every repeat), and the summary
gives per variant the median tokens/s and its spread (min-max), MFU, peak memory, and rpbench/TRL per pair.

Equal on both sides: model shape and seed, dtype (bf16 weights and autocast on CUDA, fp32 on CPU), attention
kernel (flash_attention_2 where installed on CUDA, else sdpa), activation checkpointing (``--checkpointing``),
AdamW, one micro-batch per optimiser step, and the data: synthetic role-play token sequences with log-normal
lengths (median ``--median``, at most ``--max-len``) split into a system turn and 2-4 user/assistant
exchanges. Tokens per step: SFT packs to ``--tokens-per-step`` (padded variants take as many samples as fit on
average); DPO takes ``--pairs`` pairs (prompt = the history, replies = a final assistant turn each); GRPO
takes ``--prompts`` prompts x ``--generations`` completions of ``--completion-len`` new tokens (temperature
1, no early stop in practice for a random model). tokens/s counts real (non-padding) tokens of the training
forward (GRPO: prompt + completion tokens of the generation batch), each framework its own.

MFU = 6 x N x tokens/s / peak, N the matmul parameters (the output layer included, the input embedding
not), peak from ``--peak-tflops`` (dense bf16: H100/H200 989). For GRPO this nominal figure ignores that
generation is a forward only. Also printed: evaluation generation, batched vs one prompt at a time (and
the static KV cache), the speed-up that ``rpbench.models.generation`` batching gives.
"""

from __future__ import annotations

import argparse
import csv
import functools
import gc
import hashlib
import importlib
import importlib.util
import itertools
import logging
import math
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

QWEN25 = {"rope_theta": 1e6, "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "vocab_size": 151936}
# Published config.json values of the Qwen2.5 base models (no download needed); "tokenizer" = its vocabulary.
SHAPES = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": "tokenizer", "tie_word_embeddings": True},
    "cpu-152k": {**QWEN25, "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-0.5b": {**QWEN25, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-1.5b": {**QWEN25, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2.5-7b": {**QWEN25, "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944,
                   "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "tie_word_embeddings": False},
    # HuggingFaceTB/SmolLM2-135M-Instruct's config.json (a Llama; model=smollm2-135m-instruct), random weights
    "smollm2-135m": {"architecture": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
                     "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                     "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
                     "tie_word_embeddings": True},
}  # fmt: skip
ARCHITECTURES = {"qwen2": "Qwen2Config", "llama": "LlamaConfig"}  # a shape's "architecture" (default qwen2)
# Dense bf16 peaks, for MFU when --peak-tflops is not given.
PEAK_BF16_TFLOPS = {"H200": 989, "H100": 989, "A100": 312, "L40S": 362, "A10G": 125}
OBJECTIVES = ("sft", "dpo", "grpo")
CSV_FIELDS = (
    "objective", "variant", "framework", "repeat", "shape", "device", "dtype", "attn", "checkpointing", "steps",
    "tokens", "seconds", "tokens_per_s", "mfu", "peak_gib", "setup_s",
)  # fmt: skip


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# -- model and data --------------------------------------------------------------------------------------


@dataclass
class Setup:
    shape: str
    device: torch.device
    dtype: torch.dtype
    attn: str
    checkpointing: bool
    seed: int
    tokenizer: object = None
    samples: dict = field(default_factory=dict)

    @property
    def on_cuda(self) -> bool:
        return self.device.type == "cuda"


def build_model(setup: Setup):
    """A fresh random-init causal LM of the shape (same seed, so the same weights every run)."""
    import transformers
    from transformers import AutoModelForCausalLM

    shape = dict(SHAPES[setup.shape])
    config_cls = getattr(transformers, ARCHITECTURES[shape.pop("architecture", "qwen2")])
    if shape["vocab_size"] == "tokenizer":
        shape["vocab_size"] = len(setup.tokenizer)
    tok = setup.tokenizer
    config = config_cls(**shape, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(setup.seed)
    with torch.device(setup.device):
        model = AutoModelForCausalLM.from_config(config, dtype=setup.dtype, attn_implementation=setup.attn)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def matmul_params(model) -> int:
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    return total - embedding.numel() + (head.numel() if head is embedding else 0)


def role_play_lengths(n: int, median: int, max_len: int, rng: torch.Generator) -> list[int]:
    """Log-normal conversation lengths (sigma 0.6: a long right tail), clipped to [median / 8, max_len]."""
    lengths = (torch.randn(n, generator=rng) * 0.6 + math.log(median)).exp()
    return lengths.clamp(max(8, median // 8), max_len).long().tolist()


def assistant_mask(length: int, rng: torch.Generator) -> list[bool]:
    """Which tokens of a conversation are the assistant's: a system turn (~15%), then 2-4 user/assistant
    exchanges cut at random points, ending on an assistant turn."""
    exchanges = int(torch.randint(2, 5, (1,), generator=rng))
    system = max(1, int(0.15 * length))
    cuts = sorted(torch.randint(system + 1, max(system + 2, length), (2 * exchanges - 1,), generator=rng).tolist())
    bounds = [system, *cuts, length]
    mask = [False] * length
    for k in range(exchanges):  # user [bounds[2k], bounds[2k+1]), assistant [bounds[2k+1], bounds[2k+2])
        for t in range(bounds[2 * k + 1], bounds[2 * k + 2]):
            mask[t] = True
    return mask


def last_reply_start(assistant: list[bool]) -> int:
    """Where the last assistant turn starts."""
    t = len(assistant)
    while t > 0 and assistant[t - 1]:
        t -= 1
    return t if t < len(assistant) else len(assistant) - 1


def make_data(setup: Setup, args) -> None:
    """The samples of each objective, as token ids (GRPO prompts also as text, which TRL tokenizes)."""
    rng = torch.Generator().manual_seed(setup.seed)
    specials = set(setup.tokenizer.all_special_ids)  # the tokenizer's ids fit every shape's vocabulary
    vocab_ids = [t for t in range(len(setup.tokenizer)) if t not in specials]

    def tokens(n: int) -> list[int]:
        return [vocab_ids[i] for i in torch.randint(0, len(vocab_ids), (n,), generator=rng).tolist()]

    n_sft = max(args.tokens_per_step * (args.steps + 1) // args.median * 2, 16)
    sft = []
    for i, length in enumerate(role_play_lengths(n_sft, args.median, args.max_len, rng)):
        assistant = assistant_mask(length, rng)
        ids = tokens(length)
        sft.append({"id": f"s{i}", "input_ids": ids, "labels": [t if a else -100 for t, a in zip(ids, assistant)]})
    dpo = []
    for i, length in enumerate(role_play_lengths(args.pairs * (args.steps + 1), args.median, args.max_len, rng)):
        start = last_reply_start(assistant_mask(length, rng))
        prompt, chosen = tokens(start), tokens(length - start)
        rejected = tokens(max(1, int(len(chosen) * float(torch.empty(1).uniform_(0.5, 1.5, generator=rng)))))
        dpo.append({"id": f"p{i}", "prompt": prompt, "chosen": chosen, "rejected": rejected})
    grpo = []
    prompt_median = max(8, args.median // 2)
    for i, length in enumerate(role_play_lengths(args.prompts * (args.steps + 1), prompt_median, args.max_len, rng)):
        text = setup.tokenizer.decode(tokens(length), skip_special_tokens=True)
        ids = setup.tokenizer(text, add_special_tokens=False)["input_ids"]
        grpo.append({"id": f"g{i}", "text": text, "prompt_ids": ids})
    setup.samples = {"sft": sft, "dpo": dpo, "grpo": grpo}


# -- timing ----------------------------------------------------------------------------------------------


@dataclass
class Timer:
    """Step times and tokens after ``warmup`` steps; the time from the start of fit to the first step."""

    device: torch.device
    warmup: int
    started: float = 0.0
    first_step: float | None = None
    steps: int = 0
    timed_from: float | None = None
    timed_until: float = 0.0
    tokens: int = 0

    def sync(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def step_begin(self) -> None:
        now = self.sync()
        if self.first_step is None:
            self.first_step = now
        if self.steps == self.warmup:
            self.timed_from = now

    def step_end(self, tokens: int) -> None:
        now = self.sync()
        self.steps += 1
        if self.steps > self.warmup:
            self.tokens += tokens
            self.timed_until = now


@dataclass
class Result:
    objective: str
    variant: str
    framework: str
    repeat: int
    tokens: int
    seconds: float
    steps: int
    peak_gib: float
    setup_s: float
    params: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def measure(setup: Setup, run: Callable[[Timer], int]) -> tuple[Timer, float, int]:
    """Run one training under a fresh Timer; (timer, peak GiB, matmul params)."""
    gc.collect()
    if setup.on_cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(setup.device)
    timer = Timer(setup.device, warmup=0)
    timer.started = timer.sync()
    params = run(timer)
    peak = torch.cuda.max_memory_allocated(setup.device) / 2**30 if setup.on_cuda else float("nan")
    return timer, peak, params


# -- rpbench ---------------------------------------------------------------------------------------------


def rpbench_run(setup: Setup, args, objective: str, options: dict, timer: Timer) -> int:
    """Fit rpbench's objective module with its Lightning Trainer for ``args.steps`` steps."""
    import lightning as L

    from rpbench.models.config_tree import compose_run_config
    from rpbench.objectives.dpo import pair_sample
    from rpbench.objectives.registry import OBJECTIVES
    from rpbench.training import build_datamodule, build_trainer
    from rpbench.validate import validate

    timer.warmup = args.warmup
    overrides = [
        f"objective={objective}",
        f"trainer={'gpu' if setup.on_cuda else 'cpu'}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "++trainer.enable_checkpointing=false",
        f"++trainer.max_steps={args.steps}",
        "objective.grad_accum=1",
        "objective.warmup_ratio=0.0",
        f"seed={setup.seed}",
        *[f"objective.{k}={v}" for k, v in options.items()],
    ]
    training = validate(
        compose_run_config(overrides, Path(tempfile.gettempdir()))
    ).training  # trainer=gpu: bf16-mixed (on the bf16 weights); cpu: 32-true
    module_cls = OBJECTIVES.get(objective)
    model = build_model(setup)
    if setup.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    tokenizer = setup.tokenizer
    if objective == "sft":
        samples = setup.samples["sft"]
    elif objective == "dpo":
        samples = []
        for p in setup.samples["dpo"]:
            rows = [(p["prompt"] + p[side], [-100] * len(p["prompt"]) + p[side]) for side in ("chosen", "rejected")]
            samples.append(pair_sample(p["id"], *rows[0], *rows[1]))
    else:
        samples = [
            {
                "id": p["id"],
                "input_ids": p["prompt_ids"] + [tokenizer.eos_token_id],
                "labels": [-100] * len(p["prompt_ids"]) + [tokenizer.eos_token_id],
                "prompt_ids": p["prompt_ids"],
                "messages": [{"role": "user", "content": p["text"]}],
                "reference": "",
            }
            for p in setup.samples["grpo"]
        ]
    module = module_cls(model, tokenizer, training.objective)

    class Callback(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            timer.step_begin()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if objective == "grpo":
                tokens = pl_module._step_tokens
            elif "attention_mask" in batch:
                tokens = int(batch["attention_mask"].sum())
            else:
                tokens = int(batch["input_ids"].numel())
            timer.step_end(tokens)

    with tempfile.TemporaryDirectory(prefix="bench-rpbench-") as out_dir:
        datamodule = build_datamodule(training, module_cls, samples, [], tokenizer)
        trainer = build_trainer(training, Path(out_dir), None, [Callback()])
        trainer.fit(module, datamodule=datamodule)
    params = matmul_params(model)
    del module, trainer, model
    return params


# -- TRL -------------------------------------------------------------------------------------------------


def trl_common(setup: Setup, args, out_dir: str) -> dict:
    return {
        "output_dir": out_dir,
        "report_to": "none",
        "logging_steps": 1,
        "save_strategy": "no",
        "max_steps": args.steps,
        "learning_rate": 1e-5,
        "gradient_accumulation_steps": 1,
        "max_grad_norm": 1.0,
        "bf16": setup.on_cuda,
        "use_cpu": not setup.on_cuda,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "log_level": "error",
        "seed": setup.seed,
        "train_sampling_strategy": "sequential",  # samples in the order trl_run gives them (rpbench's)
        "gradient_checkpointing": setup.checkpointing,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "use_liger_kernel": args.liger,
    }


def rpbench_order(items: list, batch_size: int, seed: int) -> list:
    """``items`` in the order rpbench's fixed-size batches take them in epoch 0, so TRL's steps see the same
    samples (SFT packing excepted: each framework packs its own way to the same token budget)."""
    from rpbench.data.batching import shuffled_chunks

    return [items[i] for batch in shuffled_chunks(len(items), batch_size, seed) for i in batch]


def trl_run(setup: Setup, args, objective: str, options: dict, timer: Timer) -> int:
    """Train with TRL's trainer for ``args.steps`` steps; tokens from the trainer's own token count."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    timer.warmup = args.warmup
    model = build_model(setup)
    holder: dict = {}

    def seen() -> int:
        trainer = holder["trainer"]
        return int(getattr(trainer, "_total_train_tokens", 0) or trainer.state.num_input_tokens_seen)

    class Callback(TrainerCallback):
        before = 0

        def on_step_begin(self, args_, state, control, **kwargs):
            timer.step_begin()
            self.before = seen()

        def on_step_end(self, args_, state, control, **kwargs):
            timer.step_end(seen() - self.before)

    with tempfile.TemporaryDirectory(prefix="bench-trl-") as out_dir:
        common = trl_common(setup, args, out_dir)
        if objective == "sft":
            from trl import SFTConfig, SFTTrainer

            rows = [
                {"input_ids": s["input_ids"], "completion_mask": [int(t != -100) for t in s["labels"]]}
                for s in setup.samples["sft"]
            ]
            rows = rpbench_order(rows, options["per_device_train_batch_size"], setup.seed)
            config = SFTConfig(**common, completion_only_loss=True, dataset_num_proc=None, **options)
            trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(rows),
                                 processing_class=setup.tokenizer)  # fmt: skip
        elif objective == "dpo":
            from trl import DPOConfig, DPOTrainer

            class PretokenizedDPOTrainer(DPOTrainer):
                """DPOTrainer on token ids given as prompt_ids / chosen_ids / rejected_ids (its own collator,
                loss and step; only its tokenisation of text is skipped)."""

                def _prepare_dataset(self, dataset, *unused, **kwargs):
                    return dataset

            rows = [{"prompt_ids": p["prompt"], "chosen_ids": p["chosen"], "rejected_ids": p["rejected"]}
                    for p in setup.samples["dpo"]]  # fmt: skip
            rows = rpbench_order(rows, args.pairs, setup.seed)
            config = DPOConfig(**common, per_device_train_batch_size=args.pairs, beta=0.1, loss_type=["sigmoid"],
                               max_length=None, **options)  # fmt: skip
            # live reference: a second copy of the initial weights, as rpbench's frozen copy (TRL would load it
            # from the hub id); precomputed: none kept, TRL computes the log-probs with the initial policy
            ref_model = None if options.get("precompute_ref_log_probs") else build_model(setup)
            trainer = PretokenizedDPOTrainer(model=model, ref_model=ref_model, args=config,
                                             train_dataset=Dataset.from_list(rows),
                                             processing_class=setup.tokenizer)  # fmt: skip
        else:
            from trl import GRPOConfig, GRPOTrainer

            def length_reward(completions, **kwargs):  # rpbench's length_penalty with min_len 0, max_len 100
                from rpbench.scoring.rewards import length_penalty

                return length_penalty(None, completions, None, min_len=0, max_len=100, unit="words")

            rows = rpbench_order([{"prompt": p["text"]} for p in setup.samples["grpo"]], args.prompts, setup.seed)
            config = GRPOConfig(
                **common,
                per_device_train_batch_size=args.prompts * args.generations,
                num_generations=args.generations,
                max_completion_length=args.completion_len,
                temperature=1.0,
                top_p=1.0,
                beta=0.0,
                loss_type="dapo",
                epsilon_high=0.28,
                num_iterations=1,
                steps_per_generation=1,
                shuffle_dataset=False,
                **options,
            )
            trainer = GRPOTrainer(model=model, reward_funcs=length_reward, args=config,
                                  train_dataset=Dataset.from_list(rows), processing_class=setup.tokenizer)  # fmt: skip
        holder["trainer"] = trainer
        trainer.remove_callback(PrinterCallback)  # the per-step log dicts
        trainer.add_callback(Callback())
        trainer.train()
    params = matmul_params(model)
    del trainer, model, holder["trainer"]
    return params


# -- variants ----------------------------------------------------------------------------------------------


def variants(setup: Setup, args) -> dict[str, list[tuple[str, str, dict]]]:
    """Per objective: (name, framework, options). rpbench first; TRL at its best on this machine."""
    budget, per_row = args.tokens_per_step, max(1, round(args.tokens_per_step / args.median))
    flash = "flash" in setup.attn
    sft = [
        ("rpbench packed", "rpbench", {"packing": True, "max_tokens_per_batch": budget}),
        ("rpbench padded", "rpbench", {"packing": False, "batch_size": per_row}),
        ("trl padded", "trl", {"per_device_train_batch_size": per_row, "max_length": args.max_len}),
        (
            "trl packing",
            "trl",
            {"per_device_train_batch_size": 1, "packing": True, "packing_strategy": "bfd", "max_length": budget},
        ),  # fmt: skip
    ]
    if flash:  # TRL's padding_free isolates samples only on flash-attention kernels
        sft.append(("trl padding_free", "trl", {"per_device_train_batch_size": per_row, "padding_free": True,
                                                "max_length": args.max_len}))  # fmt: skip
    dpo = [
        ("rpbench precomputed ref", "rpbench", {"batch_size": args.pairs, "precompute_ref": True}),
        ("rpbench live ref", "rpbench", {"batch_size": args.pairs, "precompute_ref": False}),
        ("trl precomputed ref", "trl", {"precompute_ref_log_probs": True}),
        ("trl live ref", "trl", {}),
    ]
    if not flash:  # pair_layout=auto packs on flash kernels only; show the packed forward on sdpa too
        dpo.insert(1, ("rpbench precomputed ref packed", "rpbench",
                       {"batch_size": args.pairs, "precompute_ref": True, "pair_layout": "packed"}))  # fmt: skip
    grpo_common = {"batch_size": args.prompts, "num_generations": args.generations, "beta": 0.0,
                   "max_completion_length": args.completion_len, "rewards": "[{name: length_penalty, weight: 1.0, "
                   "kwargs: {min_len: 0, max_len: 100, unit: words}}]"}  # fmt: skip
    grpo = [
        ("rpbench hf", "rpbench", grpo_common),
        ("rpbench hf static cache", "rpbench", {**grpo_common, "generation_cache": "static"}),
        ("trl hf", "trl", {}),
    ]
    if installed("vllm") and setup.on_cuda:
        grpo.insert(2, ("rpbench vllm", "rpbench", {**grpo_common, "rollout_backend": "vllm"}))
        grpo.append(
            ("trl vllm", "trl", {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3})
        )
    return {"sft": sft, "dpo": dpo, "grpo": grpo}


# (rpbench variant, TRL variant) compared in the summary, like for like first; shown where both ran.
PAIRS = {
    "sft": [("rpbench packed", "trl packing"), ("rpbench packed", "trl padding_free"), ("rpbench packed", "trl padded"),
            ("rpbench padded", "trl padded")],
    "dpo": [("rpbench precomputed ref", "trl precomputed ref"), ("rpbench live ref", "trl live ref"),
            ("rpbench precomputed ref", "trl live ref")],
    "grpo": [("rpbench hf", "trl hf"), ("rpbench vllm", "trl vllm"), ("rpbench hf static cache", "trl hf")],
}  # fmt: skip


# -- evaluation generation ---------------------------------------------------------------------------------


def generation_figure(setup: Setup, args) -> list[tuple[str, float, float]]:
    """Evaluation generation: (mode, prompts/s, new tokens/s) batched, static cache, one at a time."""
    from rpbench.models.generation import GenerationSettings, generate_batches

    model = build_model(setup).eval()
    prompts = [p["prompt_ids"] for p in setup.samples["grpo"]][: args.eval_prompts]
    unreachable = [-1]  # a random model rarely emits its stop token: generate max_new_tokens everywhere
    rows = []
    for mode, batch_size, cache in (
        ("batched", args.eval_batch, "dynamic"),
        ("batched static", args.eval_batch, "static"),
        ("one at a time", 1, "dynamic"),
    ):
        opts = GenerationSettings(max_new_tokens=args.completion_len, batch_size=batch_size, progress=False,
                                 cache=cache, max_prompt_length=None, temperature=0.0, top_p=1.0, top_k=0, seed=0,
                                 synced_gpus=None, gather_per_batch=True, merge_timeout_s=3600.0)  # fmt: skip
        for _ in generate_batches(model, setup.tokenizer, prompts[:batch_size], opts, unreachable):
            pass  # warm-up
        start = time.perf_counter()
        for _ in generate_batches(model, setup.tokenizer, prompts, opts, unreachable):
            pass
        if setup.on_cuda:
            torch.cuda.synchronize(setup.device)
        seconds = time.perf_counter() - start
        rows.append((mode, len(prompts) / seconds, len(prompts) * args.completion_len / seconds))
    del model
    return rows


# -- main ----------------------------------------------------------------------------------------------------


def summarise(results: dict[tuple[str, str], list[Result]], peak_flops: float | None) -> list[str]:
    lines = [f"{'objective':<6} {'variant':<32} {'n':>2} {'tokens/s':>10} {'spread':>17} {'MFU':>6} {'GiB':>6} "
             f"{'setup s':>7}"]  # fmt: skip
    for (objective, variant), runs in results.items():
        rates = [r.tokens_per_s for r in runs]
        median = statistics.median(rates)
        mfu = f"{6 * runs[0].params * median / peak_flops:6.1%}" if peak_flops else "   n/a"
        peak = max(r.peak_gib for r in runs)
        lines.append(
            f"{objective:<6} {variant:<32} {len(runs):>2} {median:>10.0f} {min(rates):>8.0f}-{max(rates):<8.0f} "
            f"{mfu} {peak:>6.1f} {statistics.median(r.setup_s for r in runs):>7.1f}"
        )
    medians = {key: statistics.median(r.tokens_per_s for r in runs) for key, runs in results.items()}
    lines.append("rpbench/TRL (median tokens/s):")
    for objective in OBJECTIVES:
        for ours, theirs in PAIRS[objective]:
            if (objective, ours) in medians and (objective, theirs) in medians:
                ratio = medians[(objective, ours)] / medians[(objective, theirs)]
                lines.append(f"  {objective}: {ours} / {theirs} = {ratio:.2f}x")
        best = {f: max((v for (o, n), v in medians.items() if o == objective and n.startswith(f)), default=None)
                for f in ("rpbench", "trl")}  # fmt: skip
        if None not in best.values():
            lines.append(f"  {objective}: best rpbench / best TRL = {best['rpbench'] / best['trl']:.2f}x")
    return lines


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--objectives", default="sft,dpo,grpo")
    parser.add_argument("--only", help="comma-separated variant names to run (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="optimiser steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=2, help="untimed first steps of each run")
    parser.add_argument("--median", type=int, help="median conversation length (default 500 on CUDA, 64 on CPU)")
    parser.add_argument("--max-len", type=int, help="longest conversation (default 2048 on CUDA, 256 on CPU)")
    parser.add_argument("--tokens-per-step", type=int, help="SFT tokens per optimiser step (default 8 x max-len)")
    parser.add_argument("--pairs", type=int, help="DPO pairs per step (default 8 on CUDA, 4 on CPU)")
    parser.add_argument("--prompts", type=int, default=2, help="GRPO prompts per step")
    parser.add_argument("--generations", type=int, help="GRPO completions per prompt (default 8 on CUDA, 4 on CPU)")
    parser.add_argument("--completion-len", type=int, help="new tokens per completion (default 256 CUDA, 16 CPU)")
    parser.add_argument("--eval-prompts", type=int, help="prompts of the generation figure (default 32 / 8)")
    parser.add_argument("--eval-batch", type=int, default=16, help="batch size of batched evaluation generation")
    parser.add_argument("--no-generation-figure", action="store_true")
    parser.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--attn", help="default: flash_attention_2 where installed on CUDA, else sdpa")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="device's dense peak for the dtype (MFU); default: "
        "the bf16 peak of known GPUs (H200/H100 989), none on CPU",
    )
    parser.add_argument("--csv", type=Path, help="write every run here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    args.median = args.median or (500 if cuda else 64)
    args.max_len = args.max_len or (2048 if cuda else 256)
    args.tokens_per_step = args.tokens_per_step or 8 * args.max_len
    args.pairs = args.pairs or (8 if cuda else 4)
    args.generations = args.generations or (8 if cuda else 4)
    args.completion_len = args.completion_len or (256 if cuda else 16)
    args.eval_prompts = args.eval_prompts or (32 if cuda else 8)
    args.liger = cuda and installed("liger_kernel")
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    return args


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore")
    import datasets

    from rpbench.core.quiet import quiet_libraries
    from rpbench.models import load_tokenizer
    from rpbench.models.config_tree import compose_model_config

    quiet_libraries()
    datasets.disable_progress_bars()
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    attn = args.attn or ("flash_attention_2" if device.type == "cuda" and installed("flash_attn") else "sdpa")
    setup = Setup(args.shape, device, torch.bfloat16 if device.type == "cuda" else torch.float32, attn,
                  args.checkpointing, args.seed)  # fmt: skip
    setup.tokenizer = load_tokenizer(compose_model_config("tiny-qwen2"))
    make_data(setup, args)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    digest = hashlib.sha1(str(setup.samples["sft"][0]["input_ids"][:16]).encode()).hexdigest()[:8]
    print(f"device={where} shape={args.shape} dtype={str(setup.dtype).removeprefix('torch.')} attn={attn} "
          f"checkpointing={args.checkpointing} liger={args.liger} vllm={installed('vllm')} trl="
          f"{importlib.import_module('trl').__version__} median={args.median} max_len={args.max_len} "
          f"tokens/step(SFT)={args.tokens_per_step} pairs={args.pairs} prompts={args.prompts}x{args.generations}"
          f"x{args.completion_len} steps={args.steps} warmup={args.warmup} repeats={args.repeats} data={digest}",
          flush=True)  # fmt: skip
    chosen = {o.strip() for o in args.objectives.split(",")}
    only = {v.strip() for v in args.only.split(",")} if args.only else None
    plan = {
        o: [v for v in vs if only is None or v[0] in only] for o, vs in variants(setup, args).items() if o in chosen
    }
    peak_tflops = args.peak_tflops or next(
        (peak for key, peak in PEAK_BF16_TFLOPS.items() if device.type == "cuda" and key in where), None
    )
    peak_flops = peak_tflops * 1e12 if peak_tflops else None
    results: dict[tuple[str, str], list[Result]] = {}
    failures: list[str] = []
    writer = None
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        handle = args.csv.open("w", newline="")
        writer = csv.DictWriter(handle, CSV_FIELDS)
        writer.writeheader()
    for repeat in range(args.repeats):
        for objective, runs in plan.items():
            ours, theirs = ([v for v in runs if v[1] == f] for f in ("rpbench", "trl"))
            order = [v for pair in itertools.zip_longest(ours, theirs) for v in pair if v is not None]  # interleave
            if repeat % 2:
                order.reverse()
            for name, framework, options in order:
                run = rpbench_run if framework == "rpbench" else trl_run
                try:
                    timer, peak, params = measure(setup, functools.partial(run, setup, args, objective, options))
                except Exception as error:  # noqa: BLE001 - one variant failing (out of memory) leaves the rest
                    print(f"[{repeat}] {objective:<5} {name:<32} failed: {type(error).__name__}: {error}"[:500])
                    failures.append(f"{objective} {name}: {type(error).__name__}")
                    continue
                seconds = timer.timed_until - (timer.timed_from or timer.timed_until)
                result = Result(objective, name, framework, repeat, timer.tokens, seconds, timer.steps - args.warmup,
                                peak, (timer.first_step or timer.started) - timer.started, params)  # fmt: skip
                results.setdefault((objective, name), []).append(result)
                mfu = 6 * params * result.tokens_per_s / peak_flops if peak_flops else float("nan")
                print(f"[{repeat}] {objective:<5} {name:<32} {result.tokens_per_s:>10.0f} tokens/s "
                      f"({result.tokens} tokens, {result.steps} steps, {seconds:.2f} s; setup {result.setup_s:.1f} s)",
                      flush=True)  # fmt: skip
                if writer:
                    writer.writerow({
                        "objective": objective, "variant": name, "framework": framework, "repeat": repeat,
                        "shape": args.shape, "device": where, "dtype": str(setup.dtype).removeprefix("torch."),
                        "attn": attn, "checkpointing": args.checkpointing, "steps": result.steps,
                        "tokens": result.tokens, "seconds": f"{seconds:.4f}",
                        "tokens_per_s": f"{result.tokens_per_s:.1f}", "mfu": f"{mfu:.4f}",
                        "peak_gib": f"{peak:.2f}", "setup_s": f"{result.setup_s:.2f}",
                    })  # fmt: skip
                    handle.flush()
    print("\n".join(summarise(results, peak_flops)))
    if failures:
        print("failed runs:", "; ".join(dict.fromkeys(failures)))
    if not args.no_generation_figure:
        rows = generation_figure(setup, args)
        print(f"evaluation generation ({args.eval_prompts} prompts, {args.completion_len} new tokens each):")
        for mode, prompts_s, tokens_s in rows:
            print(f"  {mode:<15} {prompts_s:>8.2f} prompts/s {tokens_s:>9.0f} new tokens/s")
        print(f"  batched / one at a time: {rows[0][1] / rows[2][1]:.1f}x")
        if writer:
            for mode, _, tokens_s in rows:
                writer.writerow({"objective": "eval-generation", "variant": mode, "framework": "rpbench",
                                 "shape": args.shape, "device": where, "tokens_per_s": f"{tokens_s:.1f}"})  # fmt: skip
    if writer:
        handle.close()
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
