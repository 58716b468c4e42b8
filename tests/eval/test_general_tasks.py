"""conf/evaluator/general.yaml against the installed lm-eval: RoleMRC Table 7's nine benchmarks at the
paper's shots (Appendix A), each task or group known to lm-eval's TaskManager, down to its leaf tasks, and
each leaf reporting the configured ``<metric>,<filter>`` and building its few-shot context (on local rows).

Indexing all of lm-eval's ~14k task YAMLs takes 10-40 s, so the TaskManager here indexes only the folders
whose YAMLs name a configured task, group or tag (found by a text scan), growing them until every group's
members resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rpbench.core.paths import CONF_DIR

# RoleMRC Appendix A / Table 7: benchmark -> (shots, the lm-eval task that matches its description).
PAPER = {
    "GSM8K": (8, "gsm8k"),  # exact match
    # "exact math score across a 5k subset": MATH's 5,000 test problems (minerva_math needs antlr4 4.11, which
    # Hydra's 4.9 pin excludes; experiments/rolemrc/README.md's differences table)
    "MATH": (4, "hendrycks_math"),
    "GPQA": (0, "gpqa_main_cot_zeroshot"),  # 448 questions (main set), "flexible" score
    "IFEval": (3, "ifeval"),  # instruction-level strict accuracy
    "MMLU-Pro": (5, "mmlu_pro"),  # exact match
    "MMLU": (0, "mmlu"),  # accuracy
    "PIQA": (3, "piqa"),  # accuracy
    "MuSR": (0, "leaderboard_musr"),  # all 756 questions
    "TruthfulQA": (3, "truthfulqa_mc1"),  # multiple choice, single true, 817 questions
}
# Where the configured shots differ from the paper's (each a row of experiments/rolemrc/README.md's differences
# table): lm-eval's IFEval has no few-shot split and no string target, so its 3 shots cannot be built.
DIFFERS = {"IFEval": (0, "ifeval")}


def configured_tasks() -> list[dict]:
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "evaluator" / "general.yaml").tasks)


@pytest.fixture(scope="module")
def manager():
    """lm-eval's TaskManager over the installed task folders that define the configured names."""
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    root = Path(lm_eval.tasks.__file__).parent
    texts = {path: path.read_text(errors="replace") for path in root.rglob("*.yaml")}
    wanted, folders = {t["name"] for t in configured_tasks()}, set()
    while True:
        names = "|".join(map(re.escape, sorted(wanted)))
        mention = re.compile(rf"^(?:task:|group:|tag:|\s*-)\s*[\"']?(?:{names})[\"']?\s*$", re.M)
        folders |= {path.parent for path, text in texts.items() if mention.search(text)}
        outermost = sorted(f for f in folders if not any(o in f.parents for o in folders))
        tm = TaskManager(include_path=outermost, include_defaults=False)
        missing = unresolved(tm, [t["name"] for t in configured_tasks()]) - wanted
        if not missing:
            return tm
        wanted |= missing


def unresolved(tm, names: list[str]) -> set[str]:
    """The names, and the members of the groups among them (recursively), that ``tm`` does not know."""
    unknown = {n for n in names if n not in tm.task_index}
    known = [n for n in names if n in tm.task_index and tm.task_index[n].kind.name in ("GROUP", "TAG")]
    return unknown | {u for n in known for u in unresolved(tm, members(tm, n))}


def members(tm, name: str) -> list[str]:
    """A group's or tag's member names (a group lists them under ``task``; a tag's are the tasks tagged)."""
    entry = tm.task_index[name]
    if entry.kind.name == "TAG":
        return [n for n, e in tm.task_index.items() if name in e.tags]
    listed = (entry.cfg or {}).get("task", [])
    return [m if isinstance(m, str) else m["task"] for m in ([listed] if isinstance(listed, str) else listed)]


def leaves(tm, name: str) -> list[str]:
    entry = tm.task_index[name]
    if entry.kind.name in ("TASK", "PY_TASK"):
        return [name]
    return [leaf for m in members(tm, name) for leaf in leaves(tm, m)]


def test_the_configured_tasks_are_the_papers_nine_at_its_shots():
    tasks = configured_tasks()
    assert {t["label"]: (t["num_fewshot"], t["name"]) for t in tasks} == {**PAPER, **DIFFERS}
    assert len(tasks) == len(PAPER)


