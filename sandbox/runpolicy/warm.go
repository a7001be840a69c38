package runpolicy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// A warm process is a deno started before its run is known: it runs
// Bootstrap, which waits on stdin for one Claim (a JSON line), then
// narrows its own permissions to the run's and imports the run's code
// from CodeFile. It runs exactly one run and is never reused.
//
// It starts with the permissions of WarmArgs: those of a run with the
// warm Spec, except that it may set (never read back) the proxy
// variables, which the claim then revokes with everything the run may
// not have. Deno's revocations are final (--no-prompt: nothing can ask
// for them back), and they all happen before the first line of the
// run's code.

// ProxyEnvKeys are the variables a warm process sets when claimed.
var ProxyEnvKeys = []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "NO_PROXY", "no_proxy"}

// BootstrapName is the warm process's main module, in its cache
// directory beside the other WarmFiles and the run's code (CodeName).
const (
	BootstrapName = "bootstrap.js"
	entryName     = "entry.js"
	sealName      = "seal.js"
	CodeName      = "main.ts"
)

// CodeFile is where a warm run's code is written before the claim: in
// the run's cache directory, which the code itself cannot read.
func CodeFile(scratch string) string { return CacheDir(scratch) + "/" + CodeName }

// WarmArgs is the deno command line of a warm process for spec (whose
// cache directory holds WarmFiles): a run's, except that it may set
// (never read back) the proxy variables, may read its cache directory
// until the code starts, and runs the bootstrap instead of stdin.
func WarmArgs(s Spec) []string {
	args := Args(s)
	for i, a := range args {
		switch {
		case a == "--deny-env":
			args[i] = "--allow-env=" + strings.Join(ProxyEnvKeys, ",")
		case strings.HasPrefix(a, "--allow-read="):
			args[i] = a + "," + CacheDir(s.Scratch)
		}
	}
	args[len(args)-1] = CacheDir(s.Scratch) + "/" + BootstrapName // in place of "-" (stdin)
	return args
}

// WarmFiles are the files a warm process for spec needs in its cache
// directory, by name. The bootstrap imports entry.js, which imports
// seal.js and then the code: ES modules evaluate in import order once
// all are loaded, so seal.js revokes the reading of the cache directory
// (the code's own source included) before the first line of the code.
// (Deno checks read permission for a dynamic import: the bootstrap cannot
// revoke it before it imports the code.)
func WarmFiles(s Spec) map[string]string {
	cache, _ := json.Marshal(CacheDir(s.Scratch))
	return map[string]string{
		BootstrapName: Bootstrap,
		entryName:     "import \"./" + sealName + "\";\nimport \"./" + CodeName + "\";\n",
		sealName: "Deno.permissions.revokeSync({ name: \"read\", path: " + string(cache) + " });\n" +
			"if (Deno.permissions.querySync({ name: \"read\", path: " + string(cache) + " }).state === \"granted\") {\n" +
			"  Deno.stderr.writeSync(new TextEncoder().encode(\"codeforge-run: could not revoke the cache\\n\"));\n  Deno.exit(125);\n}\n",
	}
}

// ReadyByte is the one byte a warm process writes to stdout once it has
// started and waits for its claim; its runner reads it (it is never a
// run's output) and only then counts the process as warm.
const ReadyByte = 0x06

// Claim is what a warm process gets on stdin when a run takes it.
type Claim struct {
	// Proxy is the run's proxy identity ("" for none).
	Proxy string `json:"proxy"`
	// NoNet revokes all network access; else RevokeHosts names the
	// hosts of the warm Spec that the run may not reach.
	NoNet       bool     `json:"no_net"`
	RevokeHosts []string `json:"revoke_hosts"`
	// RevokeRead names the warm Spec's extra read paths the run may not
	// read.
	RevokeRead []string `json:"revoke_read"`
	// End is the run's end token (see EndPrefix); "" writes no end line.
	End string `json:"end,omitempty"`
	// NodeExit says the code may add Node process "exit" listeners (it
	// mentions process): the end line waits for them.
	NodeExit bool `json:"node_exit,omitempty"`
}

