"""The evaluation stage's typed settings (the ``evaluator`` config group), parsed once at startup.

``EvaluatorSettings`` holds what every evaluator shares: where generation runs and how it decodes, the
reference metrics and their options, the bootstrap, the comparison run and the radar chart
(conf/evaluator/common/default.yaml); a judged evaluator's (``JudgedSettings``) adds its judge's reply length.
A benchmark with keys of its own declares a subclass as its ``settings_class``
(rpbench/eval/benchmarks/base.py); every value comes from the YAML (conf/evaluator/*.yaml), none from code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpbench.core.typed import Problem, Settings, as_dict
from rpbench.eval.stats import METHODS
from rpbench.models.generation import GenerationSettings
from rpbench.scoring.chat.client import EndpointSettings
from rpbench.scoring.human_agreement import LEVELS
from rpbench.scoring.human_ratings import ratings_file_problems
from rpbench.scoring.metrics import (
    BLEU_EMPTY,
    METRICS,
    ROUGE_ORDERS,
    ROUGE_TOKENIZERS,
    ROUGE_TYPES,
    backbone_available,
)

BACKENDS = ("local", "vllm", "endpoint")


@dataclass(frozen=True, kw_only=True)
class Endpoint(Settings):
    """An OpenAI-compatible server that generates instead of the run's model (``backend=endpoint``)."""

    base_url: str | None
    model: str | None
    api_key_env: str | None
    concurrency: int
    timeout_s: float

    def problems(self) -> list[Problem]:
        found = []
        if self.concurrency < 1:
            found.append(("concurrency", "an integer >= 1 (requests in flight)"))
        if self.timeout_s <= 0:
            found.append(("timeout_s", "a number of seconds > 0"))
        return found


@dataclass(frozen=True, kw_only=True)
class GenerationEndpoint(Endpoint):
    """The server generation asks (``backend=endpoint``), through the judge's client: its retries too."""

    max_retries: int
    backoff_initial_s: float
    backoff_max_s: float
    retry_after_max_s: float

    def problems(self) -> list[Problem]:
        found = super().problems()
        if self.max_retries < 0:
            found.append(("max_retries", "an integer >= 0"))
        for key in ("backoff_initial_s", "backoff_max_s", "retry_after_max_s"):
            if getattr(self, key) < 0:
                found.append((key, "a number of seconds >= 0"))
        return found

    def client_config(self, progress: bool) -> EndpointSettings:
        """The client settings generation runs with: this endpoint's, and what generation fixes itself (each
        request carries its own sampling and length; no cache, since sampled replies must not repeat; no
        re-asks, prices, budget or prompt limit)."""
        return EndpointSettings(
            backend="vllm",
            model=self.model,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            multimodal=True,
            concurrency=self.concurrency,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_initial_s=self.backoff_initial_s,
            backoff_max_s=self.backoff_max_s,
            retry_after_max_s=self.retry_after_max_s,
            temperature=0.0,
            top_p=None,
            parse_tries=1,
            parse_failure="exclude",
            warn_parse_failure_rate=1.0,
            warn_request_failure_rate=1.0,
            max_prompt_chars=None,  # the test records' own prompts: the server refuses one beyond its context
            price_input_per_1m=0.0,
            price_output_per_1m=0.0,
            cache_path=None,
            progress=progress,
            budget=None,
            server=None,
            record_to=None,
            replay_from=None,
        )


@dataclass(frozen=True, kw_only=True)
class VLLMSettings(Settings):
    gpu_memory_utilization: float

    def problems(self) -> list[Problem]:
        ok = 0 < self.gpu_memory_utilization <= 1
        return [] if ok else [("gpu_memory_utilization", "a share of the GPU in (0, 1]")]


@dataclass(frozen=True, kw_only=True)
class Bootstrap(Settings):
    n_resamples: int
    confidence: float
    seed: int
    method: str

    def problems(self) -> list[Problem]:
        found = []
        if self.n_resamples < 1:
            found.append(("n_resamples", "an integer >= 1"))
        if not 0 < self.confidence < 1:
            found.append(("confidence", "a level in (0, 1), e.g. 0.95"))
        if self.method not in METHODS:
            found.append(("method", f"one of {', '.join(METHODS)}"))
        return found

    def as_kwargs(self) -> dict[str, Any]:
        return as_dict(self)


@dataclass(frozen=True, kw_only=True)
class BleuSettings(Settings):
    empty: str

    def problems(self) -> list[Problem]:
        return [] if self.empty in BLEU_EMPTY else [("empty", f"one of {', '.join(BLEU_EMPTY)}")]


