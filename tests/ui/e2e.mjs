// The admin UI end to end in a real browser (Debian's Chromium, driven by
// Playwright), signed in at a real OpenID provider (oidc-provider): every
// flow with the mouse, the same flows by keyboard alone, an accessibility
// scan (axe-core) of every page, a value with markup shown as text, rights
// shown as disabled controls, and a session that outlives its replica's
// restart. Prints one line per check and a count; exits 1 if any failed.
//
//   VFPS_BIN=target/debug/vfps node tests/ui/e2e.mjs
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../..");
const vfpsBin = resolve(repo, process.env.VFPS_BIN || "target/debug/vfps");
const artifacts = process.env.VFPS_UI_ARTIFACTS || "/tmp/vfps-ui-artifacts";
mkdirSync(artifacts, { recursive: true });
const work = mkdtempSync(join(tmpdir(), "vfps-ui-e2e-"));

const freePort = () =>
  new Promise((ok) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
const [idpPort, httpPort, grpcPort, metricsPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
const base = `http://127.0.0.1:${httpPort}`;
const issuer = `http://127.0.0.1:${idpPort}`;
const secret = "e2e-client-secret";

const children = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

function start(name, command, args, env) {
  const log = openSync(join(work, `${name}.log`), "a");
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", log, log] });
  children.push(child);
  return child;
}

async function until(what, check, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      if (await check()) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

start("provider", "node", [join(here, "provider.mjs")], {
  PROVIDER_PORT: String(idpPort), CLIENT_SECRET: secret, VFPS_BASE_URL: base,
});
await until("the provider", async () => (await fetch(`${issuer}/.well-known/openid-configuration`)).ok);

const vfpsEnv = {
  VFPS_SQLITE_PATH: join(work, "vfps.sqlite"),
  VFPS_HTTP_PORT: String(httpPort), VFPS_GRPC_PORT: String(grpcPort), VFPS_METRICS_PORT: String(metricsPort),
  Authorization__IsEnabled: "true",
  Authorization__Authority: issuer,
  Authorization__RequireHttpsMetadata: "false",
  Authorization__ClientId: "vfps-ui",
  Authorization__ClientSecret: secret,
  Authorization__AdminRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__Namespace: "*",
  Authorization__NamespaceRules__0__ReadRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__WriteRoles__0: "vfps-admin",
  Authorization__NamespaceRules__0__ReverseLookupRoles__0: "vfps-admin",
  Authorization__NamespaceRules__1__Namespace: "*",
  Authorization__NamespaceRules__1__ReadRoles__0: "vfps-reader",
  VFPS_UI_SESSION_KEY: "e2e session key shared by every replica!",
};
let vfps;
async function startVfps() {
  vfps = start("vfps", vfpsBin, ["serve"], vfpsEnv);
  await until("vfps", async () => (await fetch(`${base}/readyz`)).ok);
}
await startVfps();

let passed = 0;
let failed = 0;
async function check(name, body) {
  try {
    await body();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAILED - ${name}: ${String(e.message || e).split("\n")[0]}`);
    await page?.screenshot({ path: join(artifacts, `failed-${name.replace(/\W+/g, "-")}.png`) }).catch(() => {});
  }
}
function expect(ok, why) {
  if (!ok) throw new Error(why);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let context = await browser.newContext({ acceptDownloads: true });
let page = await context.newPage();
const dialogs = [];
const watch = (p) => p.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss(); });
watch(page);
page.setDefaultTimeout(10000);

const result = () => page.locator("output#result").innerText();
const alert = () => page.locator("[role=alert]").first();

/** Signs in at the provider's form: the user's name, its password field, its buttons. */
async function signIn(user, keyboard = false) {
  await page.goto(`${base}/ui/`);
  for (let i = 0; i < 6 && !page.url().startsWith(`${base}/ui/`); i++) {
    const login = page.locator("input[name=login]");
    if (await login.count()) {
      if (keyboard) {
        await tabTo(login);
        await page.keyboard.type(user);
        await page.keyboard.press("Tab");
        await page.keyboard.type("any");
        await Promise.all([page.waitForNavigation(), page.keyboard.press("Enter")]);
      } else {
        await login.fill(user);
        await page.locator("input[type=password]").fill("any");
        await page.locator("button[type=submit]").click();
      }
    } else if (keyboard) {
      await press(page.locator("button[type=submit]").first());
    } else {
      await page.locator("button[type=submit]").first().click();
    }
    await page.waitForLoadState("load");
  }
  expect(page.url().startsWith(`${base}/ui/`), `not back at the UI: ${page.url()}`);
}

/** Moves the focus with Tab (at most 80 presses) to `locator`'s element. */
async function tabTo(locator) {
  const target = await locator.elementHandle();
  for (let i = 0; i < 80; i++) {
    if (await page.evaluate((t) => document.activeElement === t, target)) return;
    await page.keyboard.press("Tab");
  }
  throw new Error(`Tab never reached ${locator}`);
}

/** Keyboard alone: Tab to a field, type; Tab to a button, Enter. */
async function typeInto(locator, text) {
  await tabTo(locator);
  await page.keyboard.press("Control+A");
  await page.keyboard.type(text);
}
async function press(locator) {
  await tabTo(locator);
  // A redirect chain may abort the first navigation: the page it ends at counts.
  await Promise.all([page.waitForNavigation().catch(() => {}), page.keyboard.press("Enter")]);
  await page.waitForLoadState("load");
}

/** After a sign-out's button: off the page it was on (to the provider, or back). */
async function leftPage(from) {
  await page.waitForURL((u) => u.href !== from, { timeout: 10000 });
  await page.waitForLoadState("load");
}

/** The provider's sign-out confirmation, if it asks: its "yes" (autofocused) button. */
const confirmSignOut = () => page.locator("button[autofocus]").first();

const pages = ["/ui/", "/ui/namespaces", "/ui/namespaces/e2e/pseudonyms", "/ui/csv-jobs", "/ui/access-control", "/ui/tokens", "/ui/authentication/logout"];
const axeSource = readFileSync(join(here, "node_modules/axe-core/axe.min.js"), "utf8");

// ---- with the mouse ----
await check("sign in at the provider (code flow, PKCE, pushed request)", async () => {
  await signIn("admin");
  expect((await page.locator(".who").innerText()).includes("Ada Admin"), "the user menu does not name the user");
});
await check("create a namespace", async () => {
  await page.goto(`${base}/ui/namespaces`);
  await page.getByLabel("Name", { exact: true }).fill("e2e");
  await page.getByLabel("Method").selectOption({ label: "UUID v4" });
  expect(await page.getByLabel("Length").evaluate((e) => e.readOnly && e.value === "36"), "the length is not locked at 36 for UUIDs");
  await page.getByLabel("Description").fill("end to end");
  await page.getByRole("button", { name: "Create namespace" }).click();
  expect((await result()).includes("e2e created"), await result());
});
let pseudonym;
await check("create a pseudonym", async () => {
  await page.goto(`${base}/ui/namespaces/e2e/pseudonyms`);
  await page.getByLabel("Original value").fill("patient-42");
  await page.getByRole("button", { name: "Create pseudonym" }).click();
  pseudonym = (await result()).trim();
  expect(/^[0-9a-f-]{36}$/.test(pseudonym), `not a UUID: ${pseudonym}`);
});
await check("reverse lookup", async () => {
  await page.getByLabel("Pseudonym", { exact: true }).fill(pseudonym);
  await page.getByRole("button", { name: "Look up" }).click();
  expect((await result()) === "patient-42", await result());
  expect(!page.url().includes("patient-42"), "the original is in the address");
});
await check("reveal from the list", async () => {
  await page.goto(`${base}/ui/namespaces/e2e/pseudonyms`);
  await page.getByRole("button", { name: `Reveal the original of ${pseudonym}` }).click();
  expect((await result()) === "patient-42", await result());
});
await check("a value with markup shows as text", async () => {
  const evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
  await page.getByLabel("Original value").fill(evil);
  await page.getByRole("button", { name: "Create pseudonym" }).click();
  const p = (await result()).trim();
  await page.getByLabel("Pseudonym", { exact: true }).fill(p);
  await page.getByRole("button", { name: "Look up" }).click();
  expect((await result()) === evil, "the value is not shown as its text");
  expect(dialogs.length === 0, `a script ran: ${dialogs}`);
});
await check("run a CSV job and download its result", async () => {
  const input = join(work, "people.csv");
  writeFileSync(input, 'name,note\r\npatient-42,"a, ""quoted"" note"\r\npatient-43,x\r\n');
  await page.goto(`${base}/ui/csv-jobs`);
  await page.setInputFiles("#job-file", input);
  await page.getByLabel("name (column 0)").selectOption("e2e");
  await page.getByRole("button", { name: "Start job" }).click();
  await page.getByRole("link", { name: "Download the result of people.csv" }).waitFor({ timeout: 30000 });
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("link", { name: "Download the result of people.csv" }).click(),
  ]);
  const out = readFileSync(await download.path(), "utf8");
  expect(out.startsWith(`name,note\r\n${pseudonym},"a, ""quoted"" note"\r\n`), `unexpected output: ${JSON.stringify(out)}`);
});
let tokenId;
await check("make an access token (shown once) and revoke it", async () => {
  await page.goto(`${base}/ui/tokens`);
  await page.getByLabel("Name").fill("e2e-etl");
  await page.getByLabel("Grants").fill("e2e=write");
  await page.getByRole("button", { name: "Create token" }).click();
  const secretShown = (await result()).trim();
  expect(secretShown.startsWith("vfps_sat_"), `no secret shown: ${secretShown}`);
  const api = await fetch(`${base}/v1/namespaces/e2e/pseudonyms`, {
    method: "POST", headers: { Authorization: `Bearer ${secretShown}`, "Content-Type": "application/json" },
    body: JSON.stringify({ originalValue: "via-token" }),
  });
  expect(api.ok, `the token does not work: HTTP ${api.status}`);
  await page.goto(`${base}/ui/tokens`);
  expect(!(await page.content()).includes(secretShown), "the secret is shown again");
  await page.getByRole("button", { name: "Revoke e2e-etl" }).click();
  expect((await result()).includes("revoked"), await result());
  tokenId = secretShown;
});
await check("every page passes the accessibility scan (no serious or critical violation)", async () => {
  const problems = [];
  for (const path of pages) {
    await page.goto(`${base}${path}`);
    await page.screenshot({ path: join(artifacts, `${path.replace(/\W+/g, "-") || "home"}.png`), fullPage: true });
    await page.evaluate(axeSource);
    const { violations } = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
    for (const v of violations.filter((v) => ["serious", "critical"].includes(v.impact))) {
      problems.push(`${path}: ${v.id} (${v.impact}) ${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join("; ")}`);
    }
  }
  expect(problems.length === 0, problems.join(" | "));
});
await check("the session outlives its replica's restart", async () => {
  vfps.kill("SIGKILL");
  await new Promise((r) => setTimeout(r, 300));
  await startVfps();
  await page.goto(`${base}/ui/namespaces`);
  expect((await page.locator(".who").innerText()).includes("Ada Admin"), "signed out by the restart");
});
await check("sign out (RP-initiated at the provider)", async () => {
  const from = page.url();
  await page.locator("summary").click();
  await page.getByRole("button", { name: "Sign out" }).click();
  await leftPage(from);
  for (let i = 0; i < 3 && !page.url().startsWith(`${base}/ui/`); i++) {
    await Promise.all([page.waitForNavigation().catch(() => {}), confirmSignOut().click()]);
    await page.waitForLoadState("load");
  }
  expect(page.url().startsWith(`${base}/ui/authentication/logout`), `not back at the UI: ${page.url()}`);
  expect((await page.locator("main").innerText()).includes("You are signed out"), "the page does not say so");
  // Signed out here and at the provider: the UI sends the next visit to sign in again.
  await page.goto(`${base}/ui/namespaces`);
  expect(await page.locator("input[name=login]").count(), `not asked to sign in again: ${page.url()}`);
});

// ---- rights: a reader sees what it may not do disabled ----
await check("a reader's controls it may not use are disabled", async () => {
  await context.close();
  context = await browser.newContext();
  page = await context.newPage();
  watch(page);
  await signIn("reader");
  await page.goto(`${base}/ui/namespaces`);
  expect(await page.getByRole("button", { name: "Create namespace" }).isDisabled(), "create is enabled for a reader");
  await page.goto(`${base}/ui/namespaces/e2e/pseudonyms`);
  expect(await page.getByRole("button", { name: "Look up" }).isDisabled(), "look up is enabled for a reader");
  expect(await page.getByRole("button", { name: "Create pseudonym" }).isDisabled(), "create pseudonym is enabled for a reader");
});

// ---- the same flows by keyboard alone ----
await check("by keyboard: sign in", async () => {
  await context.close();
  context = await browser.newContext();
  page = await context.newPage();
  watch(page);
  await signIn("admin", true);
});
await check("by keyboard: create a namespace", async () => {
  await page.goto(`${base}/ui/namespaces`);
  await typeInto(page.getByLabel("Name", { exact: true }), "keys");
  await tabTo(page.getByLabel("Method"));
  await page.keyboard.press("ArrowDown"); // SHA-256: the length locks at 64
  await typeInto(page.getByLabel("Description"), "typed");
  await press(page.getByRole("button", { name: "Create namespace" }));
  expect((await result()).includes("keys created"), await result());
});
let keyed;
await check("by keyboard: create, look up and reveal a pseudonym", async () => {
  await page.goto(`${base}/ui/namespaces/keys/pseudonyms`);
  await typeInto(page.getByLabel("Original value"), "typed-1");
  await press(page.getByRole("button", { name: "Create pseudonym" }));
  keyed = (await result()).trim();
  expect(/^[0-9a-f]{64}$/i.test(keyed), `not SHA-256 hex: ${keyed}`);
  await typeInto(page.getByLabel("Pseudonym", { exact: true }), keyed);
  await press(page.getByRole("button", { name: "Look up" }));
  expect((await result()) === "typed-1", await result());
  await press(page.getByRole("button", { name: `Reveal the original of ${keyed}` }));
  expect((await result()) === "typed-1", await result());
});
await check("by keyboard: make and revoke a token", async () => {
  await page.goto(`${base}/ui/tokens`);
  await typeInto(page.getByLabel("Name"), "keyed-token");
  await press(page.getByRole("button", { name: "Create token" }));
  expect((await result()).trim().startsWith("vfps_sat_"), "no secret shown");
  await press(page.getByRole("button", { name: "Revoke keyed-token" }));
  expect((await result()).includes("revoked"), await result());
});
await check("by keyboard: delete a namespace after typing its name", async () => {
  await page.goto(`${base}/ui/namespaces`);
  await typeInto(page.getByLabel("Type keys to confirm its deletion"), "keys");
  await press(page.getByRole("button", { name: "Delete keys" }));
  expect((await result()).includes("keys deleted"), await result());
});
await check("by keyboard: sign out", async () => {
  const from = page.url();
  await tabTo(page.locator("summary"));
  await page.keyboard.press("Enter");
  await press(page.getByRole("button", { name: "Sign out" }));
  await leftPage(from);
  for (let i = 0; i < 3 && !page.url().startsWith(`${base}/ui/`); i++) {
    await press(confirmSignOut());
  }
  expect(page.url().startsWith(`${base}/ui/authentication/logout`), `not back at the UI: ${page.url()}`);
  await page.goto(`${base}/ui/namespaces`);
  expect(await page.locator("input[name=login]").count(), `not asked to sign in again: ${page.url()}`);
});

await browser.close();
console.log(`e2e: ${passed} passed, ${failed} failed (screenshots and logs: ${artifacts}, ${work})`);
process.exit(failed ? 1 : 0);
