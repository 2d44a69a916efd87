"""`advisor diagnose --json` on every reference workload names the planted bottleneck first."""

import json

import pytest

from conftest import ROOT, run_cli
from test_diagnose import PLANTED

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name, bottleneck", PLANTED.items())
def test_reference_diagnosis(name, bottleneck):
    result = run_cli("diagnose", str(ROOT / "configs" / f"{name}.yaml"), "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["bottleneck"] == bottleneck, json.dumps(payload["diagnoses"], indent=1)
    first = payload["diagnoses"][0]
    assert first["severity"] == "high"
    assert all({"metric", "value", "threshold"} <= set(f) for f in first["evidence"])
    assert payload["evidence"]["derived"]["ideal_samples_per_s"] > 0
    assert payload["evidence"]["runs"]["profile"]["operators"]["top"]