@pytest.mark.parametrize("task", configured_tasks(), ids=lambda t: t["name"])
def test_each_configured_task_resolves_in_lm_eval_with_its_metric(manager, task):
    assert task["name"] in manager.all_tasks, f"lm-eval knows no task or group {task['name']!r}"
    metric, filter_name = task["metric"].split(",", 1)
    found = leaves(manager, task["name"])
    assert found, f"{task['name']}: a group without leaf tasks"
    for leaf in found:
        cfg = manager.task_index[leaf].cfg
        assert metric in [m["metric"] for m in cfg.get("metric_list", [])], f"{leaf}: reports no {metric!r}"
        filters = [f["name"] for f in cfg.get("filter_list", [])] or ["none"]
        assert filter_name in filters, f"{leaf}: no filter {filter_name!r} (its filters: {filters})"


MMLU_PRO_CATEGORIES = (
    "biology business chemistry computer_science economics engineering health history law math other "
    "philosophy physics psychology"
).split()


def _rows(path: str, i: int) -> dict:
    """Row ``i`` of a stand-in for the hub dataset ``path``, in that dataset's own columns."""
    q = f"Question {i}?"
    if path == "openai/gsm8k":
        return {"question": q, "answer": f"Work.\n#### {i}"}
    if path == "EleutherAI/hendrycks_math":
        return {"problem": q, "solution": f"So $\\boxed{{{i}}}$.", "level": "Level 1", "type": "Algebra"}
    if path == "Idavidrein/gpqa":
        return {
            "Question": q,
            "Correct Answer": "yes",
            "Incorrect Answer 1": "no",
            "Incorrect Answer 2": "maybe",
            "Incorrect Answer 3": "never",
        }
    if path == "google/IFEval":
        return {
            "key": i,
            "prompt": f"Write {i} words.",
            "instruction_id_list": ["length_constraints:number_words"],
            "kwargs": [{"relation": "at least", "num_words": i}],
        }
    if path == "TIGER-Lab/MMLU-Pro":
        category = MMLU_PRO_CATEGORIES[i % len(MMLU_PRO_CATEGORIES)].replace("_", " ")
        return {
            "question_id": i,
            "question": q,
            "options": ["a", "b", "c", "d"],
            "answer": "A",
            "answer_index": 0,
            "cot_content": "A: Let's think step by step. The answer is (A).",
            "category": category,
            "src": "x",
        }
    if path == "cais/mmlu":
        return {"question": q, "subject": "x", "choices": ["a", "b", "c", "d"], "answer": i % 4}
    if path in ("baber/piqa", "ybisk/piqa", "piqa"):
        return {"goal": q, "sol1": "one way", "sol2": "another way", "label": i % 2}
    if path == "TAUR-Lab/MuSR":
        return {
            "narrative": "A story.",
            "question": q,
            "choices": "['Ann', 'Bob']",
            "answer_index": 0,
            "answer_choice": "Ann",
        }
    if path == "truthfulqa/truthful_qa":
        return {
            "question": q,
            "mc1_targets": {"choices": ["true", "false"], "labels": [1, 0]},
            "mc2_targets": {"choices": ["true", "false"], "labels": [1, 0]},
        }
    raise AssertionError(f"no local stand-in for the dataset {path!r}: add its columns here")


@pytest.fixture
def local_datasets(monkeypatch):
    """lm-eval's tasks read a few local rows per split of their own dataset instead of the hub."""
    import datasets
    from lm_eval.api.task import ConfigurableTask

    def download(self, dataset_kwargs=None, **kwargs):
        cfg = self.config
        splits = {cfg.training_split, cfg.validation_split, cfg.test_split, cfg.fewshot_split}
        splits |= {getattr(cfg.fewshot_config, "split", None)}
        rows = [_rows(cfg.dataset_path, i) for i in range(7 * len(MMLU_PRO_CATEGORIES))]
        self.dataset = datasets.DatasetDict({s: datasets.Dataset.from_list(rows) for s in splits if isinstance(s, str)})

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(ConfigurableTask, "download", download)


@pytest.mark.slow
def test_each_configured_task_builds_its_few_shot_context(manager, local_datasets):
    """lm-eval's own configs of every leaf task over local rows in its dataset's columns (no hub): each
    builds the context of its first document at the configured shots."""
    for spec in configured_tasks():
        found = manager.load([spec["name"]])["tasks"]
        assert found, spec["name"]
        for name, task in found.items():
            task.set_config(key="num_fewshot", value=int(spec["num_fewshot"]))
            doc = next(iter(task.eval_docs))
            try:
                context = task.fewshot_context(doc, num_fewshot=int(spec["num_fewshot"]))
            except Exception as err:  # noqa: BLE001 - name the task whose context cannot be built
                raise AssertionError(f"{spec['label']} ({name}, {spec['num_fewshot']}-shot): {err!r}") from err
            assert isinstance(context, str) and context, name
