"""User mistakes are user errors (``RpbenchError``: run.py prints one line, no traceback), each naming what is
wrong: the run as `python run.py` runs it, in-process."""

from __future__ import annotations

import json

import pytest

from rpbench.core.errors import RpbenchError

CHAT = [{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "Sherlock Holmes, of London."}]
QUICK = ("logger=none", "trainer.enable_progress_bar=false")


def _chats(path, n: int = 6):
    path.write_text("".join(json.dumps({"messages": CHAT, "id": f"r{i}"}) + "\n" for i in range(n)))
    return path


@pytest.fixture(scope="module")
def user_error(run_in_process):
    def user_error(tmp_path, *overrides: str) -> str:
        with pytest.raises(RpbenchError) as caught:  # any other exception is a traceback on the console
            run_in_process(tmp_path / "run", *QUICK, *overrides)
        return str(caught.value)

    return user_error


def test_mapping_mistakes_on_the_command_line(tmp_path, user_error):
    train = _chats(tmp_path / "my.jsonl")
    custom = ("data=custom", f"data.files.train={train}", "evaluator=none")
    assert "data.columns.speaker: unknown key; valid keys: chosen" in user_error(
        tmp_path, *custom, "+data.columns.speaker=who"
    )
    labels = ("data=custom", f"data.files.test={train}", "objective=none", "+data.task_dimensions.my=style")
    message = user_error(tmp_path, *labels)
    assert message.endswith("data.task_dimensions.my='style': expected a list")
    message = user_error(tmp_path, *custom, "data.columns.system=nonexistent")
    expected = f"{train}: record 1: field 'nonexistent': required (data.columns.system=nonexistent names it)"
    assert message.startswith(expected)


def test_training_records_that_are_test_records(tmp_path, user_error):
    train = _chats(tmp_path / "my.jsonl")
    message = user_error(tmp_path, "data=custom", f"data.files.train={train}", f"data.files.test={train}")
    assert "also appear in data.files.test" in message and "data.allow_overlap=true" in message


def test_no_trainable_sample_left_after_truncation(tmp_path, user_error):
    train = _chats(tmp_path / "my.jsonl")
    message = user_error(tmp_path, "data=custom", f"data.files.train={train}", "evaluator=none", "data.max_length=4")
    assert message.startswith("no trainable samples") and "data.max_length=4" in message


def test_an_mmrole_test_file_named_without_its_scenario(tmp_path, user_error):
    turns = [{"from": "user", "value": "Who?"}, {"from": "assistant", "value": "Holmes."}]
    record = {"id": "a", "image": "x.jpg", "role": "Holmes", "conversations": turns}
    test = tmp_path / "my_test.json"
    test.write_text(json.dumps([record]))
    message = user_error(tmp_path, "data=mmrole", f"data.files.test={test}", "objective=none", "evaluator=mmrole")
    assert message.startswith(f"{test}: record file: field '<file name>': a name starting with its MMRole scenario")
