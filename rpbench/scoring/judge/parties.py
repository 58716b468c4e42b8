"""Who plays which part of a judged conversation run: the user simulator, the evaluation judge and the judges
whose verdicts rewarded training, each an endpoint and a model (``Party``).

One model in two parts (the same endpoint and model name; for ``judge=local`` or a served simulator, the same
served model) grades what it co-wrote, or grades a policy trained to please it: an ``Overlap``, refused at
startup unless the setting named in it allows it, and then named in the run's results. A judge of the evaluated
model's own family (``model_family``, by name) is a warning only. The judges that rewarded a trained model are
read from its run folder's config.yaml, following ``init_from`` back (``trained_by``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rpbench.core.errors import DataFormatError
from rpbench.scoring.chat.client import EndpointSettings
from rpbench.scoring.chat.endpoints import endpoint_identity
from rpbench.scoring.judge.conversation import Simulator

SERVED = "served by the run"  # the endpoint of a model the run serves itself (judge=local, simulator.server)
FAMILIES = ("qwen", "llama", "gemma", "mistral", "mixtral", "phi", "deepseek", "smollm", "gpt", "claude", "olmo")


@dataclass(frozen=True)
class Party:
    """One part of a run (``part``: what it plays and the setting that chose it) and the model playing it."""

    part: str
    endpoint: str  # endpoint_identity of its base_url, or SERVED
    model: str

    def plays_as(self, other: Party) -> bool:
        return self.endpoint == other.endpoint and self.model.lower() == other.model.lower()

    @property
    def who(self) -> str:
        return f"{self.model} ({self.endpoint})"


@dataclass(frozen=True)
class Overlap:
    """What two parts of a run share; ``flag``: the setting that allows it (None: a warning, never refused)."""

    text: str
    flag: str | None
    allowed: bool

    def problem(self) -> str:
        return (
            f"{self.text}: give each part its own endpoint or model, or set {self.flag}=true to run anyway "
            "(the results then name the overlap)"
        )

    def warning(self) -> str:
        return f"{self.text} (allowed by {self.flag}=true)" if self.flag else self.text


def served_name(model: str | Mapping[str, Any]) -> str:
    """A served model's name: its conf/model entry, or a model config's weights (``name_or_path``)."""
    return model if isinstance(model, str) else str(model["name_or_path"])


def judge_party(judge: EndpointSettings, part: str) -> Party:
    if judge.backend == "local":
        return Party(part, SERVED, served_name(judge.server.model))
    return Party(part, endpoint_identity(judge.base_url), judge.model)


def simulator_party(sim: Simulator, judge: EndpointSettings, part: str) -> Party:
    """The user simulator: a model served by the run, its own endpoint, or the judge's endpoint and model."""
    if sim.server is not None:
        return Party(part, SERVED, sim.server)
    if sim.base_url is not None:
        return Party(part, endpoint_identity(sim.base_url), sim.model)
    return judge_party(judge, part)


def overlaps(pairs: Sequence[tuple[Party, Party]], flag: str, allowed: bool) -> list[Overlap]:
    """An ``Overlap`` for each pair played by one model."""
    return [Overlap(f"{a.part} and {b.part} are one model, {a.who}", flag, allowed) for a, b in pairs if a.plays_as(b)]


def model_family(name: str | None) -> str | None:
    """The family a model's name starts a word with (``Qwen/Qwen2.5-7B``, ``tiny-qwen2``: qwen), or None."""
    found = re.search(rf"(?:^|[^a-z])({'|'.join(FAMILIES)})", (name or "").lower())
    return found.group(1) if found else None


def policy_family(family: str | None, evaluated: str) -> str | None:
    """The evaluated model's family: from its registered ``model.family``, else from its name (None: unknown)."""
    return model_family(family) or model_family(evaluated)


ANOTHER_JUDGE = "add one to evaluator.judges to measure it"


