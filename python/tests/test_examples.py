"""The Python examples (examples/python/) run as their READMEs say, against the test cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("example", ["store.py", "transfer.py", "kv_connector.py"])
def test_example_runs(cluster, example):
    out = subprocess.run([sys.executable, str(EXAMPLES / example), "--master", cluster.address]
                         if example != "transfer.py" else [sys.executable, str(EXAMPLES / example)],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1].startswith("ok:"), out.stdout
