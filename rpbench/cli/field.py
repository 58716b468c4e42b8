"""``rpbench field [--set NAME] [--out PARENT] [--only a,b] <overrides>``: the field's benchmarks (conf/field.yaml)
evaluated for one model, each a run of its own (``rpbench eval``, in-process) in ``PARENT/<benchmark>``, then the
leaderboard of ``PARENT``.

A benchmark whose run cannot be configured (its data path absent, a judged benchmark without a judge: what
``validate`` refuses) is skipped, with why; an override its config has no key for fails it. A folder whose
config.yaml holds other settings (another model, judge, decoding...), or whose metrics.json was computed on other
records (a data file replaced at the same path: its ``records_sha256``), is never reused: that benchmark fails,
naming what differs. A finished one (metrics.json, not failed, under the same settings and records) is reused; a
killed one runs again in its folder, where the evaluator resumes its predictions. The exit status is 1 when a
benchmark failed (or none has a result), else 0."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rpbench.core.errors import RpbenchError
from rpbench.core.paths import CONF_DIR
from rpbench.core.typed import Settings

FIELD_FILE = CONF_DIR / "field.yaml"
# Keys of a run's config that name, place, log or show it, not what it computes: left out of its settings
# fingerprint (top-level groups; and keys of any group by name).
NOT_FINGERPRINTED = ("paths", "run_name", "sweep_name", "logger")
NOT_FINGERPRINTED_NAMES = ("progress", "enable_progress_bar")
SHOWN_DIFFERENCES = 5
INTERRUPTED = 130  # the exit status of a job stopped by Ctrl-C (rpbench.cli.job)


@dataclass(frozen=True)
class FieldSettings(Settings):
    """conf/field.yaml: the sets of benchmarks (benchmark -> its run's overrides), the set run by default and
    where the runs go when ``--out`` is not given."""

    sets: Mapping[str, Mapping[str, tuple[str, ...]]]
    default_set: str
    parent_root: str

    def problems(self) -> list:
        found = [] if self.default_set in self.sets else [("default_set", f"one of {', '.join(self.sets)}")]
        return found + [(f"sets.{name}", "at least one benchmark") for name, chosen in self.sets.items() if not chosen]


def field_settings() -> FieldSettings:
    return FieldSettings.parse(yaml.safe_load(FIELD_FILE.read_text(encoding="utf-8")), str(FIELD_FILE.name))


@dataclass(frozen=True)
class Outcome:
    """What became of one benchmark: ``finished`` (reused), ``ran``, ``resumed``, ``skipped`` or ``failed``."""

    benchmark: str
    status: str
    why: str
    folder: Path


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A config's settings as dotted key -> value, less the keys that do not change what a run computes."""
    if not isinstance(tree, Mapping) or not tree:
        return {prefix: tree}
    found: dict[str, Any] = {}
    for key, value in tree.items():
        if (not prefix and key in NOT_FINGERPRINTED) or key in NOT_FINGERPRINTED_NAMES:
            continue
        found.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return found


def fingerprint(config: Mapping[str, Any]) -> str:
    """sha256 of a run's resolved config's ``leaves``."""
    plain = leaves(json.loads(json.dumps(config, default=str)))
    return hashlib.sha256(json.dumps(sorted(plain.items()), default=str).encode()).hexdigest()


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The first keys whose values differ between two configs, ``key: old -> new``."""
    a, b = leaves(json.loads(json.dumps(old, default=str))), leaves(json.loads(json.dumps(new, default=str)))
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    shown = "; ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys[:SHOWN_DIFFERENCES])
    return shown + (f"; and {len(keys) - SHOWN_DIFFERENCES} more" if len(keys) > SHOWN_DIFFERENCES else "")


def composed_run(args: Sequence[str], folder: Path):
    """``validate`` of the config ``rpbench eval <args>`` composes, written to ``folder``: the typed run, or the
    RpbenchError saying what is not configured."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from rpbench.validate import validate

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[*args, f"hydra.run.dir={folder}"], return_hydra_config=True)
            with open_dict(cfg):
                cfg.hydra.runtime.output_dir = str(folder)
            HydraConfig.instance().set_config(cfg)
            with open_dict(cfg):
                del cfg["hydra"]
                cfg.paths.output_dir = str(folder)
            return validate(cfg)
    finally:
        GlobalHydra.instance().clear()


