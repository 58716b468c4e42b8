"""Reward functions for GRPO and CoRL: a registry of plain callables and a weighted sum.

A reward function is ``fn(prompts, completions, references, **kwargs) -> list[float]``, one float per
completion (a session reward of ``env=conversation`` may give None, no score: see
``rpbench.objectives.conversation_env``); ``kwargs`` come from its config entry, all of them: a reward declares
no keyword defaults, so a missing one is an error at startup (``reward_problems``) naming
``objective.rewards[i].kwargs.<name>``. A reward that holds state (an LLM-judge client, a reward model) is
registered as a class: it is built once with the entry's kwargs and the instance is called with ``(prompts,
completions, references)``. A class with ``opens_judge`` is also handed ``opener``, the judge opener the
objective was given (``rpbench.scoring.chat.client.client_opener``: it serves ``judge=local`` with the server
the pipeline handed in); rewards never open a judge on their own. The scorers themselves (metrics, judge rubrics, the
reward model) live in ``rpbench.scoring``.

A reward whose kwargs have rules of their own declares them as ``kwargs_problems(kwargs) -> [(key,
expected)]`` (an attribute of the function, set with ``@kwargs_rules(...)``, or a static method of the class):
checked with the entry at startup, so a bad value is named before any model loads, and not again when scoring.

Config (``objective.rewards``), one entry per reward::

    - {name: rouge_l, weight: 1.0}
    - {name: length_penalty, weight: 0.5, kwargs: {min_len: 20, max_len: 200, unit: words}}
    - {target: "my_pkg.rewards:politeness", weight: 0.2}      # any importable callable
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar

from rpbench.core.errors import ConfigError
from rpbench.core.registry import Registry
from rpbench.data.conversation import character_prompt
from rpbench.scoring.chat.client import ClientOpener, EndpointSettings, open_client
from rpbench.scoring.metrics import CJKRougeTokenizer, rouge, sentence_bleu
from rpbench.scoring.reward_model import RewardModelScorer

log = logging.getLogger(__name__)

RewardCallable = Callable[[Sequence[Any], Sequence[str], Sequence[str | None]], list[float]]

REWARDS = Registry("reward")

_WORDS = CJKRougeTokenizer(use_stemmer=False)


# ---------------------------------------------------------------------------------------------------------
# Rule rewards


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens; each CJK character is one token (so Chinese text is not one long word)."""
    return _WORDS.tokenize(text)


@REWARDS.register("non_empty")
def non_empty(prompts, completions, references) -> list[float]:
    """1.0 when the completion has a non-whitespace character, else 0.0."""
    return [1.0 if c.strip() else 0.0 for c in completions]


KwargsRules = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


def kwargs_rules(check: KwargsRules) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach ``check`` to a reward function as its ``kwargs_problems`` (read with its config entry)."""

    def attach(reward: Callable[..., Any]) -> Callable[..., Any]:
        reward.kwargs_problems = check
        return reward

    return attach


def _length_rules(kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = [] if kwargs["unit"] in ("words", "chars") else [("unit", "words or chars")]
    lengths = [kwargs[k] for k in ("min_len", "max_len")]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
        return [*found, ("min_len", "integers min_len and max_len")]
    if not 0 <= lengths[0] <= lengths[1] or lengths[1] < 1:
        found.append(("max_len", f"an integer >= max(1, min_len={lengths[0]}), with min_len >= 0"))
    return found


def reply_length_problems(max_tokens: Any) -> list[tuple[str, str]]:
    """A judge reward's ``max_tokens`` (its judge's reply length): an integer >= 1."""
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1:
        return []
    return [("max_tokens", "the judge's reply length, an integer >= 1 (tokens)")]


def _markers_rules(kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
    markers = kwargs["markers"]
    if isinstance(markers, str) or not isinstance(markers, Sequence) or not markers:
        return [("markers", "a non-empty list of strings")]
    return [] if all(isinstance(m, str) and m for m in markers) else [("markers", "a non-empty list of strings")]


@REWARDS.register("length_penalty")
@kwargs_rules(_length_rules)
def length_penalty(prompts, completions, references, *, min_len: int, max_len: int, unit: str):
    """0.0 inside ``[min_len, max_len]``, else minus the relative distance to the range, floored at -1.

    ``unit``: ``words`` (:func:`word_tokens` tokens) or ``chars`` (characters of the stripped completion).
    Below the range the penalty is ``(min_len - n) / min_len``, above it ``(n - max_len) / max_len``.
    """
    scores = []
    for c in completions:
        n = len(word_tokens(c)) if unit == "words" else len(c.strip())
        if n < min_len:
            excess = (min_len - n) / min_len
        elif n > max_len:
            excess = (n - max_len) / max_len
        else:
            excess = 0.0
        scores.append(-min(excess, 1.0))
    return scores


@REWARDS.register("no_role_break")
@kwargs_rules(_markers_rules)
def no_role_break(prompts, completions, references, *, markers: Sequence[str]):
    """1.0 unless the completion contains a marker of a new user turn (case-sensitive), then 0.0."""
    return [0.0 if any(m in c for m in markers) else 1.0 for c in completions]


# ---------------------------------------------------------------------------------------------------------
# Reference-overlap rewards


def _checked_references(reward: str, completions: Sequence[str], references: Sequence[str | None]) -> list[str]:
    if len(references) != len(completions):
        raise ValueError(f"{reward}: {len(references)} references for {len(completions)} completions")
    missing = [i for i, r in enumerate(references) if not isinstance(r, str)]
    if missing:
        raise ValueError(f"{reward}: completions {missing} have no reference (golden response) to compare with")
    return list(references)


@REWARDS.register("rouge_l")
def rouge_l(prompts, completions, references) -> list[float]:
    """ROUGE-L F1 of each completion against its reference, in [0, 1], with the CJK tokenizer (a Chinese
    completion is not rewarded 0): the evaluation's ROUGE-L on ASCII text (``evaluator.rouge.tokenizer``)."""
    refs = _checked_references("rouge_l", completions, references)
    return rouge(completions, refs, ["rougeL"], tokenizer="cjk")["rougeL"]


