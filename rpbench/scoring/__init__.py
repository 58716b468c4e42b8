"""Scoring building blocks shared by training rewards, evaluation and probes: text metrics, the
LLM judge (client, parsers, cache, rubrics) and how scores are printed."""

from rpbench.registry import import_modules

import_modules(__name__, __path__)  # every metric file registers itself (metrics.METRICS)
