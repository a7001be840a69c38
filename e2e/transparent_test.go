package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// transparentOverride is the compose file of transparent proxy mode.
const transparentOverride = "deploy/transparent/compose.transparent.yml"

// TestTransparentMode brings the stack up in transparent proxy mode
// (deploy/transparent/compose.transparent.yml) and checks, through the MCP
// client and from the sandbox itself, that runs without any proxy setting
// still get their credentials substituted and their policy enforced by
// the proxy, that the sandbox user reaches nothing but the proxy (through
// the redirect of ports 80 and 443) and Docker's DNS, that the proxy keeps
// no privilege, and that a stopped proxy leaves the sandbox locked out.
func TestTransparentMode(t *testing.T) {
	st := startStack(t, transparentOverride)
	cs := st.connect(t, nil)

	t.Run("CredentialSubstitution", func(t *testing.T) { testTransparentCredentials(t, st, cs) })
	// The proxy reads .env as root, then gives root up: a reload still
	// reads it (settings.Dotenv, through the descriptor it opened).
	t.Run("SecretAddedWithoutRestart", func(t *testing.T) { testSecretAddedWithoutRestart(t, st, cs, false) })
	t.Run("RestrictedMethod", func(t *testing.T) { testRestrictedMethod(t, st, cs) })
	t.Run("UnconfiguredHostRefused", func(t *testing.T) { testTransparentUnconfigured(t, st, cs) })
	t.Run("RawTCPOnlyThroughRedirect", func(t *testing.T) { testTransparentRawTCP(t, st) })
	t.Run("ProxyUnprivileged", func(t *testing.T) { testTransparentPrivileges(t, st) })
	t.Run("ProxyStoppedSandboxLockedOut", func(t *testing.T) { testTransparentProxyStopped(t, st, cs) })
}

func testTransparentCredentials(t *testing.T, st *stack, cs *mcp.ClientSession) {
	res := run(t, cs, echoFetch("GET", map[string]string{"Authorization": "Bearer " + tokenName}), map[string]any{"apis": []string{apiName}})
	out := text(res)
	if res.IsError {
		t.Fatalf("fetch through the transparent proxy failed: %s\n%s", out, st.diagnostics())
	}
	checkEcho(t, st, res)
	// No per-run identity in this mode: the run's own log is empty, the
	// proxy's log has the request under the shared "transparent" identity.
	if net := structured(t, res).Network; len(net) != 0 {
		t.Errorf("network log %+v; a transparent-mode run has none of its own", net)
	}
	logs := st.mustCompose(t, "logs", "--no-color", "proxy")
	if !regexp.MustCompile(`run=transparent .*host=api.* status=200 injected=true`).MatchString(logs) {
		t.Errorf("the proxy's log lacks the injected request of run \"transparent\":\n%s", logs)
	}
	if strings.Contains(logs, st.secret) {
		t.Error("the proxy's log holds the secret value")
	}
}

// testTransparentUnconfigured checks both layers: Deno's permissions refuse
// a host outside the run's APIs, and — for code that had every permission
// — the proxy refuses it after the redirect. The host is the server's
// container name: resolvable inside Docker, so no lookup leaves the machine.
func testTransparentUnconfigured(t *testing.T, st *stack, cs *mcp.ClientSession) {
	code := `for (const url of ["https://server/", "http://server/"]) {
  try {
    const r = await fetch(url);
    console.log(url + " status " + r.status);
  } catch (e) {
    console.log(url + " refused " + e.name);
  }
}`
	res := run(t, cs, code, nil)
	if out := stdout(res); strings.Count(out, " refused ") != 2 {
		t.Errorf("from execute_code, an unconfigured host was not refused by Deno's permissions: %s", text(res))
	}

	// Deno with all permissions, as the sandbox user: the proxy answers
	// for the server, with a 403 that says the host is not configured.
	probe := `for (const url of ["https://server/health", "http://server/health"]) {
  try {
    const r = await fetch(url);
    console.log(url + " status " + r.status + " " + (await r.text()).trim());
  } catch (e) {
    console.log(url + " refused " + e.message);
  }
}`
	out, err := st.sandboxExec(t, "10001:10001", "env", "DENO_CERT=/ca/ca.pem", "deno", "eval", "--quiet", probe)
	if err != nil {
		t.Fatalf("deno eval in the sandbox: %v\n%s", err, out)
	}
	for _, url := range []string{"https://server/health", "http://server/health"} {
		if !strings.Contains(out, url+" status 403 codeforge proxy: host server is not configured") {
			t.Errorf("%s from the sandbox with every Deno permission: want the proxy's 403, got:\n%s", url, out)
		}
	}
	if logs := st.mustCompose(t, "logs", "--no-color", "proxy"); !strings.Contains(logs, "blocked=host_not_allowed") {
		t.Errorf("the proxy's log has no host_not_allowed refusal:\n%s", logs)
	}
}

