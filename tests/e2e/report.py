"""The step report both Python clients print: one PASS/FAIL line per step and a closing
`N passed, M failed` line the Rust tests read."""

from __future__ import annotations

import time


class Report:
    """Counts steps; a failed step is recorded and ends the run (later steps depend on it)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.passed = 0
        self.failed = 0
        self.started = time.monotonic()

    def ok(self, step: str, detail: str = "") -> None:
        self.passed += 1
        elapsed = time.monotonic() - self.started
        print(f"PASS {self.label} {step} ({elapsed:.2f} s){': ' + detail if detail else ''}", flush=True)

    def fail(self, step: str, detail: str) -> None:
        self.failed += 1
        print(f"FAIL {self.label} {step}: {detail}", flush=True)

    def check(self, step: str, condition: bool, detail: str) -> None:
        if condition:
            self.ok(step)
        else:
            self.fail(step, detail)
            raise StepFailed(step)


class StepFailed(Exception):
    pass
