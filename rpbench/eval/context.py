"""What the evaluation stage receives: its own typed settings and the plain objects of the stages before.

``EvalContext`` is the one argument of every ``Benchmark`` hook (rpbench/eval/benchmarks/base.py): the
benchmark's ``evaluator`` settings (typed, parsed once at startup), the judge's settings, the data and
model settings evaluation reads (image folder, prompt lengths, chat template), the prompt source, the
model and tokenizer (None when an endpoint generates), the test records, the run folder and name, and the logger.
The local judge server (``judge=local``) is handed in by the pipeline; a hook opens its judge with
``ctx.open_client()`` (``evaluator=conversation`` serves its ``simulator.server`` with it too).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from rpbench.core.typed import Settings
from rpbench.data.records import EvalExample
from rpbench.data.settings import DataSettings
from rpbench.eval.provenance import model_identity
from rpbench.models.settings import ModelSettings
from rpbench.scoring.chat.client import ChatClient, EndpointSettings, LocalServer, open_client


@dataclass(frozen=True)
class EvalContext:
    settings: Settings  # the benchmark's typed ``evaluator`` settings
    judge: EndpointSettings | None  # the judge's typed settings (``TrainEvalRun.judge``); None: judge=none
    data: DataSettings  # the run's data settings (image folder, prompt lengths, files)
    model_config: ModelSettings  # the evaluated model's settings (chat template, family)
    prompts_source: str | None  # a clone of the authors' repository to read their prompts from (None: rpbench's)
    model: Any
    tokenizer: Any
    examples: Sequence[EvalExample]
    out_dir: Path
    run_name: str  # titles the run's plots
    local_judge_server: LocalServer | None  # starts the judge=local server (rpbench.serve.running.local_judge)
    logger: Any = None

    @cached_property
    def model_identity(self) -> dict[str, Any]:
        """The evaluated model's identity (its weights' digest included), computed once per context: what its
        evaluation files are resumed under (``rpbench.eval.provenance``)."""
        return model_identity(self.model, self.tokenizer)

    @property
    def image_root(self) -> Path | None:
        return self.data.image_root

    def open_client(self, judge: EndpointSettings | None = None) -> AbstractContextManager[ChatClient]:
        """A client for ``judge`` (default: the run's judge), a local one served by the handed-in server."""
        return open_client(self.judge if judge is None else judge, self.local_judge_server)

    def into(self, out_dir: Path) -> EvalContext:
        """The same evaluation written into another folder (a probe's restrained re-evaluation)."""
        return replace(self, out_dir=Path(out_dir))
