"""Metrics (Fréchet distance, WER, LLM judge), batch evaluation runs and benchmarks."""
