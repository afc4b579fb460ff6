// The step report both TypeScript clients print: one PASS/FAIL line per step and a closing
// `N passed, M failed` line the Rust tests read.

export class StepFailed extends Error {}

/** Counts steps; a failed check throws, since later steps depend on it. */
export class Report {
    constructor(label) {
        this.label = label;
        this.passed = 0;
        this.failed = 0;
        this.started = performance.now();
    }

    ok(step, detail = '') {
        this.passed += 1;
        const elapsed = ((performance.now() - this.started) / 1000).toFixed(2);
        console.log(`PASS ${this.label} ${step} (${elapsed} s)${detail ? ': ' + detail : ''}`);
    }

    fail(step, detail) {
        this.failed += 1;
        console.log(`FAIL ${this.label} ${step}: ${detail}`);
    }

    check(step, condition, detail) {
        if (!condition) {
            this.fail(step, typeof detail === 'function' ? detail() : detail);
            throw new StepFailed(step);
        }
        this.ok(step);
    }
}
