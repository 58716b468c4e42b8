"""An in-process vLLM engine over the run's model: evaluation generation and GRPO rollouts.

vLLM is imported only when an engine is built (``evaluator.backend=vllm``, ``objective.rollout_backend=vllm``);
it is not a dependency (``pip install vllm``, on a CUDA machine). The engine starts from the model's weights
saved to a temporary folder (so a trained, not yet exported model is what it serves), in the model's dtype,
on the same GPU as the training model (``gpu_memory_utilization`` is the share of GPU memory it may take).
:meth:`VLLMEngine.sync_weights` copies the policy's current weights into the engine in place, as TRL's
colocated GRPO does, before each generation batch of a GRPO run.

Untested without a GPU: rpbench's CPU test suite checks the clear error when vLLM is missing, not the engine.
Single process, tensor parallel 1, no LoRA (a peft policy is refused: merge it first).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

from rpbench.models.generation import GenerationSettings, decode_completion

INSTALL_HINT = "install vLLM on a CUDA machine (pip install vllm), or use the Hugging Face backend"


def import_vllm(what: str):
    """The ``vllm`` module, or an ImportError naming the setting that asked for it."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(f"{what} needs vLLM, which is not installed: {INSTALL_HINT}") from error
    return vllm


def _plain_model(model: nn.Module) -> nn.Module:
    if hasattr(model, "peft_config"):
        raise NotImplementedError("the vLLM engine takes plain models: merge the LoRA adapters first")
    return model


def sampling_kwargs(opts: GenerationSettings, stop_ids: Sequence[int], n: int = 1, seed: int | None = None) -> dict:
    """``vllm.SamplingParams``' arguments equal to ``opts``: greedy at temperature 0, stop ids kept in the
    output, stop strings left out of it (vLLM's default)."""
    return {
        "n": n,
        "max_tokens": opts.max_new_tokens,
        "temperature": opts.temperature,
        "top_p": opts.top_p if opts.sampling else 1.0,
        "top_k": opts.top_k if opts.sampling and opts.top_k else -1,
        "repetition_penalty": opts.repetition_penalty,
        "stop": list(opts.stop),
        "stop_token_ids": list(stop_ids),
        "seed": seed,
        "skip_special_tokens": False,
    }


class VLLMEngine:
    """A ``vllm.LLM`` built from ``model``'s current weights; ``what`` names the setting in errors."""

    def __init__(self, model: nn.Module, tokenizer, *, gpu_memory_utilization: float, what: str, seed: int = 0):
        vllm = import_vllm(what)
        self._vllm = vllm
        model = _plain_model(model)
        self._folder = tempfile.TemporaryDirectory(prefix="rpbench-vllm-")
        path = Path(self._folder.name)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.llm = vllm.LLM(
            model=str(path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            enable_prefix_caching=True,
        )

    def sampling_params(self, opts: GenerationSettings, stop_ids: Sequence[int], n: int = 1, seed: int | None = None):
        """vLLM sampling settings equal to ``opts`` (``sampling_kwargs``)."""
        return self._vllm.SamplingParams(**sampling_kwargs(opts, stop_ids, n, seed))

    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        opts: GenerationSettings,
        stop_ids: Sequence[int],
        n: int = 1,
        seed: int | None = None,
    ) -> list[tuple[list[int], bool]]:
        """``n`` completions of each prompt, row ``i * n + j``: token ids up to and including the stop token,
        and whether it hit ``max_new_tokens`` instead."""
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, self.sampling_params(opts, stop_ids, n, seed), use_tqdm=opts.progress)
        rows = []
        for completion in (c for out in outputs for c in out.outputs):
            ids = list(completion.token_ids)
            stopped = completion.finish_reason == "stop"
            if stopped and isinstance(completion.stop_reason, int) and (not ids or ids[-1] != completion.stop_reason):
                ids.append(completion.stop_reason)  # a stop token vLLM left out of the output
            rows.append((ids, not stopped))
        return rows

    def generate_batches(
        self, tokenizer, prompts: Sequence[Sequence[int]], opts: GenerationSettings, stop_ids: Sequence[int]
    ) -> Iterator[tuple[list[int], list[str]]]:
        """(prompt indices, completions) as ``generation.generate_batches`` yields them, ``batch_size`` prompts
        per call (vLLM schedules inside a call; batches keep the predictions file growing)."""
        for start in range(0, len(prompts), opts.batch_size):
            batch = list(range(start, min(start + opts.batch_size, len(prompts))))
            rows = self.generate_ids([prompts[i] for i in batch], opts, stop_ids, seed=opts.seed + start)
            yield batch, [decode_completion(tokenizer, ids, stop_ids) for ids, _ in rows]

    @torch.no_grad()
    def sync_weights(self, model: nn.Module) -> None:
        """Copy ``model``'s current weights into the engine (TP 1, in-process engine)."""
        runner_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        for name, param in _plain_model(model).named_parameters():
            runner_model.load_weights([(name, param.data)])
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        del self.llm
        self._folder.cleanup()
