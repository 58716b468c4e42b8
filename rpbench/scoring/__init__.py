"""Scoring building blocks shared by training rewards, evaluation and probes: text metrics, the
LLM judge (client, parsers, cache, rubrics) and how scores are printed."""
