"""Training throughput of padded vs packed batches through rpbench's batch path.

    python experiments/benchmarks/throughput.py                  # tiny:qwen2 on CPU, well under a minute
    python experiments/benchmarks/throughput.py qwen2.5-7b       # a conf/model name, on the GPU
    python experiments/benchmarks/throughput.py Qwen/Qwen2.5-1.5B --max-len 2048 --batch-size 8

Each step is a full SFT step (forward, ``supervised_nll_sum`` backward, AdamW) on synthetic
role-play-like samples: log-normal lengths up to ``--max-len``, the last ~35% of each supervised.
Padded: ``--batch-size`` samples per batch in random order, padded to the longest. Packed:
one row per token-budget batch, ``--budget`` tokens (default ``batch-size x max-len``, the padded
worst case). With sdpa/eager a packed row pays attention over the whole row (a dense
block-diagonal mask), so a budget far above ``max-len`` costs quadratic attention that a
flash-attention varlen kernel skips. Real models get
random weights from their architecture (no download needed: known ids use the published shapes).

Reported per mode: real (non-padding) tokens/s, padding share, peak memory, and on CUDA the MFU:
model FLOPs per real token 6 * N + 12 * L * d * s (PaLM convention: N matmul parameters including
the output layer, L layers, d hidden size, s the sample's own length; no causal discount),
divided by time and the device's dense bf16 peak (``--peak-tflops`` for devices not listed).
The output layer runs only on supervised positions, yet counts for every token, as usual.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, Qwen2Config

from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.collate import pack_into_budget, packed_collate, pad_collate
from rpbench.models import is_tiny, load
from rpbench.models.forward import supervised_nll_sum

MODEL_CONFIGS = Path(__file__).resolve().parents[2] / "conf" / "model"
QWEN25_SMALL = {
    "rope_theta": 1e6,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
QWEN25_7B = {**QWEN25_SMALL, "vocab_size": 152064, "tie_word_embeddings": False}
LLAMA31_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rope_theta": 5e5,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}
# Published config.json shapes, so that real models need no download to be benchmarked.
ARCHITECTURES = {
    "Qwen/Qwen2.5-0.5B": (
        Qwen2Config,
        {
            **QWEN25_SMALL,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
        },
    ),
    "Qwen/Qwen2.5-1.5B": (
        Qwen2Config,
        {
            **QWEN25_SMALL,
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
        },
    ),
    "Qwen/Qwen2.5-7B": (
        Qwen2Config,
        {
            **QWEN25_7B,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
        },
    ),
    "meta-llama/Llama-3.1-8B": (LlamaConfig, LLAMA31_8B),
}
ARCHITECTURES["Qwen/Qwen2.5-7B-Instruct"] = ARCHITECTURES["Qwen/Qwen2.5-7B"]
ARCHITECTURES["meta-llama/Llama-3.1-8B-Instruct"] = ARCHITECTURES["meta-llama/Llama-3.1-8B"]
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12}


def model_config(name: str) -> dict:
    """A conf/model entry by name, or a bare ``name_or_path``."""
    path = MODEL_CONFIGS / f"{name}.yaml"
    return OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {"name_or_path": name}


def build_model(cfg: dict, attn: str, dtype: torch.dtype, device: torch.device):
    """(model, vocab size, pad id): tiny via rpbench.models.load, real ones random-init from their shape."""
    if is_tiny(cfg):
        model, tokenizer = load({**cfg, "attn_implementation": attn, "lora": None, "gradient_checkpointing": False})
        return model.to(device=device, dtype=dtype), len(tokenizer), tokenizer.pad_token_id
    name = str(cfg["name_or_path"])
    if name in ARCHITECTURES:
        config_cls, shape = ARCHITECTURES[name]
        config = config_cls(**shape)
    else:
        config = AutoConfig.from_pretrained(name)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    return model, config.vocab_size, 0


def synthetic_samples(n: int, max_len: int, vocab_size: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    lengths = (torch.randn(n, generator=g) * 0.6 + math.log(max_len / 3)).exp().clamp(16, max_len).long()
    samples = []
    for length in lengths.tolist():
        ids = torch.randint(0, vocab_size, (length,), generator=g).tolist()
        prompt = int(length * 0.65)
        samples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * prompt + ids[prompt:]})
    return samples


def matmul_params(model) -> int:
    embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    return total - embedding.numel() + (head.numel() if head is embedding else 0)


def step_flops(model, sample_lengths: torch.Tensor) -> float:
    config = model.config
    s = sample_lengths.double()
    return float(
        6 * matmul_params(model) * s.sum() + 12 * config.num_hidden_layers * config.hidden_size * (s * s).sum()
    )


def train_steps(model, batches: list[dict], device: torch.device, warmup: int) -> dict:
    """Run one SFT step per batch; time all but the first ``warmup``."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    tokens = slots = 0
    flops = 0.0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for k, batch in enumerate(batches):
        if k == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        batch = {key: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for key, v in batch.items()}
        nll, n_tokens = supervised_nll_sum(model, batch)
        (nll / max(n_tokens, 1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if k >= warmup:
            lengths = torch.diff(batch["cu_seqlens"]) if "cu_seqlens" in batch else batch["attention_mask"].sum(-1)
            tokens += int(lengths.sum())
            slots += batch["input_ids"].numel()
            flops += step_flops(model, lengths.cpu())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    return {
        "steps": len(batches) - warmup,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "padding": 1 - tokens / slots,
        "flops_per_s": flops / seconds,
        "peak_gib": peak,
    }


def peak_flops(device: torch.device, dtype: torch.dtype, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS.items() if key in name), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="tiny:qwen2", help="conf/model name, tiny:<family>, hub id or dir")
    parser.add_argument("--samples", type=int, help="default: 160 on CPU, 256 on CUDA")
    parser.add_argument("--max-len", type=int, help="default: 256 on CPU, 2048 on CUDA")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--budget", type=int, help="packed tokens per batch; default batch-size x max-len")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per mode")
    parser.add_argument("--attn", help="default: flash_attention_2 where installed on CUDA, else the config's (sdpa)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument(
        "--gradient-checkpointing", action=argparse.BooleanOptionalAction, help="default: the model config's setting"
    )
    parser.add_argument("--peak-tflops", type=float, help="device peak for MFU where it is not in the table")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    on_cuda = device.type == "cuda"
    cfg = model_config(args.model)
    dtype = getattr(torch, args.dtype or ("bfloat16" if on_cuda else "float32"))
    attn = args.attn or cfg.get("attn_implementation") or "sdpa"
    if args.attn is None and on_cuda:
        try:
            import flash_attn  # noqa: F401

            attn = "flash_attention_2"
        except ImportError:
            pass
    n_samples, max_len = args.samples or (256 if on_cuda else 160), args.max_len or (2048 if on_cuda else 256)

    model, vocab_size, pad_id = build_model(cfg, attn, dtype, device)
    checkpointing = (
        cfg.get("gradient_checkpointing", False) if args.gradient_checkpointing is None else args.gradient_checkpointing
    )
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()

    samples = synthetic_samples(n_samples, max_len, vocab_size, args.seed)
    padded = [pad_collate(samples[i : i + args.batch_size], pad_id) for i in range(0, n_samples, args.batch_size)]
    budget = args.budget or args.batch_size * max_len
    plan = pack_into_budget([len(s["input_ids"]) for s in samples], budget, seed=args.seed)
    packed = [packed_collate([samples[i] for i in batch]) for batch in plan]
    peak = peak_flops(device, dtype, args.peak_tflops)

    where = torch.cuda.get_device_name(device) if on_cuda else "cpu"
    print(
        f"device={where} model={args.model} params={sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
        f"attn={attn} dtype={str(dtype).removeprefix('torch.')} checkpointing={bool(checkpointing)} "
        f"samples={n_samples} "
        f"max_len={max_len} batch_size={args.batch_size} budget={budget}"
    )
    print(f"{'mode':<7} {'steps':>5} {'tokens':>9} {'padding':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9}")
    results = {}
    for mode, batches in (("padded", padded), ("packed", packed)):
        if len(batches) <= args.warmup:
            raise SystemExit(f"{mode}: only {len(batches)} batches for {args.warmup} warm-up steps; raise --samples")
        r = results[mode] = train_steps(model, batches, device, args.warmup)
        mfu = f"{r['flops_per_s'] / peak:6.1%}" if peak else "   n/a"
        print(
            f"{mode:<7} {r['steps']:>5} {r['tokens']:>9} {r['padding']:>8.1%} {r['tokens_per_s']:>10.0f} {mfu} "
            f"{r['peak_gib']:>9.1f}"
        )
    print(f"packed/padded tokens/s: {results['packed']['tokens_per_s'] / results['padded']['tokens_per_s']:.2f}x")
    if on_cuda and not peak:
        print("MFU n/a: device not in the peak table; pass --peak-tflops")


if __name__ == "__main__":
    main()
