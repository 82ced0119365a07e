"""Adapters: turn the output files of serving-engine benchmarks (SGLang, vLLM,
lm-evaluation-harness) into `parallax.results/1` documents. `registry` names them."""
