// The test provider checked on its own, before any browser test relies on it:
// its discovery document, then vfps's whole flow spoken over HTTP by hand — a
// pushed authorization request with PKCE and client_secret_basic, the sign-in
// page, the code at the registered callback, the token exchange, the ID
// token's signature (against the provider's JWKS) and claims — and what it
// must refuse (no PKCE, a wrong secret, an unregistered sign-out return).
// Prints a line per check; exits 1 if any failed.
//
//   node tests/ui/provider-check.mjs
import { spawn } from "node:child_process";
import { createHash, createPublicKey, randomBytes, verify } from "node:crypto";
import { once } from "node:events";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const freePort = () =>
  new Promise((ok, fail) => {
    const s = createServer().once("error", fail).listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });

const port = await freePort();
const issuer = `http://127.0.0.1:${port}`;
// Nothing listens here: the checks stop at the redirect, as a browser would follow it.
const base = "http://127.0.0.1:9";
const secret = randomBytes(16).toString("hex");
const child = spawn(process.execPath, [join(here, "provider.mjs"), "--port", String(port), "--base", base, "--client-secret", secret], {
  stdio: ["ignore", "pipe", "inherit"],
});
let log = "";
child.stdout.on("data", (d) => (log += d));
process.on("exit", () => child.kill("SIGKILL"));
const deadline = Date.now() + 15_000;
while (!log.includes("ready")) {
  if (Date.now() > deadline || child.exitCode !== null) {
    console.error(`provider-check: the provider did not start:\n${log}`);
    process.exit(1);
  }
  await Promise.race([once(child.stdout, "data"), new Promise((r) => setTimeout(r, 500))]);
}

let failed = 0;
async function check(name, body) {
  try {
    await body();
    console.log(`ok - provider: ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAILED - provider: ${name}: ${e.message}`);
  }
}
function expect(ok, why) {
  if (!ok) throw new Error(why);
}

