package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Limits that keep the proxy's memory bounded whatever a run sends. With
// the defaults one run can make the proxy hold at most about
// DefaultMaxTunnelsPerRun request heads of maxHeaderBytes while they are
// read, and DefaultMaxRequestsPerRun requests (each with its head, a form
// body of up to 1 MiB checked for _method, and streaming buffers) while
// they are forwarded.
const (
	// maxHeaderBytes caps every request head the proxy reads (plain
	// proxy requests, CONNECT, requests inside tunnels, transparent-mode
	// peeks, control API calls), like net/http's DefaultMaxHeaderBytes.
	// A larger head is answered 431 or, where no answer can be sent, the
	// connection is closed.
	maxHeaderBytes = 1 << 20

	// DefaultMaxTunnelsPerRun is how many CONNECT tunnels one run may
	// hold open at once (PROXY_MAX_TUNNELS_PER_RUN).
	DefaultMaxTunnelsPerRun = 64
	// DefaultMaxRequestsPerRun is how many requests of one run the proxy
	// works on at once (PROXY_MAX_REQUESTS_PER_RUN).
	DefaultMaxRequestsPerRun = 32
)

func (p *Proxy) maxTunnels() int {
	if n := p.set.MaxTunnelsPerRun; n > 0 {
		return n
	}
	return DefaultMaxTunnelsPerRun
}

func (p *Proxy) maxRequests() int {
	if n := p.set.MaxRequestsPerRun; n > 0 {
		return n
	}
	return DefaultMaxRequestsPerRun
}

// tooManyTunnels is the answer to a CONNECT over the run's tunnel cap.
func (p *Proxy) tooManyTunnels(req *http.Request, rn *run, t *target) *http.Response {
	rn.record(NetEntry{Method: http.MethodConnect, Host: t.hostport(), Status: http.StatusTooManyRequests, Blocked: "too_many_tunnels"})
	p.log.Info("req", "run", rn.id, "method", http.MethodConnect, "host", t.hostport(), "status", http.StatusTooManyRequests, "blocked", "too_many_tunnels")
	resp := textResponse(req, http.StatusTooManyRequests, "too_many_tunnels", fmt.Sprintf(
		"codeforge proxy: this run already holds %d open connections (tunnels) through the proxy, its limit; "+
			"close some (fewer parallel requests, or reuse connections) before opening more. "+
			"The user can raise the limit with PROXY_MAX_TUNNELS_PER_RUN (default %d)", p.maxTunnels(), DefaultMaxTunnelsPerRun))
	resp.Header.Set("Retry-After", "1")
	return resp
}

// tooManyRequests answers a request over the run's in-flight cap.
func (p *Proxy) tooManyRequests(w http.ResponseWriter, r *http.Request, t *target) {
	path, _ := p.redact.String(r.URL.Path)
	t.run.record(NetEntry{Method: r.Method, Host: t.display(), Path: path, Status: http.StatusTooManyRequests, Blocked: "too_many_requests"})
	p.log.Info("req", "run", t.run.id, "method", r.Method, "host", t.display(), "path", path, "status", http.StatusTooManyRequests, "blocked", "too_many_requests")
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set(errorHeader, "too_many_requests")
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", "1")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = fmt.Fprintf(w, "codeforge proxy: this run already has %d requests in flight through the proxy, its limit; "+
		"wait for some to finish (fewer parallel requests) and retry. "+
		"The user can raise the limit with PROXY_MAX_REQUESTS_PER_RUN (default %d)\n", p.maxRequests(), DefaultMaxRequestsPerRun)
}

// errHeadTooLarge says a request head went past maxHeaderBytes.
var errHeadTooLarge = errors.New("request head over 1 MiB")

// headLimit reads at most left bytes of a request head from r, then fails
// with errHeadTooLarge.
type headLimit struct {
	r    io.Reader
	left int
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errHeadTooLarge
	}
	if len(p) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= n
	return n, err
}
