// What the chaos harness's browser probe (probe.mjs) costs the machine, on
// its own: vfps (SQLite) and the test OpenID provider on loopback, the probe
// signed in and stepping for --seconds, and the CPU time (utime + stime from
// /proc, children reaped meanwhile included) of the probe's whole process
// tree — node and every Chromium process — over a window that starts once
// the probe has signed in. Printed as cores (CPU seconds per second) and as
// a share of the machine; vfps's and the provider's beside it.
//
//   node probe-cost.mjs --vfps target/release/vfps [--seconds 60] [--warmup 10] [--browser PATH]
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync, existsSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { spawn } from "node:child_process";
import { Vfps, freePort, startProvider, until } from "./lib/processes.mjs";

const { values: args } = parseArgs({
  options: {
    vfps: { type: "string", default: "target/release/vfps" },
    seconds: { type: "string", default: "60" },
    warmup: { type: "string", default: "10" },
    browser: { type: "string", default: "/usr/bin/chromium-headless-shell" },
  },
});
const here = dirname(fileURLToPath(import.meta.url));
const bin = resolve(args.vfps);
const seconds = Number(args.seconds);
const warmup = Number(args.warmup);
const work = mkdtempSync(join(tmpdir(), "vfps-probe-cost-"));
const ports = { idp: await freePort(), http: await freePort(), grpc: await freePort(), metrics: await freePort() };
const base = `http://127.0.0.1:${ports.http}`;
const secret = randomBytes(24).toString("hex");
const provider = await startProvider(work, { here, port: ports.idp, bases: [base], secret });
const vfps = new Vfps({
  bin, dir: work, name: "vfps", ports, env: {
    Authorization__IsEnabled: "true",
    Authorization__Authority: provider.issuer,
    Authorization__RequireHttpsMetadata: "false",
    Authorization__ClientId: "vfps-ui",
    Authorization__ClientSecret: secret,
    Authorization__AdminRoles__0: "vfps-admin",
    Authorization__NamespaceRules__0__Namespace: "*",
    Authorization__NamespaceRules__0__WriteRoles__0: "vfps-admin",
    Authorization__NamespaceRules__0__ReadRoles__0: "vfps-admin",
    Authorization__NamespaceRules__0__ReverseLookupRoles__0: "vfps-admin",
    VFPS_UI_SESSION_KEY: randomBytes(32).toString("hex"),
    "Init__v1__Namespaces__0__Name": "resilience",
    "Init__v1__Namespaces__0__PseudonymGenerationMethod": "FullRandomHexEncoded",
    "Init__v1__Namespaces__0__PseudonymLength": "32",
  },
});
await vfps.start();

const ticks = 100; // USER_HZ on Linux
/** Every process: pid → [ppid, utime + stime + cutime + cstime in ticks]. */
function snapshot() {
  const all = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
      all.set(Number(d), [Number(f[1]), Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])]);
    } catch {}
  }
  return all;
}
/** The pids of `root`'s tree. */
function tree(all, root) {
  const out = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, [ppid]] of all) if (out.has(ppid) && !out.has(pid)) { out.add(pid); grew = true; }
  }
  return out;
}
/** CPU seconds `root`'s tree used between two snapshots (a process born meanwhile counts from 0). */
function used(before, after, root) {
  let t = 0;
  for (const pid of tree(after, root)) t += after.get(pid)[1] - (before.get(pid)?.[1] ?? 0);
  return t / ticks;
}

const steps = join(work, "ui-steps.jsonl");
const probe = spawn(process.execPath, [join(here, "probe.mjs"), "--base", base, "--namespace", "resilience",
  "--seconds", String(seconds + warmup + 5), "--seed", "c057", "--out", steps, "--browser", args.browser], { stdio: ["ignore", "inherit", "inherit"] });
await until("the probe's sign-in", () => existsSync(steps) && readFileSync(steps, "utf8").includes("sign-in"), 60_000);
await new Promise((r) => setTimeout(r, warmup * 1000));
const before = snapshot();
const started = performance.now();
await new Promise((r) => setTimeout(r, seconds * 1000));
const after = snapshot();
const window = (performance.now() - started) / 1000;
const lines = readFileSync(steps, "utf8").trim().split("\n").map((l) => JSON.parse(l));
const inWindow = lines.filter((l) => l.t * 1000 >= Date.now() - window * 1000);
const cores = availableParallelism();
const line = (what, cpu) =>
  console.log(`${what.padEnd(34)} ${cpu.toFixed(1).padStart(6)} CPU s  ${(cpu / window).toFixed(3)} cores  ${(100 * cpu / window / cores).toFixed(1).padStart(5)} % of ${cores} cores`);
console.log(`probe-cost: ${args.browser}, ${window.toFixed(1)} s window, ${inWindow.length} steps in it (${inWindow.filter((l) => !l.ok).length} failed), median step ${median(inWindow.map((l) => l.ms)).toFixed(0)} ms`);
line("browser probe (node + Chromium)", used(before, after, probe.pid));
for (const pid of tree(after, probe.pid)) {
  const cpu = (after.get(pid)[1] - (before.get(pid)?.[1] ?? 0)) / ticks;
  if (cpu < 0.5) continue;
  let what = "?";
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split(/[\0 ]/);
    what = argv[0].split("/").pop() + (argv.find((a) => a.startsWith("--type=")) ?? "");
  } catch {}
  line(`  ${what}`, cpu);
}
line("vfps", used(before, after, vfps.child.process.pid));
line("identity provider", used(before, after, provider.child.process.pid));
probe.kill("SIGTERM");
await vfps.stop();
await provider.child.stop();
process.exit(0);

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : 0;
}
