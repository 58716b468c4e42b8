"""CoSER's given-circumstance acting prompts (Wang et al. 2025, Neph0s/CoSER): rpbench's own wording with the
slots of the authors' templates; ``prompts.source=<clone of CoSER>`` reads theirs at run time instead (each
template's origin and sha256 go to metrics.json). Where the authors keep them:

- ``environment``: the environment's system prompt, the first ``prompt = f"..."`` of
  ``gca_evaluation/utils.py`` (``get_environment_prompt``; slots simulator_role, major_characters, scenario;
  the authors draw the role's wording at random from four, rpbench always gives the first);
- ``next_speaker``: the next-speaker step's system prompt, the second (``get_nsp_prompt``; environment,
  all_characters, scenario);
- ``judge`` and the per-dimension ``brief_<d>`` and ``criteria_<d>``: ``critic_prompts`` in
  ``gca_evaluation/prompts.py`` (``self-play-deduct-template`` and ``dimension_details``), written there with
  ``{slot}`` markers the authors fill by string replacement (their literal JSON braces are kept as text here).

The characters' system prompt (``character``) has no single released counterpart: the authors assemble it
from randomly drawn pieces; rpbench's wording states the same facts (book, profile, scene, the character's
thought, the other characters) and asks for the same output form: ``[thought]``, ``(action)`` and speech.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from rpbench.data.templates import Released, Template, TemplateError, read_source_file, resolve, slots_of

ENVIRONMENT = "Environment"  # the scene's environment, a speaker of its own (the authors' name)
END_SCENE = "<END CHAT>"  # the next-speaker step's answer that ends the scene (the authors' marker)
SIMULATOR_ROLE = "an environment model"
START_CUE = "(The scene begins.)"

_DIMENSIONS = ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality")
_JUDGE_SLOTS = (
    "book",
    "major_characters",
    "dimension_name",
    "dimension_brief",
    "additional_instructions",
    "plot_summary",
    "scenario",
    "character_profiles",
    "original_conversation",
    "dimension_criteria",
)

_BRIEFS = {
    "Storyline Consistency": "whether the simulated scene's events and the characters' reactions follow the original",
    "Anthropomorphism": "whether the characters behave like people rather than like an assistant",
    "Character Fidelity": "whether the characters act, speak and know as their profiles and the book have them",
    "Storyline Quality": "whether the simulated scene develops naturally and holds together",
}
_CRITERIA = {
    "Storyline Consistency": (
        "- Storyline Consistency: a character's emotions, attitude or actions depart from the original scene's."
    ),
    "Anthropomorphism": (
        "- Self-identity: no goals or initiative of one's own; no own decisions, likes or dislikes; acting like a "
        "helpful assistant (wordy, eager to help, lecturing, moralising, giving in) where the character would not.\n"
        "- Emotional Depth: flat, rigid reactions; saying every thought and feeling outright instead of showing it.\n"
        "- Persona Coherence: personality, values or manner that change without cause.\n"
        "- Social Interaction: missing what others think and feel; ignoring the situation; poor social skill."
    ),
    "Character Fidelity": (
        "(for the main characters: {major_characters})\n"
        "- Character Language: words, expressions or tone unlike the character's nature and background.\n"
        "- Knowledge & Background: missing what the character knows; knowing what happens later in the book.\n"
        "- Personality & Behavior: feelings, values, beliefs or choices against the character's personality; "
        "reacting unlike the original in a like situation (also a Storyline Consistency flaw).\n"
        "- Relationship & Social Status: treating others against their relationship, rank or history."
    ),
    "Storyline Quality": (
        "- Flow & Progression: the scene stalls, wanders or repeats itself; long-winded lines; echoing what others "
        "said; repeating one's own words (the more repeats, the more severe, up to 10).\n"
        "- Logical Consistency: statements that contradict each other or the scene's facts."
    ),
}

DEFAULTS: dict[str, str] = {
    "character": (
        "You are {character} in {book}. Think, speak and act as {character} would in this scene.\n\n"
        "About {character}:\n{profile}\n\nThe scene:\n{scenario}\n\n{character}'s state of mind:\n{motivation}\n\n"
        "The other people in the scene:\n{others}\n\n"
        "Write only {character}'s next turn: thoughts no one else hears in [brackets], visible actions in "
        "(parentheses), and what {character} says. Keep it short, as in a novel's dialogue."
    ),
    "other_character": ("{history}\n\nWrite {character}'s next turn in the scene above, and nothing for anyone else."),
    "environment": (
        "You are {simulator_role} in a role-play scene. After each turn, describe briefly (one to three "
        "sentences) how the surroundings respond: the place, the weather and sounds, crowds and minor figures. "
        "Never speak or act for the main characters ({major_characters}). Match the scene's tone and setting.\n\n"
        "The scene:\n{scenario}"
    ),
    "next_speaker": (
        "You direct a role-play scene: decide who acts next. The {environment} stands for the surroundings and "
        "minor figures. The candidates: {all_characters}. Answer random if it is unclear, or <END CHAT> when the "
        "scene has reached its end.\n\nThe scene:\n{scenario}\n\nGive a short reason, then a last line "
        "'Next Speaker: <name>'."
    ),
    "judge": (
        "You are reviewing a simulated scene from {book} against the original. The main characters: "
        "{major_characters}. Judge only {dimension_name}: {dimension_brief}. Messages hold speech, actions in "
        "(parentheses) and thoughts in [brackets]; thoughts are unheard by the others. {additional_instructions}\n\n"
        "Plot so far:\n{plot_summary}\n\nThe scene:\n{scenario}\n\nThe characters:\n{character_profiles}\n\n"
        "The original scene:\n{original_conversation}\n\nFlaws to look for:\n{dimension_criteria}\n\n"
        "List every flaw of the simulated scene (it follows as the next message) with a severity from 1 (minor) "
        "to 5 (severe). Answer with one JSON object and nothing else: "
        '{{"{dimension_name}": {{"flaws": [{{"instance": "<where and what>", "type": "<flaw type>", '
        '"severity": <1-5>}}]}}}}'
    ),
    **{f"brief_{i}": _BRIEFS[d] for i, d in enumerate(_DIMENSIONS)},
    **{f"criteria_{i}": _CRITERIA[d] for i, d in enumerate(_DIMENSIONS)},
}

UTILS, PROMPTS = "gca_evaluation/utils.py", "gca_evaluation/prompts.py"
_RELEASED = {
    "environment": Released(UTILS, "prompt", 0, {"random.choice(model_roles)": "simulator_role"}),
    "next_speaker": Released(UTILS, "prompt", 1, {"ENVIRONMENT": "environment"}),
}


def replace_style(name: str, text: str, origin: str, slots: tuple[str, ...]) -> Template:
    """A template the authors fill by replacing ``{slot}`` markers, as a str.format template: every brace
    escaped, then the markers of ``slots`` restored."""
    escaped = text.replace("{", "{{").replace("}", "}}")
    for slot in slots:
        escaped = escaped.replace("{{" + slot + "}}", "{" + slot + "}")
    return Template(name, escaped, origin)


def released_critic(source: str | Path) -> dict[str, Template]:
    """The judge's template and the dimensions' briefs and criteria from ``critic_prompts`` in the clone."""
    path = Path(source).expanduser() / PROMPTS
    text = read_source_file(path, source)
    try:
        tree = ast.parse(text, filename=str(path))
        node = next(
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "critic_prompts" for t in n.targets)
        )
        critic = ast.literal_eval(node)
        details = critic["dimension_details"]
        out = {
            "judge": replace_style(
                "judge", critic["self-play-deduct-template"], f"{PROMPTS}:critic_prompts", _JUDGE_SLOTS
            )
        }
        for i, d in enumerate(_DIMENSIONS):
            where = f"{PROMPTS}:critic_prompts[dimension_details][{d}]"
            out[f"brief_{i}"] = replace_style(f"brief_{i}", details[d]["dimension_brief"], where, ())
            out[f"criteria_{i}"] = replace_style(
                f"criteria_{i}", details[d]["dimension_criteria"], where, ("major_characters",)
            )
    except (SyntaxError, ValueError, StopIteration, KeyError, TypeError) as error:
        raise TemplateError(f"{path}: no readable critic_prompts dict with the four dimensions ({error!r})") from None
    for name, template in out.items():
        allowed = {*slots_of(DEFAULTS[name]), *(("major_characters",) if name.startswith("criteria_") else ())}
        if not set(template.slots) <= allowed:
            raise TemplateError(
                f"{path}: {name} has slots {sorted(template.slots)}, expected some of {sorted(allowed)}"
            )
    return out


@dataclass(frozen=True)
class CoserPrompts:
    templates: dict[str, Template]

    @classmethod
    def load(cls, source: str | Path | None) -> CoserPrompts:
        templates = {name: resolve(name, text, _RELEASED.get(name), source) for name, text in DEFAULTS.items()}
        if source is not None:
            templates.update(released_critic(source))
        return cls(templates)

    def render(self, template: str, /, **values: str) -> str:
        wanted = self.templates[template].slots
        return self.templates[template].render(**{k: v for k, v in values.items() if k in wanted})

    def judge_prompt(self, dimension: str, **values: str) -> str:
        i = _DIMENSIONS.index(dimension)
        criteria = self.render(f"criteria_{i}", major_characters=values["major_characters"])
        return self.render(
            "judge",
            **values,
            dimension_name=dimension,
            dimension_brief=self.render(f"brief_{i}"),
            dimension_criteria=criteria,
        )

    def record(self) -> dict[str, dict[str, str]]:
        return {name: template.record() for name, template in self.templates.items()}
