"""`python run.py evaluator=shift data=custom ...`: the JSD between splits of one's own files per part and
subset, checked against the quantum JSD computed here with numpy from the same encoder's embeddings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rpbench.eval.generalization.embed import load_text_embedder

PIRATE, CLERK = "You are Salt Annie, a pirate of the southern seas.", "You are Mr Pell, a clerk at the town bank."


def conversation(system, user, reply, task):
    turns = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user},
        {"role": "assistant", "content": reply},
    ]
    return {"messages": turns, "task": task}


TRAIN = [
    conversation(PIRATE, "Where is the treasure buried?", "Under the third palm, matey.", "pirate"),
    conversation(PIRATE, "How do you tie a knot?", "Loop, pull, and curse the wind.", "pirate"),
    conversation(CLERK, "Can I open an account?", "Certainly, fill in this form.", "clerk"),
    conversation(CLERK, "What is the interest rate?", "Two percent a year, sir.", "clerk"),
]
TEST = [
    conversation(PIRATE, "Tell me about your ship.", "She's the Gull, fastest in the bay.", "pirate"),
    conversation(None, "What time do you close?", "At five o'clock sharp.", "clerk"),
    conversation(CLERK, "Can I borrow money for a boat?", "We shall need a guarantor.", "clerk"),
]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def quantum_jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Equal-weight JSD of the trace-normalised second moments of unit rows, from eigenvalues: each matrix is
    YᵀY (C_p = Zpᵀ Zp / n_p; the mixture stacks both sets' rows scaled by 1/sqrt(2 n)), whose positive
    eigenvalues are those of the small Gram matrix Y Yᵀ."""

    def entropy(y):
        w = np.linalg.eigvalsh(y @ y.T)
        w = w[w > 1e-12] / w[w > 1e-12].sum()
        return float(-(w * np.log(w)).sum())

    yp, yq = p / np.sqrt(len(p)), q / np.sqrt(len(q))
    return entropy(np.vstack([yp, yq]) / np.sqrt(2)) - (entropy(yp) + entropy(yq)) / 2


@pytest.fixture
def one_thread():
    """Tiny encoder batches run faster on one thread than on two shared cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_shift_report_between_splits_of_own_data(tmp_path, one_thread, run_in_process):
    files = {"train": write(tmp_path / "train.jsonl", TRAIN), "test": write(tmp_path / "test.jsonl", TEST)}
    files["again"] = write(tmp_path / "again.jsonl", TRAIN)
    splits = "{" + ",".join(f"{k}:{v}" for k, v in files.items()) + "}"
    results = run_in_process(
        tmp_path / "run",
        "objective=none",
        "logger=none",
        "data=custom",
        "data.columns.task=task",
        "evaluator=shift",
        f"evaluator.splits={splits}",
        "evaluator.generalization.encoder=null",
    )
    assert results["model"] == "not loaded"
    found = results["eval"]["shift"]
    assert found["records"] == {"train": 4, "test": 3, "again": 4}
    assert found["records_without_part"]["test"] == {"user": 0, "character": 1, "dialogue": 0}
    assert set(found["pairs"]) == {"train vs test", "train vs again", "test vs again"}
    same = found["pairs"]["train vs again"]["(all)"]
    assert all(abs(same[part]["jsd"]) < 1e-9 for part in ("user", "character", "dialogue"))

    embedder = load_text_embedder(None, 0, 512, "mean_skip_first", False)
    embed = lambda texts: embedder.embed(texts).vectors.double().numpy()  # noqa: E731
    train_users = [r["messages"][-2]["content"] for r in TRAIN]
    test_users = [r["messages"][-2]["content"] for r in TEST]
    shifted = found["pairs"]["train vs test"]
    assert shifted["(all)"]["user"]["jsd"] == pytest.approx(quantum_jsd(embed(train_users), embed(test_users)))
    assert 0 < shifted["(all)"]["user"]["jsd"] <= math.log(2)
    # the clerk subset's characters: two train records, one test record with a system prompt
    clerk = shifted["clerk"]["character"]
    assert clerk["n"] == [2, 1]
    assert clerk["jsd"] == pytest.approx(quantum_jsd(embed([CLERK, CLERK]), embed([CLERK])), abs=1e-9)
    assert "### train vs test" in (tmp_path / "run" / "report.md").read_text()


def test_one_split_is_refused(tmp_path, run_in_process):
    from rpbench.core.errors import ConfigError

    with pytest.raises(ConfigError, match="evaluator=shift compares two or more splits"):
        run_in_process(
            tmp_path / "run", "objective=none", "logger=none", "data=custom", "evaluator=shift",
            f"data.files.test={write(tmp_path / 'test.jsonl', TEST)}", "evaluator.generalization.encoder=null",
        )  # fmt: skip
