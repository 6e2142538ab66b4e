// The run's checks: one line each (ok, FAILED, or SKIPPED when a check it
// needs failed: not run is not passed), a screenshot on failure, and the
// count scripts/ui-test.sh and CI read ("e2e: N passed, M failed, K skipped").
import { join } from "node:path";

export class Checks {
  passed = 0;
  failed = [];
  skipped = [];
  /** The names of the checks that failed or were skipped. */
  broken = new Set();

  constructor(artifacts, currentPage) {
    this.artifacts = artifacts;
    this.currentPage = currentPage;
  }

  /** Runs `body` as the check `name`, unless one of `needs` did not pass. */
  async run(name, body, needs = []) {
    const missing = needs.filter((n) => this.broken.has(n));
    if (missing.length) {
      this.skipped.push(name);
      this.broken.add(name);
      console.log(`SKIPPED - ${name} (needs: ${missing.join(", ")})`);
      return;
    }
    const started = Date.now();
    try {
      await body();
      this.passed++;
      console.log(`ok - ${name} (${Date.now() - started} ms)`);
    } catch (e) {
      this.failed.push(name);
      this.broken.add(name);
      console.log(`FAILED - ${name}: ${String(e?.message ?? e).split("\n").slice(0, 3).join(" / ")}`);
      await this.screenshot(`failed-${name}`);
    }
  }

  async screenshot(label) {
    const page = this.currentPage();
    if (!page || page.isClosed()) return;
    const file = join(this.artifacts, `${label.replace(/[^\w]+/g, "-").replace(/^-|-$/g, "").slice(0, 100)}.png`);
    await page.screenshot({ path: file, fullPage: true }).catch(() => {});
  }

  summary() {
    return `e2e: ${this.passed} passed, ${this.failed.length} failed, ${this.skipped.length} skipped`;
  }

  get ok() {
    return this.failed.length === 0 && this.skipped.length === 0 && this.passed > 0;
  }
}

export function expect(ok, why) {
  if (!ok) throw new Error(typeof why === "function" ? why() : why);
}
