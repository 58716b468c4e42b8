"""``evaluator=shift``: how far the splits of one's data are apart (``generalization.split_distance``), before
training and without a model: the files of ``evaluator.splits`` (null: every ``data.files`` entry set), each
read as test records with the data config's reader."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rpbench.core.errors import ConfigError
from rpbench.data.prepare import read_split
from rpbench.data.settings import DataFiles, DataSettings
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark
from rpbench.eval.benchmarks.rpgbench.evaluator import RPGBenchSettings, encoder_problems
from rpbench.eval.context import EvalContext
from rpbench.eval.generalization.embed import load_text_embedder
from rpbench.eval.generalization.split_distance import OVERALL, shift_section, split_shift
from rpbench.scoring.chat.client import EndpointSettings


def split_files(named: Mapping[str, str] | None, data_files: DataFiles) -> dict[str, Any]:
    """``evaluator.splits`` (split name -> file), or every ``data.files`` entry that is set."""
    chosen = named if named is not None else data_files
    return {name: path for name, path in chosen.items() if path is not None}


@dataclass(frozen=True, kw_only=True)
class ShiftSettings(RPGBenchSettings):
    """conf/evaluator/shift.yaml: the R-EMID evaluator's encoder settings and the splits compared."""

    splits: Mapping[str, str] | None  # split name -> file (null: the data config's files)

    needs_metrics = False


class Shift(Benchmark):
    reads_records = False  # reads every split itself
    needs_model = False
    settings_class = ShiftSettings
    no_headline = "it measures how far data splits are apart; no model is scored"

    def summary_lines(self, results: Mapping[str, Any]) -> list[str]:
        """Each pair of splits' JSD per input part over all records (report.md has them per subset)."""
        found = results["shift"]
        return [
            f"JSD {pair}, all records ({found['weighting']} weighting): "
            + ", ".join(f"{part} {_jsd(by_part['jsd'])}" for part, by_part in subsets[OVERALL].items())
            for pair, subsets in found["pairs"].items()
        ]

    def problems(self, settings: ShiftSettings, data: DataSettings, judge: EndpointSettings | None) -> list[str]:
        files = split_files(settings.splits, data.files)
        if len(files) < 2:
            return [f"evaluator=shift compares two or more splits; got {sorted(files) or 'none'} (set evaluator.splits "
                    "or data.files.<split>)"]  # fmt: skip
        return encoder_problems(settings.generalization)

    def from_files(self, ctx: EvalContext) -> dict[str, Any]:
        files = split_files(ctx.settings.splits, ctx.data.files)
        data = ctx.data.with_files(files)
        splits, counts = {}, {}
        for name in files:
            try:
                result = read_split(data, "test", name)
            except FileNotFoundError as error:
                raise ConfigError(f"evaluator=shift, split {name}: {error}") from error
            splits[name], counts[name] = result.examples, {"read": len(result.examples), "skipped": len(result.skipped)}
        g = ctx.settings.generalization
        embedder = load_text_embedder(g.encoder, g.layer, g.max_length, g.pooling, g.encoder_fallback)
        found = {**split_shift(splits, embedder, g.weighting), "read": counts}
        return {"shift": found, "report_sections": [shift_section(found)]}


def _jsd(value: float | None) -> str:
    return "–" if value is None else f"{round(value, 4) + 0.0:.4f}"  # + 0.0: a rounding error is no "-0.0000"


BENCHMARKS.register("shift")(Shift())