def earlier(folder: Path, spec) -> tuple[str, str]:
    """What ``folder`` holds of an earlier run of ``spec`` (a validated run): ``new``, ``finished``, ``killed``
    (its run did not finish, or its results rest on nothing) or ``other`` (another model, settings or data:
    never reused), with why."""
    from rpbench.leaderboard.runs import RunFolderError, read_config, read_json

    config = dict(spec.composed)
    if not (folder / "config.yaml").is_file():
        return ("killed", "no config.yaml: started before its run wrote one") if folder.is_dir() else ("new", "")
    try:
        before = read_config(folder / "config.yaml")
        if fingerprint(before) != fingerprint(config):
            return "other", differences(before, config)
        if not (folder / "metrics.json").is_file():
            return "killed", "no metrics.json"
        results = read_json(folder / "metrics.json")
    except RunFolderError as error:
        return "other", str(error)
    if results.get("failed"):
        return "killed", f"its results rest on nothing ({results['failed']})"
    changed = changed_records(spec, results)
    if changed:
        return "other", changed
    return "finished", "metrics.json under the same settings and records"


def changed_records(spec, results: Mapping[str, Any]) -> str | None:
    """Why the records ``spec`` reads now are not those ``results`` were computed on (a data file replaced at the
    same path, or unreadable now); None when every file's ``records_sha256`` is the one recorded."""
    from rpbench.pipeline import read_data, splits_read

    train_split, need_test = splits_read(spec)
    try:
        _, now = read_data(spec.data, train_split, need_test=need_test)
    except RpbenchError as error:
        return f"its data cannot be read now: {error}"
    recorded = results.get("records") or {}
    for file, read in now.items():
        if "records_sha256" not in read:  # a train/test overlap report, not a file
            continue
        was = (recorded.get(file) or {}).get("records_sha256")
        if was != read["records_sha256"]:
            was_shown = f"sha256 {was[:12]}" if was else "no records_sha256 recorded"
            return (
                f"data.files.{file} ({read['path']}): its records are not those the run read "
                f"({was_shown} -> {read['records_sha256'][:12]})"
            )
    return None


def launch(args: Sequence[str]) -> str | None:
    """``rpbench eval <args>`` in this process (Hydra's job: its .hydra record, log, error.txt); why it failed,
    or None."""
    from rpbench.cli.job import run_job

    saved = sys.argv
    sys.argv = ["rpbench eval", *args]
    try:
        run_job()
    except SystemExit as stop:
        if stop.code == INTERRUPTED:  # Ctrl-C stops the field, not only this benchmark
            raise
        if stop.code not in (None, 0):
            return f"exit status {stop.code}"
    except Exception as error:  # the crash's traceback is in the run's log
        return f"{type(error).__name__}: {error}"
    finally:
        sys.argv = saved
    return None


