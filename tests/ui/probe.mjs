// The chaos harness's browser probe: a headless Chromium signed in once at
// the identity provider, then, one step every --period-ms (3 s), a pseudonym
// created through the web UI behind the load balancer and, at the next
// step, looked up: one form submitted, one full navigation, per step. Each
// step is a JSON line (the harness's `StepRecord`): when it began, whether
// it worked, how long it took, whether the browser was sent back to the
// sign-in.
//
// A failed create is submitted again with the same original at the next
// step (a user pressing the button again), so a result that went missing
// shows up as a wrong or absent one, not as a new subject. Right after a
// failed create the last pseudonym created is looked up: as the API's
// availability counts its reads, the UI's does too (a database that refuses
// writes can still answer a lookup). While steps fail they come every
// --recovery-ms (half the period), one a tick (creates and lookups by
// turns once lookups fail too): a recovery is seen twice as soon, at about
// the cost per second of the steady state.
//
// The browser is Chromium's headless shell (Debian's chromium-headless-shell):
// the same engine as the desktop chromium without its browser layer, about
// 30 % less CPU per step (docs/performance.md).
//
//   node probe.mjs --base URL --namespace NS --user NAME --seconds N --seed HEX --out FILE
//                  [--period-ms 3000] [--recovery-ms 1500] [--browser /usr/bin/chromium-headless-shell]
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

const { values: args } = parseArgs({
  options: {
    base: { type: "string" },
    namespace: { type: "string" },
    user: { type: "string", default: "admin" },
    seconds: { type: "string" },
    seed: { type: "string", default: "0" },
    "period-ms": { type: "string", default: "3000" },
    "recovery-ms": { type: "string" },
    browser: { type: "string", default: "/usr/bin/chromium-headless-shell" },
    out: { type: "string" },
  },
});
for (const k of ["base", "namespace", "seconds", "out"]) {
  if (!args[k]) {
    console.error(`probe: --${k} is required`);
    process.exit(2);
  }
}
const base = args.base.replace(/\/$/, "");
const seconds = Number(args.seconds);
if (!Number.isFinite(seconds) || seconds < 1) {
  console.error(`probe: --seconds must be a positive number, got ${args.seconds}`);
  process.exit(2);
}
if (!existsSync(args.browser)) {
  console.error(`probe: no browser at --browser ${args.browser} (apt-get install chromium-headless-shell)`);
  process.exit(2);
}
/** One step (one form submitted: one full navigation) per period. Each costs
 * the headless shell about 0.17 CPU seconds on the 2-core machine the harness
 * runs on (the desktop chromium 0.24; more under a chaos run's load); a
 * create and a lookup every second took 18 % of that machine, one step every
 * 3 s about 3 % (docs/performance.md). */
const period = Number(args["period-ms"]);
if (!Number.isFinite(period) || period < 100) {
  console.error(`probe: --period-ms must be at least 100, got ${args["period-ms"]}`);
  process.exit(2);
}
/** The period while steps fail: how soon a recovery is seen. */
const recovery = Number(args["recovery-ms"] ?? period / 2);
if (!Number.isFinite(recovery) || recovery < 100 || recovery > period) {
  console.error(`probe: --recovery-ms must be from 100 to --period-ms, got ${args["recovery-ms"]}`);
  process.exit(2);
}
const page_url = `${base}/ui/namespaces/${encodeURIComponent(args.namespace)}/pseudonyms`;
/** How long one step may take before it counts as failed: a little over the
 * pages' own deadline (5 s), so a page's "try again" is seen rather than cut off. */
const STEP_TIMEOUT_MS = 8_000;

writeFileSync(args.out, "");
const record = (r) => appendFileSync(args.out, `${JSON.stringify(r)}\n`);

