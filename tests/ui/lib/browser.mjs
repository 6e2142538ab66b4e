// Debian's Chromium driven by Playwright, and what the tests do in it: every
// page watched (dialogs, addresses, Content-Security-Policy refusals), the
// keyboard alone (Tab, Enter, Space, typing), sign-in at the test provider,
// and axe-core injected as the page's policy allows.
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

export const CHROMIUM_ARGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

export function launch() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true, args: CHROMIUM_ARGS });
}

/**
 * What every page of a run showed: dialogs (a script that ran), every address
 * requested, and every policy refusal the console reported.
 */
export class Watch {
  dialogs = [];
  addresses = [];
  cspRefusals = [];
  /** While true, refusals are expected (the test provoking one), and counted apart. */
  expectingRefusal = false;
  expectedRefusals = 0;

  attach(page) {
    page.on("dialog", (d) => {
      this.dialogs.push(d.message());
      d.dismiss().catch(() => {});
    });
    page.on("request", (r) => this.addresses.push(r.url()));
    page.on("console", (m) => {
      if (!/Content Security Policy/i.test(m.text())) return;
      if (this.expectingRefusal) this.expectedRefusals++;
      else this.cspRefusals.push(`${page.url()}: ${m.text().slice(0, 300)}`);
    });
    page.setDefaultTimeout(10_000);
    return page;
  }
}

/** The keyboard alone: no mouse event reaches the page through these. */
export class Keyboard {
  /** Controls reached whose focus was not visible. */
  unseenFocus = [];
  /** The page of every control reached (so a check of them can tell it saw some). */
  reached = [];

  constructor(page) {
    this.page = page;
  }

  /** Tab (at most 100 presses, wrapping with Shift+Tab never) until `locator`'s element has the focus. */
  async tabTo(locator) {
    const target = await locator.elementHandle();
    for (let i = 0; i < 100; i++) {
      if (await this.page.evaluate((t) => document.activeElement === t, target)) {
        const seen = await this.page.evaluate((t) => {
          const s = getComputedStyle(t);
          return t.matches(":focus-visible") && ((s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== "none");
        }, target);
        this.reached.push(this.page.url());
        if (!seen) this.unseenFocus.push(`${this.page.url()}: ${await target.evaluate((t) => t.outerHTML.slice(0, 80))}`);
        return;
      }
      await this.page.keyboard.press("Tab");
    }
    throw new Error(`Tab never reached ${locator}`);
  }

  /** Tab to a field, select what it holds, type `text`. */
  async type(locator, text) {
    await this.tabTo(locator);
    await this.page.keyboard.press("Control+A");
    await this.page.keyboard.type(text);
  }

  /** Tab to a select, then arrow keys until the option labelled `label` is chosen. */
  async choose(locator, label) {
    await this.tabTo(locator);
    const labels = await locator.evaluate((s) => [...s.options].map((o) => o.label));
    const want = labels.findIndex((l) => l === label || (label instanceof RegExp && label.test(l)));
    if (want < 0) throw new Error(`no option ${label} in ${JSON.stringify(labels)}`);
    for (let i = 0; i < labels.length + 1; i++) {
      const at = await locator.evaluate((s) => s.selectedIndex);
      if (at === want) return;
      await this.page.keyboard.press(at < want ? "ArrowDown" : "ArrowUp");
    }
    throw new Error(`the arrow keys never chose ${label}`);
  }

  /** Tab to a control and press `key` (Enter or Space), waiting for the page it leads to. */
  async press(locator, key = "Enter") {
    await this.tabTo(locator);
    await Promise.all([this.page.waitForNavigation({ timeout: 10_000 }).catch(() => {}), this.page.keyboard.press(key)]);
    await this.page.waitForLoadState("load");
  }
}

/**
 * Signs `user` in from `start` (a page of the UI) through the provider's
 * sign-in page, by mouse or by keyboard. Answers the addresses the browser
 * was sent to on the way.
 */
export async function signIn(page, { start, user, issuer, keyboard }) {
  const trail = [];
  const onRequest = (r) => r.isNavigationRequest() && trail.push(r.url());
  page.on("request", onRequest);
  try {
    await page.goto(start);
    const login = page.getByLabel("Username");
    await login.waitFor({ timeout: 10_000 });
    if (!page.url().startsWith(issuer)) throw new Error(`the sign-in page is not the provider's: ${page.url()}`);
    if (keyboard) {
      await keyboard.type(login, user);
      await keyboard.press(page.getByRole("button", { name: "Sign in" }));
    } else {
      await login.fill(user);
      await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Sign in" }).click()]);
    }
    await page.waitForURL((u) => !u.href.startsWith(issuer) && !u.pathname.startsWith("/ui/authentication/"), { timeout: 10_000 });
    return trail;
  } finally {
    page.off("request", onRequest);
  }
}

/**
 * axe-core in the page. The UI's policy forbids inline script, so the usual
 * injection (a <script> element holding the source, as addScriptTag({path})
 * makes) must be refused; answers whether it was, then evaluates the source
 * through the DevTools protocol, which the page's policy does not govern.
 */
export async function injectAxe(page, watch, axePath) {
  watch.expectingRefusal = true;
  const before = watch.expectedRefusals;
  let tagWorked;
  try {
    await page.addScriptTag({ path: axePath }).catch(() => {});
    tagWorked = await page.evaluate(() => typeof window.axe === "object");
    // The console's report of the refusal may trail the injection a little.
    for (let i = 0; i < 20 && !tagWorked && watch.expectedRefusals === before; i++) await page.waitForTimeout(100);
  } finally {
    watch.expectingRefusal = false;
  }
  if (!tagWorked) await page.evaluate(readFileSync(axePath, "utf8"));
  return { refusedInline: !tagWorked, reported: watch.expectedRefusals > before };
}

/** axe's violations of impact serious or critical on the page as it is. */
export async function seriousViolations(page) {
  // axe's own default rule set: every rule it enables out of the box.
  const { violations } = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join("; ")}`);
}
