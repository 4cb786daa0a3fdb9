"""`strata faults`: fault-injection scenarios against the real local stack, with figures.

Each scenario is a module of this package with a ``run(ctx: FaultContext) -> FaultResult``; it
starts and kills real processes (`strata project`, `strata bind`, brokers, the API server...) and
checks what must hold afterwards. `strata faults` runs them and prints one table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from strata.config import Settings

# name -> module under strata.faults; every module has run(ctx) -> FaultResult
SCENARIOS: dict[str, str] = {
    "projector-crash": "projector_crash",
    "binder-crash": "binder_crash",
    "watch-gaps": "watch_gaps",
    "poison": "poison",
    "kafka-sasl": "kafka_sasl",
    "rbac": "rbac",
    "load": "load",
    "broker-loss": "broker_loss",
}


@dataclass
class FaultContext:
    settings: Settings  # the local stack; a scenario makes its own topic prefix from it
    workdir: Path  # scratch space (databases, archives)
    quick: bool = False  # fewer runs, for the default test suite
    log: Callable[[str], None] = print


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

    @property
    def ok(self) -> bool:
        return (
            self.runs > 0
            and self.passed == self.runs
            and not (self.records_lost or self.duplicates or self.digest_mismatches)
        )


def scenario(name: str) -> Callable[[FaultContext], FaultResult]:
    if name not in SCENARIOS:
        raise KeyError(name)
    return importlib.import_module(f"strata.faults.{SCENARIOS[name]}").run
