"""Evaluations: datasets, scorers (activities ``eval.score`` and ``eval.judge``), the report."""
