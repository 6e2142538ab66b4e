// Every page docs/ui.md lists: a screenshot, an axe-core scan (no violation
// of impact serious or critical) in the light and the dark theme, and what
// the home page and Swagger UI must show.
import { join } from "node:path";
import { injectAxe, seriousViolations } from "../lib/browser.mjs";
import { SIGN_IN, NAMESPACE } from "./mouse.mjs";

/** docs/ui.md's pages of the UI (the pseudonyms page of the namespace the run made); /swagger apart. */
export const UI_PAGES = [
  "/ui/", "/ui/namespaces", "/ui/namespaces/e2e/pseudonyms", "/ui/csv-jobs", "/ui/access-control", "/ui/tokens",
  "/ui/authentication/login", "/ui/authentication/logout",
];

export async function scenarios(t) {
  const { expect } = t;
  const axePath = join(t.here, "node_modules/axe-core/axe.min.js");

  await t.run("the home page shows the namespaces, the jobs and the health", async () => {
    const page = t.page;
    await page.goto(`${t.base}/ui/`);
    const main = page.locator("main");
    expect(await main.getByRole("link", { name: "e2e" }).count(), "the namespace e2e is not on the home page");
    expect(/health|ready/i.test(await main.innerText()), "no health on the home page");
  }, [NAMESPACE]);

  await t.run("Swagger UI renders the API document from vfps alone", async () => {
    const page = t.page;
    const elsewhere = [];
    const onRequest = (r) => !r.url().startsWith(t.base) && !r.url().startsWith("data:") && elsewhere.push(r.url());
    page.on("request", onRequest);
    try {
      await page.goto(`${t.base}/swagger`);
      await page.locator(".swagger-ui .opblock").first().waitFor({ timeout: 15_000 });
      expect((await page.locator(".swagger-ui .opblock").count()) >= 15, "fewer operations than the API has");
      expect((await page.locator("#vfps-outline").count()) === 0, "the server's list of operations stays beside Swagger UI");
      expect(elsewhere.length === 0, `requests to other sites: ${elsewhere.slice(0, 3)}`);
    } finally {
      page.off("request", onRequest);
    }
  }, [SIGN_IN]);

  await t.run("/swagger lists every operation before Swagger UI's script runs, and without it, accessibly", async () => {
    const page = t.page;
    const document = await (await page.request.get(`${t.base}/swagger/v1/swagger.json`)).json();
    const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
    const want = Object.values(document.paths).flatMap((item) => methods.filter((m) => item[m])).length;
    const bundle = `${t.base}/swagger/swagger-ui-bundle.js`;
    await page.route(bundle, (route) => route.abort());
    try {
      await page.goto(`${t.base}/swagger`, { waitUntil: "domcontentloaded" });
      const listed = await page.locator("#vfps-outline li").count();
      expect(listed === want, `the page lists ${listed} operations, the document has ${want}`);
      expect(!(await page.locator("#swagger-ui").isVisible()), "Swagger UI's element shows beside the list");
      await injectAxe(page, t.watch, axePath);
      const problems = await seriousViolations(page);
      expect(problems.length === 0, problems.join(" | "));
    } finally {
      await page.unroute(bundle);
    }
  }, [SIGN_IN]);

  await t.run("the pages' policy refuses an injected inline script (axe goes in through DevTools instead)", async () => {
    await t.page.goto(`${t.base}/ui/`);
    const { refusedInline, reported } = await injectAxe(t.page, t.watch, axePath);
    expect(refusedInline, "a <script> with inline source ran: the policy allows inline script");
    // Else the run's "no policy refusal" check could not see one either.
    expect(reported, "the browser's console reported no policy refusal");
    expect(await t.page.evaluate(() => typeof window.axe?.run === "function"), "axe is not in the page");
  }, [SIGN_IN]);

  const scan = async (paths, label) => {
    const page = t.page;
    const problems = [];
    for (const path of paths) {
      await page.goto(`${t.base}${path}`);
      await page.waitForLoadState("load");
      if (path === "/swagger") await page.locator(".swagger-ui .opblock").first().waitFor({ timeout: 15_000 }).catch(() => {});
      const landed = new URL(page.url());
      await page.screenshot({ path: join(t.artifacts, `page-${label}${path.replace(/\W+/g, "-")}.png`), fullPage: true });
      if (landed.origin !== t.base) {
        problems.push(`${path}: left vfps for ${landed.href}`);
        continue;
      }
      await injectAxe(page, t.watch, axePath);
      for (const v of await seriousViolations(page)) problems.push(`${path} (at ${landed.pathname}): ${v}`);
    }
    expect(problems.length === 0, problems.join(" | "));
  };
  for (const theme of ["light", "dark"]) {
    await t.run(`every page of the UI passes axe-core in the ${theme} theme (no serious or critical violation)`, async () => {
      await setTheme(t, theme);
      await scan(UI_PAGES, theme);
    }, [NAMESPACE]);
  }
  await setTheme(t, "light").catch(() => {});
  await t.run("Swagger UI (/swagger) passes axe-core (no serious or critical violation)", () => scan(["/swagger"], "light"), [SIGN_IN]);
}

/** The theme by the header's own button (a form), as a user switches it. */
async function setTheme(t, theme) {
  const page = t.page;
  await page.goto(`${t.base}/ui/`);
  const want = theme === "dark" ? "Dark mode" : "Light mode";
  const button = page.getByRole("button", { name: want });
  if (await button.count()) await Promise.all([page.waitForNavigation(), button.click()]);
  const now = await page.locator("html").getAttribute("data-theme");
  if (theme === "dark" && now !== "dark") throw new Error(`the theme did not switch to dark (data-theme=${now})`);
}
