"""Locating the native libraries that `pip install .` puts in trt_woq/lib (or a CMake build folder)."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_LIB_DIR = Path(__file__).resolve().parent / "lib"


class LibraryNotFoundError(RuntimeError):
    """The native library is not installed where expected; the message says how to provide it."""


def find_library(file_name: str, env_var: str) -> Path:
    """The path of ``file_name``: ``$env_var`` if set (must exist), else the copy installed in the package."""
    override = os.environ.get(env_var)
    if override:
        path = Path(override)
        if not path.is_file():
            raise LibraryNotFoundError(f"{env_var}={override}: no such file")
        return path
    path = _PACKAGE_LIB_DIR / file_name
    if not path.is_file():
        raise LibraryNotFoundError(
            f"{file_name} is not installed in {_PACKAGE_LIB_DIR} (it is built by `pip install .` when nvcc is "
            f"present); set {env_var} to a built copy")
    return path
