"""RPGBench generalization numerics (the R-EMID paper), with no pipeline wiring.

``rjsd``: representation JSD of embedding sets. ``embed``: texts -> unit sentence embeddings.
``shift``: per-field and output-marginal RJSD between an ID and a shifted split. ``emi``: sampled
CLUB arithmetic, EMI / EMID. ``scoring``: critic log-probs ℓ(y | x [, r]) on a causal LM, MI, EMI,
perplexity, Monte-Carlo entropy. ``bound``: Theorem 3.4's bound. ``convergence``: bound vs empirical
R-EMID on growing subsamples. ``correlation``: Pearson / Spearman against judge scores.
"""
