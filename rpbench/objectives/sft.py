"""Supervised fine-tuning: the mean NLL over every supervised token of the global batch (every assistant
turn of a sample, or its last only: ``SFTExample.supervise``)."""

from __future__ import annotations

from collections.abc import Sequence

from rpbench.data.chat import ChatRenderer
from rpbench.data.records import SFTExample
from rpbench.objectives.base import ObjectiveModule
from rpbench.objectives.registry import OBJECTIVES


@OBJECTIVES.register("sft")
class SFTModule(ObjectiveModule):
    data_split = "train"
    supports_packing = True
    record_types = (SFTExample,)

    @staticmethod
    def render(examples: Sequence[SFTExample], renderer: ChatRenderer) -> tuple[list[dict], list[str]]:
        """Rendered samples, and the ids of samples left with no supervised token (not trained). A sample
        supervised on its ``last`` turn only is rendered as a prompt and that one reply."""
        samples, empty = [], []
        for example in examples:
            if example.supervise == "last":
                rendered = renderer.render_completion(example.turns[:-1], example.turns[-1].content)
            else:
                rendered = renderer.render_conversation(example.turns)
            if rendered.n_supervised:
                samples.append({**rendered.as_sample(), "id": example.id, "turns": rendered.n_supervised_turns})
            else:
                empty.append(example.id)
        return samples, empty

    @staticmethod
    def supervised_turns(samples: Sequence[dict]) -> int:
        return sum(sample["turns"] for sample in samples)

    def training_step(self, batch, batch_idx):
        nll, tokens = self.evaluation_nll(batch)
        self.log("train/loss", nll.detach() / max(tokens, 1), prog_bar=True, rank_zero_only=True)
        return nll * batch["loss_scale"] * self.backward_factor
