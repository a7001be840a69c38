package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// composeConfig is the part of `docker compose config --format json` the
// hardening test reads.
type composeConfig struct {
	Services map[string]struct {
		ReadOnly    bool     `json:"read_only"`
		CapDrop     []string `json:"cap_drop"`
		CapAdd      []string `json:"cap_add"`
		SecurityOpt []string `json:"security_opt"`
		Privileged  bool     `json:"privileged"`
		Restart     string   `json:"restart"`
		User        string   `json:"user"`
		Init        bool     `json:"init"`
		NetworkMode string   `json:"network_mode"`
		Networks    map[string]any
		PidsLimit   int64    `json:"pids_limit"`
		MemLimit    string   `json:"mem_limit"`
		Tmpfs       []string `json:"tmpfs"`
		EnvFile     []any    `json:"env_file"`
		GroupAdd    []string `json:"group_add"`
		Environment map[string]*string
		Ports       []struct {
			HostIP string `json:"host_ip"`
		}
		Volumes []composeVolume
	}
	Networks map[string]struct {
		Internal bool
	}
}

// composeVolume is one resolved mount.
type composeVolume struct {
	Type     string
	Source   string
	Target   string
	ReadOnly bool `json:"read_only"`
	Bind     *struct {
		CreateHostPath bool `json:"create_host_path"`
	}
}

// proxyEnvFile is where docker-compose.yml mounts .env into the proxy.
const proxyEnvFile = "/run/codeforge/.env"

