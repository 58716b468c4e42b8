"""task=synthesize end to end against a scripted OpenAI-compatible endpoint (real HTTP on 127.0.0.1), a real
faiss index and the packaged MiniLM encoder: every stage, rejection reasons, resume without duplicates, the
cache, and rpbench's RoleMRC readers on the output."""

from __future__ import annotations

import json
import shutil

import pytest
from omegaconf import open_dict
from synth_fixtures import FLAKY, MALFORMED, scripted, write_personas, write_pool

from rpbench.core.errors import ConfigError, RpbenchError
from rpbench.data.rolemrc import TEST_LABELS
from rpbench.synth.calls import TEMPLATE_TOKENS_PER_MESSAGE, BudgetReached, NothingAccepted
from rpbench.synth.personas import sample_personas
from rpbench.synth.synthesize import synthesize_run
from rpbench.validate import validate


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synth_inputs")
    personas = write_personas(folder / "personas.txt", extra=(MALFORMED, FLAKY))
    pool, _ = write_pool(folder / "pool.jsonl")
    return personas, pool


@pytest.fixture(scope="module")
def config(composed):
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

    return config


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory, inputs, chat_stub, config):
    """One full synthesis (every stage) and the scripted endpoint, shared by the tests below."""
    tmp_path = tmp_path_factory.mktemp("synthesized")
    with chat_stub(scripted) as stub:
        summary = synthesize_run(validate(config(tmp_path, stub.url, *inputs)))
        yield tmp_path, stub, summary


def copy_run(synthesized, tmp_path, *dropped: str) -> None:
    """The shared run's stage files (less ``dropped``) and generator cache, copied to ``tmp_path``."""
    source = synthesized[0]
    shutil.copytree(source / "out", tmp_path / "out")
    shutil.copy(source / "cache.sqlite", tmp_path / "cache.sqlite")
    for name in dropped:
        (tmp_path / "out" / name).unlink()


@pytest.mark.slow
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


def worst_case_usage(body):
    """The most a request can cost as rpbench bounds it: a token per byte of each message plus the template's
    tokens, and its whole reply length."""
    texts = [m["content"] for m in body["messages"]]
    return sum(len(t.encode()) + TEMPLATE_TOKENS_PER_MESSAGE for t in texts), body["max_tokens"]


def stub_cost_usd(stub) -> float:
    """What the stub's replies cost at the config's 1000 USD per 1M tokens, in and out."""
    return sum(sum(worst_case_usage(body)) for body in stub.requests) * 1000 / 1e6


@pytest.mark.slow
def test_a_kill_resumes_without_duplicates_and_a_rerun_costs_nothing(tmp_path, synthesized, inputs, chat_stub, config):
    """The budget stops the stage before a request could pass it (each reply here costs its worst case:
    about 3.5 USD a dialogue); the rerun goes on from what was written, and a redo comes from the cache."""
    first = synthesized[2]
    out = tmp_path / "out"
    copy_run(synthesized, tmp_path, "dialogues.jsonl")
    fresh = ("synth.stages=[dialogues]", f"judge.cache_path={tmp_path / 'fresh.sqlite'}")  # every reply asked
    with chat_stub(scripted, worst_case_usage) as stub:
        with pytest.raises(BudgetReached, match="stage dialogues"):
            synthesize_run(validate(config(tmp_path, stub.url, *inputs, *fresh, "synth.budget_usd=20")))
        assert 0 < stub_cost_usd(stub) <= 20  # never past the budget (checked between batches of 8: ~28 USD)
        written = lines(out / "dialogues.jsonl")
        planned = first["stages"]["dialogues"]["planned"]
        assert 0 < len(written) < planned
        with (out / "dialogues.jsonl").open("a") as f:
            f.write('{"id": "train:cut off mid-wri')  # a kill during a write
        asked = len(stub.bodies)
        resumed = synthesize_run(validate(config(tmp_path, stub.url, *inputs, *fresh)))
        ids = [r["id"] for r in lines(out / "dialogues.jsonl")]
        assert len(ids) == len(set(ids)) == planned
        assert resumed["stages"]["dialogues"]["already_done"] == len(written)
        assert len(stub.bodies) - asked == planned - len(written)  # only the items not written before were asked
        files = {name: (out / name).read_text() for name in ("rolemrc_train-sft.jsonl", "rolemrc_test.jsonl")}

        asked = len(stub.bodies)
        (out / "dialogues.jsonl").unlink()  # the stage redone from scratch: every reply from the cache
        again = synthesize_run(validate(config(tmp_path, stub.url, *inputs, *fresh)))
        assert len(stub.bodies) == asked
    usage = again["stages"]["dialogues"]["usage"]
    assert usage["this_run"]["cost_usd"] == 0 and usage["this_run"]["cache_hits"] == planned
    assert usage["all_runs"]["cost_usd"] == pytest.approx(
        resumed["stages"]["dialogues"]["usage"]["all_runs"]["cost_usd"]
    )
    assert {name: (out / name).read_text() for name in files} == files


