// The processes a browser test runs against: the test OpenID provider and
// vfps itself, on free loopback ports, each logging into the run's folder;
// and an API client with an admin token, to check what the pages did.
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";
import { openSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";

/** A loopback port nothing listens on right now. */
export const freePort = () =>
  new Promise((ok, fail) => {
    const s = createServer().once("error", fail).listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });

/** Waits for `check` to answer truthy, retrying every 100 ms until `ms` pass. */
export async function until(what, check, ms = 20_000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      if (await check()) return;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last: ${last.message})` : ""}`);
}

/** A child process whose output goes to `<dir>/<name>.log`, killed when the test ends. */
class Child {
  constructor(name, dir, command, args, env) {
    this.name = name;
    this.log = join(dir, `${name}.log`);
    const out = openSync(this.log, "a");
    this.process = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", out, out] });
    this.exited = once(this.process, "exit");
    Child.all.add(this);
    this.exited.then(() => Child.all.delete(this));
  }

  /** Stops it with `signal` and waits until it has exited. */
  async stop(signal = "SIGTERM") {
    if (this.process.exitCode === null && this.process.signalCode === null) this.process.kill(signal);
    await this.exited;
  }

  text() {
    return readFileSync(this.log, "utf8");
  }

  static all = new Set();
}
process.on("exit", () => {
  for (const c of Child.all) c.process.kill("SIGKILL");
});
// A run stopped from outside (a timeout, ^C) leaves no server behind.
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, () => {
    console.log(`stopped by ${signal}`);
    process.exit(1);
  });
}

/** The test provider (provider.mjs) for vfps at `bases`, ready. */
export async function startProvider(dir, { here, port, bases, secret }) {
  const child = new Child("provider", dir, process.execPath, [
    join(here, "provider.mjs"), "--port", String(port), "--client-secret", secret, ...bases.flatMap((b) => ["--base", b]),
  ]);
  const issuer = `http://127.0.0.1:${port}`;
  await until("the provider's discovery document", async () => {
    if (child.process.exitCode !== null) throw new Error(`the provider exited: ${child.text()}`);
    return (await fetch(`${issuer}/.well-known/openid-configuration`)).ok;
  });
  return { child, issuer, discovery: await (await fetch(`${issuer}/.well-known/openid-configuration`)).json() };
}

/**
 * One vfps replica: its settings (upstream's names where it has them) and
 * its process, restartable on the same database file.
 */
export class Vfps {
  constructor({ bin, dir, name, ports, env }) {
    Object.assign(this, { bin, dir, name, ports });
    this.base = `http://127.0.0.1:${ports.http}`;
    this.env = {
      VFPS_LISTEN_ADDRESS: "127.0.0.1",
      Kestrel__Endpoints__Http__Url: `http://+:${ports.http}`,
      Kestrel__Endpoints__HttpGrpc__Url: `http://+:${ports.grpc}`,
      MetricsPort: String(ports.metrics),
      VFPS_SQLITE_PATH: join(dir, `${name}.sqlite`),
      ...env,
    };
  }

  /** An access token made in the database before the server opens it (`vfps tokens create`). */
  mintToken(args) {
    const r = spawnSync(this.bin, ["tokens", "create", ...args], { env: { ...process.env, ...this.env }, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`vfps tokens create failed (${r.status}): ${r.stderr}`);
    return r.stdout.trim();
  }

  async start() {
    this.child = new Child(this.name, this.dir, this.bin, ["serve"], this.env);
    await until(`${this.name} /readyz`, async () => {
      if (this.child.process.exitCode !== null) throw new Error(`${this.name} exited: ${this.child.text().slice(-2000)}`);
      return (await fetch(`${this.base}/readyz`)).ok;
    }, 30_000);
  }

  async stop(signal) {
    await this.child?.stop(signal);
  }

  logs() {
    return this.child?.text() ?? "";
  }
}

/** The REST API with a bearer token: what the pages did, seen from outside them. */
export function apiClient(base, token) {
  return async (method, path, body) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text };
  };
}
