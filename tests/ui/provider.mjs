// A real OpenID provider for the UI's tests and the chaos harness's browser
// probe: oidc-provider (an OpenID Certified implementation) with vfps's
// confidential client, PKCE required, pushed authorization requests and
// RP-initiated sign-out on, and its own login form (devInteractions) where a
// user types a name. Users: `admin` (role vfps-admin), `reader` (vfps-reader);
// any other name signs in with no role. The ID token carries `name` and
// `roles` (vfps reads the roles from it).
//
// Settings (environment): PROVIDER_HOST (127.0.0.1), PROVIDER_PORT (required),
// VFPS_BASE_URL (vfps's addresses, comma-separated: each one's
// /ui/authentication/callback is a redirect address), CLIENT_ID (vfps-ui),
// CLIENT_SECRET (required). Prints "ready <issuer>" once it listens.
import Provider from "oidc-provider";

const host = process.env.PROVIDER_HOST || "127.0.0.1";
const port = Number(process.env.PROVIDER_PORT);
const bases = (process.env.VFPS_BASE_URL || "").split(",").map((b) => b.trim().replace(/\/$/, "")).filter(Boolean);
const clientId = process.env.CLIENT_ID || "vfps-ui";
const clientSecret = process.env.CLIENT_SECRET;
if (!port || !clientSecret || bases.length === 0) {
  console.error("provider: PROVIDER_PORT, CLIENT_SECRET and VFPS_BASE_URL are required");
  process.exit(2);
}
const issuer = `http://${host}:${port}`;

const users = {
  admin: { name: "Ada Admin", roles: ["vfps-admin"] },
  reader: { name: "Rae Reader", roles: ["vfps-reader"] },
};

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      token_endpoint_auth_method: "client_secret_basic",
      grant_types: ["authorization_code"],
      response_types: ["code"],
      redirect_uris: bases.map((b) => `${b}/ui/authentication/callback`),
      post_logout_redirect_uris: bases.map((b) => `${b}/ui/authentication/logout`),
    },
  ],
  pkce: { required: () => true, methods: ["S256"] },
  features: {
    devInteractions: { enabled: true },
    pushedAuthorizationRequests: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  claims: { openid: ["sub", "roles"], profile: ["name"] },
  conformIdTokenClaims: false,
  ttl: { IdToken: 3600, AccessToken: 3600, Session: 86400, Interaction: 600, Grant: 86400 },
  cookies: { keys: ["vfps-tests-provider-cookie-key"] },
  async findAccount(_ctx, id) {
    const user = users[id] || { name: id, roles: [] };
    return {
      accountId: id,
      async claims() {
        return { sub: id, name: user.name, roles: user.roles };
      },
    };
  },
  // Every client of this provider is vfps: consent is given by signing in.
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

provider.listen(port, host, () => console.log(`ready ${issuer}`));
