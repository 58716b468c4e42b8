"""RoleMRC-style data synthesis (Lu et al. 2025, section 3): personas -> seven-part role profiles -> most and
least relevant MRC triplets (sentence-transformers embeddings, faiss inner-product index) -> dialogues in the
categories and proportions of the paper's Table 2, written as RoleMRC SFT, pair and test files.

Entry point: ``python run.py task=synthesize synth=rolemrc judge=...`` (``rpbench.synth.run.synthesize``).
Each stage writes its own JSONL in ``synth.out_dir`` and resumes from it; generator replies are cached by the
judge client, so a re-run makes no requests.
"""
