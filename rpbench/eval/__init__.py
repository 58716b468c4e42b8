"""Evaluation: batched generation, reference metrics, aggregate statistics, judges and reports."""
