package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/codeforge/codeforge/dockerfilter"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/gate"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/docker"
)

// The docker backend's settings, from the environment (compose sets them):
//
//	DOCKER_HOST               the socket filter, unix:///run/codeforge-filter/docker.sock
//	SANDBOX_CONTAINER         the sandbox's name for the filter (default "sandbox")
//	PROXY_CONTROL_URL         the proxy's control API, e.g. http://proxy:3129
//	PROXY_CONTROL_TOKEN_FILE  the control API's bearer token, written by the
//	                          proxy (or PROXY_CONTROL_TOKEN with the value)
//	SANDBOX_PROXY_URL         the proxy as the sandbox reaches it, e.g. http://proxy:3128;
//	                          "none" for a proxy in transparent mode (runs get no
//	                          proxy settings: iptables sends their HTTP(S) to it)
const (
	envDockerHost        = "DOCKER_HOST"
	envSandboxContainer  = "SANDBOX_CONTAINER"
	envControlURL        = "PROXY_CONTROL_URL"
	envControlToken      = "PROXY_CONTROL_TOKEN"
	envControlTokenFile  = "PROXY_CONTROL_TOKEN_FILE"
	envSandboxProxyURL   = "SANDBOX_PROXY_URL"
	controlTokenMinChars = 16
	// sandboxProxyNone is SANDBOX_PROXY_URL's value for a transparent proxy.
	sandboxProxyNone = "none"
)

// buildDockerBackend builds the Docker sandbox runner and the gate of the
// proxy container for `serve --sandbox docker`. Nothing is contacted here:
// the proxy's token file may not exist yet when the server starts, so the
// gate reads it when first needed, and /health (Ready) stays "starting"
// until the proxy answers and the sandbox passes its check.
func buildDockerBackend(cfg *config) (sandbox.Runner, gate.Gate, error) {
	get := func(name string) string {
		v, _ := cfg.Getenv(name)
		return strings.TrimSpace(v)
	}
	host := get(envDockerHost)
	if host == "" {
		host = docker.DefaultDockerHost
	}
	controlURL, sandboxProxyURL := get(envControlURL), get(envSandboxProxyURL)
	token, tokenFile := get(envControlToken), get(envControlTokenFile)
	switch {
	case controlURL == "":
		return nil, nil, fmt.Errorf("%s is not set: the docker backend needs the proxy's control API (e.g. http://proxy:3129)", envControlURL)
	case sandboxProxyURL == "":
		return nil, nil, fmt.Errorf("%s is not set: give the proxy as the sandbox reaches it (e.g. http://proxy:3128)", envSandboxProxyURL)
	case token == "" && tokenFile == "":
		return nil, nil, fmt.Errorf("neither %s nor %s is set: give the proxy's control token file", envControlTokenFile, envControlToken)
	case token != "" && tokenFile != "":
		return nil, nil, fmt.Errorf("both %s and %s are set: keep one", envControlToken, envControlTokenFile)
	}
	// A transparent proxy (SANDBOX_PROXY_URL=none) hands out no run
	// identities: runs get no proxy settings and no network log of their
	// own, and the control API only tells the server whether the proxy is
	// up. The client then needs some proxy URL; the control URL stands in
	// (it is never given to a run).
	transparent := strings.EqualFold(sandboxProxyURL, sandboxProxyNone)
	if transparent {
		sandboxProxyURL = controlURL
	}
	// Check both URLs now, so a typo fails at start rather than at the
	// first run (the placeholder token is never sent anywhere).
	if _, err := proxy.NewControlClient(controlURL, strings.Repeat("x", controlTokenMinChars), sandboxProxyURL, nil); err != nil {
		if !transparent {
			err = fmt.Errorf("%w (or %s=%s for a proxy in transparent mode)", err, envSandboxProxyURL, sandboxProxyNone)
		}
		return nil, nil, err
	}
	runner, err := docker.New(docker.Options{
		DockerHost: host,
		Container:  get(envSandboxContainer),
		MemoryMB:   cfg.MemoryMB,
		PoolSize:   cfg.PoolSize,
		ProbeAddr:  probeAddr(sandboxProxyURL, transparent),
		Logger:     cfg.Logger,
	})
	if err != nil {
		return nil, nil, err
	}
	cg := &controlGate{controlURL: controlURL, sandboxProxyURL: sandboxProxyURL, token: token, tokenFile: tokenFile, transparent: transparent}
	if transparent {
		cfg.Logger.With("component", "serve").Info("proxy in transparent mode: runs get no proxy settings; their network logs are the proxy's, not per run")
	}
	return &dockerRunner{Runner: runner, gate: cg}, cg, nil
}

