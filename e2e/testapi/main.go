// Command testapi is the stand-in "API" of the end-to-end tests: an HTTPS
// echo server, run in its own container on the stack's external network
// with a certificate from a CA the test makes (the proxy trusts it through
// --upstream-ca). It answers every request with JSON describing what it
// received, so a test can check what actually arrived on the wire: the
// Authorization header as sent on (after the proxy's substitution, and
// echoed back so the proxy's reverse substitution can be checked too) and
// its SHA-256, which the test compares with the real secret's.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// echo is the response body.
type echo struct {
	Method        string              `json:"method"`
	Host          string              `json:"host"`
	Path          string              `json:"path"`
	Query         string              `json:"query"`
	Authorization string              `json:"authorization"`
	AuthSHA256    string              `json:"authorization_sha256"`
	Headers       map[string][]string `json:"headers"`
	Body          string              `json:"body"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testapi:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("testapi", flag.ContinueOnError)
	addr := fs.String("addr", ":443", "listen address")
	certFile := fs.String("cert", "/certs/api.pem", "server certificate (PEM)")
	keyFile := fs.String("key", "/certs/api-key.pem", "server key (PEM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return fmt.Errorf("load certificate: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "testapi")
	hs := &http.Server{
		Addr:              *addr,
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serve(w, r, log) }),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	log.Info("listening", "addr", *addr)
	if err := hs.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func serve(w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	auth := r.Header.Get("Authorization")
	sum := sha256.Sum256([]byte(auth))
	e := echo{
		Method:        r.Method,
		Host:          r.Host,
		Path:          r.URL.Path,
		Query:         r.URL.RawQuery,
		Authorization: auth,
		AuthSHA256:    hex.EncodeToString(sum[:]),
		Headers:       r.Header,
		Body:          string(body),
	}
	log.Info("request", "method", r.Method, "path", r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(e)
}
