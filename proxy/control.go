package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxControlBody bounds control API request bodies.
const maxControlBody = 64 << 10

// OpenResponse is the control API's answer to POST /v1/runs.
type OpenResponse struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// FinishResponse is the control API's answer to POST /v1/runs/{id}/finish.
type FinishResponse struct {
	Entries []NetEntry `json:"entries"`
}

type controlError struct {
	Error string `json:"error"`
}

// ControlHandler serves the control API that lets a server in another
// container open and finish runs:
//
//	POST /v1/runs               {"apis":[...]} -> {"id","username","password"}
//	POST /v1/runs/{id}/finish   -> {"entries":[...]}
//	GET  /v1/health             -> {"ok":true} (no token needed)
//
// Every other call needs "Authorization: Bearer <token>".
func (p *Proxy) ControlHandler(token string) (http.Handler, error) {
	if len(token) < 16 {
		return nil, errors.New("proxy: control token too short: use at least 16 characters (the token file holds 64 hex digits)")
	}
	want := sha256.Sum256([]byte(token))
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
			sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
			if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="codeforge-proxy"`)
				writeJSON(w, http.StatusUnauthorized, controlError{"missing or wrong bearer token (see --control-token-file)"})
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	mux.HandleFunc("POST /v1/runs", auth(func(w http.ResponseWriter, r *http.Request) {
		var spec RunSpec
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, http.StatusBadRequest, controlError{"bad run spec: " + err.Error() + `; want {"apis":["name",...]}`})
			return
		}
		rn, pass, err := p.openRun(spec)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, controlError{err.Error()})
			return
		}
		p.log.Debug("run open", "run", rn.id, "apis", rn.apis, "via", "control")
		writeJSON(w, http.StatusOK, OpenResponse{ID: rn.id, Username: rn.user, Password: pass})
	}))
	mux.HandleFunc("POST /v1/runs/{id}/finish", auth(func(w http.ResponseWriter, r *http.Request) {
		entries, err := p.finishRun(r.PathValue("id"))
		if err != nil {
			writeJSON(w, http.StatusNotFound, controlError{err.Error()})
			return
		}
		if entries == nil {
			entries = []NetEntry{}
		}
		writeJSON(w, http.StatusOK, FinishResponse{Entries: entries})
	}))
	return mux, nil
}

// newControlServer serves the control API with capped request heads
// (431 beyond maxHeaderBytes) and bodies (maxControlBody) and a header
// timeout.
func newControlServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ControlClient implements Gate against a proxy in another container,
// through its control API.
type ControlClient struct {
	base     *url.URL
	token    string
	proxyURL *url.URL
	hc       *http.Client
}

// NewControlClient returns a Gate that opens runs at the control API at
// baseURL (e.g. "http://proxy:3129") with the bearer token. sandboxProxyURL
// is the proxy as the sandbox reaches it (e.g. "http://proxy:3128"); each
// run's ProxyURL is it with the run's credentials. A nil httpClient uses
// one without any proxy.
func NewControlClient(baseURL, token, sandboxProxyURL string, httpClient *http.Client) (*ControlClient, error) {
	base, err := url.Parse(baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("proxy control URL %q: want http(s)://host:port", baseURL)
	}
	if token == "" {
		return nil, errors.New("proxy control token is empty: read it from the proxy's --control-token-file")
	}
	pu, err := parsePublicURL(sandboxProxyURL)
	if err != nil {
		return nil, err
	}
	if httpClient == nil {
		httpClient = &http.Client{Transport: &http.Transport{Proxy: nil}}
	}
	return &ControlClient{base: base, token: token, proxyURL: pu, hc: httpClient}, nil
}

// Open asks the proxy for a new run identity.
func (c *ControlClient) Open(ctx context.Context, spec RunSpec) (Run, error) {
	var resp OpenResponse
	if err := c.call(ctx, "/v1/runs", spec, &resp); err != nil {
		return nil, fmt.Errorf("proxy control: open run: %w", err)
	}
	if resp.ID == "" || resp.Username == "" || resp.Password == "" {
		return nil, errors.New("proxy control: open run: incomplete answer")
	}
	u := *c.proxyURL
	u.User = url.UserPassword(resp.Username, resp.Password)
	return &controlRun{c: c, id: resp.ID, proxyURL: u.String()}, nil
}

// Health reports whether the control API answers.
func (c *ControlClient) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.JoinPath("/v1/health").String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("proxy control: health: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("proxy control: health: status %s", resp.Status)
	}
	return nil
}

func (c *ControlClient) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.JoinPath(path).String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e controlError
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("status %s", resp.Status)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

type controlRun struct {
	c        *ControlClient
	id       string
	proxyURL string
}

func (r *controlRun) ProxyURL() string { return r.proxyURL }

func (r *controlRun) Finish(ctx context.Context) ([]NetEntry, error) {
	var resp FinishResponse
	if err := r.c.call(ctx, "/v1/runs/"+url.PathEscape(r.id)+"/finish", struct{}{}, &resp); err != nil {
		return nil, fmt.Errorf("proxy control: finish run: %w", err)
	}
	return resp.Entries, nil
}

var _ Gate = (*ControlClient)(nil)
