"""RPGBench generalization numerics: representation JSD, sampled-CLUB (R-)EMI / (R-)EMID with an LM critic,
Theorem 3.4's bound and its convergence, and correlations with judge scores. No pipeline wiring here."""