/** A cookie jar of one host: enough for the provider's interaction cookies. */
const jar = new Map();
async function http(url, init = {}) {
  const headers = { ...init.headers };
  if (jar.size) headers.cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
  const res = await fetch(url, { ...init, headers, redirect: "manual" });
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(";");
    const i = pair.indexOf("=");
    jar.set(pair.slice(0, i), pair.slice(i + 1));
  }
  return res;
}
const basic = (id, s) => `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(s)}`).toString("base64")}`;
const form = (o) => new URLSearchParams(o).toString();
const formHeaders = (auth) => ({ "Content-Type": "application/x-www-form-urlencoded", Authorization: auth });

let discovery;
await check("discovery offers pushed requests, sign-out, a JWKS, S256 and RS256", async () => {
  discovery = await (await http(`${issuer}/.well-known/openid-configuration`)).json();
  expect(discovery.issuer === issuer, `issuer ${discovery.issuer}`);
  for (const key of ["pushed_authorization_request_endpoint", "end_session_endpoint", "jwks_uri", "token_endpoint", "authorization_endpoint"]) {
    expect(typeof discovery[key] === "string" && discovery[key].startsWith(issuer), `no ${key}`);
  }
  expect(discovery.code_challenge_methods_supported?.includes("S256"), "S256 not offered");
  expect(discovery.id_token_signing_alg_values_supported?.includes("RS256"), "RS256 not offered");
});

async function push(params, auth = basic("vfps-ui", secret)) {
  return http(discovery.pushed_authorization_request_endpoint, { method: "POST", headers: formHeaders(auth), body: form(params) });
}
const verifier = randomBytes(32).toString("base64url");
const nonce = randomBytes(8).toString("hex");
const request = {
  client_id: "vfps-ui", response_type: "code", scope: "openid profile", nonce, state: "s1",
  redirect_uri: `${base}/ui/authentication/callback`,
  code_challenge: createHash("sha256").update(verifier).digest("base64url"), code_challenge_method: "S256",
};

await check("a pushed request without PKCE is refused", async () => {
  const { code_challenge, code_challenge_method, ...noPkce } = request;
  const res = await push(noPkce);
  expect(res.status === 400, `HTTP ${res.status}`);
});
await check("a pushed request with a wrong client secret is refused", async () => {
  const res = await push(request, basic("vfps-ui", "wrong"));
  expect(res.status === 401, `HTTP ${res.status}`);
});
let idToken;
await check("the code flow: pushed request, sign-in page, code at the callback, tokens", async () => {
  const pushed = await push(request);
  const answer = await pushed.json();
  expect(pushed.status === 201, `pushed request: HTTP ${pushed.status} ${JSON.stringify(answer)}`);
  const { request_uri } = answer;
  let res = await http(`${discovery.authorization_endpoint}?${form({ client_id: "vfps-ui", request_uri })}`);
  expect(res.status === 303 || res.status === 302, `authorize: HTTP ${res.status}`);
  const interaction = new URL(res.headers.get("location"), issuer).href;
  res = await http(interaction);
  const html = await res.text();
  expect(/<label for="login">Username<\/label>/.test(html), "the sign-in page has no labelled username field");
  res = await http(interaction, { method: "POST", headers: { "Content-Type": "application/x-www-form-urlencoded" }, body: form({ login: "admin" }) });
  for (let hops = 0; hops < 5; hops++) {
    const to = new URL(res.headers.get("location") ?? "", issuer);
    if (to.href.startsWith(`${base}/`)) break;
    res = await http(to.href);
  }
  const back = new URL(res.headers.get("location"), issuer);
  expect(back.origin + back.pathname === `${base}/ui/authentication/callback`, `back to ${back.href}`);
  expect(back.searchParams.get("state") === "s1" && back.searchParams.get("code"), `no code or state: ${back.search}`);
  const token = await http(discovery.token_endpoint, {
    method: "POST", headers: formHeaders(basic("vfps-ui", secret)),
    body: form({ grant_type: "authorization_code", code: back.searchParams.get("code"), redirect_uri: request.redirect_uri, code_verifier: verifier }),
  });
  const body = await token.json();
  expect(token.status === 200, `token: HTTP ${token.status} ${JSON.stringify(body)}`);
  idToken = body.id_token;
  expect(typeof idToken === "string", "no ID token");
});
await check("the ID token is RS256, verifies against the JWKS and carries sub, name and roles", async () => {
  const [h, p, s] = idToken.split(".");
  const header = JSON.parse(Buffer.from(h, "base64url"));
  const claims = JSON.parse(Buffer.from(p, "base64url"));
  expect(header.alg === "RS256", `alg ${header.alg}`);
  const { keys } = await (await http(discovery.jwks_uri)).json();
  const jwk = keys.find((k) => k.kid === header.kid);
  expect(jwk && !("d" in jwk), "the signing key is not published (or its private part is)");
  expect(verify("RSA-SHA256", Buffer.from(`${h}.${p}`), createPublicKey({ key: jwk, format: "jwk" }), Buffer.from(s, "base64url")), "bad signature");
  expect(claims.iss === issuer && claims.aud === "vfps-ui" && claims.nonce === nonce, `iss/aud/nonce: ${claims.iss} ${claims.aud}`);
  expect(claims.sub === "admin" && claims.name === "Ada Admin", `sub/name: ${claims.sub} ${claims.name}`);
  expect(JSON.stringify(claims.roles) === '["vfps-admin"]', `roles: ${JSON.stringify(claims.roles)}`);
});
await check("sign-out returns only to the registered <base>/ui/authentication/logout", async () => {
  const end = (to) => http(`${discovery.end_session_endpoint}?${form({ client_id: "vfps-ui", id_token_hint: idToken, post_logout_redirect_uri: to })}`);
  const good = await end(`${base}/ui/authentication/logout`);
  expect(good.status === 200 && (await good.text()).includes("op.logoutForm"), `registered return: HTTP ${good.status}`);
  const bad = await end(`${base}/ui/`);
  expect(bad.status === 400, `unregistered return: HTTP ${bad.status}`);
});
await check("the provider logged the pushed request and the grant", async () => {
  expect(log.includes("pushed_authorization_request.success") && log.includes("grant.success"), log);
});

child.kill("SIGTERM");
console.log(`provider-check: ${failed ? `${failed} failed` : "all passed"}`);
process.exit(failed ? 1 : 0);
