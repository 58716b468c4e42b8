"""Scoring building blocks shared by training rewards, evaluation and probes: text metrics, the chat client
(``chat``), the LLM judge's rubrics and parsers (``judge``), the reward-model scorer and how scores are printed.

``chat.client`` is rpbench's one OpenAI-compatible client: judging, the user simulator, synthesis and
endpoint generation use it. Scoring never starts a server itself: a ``judge=local`` server is handed in
by the caller (``open_client(cfg, local_server)``; the pipeline and run.py hand in
``rpbench.serve.running.local_judge``).
"""

from rpbench.core.registry import import_modules

import_modules(__name__, __path__)  # every metric file registers itself (metrics.METRICS)