def family_overlaps(
    judges: Sequence[Party], family: str | None, evaluated: str, remedy: str = ANOTHER_JUDGE
) -> list[Overlap]:
    """A warning for each judge of the evaluated model's family (``family``: its registered family). With a judge of
    another family scoring the same sessions, the family judge's self-preference is measured after judging
    (``self_preference``); without one, the warning says it cannot be and ``remedy``, what makes it measurable
    (or avoids it) in this evaluator."""
    shared = policy_family(family, evaluated)
    own = [j for j in judges if shared is not None and model_family(j.model) == shared]
    measurable = len(own) < len(judges)
    found = []
    for judge in own:
        text = f"{judge.part}, {judge.who}, is of the evaluated model's family ({shared}: {evaluated})"
        if measurable:
            text += (
                ": a judge may favour its own family's replies; its self-preference on these sessions is measured "
                "against the judges of other families after judging (eval.conversation.self_preference)"
            )
        else:
            text += (
                ": a judge may favour its own family's replies, and its self-preference could not be measured: no "
                f"judge of another family scores the same sessions ({remedy})"
            )
        found.append(Overlap(text, None, True))
    return found


def recorded_party(judge: Any, path: Path | None, where: str, run: str) -> Party | None:
    """The judge of ``run``'s reward entry ``where`` (its config, read from ``path``: named in errors); None:
    no judge (backend none)."""
    part, origin = f"the reward judge of {run} ({where})", path or run
    if not isinstance(judge, Mapping) or not isinstance(judge.get("backend"), str):
        raise DataFormatError(origin, where, "backend", "a judge config with its backend")
    if judge["backend"] == "none":
        return None
    if judge["backend"] == "local":
        server = judge.get("server")
        if not isinstance(server, Mapping) or not isinstance(server.get("model"), str | Mapping):
            raise DataFormatError(origin, where, "server.model", "the served model of a local judge")
        return Party(part, SERVED, served_name(server["model"]))
    if not isinstance(judge.get("model"), str):
        raise DataFormatError(origin, where, "model", "the judge's model name")
    return Party(part, endpoint_identity(judge.get("base_url")), judge["model"])


def rewarding_judges(config: Mapping[str, Any], path: Path | None, run: str) -> list[Party]:
    """The judges whose verdicts rewarded ``run``'s training, from its composed config (read from ``path``,
    None: this run's): every reward entry of ``env.rewards`` (with an environment) or ``objective.rewards``
    whose kwargs name a judge config, and ``env.judge`` when a turn reward asks it (``env.turn_rewards``:
    ``judge_rubric``)."""
    objective, env = config.get("objective"), config.get("env")
    if not isinstance(objective, Mapping) or objective.get("name") == "none":
        return []
    with_env = isinstance(env, Mapping) and env.get("name") not in (None, "none")
    where, entries = (
        ("env.rewards", env.get("rewards")) if with_env else ("objective.rewards", objective.get("rewards"))
    )
    if entries is not None and not isinstance(entries, list):
        raise DataFormatError(path or run, where, where, "a list of reward entries")
    found = []
    for i, entry in enumerate(entries or []):
        kwargs = entry.get("kwargs") if isinstance(entry, Mapping) else None
        if isinstance(kwargs, Mapping) and isinstance(kwargs.get("judge"), Mapping):
            found.append(recorded_party(kwargs["judge"], path, f"{where}[{i}].kwargs.judge", run))
    turn_rewards = env.get("turn_rewards") if with_env else None
    if isinstance(turn_rewards, Mapping) and "judge_rubric" in turn_rewards:
        found.append(recorded_party(env.get("judge"), path, "env.judge", run))
    return [party for party in found if party is not None]


def trained_by(init_from: str | None) -> list[Party]:
    """The judges that rewarded the training of ``init_from``'s model and of the runs it started from in turn
    (each run folder's config.yaml; a folder without one records nothing)."""
    found: list[Party] = []
    seen: set[Path] = set()
    folder = Path(init_from) if init_from else None
    while folder is not None and folder.resolve() not in seen and (folder / "config.yaml").is_file():
        seen.add(folder.resolve())
        path = folder / "config.yaml"
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(config, Mapping):
            raise DataFormatError(path, "(file)", "(top level)", "a run's composed config (a mapping)")
        found += rewarding_judges(config, path, f"run {folder.name}")
        folder = Path(config["init_from"]) if config.get("init_from") else None
    return found
