"""A sequence-classification reward model as a scorer: one scalar per (conversation, response).

Shared by training rewards (``objective.rewards`` entry ``reward_model``) and evaluators that score with a
reward model (e.g. CharacterEval's CharacterRM). Each response is appended to its conversation as the
assistant turn and rendered with the reward model's own chat template; the score is the model's single logit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class RewardModelScorer:
    """The scalar output of a one-label sequence-classification model, scored in batches of ``batch_size``."""

    def __init__(self, name_or_path: str, batch_size: int, dtype: str):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            name_or_path, dtype=getattr(torch, dtype)
        ).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"reward model {name_or_path!r} has {self.model.config.num_labels} labels, expected 1")
        self.batch_size = int(batch_size)

    def score(self, conversations: Sequence[Sequence[Mapping[str, Any]]], responses: Sequence[str]) -> list[float]:
        """One score per response, given the chat messages before it."""
        import torch

        texts = [
            self.tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": response}], tokenize=False)
            for messages, response in zip(conversations, responses, strict=True)
        ]
        scores: list[float] = []
        device = next(self.model.parameters()).device
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size], add_special_tokens=False, padding=True, return_tensors="pt"
            ).to(device)
            with torch.no_grad():
                scores += self.model(**batch).logits[:, 0].float().tolist()
        return scores
