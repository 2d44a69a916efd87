"""Per-child memory cgroups: used only in a delegated cgroup v2 subtree, never elsewhere."""

import os

import pytest

from advisor.harness import cgroups, run_measurement
from advisor.kinds import baseline_plan, load_config


def fake_host(tmp_path, proc_lines: str, controllers: str = "cpu memory pids", delegate: bool = True):
    proc = tmp_path / "cgroup"
    proc.write_text(proc_lines)
    group = tmp_path / "mnt" / "user.slice" / "run.scope"
    group.mkdir(parents=True)
    (group / "cgroup.controllers").write_text(controllers)
    if delegate:
        try:
            os.setxattr(group, "user.delegate", b"1")
        except OSError as exc:
            pytest.skip(f"this file system keeps no user xattrs: {exc}")
    return proc, tmp_path / "mnt", group


def test_a_delegated_v2_subtree_with_memory_is_found(tmp_path):
    proc, mount, group = fake_host(tmp_path, "0::/user.slice/run.scope\n")
    assert cgroups.delegated_root(proc, mount) == group


@pytest.mark.parametrize("case", ["hybrid v1 host", "no memory controller", "not delegated", "switched off"])
def test_anything_else_is_left_alone(tmp_path, monkeypatch, case):
    lines = "4:memory:/x\n0::/user.slice/run.scope\n" if case == "hybrid v1 host" else "0::/user.slice/run.scope\n"
    proc, mount, _ = fake_host(tmp_path, lines, controllers="cpu pids" if case == "no memory controller" else "cpu memory",
                               delegate=case != "not delegated")
    if case == "switched off":
        monkeypatch.setenv("ADVISOR_CGROUPS", "off")
    assert cgroups.delegated_root(proc, mount) is None


@pytest.mark.integration
@pytest.mark.skipif(cgroups.delegated_root() is None, reason="no delegated cgroup v2 subtree on this host "
                    "(run under `systemd-run --user --scope -p Delegate=yes` to test the cgroup path)")
def test_the_kernel_enforces_the_budget_in_the_childs_own_group(tiny_config):
    config = load_config(tiny_config(workload={"model": "broken:growing_model"}))
    run = run_measurement(config, baseline_plan(config), "full", 4, 60, memory_limit_mb=300)
    assert not run.ok and run.reason.startswith("over the memory budget"), run.reason
    assert run.memory_source == cgroups.METHOD
    quiet = load_config(tiny_config())
    assert run_measurement(quiet, baseline_plan(quiet), "full", 4, 60, memory_limit_mb=300).ok