// Covers reports whether a warm process started with warm can serve a
// run that needs run (with proxy, or none when ""), and the claim that
// narrows it. Paths other than the read paths (scratch, skills, cache,
// CA) are the warm process's own.
func Covers(warm, run Spec) (Claim, bool) {
	if warm.AllHosts != run.AllHosts || warm.MemoryMB != run.MemoryMB || warm.Skills != run.Skills || warm.CACert != run.CACert {
		return Claim{}, false
	}
	c := Claim{Proxy: run.ProxyURL}
	if !run.AllHosts {
		for _, h := range run.Hosts {
			if !slices.Contains(warm.Hosts, h) {
				return Claim{}, false
			}
		}
		if len(run.Hosts) == 0 {
			c.NoNet = len(warm.Hosts) > 0
		} else {
			for _, h := range warm.Hosts {
				if !slices.Contains(run.Hosts, h) {
					c.RevokeHosts = append(c.RevokeHosts, h)
				}
			}
		}
	}
	for _, p := range run.ReadPaths {
		if !slices.Contains(warm.ReadPaths, p) {
			return Claim{}, false
		}
	}
	for _, p := range warm.ReadPaths {
		if !slices.Contains(run.ReadPaths, p) {
			c.RevokeRead = append(c.RevokeRead, p)
		}
	}
	return c, true
}

// Union is a spec whose permissions cover both a and b, which must agree
// on everything but hosts and read paths (else it is b): what a warm
// process must be started with to serve the runs of both.
func Union(a, b Spec) Spec {
	if a.AllHosts != b.AllHosts || a.MemoryMB != b.MemoryMB || a.Skills != b.Skills || a.CACert != b.CACert {
		return b
	}
	b.Hosts = slices.Clone(b.Hosts)
	b.ReadPaths = slices.Clone(b.ReadPaths)
	for _, h := range a.Hosts {
		if !slices.Contains(b.Hosts, h) {
			b.Hosts = append(b.Hosts, h)
		}
	}
	for _, r := range a.ReadPaths {
		if !slices.Contains(b.ReadPaths, r) {
			b.ReadPaths = append(b.ReadPaths, r)
		}
	}
	return b
}

// Line is c as the one line the bootstrap reads.
func (c Claim) Line() ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode claim: %w", err)
	}
	return append(b, '\n'), nil
}

