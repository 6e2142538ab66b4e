// Sessions and rights: the session outlives its replica's restart and is
// accepted by another replica with the same key (and refused by one without
// it: the check can fail); sign-out; a reader's controls disabled, and
// refused by the server when enabled by hand; and, at the end, what the whole
// run must not have done (an original in an address or a log, a policy refusal).
import { Vfps, freePort } from "../lib/processes.mjs";
import { SIGN_IN, NAMESPACE, PSEUDONYM } from "./mouse.mjs";
import { outcome, resultText, rowButton, signInChecked, signOutChecked, signedInAs, userMenu } from "./ui.mjs";

export const RESTART = "the session outlives its replica's restart (sealed cookie, same key)";

export async function scenarios(t) {
  const { expect } = t;

  await t.run(RESTART, async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    await t.vfps.stop("SIGKILL");
    await t.vfps.start();
    await page.reload();
    expect(page.url().startsWith(`${t.base}/ui/`) && (await signedInAs(page, "Ada Admin")), `signed out by the restart: at ${page.url()}`);
    // The form's CSRF token, made before the restart, still holds.
    await page.getByLabel("Original value").fill("patient-42");
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create pseudonym" }).click()]);
    expect((await resultText(page)) === t.found.pseudonym, await outcome(page));
  }, [PSEUDONYM]);

  await t.run("another replica with the same key accepts the session; one with another key does not", async () => {
    const other = async (name, key) => {
      const ports = { http: await freePort(), grpc: await freePort(), metrics: await freePort() };
      const v = new Vfps({ bin: t.bin, dir: t.work, name, ports, env: { ...t.authEnv, VFPS_UI_SESSION_KEY: key } });
      await v.start();
      return v;
    };
    const b = await other("vfps-b", t.sessionKey);
    const c = await other("vfps-c", "a-different-key-".repeat(4));
    // A context of its own, with this session's cookies: a replica that rejects
    // the cookie replaces it, and cookies are shared across a host's ports.
    const ctx = await t.context.browser().newContext();
    try {
      await ctx.addCookies(await t.context.cookies(t.base));
      const page = await ctx.newPage();
      await page.goto(`${b.base}/ui/namespaces`);
      expect(page.url().startsWith(`${b.base}/ui/namespaces`) && (await signedInAs(page, "Ada Admin")), `replica B (same key) did not accept the session: at ${page.url()}`);
      await ctx.addCookies(await t.context.cookies(t.base));
      const resp = await page.goto(`${c.base}/ui/namespaces`);
      expect(!(await signedInAs(page, "Ada Admin")), `replica C (another key) accepted the session: at ${page.url()} (HTTP ${resp?.status()})`);
    } finally {
      await ctx.close();
      await b.stop();
      await c.stop();
    }
  }, [SIGN_IN]);

  await t.run("sign out: RP-initiated at the provider, back at the signed-out page, signed out", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/`);
    await signOutChecked(t, async () => {
      await userMenu(page).click();
      await page.getByRole("button", { name: "Sign out" }).click();
    });
  }, [SIGN_IN]);

  const READER = "a reader signs in";
  await t.run(READER, async () => {
    await t.newSession();
    await signInChecked(t, "reader");
    expect(await signedInAs(t.page, "Rae Reader"), "the user menu does not name the reader");
  });

  const firstReveal = (page) => page.locator("main table tbody tr").first().getByRole("button", { name: /^Reveal\b/ });
  await t.run("a reader sees what it may not do disabled", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces`);
    expect(await page.getByRole("button", { name: "Create namespace" }).isDisabled(), "Create namespace is enabled for a reader");
    expect(await rowButton(page, "e2e", "Delete").isDisabled(), "Delete is enabled for a reader");
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    expect(await page.locator("main table tbody tr").count(), "a reader may read, but the list is empty");
    expect(await page.getByRole("button", { name: "Create pseudonym" }).isDisabled(), "Create pseudonym is enabled for a reader");
    expect(await page.getByRole("button", { name: "Look up" }).isDisabled(), "Look up is enabled for a reader");
    expect(await firstReveal(page).isDisabled(), "Reveal is enabled for a reader");
    await page.goto(`${t.base}/ui/tokens`);
    const create = page.getByRole("button", { name: "Create token" });
    expect(!(await create.count()) || (await create.isDisabled()), "Create token is enabled for a reader");
  }, [READER, PSEUDONYM]);

  await t.run("a reader's disabled reveal, enabled by hand, is refused by the server", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    const reveal = firstReveal(page);
    await reveal.evaluate((b) => { b.disabled = false; });
    await Promise.all([page.waitForNavigation(), reveal.click()]);
    expect(!(await page.locator("output#result").count()), "the server revealed an original to a reader");
    expect(await page.locator("[role=alert]").count(), "no refusal shown");
    const html = await page.content();
    expect(![...t.originals, ...Array.from({ length: 30 }, (_, i) => `bulk-${i}`)].some((o) => html.includes(o)), "an original is in the page");
  }, [READER, PSEUDONYM]);
}

/** What the whole run must not have done. */
export async function afterwards(t) {
  const { expect } = t;
  await t.run("no original value in any address the browser requested", async () => {
    const leaks = t.watch.addresses.filter((a) => [...t.originals].some((o) => a.includes(o) || a.includes(encodeURIComponent(o))));
    expect(leaks.length === 0, `in addresses: ${leaks.slice(0, 3)}`);
  });
  await t.run("no original value in vfps's logs", async () => {
    const logs = t.vfps.logs();
    const leaked = [...t.originals].filter((o) => logs.includes(o));
    expect(logs.length > 0, "vfps wrote no log at all: the check would pass vacuously");
    expect(leaked.length === 0, `${leaked.length} original value(s) in vfps.log`);
  });
  await t.run("no page had a script or style refused by its own policy", async () => {
    expect(t.watch.cspRefusals.length === 0, t.watch.cspRefusals.slice(0, 3).join(" | "));
  });
  await t.run("every control of vfps reached by keyboard showed its focus", async () => {
    const unseen = t.found.unseenFocus;
    expect(unseen && t.found.focusReached >= 10, `the keyboard reached ${t.found.focusReached ?? 0} controls of vfps: too few to judge`);
    expect(unseen.length === 0, unseen.slice(0, 3).join(" | "));
  });
}
