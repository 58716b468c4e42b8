"""evaluator.backend=vllm: vLLM is imported only when selected, and its absence is a clear error.

The engine itself needs vLLM on a CUDA device; rpbench's CPU suite does not run it (see
rpbench/models/vllm_engine.py)."""

from __future__ import annotations

import importlib.util

import pytest

from rpbench.data.records import EvalExample, Turn
from rpbench.eval.evaluate import generate
from rpbench.models import load

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_vllm_backend_without_vllm_names_the_setting(compose, tmp_path, tiny_model, evaluation_of):
    cfg = compose("evaluator=rolemrc", "evaluator.backend=vllm")
    model, tokenizer = load(tiny_model())
    examples = [EvalExample(id="a", prompt=(Turn("user", "Hi"),), reference="Hello", task="t", meta={})]
    with pytest.raises(ImportError, match=r"evaluator.backend=vllm needs vLLM, which is not installed"):
        generate(evaluation_of(cfg, tmp_path, model, tokenizer), examples, tmp_path / "predictions.jsonl")
    assert not (tmp_path / "predictions.jsonl").exists()


def test_vllm_is_not_imported_by_the_default_backends():
    import sys

    import rpbench.eval.evaluate  # noqa: F401
    import rpbench.objectives.grpo  # noqa: F401

    assert "vllm" not in sys.modules
