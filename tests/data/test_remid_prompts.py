"""The R-EMID prompt set: rpbench's wording by default, a released repository's read from a clone laid out as the
authors' (files and variable names as theirs; the texts here are the test's own), and the RPGBench reader's
released evaluation layout."""

import json
import textwrap
from pathlib import Path

import pytest

from rpbench.data import readers
from rpbench.data.records import Turn
from rpbench.data.remid_prompts import DEFAULTS, RELEASED, RolePlayInput, format_dialogue, remid_prompts
from rpbench.data.templates import TemplateError

SAMPLE = Path(__file__).resolve().parents[2] / "rpbench" / "resources" / "sample" / "rpgbench" / "rpgbench.json"
ROOT = "RPM-Generalization/"

THOUGHT = """
## Inputs
{user_persona} | {agent_character} | {str_dialogue_context}
## Reference
{agent_golden_response}
## Layout
### Part A: Facts
#### About the user
#### Attempt 1
### Part B: Result
```
[Key Points]
- one
```
"""


def clone(root: Path) -> Path:
    """A clone with the authors' file layout and variable names, holding the test's own texts."""
    files = {
        "templates.py": (
            'system_prompt_for_SThought = """Think."""\n'
            f'base_prompt_for_SThought = """{THOUGHT}"""\n'
            'system_prompt_for_model_pxy = """Reply."""\n'
            'base_prompt_for_model_pxy = """P={user_persona} C={agent_character} D={str_dialogue_context}"""\n'
        ),
        "test_generation/policy_test.py": """
            def run(user_persona, agent_character, str_dialogue_context):
                prompt = f"P: {user_persona} C: {agent_character} D: {str_dialogue_context}"
                prompt = f"<P>{user_persona}</P><C>{agent_character}</C><D>{str_dialogue_context}</D>"
                specified_sys_prompt = f\"\"\"Serve the user.\"\"\"
        """,
        "REMID_estimation/REMID_thought_collection.py": """
            x = template.format(agent_golden_response="(none)")
        """,
        "REMID_estimation/REMID_estimation.py": """
            SFT_input = base.format()
            SFT_input = f"{SFT_input}\\n## Key\\n```{EMI_Inference_SThought}```"
            y_golden_message = {"messages": [{"role": "assistant", "content": f"## Reply\\n{golden_response}"}]}
        """,
        "estimator_training/CoEvolve_RL.py": """
            system_prompt_for_PxyReward = \"\"\"Rate it.\"\"\"
            instruction = \"\"\"Give a percentage.\"\"\"
            prompt_for_model_PxyReward = (
                f"{prompt_for_model_pxy} R={expected_output_for_model_pxy} C={content} {instruction}"
            )
        """,
    }
    for name, text in files.items():
        path = root / ROOT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_every_default_has_its_released_counterpart_and_the_same_slots(tmp_path):
    assert set(RELEASED) == set(DEFAULTS)
    released = remid_prompts(clone(tmp_path))
    ours = remid_prompts(None)
    for name in DEFAULTS:
        assert set(released[name].slots) == set(ours[name].slots), name
        assert released[name].origin == RELEASED[name].describe() and ours[name].origin == "rpbench"
    x = RolePlayInput("a baker", "{'name': 'Ada'}", "User Query 1: hi\n")
    assert released.policy(x)[1].content == "<P>a baker</P><C>{'name': 'Ada'}</C><D>User Query 1: hi\n</D>"
    assert released.policy(x, naive=True)[1].content.startswith("P: a baker C:")
    assert released.marker == "[Key Points]" and released.sections == (
        "Part A: Facts",
        "About the user",
        "Part B: Result",
    )
    assert released.pxy(x, "F")[1].content.endswith("\n## Key\n```F```") and released.target("hi") == "## Reply\nhi"
    assert "(none)" in released.thought(x)[1].content
    judge = released.judge(x, "F", "gold", "cand")[1].content
    assert "R=## Reply\ngold C=cand Give a percentage." in judge
    assert released.records()["pxy_user"]["sha256"] != ours.records()["pxy_user"]["sha256"]


def test_a_clone_missing_a_template_is_named(tmp_path):
    clone(tmp_path)
    (tmp_path / ROOT / "estimator_training" / "CoEvolve_RL.py").unlink()
    with pytest.raises(TemplateError, match="CoEvolve_RL.py: no such file"):
        remid_prompts(tmp_path)


def test_the_dialogue_layout_numbers_turns_and_leaves_the_last_reply_open():
    turns = [Turn("user", "hi"), Turn("assistant", "hello"), Turn("user", "bye")]
    assert (
        format_dialogue(turns) == "User Query 1: hi\nAgent Response 1: hello\n\nUser Query 2: bye\n\nAgent Response 2: "
    )
    with pytest.raises(ValueError, match="alternates"):
        format_dialogue([Turn("user", "a"), Turn("user", "b")])


def test_the_reader_gives_the_released_layout_and_the_category(tmp_path):
    examples = readers.read("rpgbench", "test", SAMPLE).examples
    first = examples[0]
    system, user = first.prompt
    assert (system.role, user.role) == ("system", "user") and len(first.prompt) == 2
    assert user.content.startswith("<User Persona>") and "</Dialogue Context>\n" in user.content
    x = first.meta["x"]
    assert user.content == DEFAULTS["policy_user"].format(**x)
    assert x["agent_character"] == str(first.meta["character"]) and first.meta["dialogue"][-1]["role"] == "user"
    by_tag = {e.task: e.meta["category"] for e in examples}
    assert by_tag["english"] == by_tag["IDTest"] == "IDTest" and by_tag["german"] == "german"
    naive = readers.read("rpgbench", "test", SAMPLE, policy_prompt="naive").examples[0]
    assert naive.prompt[1].content.startswith("User Persona: ")
    with pytest.raises(ValueError, match="data.policy_prompt must be one of"):
        readers.read("rpgbench", "test", SAMPLE, policy_prompt="chat")
    document = json.loads(SAMPLE.read_text())
    released = readers.read("rpgbench", "test", SAMPLE, prompts_source=str(clone(tmp_path))).examples[0]
    assert released.prompt[0].content == "Serve the user." and released.prompt[1].content.startswith("<P>")
    assert len(document["IDTest"]) == sum(e.meta["split"] == "IDTest" for e in examples)
