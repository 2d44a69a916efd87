"""Runs a workload under a plan in a fresh child process with a time limit.

A crash, an out-of-memory or a hang becomes a failed `Measurement` with its reason; the parent
carries on. A fresh process per run also makes each run's peak memory honest.
"""

from advisor.harness.runner import WorkloadInvalid, run_measurement

__all__ = ["WorkloadInvalid", "run_measurement"]
