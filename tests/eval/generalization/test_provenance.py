"""A run's provenance (what its EMI / R-EMI numbers depend on besides the evaluated model) from the real
estimator specs, prompts and encoder; and the JS encoder's fallback as an explicit choice: a missing
encoder stops the run at startup unless the fallback is chosen."""

from __future__ import annotations

import pytest

from rpbench.core.errors import ConfigError
from rpbench.data.remid_prompts import remid_prompts
from rpbench.eval.generalization.embed import PACKAGED_ENCODER, load_text_embedder
from rpbench.eval.generalization.estimator import provenance, resolve_spec
from rpbench.eval.generalization.provenance import ABSENT, analysis_provenance, differing
from rpbench.validate import validate

MISSING = "rpbench-test/not-a-cached-encoder"
SETTINGS = {"weighting": "equal", "delta_form": "sum", "batch_size": 8, "convergence_sizes": [10, 30]}
REASONING = {"max_new_tokens": 2048, "max_prompt_length": 3072, "temperature": 0.0, "top_p": 1.0, "top_k": 0}


def test_provenance_of_the_estimators_encoder_prompts_and_settings():
    prompts = remid_prompts(None).records()
    fell_back = load_text_embedder(MISSING, 0, 512, "mean_skip_first", True, device="cpu").describe()
    critic, reasoner = resolve_spec("critic", "self", []), resolve_spec("reasoner", "tiny-qwen3", [])
    estimators = {"critic": provenance(critic), "reasoner": provenance(reasoner)}
    reasoning = {**REASONING, "seed": 0, "batch_size": 4, "progress": True}
    p = analysis_provenance(estimators, fell_back, prompts, SETTINGS, reasoning, 4096)
    assert p["critic"] == {
        "description": critic.description,
        "weights_sha256": None,
        "is_evaluated_model": True,
        "adapters": [],
    }
    assert p["reasoner"]["description"] == "model=tiny-qwen3" and not p["reasoner"]["is_evaluated_model"]
    assert p["encoder"] == {
        "encoder": PACKAGED_ENCODER,
        "layer": 0,
        "pooling": "mean_skip_first",
        "max_length": 512,
        "fallback_used": True,
    }
    assert p["prompts"] == {name: record["sha256"] for name, record in prompts.items()}
    assert {"pxy_user", "thought_user", "policy_system"} <= set(p["prompts"])
    assert p["analysis"] == {  # batch sizes change speed only; decoding settings that shape r are kept
        "weighting": "equal",
        "delta_form": "sum",
        "convergence_sizes": [10, 30],
        "critic_max_length": 4096,
        "reasoning": {**REASONING, "seed": 0},
    }
    plain = load_text_embedder(None, 0, 512, "mean_skip_first", False, device="cpu").describe()
    other = analysis_provenance(estimators, plain, prompts, SETTINGS, reasoning, 2048)
    assert differing({"a": p, "b": p}) == {}
    assert differing({"a": p, "b": other}) == {
        "encoder.fallback_used": {"a": True, "b": False},
        "analysis.critic_max_length": {"a": 4096, "b": 2048},
    }
    del other["critic"]["weights_sha256"]
    assert differing({"a": p, "b": other})["critic.weights_sha256"] == {"a": None, "b": ABSENT}


def test_a_missing_encoder_stops_the_run_at_startup_unless_its_fallback_is_chosen(compose):
    assert compose("evaluator=rpgbench").evaluator.generalization.encoder_fallback is False  # the default
    missing = ["evaluator=rpgbench", "data=sample_rpgbench", f"evaluator.generalization.encoder={MISSING}"]
    with pytest.raises(ConfigError) as refused:
        validate(compose(*missing, "data.remid_encoder_fallback=false"))
    message = str(refused.value)
    assert f"evaluator.generalization.encoder={MISSING} is not available locally" in message
    assert "evaluator.generalization.encoder_fallback=true" in message and PACKAGED_ENCODER in message
    validate(compose(*missing))  # the bundled sample chooses the fallback (data.remid_encoder_fallback)
    validate(compose(*missing, "data.remid_encoder_fallback=false", "evaluator.generalization.encoder=null"))
    with pytest.raises(OSError, match=f"encoder '{MISSING}' is not available locally.*encoder_fallback=true"):
        load_text_embedder(MISSING, 0, 512, "mean_skip_first", False, device="cpu")
