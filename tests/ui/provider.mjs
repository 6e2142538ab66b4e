// A real OpenID provider for the UI's tests and the chaos harness's browser
// probe: oidc-provider (an OpenID Certified implementation) with vfps's
// confidential client (client_secret_basic), PKCE (S256) required, pushed
// authorization requests and RP-initiated sign-out on, an RS256 key made at
// start, and a one-field sign-in page of its own where a user types a name
// (no password, no consent: signing in is consenting). Users: `admin` (role
// vfps-admin), `reader` (vfps-reader); any other name signs in with no role.
// The ID token itself carries `sub`, `name` and `roles`: vfps reads the roles
// from it, not from the userinfo endpoint.
//
// The client registers exactly the addresses docs/ui.md tells operators to
// register, so a UI that sends another one fails here as it would at a real
// provider: `<base>/ui/authentication/callback` and, after sign-out,
// `<base>/ui/authentication/logout`.
//
//   node provider.mjs --port 8089 --base http://127.0.0.1:8080 --client-secret S
//
// Flags or environment: --host / PROVIDER_HOST (127.0.0.1), --port /
// PROVIDER_PORT (required), --base / VFPS_BASE_URL (vfps's addresses, repeat the
// flag or separate by commas), --client-id / CLIENT_ID (vfps-ui),
// --client-secret / CLIENT_SECRET (required). Prints "ready <issuer>" once it
// listens, and a line per sign-in event (never a token or a secret).
import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import Provider from "oidc-provider";

const { values: flags } = parseArgs({
  options: {
    host: { type: "string" },
    port: { type: "string" },
    base: { type: "string", multiple: true },
    "client-id": { type: "string" },
    "client-secret": { type: "string" },
  },
});
const host = flags.host || process.env.PROVIDER_HOST || "127.0.0.1";
const port = Number(flags.port || process.env.PROVIDER_PORT);
const bases = (flags.base || [process.env.VFPS_BASE_URL || ""])
  .flatMap((b) => b.split(","))
  .map((b) => b.trim().replace(/\/$/, ""))
  .filter(Boolean);
const clientId = flags["client-id"] || process.env.CLIENT_ID || "vfps-ui";
const clientSecret = flags["client-secret"] || process.env.CLIENT_SECRET;
if (!Number.isInteger(port) || port <= 0 || !clientSecret || bases.length === 0) {
  console.error("provider: a port (--port or PROVIDER_PORT), a client secret (--client-secret or CLIENT_SECRET) and vfps's address (--base or VFPS_BASE_URL) are required");
  process.exit(2);
}
const issuer = `http://${host}:${port}`;

const users = {
  admin: { name: "Ada Admin", roles: ["vfps-admin"] },
  reader: { name: "Rae Reader", roles: ["vfps-reader"] },
};

// A fresh signing key per run: nothing signed by a previous run verifies.
const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: "jwk" }), alg: "RS256", use: "sig", kid: `run-${Date.now().toString(36)}` };

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1>${escape(title)}</h1>${body}</main></body></html>`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      token_endpoint_auth_method: "client_secret_basic",
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      id_token_signed_response_alg: "RS256",
      redirect_uris: bases.map((b) => `${b}/ui/authentication/callback`),
      post_logout_redirect_uris: bases.map((b) => `${b}/ui/authentication/logout`),
    },
  ],
  jwks: { keys: [signingKey] },
  pkce: { required: () => true, methods: ["S256"] },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    pushedAuthorizationRequests: { enabled: true },
    rpInitiatedLogout: {
      enabled: true,
      // The confirmation, without the default page's web font from the internet.
      logoutSource: async (ctx, form) => {
        ctx.body = page("Sign out", `${form}<p>Sign out of the test provider?</p>
<button autofocus type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>
<button type="submit" form="op.logoutForm">No, stay signed in</button>`);
      },
      postLogoutSuccessSource: async (ctx) => {
        ctx.body = page("Signed out", "<p>You are signed out of the test provider.</p>");
      },
    },
  },
  claims: { openid: ["sub", "roles"], profile: ["name"] },
  conformIdTokenClaims: false,
  // A refresh token with every sign-in (as Keycloak gives one): vfps renews
  // a UI session with it, and the new ID token's roles, at least every 15
  // minutes (VFPS_UI_ROLE_RECHECK_INTERVAL).
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token"),
  ttl: { IdToken: 3600, AccessToken: 3600, RefreshToken: 86400, Session: 86400, Interaction: 600, Grant: 86400 },
  cookies: { keys: [`provider-cookies-${signingKey.kid}`] },
  async findAccount(_ctx, id) {
    const user = users[id] || { name: id, roles: [] };
    return {
      accountId: id,
      async claims() {
        return { sub: id, name: user.name, roles: user.roles };
      },
    };
  },
  // Every client of this provider is vfps: signing in is consenting.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope("openid profile");
    grant.addOIDCClaims(["sub", "name", "roles"]);
    await grant.save();
    return grant;
  },
});
provider.on("server_error", (_ctx, err) => console.error("provider: server error", err));
for (const event of ["pushed_authorization_request.success", "authorization.success", "grant.success", "end_session.success"]) {
  provider.on(event, (ctx) => console.log(`provider: ${event} client=${ctx.oidc?.client?.clientId ?? "-"}`));
}
for (const event of ["pushed_authorization_request.error", "authorization.error", "grant.error", "end_session.error"]) {
  provider.on(event, (_ctx, err) => console.log(`provider: ${event} ${err.error}: ${err.error_description ?? ""}`));
}

/** The sign-in page: one field, the user's name. */
async function interaction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error("interaction mismatch");
  if (req.method === "GET") {
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store" });
    res.end(page("Sign in to the test provider", `
<form method="post" action="/interaction/${escape(uid)}" autocomplete="off">
<p><label for="login">Username</label> <input id="login" name="login" required autofocus></p>
<p><button type="submit">Sign in</button></p></form>`));
    return;
  }
  let body = "";
  for await (const chunk of req) body += chunk;
  const login = new URLSearchParams(body).get("login")?.trim();
  if (!login) {
    res.writeHead(400, { "Content-Type": "text/plain" });
    res.end("a username is required");
    return;
  }
  console.log(`provider: signed in ${login}`);
  await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
}

const callback = provider.callback();
const server = createServer((req, res) => {
  const m = /^\/interaction\/([\w-]+)\/?$/.exec(new URL(req.url, issuer).pathname);
  if (!m) return callback(req, res);
  interaction(req, res, m[1]).catch((e) => {
    console.error("provider: interaction failed", e.message);
    if (!res.headersSent) res.writeHead(400, { "Content-Type": "text/plain" });
    res.end(`sign-in failed: ${e.message}`);
  });
});
server.listen(port, host, () => console.log(`ready ${issuer}`));
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
