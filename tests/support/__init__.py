"""Helpers the tests share (conftest.py keeps the fixtures): import them as `tests.support.<topic>`."""