const browser = await chromium.launch({
  executablePath: args.browser,
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const context = await browser.newContext();
let page = await context.newPage();
page.setDefaultTimeout(STEP_TIMEOUT_MS);

/** After a failed step: a fresh tab in the same browser (same session), so a
 * navigation still under way cannot hold up or interrupt the next step. */
async function freshPage() {
  await page.close().catch(() => {});
  page = await context.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
}

/** Whether the browser is at the identity provider (or our sign-in), not a page of the UI. */
const atSignIn = () => !page.url().startsWith(`${base}/ui/`) || page.url().includes("/ui/authentication/");

/** Signs in at the provider: its login form (and a consent, if it asks). */
async function signIn() {
  await page.goto(`${base}/ui/authentication/login?returnUrl=${encodeURIComponent(new URL(page_url).pathname)}`);
  for (let i = 0; i < 6 && atSignIn(); i++) {
    const login = page.locator("input[name=login], input[name=username]");
    if (await login.count()) await login.first().fill(args.user);
    const password = page.locator("input[type=password]");
    if (await password.count()) await password.first().fill("test");
    await Promise.all([
      page.waitForLoadState("load"),
      page.locator("button[type=submit], input[type=submit]").first().click(),
    ]);
  }
  if (atSignIn()) throw new Error(`still at ${page.url()} after signing in`);
}

/** Fills `field`, presses `button`, and answers the page's result or its alert. */
async function submit(field, value, button) {
  if (!(await page.locator(`#${field}`).count()) || atSignIn()) {
    const loaded = await page.goto(page_url);
    if (atSignIn()) return { signedOut: true, error: "sent to sign in" };
    // The balancer's own answer (no replica ready) or an error page: the
    // form is not there, and waiting for it would only hide when it returns.
    if (!loaded || !loaded.ok() || !(await page.locator(`#${field}`).count())) {
      return { error: `HTTP ${loaded ? loaded.status() : 0} for the form's page` };
    }
  }
  if (atSignIn()) return { signedOut: true, error: "sent to sign in" };
  await page.locator(`#${field}`).fill(value);
  const response = await Promise.all([
    page.waitForNavigation({ waitUntil: "load" }),
    page.getByRole("button", { name: button, exact: true }).click(),
  ]).then(([r]) => r);
  if (atSignIn()) return { signedOut: true, error: "sent to sign in" };
  const status = response ? response.status() : 0;
  const result = page.locator("output#result");
  if (status === 200 && (await result.count())) return { text: (await result.innerText()).trim() };
  const alert = page.locator("[role=alert]");
  const why = (await alert.count()) ? (await alert.first().innerText()).trim() : "";
  return { error: `HTTP ${status}${why ? `: ${why.slice(0, 200)}` : ""}` };
}

async function step(kind, body) {
  const t = Date.now() / 1000;
  const started = performance.now();
  let outcome;
  try {
    outcome = await body();
  } catch (e) {
    outcome = { error: String(e.message || e).split("\n")[0].slice(0, 200) };
  }
  const r = {
    t, step: kind, ok: !outcome.error && !outcome.signedOut,
    ms: performance.now() - started, signed_out: !!outcome.signedOut,
    error: outcome.error || "", ...outcome.fields,
  };
  record(r);
  // A step cut off by its timeout may leave its navigation under way; one
  // answered (a "try again" page) leaves the page, forms and all, usable.
  if (!r.ok && !r.signed_out && /timeout/i.test(r.error)) await freshPage();
  return { ...outcome, ok: r.ok };
}

const signedIn = await step("sign-in", async () => { await signIn(); return {}; });
if (!signedIn.ok) {
  console.error(`probe: sign-in failed: ${signedIn.error}`);
  await browser.close();
  process.exit(1);
}
const end = Date.now() + seconds * 1000;
let k = 0;
let pending = null;
let last = null;
/** Whether the next tick looks up what the last one created. */
let lookupNext = false;
const lookup = (original, pseudonym) => step("lookup", async () => {
  const r = await submit("pseudonym", pseudonym, "Look up");
  return { ...r, fields: { original, pseudonym, answered: r.text || "" } };
});
/** Whether the last step failed: the next comes a recovery period later. */
let failing = false;
/** Whether the last lookup worked: a failed create is then followed by a
 * lookup at once (reads may still work), else by one a step later. */
let readsOk = true;
const lookupLast = async () => {
  readsOk = (await lookup(last.original, last.pseudonym)).ok;
  failing = !readsOk;
};
while (Date.now() < end) {
  const tick = Date.now();
  if (lookupNext && last) {
    lookupNext = false;
    await lookupLast();
  } else {
    const original = pending ?? `ui-${args.seed}-${k++}`;
    const created = await step("create", async () => {
      const r = await submit("original", original, "Create pseudonym");
      return { ...r, fields: { original, pseudonym: r.text || "" } };
    });
    failing = !created.ok;
    if (created.ok) {
      pending = null;
      last = { original, pseudonym: created.text };
      lookupNext = true;
    } else {
      // Reads count while writes fail, as the API's do: the last pseudonym
      // is looked up at once while lookups work, else at the next step.
      pending = original;
      if (last && readsOk) await lookupLast();
      else lookupNext = true;
    }
  }
  const wait = (failing ? recovery : period) - (Date.now() - tick);
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
}
await browser.close();
