// The contract of docs/ui.md as locators, and the steps every scenario shares.
//
// Per-row buttons: the contract names them (Reveal, Revoke, Delete, Download,
// Cancel); the pages may say which row in the accessible name ("Reveal the
// original of …"), so a name is matched as the contract's word at its start,
// inside that row.
import { signIn } from "../lib/browser.mjs";

/** An address for a message: secrets in its query (tokens, codes) left out. */
export const shown = (address) => {
  const u = new URL(address);
  for (const k of ["id_token_hint", "code", "state", "request_uri", "iss"]) if (u.searchParams.has(k)) u.searchParams.set(k, "…");
  return u.href;
};
const trailOf = (urls) => urls.map(shown).join(" → ");

export const result = (page) => page.locator("output#result");
export const alertText = async (page) => {
  const a = page.locator("[role=alert]");
  return (await a.count()) ? (await a.first().innerText()).trim() : "";
};
/** The outcome of a form: its result, else its refusal, for a failure's message. */
export const outcome = async (page) => {
  const r = result(page);
  if (await r.count()) return `result: ${(await r.innerText()).trim()}`;
  return `no output#result; alert: ${(await alertText(page)) || "none"}`;
};
export const resultText = async (page) => {
  const r = result(page);
  if (!(await r.count())) throw new Error(await outcome(page));
  return (await r.innerText()).trim();
};
export const row = (page, text) => page.locator("tr", { hasText: text });
export const rowButton = (page, text, word) => row(page, text).getByRole("button", { name: new RegExp(`^${word}\\b`) });
/** Download is a link or a button: either carries the contract's name. */
export const downloadControl = (page, file) =>
  row(page, file).getByRole("link", { name: /^Download\b/ }).or(row(page, file).getByRole("button", { name: /^Download\b/ }));

/** The header's user menu: the signed-in user's name (and roles). */
export const userMenu = (page) => page.locator("header details summary");

export async function signedInAs(page, name) {
  const menu = userMenu(page);
  if (!(await menu.count())) return false;
  return (await menu.innerText()).includes(name);
}

/** Signs in and checks the pushed request: the browser carried only a request_uri. */
export async function signInChecked(t, user, { keyboard = false } = {}) {
  const trail = await signIn(t.page, { start: `${t.base}/ui/`, user, issuer: t.issuer, keyboard: keyboard ? t.keys : undefined });
  const authorize = trail.find((u) => u.startsWith(t.provider.discovery.authorization_endpoint));
  if (!authorize) throw new Error(`never sent to the provider's authorization endpoint: ${trailOf(trail)}`);
  const q = new URL(authorize).searchParams;
  if (!q.get("request_uri") || q.has("code_challenge") || q.has("redirect_uri")) {
    throw new Error(`the authorization request was not pushed (RFC 9126): ${[...q.keys()].join(",")}`);
  }
  return trail;
}

/**
 * Signs out with `trigger` (opens the user menu and submits "Sign out"), then
 * holds the sign-out to docs/ui.md: RP-initiated at the provider's
 * end_session_endpoint, returning to `<base>/ui/authentication/logout` (the
 * page that says so), signed out there and at the provider (the next page asks
 * for a sign-in again).
 */
export async function signOutChecked(t, trigger, { keyboard = false } = {}) {
  const { page } = t;
  const trail = [];
  const onRequest = (r) => r.isNavigationRequest() && trail.push(r.url());
  page.on("request", onRequest);
  const endpoint = t.provider.discovery.end_session_endpoint;
  try {
    const reached = page.waitForResponse((r) => r.url().startsWith(endpoint), { timeout: 10_000 }).catch(() => null);
    await trigger();
    const answer = await reached;
    // At the provider's page (or already back): a key press does not wait
    // for the navigation it starts, as a click does.
    await page.waitForURL((u) => u.href.startsWith(endpoint) || u.href.startsWith(`${t.base}/ui/authentication/logout`), { timeout: 10_000 });
    await page.waitForLoadState("load");
    const end = trail.find((u) => u.startsWith(endpoint));
    if (!answer || !end) throw new Error(`sign-out never reached the provider's end_session_endpoint: ${trailOf(trail)}`);
    const q = new URL(end).searchParams;
    const back = q.get("post_logout_redirect_uri");
    const signedOutPage = `${t.base}/ui/authentication/logout`;
    if (back !== signedOutPage) {
      const said = t.provider.child.text().split("\n").filter((l) => l.includes("end_session.error")).pop() ?? "";
      throw new Error(`post_logout_redirect_uri is ${back}; docs/ui.md: "the sign-out's return <public address>/ui/authentication/logout" (${signedOutPage})`
        + `; the provider answered HTTP ${answer.status()} ${said}`);
    }
    if (q.get("client_id") !== "vfps-ui" || !q.get("id_token_hint")) throw new Error(`end-session request lacks client_id or id_token_hint: ${[...q.keys()]}`);
    const yes = page.getByRole("button", { name: "Yes, sign me out" });
    if (await yes.count()) {
      if (keyboard) await t.keys.press(yes);
      else await Promise.all([page.waitForNavigation(), yes.click()]);
    }
    await page.waitForURL((u) => u.href.startsWith(signedOutPage), { timeout: 10_000 });
    await page.waitForLoadState("load");
    const endAt = trail.indexOf(end);
    if (!trail.slice(endAt + 1).some((u) => u === `${t.base}/ui/authentication/logout`)) {
      throw new Error(`not sent back to ${t.base}/ui/authentication/logout after the provider: ${trailOf(trail.slice(endAt))}`);
    }
    if (!(await page.locator("main").innerText()).includes("You are signed out")) {
      throw new Error(`the page it returned to does not say the user is signed out: ${page.url()}`);
    }
  } finally {
    page.off("request", onRequest);
  }
  // Signed out here and at the provider: a page of the UI asks for a sign-in.
  await page.goto(`${t.base}/ui/namespaces`);
  if (!page.url().startsWith(t.issuer) || !(await page.getByLabel("Username").count())) {
    throw new Error(`still signed in after signing out: at ${page.url()}`);
  }
}
