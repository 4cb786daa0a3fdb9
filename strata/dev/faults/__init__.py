"""`strata faults`: fault-injection scenarios against the real local stack, with figures.

Each scenario is a module of this package with a ``run(ctx: FaultContext) -> FaultResult``; it
starts and kills real processes (`strata project`, `strata bind`, brokers, the API server...) and
checks what must hold afterwards. `strata faults` runs them and prints one table.

A check that cannot fail proves nothing, so every scenario's checker is a function of what was
observed that returns a ``Verdict``, and every scenario also hands that same checker at least one
deliberately broken copy of its observation (a record dropped, a bind duplicated, a checkpoint
lost, a watch event skipped): a **negative control**. A control the checker does not report
fails the scenario (``FaultResult.ok``), whatever the real run found.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from strata.log.config import Settings

# name -> module under strata.dev.faults; every module has run(ctx) -> FaultResult
SCENARIOS: dict[str, str] = {
    "projector-crash": "projector_crash",
    "binder-crash": "binder_crash",
    "watch-gaps": "watch_gaps",
    "poison": "poison",
    "kafka-sasl": "kafka_sasl",
    "rbac": "rbac",
    "load": "load",
    "broker-loss": "broker_loss",
    "rolling-restart": "rolling_restart",
    "binder-broker-loss": "binder_broker_loss",
    "retry-repause": "retry_repause",
}


@dataclass
class FaultContext:
    settings: Settings  # the local stack; a scenario makes its own topic prefix from it
    workdir: Path  # scratch space (databases, archives)
    quick: bool = False  # fewer runs, for the default test suite
    log: Callable[[str], None] = print


@dataclass
class Verdict:
    """What a checker found in one observed outcome: nothing at all when the outcome is right."""

    lost: int = 0
    duplicates: int = 0
    mismatches: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicates or self.mismatches or self.problems)

    def problem(self, text: str) -> Verdict:
        self.problems.append(text)
        return self


@dataclass
class FaultResult:
    scenario: str
    runs: int = 0
    passed: int = 0
    records_lost: int = 0
    duplicates: int = 0
    digest_mismatches: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    controls: dict[str, bool] = field(default_factory=dict)  # negative control -> did the checker see it

    @property
    def ok(self) -> bool:
        return (
            self.runs > 0
            and self.passed == self.runs
            and not (self.records_lost or self.duplicates or self.digest_mismatches)
            and bool(self.controls)
            and all(self.controls.values())
        )

    def count(self, verdict: Verdict, runs: int = 1) -> bool:
        """Add a real run's verdict: its findings to the totals, ``runs`` passed if it is clean."""
        self.runs += runs
        self.passed += runs if verdict.clean else 0
        self.records_lost += verdict.lost
        self.duplicates += verdict.duplicates
        self.digest_mismatches += verdict.mismatches
        self.notes.extend(verdict.problems)
        return verdict.clean

    def control(self, name: str, verdict: Verdict) -> None:
        """A negative control: ``verdict`` is the checker's on a deliberately broken outcome, and
        must report something. One that does not is noted and fails the scenario."""
        self.controls[name] = not verdict.clean
        if verdict.clean:
            self.notes.append(f"negative control {name!r} NOT detected: the check cannot fail")

    @property
    def controls_caught(self) -> str:
        return f"{sum(self.controls.values())}/{len(self.controls)}"


def scenario(name: str) -> Callable[[FaultContext], FaultResult]:
    if name not in SCENARIOS:
        raise KeyError(name)
    return importlib.import_module(f"strata.dev.faults.{SCENARIOS[name]}").run
