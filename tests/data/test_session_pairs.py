"""Multi-turn preference pairs from judged conversation runs (``rpbench.synth.pairs_from_runs``) and their reader
(``data=session_pairs``): which session is chosen, what is skipped and counted, named errors for bad runs and
bad pair records, and the loss mask of a pair token by token on ChatML (tiny-qwen2)."""

from __future__ import annotations

import json

import pytest

from rpbench.core.errors import DataFormatError, RpbenchError
from rpbench.data import readers
from rpbench.data.chat import IGNORE_INDEX
from rpbench.data.conversation import CHARACTER_PROMPT
from rpbench.data.readers import NoRubrics
from rpbench.models.loading import chat_renderer, load_tokenizer
from rpbench.objectives.dpo import DPOModule
from rpbench.synth.pairs_from_runs import main, write_pairs

NO_RUBRICS = NoRubrics(task_dimensions=None)

SCENARIO = {"character": "Mara", "card": "A lighthouse keeper.", "persona": "A sailor.", "goal": "Directions."}
RUBRIC = ("consistency", "engagement")


def session(sid: str, *texts: str, **scenario: str) -> dict:
    """A conversations.jsonl record: the opening, then character and user messages alternating."""
    roles = ["user", *(["character", "user"] * len(texts))][: len(texts)]
    messages = [{"role": r, "text": t} for r, t in zip(roles, texts)]
    return {"id": sid, **SCENARIO, **scenario, "messages": messages, "ended_by": "turn_limit", "error": None}