def one_line(message: str) -> str:
    """A multi-line error on one line: its problems (one per line after a heading ending in ':') joined by '; '."""
    lines = [" ".join(line.split()) for line in message.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {'; '.join(lines[1:])}"
    return " ".join(lines)


def run_benchmark(name: str, overrides: Sequence[str], folder: Path) -> Outcome:
    """One benchmark of the field in ``folder``: skipped, reused, refused, or run (resumed). An override its
    config has no key for, or a group option that does not exist, fails it."""
    from hydra.errors import HydraException

    from rpbench.cli.overrides import unknown_key_problems

    args = [*overrides, f"hydra.run.dir={folder}"]
    problems = unknown_key_problems(overrides)
    if problems:
        return Outcome(name, "failed", "; ".join(problems), folder)
    try:
        spec = composed_run(overrides, folder)
    except HydraException as error:
        return Outcome(name, "failed", one_line(str(error)), folder)
    except RpbenchError as error:
        return Outcome(name, "skipped", f"not configured: {one_line(str(error))}", folder)
    state, why = earlier(folder, spec)
    if state == "finished":
        return Outcome(name, "finished", f"reused ({why})", folder)
    if state == "other":
        return Outcome(name, "failed", f"its folder holds a run of other settings, not reused ({why})", folder)
    print(f"field: {name}: {'resuming' if state == 'killed' else 'running'} in {folder}", flush=True)
    failure = launch(args)
    if failure is None and (folder / "metrics.json").is_file():
        results = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        failure = results.get("failed")
    if failure is None and not (folder / "metrics.json").is_file():
        failure = "no metrics.json written"
    if failure is not None:
        error = folder / "error.txt"
        detail = error.read_text(encoding="utf-8").strip() if error.is_file() else ""
        return Outcome(name, "failed", "; ".join(filter(None, [failure, detail])), folder)
    return Outcome(name, "resumed" if state == "killed" else "ran", why, folder)


def composed_value(overrides: Sequence[str], key: str) -> str:
    """The value of ``key`` (``model.name``...) in the config ``rpbench eval <overrides>`` composes."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return str(OmegaConf.select(compose("config", overrides=list(overrides)), key))
    finally:
        GlobalHydra.instance().clear()


def model_name(overrides: Sequence[str]) -> str:
    """The ``model.name`` ``rpbench eval <overrides>`` composes (the default parent folder is named by it)."""
    return composed_value(overrides, "model.name")


def is_judge_override(override: str) -> bool:
    key = override.lstrip("+~").split("=", 1)[0]
    return key == "judge" or key.startswith("judge.")


def without_judge(own: Sequence[str], overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """The field's ``overrides`` for one benchmark (``own``: its set entry): those of the judge left out when its
    evaluator has no judge protocol (``rpbench eval`` refuses a judge there); and the ones left out."""
    from rpbench.eval.benchmarks import BENCHMARKS

    if not any(is_judge_override(o) for o in overrides):
        return list(overrides), []
    evaluator = composed_value([*own, *(o for o in overrides if not is_judge_override(o))], "evaluator.name")
    if evaluator in BENCHMARKS and BENCHMARKS.get(evaluator).judged:
        return list(overrides), []
    return [o for o in overrides if not is_judge_override(o)], [o for o in overrides if is_judge_override(o)]


def run_field(chosen: Mapping[str, Sequence[str]], parent: Path, overrides: Sequence[str]) -> list[Outcome]:
    """Each benchmark of ``chosen`` (name -> its overrides), then ``overrides``, in ``parent/<name>``."""
    from rpbench.cli.commands import chosen as names_key

    base = [] if names_key(overrides, "objective") else ["objective=none"]
    outcomes = []
    for name, own in chosen.items():
        kept, dropped = without_judge([*base, *own], overrides)
        if dropped:
            print(f"field: {name}: its evaluator has no judge: {' '.join(dropped)} not passed to it", flush=True)
        outcome = run_benchmark(name, [*base, *own, *kept], parent / name)
        print(f"field: {name}: {outcome.status}{': ' + outcome.why if outcome.why else ''}", flush=True)
        outcomes.append(outcome)
    return outcomes


def summary(outcomes: Sequence[Outcome]) -> str:
    lines = ["| benchmark | status | why |", "| --- | --- | --- |"]
    lines += [f"| {o.benchmark} | {o.status} | {' '.join(o.why.replace('|', '/').split())} |" for o in outcomes]
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ran", "resumed", "finished", "skipped", "failed")}
    return "\n".join([", ".join(f"{n} {s}" for s, n in counts.items()), "", *lines]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from hydra.errors import HydraException

    from rpbench.leaderboard import Rows, leaderboard

    settings = field_settings()
    parser = argparse.ArgumentParser(
        prog="rpbench field",
        description="The field's benchmarks (conf/field.yaml) for one model, a run each in <out>/<benchmark>, "
        "then the leaderboard of <out>; docs/leaderboard.md.",
    )
    parser.add_argument(
        "--set", default=settings.default_set, choices=list(settings.sets), help="conf/field.yaml's set"
    )
    parser.add_argument("--out", type=Path, help=f"the parent folder (default: {settings.parent_root}/<set>/<model>)")
    parser.add_argument("--only", help="comma-separated benchmarks of the set to run (default: all)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (model=..., judge=...)")
    args = parser.parse_args(argv)
    field = dict(settings.sets[args.set])
    only = [n.strip() for n in args.only.split(",")] if args.only else list(field)
    unknown = [n for n in only if n not in field]
    if unknown:
        print(f"error: --only {', '.join(unknown)}: not in set {args.set} ({', '.join(field)})", file=sys.stderr)
        return 2
    try:
        parent = args.out or Path(settings.parent_root) / args.set / model_name(args.overrides)
    except HydraException as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    outcomes = run_field({n: field[n] for n in only}, parent, args.overrides)
    parent.mkdir(parents=True, exist_ok=True)
    (parent / "field.md").write_text(summary(outcomes), encoding="utf-8")
    print(summary(outcomes), flush=True)
    written = any((parent / o.benchmark).is_dir() for o in outcomes)
    board = leaderboard([parent], parent, Rows(with_short=True)) if written else None
    if board is not None:  # its table, up to the sections below it
        print(board.read_text(encoding="utf-8").split("\n## ", 1)[0], flush=True)
    else:
        print(f"error: no benchmark of set {args.set} has a result in {parent}", file=sys.stderr)
        return 1
    return 1 if any(o.status == "failed" for o in outcomes) else 0
