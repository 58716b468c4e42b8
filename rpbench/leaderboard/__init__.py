"""One leaderboard from many runs: ``python -m rpbench.leaderboard <run or sweep folders...> [--by ROWS] [--with-short]
[--out DIR]``.

Every folder holding a metrics.json (the folders given, or below them) is a run. A row is what ``--by`` names
(``ROWS``: the evaluated model and its objective by default, or that with the data or the seed, or each run
folder); a column group is a benchmark (``evaluator``), showing the first of the benchmark's declared
``headlines`` the run's results hold, with its 95% CI (from metrics.json, or a percentile bootstrap over the
run's scores.jsonl when metrics.json has none). A cell's identity is the headline, the judge (backend and model,
its endpoint and a served model's revision where recorded, each judge of an ensemble; for a conversation run, as
its metrics.json records them, also each judge's endpoint and prompt sha256), the prompts (sha256 over the
prompts' sha256 metrics.json records, ``eval.prompts``), the decoding (config.yaml's ``evaluator.generation``
less how generation runs), the test records' content hash (``records.test.records_sha256``) and the rpbench
version. Runs of one cell with one identity are seeds: the median run is shown (the lower one of an even count).
Runs of one cell with different identities are never combined (the cell is a conflict, naming which runs differ
in what and the ``--by`` that splits them), and a cell whose judge, prompts, decoding, data or headline differs
from its column's most common one is flagged and left out of that column's ranks: only like is ranked with
like. A re-judged conversation run (``evaluator.rejudge``) is in the row of the policy whose sessions it judged.
A missing cell is shown as missing. A run marked ``failed`` in its metrics.json (its results rest on nothing) is
skipped, with why. A short run (its metrics.json's ``short_run``; for a run written before that, a
``debug=<preset>`` Hydra recorded in its ``.hydra/hydra.yaml``, or ``trainer.fast_dev_run`` in its config.yaml) is
left out, counted and listed; ``--with-short`` shows it in a row of its own, never ranked.

The overall rank is the mean of a row's ranks over the benchmarks it is ranked in (1: best; ties share the
mean rank), with their spread (min-max); adjacent rows in that order are compared per benchmark by a paired
bootstrap on the records both runs scored (scores.jsonl ids).

Writes leaderboard.md (each cell keyed to a provenance footnote, [Pn]: its judge, prompts' sha256 and decoding),
leaderboard.csv (one row per cell, with identities, provenance and runs) and leaderboard.png (each benchmark's
headline per row with its CI).
"""

from rpbench.leaderboard.board import Rows, build
from rpbench.leaderboard.cli import leaderboard, main

__all__ = ["Rows", "build", "leaderboard", "main"]
