"""Evaluation tooling (a face): `fanout eval` on the obsidian-help benchmark (evaluate.py), the matrix of
modes and models (matrix.py), scoring runs (score_runs.py), bootstrap intervals, reports and the benchmark
loader (bench_data.py).

May import fanout.api and below, and fanout.exec.progress.
"""
