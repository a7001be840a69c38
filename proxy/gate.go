package proxy

import "context"

// RunSpec says what one sandbox run may reach through the proxy.
type RunSpec struct {
	// APIs narrows the run to these API names; empty means every active API.
	APIs []string `json:"apis,omitempty"`
}

// NetEntry is one request a run made, as the proxy saw it. It never holds a
// credential value or a query string.
type NetEntry struct {
	Method   string `json:"method"`
	Host     string `json:"host"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	Injected bool   `json:"credential_injected"`
	BytesOut int64  `json:"bytes_out"`
	BytesIn  int64  `json:"bytes_in"`
	// Blocked says why the proxy refused the request, "" when it passed.
	Blocked string `json:"blocked,omitempty"`
	// Notes explain what the proxy did with the request that the code
	// may need to know, e.g. a token name sent as the name because the
	// API does not take credentials there. Never holds a secret.
	Notes []string `json:"notes,omitempty"`
}

// Gate hands out per-run proxy identities and collects their network logs.
// The in-process *Proxy implements it for the local backend; *ControlClient
// implements it against a proxy in another container.
type Gate interface {
	Open(ctx context.Context, spec RunSpec) (Run, error)
}

// Run is one run's identity at the proxy.
type Run interface {
	// ProxyURL is the URL the sandbox uses as HTTP(S)_PROXY, credentials
	// included, e.g. http://run-3f2a:9c…@127.0.0.1:3128.
	ProxyURL() string
	// Finish revokes the identity and returns the run's network log.
	Finish(ctx context.Context) ([]NetEntry, error)
}

// SharedLogGate is implemented by a Gate whose runs have no identity of
// their own at the proxy (a transparent proxy): their network logs stay
// empty, and the proxy's own log has every request.
type SharedLogGate interface {
	Gate
	SharedLog() bool
}

// PerRunLog reports whether g's runs get their own network log.
func PerRunLog(g Gate) bool {
	s, ok := g.(SharedLogGate)
	return g != nil && !(ok && s.SharedLog())
}