// Bootstrap is the warm process's main module. It reads the claim, sets
// the proxy variables, revokes what the run may not have (env access
// always), checks that each revocation took, and imports the code. A
// failure before the code runs exits with ExitRefused and a message that
// starts with MessagePrefix.
const Bootstrap = `// CodeForge warm bootstrap (sandbox/runpolicy): one run, then exit.
// What the end line needs is taken now, before any code of the run can
// change the globals it comes from.
// Node's process object costs tens of milliseconds of CPU to set up:
// only its getter is taken now, and called only if the code uses it.
const processProp = Object.getOwnPropertyDescriptor(globalThis, "process");
const encode = TextEncoder.prototype.encode.bind(new TextEncoder());
const writeOut = Deno.stdout.writeSync.bind(Deno.stdout);
const writeErr = Deno.stderr.writeSync.bind(Deno.stderr);
const { revokeSync, querySync } = Object.fromEntries(["revokeSync", "querySync"].map((k) => [k, Deno.permissions[k].bind(Deno.permissions)]));
const lstatSync = Deno.lstatSync;
const NotFound = Deno.errors.NotFound;
const exitCode = Object.getOwnPropertyDescriptor(Deno, "exitCode").get;
// The code may replace any of these by the time the end line is written:
// calls go through Reflect.apply on the originals, and every permission
// descriptor has no prototype (else a property the code put on
// Object.prototype, such as path, would narrow a revocation to nothing).
const apply = Reflect.apply;
const stateOf = Object.getOwnPropertyDescriptor(Deno.PermissionStatus.prototype, "state").get;
const hasInstance = Function.prototype[Symbol.hasInstance];
const addListener = EventTarget.prototype.addEventListener;
const removeListener = EventTarget.prototype.removeEventListener;
const outDir = Deno.cwd() + "/out"; // the code may change its working directory
const granted = (d) => apply(stateOf, querySync(d), []) === "granted";
const fail = (msg) => {
  writeErr(encode("codeforge-run: " + msg + "\n"));
  Deno.exit(125);
};
writeOut(encode("\x06")); // ReadyByte: started, waiting for the claim
// The claim is read with blocking reads: nothing else has to run
// meanwhile, and a blocked read wakes fastest.
const chunks = [];
for (let buf = new Uint8Array(4096), n; (n = Deno.stdin.readSync(buf)) !== null; ) chunks.push(buf.slice(0, n));
let claim;
try {
  claim = JSON.parse(new TextDecoder().decode(await new Blob(chunks).arrayBuffer()));
} catch (e) {
  fail("bad claim: " + e.message);
}
if (claim.proxy) {
  for (const k of ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"]) Deno.env.set(k, claim.proxy);
  Deno.env.set("NO_PROXY", "");
  Deno.env.set("no_proxy", "");
}
const revoke = [{ __proto__: null, name: "env" }];
if (claim.no_net) revoke.push({ __proto__: null, name: "net" });
for (const host of claim.revoke_hosts ?? []) revoke.push({ __proto__: null, name: "net", host });
for (const path of claim.revoke_read ?? []) revoke.push({ __proto__: null, name: "read", path });
for (const d of revoke) {
  revokeSync(d);
  if (granted(d)) fail("could not revoke " + JSON.stringify(d));
}
if (typeof claim.end === "string" && claim.end !== "") {
  const token = claim.end;
  const nodeExit = claim.node_exit === true;
  const end = () => {
    let out = 1;
    try {
      const write = { __proto__: null, name: "write" };
      revokeSync(write);
      if (!granted(write) && !granted({ __proto__: null, name: "write", path: outDir })) {
        try {
          lstatSync(outDir);
        } catch (e) {
          if (apply(hasInstance, NotFound, [e])) out = 0;
        }
      }
    } catch {
      // out stays 1: the runner looks.
    }
    const line = encode("\x1ecodeforge-end:" + token + ":" + ((apply(exitCode, Deno, []) ?? 0) & 255) + ":" + out + "\n");
    try {
      writeOut(line);
      writeErr(line);
    } catch {
      // A closed stream: the run is answered when deno exits.
    }
  };
  // The end line must come after everything the code still does once
  // its event loop is empty: its "unload" listeners and, if it uses
  // Node's process object, its "exit" listeners. At each "beforeunload"
  // (dispatched when the loop is empty, before "unload"), last() is moved
  // behind every "unload" listener added so far; last() writes the line
  // from a process "exit" listener if the code may have added some, else
  // at once. Whether it may: the runner saw "process" in its code
  // (claim.node_exit), or it read the global (the getter below notes it).
  // The code can dispatch these events itself, or take end() from a
  // replaced process.once, and so have its end line written early: that
  // only ends its own run sooner (its runner kills it at the line).
  let touched = false;
  if (processProp?.get && processProp.configurable) {
    Object.defineProperty(globalThis, "process", {
      ...processProp,
      get() {
        touched = true;
        return apply(processProp.get, this, []);
      },
    });
  }
  const last = () => {
    if ((nodeExit || touched) && processProp?.get) apply(processProp.get, globalThis, []).once("exit", end);
    else end();
  };
  apply(addListener, globalThis, ["beforeunload", () => {
    apply(removeListener, globalThis, ["unload", last]);
    apply(addListener, globalThis, ["unload", last]);
  }]);
}
await import(new URL("./entry.js", import.meta.url).href);
`
