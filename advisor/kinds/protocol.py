"""`Kind`, the interface every workload kind implements (its modules are registered once, on
their config section: `advisor.kinds.kind_of`). Typing only: nothing imports this at run time,
so it may name the types of every stage without closing a cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Union

if TYPE_CHECKING:
    from advisor.config import AdvisorConfig
    from advisor.evidence import Evidence
    from advisor.findings import Diagnosis, Rule
    from advisor.measure import Measurement
    from advisor.recipes import Context
    from advisor.verify import Envelope, NumericsResult


class Kind(Protocol):
    name: str
    recipe_family: str  # the recipes' `kinds` that apply to it: "train" or "pipeline"
    evidence_runs: tuple[tuple[str, str], ...]  # (mode, what it measures), in order
    fresh_children: bool  # children start a fresh interpreter rather than from the torch fork server
    strict_recipes: bool  # a recipe listed by name that cannot run is an error, not a skip
    per: str  # what one timed unit is called, for one-off costs paid back "after N steps"
    prunable: bool  # its measure takes a `watch` that hears the timed window's running objective
    preload: tuple[str, ...]  # modules its children import that the fork server can import once for all
    packages: tuple[str, ...]  # whose versions the fingerprint covers beyond Python's and torch's
    evidence_is_a_trial: bool  # its diagnosis's full run is measured as an uncapped trial of the baseline is

    def unit(self, config: "AdvisorConfig") -> str:
        """The unit of a run's objective value (`samples_per_s`): samples/s, rows/s, 1000 / p95 ms."""

    def baseline_plan(self, config: "AdvisorConfig", seen: Optional[dict] = None) -> dict:
        """What the user runs today; `seen`, what the baseline's runs saw, fills what the config cannot say."""

    def derive(self, evidence: "Evidence") -> dict:
        """The quantities the diagnosis reads, from the runs; a pure function."""

    def rules(self) -> tuple["Rule", ...]:
        """The diagnosis rules that apply."""

    def context(self, evidence: "Evidence", bottlenecks: tuple[str, ...], config: "AdvisorConfig") -> "Context":
        """What recipe selection knows about the job."""

    def measure(self, config: "AdvisorConfig", capped: bool, fresh: Union[bool, str] = False) -> Callable[[dict], "Measurement"]:
        """How one plan is measured: a full run in a fresh child; `capped`, held to the config's
        constraints (killed at the memory budget; for a service, infeasible over its p95 SLO);
        `fresh`, in a new interpreter rather than forked from the template process ("kept": a
        verification round's, `advisor.harness.kept`)."""

    def compare(self, candidate: "Measurement", reference: "Measurement", risk: str,
                config: "AdvisorConfig", envelope: Optional["Envelope"] = None) -> "NumericsResult":
        """Whether a candidate's results equal the reference's, under the risk's rules, within
        the job's rounding envelope where it has one."""

    def envelope(self, config: "AdvisorConfig", reference: "Measurement") -> Optional["Envelope"]:
        """How far rounding alone moves the reference's results (a training trajectory), or None."""

    def compared_runs(self, runs: list, reference_runs: list) -> tuple[list, list]:
        """The pairs of verification runs whose results are compared."""

    def seen(self, evidence: "Evidence") -> dict:
        """What the baseline's children saw (shapes, parameters, columns, hardware)."""

    def sources(self, config: "AdvisorConfig") -> dict[str, Any]:
        """The references whose source files the fingerprint covers, by config key."""

    def describe(self, evidence: "Evidence", diagnoses: list["Diagnosis"]) -> list[str]:
        """The body of `advisor diagnose`, in lines."""
