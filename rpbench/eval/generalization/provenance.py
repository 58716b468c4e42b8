"""What a run's EMI / R-EMI numbers depend on besides the evaluated model, recorded in metrics.json
(``eval.generalization.provenance``) so that the multi-run summary correlates only runs scored alike:
the critic and the reasoner (and their adapters), the JS encoder (and whether the packaged fallback stood
in), each prompt template's sha256, and the analysis settings (every one but the batch sizes, which change
speed only), with the reasoner's decoding and the critic's row length.

``differing`` compares the provenances of several runs key by key (dotted paths).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REASONING_KEYS = ("max_new_tokens", "max_prompt_length", "temperature", "top_p", "top_k", "seed")
ABSENT = "(absent)"


def analysis_provenance(
    estimators: Mapping[str, Mapping[str, Any]],
    embedder: Mapping[str, Any],
    prompts: Mapping[str, Mapping[str, str]],
    settings: Mapping[str, Any],
    reasoning: Mapping[str, Any],
    critic_max_length: int,
) -> dict[str, Any]:
    """The provenance dict (module docstring) from the estimators' records (``estimator.provenance`` by role:
    description, weights and adapter digests), ``TextEmbedder.describe()``, ``RemidPrompts.records()``,
    the analysis settings (``AnalysisSettings`` as a dict) and the reasoner's decoding settings."""
    return {
        **{role: dict(record) for role, record in estimators.items()},
        "encoder": {
            **{key: embedder[key] for key in ("encoder", "layer", "pooling", "max_length")},
            "fallback_used": embedder["fallback_reason"] is not None,
        },
        "prompts": {name: record["sha256"] for name, record in prompts.items()},
        "analysis": {
            **{key: value for key, value in settings.items() if key != "batch_size"},
            "critic_max_length": critic_max_length,
            "reasoning": {key: reasoning[key] for key in REASONING_KEYS},
        },
    }


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> {dotted key: leaf value}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def differing(provenances: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """dotted key -> {run: value} for every key whose value is not the same in all runs (a key a run lacks:
    ``ABSENT``)."""
    flat = {run: flatten(p) for run, p in provenances.items()}
    keys = sorted({key for values in flat.values() for key in values})
    out = {}
    for key in keys:
        values = {run: values[key] if key in values else ABSENT for run, values in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out[key] = values
    return out