@REWARDS.register("bleu")
def bleu(prompts, completions, references, *, tokenize: str) -> list[float]:
    """Sentence-level BLEU against the reference, in [0, 1]: the evaluation's own BLEU divided by 100.

    ``tokenize``: a sacrebleu tokenizer (``zh`` splits CJK characters and is ``13a`` on all other text).
    """
    refs = _checked_references("bleu", completions, references)
    return [score / 100.0 for score in sentence_bleu(completions, refs, tokenize=tokenize)]


# ---------------------------------------------------------------------------------------------------------
# Model rewards: an LLM judge through the chat client, a sequence-classification reward model


@REWARDS.register("judge")
class JudgeReward:
    """An LLM judge's binary verdict on one RoleMRC rubric (1.0 pass, 0.0 fail) for each completion.

    ``judge`` is a ``judge`` config (e.g. ``${judge}``, parsed as ``EndpointSettings`` when the entry is read),
    opened once by ``opener`` and kept for the run (``judge=local``: the handed-in server), asked for verdicts of
    at most ``max_tokens`` tokens (a RoleMRC verdict is one digit: evaluator=rolemrc asks 16). A verdict still
    unparseable after the client's re-asks gets ``failure_reward`` and is counted in ``failures`` (the
    objective logs it).
    """

    opens_judge: ClassVar[bool] = True

    @staticmethod
    def kwargs_problems(kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
        from rpbench.scoring.judge import RUBRICS

        found = [] if kwargs["rubric"] in RUBRICS else [("rubric", f"one of {', '.join(sorted(RUBRICS))}")]
        return found + reply_length_problems(kwargs["max_tokens"])

    def __init__(
        self, judge: EndpointSettings, rubric: str, max_tokens: int, failure_reward: float, *, opener: ClientOpener
    ):
        from contextlib import ExitStack

        self.rubric, self.max_tokens, self.failure_reward, self.failures = rubric, max_tokens, float(failure_reward), 0
        self._stack = ExitStack()
        self.client = self._stack.enter_context(opener(judge))

    def __call__(self, prompts, completions, references) -> list[float]:
        from rpbench.data.records import EvalExample, Turn
        from rpbench.scoring.chat import ChatRequest
        from rpbench.scoring.judge import parse_verdict
        from rpbench.scoring.judge.rolemrc_rubrics import PROMPT_VERSION, REASK, rubric_messages

        requests = []
        for i, (prompt, completion, reference) in enumerate(zip(prompts, completions, references, strict=True)):
            turns = tuple(Turn(m["role"], m["content"]) for m in prompt)
            example = EvalExample(f"completion {i}", turns, reference or "", "grpo", {"dimensions": [self.rubric]})
            messages = rubric_messages(self.rubric, example, completion)
            requests.append(ChatRequest(messages, self.max_tokens, PROMPT_VERSION))
        replies = self.client.ask_parsed(requests, parse_verdict, REASK, desc=f"judge reward ({self.rubric})")
        failed = sum(r.status != "ok" for r in replies)
        if failed:
            log.warning(
                "judge reward: %d of %d verdicts unparseable or failed; scored %s",
                failed,
                len(replies),
                self.failure_reward,
            )
        self.failures += failed
        return [float(r.value) if r.status == "ok" else self.failure_reward for r in replies]

    def close(self) -> None:
        self._stack.close()


@REWARDS.register("reward_model")
class RewardModelReward(RewardModelScorer):
    """The reward model's score (``rpbench.scoring.reward_model``) of each completion after its prompt."""

    def __call__(self, prompts, completions, references) -> list[float]:
        return self.score(prompts, completions)


@REWARDS.register("session_reward_model")
class SessionRewardModel(RewardModelScorer):
    """``env=conversation``: the reward model's score of a whole session, read at its last character turn: that
    reply after everything before it (the character's system prompt first, then the user's and the character's
    turns; a user message after the last reply is not read). Called with the sessions' records
    (``Session.record``) as ``prompts``; a score that is not a finite number is None (no score: the session is
    left out of its group). ``path``: a local folder, never downloaded."""

    scores_sessions: ClassVar[bool] = True

    @staticmethod
    def kwargs_problems(kwargs: Mapping[str, Any]) -> list[tuple[str, str]]:
        path = kwargs["path"]
        if isinstance(path, str) and Path(path).is_dir():
            return []
        return [("path", "the local folder of a one-label sequence-classification model (env.reward_model.path)")]

    def __init__(self, path: str, batch_size: int, dtype: str):
        super().__init__(path, batch_size, dtype)

    def __call__(self, prompts, completions, references) -> list[float | None]:
        conversations, replies = [], []
        for record in prompts:
            messages = [{"role": "system", "content": character_prompt(record["character"], record["card"])}]
            messages += [
                {"role": "user" if m["role"] == "user" else "assistant", "content": m["text"]}
                for m in record["messages"]
            ]
            last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
            conversations.append(messages[:last])
            replies.append(messages[last]["content"])
        return [v if math.isfinite(v) else None for v in self.score(conversations, replies)]


# ---------------------------------------------------------------------------------------------------------
# Building from config and combining


@dataclass(frozen=True)
class RewardFn:
    """A configured reward: ``fn(prompts, completions, references)`` and its weight in the sum."""

    name: str
    weight: float
    fn: RewardCallable


def _import_target(target: str, where: str) -> Callable[..., Any]:
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"{where}.target: expected 'module.path:function', got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"{where}.target: cannot import module {module_name!r}: {err}") from err
    for attr in attr_path.split("."):
        if not hasattr(obj, attr):
            raise ValueError(f"{where}.target: {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"{where}.target: {target!r} is not callable")
    return obj


def _parameters(obj: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters a config entry's ``kwargs`` fill: a class's constructor's, or a function's after
    ``(prompts, completions, references)``; ``opener`` is handed in, never configured."""
    params = list(inspect.signature(obj).parameters.values())
    if not isinstance(obj, type):
        params = params[3:]
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "opener"]


def _check_kwargs(obj: Callable[..., Any], kwargs: Mapping[str, Any], where: str) -> None:
    """Every keyword ``obj`` takes is given (none has a default in code), and no other."""
    params = _parameters(obj)
    if "opener" in kwargs and getattr(obj, "opens_judge", False):
        raise ValueError(f"{where}.kwargs: 'opener' is handed in by the objective, not configured")
    takes_any = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(obj).parameters.values())
    unknown = sorted(set(kwargs) - {p.name for p in params})
    if unknown and not takes_any:
        raise ValueError(
            f"{where}.kwargs: {unknown} do not fit {obj.__name__} (it takes {sorted(p.name for p in params)})"
        )
    missing = [p.name for p in params if p.name not in kwargs]
    if missing:
        raise ValueError(
            f"{where}.kwargs.{missing[0]}: missing (a reward has no defaults in code: set "
            f"{', '.join(missing)} in its YAML entry)"
        )


def _bind(obj: Callable[..., Any], kwargs: dict[str, Any], where: str, opener: ClientOpener) -> RewardCallable:
    if isinstance(obj, type):
        if getattr(obj, "opens_judge", False):
            kwargs = {**kwargs, "opener": opener}
        try:
            return obj(**kwargs)
        except TypeError as err:
            raise ValueError(f"{where}.kwargs: cannot build {obj.__name__}: {err}") from err
    return functools.partial(obj, **kwargs) if kwargs else obj


@dataclass(frozen=True)
class RewardEntry:
    """One checked config entry: what to build, with which kwargs and weight."""

    name: str
    weight: float
    target: Callable[..., Any]
    kwargs: Mapping[str, Any]


def read_entries(cfg: Sequence[Mapping[str, Any]], where: str) -> list[RewardEntry]:
    """The entries ``{name, weight, kwargs}`` or ``{target, weight, kwargs}`` of the reward list at ``where``
    (e.g. ``objective.rewards``), checked without building anything: errors name the entry and field.

    ``name`` looks the reward up in the registry; ``target: "module.path:function"`` imports any callable
    (then ``name`` is an optional label, the function's name otherwise). ``weight`` is required; ``kwargs``
    gives every keyword the reward takes (none for a reward that takes none). Names must be unique.
    """
    if isinstance(cfg, (str, Mapping)) or not cfg:
        raise ValueError(f"{where}: expected a non-empty list of reward entries, got {cfg!r}")
    entries: list[RewardEntry] = []
    for i, entry in enumerate(cfg):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            raise TypeError(f"{at}: expected a mapping with name/target, weight, kwargs, got {entry!r}")
        unknown = set(entry) - {"name", "target", "weight", "kwargs"}
        if unknown:
            raise ValueError(f"{at}: unknown fields {sorted(unknown)} (allowed: name, target, weight, kwargs)")
        if "target" in entry:
            obj = _import_target(str(entry["target"]), at)
            name = str(entry.get("name") or obj.__name__)
        elif "name" in entry:
            name = str(entry["name"])
            if name not in REWARDS:
                raise ValueError(f"{at}.name: unknown reward {name!r}; registered: {REWARDS.names()}")
            obj = REWARDS.get(name)
        else:
            raise ValueError(f"{at}: needs 'name' (a registered reward) or 'target' ('module.path:function')")
        if "weight" not in entry:
            raise ValueError(f"{at}.weight: missing (its weight in the sum: set it in the YAML entry)")
        weight = entry["weight"]
        if isinstance(weight, bool) or not isinstance(weight, Real) or not math.isfinite(weight):
            raise ValueError(f"{at}.weight: expected a finite number, got {weight!r}")
        kwargs = entry.get("kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"{at}.kwargs: expected a mapping, got {kwargs!r}")
        _check_kwargs(obj, kwargs, at)
        rules = getattr(obj, "kwargs_problems", None)
        broken = rules(kwargs) if rules is not None else []
        if broken:
            raise ValueError("; ".join(f"{at}.kwargs.{k}={kwargs.get(k)!r}: expected {e}" for k, e in broken))
        kwargs = dict(kwargs)
        if getattr(obj, "opens_judge", False) and isinstance(kwargs.get("judge"), Mapping):
            problems: list[str] = []  # each starts with its key, as reward_problems' callers report them
            kwargs["judge"] = EndpointSettings.collect(kwargs["judge"], f"{at}.kwargs.judge", problems)
            if kwargs["judge"] is None:
                raise ConfigError("; ".join(problems))
        if any(e.name == name for e in entries):
            raise ValueError(f"{at}.name: reward {name!r} appears twice; give one entry another name")
        entries.append(RewardEntry(name, float(weight), obj, kwargs))
    return entries


def reward_problems(cfg: Sequence[Mapping[str, Any]], where: str) -> list[str]:
    """What is wrong with the reward list at ``where`` (checked at startup, before a model is loaded)."""
    try:
        read_entries(cfg, where)
    except (TypeError, ValueError) as error:  # a ConfigError (the judge's settings) is a ValueError
        return [str(error)]
    return []


def build_reward_fns(
    cfg: Sequence[Mapping[str, Any]], where: str, opener: ClientOpener = open_client
) -> list[RewardFn]:
    """The rewards of the list at ``where`` (``read_entries``), built; a reward that ``opens_judge`` is handed
    ``opener`` (the default opens no local judge server)."""
    return [
        RewardFn(e.name, e.weight, _bind(e.target, dict(e.kwargs), f"{where}[{i}]", opener))
        for i, e in enumerate(read_entries(cfg, where))
    ]


def score_rewards(
    reward_fns: Sequence[RewardFn],
    prompts: Sequence[Any],
    completions: Sequence[str],
    references: Sequence[str | None],
) -> dict[str, list[float]]:
    """Run every reward on the batch; each must return one finite number per completion."""
    scores: dict[str, list[float]] = {}
    for reward in reward_fns:
        values = list(reward.fn(prompts, completions, references))
        if len(values) != len(completions):
            raise ValueError(f"reward {reward.name!r} returned {len(values)} values for {len(completions)} completions")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
                raise ValueError(f"reward {reward.name!r} returned {v!r} for completion {i}; expected a finite number")
        scores[reward.name] = [float(v) for v in values]
    return scores


def weighted_sum(rewards: Mapping[str, Sequence[float]], weights: Mapping[str, float]) -> list[float]:
    """Per completion, ``sum(weights[name] * rewards[name][i])`` over the named rewards."""
    if set(rewards) != set(weights):
        raise ValueError(f"rewards {sorted(rewards)} and weights {sorted(weights)} must name the same rewards")
    lengths = {name: len(values) for name, values in rewards.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"rewards have different lengths: {lengths}")
    n = next(iter(lengths.values()), 0)
    return [sum(weights[name] * rewards[name][i] for name in rewards) for i in range(n)]
