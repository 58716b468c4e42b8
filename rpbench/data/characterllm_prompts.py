"""Character-LLM's interview and scoring prompts (Shao et al. 2023, choosewhatulike/trainable-agents).

rpbench's own wording with the slots of the authors' templates; ``prompts.source=<clone of
trainable-agents>`` reads theirs at run time instead (each template's origin and sha256 go to
metrics.json). Where the authors keep them:

- ``character``: the evaluated model's system prompt, ``data/seed_data/prompts/agent_meta_prompt_sft.txt``
  (slots character, loc_time, status);
- ``interviewer``: the interviewer of the Turns setting,
  ``data/seed_data/prompts/agent_meta_prompt_interviewer_chatgpt.txt`` (character, topic, profile,
  loc_time, status); the transcript so far follows it, one ``<speaker> (speaking): <text>`` paragraph per
  turn, then the interviewer's cue;
- ``score_<aspect>`` for personality, values, memory, hallucination and stability:
  ``data/seed_data/prompts/prompt_score_llm_<aspect>.txt`` (agent_name, agent_context, loc_time, status,
  interactions); the judge reasons, then gives a score from 1 to 7 alone on the last line;
- ``status`` and ``loc_time``: the interview's scene, assigned in ``run_api_interview_single.py``
  (status has the slot name);
- ``judge_system``: the judge's system message (``sys_prompt`` of the scoring call in
  ``run_api_score_single.py``; the Turns scoring script sends the same);
- ``interviewer_system``: the interviewer's system message (the default of ``decoder_for_openai`` in
  ``api_call_util.py``, which the interviewer calls without one).

The ``.txt`` templates are read whole (stripped, as the authors read them); the scene strings with the
lead's ``rpbench.data.templates`` loader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rpbench.data.templates import Released, Template, TemplateError, read_source_file, resolve, slots_of

ASPECTS: tuple[str, ...] = ("personality", "hallucination", "values", "memory", "stability")
SPEAKER_CUE = "{speaker} (speaking):"
INTERVIEWER = "Man"  # the interviewer's name in the transcripts, as in the authors' interviews
PROMPT_DIR = "data/seed_data/prompts"

_SCORE_HEAD = (
    "Below is a conversation in which an AI assistant plays the character {agent_name}. Rate how well it "
    "plays the character on the one criterion given, following the steps.\n\n"
    "===\n[Profile of the character]\n{agent_context}\n\n[Scene]\nPlace and time: {loc_time}\n"
    "Situation: {status}\n===\n[Conversation]\n{interactions}\n===\n[Criterion]\n"
)
_SCORE_TAIL = (
    "\n===\nReason step by step before you decide; do not open with the score. Then write the score (a whole "
    "number from 1 to 7) on a line of its own, and once more alone on the last line."
)
_CRITERIA = {
    "personality": (
        "Personality (1-7): do the replies show the character's own temperament, tastes and preferences?\n"
        "Steps: note the character's personality from the profile; note the one the assistant shows; compare "
        "them; 1 = nothing of the character's personality, 7 = exactly the character's personality."
    ),
    "values": (
        "Values (1-7): do the replies hold the character's beliefs, judgements and convictions?\n"
        "Steps: note what the character values and believes from the profile; note what the assistant's "
        "replies express; compare them; 1 = contrary to the character's values, 7 = fully the character's."
    ),
    "memory": (
        "Memory (1-7): do the replies recall the character's life, relations and experiences correctly and "
        "in detail?\nSteps: note the facts of the character's life in the profile; check each fact the "
        "assistant states against them; 1 = wrong or no recollection, 7 = accurate and detailed recollection."
    ),
    "hallucination": (
        "Avoiding hallucination (1-7): does the assistant keep to what the character could know, and decline "
        "or show puzzlement at things outside the character's time and world?\nSteps: find questions about "
        "things the character cannot know; check whether the assistant claims knowledge of them; 1 = freely "
        "talks about what the character cannot know, 7 = never steps outside the character's knowledge."
    ),
    "stability": (
        "Stability (1-7): does the assistant stay in character across the whole conversation?\nSteps: judge "
        "each reply on whether it still sounds and thinks like the character; then judge the conversation "
        "as a whole; 1 = drops the character early or often, 7 = in character throughout."
    ),
}

DEFAULTS: dict[str, str] = {
    "character": (
        "Play {character}. Answer as {character} would, in {character}'s voice, manner and words, and with "
        "everything {character} knows.\n\nThe scene:\nPlace and time: {loc_time}\nSituation: {status}\n\n"
        "The conversation follows."
    ),
    "interviewer": (
        "You are a curious person from our time talking with {character}; I will speak as {character}. Draw "
        "out {character}'s memories, values and personality in as much detail as you can: ask one question "
        'at a time, follow up when an answer is vague, keep to the topic, address the character as "you" '
        "without naming them, and you may ask an earlier question again to test consistency. Write only your "
        "next utterance, without explanations.\n\nTopic of the conversation:\n{topic}\n\nAbout {character}:\n"
        "{profile}\n\nThe scene:\nPlace and time: {loc_time}\nSituation: {status}\n\nThe conversation so far:"
    ),
    **{f"score_{aspect}": _SCORE_HEAD + criterion + _SCORE_TAIL for aspect, criterion in _CRITERIA.items()},
    "status": (
        "{name} is chatting over coffee with a man from the 21st century, whom {name} trusts completely, and "
        "tells him everything {name} knows."
    ),
    "loc_time": "A coffee shop, in the afternoon",
    "judge_system": "You are an assistant who answers carefully and correctly.",
    "interviewer_system": "You are an assistant who helps.",
}

_TEXT_FILES = {
    "character": "agent_meta_prompt_sft.txt",
    "interviewer": "agent_meta_prompt_interviewer_chatgpt.txt",
    **{f"score_{aspect}": f"prompt_score_llm_{aspect}.txt" for aspect in ASPECTS},
}
_SCENE = {
    "status": Released("run_api_interview_single.py", "status"),
    "loc_time": Released("run_api_interview_single.py", "loc_time"),
    "judge_system": Released("run_api_score_single.py", "sys_prompt"),
    # the first assignment takes the caller's system prompt; the second is the default
    "interviewer_system": Released("api_call_util.py", "sys_prompt_content", occurrence=1),
}


def released_text(name: str, source: str | Path, file: str) -> Template:
    """The authors' template in the text file ``source/<PROMPT_DIR>/<file>`` (stripped), with the default's slots."""
    path = Path(source).expanduser() / PROMPT_DIR / file
    text = read_source_file(path, source).strip()
    template = Template(name, text, f"{PROMPT_DIR}/{file}")
    try:
        slots = template.slots
    except ValueError as error:  # an unbalanced brace, or a slot that is not a plain name
        raise TemplateError(f"{path}: not a str.format template ({error})") from None
    if set(slots) != set(slots_of(DEFAULTS[name])):
        raise TemplateError(
            f"{path}: slots {sorted(template.slots)}, expected {sorted(slots_of(DEFAULTS[name]))} for {name!r}"
        )
    return template


@dataclass(frozen=True)
class CharacterLLMPrompts:
    templates: dict[str, Template]

    @classmethod
    def load(cls, source: str | Path | None) -> CharacterLLMPrompts:
        templates = {
            name: resolve(name, DEFAULTS[name], None, None) if source is None else released_text(name, source, file)
            for name, file in _TEXT_FILES.items()
        }
        templates.update({name: resolve(name, DEFAULTS[name], where, source) for name, where in _SCENE.items()})
        return cls(templates)

    def render(self, template: str, /, **values: str) -> str:
        return self.templates[template].render(**values)

    def record(self) -> dict[str, dict[str, str]]:
        return {name: template.record() for name, template in self.templates.items()}
