"""The R-EMID prompt set: rpbench's wording by default, a released repository's read from a clone laid out as the
authors' (files and variable names as theirs; the texts here are the test's own), and the RPGBench reader's
released evaluation layout."""

import hashlib
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from rpbench.core.errors import ConfigError
from rpbench.data import readers
from rpbench.data.records import Turn
from rpbench.data.remid_prompts import DEFAULTS, RELEASED, RolePlayInput, format_dialogue, remid_prompts
from rpbench.data.templates import TemplateError

# sha256 of each released template as rpbench reads it from AlibabaResearch/DAMO-ConvAI at 483554e (a clone
# as prompts.source): rpbench's own wording must not be any of them byte for byte.
AUTHORS_SHA256 = {
    "policy_system": "958c503832e545e226a442d76349882c39c4713e707b6654d9933790b2cf67f7",
    "policy_user": "4d5220e9690c8582c927e620c0b166829a7af98ab2ff23e124bf814b3423123f",
    "policy_user_naive": "6a3626fef4d9701276a3f926729d93ab2b42be7097396a5d6f8e3a397866b010",
    "thought_system": "0804b2822fc743cc2628eef50fe57b2348753098535cfd4bff2c09eb834e66cc",
    "thought_user": "5bdc1da7fa62da7d06cc5936131851e803b71dabbaa018cac331457cad782c22",
    "no_reference": "0ba93e994e96878ca047066ce322017e8b1a366b030701c446e3a2c0e3a3d97b",
    "pxy_system": "5483d783388640050cb43b8f2a42c4c8dafe4b9e9eb33f8ae447a1cada4852f4",
    "pxy_user": "b5c84cb176b0eda4363f8ea820f8974cd748a201e2c0b35805af323d82cec066",
    "features_block": "1ece1e23c3c4c5c4aecbc08020594b9857eca7331f2601723c6ee20e27a02c72",
    "response_target": "0d0e641f820171504b89b099566aa3e2bb220e1ce0a6d0cbe1c79f5194aab63f",
    "judge_system": "9e11f039144359ec054d02a708ebc2b46d5daf9ffebd63651f17f43c8f25cf03",
    "judge_instruction": "9e11f039144359ec054d02a708ebc2b46d5daf9ffebd63651f17f43c8f25cf03",
    "judge_user": "507542ab2e405dbf8c324667ea251738d93a80e66a77008e3d4e6357e658ba0d",
}
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


def test_no_default_is_the_authors_text_and_the_policy_layouts_keep_their_slots():
    ours = remid_prompts(None)
    assert set(AUTHORS_SHA256) == set(DEFAULTS)
    assert [name for name in DEFAULTS if ours[name].sha256 == AUTHORS_SHA256[name]] == []
    for name in ("policy_user", "policy_user_naive"):
        assert ours[name].slots == ("user_persona", "agent_character", "str_dialogue_context"), name


def test_a_clone_s_policy_layouts_are_used_and_their_sha256_recorded(tmp_path):
    released = remid_prompts(clone(tmp_path))
    tagged = "<P>{user_persona}</P><C>{agent_character}</C><D>{str_dialogue_context}</D>"
    naive = "P: {user_persona} C: {agent_character} D: {str_dialogue_context}"
    records = released.records()
    assert records["policy_user"] == {
        "origin": f"{ROOT}test_generation/policy_test.py:prompt#1",
        "sha256": hashlib.sha256(tagged.encode()).hexdigest(),
    }
    assert records["policy_user_naive"]["sha256"] == hashlib.sha256(naive.encode()).hexdigest()
    x = RolePlayInput("a baker", "Ada", "User Query 1: hi\n")
    assert released.policy(x, naive=True)[1].content == "P: a baker C: Ada D: User Query 1: hi\n"


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


def test_the_reader_gives_the_released_layout_and_the_category(tmp_path, data_options):
    tagged = data_options("sample_rpgbench")
    examples = readers.read("rpgbench", "test", SAMPLE, tagged).examples
    first = examples[0]
    system, user = first.prompt
    assert (system.role, user.role) == ("system", "user") and len(first.prompt) == 2
    assert user.content.startswith("<persona>") and "</dialogue>\n" in user.content
    x = first.meta["x"]
    assert user.content == DEFAULTS["policy_user"].format(**x)
    assert x["agent_character"] == str(first.meta["character"]) and first.meta["dialogue"][-1]["role"] == "user"
    by_tag = {e.task: e.meta["category"] for e in examples}
    assert by_tag["english"] == by_tag["IDTest"] == "IDTest" and by_tag["german"] == "german"
    naive = readers.read("rpgbench", "test", SAMPLE, replace(tagged, policy_prompt="naive")).examples[0]
    assert naive.prompt[1].content.startswith("The user: ")
    with pytest.raises(ConfigError, match="data.policy_prompt='chat': expected one of tagged, naive"):
        data_options("sample_rpgbench", policy_prompt="chat")
    document = json.loads(SAMPLE.read_text())
    authors = replace(readers.STRICT, prompts_source=str(clone(tmp_path)))
    released = readers.read("rpgbench", "test", SAMPLE, tagged, authors).examples[0]
    assert released.prompt[0].content == "Serve the user." and released.prompt[1].content.startswith("<P>")
    assert len(document["IDTest"]) == sum(e.meta["split"] == "IDTest" for e in examples)
