// Every flow of docs/ui.md with the mouse, as an admin; each checked in the
// page and, where the page could fool itself, over the REST API.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { downloadControl, outcome, resultText, row, rowButton, signInChecked, signedInAs, userMenu } from "./ui.mjs";

export const SIGN_IN = "sign in at the provider (code flow, PKCE, pushed request)";
export const NAMESPACE = "create a namespace (UUID v4, length locked at 36)";
export const PSEUDONYM = "create a pseudonym";

export async function scenarios(t) {
  const { expect } = t;

  await t.run(SIGN_IN, async () => {
    await signInChecked(t, "admin");
    const page = t.page;
    expect(page.url().startsWith(`${t.base}/ui/`), `not back at the UI: ${page.url()}`);
    expect(await signedInAs(page, "Ada Admin"), "the user menu does not name the user");
    await userMenu(page).click();
    expect((await page.locator("header details").innerText()).includes("vfps-admin"), "the user menu does not list the roles");
    await userMenu(page).click();
    expect(/vfps \d+\.\d+/.test(await page.locator("footer").innerText()), "no version in the footer");
    const cookie = (await t.context.cookies(t.base)).find((c) => c.name === "vfps_session");
    expect(cookie, "no vfps_session cookie");
    expect(cookie.httpOnly && cookie.sameSite === "Lax" && !cookie.secure, `cookie attributes: ${JSON.stringify(cookie)}`);
    const log = t.provider.child.text();
    expect(log.includes("pushed_authorization_request.success") && log.includes("grant.success"), "the provider saw no pushed request or no code exchange");
  });

  await t.run(NAMESPACE, async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces`);
    await page.getByLabel("Name", { exact: true }).fill("e2e");
    await page.getByLabel("Method").selectOption({ label: "UUID v4" });
    const length = page.getByLabel("Length");
    expect(await length.evaluate((e) => (e.readOnly || e.disabled) && e.value === "36"), "the length is not locked at 36 for UUID v4");
    await page.getByLabel("Description").fill("end to end");
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create namespace" }).click()]);
    expect(!(await page.locator("[role=alert]").count()), await outcome(page));
    expect(await row(page, "e2e").count(), "the namespace is not listed");
    const got = await t.api("GET", "/v1/namespaces/e2e");
    const ns = got.json?.namespace;
    expect(ns?.pseudonymGenerationMethod === "PSEUDONYM_GENERATION_METHOD_UUID4" && Number(ns.pseudonymLength) === 36 && ns.description === "end to end",
      `the API has: ${got.text}`);
  }, [SIGN_IN]);

  await t.run(PSEUDONYM, async () => {
    const page = t.page;
    t.originals.add("patient-42");
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    await page.getByLabel("Original value").fill("patient-42");
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create pseudonym" }).click()]);
    const p = await resultText(page);
    expect(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(p), `not a UUID v4: ${p}`);
    const api = await t.api("GET", `/v1/namespaces/e2e/pseudonyms/${p}`);
    expect(api.json?.pseudonym?.originalValue === "patient-42", `the API resolves it to: ${api.text}`);
    await page.getByLabel("Original value").fill("patient-42");
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create pseudonym" }).click()]);
    expect((await resultText(page)) === p, "the same original got another pseudonym");
    t.found.pseudonym = p;
  }, [NAMESPACE]);

  await t.run("reverse lookup (the original is not in the address)", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    await page.getByLabel("Pseudonym", { exact: true }).fill(t.found.pseudonym);
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Look up" }).click()]);
    expect((await resultText(page)) === "patient-42", await outcome(page));
    expect(!page.url().includes("patient-42"), `the original is in the address: ${page.url()}`);
  }, [PSEUDONYM]);

  await t.run("reveal in the list", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    expect(!(await page.locator("main table").innerText()).includes("patient-42"), "the list shows an original before any reveal");
    await Promise.all([page.waitForNavigation(), rowButton(page, t.found.pseudonym, "Reveal").click()]);
    expect((await resultText(page)) === "patient-42", await outcome(page));
  }, [PSEUDONYM]);

  await t.run("an original with markup shows as text (no script runs)", async () => {
    const page = t.page;
    const evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    t.originals.add(evil);
    const dialogsBefore = t.watch.dialogs.length;
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    await page.getByLabel("Original value").fill(evil);
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create pseudonym" }).click()]);
    const p = await resultText(page);
    await page.getByLabel("Pseudonym", { exact: true }).fill(p);
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Look up" }).click()]);
    expect((await resultText(page)) === evil, `shown as: ${await resultText(page)}`);
    expect(await page.getByText(evil, { exact: true }).isVisible(), "the text is not visible");
    expect(await page.evaluate(() => [...document.scripts].every((s) => s.src && !s.textContent.trim())), "an inline script is in the page");
    expect(!(await page.locator("main img").count()), "the markup became an element");
    expect(t.watch.dialogs.length === dialogsBefore, `a dialog opened: ${t.watch.dialogs.slice(dialogsBefore)}`);
  }, [NAMESPACE]);

  await t.run("the list pages 25 at a time (keyset: ?after=)", async () => {
    const page = t.page;
    for (let i = 0; i < 30; i++) {
      const r = await t.api("POST", "/v1/namespaces/e2e/pseudonyms", { originalValue: `bulk-${i}` });
      expect(r.status === 200, `API create: HTTP ${r.status}`);
    }
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    const rows = () => page.locator("main table tbody tr").count();
    expect((await rows()) === 25, `first page: ${await rows()} rows`);
    const next = page.getByRole("link", { name: "Next page" });
    const href = await next.getAttribute("href");
    expect(/[?&]after=./.test(href), `next page address: ${href}`);
    await Promise.all([page.waitForNavigation(), next.click()]);
    expect((await rows()) === 32 - 25, `second page: ${await rows()} rows (32 pseudonyms in all)`);
    expect(!(await page.getByRole("link", { name: "Next page" }).count()), "a next page after the last");
  }, [PSEUDONYM]);

  await t.run("a CSV job: upload, progress to completed, download, compare", async () => {
    const page = t.page;
    const input = join(t.work, "people.csv");
    const rowsIn = ["patient-42", "patient-43"];
    rowsIn.forEach((o) => t.originals.add(o));
    writeFileSync(input, `name,note\r\n${rowsIn[0]},"a, ""quoted"" note"\r\n${rowsIn[1]},x\r\n`);
    await page.goto(`${t.base}/ui/csv-jobs`);
    await page.getByLabel("CSV file").setInputFiles(input);
    await page.getByLabel(/^name\b/).selectOption({ label: "e2e" });
    await page.getByLabel("Direction").selectOption({ label: "Pseudonymize" });
    await page.getByRole("button", { name: "Start job" }).click();
    const download = downloadControl(page, "people.csv");
    await download.waitFor({ timeout: 30_000 });
    const [file] = await Promise.all([page.waitForEvent("download"), download.click()]);
    const out = readFileSync(await file.path(), "utf8");
    const lines = out.split("\r\n");
    expect(lines[0] === "name,note" && lines[3] === "" && lines.length === 4, `unexpected output: ${JSON.stringify(out)}`);
    expect(lines[1] === `${t.found.pseudonym},"a, ""quoted"" note"`, `row 1: ${JSON.stringify(lines[1])}`);
    const p43 = lines[2].replace(/,x$/, "");
    const api = await t.api("GET", `/v1/namespaces/e2e/pseudonyms/${p43}`);
    expect(lines[2].endsWith(",x") && api.json?.pseudonym?.originalValue === "patient-43", `row 2: ${JSON.stringify(lines[2])} → ${api.text}`);
    t.found.csvOut = join(t.work, "people.pseudonymized.csv");
    writeFileSync(t.found.csvOut, out);
  }, [PSEUDONYM]);

  await t.run("clear finished jobs", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/csv-jobs`);
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Clear finished" }).click()]);
    expect(/1 finished job/.test(await resultText(page)), await outcome(page));
    expect(!(await row(page, "people.csv").count()), "the finished job is still listed");
  }, [SIGN_IN]);

  await t.run("an access token: made (secret shown once), works, revoked, refused", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/tokens`);
    await page.getByLabel("Kind").selectOption({ index: 0 });
    await page.getByLabel("Name", { exact: true }).fill("e2e-etl");
    await page.getByLabel("Grants").fill("e2e=write");
    await page.getByLabel("Expires in (days)").fill("1");
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create token" }).click()]);
    const secret = await resultText(page);
    expect(secret.startsWith("vfps_sat_"), `no service-account secret shown: ${secret.slice(0, 12)}…`);
    const create = () => fetch(`${t.base}/v1/namespaces/e2e/pseudonyms`, {
      method: "POST", headers: { Authorization: `Bearer ${secret}`, "Content-Type": "application/json" },
      body: JSON.stringify({ originalValue: "via-token" }),
    });
    t.originals.add("via-token");
    expect((await create()).status === 200, "the token does not work");
    await page.goto(`${t.base}/ui/tokens`);
    expect(!(await page.content()).includes(secret), "the secret is shown again");
    await Promise.all([page.waitForNavigation(), rowButton(page, "e2e-etl", "Revoke").click()]);
    expect(/revoked/i.test(await resultText(page)), await outcome(page));
    const deadline = Date.now() + 10_000;
    let status;
    while (Date.now() < deadline && (status = (await create()).status) !== 401) await page.waitForTimeout(200);
    expect(status === 401, `the revoked token still answers HTTP ${status}`);
  }, [SIGN_IN]);

  await t.run("access control shows the roles, the rules and the user's rights", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/access-control`);
    const text = await page.locator("main").innerText();
    expect(text.includes("vfps-admin") && text.includes("vfps-reader"), "the admin roles or the rules are not shown");
    expect(/e2e/.test(text), "the user's rights per namespace do not name e2e");
  }, [NAMESPACE]);

  await t.run("erase an entry: only once the namespace's name is typed; anonymized, it resolves to no one", async () => {
    const page = t.page;
    t.originals.add("withdrawn-7");
    const made = await t.api("POST", "/v1/namespaces/e2e/pseudonyms", { originalValue: "withdrawn-7" });
    const p = made.json?.pseudonym?.pseudonymValue;
    expect(made.status === 200 && p, `API create: HTTP ${made.status}`);
    await page.goto(`${t.base}/ui/namespaces/e2e/pseudonyms`);
    await page.getByLabel("Original to erase").fill("withdrawn-7");
    const button = page.getByRole("button", { name: "Erase", exact: true });
    await page.getByLabel("Type the namespace's name to confirm").fill("not-e2e");
    expect(await button.isDisabled(), "Erase is enabled before the namespace's name is typed");
    await page.getByLabel("Type the namespace's name to confirm").fill("e2e");
    await Promise.all([page.waitForNavigation(), button.click()]);
    expect(/Anonymized/.test(await resultText(page)), await outcome(page));
    expect((await t.api("GET", `/v1/namespaces/e2e/pseudonyms/${p}`)).status === 404, "the erased entry still resolves");
  }, [NAMESPACE]);

  await t.run("a multi-pseudonym namespace: ticked on the form, listed as 'many', a new pseudonym per Create", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/namespaces`);
    await page.getByLabel("Name", { exact: true }).fill("secondary");
    await page.getByLabel("Method").selectOption({ label: "UUID v4" });
    await page.getByLabel(/Many pseudonyms per original/).check();
    await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create namespace" }).click()]);
    expect(!(await page.locator("[role=alert]").count()), await outcome(page));
    expect((await row(page, "secondary").innerText()).includes("many"), "the namespace is not listed as multi-pseudonym");
    const got = await t.api("GET", "/v1/namespaces/secondary");
    expect(got.json?.namespace?.multiPseudonym === true, `the API has: ${got.text}`);
    t.originals.add("subject-9");
    const made = [];
    for (let i = 0; i < 2; i++) {
      await page.goto(`${t.base}/ui/namespaces/secondary/pseudonyms`);
      await page.getByLabel("Original value").fill("subject-9");
      await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Create pseudonym" }).click()]);
      made.push(await resultText(page));
    }
    expect(made[0] !== made[1], "a Create answered an earlier pseudonym");
    for (const p of made) {
      const api = await t.api("GET", `/v1/namespaces/secondary/pseudonyms/${p}`);
      expect(api.json?.pseudonym?.originalValue === "subject-9", `the API resolves ${p} to: ${api.text}`);
    }
    const listed = await t.api("GET", "/v1/namespaces/secondary/pseudonyms?includeTotalSize=true");
    expect(Number(listed.json?.totalSize) === 2, `the API lists: ${listed.text}`);
  }, [SIGN_IN]);
}
