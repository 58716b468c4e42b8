"""Training objectives: pure loss and reward functions, and one LightningModule per objective."""