// transparentProbeAddr is where a run's connection reaches a transparent
// proxy: any TCP connection of the sandbox user to port 443 is redirected
// to it (deploy/transparent), and without the proxy's rules nothing
// listens there, so the probe fails closed.
const transparentProbeAddr = "127.0.0.1:443"

// probeAddr is the address Ready has the sandbox connect to, to check the
// sandbox → proxy path (/health reports it): the proxy's IPv4 address and
// port from SANDBOX_PROXY_URL, or the redirected port in transparent mode.
// A proxy URL with a host name (no DNS in the compose sandbox) gets no
// probe.
func probeAddr(sandboxProxyURL string, transparent bool) string {
	if transparent {
		return transparentProbeAddr
	}
	u, err := url.Parse(sandboxProxyURL)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	if !dockerfilter.ValidProbeTarget(addr) {
		return ""
	}
	return addr
}

// controlGate is the proxy's control API as a Gate, connected on first
// use: the proxy writes its token file when it starts, which may be after
// the server. The token file is read again at every use, so a token the
// proxy made anew (its file deleted and recreated) is picked up without a
// restart of the server.
type controlGate struct {
	controlURL, sandboxProxyURL string
	token, tokenFile            string
	// transparent: the proxy intercepts runs' traffic by iptables and hands
	// out no per-run identities (SANDBOX_PROXY_URL=none).
	transparent bool

	mu sync.Mutex
	// client is the client for clientToken, the token last read.
	client      *proxy.ControlClient
	clientToken string
}

func (g *controlGate) connect() (*proxy.ControlClient, error) {
	token := g.token
	if token == "" {
		b, err := os.ReadFile(g.tokenFile)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("control token file %s (%s) does not exist yet: is the proxy up?", g.tokenFile, envControlTokenFile)
		}
		if err != nil {
			return nil, fmt.Errorf("control token file (%s): %w", envControlTokenFile, err)
		}
		token = strings.TrimSpace(string(b))
		if len(token) < controlTokenMinChars {
			return nil, fmt.Errorf("control token file %s (%s) is empty or too short: the proxy may still be writing it", g.tokenFile, envControlTokenFile)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.client != nil && g.clientToken == token {
		return g.client, nil
	}
	c, err := proxy.NewControlClient(g.controlURL, token, g.sandboxProxyURL, nil)
	if err != nil {
		return nil, err
	}
	g.client, g.clientToken = c, token
	return c, nil
}

// Open asks the proxy for a run identity. A transparent proxy has none to
// give: the run gets no proxy settings (its traffic reaches the proxy
// anyway) and an empty network log; the apis argument still narrows Deno's
// own network permissions, while the proxy allows every active API.
func (g *controlGate) Open(ctx context.Context, spec gate.RunSpec) (gate.Run, error) {
	if g.transparent {
		return transparentRun{}, nil
	}
	c, err := g.connect()
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return c.Open(ctx, spec)
}

// SharedLog reports a transparent proxy, whose runs have no network log
// of their own (gate.SharedLogGate).
func (g *controlGate) SharedLog() bool { return g.transparent }

// transparentRun is a run through a transparent proxy: no proxy URL, no
// network log of its own.
type transparentRun struct{}

func (transparentRun) ProxyURL() string { return "" }

func (transparentRun) Finish(context.Context) ([]gate.NetEntry, error) { return nil, nil }

// dockerRunner is the docker runner whose readiness also needs the proxy:
// a run without it would fail its first request.
type dockerRunner struct {
	*docker.Runner
	gate *controlGate
}

// Ready reports "starting: …" until the proxy's control API answers and
// the sandbox passes codeforge-run --check (deno starts, the proxy's CA
// is there).
func (r *dockerRunner) Ready(ctx context.Context) error {
	c, err := r.gate.connect()
	if err == nil {
		err = c.Health(ctx)
	}
	if err != nil {
		return fmt.Errorf("starting: proxy: %w", err)
	}
	return r.Runner.Ready(ctx)
}
