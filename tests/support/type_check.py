"""mypy run on a path, as the console's contract tests run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_mypy(target: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """mypy on `target` from the repository's root (its imports followed silently, a missing
    stub not an error), with its cache in `cache`."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            str(target),
            "--follow-imports=silent",
            "--ignore-missing-imports",
            f"--cache-dir={cache}",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO_ROOT,
    )
