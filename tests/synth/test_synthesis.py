"""task=synthesize end to end against a scripted OpenAI-compatible endpoint (real HTTP on 127.0.0.1), a real
faiss index and the packaged MiniLM encoder: every stage, rejection reasons, resume without duplicates, the
cache, and rpbench's RoleMRC readers on the output."""

from __future__ import annotations

import json
import shutil

import pytest
from omegaconf import open_dict
from synth_fixtures import FLAKY, MALFORMED, scripted, write_personas, write_pool

from conftest import chat_stub, composed
from rpbench.data.errors import RpbenchError
from rpbench.data.rolemrc import TEST_LABELS
from rpbench.synth.calls import BudgetReached
from rpbench.synth.synthesize import synthesize_from_config


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synth_inputs")
    personas = write_personas(folder / "personas.txt", extra=(MALFORMED, FLAKY))
    pool, _ = write_pool(folder / "pool.jsonl")
    return personas, pool


def config(tmp_path, url, personas, pool, *extra):
    return composed(
        tmp_path / "hydra",
        "task=synthesize",
        "synth=rolemrc",
        "judge=openai",
        f"judge.base_url={url}",
        "judge.api_key_env=null",
        "judge.model=scripted",
        "judge.progress=false",
        "judge.price_input_per_1m=1000",
        "judge.price_output_per_1m=1000",
        f"judge.cache_path={tmp_path / 'cache.sqlite'}",
        f"synth.out_dir={tmp_path / 'out'}",
        f"synth.personas_file={personas}",
        f"synth.pool_file={pool}",
        "synth.n_personas=12",
        "synth.test_fraction=0.5",
        "synth.batch_size=8",
        *extra,
    )


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory, inputs):
    """One full synthesis (every stage) and the scripted endpoint, shared by the tests below."""
    tmp_path = tmp_path_factory.mktemp("synthesized")
    with chat_stub(scripted) as stub:
        summary = synthesize_from_config(config(tmp_path, stub.url, *inputs))
        yield tmp_path, stub, summary


def copy_run(synthesized, tmp_path, *dropped: str) -> None:
    """The shared run's stage files (less ``dropped``) and generator cache, copied to ``tmp_path``."""
    source = synthesized[0]
    shutil.copytree(source / "out", tmp_path / "out")
    shutil.copy(source / "cache.sqlite", tmp_path / "cache.sqlite")
    for name in dropped:
        (tmp_path / "out" / name).unlink()


def test_every_stage_writes_its_file_and_the_rolemrc_readers_take_the_output(synthesized):
    tmp_path, _, summary = synthesized
    out = tmp_path / "out"
    stages = summary["stages"]
    # 10 topic personas + the two extra, the duplicate and the blank line counted
    assert stages["personas"] == {"sampled": 12, "lines": 14, "blank": 1, "duplicates": 1, "distinct": 12}
    # the malformed persona is dropped with its reason after three tries; the flaky one passes on the re-ask
    profiles = stages["profiles"]
    assert (profiles["accepted"], profiles["rejected"]) == (11, 1)
    assert profiles["rejection_reasons"] == {"missing_component": 3, "not_json": 1}
    (dropped,) = lines(out / "profiles_rejected.jsonl")
    assert dropped["persona"] == MALFORMED and dropped["reasons"][0].startswith("missing_component: description")
    assert stages["retrieval"]["index"] == "built" and stages["retrieval"]["pool_records"] == 20
    assert len(lines(out / "retrieval.jsonl")) == 11
    dialogues = stages["dialogues"]
    assert dialogues["rejected"] == 0 and dialogues["accepted"] == dialogues["planned"]
    # tokens and cost per stage: the stub counts 1 + 1 tokens per reply, at 1000 USD per 1M tokens each
    usage = profiles["usage"]["this_run"]
    assert usage["prompt_tokens"] == usage["completion_tokens"] == usage["requests"] == 11 + 1 + 3
    assert usage["cost_usd"] == pytest.approx(15 * 2 * 1000 / 1e6)
    assert (
        summary["templates"]["profile"]["origin"] == "rpbench" and len(summary["templates"]["profile"]["sha256"]) == 64
    )

    files = summary["output"]["files"]
    train_labels = set(files["train"]["per_label"])
    assert {label.split("---")[0] for label in train_labels if "---" in label} == {
        "role_related_dialogue",
        "role_related_mrc_dialogue",
    }
    assert set(files["test"]["per_label"]) == set(TEST_LABELS)  # the 18 evaluated labels
    assert files["pairs"]["records"] == sum(n for label, n in files["train"]["per_label"].items() if "---" not in label)
    assert summary["output"]["overlap"] == {"test_file": "rolemrc_test.jsonl", "train": 0, "pairs": 0}
    # pairs: the stylised reply chosen, the plain seed rejected
    pair = next(r for r in lines(out / "rolemrc_train-rl.jsonl") if r["task"] == "role_related_mrc_answer_no_narration")
    assert pair["chosen"].startswith("Well, friend,") and pair["chosen"].endswith(pair["rejected"][1:])
    # narration where the label asks for it, none elsewhere (chats: in some replies; single replies: first)
    for record in lines(out / "rolemrc_train-sft.jsonl"):
        replies = [t["content"] for t in record["conversations"] if t["role"] == "assistant"]
        narrated = [r.startswith("(") for r in replies]
        assert any(narrated) if "with_narration" in record["task"] else not any(narrated), record
    # test records: profiles of the test split only
    test_profiles = {r["profile_id"] for r in lines(out / "dialogues.jsonl") if r["split"] == "test"}
    train_profiles = {r["profile_id"] for r in lines(out / "dialogues.jsonl") if r["split"] == "train"}
    assert test_profiles and not test_profiles & train_profiles