@pytest.mark.slow
def test_a_budget_smaller_than_one_request_asks_nothing_and_the_estimate_is_recorded(
    tmp_path, synthesized, inputs, chat_stub, config
):
    copy_run(synthesized, tmp_path, "profiles.jsonl", "profiles_rejected.jsonl")
    with chat_stub(scripted, worst_case_usage) as stub:
        stages = ("synth.stages=[profiles]", f"judge.cache_path={tmp_path / 'fresh.sqlite'}")
        with pytest.raises(BudgetReached, match=r"stopped after 0/12 items"):
            synthesize_run(validate(config(tmp_path, stub.url, *inputs, *stages, "synth.budget_usd=0.0001")))
        assert stub.bodies == []
        summary = synthesize_run(validate(config(tmp_path, stub.url, *inputs, *stages)))
    estimate = summary["stages"]["profiles"]["estimate"]
    requests = [r for r in stub.requests if len(r["messages"]) == 1]  # first tries (a re-ask adds two messages)
    assert estimate["requests"] == 12 and estimate["completion_tokens"] == sum(r["max_tokens"] for r in requests)
    chars = [sum(len(m["content"]) for m in r["messages"]) for r in requests]
    assert estimate["prompt_tokens"] == sum(-(-c // 4) for c in chars)


@pytest.fixture(scope="module")
def synth_problems(composed):
    """The keys a ConfigError names for ``overrides`` of the synthesis recipe."""

    def synth_problems(tmp_path, inputs, *overrides: str) -> list[str]:
        cfg = composed(
            tmp_path / "hydra",
            "task=synthesize",
            "synth=rolemrc",
            "judge=openai",
            f"synth.personas_file={inputs[0]}",
            f"synth.pool_file={inputs[1]}",
            *overrides,
        )
        with pytest.raises(ConfigError) as raised:
            synthesize_run(validate(cfg))
        return sorted(line.split("=")[0].split(":")[0].strip() for line in str(raised.value).splitlines()[1:])

    return synth_problems


def test_synthesis_settings_are_typed_and_every_bad_value_is_named_at_once(tmp_path, inputs, synth_problems):
    wrong_types = ("synth.n_personas=abc", "synth.budget_usd=cheap", "synth.allow_overlap=3")
    assert synth_problems(tmp_path, inputs, *wrong_types) == ["synth.allow_overlap", "synth.budget_usd",
                                                              "synth.n_personas"]  # fmt: skip
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    bad = ("synth.budget_usd=-1", "synth.max_tokens.reply=0", f"synth.out_dir={a_file}", "synth.top_k=0",
           "synth.table2_single_label.answer=-5", "synth.stages=[profiles,personas]")  # fmt: skip
    assert synth_problems(tmp_path, inputs, *bad) == sorted(
        f"synth.{key}" for key in ("budget_usd", "max_tokens", "out_dir", "top_k", "table2_single_label", "stages")
    )


@pytest.mark.slow
def test_a_generator_that_never_follows_the_format_fails_the_stage(tmp_path, synthesized, inputs, chat_stub, config):
    copy_run(synthesized, tmp_path, "profiles.jsonl", "profiles_rejected.jsonl")
    stages = ("synth.stages=[profiles]", f"judge.cache_path={tmp_path / 'fresh.sqlite'}", "synth.profile_tries=2")
    with chat_stub(lambda body: "Sure! Here is a profile: a kind baker.") as stub:
        expected = r"stage profiles: 0 of 12 items accepted \(rejected replies: not_json x24\): the generator cannot"
        with pytest.raises(NothingAccepted, match=expected):
            synthesize_run(validate(config(tmp_path, stub.url, *inputs, *stages)))
    summary = json.loads((tmp_path / "out" / "synthesis.json").read_text())
    assert (summary["stages"]["profiles"]["accepted"], summary["stages"]["profiles"]["rejected"]) == (0, 12)
    later = ("synth.stages=[dialogues]", f"judge.cache_path={tmp_path / 'fresh.sqlite'}")  # not "run profiles first"
    with pytest.raises(ConfigError, match="stage dialogues: 0 of 12 profiles accepted: the generator cannot follow"):
        synthesize_run(validate(config(tmp_path, "http://127.0.0.1:9", *inputs, *later)))


def test_a_personas_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    personas = tmp_path / "personas.txt"
    personas.write_bytes("A baker\nA caf\u00e9 owner\n".encode("utf-8") + "A na\u00efve poet\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"personas.txt, line 3: not UTF-8 text"):
        sample_personas(personas, 5, seed=0)


def test_the_index_is_reused_and_overlap_with_a_given_test_file_is_refused(tmp_path, synthesized, inputs, config):
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
        synthesize_run(validate(config(tmp_path, synthesized[1].url, *inputs, *check)))
    summary = synthesize_run(
        validate(config(tmp_path, synthesized[1].url, *inputs, *check, "synth.allow_overlap=true"))
    )
    assert summary["output"]["overlap"]["train"] == 1
    retrieval = summary["stages"]["retrieval"]
    assert (retrieval["index"], retrieval["profiles"]) == ("reused", 0)  # the profiles were retrieved in the run before


@pytest.mark.slow
def test_without_test_profiles_no_test_file_is_written(tmp_path, synthesized, inputs, config):
    copy_run(synthesized, tmp_path)
    summary = synthesize_run(
        validate(config(tmp_path, synthesized[1].url, *inputs, "synth.stages=[dialogues]", "synth.test_fraction=0"))
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


def test_the_synthesis_entry_point_serves_judge_local_with_the_server_handed_in(tmp_path, inputs, composed):
    """Called directly (not through run.py), synthesis with judge=local asks the local server it is given."""
    from rpbench.serve.running import local_judge

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
        synthesize_run(validate(cfg))
    with pytest.raises(NothingAccepted, match="stage profiles: 0 of 2 items accepted"):  # a random tiny model's
        synthesize_run(validate(cfg), local_judge_server=local_judge)
    profiles = json.loads((tmp_path / "out" / "synthesis.json").read_text())["stages"]["profiles"]
    usage = profiles["usage"]["this_run"]
    assert (usage["requests"], usage["failures"], profiles["failed_requests"]) == (2, 0, 0)
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 2 * 4  # the tiny model's replies
    assert profiles["accepted"] + profiles["rejected"] == 2  # each reply checked (a random tiny model's: rejected)


def test_a_generator_prompt_beyond_judge_max_prompt_chars_is_not_sent_and_counted(tmp_path, inputs, chat_stub, config):
    """The synthesis generator rides on the judge's client: a prompt over ``judge.max_prompt_chars`` is a failed
    request, counted (the stage stops, naming how many), and never reaches the endpoint."""
    with chat_stub(scripted) as stub:
        cfg = config(tmp_path, stub.url, *inputs, "synth.stages=[personas,profiles]", "synth.n_personas=2")
        with open_dict(cfg):
            cfg.judge.max_prompt_chars = 10
        limit = r"stage profiles: 2 requests got no reply.*above judge.max_prompt_chars=10 \(not sent\)"
        with pytest.raises(RpbenchError, match=limit):
            synthesize_run(validate(cfg))
        assert stub.requests == []
