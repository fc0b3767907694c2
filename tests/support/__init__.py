"""Helpers shared by test files (pytest runs with --import-mode=importlib, so test files cannot
import each other; `pythonpath = ["tests"]` in pyproject.toml makes this package importable)."""
