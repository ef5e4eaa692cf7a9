"""Fixtures of the kernel-wrapper tests: trt_woq importable from a checkout, the library if one is built."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
try:
    import trt_woq  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))


def find_built_library() -> Path | None:
    """$TRT_WOQ_KERNELS_PATH, the installed copy, or a CMake build folder of this checkout; None if none."""
    from trt_woq import _libs, kernels

    try:
        return _libs.find_library(kernels.LIBRARY_NAME, kernels.PATH_ENV)
    except _libs.LibraryNotFoundError:
        pass
    for cand in sorted(ROOT.glob("build*/**/" + kernels.LIBRARY_NAME)):
        return cand
    return None


@pytest.fixture
def built_library() -> Path:
    path = find_built_library()
    if path is None:
        pytest.skip("libtrt_woq_kernels.so not built (cmake --build build --target trt_woq_kernels, or set "
                    "TRT_WOQ_KERNELS_PATH)")
    return path


@pytest.fixture
def rng(request):
    import numpy as np

    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)
