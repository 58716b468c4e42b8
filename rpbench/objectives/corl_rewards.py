"""CoRL's rewards (R-EMID paper; remid-code-notes.md section 3), registered in the reward registry.

Each is ``fn(prompts, completions, references)`` as every reward: ``prompts`` are the samples' inputs x
(:class:`~rpbench.data.remid_prompts.RolePlayInput`), ``references`` their golden responses. Every CoRL
reward reads the run's prompt templates (``RemidPrompts``: the core-features marker, the thought layout's
sections, the reply header), which the objective gives it (``with_prompts``). The dialogue-phase rewards
take the core features of each prompt's reasoning r as ``features`` (the objective binds them per batch
with :meth:`with_features`).

Thought policy (maximum 3 with weight 1 each): ``corl_thought_format``, ``corl_thought_length``,
``corl_thought_likelihood``. Dialogue policy (maximum 2): ``corl_response_format``, ``corl_judge_ratio``.
The two likelihood rewards need a model: the objective gives them a :data:`Scorer` (``bind``) that returns
the mean per-token log-probability of each target reply (its tokens and end-of-turn token) after each
prompt. The authors' scored span is shifted by their chat-template handling (the notes' "scoring-span
quirk", INFERRED); rpbench scores exactly the reply, as the notes recommend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from rpbench.data.records import Turn
from rpbench.data.remid_prompts import JUDGE_TARGET, RemidPrompts, RolePlayInput
from rpbench.scoring.rewards import REWARDS

# (prompts, target replies) -> mean log-prob of each reply after its prompt
Scorer = Callable[[Sequence[Sequence[Turn]], Sequence[str]], list[float]]


class CoRLReward:
    """A reward that reads the run's templates (``with_prompts``, called by the CoRL objective)."""

    prompts: RemidPrompts | None = None

    def with_prompts(self, prompts: RemidPrompts) -> CoRLReward:
        self.prompts = prompts
        return self

    @property
    def templates(self) -> RemidPrompts:
        if self.prompts is None:
            raise RuntimeError(f"{type(self).__name__} reads the run's prompt templates: the CoRL objective sets them")
        return self.prompts

    def fenced_features(self, completion: str) -> bool:
        """Whether a fenced block holds the core-features marker."""
        fence = r"```[\s\S]*?" + re.escape(self.templates.marker) + r"[\s\S]*?```"
        return re.search(fence, completion) is not None


@REWARDS.register("corl_thought_format")
class ThoughtFormat(CoRLReward):
    """0.5 when a fenced block holds the core-features marker, plus 0.5 when every section header of the
    thought layout (``RemidPrompts.sections``: seven in the paper's) is present."""

    def __call__(self, prompts, completions, references) -> list[float]:
        headers = [re.compile(r"#+\s*" + r"\s*".join(map(re.escape, h.split()))) for h in self.templates.sections]
        return [0.5 * self.fenced_features(c) + 0.5 * all(h.search(c) for h in headers) for c in completions]


@REWARDS.register("corl_thought_length")
class ThoughtLength(CoRLReward):
    """min(w / target_words, 1), w the space-separated pieces (``str.split(" ")``, as the authors count) of
    the core-features text; 0 without a fenced core-features block."""

    def __init__(self, target_words: int):
        if target_words < 1:
            raise ValueError(f"corl_thought_length: target_words must be >= 1, got {target_words}")
        self.target_words = target_words

    def __call__(self, prompts, completions, references) -> list[float]:
        return [
            min(len(self.templates.core_features(c).split(" ")) / self.target_words, 1.0)
            if self.fenced_features(c)
            else 0.0
            for c in completions
        ]


@REWARDS.register("corl_response_format")
class ResponseFormat(CoRLReward):
    """1 when the reply contains the reply header (``## Agent Response`` in the paper's; any whitespace after
    the hashes), else 0."""

    def __call__(self, prompts, completions, references) -> list[float]:
        hashes, _, words = self.templates.response_header.partition(" ")
        header = re.compile(re.escape(hashes) + r"\s*" + re.escape(words.strip()))
        return [1.0 if header.search(c) else 0.0 for c in completions]


class ModelReward(CoRLReward):
    """A reward computed with a model the objective provides (``bind``) at training time."""

    scorer: Scorer | None = None

    def bind(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def _score(self, prompts: Sequence[Sequence[Turn]], targets: Sequence[str]) -> list[float]:
        if self.scorer is None:
            raise RuntimeError(f"{type(self).__name__} needs a model: the CoRL objective binds one (bind(scorer))")
        return self.scorer(prompts, targets)


@REWARDS.register("corl_thought_likelihood")
class ThoughtLikelihood(ModelReward):
    """exp(ℓ(golden | x, r)) under the current dialogue policy: ``## Agent Response`` + golden after the pxy
    prompt with the completion's core features (1 / perplexity, in (0, 1])."""

    def __call__(self, prompts: Sequence[RolePlayInput], completions, references) -> list[float]:
        t = self.templates
        conversations = [t.pxy(x, t.core_features(c)) for x, c in zip(prompts, completions, strict=True)]
        return [math.exp(v) for v in self._score(conversations, [t.target(g) for g in references])]


@REWARDS.register("corl_judge_ratio")
class JudgeRatio(ModelReward):
    """min(exp(L(reply) - L(golden)), 1), L(c) = ℓ("100%" | judge prompt with candidate c), under the judge
    (the base model without LoRA in the paper). ``features``: each prompt's core features (the dialogue
    policy's r), set per batch by :meth:`with_features`."""

    features: Sequence[str] | None = None

    def with_features(self, features: Sequence[str]) -> JudgeRatio:
        self.features = list(features)
        return self

    def __call__(self, prompts: Sequence[RolePlayInput], completions, references) -> list[float]:
        if self.features is None or len(self.features) != len(completions):
            raise RuntimeError("corl_judge_ratio: the objective sets each completion's core features first")
        rows = list(zip(prompts, self.features, references, strict=True))
        t = self.templates
        replies = [t.judge(x, f, g, c) for (x, f, g), c in zip(rows, completions, strict=True)]
        goldens: dict[str, list[Turn]] = {}  # a prompt's G completions share its golden row: scored once
        keys = []
        for x, f, g in rows:
            golden = t.judge(x, f, g, t.target(g))
            keys.append(goldens.setdefault(golden[1].content, golden)[1].content)
        scored = self._score(replies + list(goldens.values()), [JUDGE_TARGET] * (len(replies) + len(goldens)))
        golden_score = dict(zip(goldens, scored[len(replies) :], strict=True))
        return [min(math.exp(a - golden_score[k]), 1.0) for a, k in zip(scored[: len(replies)], keys, strict=True)]