func testTransparentRawTCP(t *testing.T, st *stack) {
	// A listener of the test's own on the host stands for any host service.
	hostPort, accepted := hostListener(t)

	// Ports 80 and 443 connect (the proxy takes them), by name too: the
	// sandbox user resolves through Docker's DNS in this mode.
	for _, target := range []string{apiHost, st.containerIP(t, "api", "egress")} {
		if err := st.tcpProbe(t, target, 443); err != nil {
			t.Fatalf("the probe cannot reach %s:443 through the redirect (it must): %v", target, err)
		}
	}
	if out, err := st.sandboxExec(t, "10001:10001", "getent", "hosts", apiHost); err != nil {
		t.Errorf("the sandbox user cannot resolve %s through Docker's DNS (transparent mode needs it): %v %s", apiHost, err, out)
	}
	targets := []struct {
		name, host string
		port       int
	}{
		{"the server", "server", 8080},
		{"the server by address", st.containerIP(t, "server", "egress"), 8080},
		{"the proxy's control API", "proxy-control", 3129},
		{"the proxy's control API by address", st.containerIP(t, "netguard", "control-net"), 3129},
		{"the proxy's port, dialled directly", "127.0.0.1", 3128},
		{"the host through the egress network's gateway", st.networkGateway(t, "egress"), hostPort},
		{"another DNS server", st.networkGateway(t, "egress"), 53},
	}
	for _, tg := range targets {
		if err := st.tcpProbe(t, tg.host, tg.port); err == nil {
			t.Errorf("the sandbox reached %s (%s:%d)", tg.name, tg.host, tg.port)
		}
	}
	if peers := accepted(); len(peers) > 0 {
		t.Errorf("the host listener accepted connections from %v", peers)
	}
}

// testTransparentPrivileges checks who runs what: the proxy dropped to
// 10001:10002 with no capability after installing its rules, which are in
// the namespace the sandbox shares; netguard holds nothing.
func testTransparentPrivileges(t *testing.T, st *stack) {
	status := func(service string) string {
		pid := inspect(t, st.container(t, service), "{{.State.Pid}}")
		data, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatalf("status of %s: %v", service, err)
		}
		return string(data)
	}
	for _, c := range []struct {
		service string
		res     []string
	}{
		{"proxy", []string{`(?m)^Uid:\s+10001\s+10001\s+10001\s+10001$`, `(?m)^Gid:\s+10002\s+10002\s+10002\s+10002$`, `(?m)^Groups:\s*$`}},
		{"netguard", []string{`(?m)^Uid:\s+65534\s`}},
	} {
		s := status(c.service)
		for _, re := range append(c.res, `(?m)^CapEff:\s+0+$`, `(?m)^CapPrm:\s+0+$`) {
			if !regexp.MustCompile(re).MatchString(s) {
				t.Errorf("%s's process does not match %s:\n%s", c.service, re, s)
			}
		}
	}
	pid := inspect(t, st.container(t, "sandbox"), "{{.State.Pid}}")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rules, err := exec.CommandContext(ctx, "nsenter", "--net=/proc/"+pid+"/ns/net", "iptables", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables in the sandbox's namespace: %v\n%s", err, rules)
	}
	if !strings.Contains(string(rules), "-A OUTPUT -m owner --uid-owner 10001 --gid-owner 10001 -j CODEFORGE-PROXY") {
		t.Errorf("the sandbox's namespace lacks the lockdown of uid 10001:\n%s", rules)
	}
	if !strings.Contains(st.mustCompose(t, "logs", "--no-color", "proxy"), "running unprivileged") {
		t.Error("the proxy did not log that it dropped its privileges")
	}
}