@dataclass(frozen=True, kw_only=True)
class RougeSettings(Settings):
    tokenizer: str  # every ROUGE type's

    def problems(self) -> list[Problem]:
        return [] if self.tokenizer in ROUGE_TOKENIZERS else [("tokenizer", f"one of {', '.join(ROUGE_TOKENIZERS)}")]


@dataclass(frozen=True, kw_only=True)
class RougeLsumSettings(Settings):
    order: str

    def problems(self) -> list[Problem]:
        return [] if self.order in ROUGE_ORDERS else [("order", f"one of {', '.join(ROUGE_ORDERS)}")]


@dataclass(frozen=True, kw_only=True)
class BERTScoreSettings(Settings):
    model: str
    layer: int | None
    fallback: bool
    batch_size: int

    def problems(self) -> list[Problem]:
        found = [] if self.batch_size >= 1 else [("batch_size", "an integer >= 1")]
        if self.layer is not None and self.layer < 1:
            found.append(("layer", "null (the model's default) or a layer number >= 1"))
        return found


@dataclass(frozen=True, kw_only=True)
class EvaluatorSettings(Settings):
    """What every generating evaluator shares (conf/evaluator/common/default.yaml, which each extends)."""

    name: str
    backend: str
    vllm: VLLMSettings
    endpoint: GenerationEndpoint
    generation: GenerationSettings
    metrics: tuple[str, ...]
    bleu: BleuSettings
    rouge: RougeSettings
    rougeLsum: RougeLsumSettings
    bertscore: BERTScoreSettings
    bootstrap: Bootstrap
    compare_to: str | None
    judge_prompt_file: str | None
    radar_metric: str | None
    human_ratings: str | None  # people's ratings of the judged records: the judge's agreement is reported
    human_level: str
    human_scale: tuple[float, float]  # [low, high] of the ratings: the judge's verdicts' scale

    needs_metrics = True  # the generic evaluation computes reference metrics: at least one is named

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if self.backend not in BACKENDS:
            found.append(("backend", f"one of {', '.join(BACKENDS)}"))
        if self.backend == "endpoint":
            found += [
                (f"endpoint.{key}", "set with backend=endpoint")
                for key in ("base_url", "model")
                if not getattr(self.endpoint, key)
            ]
        unknown = [m for m in self.metrics if m not in METRICS.names()]
        if unknown:
            found.append(("metrics", f"names from {', '.join(METRICS.names())}"))
        elif self.needs_metrics and not self.metrics:
            found.append(("metrics", "at least one metric"))
        bertscore = self.bertscore
        if "bertscore" in self.metrics and not bertscore.fallback and not backbone_available(bertscore.model):
            found.append(
                (
                    "bertscore.model",
                    f"with bertscore.fallback=false, a backbone in the local Hugging Face cache (`hf download "
                    f"{bertscore.model}`; or bertscore.fallback=true: the packaged all-MiniLM-L6-v2, noted as such)",
                )
            )
        if self.radar_metric is not None and self.radar_metric not in METRICS.names():
            found.append(("radar_metric", "null or a metric name (drawn when it is among evaluator.metrics)"))
        if self.judge_prompt_file is not None and not Path(self.judge_prompt_file).is_file():
            found.append(("judge_prompt_file", "null or an existing file"))
        if self.human_ratings is not None and not Path(self.human_ratings).is_file():
            found.append(("human_ratings", "null or an existing file of human ratings"))
        elif self.human_ratings is not None:
            found += ratings_file_problems(self.human_ratings, self.human_scale, pairwise_allowed=False)
        if self.human_level not in LEVELS:
            found.append(("human_level", f"one of {', '.join(LEVELS)}"))
        if self.compare_to is not None and not (Path(self.compare_to) / "scores.jsonl").is_file():
            found.append(("compare_to", "an evaluated run's folder (with scores.jsonl)"))
        return found

    def metric_options(self) -> dict[str, Mapping[str, Any]]:
        """Options per metric function, for the named metrics that take some."""
        options = {"bleu": as_dict(self.bleu), "bertscore": as_dict(self.bertscore)}
        options.update({name: as_dict(self.rouge) for name in ROUGE_TYPES})
        options["rougeLsum"] = {**options["rougeLsum"], **as_dict(self.rougeLsum)}
        return {name: options[name] for name in self.metrics if name in options}


@dataclass(frozen=True, kw_only=True)
class JudgedSettings(EvaluatorSettings):
    """A judged evaluator's settings: the generating evaluators' and its judge's reply length (the judge group
    says only how the endpoint is reached and asked)."""

    judge_max_tokens: int  # tokens the judge may reply with: this benchmark's verdict, review or scores

    def problems(self) -> list[Problem]:
        found = super().problems()
        return found + ([] if self.judge_max_tokens >= 1 else [("judge_max_tokens", "an integer >= 1 (tokens)")])
