"""Fusion sweep benchmark: see run.py."""
