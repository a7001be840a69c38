package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
)

// guard is the HTTP hardening in front of /mcp and /health: Host and
// Origin allowlists against DNS rebinding and cross-site requests, the
// optional bearer token, and the request body cap.
type guard struct {
	next           http.Handler
	allowedHosts   []string
	allowedOrigins []string
	token          string
	maxBody        int64
	log            *slog.Logger
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	port := localPort(r)
	if hosts := g.hosts(port); !slices.Contains(hosts, strings.ToLower(r.Host)) {
		g.log.Warn("refused request: Host not allowed", "host", r.Host, "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("forbidden: Host %q is not allowed (allowed: %s); "+
			"if you reach CodeForge under this name, add it to --allowed-hosts (CODEFORGE_ALLOWED_HOSTS)",
			r.Host, strings.Join(hosts, ", ")), http.StatusForbidden)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if origins := g.origins(port); !slices.Contains(origins, strings.ToLower(origin)) {
			g.log.Warn("refused request: Origin not allowed", "origin", origin, "path", r.URL.Path)
			http.Error(w, fmt.Sprintf("forbidden: Origin %q is not allowed (allowed: %s); "+
				"if a web page at that origin should reach CodeForge, add it to --allowed-origins (CODEFORGE_ALLOWED_ORIGINS)",
				origin, strings.Join(origins, ", ")), http.StatusForbidden)
			return
		}
	}
	if g.token != "" && r.URL.Path != "/health" && !g.authorized(r) {
		g.log.Warn("refused request: missing or wrong bearer token", "path", r.URL.Path)
		w.Header().Set("WWW-Authenticate", `Bearer realm="codeforge"`)
		http.Error(w, "unauthorized: this server requires the header \"Authorization: Bearer <token>\" "+
			"with the token set in CODEFORGE_TOKEN", http.StatusUnauthorized)
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, g.maxBody)
	}
	g.next.ServeHTTP(w, r)
}

// authorized compares the bearer token in constant time (over digests, so
// the length of the expected token does not leak either).
func (g *guard) authorized(r *http.Request) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	want := sha256.Sum256([]byte(g.token))
	have := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(want[:], have[:]) == 1
}

func (g *guard) hosts(port string) []string {
	if len(g.allowedHosts) > 0 {
		return g.allowedHosts
	}
	var out []string
	for _, h := range []string{"localhost", "127.0.0.1", "[::1]"} {
		out = append(out, h)
		if port != "" {
			out = append(out, h+":"+port)
		}
	}
	return out
}

func (g *guard) origins(port string) []string {
	if len(g.allowedOrigins) > 0 {
		return g.allowedOrigins
	}
	var out []string
	for _, h := range []string{"localhost", "127.0.0.1", "[::1]"} {
		if port != "" {
			out = append(out, "http://"+h+":"+port)
		} else {
			out = append(out, "http://"+h)
		}
	}
	return out
}

// localPort is the port of the local address the request arrived on.
func localPort(r *http.Request) string {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return ""
	}
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	return port
}

func lower(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "/"))
	}
	return out
}