func testTransparentProxyStopped(t *testing.T, st *stack, cs *mcp.ClientSession) {
	fetch := echoFetch("GET", map[string]string{"Authorization": "Bearer " + tokenName})
	apis := map[string]any{"apis": []string{apiName}}
	apiIP := st.containerIP(t, "api", "egress")

	st.mustCompose(t, "stop", "proxy")
	if logs := st.mustCompose(t, "logs", "--no-color", "proxy"); !strings.Contains(logs, "transparent rules kept") {
		t.Errorf("the stopping proxy did not say it keeps its rules:\n%s", logs)
	}
	// The rules outlive the proxy: the sandbox gets nowhere, not out.
	for _, port := range []int{443, 80} {
		if err := st.tcpProbe(t, apiIP, port); err == nil {
			t.Errorf("with the proxy stopped the sandbox reached the api container at %s:%d", apiIP, port)
		}
	}
	out, err := st.sandboxExec(t, "10001:10001", "deno", "eval", "--quiet",
		`try { await fetch("https://`+apiHost+`/echo"); console.log("reached") } catch (e) { console.log("refused " + e.message) }`)
	if err != nil || !strings.HasPrefix(out, "refused ") {
		t.Errorf("with the proxy stopped, a fetch from the sandbox: %v %s; want it refused", err, out)
	}

	st.mustCompose(t, "start", "proxy")
	st.waitReady(t, 2*time.Minute)
	if res := run(t, cs, fetch, apis); res.IsError || !strings.HasPrefix(stdout(res), "200\n") {
		t.Fatalf("a fetch after the proxy came back: %s", text(res))
	}
}

