"""``evaluator=shift``: how far the splits of one's data are apart (``generalization.data_shift``), before
training and without a model: the files of ``evaluator.splits`` (null: every ``data.files`` entry set), each
read as test records with the data config's reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from rpbench.data.errors import ConfigError
from rpbench.data.prepare import read_split
from rpbench.eval.benchmarks.base import BENCHMARKS, Benchmark
from rpbench.eval.generalization.data_shift import shift_section, split_shift
from rpbench.eval.generalization.embed import load_text_embedder


def split_files(cfg: DictConfig) -> dict[str, str]:
    named = cfg.evaluator.splits
    chosen = OmegaConf.to_container(named) if named is not None else dict(cfg.data.files)
    return {str(name): str(path) for name, path in chosen.items() if path is not None}


class Shift(Benchmark):
    reads_records = False  # reads every split itself
    needs_model = False

    def problems(self, cfg: DictConfig) -> list[str]:
        files = split_files(cfg)
        if len(files) < 2:
            return [f"evaluator=shift compares two or more splits; got {sorted(files) or 'none'} (set evaluator.splits "
                    "or data.files.<split>)"]  # fmt: skip
        return []

    def from_files(self, cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
        files = split_files(cfg)
        data = cfg.data.copy()
        with open_dict(data):
            data.files = files
        splits, counts = {}, {}
        for name in files:
            try:
                result = read_split(data, "test", name)
            except FileNotFoundError as error:
                raise ConfigError(f"evaluator=shift, split {name}: {error}") from error
            splits[name], counts[name] = result.examples, {"read": len(result.examples), "skipped": len(result.skipped)}
        g = cfg.evaluator.generalization
        embedder = load_text_embedder(
            g.encoder, int(g.layer), int(g.max_length), str(g.pooling), bool(g.encoder_fallback)
        )
        found = {**split_shift(splits, embedder, str(g.weighting)), "read": counts}
        return {"shift": found, "report_sections": [shift_section(found)]}


BENCHMARKS.register("shift")(Shift())
