"""The Python API: the README's example, run as a user runs it (a script whose dataset builder
is defined in the script itself), returns the ranking MLflow holds."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from mlflow import MlflowClient

from advisor.api import as_config
from advisor.errors import UserError

pytestmark = pytest.mark.integration


def readme_example() -> str:
    text = (ROOT / "docs" / "python-api.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_readme_example_returns_what_mlflow_holds(tmp_path):
    shutil.copy(ROOT / "configs" / "cnn.py", tmp_path / "cnn.py")
    (tmp_path / "example.py").write_text(readme_example())
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    printed = [line.split() for line in result.stdout.splitlines() if re.match(r"^\d+ ", line)]
    assert printed and printed[0][:2] == ["1", "dataloader"] and printed[0][3] == "True", result.stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for rank, recipes, speedup, verified, run_id in printed:
        run = client.get_run(run_id)
        assert run.data.tags["recipe"] == recipes and run.data.metrics["rank"] == int(rank)
        assert f"{run.data.metrics['speedup']:.2f}x" == speedup and run.data.tags["verified"] == verified.lower()


def test_mapping_configs_are_validated_like_files(tmp_path):
    config = as_config({"name": "m", "workload": {"model": len, "dataset": "x.py:build"}}, root=tmp_path)
    assert config.workload.model is len and config.root == tmp_path.resolve()
    with pytest.raises(UserError, match=r"workload.dataset: expected 'module:callable'"):
        as_config({"name": "m", "workload": {"model": len, "dataset": 3}}, root=tmp_path)
    with pytest.raises(UserError, match=r"workload.optimizer: expected a mapping with a name, or a builder"):
        as_config({"name": "m", "workload": {"model": len, "dataset": len, "optimizer": 5}}, root=tmp_path)
