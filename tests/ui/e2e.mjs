// The admin UI end to end in a real browser (Debian's Chromium, driven by
// Playwright), signed in at a real OpenID provider (oidc-provider, provider.mjs),
// held to the contract of docs/ui.md: every flow with the mouse, the same
// flows by keyboard alone, an accessibility scan (axe-core) of every page, a
// value with markup shown as text, a reader's controls disabled, a session
// that outlives its replica and is accepted by another one sharing the key.
// What a page did is checked from outside it too, over the REST API with an
// admin token made in the database before vfps starts.
//
// Prints one line per check and "e2e: N passed, M failed, K skipped"; exits 1
// unless every check passed. Screenshots of every page and of every failure,
// and the processes' logs, in $VFPS_UI_ARTIFACTS (/tmp/vfps-ui-artifacts).
//
//   VFPS_BIN=target/debug/vfps node tests/ui/e2e.mjs
//
// Layout: lib/processes.mjs (provider, vfps, the API client), lib/browser.mjs
// (Chromium, the keyboard, sign-in, axe), lib/checks.mjs (the check runner);
// e2e/mouse.mjs, e2e/keyboard.mjs, e2e/pages.mjs, e2e/sessions.mjs (the
// scenarios); this file starts everything and runs them in order.
import { randomBytes } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Checks, expect } from "./lib/checks.mjs";
import { Keyboard, Watch, launch } from "./lib/browser.mjs";
import { Vfps, apiClient, freePort, startProvider } from "./lib/processes.mjs";
import * as mouse from "./e2e/mouse.mjs";
import * as keyboard from "./e2e/keyboard.mjs";
import * as pages from "./e2e/pages.mjs";
import * as sessions from "./e2e/sessions.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../..");
const bin = resolve(repo, process.env.VFPS_BIN || "target/debug/vfps");
const artifacts = resolve(process.env.VFPS_UI_ARTIFACTS || "/tmp/vfps-ui-artifacts");
if (!existsSync(bin)) {
  console.error(`e2e: no vfps binary at ${bin} (build it: cargo build -p vfps-server --bin vfps, or set VFPS_BIN)`);
  process.exit(2);
}
rmSync(artifacts, { recursive: true, force: true });
mkdirSync(artifacts, { recursive: true });
const work = mkdtempSync(join(tmpdir(), "vfps-ui-e2e-"));

const ports = { idp: await freePort(), http: await freePort(), grpc: await freePort(), metrics: await freePort() };
const base = `http://127.0.0.1:${ports.http}`;
const secret = randomBytes(24).toString("hex");
const sessionKey = randomBytes(32).toString("hex");
console.log(`e2e: vfps ${bin} at ${base}, provider on :${ports.idp}, work folder ${work}`);

const provider = await startProvider(work, { here, port: ports.idp, bases: [base], secret });
/** The settings every replica of this run shares (another replica differs only in its ports and file). */
const authEnv = {
  Authorization__IsEnabled: "true",
  Authorization__Authority: provider.issuer,
  Authorization__RequireHttpsMetadata: "false",
  Authorization__ClientId: "vfps-ui",
  Authorization__ClientSecret: secret,
  Authorization__AdminRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__Namespace: "*",
  Authorization__NamespaceRules__0__WriteRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__ReadRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__ReadRoles__1: "vfps-reader",
  Authorization__NamespaceRules__0__ReverseLookupRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__EraseRoles__0: "vfps-admin",
  VFPS_UI_SESSION_KEY: sessionKey,
  VFPS_TOKEN_CACHE_DURATION: "1s",
  // Every page after 3 s renews the session at the real provider (its
  // refresh token, the new ID token's roles): the whole run exercises it.
  VFPS_UI_ROLE_RECHECK_INTERVAL: "3s",
};
const vfps = new Vfps({ bin, dir: work, name: "vfps", ports, env: authEnv });
const apiToken = vfps.mintToken(["--name", "e2e-api", "--admin", "--grant", "*=read,write,reverse-lookup"]);
await vfps.start();

const browser = await launch();
const watch = new Watch();

/** What every scenario works with; `page` and `keys` change with each new browser session. */
const t = {
  here, repo, bin, work, artifacts, base, ports, secret, sessionKey, authEnv, provider, vfps, watch, expect,
  issuer: provider.issuer,
  api: apiClient(base, apiToken),
  /** Every original value the run typed or uploaded: none may show up in an address or a log. */
  originals: new Set(),
  /** What earlier checks found, for later ones (pseudonyms, namespaces). */
  found: {},
  context: undefined,
  page: undefined,
  keys: undefined,
  /** A fresh browser session (no cookies), as a new user would have. */
  async newSession() {
    await this.context?.close();
    this.context = await browser.newContext({ acceptDownloads: true });
    this.page = watch.attach(await this.context.newPage());
    this.keys = new Keyboard(this.page);
    return this.page;
  },
};
const checks = new Checks(artifacts, () => t.page);
t.run = checks.run.bind(checks);
t.screenshot = checks.screenshot.bind(checks);

await t.run("the run starts from an empty database, and the API token works", async () => {
  const listed = await t.api("GET", "/v1/namespaces");
  expect(listed.status === 200, `GET /v1/namespaces: HTTP ${listed.status} ${listed.text}`);
  expect((listed.json.namespaces ?? []).length === 0, `namespaces already there: ${listed.text}`);
});

try {
  await t.newSession();
  await mouse.scenarios(t);
  await pages.scenarios(t);
  await sessions.scenarios(t);
  await keyboard.scenarios(t);
  await sessions.afterwards(t);
} catch (e) {
  // A scenario's own checks catch their errors: this is the harness breaking.
  console.log(`FAILED - the harness itself: ${e.stack}`);
  checks.failed.push("the harness itself");
}

await browser.close();
await vfps.stop();
await provider.child.stop();
for (const log of ["vfps.log", "provider.log", "vfps-b.log", "vfps-c.log"]) {
  if (existsSync(join(work, log))) copyFileSync(join(work, log), join(artifacts, log));
}
console.log(checks.summary());
console.log(`e2e: screenshots and logs in ${artifacts}`);
if (checks.ok) rmSync(work, { recursive: true, force: true });
process.exit(checks.ok ? 0 : 1);
