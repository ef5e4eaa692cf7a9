"""Fixtures of the graph-pass tests: a fresh random generator per test, its seed shown when a test fails."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # woq_models.py (fixture model builders)


@pytest.fixture
def rng(request):
    seed = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    print(f"random seed: {seed}")  # shown by pytest for failing tests
    return np.random.default_rng(seed)
