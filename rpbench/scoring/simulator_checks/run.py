"""Checking sessions: the enabled checks on every whole session (one not cut short), the failed ones set on the
session (``Session.failed_checks``: it is then left out as a cut session is), and the counts per check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rpbench.data.conversation_session import Session
from rpbench.scoring.sentence_encoder import load_sentence_encoder
from rpbench.scoring.simulator_checks.base import SIMULATOR_CHECKS, Embed, SimulatorCheckSettings


def encoder_embed(settings: SimulatorCheckSettings, where: str) -> Embed:
    """Unit sentence embeddings of texts by ``settings.encoder`` (loaded at the first texts, once per process)."""

    def embed(texts: Sequence[str]) -> np.ndarray:
        model = load_sentence_encoder(settings.encoder, f"{where}.encoder")[0]
        return model.encode(
            list(texts),
            batch_size=settings.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    return embed


def check_sessions(
    names: Sequence[str], settings: SimulatorCheckSettings, sessions: Sequence[Session], where: str
) -> list[dict[str, Any]]:
    """Runs the checks ``names`` on each session not cut short and sets its ``failed_checks``; one row per
    session: ``{"id", "checked", "failed", "checks": {name: {"value", "failed", **detail}}}`` (a session cut
    short: not checked, no checks). ``where``: the settings' key (``evaluator.simulator_check``...), for errors."""
    checks = {name: SIMULATOR_CHECKS.get(name) for name in names}
    embed = encoder_embed(settings, where)
    rows = []
    for s in sessions:
        if s.cut_short:
            rows.append({"id": s.id, "checked": False, "failed": [], "checks": {}})
            continue
        record = s.record()
        results = {name: c.fn(record, settings, embed if c.needs_encoder else None) for name, c in checks.items()}
        s.failed_checks = tuple(name for name, r in results.items() if r.failed)
        rows.append(
            {
                "id": s.id,
                "checked": True,
                "failed": list(s.failed_checks),
                "checks": {name: {"value": r.value, "failed": r.failed, **r.detail} for name, r in results.items()},
            }
        )
    return rows


def check_summary(names: Sequence[str], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per check: the sessions checked, those failing it, and the mean of its value (None where none applies);
    the sessions failing any (left out of the means)."""
    checked = [r for r in rows if r["checked"]]
    per_check = {}
    for name in names:
        values = [r["checks"][name]["value"] for r in checked if r["checks"][name]["value"] is not None]
        per_check[name] = {
            "checked": len(checked),
            "failed": sum(r["checks"][name]["failed"] for r in checked),
            "mean_value": float(np.mean(values)) if values else None,
        }
    return {"enabled": list(names), "checks": per_check, "sessions_failed": sum(bool(r["failed"]) for r in checked)}