def write_run(folder, sessions: list[dict], verdicts: dict[str, list]) -> None:
    """A conversation run's folder: its sessions and the judge's verdicts per session (None: unparsed)."""
    folder.mkdir()
    (folder / "conversations.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    rows = [{"id": k, "task": "Mara", "metrics": {}, "verdicts": dict(zip(RUBRIC, v))} for k, v in verdicts.items()]
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def runs(tmp_path):
    """Runs a and b on scenarios s1-s4 (s5 only in b): s1 b better overall (a wins on engagement), s2 a tie
    overall, s3 a's verdict unparsed, s4 a better (b's session ends on the simulator's farewell)."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_run(
        a,
        [session(f"s{i}", "Hi!", f"a{i} one.", "More?", f"a{i} two.") for i in range(1, 5)],
        {"s1": [2, 5], "s2": [4, 4], "s3": [None, 3], "s4": [5, 5]},
    )
    b_sessions = [session(f"s{i}", "Hi!", f"b{i} one.", "More?", f"b{i} two.") for i in range(1, 4)]
    b_sessions += [session("s4", "Hi!", "b4 one.", "Thanks!"), session("s5", "Hi!", "b5 one.")]
    write_run(b, b_sessions, {"s1": [5, 3], "s2": [3, 5], "s3": [4, 4], "s4": [1, 1], "s5": [3, 3]})
    return a, b


def test_pairs_choose_the_higher_judged_session_and_count_what_they_skip(runs, tmp_path, capsys):
    out = tmp_path / "pairs.jsonl"
    main([str(runs[0]), str(runs[1]), "--out", str(out)])
    summary = json.loads(capsys.readouterr().out)
    pairs = {p["id"]: p for p in map(json.loads, out.read_text().splitlines())}
    assert sorted(pairs) == ["s1#1-2", "s4#1-2"]
    s1, s4 = pairs["s1#1-2"], pairs["s4#1-2"]
    assert s1["meta"]["chosen"] == {"run": "b", "score": 4.0} and s1["meta"]["rejected"] == {"run": "a", "score": 3.5}
    assert [m["content"] for m in s1["chosen"]] == ["b1 one.", "More?", "b1 two."]
    assert s1["system"] == CHARACTER_PROMPT.format(character="Mara", card="A lighthouse keeper.")
    assert s1["opening"] == "Hi!"
    assert [m["content"] for m in s4["chosen"]] == ["a4 one.", "More?", "a4 two."]
    assert s4["rejected"] == [{"role": "assistant", "content": "b4 one."}]  # the farewell "Thanks!" left out
    assert summary == json.loads((tmp_path / "pairs.summary.json").read_text())
    assert summary | {"runs": None} == {
        "runs": None,
        "dimension": "overall",
        "scenarios": 5,
        "pairs": 2,
        "scenarios_in_one_run": 1,
        "sessions_without_score": 1,
        "sessions_with_an_empty_turn": 0,
        "pairs_without_score": 1,
        "ties": 1,
        "pairs_with_an_empty_turn": 0,
        "user_turns_after_the_last_reply": 1,
    }
    # one dimension: a wins s1 on engagement, s2 goes to b, s3 is judged there (b wins), s4 to a
    by_dimension = write_pairs(runs, tmp_path / "engagement.jsonl", "engagement")
    read = readers.read("session_pairs", "pairs", tmp_path / "engagement.jsonl", NO_RUBRICS).examples
    assert {e.id: e.meta["chosen"]["run"] for e in read} == {"s1#1-2": "a", "s2#1-2": "b", "s3#1-2": "b", "s4#1-2": "a"}
    assert by_dimension["ties"] == 0 and by_dimension["sessions_without_score"] == 0


def test_bad_runs_are_named_by_file_record_and_field(runs, tmp_path):
    a, b = runs
    out = tmp_path / "pairs.jsonl"
    write_run(tmp_path / "c", [session("s5", "Hi!", "c5 one.", card="A smuggler.")], {"s5": [1, 1]})
    with pytest.raises(DataFormatError, match=r"c/conversations\.jsonl: record s5: field 'card'.*b/conversations"):
        write_pairs([a, b, tmp_path / "c"], out, "overall")  # s5 is not in a: compared with b's
    (b / "scores.jsonl").rename(tmp_path / "kept.jsonl")
    with pytest.raises(DataFormatError, match=r"b/scores\.jsonl: record file: field '<file>'.*missing"):
        write_pairs([a, b], out, "overall")
    lines = (tmp_path / "kept.jsonl").read_text().splitlines()
    (b / "scores.jsonl").write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(DataFormatError, match=r"b/scores\.jsonl: record s1: field 'id'.*a score row"):
        write_pairs([a, b], out, "overall")
    (b / "scores.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=r"a/scores\.jsonl: record s1: field 'verdicts\.style'"):
        write_pairs([a, b], out, "style")
    sessions = (b / "conversations.jsonl").read_text().splitlines()
    other = json.loads(sessions[1]) | {"card": "A smuggler."}
    (b / "conversations.jsonl").write_text("\n".join([sessions[0], json.dumps(other), *sessions[2:]]) + "\n")
    with pytest.raises(DataFormatError, match=r"b/conversations\.jsonl: record s2: field 'card'.*same scenario"):
        write_pairs([a, b], out, "overall")
    with pytest.raises(RpbenchError, match="no preference pair"):
        write_pairs([a, a], out, "overall")  # every session ties with itself
    assert not out.exists()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"chosen": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}, r"chosen\[0\]\.role"),
        ({"rejected": [{"role": "assistant", "content": "y"}, {"role": "user", "content": "x"}]}, "rejected"),
        ({"rejected": [{"role": "assistant", "content": " "}]}, r"rejected\[0\]\.content"),
        ({"opening": ""}, "opening"),
        ({"score": 1}, "score"),
    ],
)
def test_a_malformed_pair_record_is_named(tmp_path, change, field):
    good = {"id": "p", "system": "S", "opening": "O", "chosen": [{"role": "assistant", "content": "A"}]}
    good["rejected"] = [{"role": "assistant", "content": "B"}]
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(good | {"id": "q"} | change) + "\n")
    with pytest.raises(DataFormatError, match=rf"pairs\.jsonl: record 2.*field '{field}'"):
        readers.read("session_pairs", "pairs", path, NO_RUBRICS)


def test_every_character_turn_is_supervised_and_every_user_turn_masked_token_by_token(tmp_path, tiny_model):
    """ChatML written out by hand: the labelled tokens are exactly each reply and its <|im_end|>."""
    path = tmp_path / "pairs.jsonl"
    chosen = [
        {"role": "assistant", "content": "Ahoy there."},
        {"role": "user", "content": "Which way?"},
        {"role": "assistant", "content": "North, by the rocks."},
    ]
    record = {"id": "p", "system": "Be Mara.", "opening": "Hello!", "chosen": chosen}
    path.write_text(json.dumps(record | {"rejected": [{"role": "assistant", "content": "Go away."}]}) + "\n")
    pair = readers.read("session_pairs", "pairs", path, NO_RUBRICS).examples[0]
    model = tiny_model(family="qwen2", end_of_turn="<|im_end|>", chat_template=None)
    tokenizer = load_tokenizer(model)
    samples, empty = DPOModule.render([pair], chat_renderer(model, tokenizer, 512))

    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    head = "<|im_start|>system\nBe Mara.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
    pieces = [
        (head, False),
        ("Ahoy there.<|im_end|>", True),
        ("\n<|im_start|>user\nWhich way?<|im_end|>\n<|im_start|>assistant\n", False),
        ("North, by the rocks.<|im_end|>", True),
        ("\n", False),
    ]
    ids = [i for text, _ in pieces for i in encode(text)]
    labels = [i if trained else IGNORE_INDEX for text, trained in pieces for i in encode(text)]
    assert empty == [] and samples[0]["chosen_input_ids"] == ids and samples[0]["chosen_labels"] == labels
    rejected = [(head, False), ("Go away.<|im_end|>", True), ("\n", False)]
    assert samples[0]["rejected_labels"] == [
        i if trained else IGNORE_INDEX for text, trained in rejected for i in encode(text)
    ]
