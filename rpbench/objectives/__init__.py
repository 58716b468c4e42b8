"""Training objectives: pure loss and reward functions, and one registered LightningModule per objective."""

from rpbench.objectives import dpo, grpo, sft  # noqa: F401  (each registers its objective)
