"""Who judged a run's sessions, as metrics.json records it (``eval.session_judges``): each judge's backend, model
and endpoint, and the sha256 of its prompt (template and rubric). The leaderboard ranks conversation runs
together only when these match (``rpbench.leaderboard.runs.recorded_judges``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from rpbench.scoring.chat.client import EndpointSettings
from rpbench.scoring.judge.conversation import JUDGE_PROMPT, prompt_version
from rpbench.scoring.judge.parties import judge_party


def prompt_sha256(rubric: Mapping[str, str]) -> str:
    """The session judge's prompt, whole: its template and the rubric it is filled with, hashed."""
    text = JUDGE_PROMPT + json.dumps(dict(rubric), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def judge_record(judge: EndpointSettings, rubric: Mapping[str, str]) -> dict[str, Any]:
    """One session judge: ``backend``, ``model`` (a served model's entry for judge=local), ``endpoint`` (its
    base_url as judge caches key it, or "served by the run"), ``prompt_version`` and ``prompt_sha256``."""
    party = judge_party(judge, "the judge (judge)")
    return {
        "backend": judge.backend,
        "model": party.model,
        "endpoint": party.endpoint,
        "prompt_version": prompt_version(rubric),
        "prompt_sha256": prompt_sha256(rubric),
    }