// TestComposeHardening reads docker-compose.yml as Compose resolves it and
// checks the security properties each container must have (SECURITY.md):
// who holds the Docker socket, the CA key and the secrets, which networks
// each service is on, and the sandbox's limits. Deterministic and quick: it
// needs the compose CLI, not a running stack.
func TestComposeHardening(t *testing.T) {
	out := resolvedCompose(t)
	var c composeConfig
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("compose config JSON: %v", err)
	}

	names := make([]string, 0, len(c.Services))
	for name := range c.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"dockerfilter", "netguard", "proxy", "sandbox", "server"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	for name, s := range c.Services {
		if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) || s.Privileged ||
			!slices.Contains(s.SecurityOpt, "no-new-privileges:true") || s.Restart != "unless-stopped" {
			t.Errorf("%s: want read_only, cap_drop [ALL], no-new-privileges, restart unless-stopped, not privileged", name)
		}
		if s.User == "" || strings.HasPrefix(s.User, "0:") && name != "dockerfilter" && name != "netguard" {
			t.Errorf("%s: runs as %q; only dockerfilter (for the engine's socket) and netguard (iptables) may be uid 0", name, s.User)
		}
		if len(s.CapAdd) > 0 && !(name == "netguard" && slices.Equal(s.CapAdd, []string{"NET_ADMIN"})) {
			t.Errorf("%s: cap_add %v; only netguard may add a capability (NET_ADMIN)", name, s.CapAdd)
		}
		for _, v := range s.Volumes {
			if strings.HasSuffix(v.Source, "docker.sock") && name != "dockerfilter" {
				t.Errorf("%s mounts the Docker socket; only dockerfilter may", name)
			}
			if v.Source == "ca-private" && name != "proxy" {
				t.Errorf("%s mounts the CA key volume; only the proxy may", name)
			}
			if v.Source == "control" && name != "proxy" && !v.ReadOnly {
				t.Errorf("%s mounts the control token volume writable", name)
			}
		}
		// The secrets come only through the proxy's read-only mount of
		// .env (re-read on reload); env_file is read once, at creation.
		if len(s.EnvFile) > 0 {
			t.Errorf("%s reads an env_file: the proxy mounts .env instead (re-read on reload), and no one else may hold secrets", name)
		}
		for _, v := range s.Volumes {
			if (strings.HasSuffix(v.Source, "/.env") || v.Target == proxyEnvFile) && name != "proxy" {
				t.Errorf("%s mounts %s at %s: only the proxy may hold secrets", name, v.Source, v.Target)
			}
		}
		if _, ok := s.Environment["CODEFORGE_ENV_FILE"]; ok && name != "proxy" {
			t.Errorf("%s sets CODEFORGE_ENV_FILE: only the proxy reads the secrets", name)
		}
		if len(s.GroupAdd) > 0 && name != "proxy" {
			t.Errorf("%s has group_add %v; only the proxy (to read .env through its group) may", name, s.GroupAdd)
		}
		for _, p := range s.Ports {
			if p.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes a port on %q, want 127.0.0.1 only", name, p.HostIP)
			}
		}
		if len(s.Ports) > 0 && name != "server" {
			t.Errorf("%s publishes a port; only the server may", name)
		}
	}

	px := c.Services["proxy"]
	if ef := px.Environment["CODEFORGE_ENV_FILE"]; ef == nil || *ef != proxyEnvFile {
		t.Errorf("proxy: CODEFORGE_ENV_FILE = %v, want %s (the mounted .env)", ef, proxyEnvFile)
	}
	if !slices.ContainsFunc(px.Volumes, func(v composeVolume) bool {
		return v.Type == "bind" && strings.HasSuffix(v.Source, "/.env") && v.Target == proxyEnvFile && v.ReadOnly &&
			v.Bind != nil && !v.Bind.CreateHostPath
	}) {
		t.Errorf("proxy: no read-only bind mount of .env at %s that refuses a missing file (a directory would be made): %+v", proxyEnvFile, px.Volumes)
	}
	if !slices.Equal(px.GroupAdd, []string{"0"}) {
		t.Errorf("proxy: group_add %v, want [0] (CODEFORGE_ENV_GID's default)", px.GroupAdd)
	}

	sb := c.Services["sandbox"]
	if sb.User != "10001:10001" || len(sb.CapAdd) > 0 || sb.PidsLimit <= 0 || sb.MemLimit == "" || !sb.Init {
		t.Errorf("sandbox: user %q, cap_add %v, pids_limit %d, mem_limit %q, init %v", sb.User, sb.CapAdd, sb.PidsLimit, sb.MemLimit, sb.Init)
	}
	// The proxy reads what every run sends: its memory is capped, and Go's
	// collector knows the cap.
	if px := c.Services["proxy"]; px.MemLimit == "" || px.Environment["GOMEMLIMIT"] == nil {
		t.Errorf("proxy: mem_limit %q, GOMEMLIMIT %v; want both set", px.MemLimit, px.Environment["GOMEMLIMIT"])
	}
	if sb.NetworkMode != "service:netguard" || len(sb.Networks) > 0 {
		t.Errorf("sandbox: network_mode %q, networks %v; want only netguard's namespace", sb.NetworkMode, sb.Networks)
	}
	if len(sb.Tmpfs) != 1 || !strings.HasPrefix(sb.Tmpfs[0], "/tmp:") || !strings.Contains(sb.Tmpfs[0], "size=") {
		t.Errorf("sandbox: tmpfs %v, want /tmp with a size", sb.Tmpfs)
	}
	for _, v := range sb.Volumes {
		switch {
		case v.Source == "skills" && v.Target == "/skills" && !v.ReadOnly:
		case v.Source == "ca-public" && v.Target == "/ca" && v.ReadOnly:
		default:
			t.Errorf("sandbox: unexpected mount %+v (want only skills:/skills and ca-public:/ca:ro)", v)
		}
	}
	if len(sb.Environment) > 0 || len(sb.EnvFile) > 0 {
		t.Errorf("sandbox: has environment %v", sb.Environment)
	}

	onNet := func(service, network string) bool {
		_, ok := c.Services[service].Networks[network]
		return ok
	}
	for name := range c.Services {
		if onNet(name, "sandbox-net") && onNet(name, "egress") && name != "proxy" {
			t.Errorf("%s is on both sandbox-net and egress; only the proxy may be", name)
		}
	}
	if !onNet("proxy", "sandbox-net") || !onNet("proxy", "egress") || !onNet("netguard", "sandbox-net") || len(c.Services["netguard"].Networks) != 1 {
		t.Error("want the proxy on sandbox-net and egress, netguard on sandbox-net alone")
	}
	if onNet("server", "sandbox-net") || c.Services["dockerfilter"].NetworkMode != "none" {
		t.Error("the server must not share a network with the sandbox; the filter needs none")
	}
	for _, n := range []string{"sandbox-net", "control-net"} {
		if !c.Networks[n].Internal {
			t.Errorf("network %s must be internal", n)
		}
	}
	srv := c.Services["server"]
	if dh := srv.Environment["DOCKER_HOST"]; dh == nil || *dh != "unix:///run/codeforge-filter/docker.sock" {
		t.Errorf("server DOCKER_HOST = %v, want the filter's socket", dh)
	}
}