// TestComposeTransparentHardening reads docker-compose.yml with the
// transparent override as Compose resolves it and checks what the mode
// relies on: the proxy starts as root with exactly the capabilities it
// needs and drops to a group of its own; its rules name the sandbox's
// user; only the proxy and the sandbox share netguard's namespace, which
// holds nothing; the server passes runs no proxy URL. Quick: it needs the
// compose CLI, not a running stack.
func TestComposeTransparentHardening(t *testing.T) {
	out := resolvedCompose(t, transparentOverride)
	var c struct {
		Services map[string]struct {
			ReadOnly    bool     `json:"read_only"`
			CapDrop     []string `json:"cap_drop"`
			CapAdd      []string `json:"cap_add"`
			SecurityOpt []string `json:"security_opt"`
			Privileged  bool     `json:"privileged"`
			Restart     string   `json:"restart"`
			User        string   `json:"user"`
			Command     []string `json:"command"`
			Image       string   `json:"image"`
			MemLimit    string   `json:"mem_limit"`
			NetworkMode string   `json:"network_mode"`
			Networks    map[string]any
			Environment map[string]*string
			Volumes     []struct{ Source, Target string }
		}
	}
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("compose config JSON: %v", err)
	}
	names := slices.Sorted(maps.Keys(c.Services))
	if want := []string{"dockerfilter", "netguard", "proxy", "sandbox", "server"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	for name, s := range c.Services {
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) || s.Privileged ||
			!slices.Contains(s.SecurityOpt, "no-new-privileges:true") || s.Restart != "unless-stopped" {
			t.Errorf("%s: want read_only, cap_drop [ALL], no-new-privileges, restart unless-stopped, not privileged", name)
		}
		if s.NetworkMode == "service:netguard" && name != "proxy" && name != "sandbox" {
			t.Errorf("%s shares netguard's network namespace; only the proxy and the sandbox may", name)
		}
		if len(s.CapAdd) > 0 && name != "proxy" {
			t.Errorf("%s: cap_add %v; in transparent mode only the proxy adds capabilities", name, s.CapAdd)
		}
	}

	px, sb, ng, srv := c.Services["proxy"], c.Services["sandbox"], c.Services["netguard"], c.Services["server"]
	if caps := slices.Sorted(slices.Values(px.CapAdd)); !slices.Equal(caps, []string{"NET_ADMIN", "SETGID", "SETUID"}) {
		t.Errorf("proxy cap_add %v, want exactly NET_ADMIN (iptables), SETUID and SETGID (to drop root)", px.CapAdd)
	}
	if px.MemLimit == "" || px.Environment["GOMEMLIMIT"] == nil {
		t.Errorf("proxy: mem_limit %q, GOMEMLIMIT %v; want both kept from docker-compose.yml", px.MemLimit, px.Environment["GOMEMLIMIT"])
	}
	if px.NetworkMode != "service:netguard" || len(px.Networks) > 0 || !strings.Contains(px.Image, "proxy-transparent") {
		t.Errorf("proxy: network_mode %q, networks %v, image %q; want netguard's namespace and the transparent image", px.NetworkMode, px.Networks, px.Image)
	}
	sbUID, sbGID, _ := strings.Cut(sb.User, ":")
	if sb.NetworkMode != "service:netguard" || sbUID == "0" || sbGID == "" || len(sb.CapAdd) > 0 || len(sb.Environment) > 0 {
		t.Errorf("sandbox: network_mode %q, user %q, cap_add %v, environment %v", sb.NetworkMode, sb.User, sb.CapAdd, sb.Environment)
	}
	flags := map[string]string{}
	for _, a := range px.Command {
		if k, v, ok := strings.Cut(a, "="); ok {
			flags[k] = v
		}
	}
	runUID, runGID, _ := strings.Cut(flags["--run-as"], ":")
	switch {
	case px.User != "0:0" || flags["--mode"] != "transparent":
		t.Errorf("proxy: user %q, command %v; want root dropping privileges in transparent mode", px.User, px.Command)
	case flags["--transparent-uid"] != sbUID || flags["--transparent-gid"] != sbGID:
		t.Errorf("proxy rules for %s:%s, but the sandbox runs as %s", flags["--transparent-uid"], flags["--transparent-gid"], sb.User)
	case runUID == "" || runUID == "0" || runGID == sbGID:
		t.Errorf("proxy --run-as %q: want a non-root user whose group is not the sandbox's (%s), or it would lock itself out", flags["--run-as"], sbGID)
	case flags["--transparent-dns"] != "127.0.0.11" || !strings.HasPrefix(flags["--listen"], "127.0.0.1:"):
		t.Errorf("proxy: DNS %q, listen %q; want Docker's resolver only, and the loopback listener REDIRECT targets", flags["--transparent-dns"], flags["--listen"])
	}
	if ng.User == "" || strings.HasPrefix(ng.User, "0:") || len(ng.Volumes) > 0 || ng.NetworkMode != "" {
		t.Errorf("netguard: user %q, volumes %v, network_mode %q; want an unprivileged holder of the namespace", ng.User, ng.Volumes, ng.NetworkMode)
	}
	if nets := slices.Sorted(maps.Keys(ng.Networks)); !slices.Equal(nets, []string{"control-net", "egress"}) {
		t.Errorf("netguard networks %v, want control-net and egress", nets)
	}
	if u := srv.Environment["SANDBOX_PROXY_URL"]; u == nil || *u != "none" || srv.NetworkMode != "" {
		t.Errorf("server: SANDBOX_PROXY_URL %v, network_mode %q; want none and a namespace of its own", u, srv.NetworkMode)
	}
}
