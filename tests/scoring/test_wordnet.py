"""Where METEOR's WordNet is found (RPBENCH_WORDNET, nltk's data path, the system's files), and a run
without any WordNet: METEOR reported missing with the reason, the other metrics computed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nltk
import pytest

from rpbench.scoring import wordnet


@pytest.fixture(scope="module")
def database() -> dict[str, bytes]:
    """The WordNet 3.0 database files of this machine (wherever rpbench finds them)."""
    try:
        root, _ = wordnet.find_wordnet()
    except wordnet.WordNetMissingError as error:
        pytest.skip(f"no WordNet on this machine to copy: {error}")
    pointer = root if isinstance(root, nltk.data.PathPointer) else nltk.data.FileSystemPathPointer(root)
    return {name: pointer.join(name).open().read() for name in wordnet.DATABASE_FILES}


@pytest.fixture
def nowhere(tmp_path, monkeypatch) -> Path:
    """No WordNet anywhere: no setting, an empty nltk data path, an empty system folder."""
    monkeypatch.delenv(wordnet.SETTING, raising=False)
    monkeypatch.setenv("WNSEARCHDIR", str(tmp_path / "no-system-wordnet"))
    monkeypatch.setenv("RPBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")])
    return tmp_path


def write_database(folder: Path, files: dict[str, bytes], lexnames: bool) -> Path:
    folder.mkdir(parents=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    if lexnames:  # nltk's own layout ships lexnames; Debian's does not
        (folder / "lexnames").write_text(wordnet.lexnames_text())
    return folder


def reads_wordnet(root) -> bool:
    reader = wordnet.wordnet_reader(root)
    return reader.synset("dog.n.01").lexname() == "noun.animal" and reader.get_version() == "3.0"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The multilingual functions are not available")
def test_search_order_setting_then_nltk_data_then_system(nowhere, database, monkeypatch):
    with pytest.raises(wordnet.WordNetMissingError) as missing:
        wordnet.find_wordnet()
    for how in ("nltk.download('wordnet')", "apt-get install wordnet-base", "RPBENCH_WORDNET"):
        assert how in str(missing.value)

    system = write_database(nowhere / "no-system-wordnet", database, lexnames=False)  # Debian's files
    root, place = wordnet.find_wordnet()
    assert place == "system" and Path(root).parent == nowhere / "cache" / "wordnet"  # copied with lexnames
    assert (Path(root) / "lexnames").read_text() == wordnet.lexnames_text() and reads_wordnet(root)

    archive = nowhere / "nltk_data" / "corpora" / "wordnet.zip"  # what nltk.download('wordnet') leaves
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.mkdir("wordnet")  # nltk's archives hold the folder entry, which nltk looks up
        for name, content in {**database, "lexnames": wordnet.lexnames_text().encode()}.items():
            zipped.writestr(f"wordnet/{name}", content)
    root, place = wordnet.find_wordnet()
    assert place == "nltk" and isinstance(root, nltk.data.ZipFilePathPointer) and reads_wordnet(root)

    unzipped = write_database(nowhere / "nltk_data" / "corpora" / "wordnet", database, lexnames=True)
    root, place = wordnet.find_wordnet()
    assert place == "nltk" and Path(root) == unzipped  # the folder before the archive, as nltk looks

    explicit = write_database(nowhere / "explicit", database, lexnames=True)
    monkeypatch.setenv(wordnet.SETTING, str(explicit))
    root, place = wordnet.find_wordnet()
    assert place == wordnet.SETTING and Path(root) == explicit and reads_wordnet(root)
    assert system.is_dir()

    monkeypatch.setenv(wordnet.SETTING, str(nowhere / "empty"))
    with pytest.raises(FileNotFoundError, match=r"RPBENCH_WORDNET=.*empty: no WordNet 3\.0 database there"):
        wordnet.find_wordnet()  # a wrong explicit setting is an error, not a fall-through


def finds_wordnet(env: dict[str, str], repo_root: Path) -> bool:
    """find_wordnet() in a process with ``env``: the module loaded from its file (it needs only nltk), not
    through rpbench.scoring, whose registries import every scorer."""
    module = repo_root / "rpbench" / "scoring" / "wordnet.py"
    probe = (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('wordnet_probe', {str(module)!r})\n"
        "wordnet = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(wordnet)\n"
        "wordnet.find_wordnet()\n"
    )
    return subprocess.run([sys.executable, "-c", probe], cwd=repo_root, env=env, capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_run_without_wordnet_reports_meteor_missing_and_computes_the_rest(
    tmp_path, run_script, offline_env, repo_root
):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_wordnet = {
        wordnet.SETTING: "",
        "WNSEARCHDIR": str(empty),
        "NLTK_DATA": str(empty),
        "HOME": str(tmp_path),  # no ~/nltk_data, a fresh rpbench cache
    }
    if finds_wordnet({**os.environ, **no_wordnet}, repo_root):
        pytest.skip("this machine's nltk data path holds WordNet outside HOME (e.g. /usr/share/nltk_data)")
    out = tmp_path / "run"
    result = run_script(
        "run.py",
        f"hydra.run.dir={out}",
        "objective=none",
        "trainer.enable_progress_bar=false",
        "evaluator.metrics=[bleu,rougeL,meteor]",
        "data.max_test_samples=4",
        "evaluator.generation.max_new_tokens=8",
        **offline_env,
        **no_wordnet,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((out / "metrics.json").read_text())["eval"]
    reason = evaluation["missing_metrics"]["meteor"]
    assert "WordNet 3.0 not found" in reason and "nltk.download('wordnet')" in reason
    overall = evaluation["metrics"]["overall"]
    without = evaluation["metric_conventions"]["bleu_empty"]["samples_without_value"]  # no tokens: no BLEU, counted
    assert set(overall) == {"bleu", "rougeL"} and overall["bleu"]["n"] + without == overall["rougeL"]["n"] == 4
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 4 and all(set(row["metrics"]) == {"bleu", "rougeL"} for row in scores)  # never 0
    assert f"Not computed: meteor ({reason})" in (out / "report.md").read_text()
