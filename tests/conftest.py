"""Shared test setup: make the checkout importable when running pytest without installing."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