def test_a_kill_resumes_without_duplicates_and_a_rerun_costs_nothing(tmp_path, synthesized, inputs):
    _, stub, first = synthesized
    out = tmp_path / "out"
    copy_run(synthesized, tmp_path, "dialogues.jsonl")
    fresh = ("synth.stages=[dialogues]", f"judge.cache_path={tmp_path / 'fresh.sqlite'}")  # every reply asked
    with pytest.raises(BudgetReached, match="stage dialogues"):
        synthesize_from_config(config(tmp_path, stub.url, *inputs, *fresh, "synth.budget_usd=0.01"))
    written = lines(out / "dialogues.jsonl")
    planned = first["stages"]["dialogues"]["planned"]
    assert 0 < len(written) < planned
    with (out / "dialogues.jsonl").open("a") as f:
        f.write('{"id": "train:cut off mid-wri')  # a kill during a write
    asked = len(stub.bodies)
    resumed = synthesize_from_config(config(tmp_path, stub.url, *inputs, *fresh))
    ids = [r["id"] for r in lines(out / "dialogues.jsonl")]
    assert len(ids) == len(set(ids)) == planned
    assert resumed["stages"]["dialogues"]["already_done"] == len(written)
    assert len(stub.bodies) - asked == planned - len(written)  # only the items not written before were asked
    files = {name: (out / name).read_text() for name in ("rolemrc_train-sft.jsonl", "rolemrc_test.jsonl")}

    asked = len(stub.bodies)
    (out / "dialogues.jsonl").unlink()  # the stage redone from scratch: every reply from the cache
    again = synthesize_from_config(config(tmp_path, stub.url, *inputs, *fresh))
    assert len(stub.bodies) == asked
    usage = again["stages"]["dialogues"]["usage"]
    assert usage["this_run"]["cost_usd"] == 0 and usage["this_run"]["cache_hits"] == planned
    assert usage["all_runs"]["cost_usd"] == pytest.approx(
        resumed["stages"]["dialogues"]["usage"]["all_runs"]["cost_usd"]
    )
    assert {name: (out / name).read_text() for name in files} == files


def test_the_index_is_reused_and_overlap_with_a_given_test_file_is_refused(tmp_path, synthesized, inputs):
    source = synthesized[0] / "out"
    leaked = next(r for r in lines(source / "rolemrc_train-sft.jsonl") if "---" not in r["task"])
    given = tmp_path / "given_test.jsonl"
    record = {
        "task": leaked["task"],
        "question": leaked["conversations"][:-1],
        "reference": leaked["conversations"][-1]["content"],
    }
    given.write_text(json.dumps(record) + "\n")
    check = ("synth.stages=[retrieval,dialogues]", f"synth.overlap_test_file={given}")
    copy_run(synthesized, tmp_path, "retrieval.jsonl")
    with pytest.raises(RpbenchError, match="1 rolemrc_train-sft.jsonl records also appear in given_test.jsonl"):
        synthesize_from_config(config(tmp_path, synthesized[1].url, *inputs, *check))
    summary = synthesize_from_config(config(tmp_path, synthesized[1].url, *inputs, *check, "synth.allow_overlap=true"))
    assert summary["output"]["overlap"]["train"] == 1
    retrieval = summary["stages"]["retrieval"]
    assert (retrieval["index"], retrieval["profiles"]) == ("reused", 0)  # the profiles were retrieved in the run before


