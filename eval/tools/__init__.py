"""Generators and one-off tools: sample media, speech sets, benchmark corpora, ablation runners and the GPU script.

The library (``mmtok.eval``: metrics, extractors, ASR, judge, suites and runs) imports none of them.
"""
