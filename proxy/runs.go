package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
)

const (
	// maxRuns bounds identities open at once, so a caller that never
	// finishes its runs cannot grow the proxy without limit.
	maxRuns = 4096
	// maxEntries bounds one run's network log; the transparent identity
	// keeps the most recent ones.
	maxEntries = 10000
)

// run is one identity at the proxy and its network log.
type run struct {
	id   string
	user string
	// passHash is sha256 of the password; compared in constant time.
	passHash [32]byte
	// apis is the run's allowlist; nil means every active API.
	apis []string
	ring bool // keep the newest entries rather than the oldest

	mu       sync.Mutex
	entries  []*NetEntry
	dropped  int
	revoked  bool
	tunnels  map[io.Closer]struct{} // open CONNECT tunnels, closed on finish
	inFlight int                    // requests the proxy is working on

	// blobs are the Basic credentials the proxy assembled for this run.
	blobs basicBlobs
}

var (
	errRunFinished    = errors.New("run finished")
	errTooManyTunnels = errors.New("too many tunnels")
)

// addTunnel registers an open tunnel unless the run has finished
// (errRunFinished) or already holds max tunnels (errTooManyTunnels).
func (r *run) addTunnel(c io.Closer, max int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked {
		return errRunFinished
	}
	if len(r.tunnels) >= max {
		return errTooManyTunnels
	}
	if r.tunnels == nil {
		r.tunnels = map[io.Closer]struct{}{}
	}
	r.tunnels[c] = struct{}{}
	return nil
}

// startRequest counts a request in flight; false when max already are.
// Every true is paired with endRequest.
func (r *run) startRequest(max int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight >= max {
		return false
	}
	r.inFlight++
	return true
}

func (r *run) endRequest() {
	r.mu.Lock()
	r.inFlight--
	r.mu.Unlock()
}

func (r *run) dropTunnel(c io.Closer) {
	r.mu.Lock()
	delete(r.tunnels, c)
	r.mu.Unlock()
}

func (r *run) allows(api string) bool {
	return r.apis == nil || slices.Contains(r.apis, api)
}

func (r *run) isRevoked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.revoked
}

// record adds an entry to the log and returns it for later updates (via
// update), or nil when the log is full.
func (r *run) record(e NetEntry) *NetEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.entries) >= maxEntries {
		if !r.ring {
			r.dropped++
			return nil
		}
		r.entries = slices.Delete(r.entries, 0, len(r.entries)/2)
	}
	ep := &e
	r.entries = append(r.entries, ep)
	return ep
}

// update changes a recorded entry under the run's lock.
func (r *run) update(e *NetEntry, f func(*NetEntry)) {
	if e == nil {
		return
	}
	r.mu.Lock()
	f(e)
	r.mu.Unlock()
}

func (r *run) snapshot() ([]NetEntry, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]NetEntry, len(r.entries))
	for i, e := range r.entries {
		out[i] = *e
		out[i].Notes = slices.Clone(e.Notes)
	}
	return out, r.dropped
}

// registry holds the open identities.
type registry struct {
	mu     sync.RWMutex
	byUser map[string]*run
	byID   map[string]*run
}

func newRegistry() *registry {
	return &registry{byUser: map[string]*run{}, byID: map[string]*run{}}
}

// authenticate returns the open run named by a Proxy-Authorization value,
// or nil.
func (g *registry) authenticate(header string) *run {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return nil
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return nil
	}
	g.mu.RLock()
	r := g.byUser[user]
	g.mu.RUnlock()
	h := sha256.Sum256([]byte(pass))
	if r == nil {
		return nil
	}
	if subtle.ConstantTimeCompare(h[:], r.passHash[:]) != 1 || r.isRevoked() {
		return nil
	}
	return r
}

// openRun registers a new identity allowed to use names (nil: all active
// APIs) and returns it with its password.
func (g *registry) open(names []string) (*run, string, error) {
	id, err := randomHex(8)
	if err != nil {
		return nil, "", err
	}
	pass, err := randomHex(16)
	if err != nil {
		return nil, "", err
	}
	r := &run{id: id, user: "run-" + id, passHash: sha256.Sum256([]byte(pass)), apis: names}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.byID) >= maxRuns {
		return nil, "", fmt.Errorf("proxy: %d runs are open; finish runs before opening more", maxRuns)
	}
	g.byID[id] = r
	g.byUser[r.user] = r
	return r, pass, nil
}

// finish revokes a run and returns its log.
func (g *registry) finish(id string) (*run, bool) {
	g.mu.Lock()
	r, ok := g.byID[id]
	if ok {
		delete(g.byID, id)
		delete(g.byUser, r.user)
	}
	g.mu.Unlock()
	if ok {
		r.mu.Lock()
		r.revoked = true
		tunnels := r.tunnels
		r.tunnels = nil
		r.mu.Unlock()
		// A finished run keeps no way out: its tunnels close too.
		for c := range tunnels {
			_ = c.Close()
		}
	}
	return r, ok
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("proxy: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// openRun validates spec against the current API set and registers an
// identity for it.
func (p *Proxy) openRun(spec RunSpec) (*run, string, error) {
	var names []string
	if len(spec.APIs) > 0 {
		list, err := p.state.Load().set.Resolve(spec.APIs)
		if err != nil {
			return nil, "", fmt.Errorf("proxy: apis: %w", err)
		}
		names = make([]string, len(list))
		for i, a := range list {
			names[i] = a.Name
		}
	}
	return p.runs.open(names)
}

// finishRun revokes the run with this id and returns its network log.
func (p *Proxy) finishRun(id string) ([]NetEntry, error) {
	r, ok := p.runs.finish(id)
	if !ok {
		return nil, fmt.Errorf("proxy: no open run %q (finished already, or never opened)", id)
	}
	entries, dropped := r.snapshot()
	if dropped > 0 {
		p.log.Warn("netlog truncated", "run", id, "dropped", dropped)
	}
	return entries, nil
}

// Open registers a new run identity allowed to reach spec.APIs (every
// active API when empty). Unknown or inactive names are an error that lists
// the valid ones.
func (p *Proxy) Open(ctx context.Context, spec RunSpec) (Run, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	base, err := p.publicBase()
	if err != nil {
		return nil, err
	}
	r, pass, err := p.openRun(spec)
	if err != nil {
		return nil, err
	}
	u := *base
	u.User = url.UserPassword(r.user, pass)
	p.log.Debug("run open", "run", r.id, "apis", r.apis)
	return &localRun{p: p, id: r.id, proxyURL: u.String()}, nil
}

// TransparentLog returns the newest requests seen in transparent mode.
func (p *Proxy) TransparentLog() []NetEntry {
	entries, _ := p.transparent.snapshot()
	return entries
}

type localRun struct {
	p        *Proxy
	id       string
	proxyURL string
}

func (r *localRun) ProxyURL() string { return r.proxyURL }

func (r *localRun) Finish(ctx context.Context) ([]NetEntry, error) {
	entries, err := r.p.finishRun(r.id)
	if err != nil {
		return nil, err
	}
	r.p.log.Debug("run finish", "run", r.id, "requests", len(entries))
	return entries, nil
}

var _ Gate = (*Proxy)(nil)