def test_without_test_profiles_no_test_file_is_written(tmp_path, synthesized, inputs):
    copy_run(synthesized, tmp_path)
    summary = synthesize_from_config(
        config(tmp_path, synthesized[1].url, *inputs, "synth.stages=[dialogues]", "synth.test_fraction=0")
    )
    assert summary["output"]["files"]["test"] == {"file": None, "records": 0, "per_label": {}}
    assert summary["output"]["overlap"] == {"test_file": None, "train": 0, "pairs": 0}
    assert not (tmp_path / "out" / "rolemrc_test.jsonl").exists()
    assert summary["stages"]["dialogues"]["profiles"] == {"train": 11, "test": 0}


def test_reply_checks_name_their_reasons():
    from rpbench.synth.dialogues import check_chat, check_replies
    from rpbench.synth.profiles import check_profile

    assert check_profile("[1, 2]").reason.startswith("not_an_object")
    bad_type = json.loads(
        scripted({"messages": [{"content": "Turn this one-sentence persona\nPersona: A cook who cooks"}]})
    )
    bad_type["abilities"] = "cooking"
    assert check_profile(json.dumps(bad_type)).reason == "wrong_type: abilities is not a list of strings"
    assert check_profile("```json\n" + json.dumps({**bad_type, "abilities": ["cooking"]}) + "\n```").reason is None
    assert check_chat('[{"speaker": "user", "text": "hi"}]', role_first=True, narration=False).startswith(
        "wrong_first_speaker"
    )
    two = [{"speaker": s, "text": t} for s, t in (("user", "a"), ("role", "(sighs) b"), ("user", "c"), ("role", "d"))]
    assert check_chat(json.dumps(two), role_first=False, narration=False).startswith("narration_present")
    assert isinstance(check_chat(json.dumps(two), role_first=False, narration=True), list)
    assert check_replies("The answer.", ["The answer."], False, None).startswith("unstyled")
    assert check_replies("one only", ["a", "b"], False, None).startswith("wrong_part_count")
    assert check_replies("Fine words", ["x"], False, lambda r: r.isupper()).startswith("rule_not_followed")
    assert check_replies("(nods) Yes.\n###\nNo.", ["a", "b"], True, None).startswith("narration_missing")


def test_the_synthesis_entry_point_serves_judge_local_with_the_server_handed_in(tmp_path, inputs):
    """Called directly (not through run.py), synthesis with judge=local asks the local server it is given."""
    from rpbench.serve import local_judge

    cfg = composed(
        tmp_path / "hydra",
        "task=synthesize",
        "synth=rolemrc",
        "judge=local",
        "judge.progress=false",
        f"judge.cache_path={tmp_path / 'cache.sqlite'}",
        f"synth.out_dir={tmp_path / 'out'}",
        f"synth.personas_file={inputs[0]}",
        "synth.stages=[personas,profiles]",
        "synth.n_personas=2",
        "synth.profile_tries=1",
        "synth.max_tokens.profile=4",
    )
    with pytest.raises(ValueError, match="no local judge server was handed in"):
        synthesize_from_config(cfg)
    profiles = synthesize_from_config(cfg, local_judge_server=local_judge)["stages"]["profiles"]
    usage = profiles["usage"]["this_run"]
    assert (usage["requests"], usage["failures"], profiles["failed_requests"]) == (2, 0, 0)
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 2 * 4  # the tiny model's replies
    assert profiles["accepted"] + profiles["rejected"] == 2  # each reply checked (a random tiny model's: rejected)


def test_a_generator_prompt_beyond_judge_max_prompt_chars_is_not_sent_and_counted(tmp_path, inputs):
    """The synthesis generator rides on the judge's client: a prompt over ``judge.max_prompt_chars`` is a failed
    request, counted (the stage stops, naming how many), and never reaches the endpoint."""
    with chat_stub(scripted) as stub:
        cfg = config(tmp_path, stub.url, *inputs, "synth.stages=[personas,profiles]", "synth.n_personas=2")
        with open_dict(cfg):
            cfg.judge.max_prompt_chars = 10
        limit = r"stage profiles: 2 requests got no reply.*above judge.max_prompt_chars=10 \(not sent\)"
        with pytest.raises(RpbenchError, match=limit):
            synthesize_from_config(cfg)
        assert stub.requests == []
