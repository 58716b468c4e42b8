"""Checked simulators in ``evaluator=conversation``: the enabled checks (``evaluator.simulator_checks``,
``rpbench.scoring.simulator_checks``) run on every session not cut short before judging; a failing session is
not judged, is left out of the means as a session cut short is, and is listed in simulator_checks.jsonl
(which checks it failed and every measured value)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rpbench.data.conversation_session import Session
from rpbench.eval.benchmarks.base import write_jsonl
from rpbench.scoring.simulator_checks.run import check_sessions, check_summary


def check_simulator(ev: Any, sessions: Sequence[Session], out_dir: Path) -> dict[str, Any]:
    """Checks the sessions (setting their ``failed_checks``), writes simulator_checks.jsonl, returns the counts."""
    rows = check_sessions(ev.simulator_checks, ev.simulator_check, sessions, "evaluator.simulator_check")
    write_jsonl(out_dir / "simulator_checks.jsonl", rows)
    return check_summary(ev.simulator_checks, rows)


def failed_checks(summary: Mapping[str, Any]) -> str:
    """``2 sessions failed a simulator check (role_reversal 1, goal_leak 1)`` (a session may fail several)."""
    causes = ", ".join(f"{name} {c['failed']}" for name, c in summary["checks"].items() if c["failed"])
    n = summary["sessions_failed"]
    return f"{n} session{'' if n == 1 else 's'} failed a simulator check" + (f" ({causes})" if causes else "")


def checks_section(summary: Mapping[str, Any]) -> str:
    """The report's table of the enabled checks: sessions checked, failed, and the mean measured value."""
    if not summary["enabled"]:
        return "Simulator checks: none enabled (evaluator.simulator_checks=[])."
    rows = "\n".join(
        f"| {name} | {c['checked']} | {c['failed']} | {_value(c['mean_value'])} |"
        for name, c in summary["checks"].items()
    )
    return (
        "Simulator checks (judge-free; a failing session is left out of the means; simulator_checks.jsonl "
        "holds each session's values):\n\n| check | sessions checked | failed | mean value |\n"
        "| --- | --- | --- | --- |\n" + rows
    )


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
