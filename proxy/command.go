package proxy

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/proxy/transparent"
	"github.com/codeforge/codeforge/settings"
)

// shutdownGrace is how long a stopping proxy waits for requests in flight.
const shutdownGrace = 10 * time.Second

// config is the parsed command line of `codeforge proxy`.
type config struct {
	listen, mode, apisDir, caDir, caCertOut, upstreamCA string
	allowPrivate                                        bool
	controlListen, controlTokenFile                     string
	tInterface, tSource                                 string
	common                                              settings.Common
}

// Command runs `codeforge proxy` until ctx ends. Every flag has an
// environment variable; a flag given on the command line wins.
func Command(ctx context.Context, args []string, getenv settings.Getenv, stderr io.Writer) error {
	cfg, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := settings.NewLogger(stderr, cfg.common.Debug)
	return runCommand(ctx, cfg, getenv, logger)
}

func parseFlags(args []string, getenv settings.Getenv, stderr io.Writer) (*config, error) {
	env := func(name, def string) string {
		if v, ok := getenv(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	common, err := settings.FromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	allowPrivate, err := settings.Bool(getenv, "ALLOW_PRIVATE_UPSTREAMS")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	cfg := &config{common: common}
	fs := flag.NewFlagSet("codeforge proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.listen, "listen", env("PROXY_LISTEN", "127.0.0.1:3128"), "proxy listen address (PROXY_LISTEN)")
	fs.StringVar(&cfg.mode, "mode", env("PROXY_MODE", "explicit"), "explicit (HTTP(S)_PROXY clients) or transparent (iptables redirect) (PROXY_MODE)")
	fs.StringVar(&cfg.apisDir, "apis-dir", env("APIS_DIR", "./apis"), "directory of API configs (APIS_DIR)")
	fs.StringVar(&cfg.caDir, "ca-dir", env("CA_DIR", "./data/ca"), "directory of the proxy CA, created on first start (CA_DIR)")
	fs.StringVar(&cfg.caCertOut, "ca-cert-out", env("CA_CERT_OUT", ""), "also publish the CA certificate here, e.g. in the sandbox's volume (CA_CERT_OUT)")
	fs.StringVar(&cfg.upstreamCA, "upstream-ca", env("UPSTREAM_CA", ""), "PEM file of extra CAs trusted for upstream servers, added to the system roots (UPSTREAM_CA)")
	fs.BoolVar(&cfg.allowPrivate, "allow-private-upstreams", allowPrivate, "allow loopback/private/link-local destinations (ALLOW_PRIVATE_UPSTREAMS)")
	fs.StringVar(&cfg.controlListen, "control-listen", env("PROXY_CONTROL_LISTEN", ""), "control API listen address, e.g. :3129; empty disables it (PROXY_CONTROL_LISTEN)")
	fs.StringVar(&cfg.controlTokenFile, "control-token-file", env("PROXY_CONTROL_TOKEN_FILE", ""), "control API bearer token file, created (0600) when missing (PROXY_CONTROL_TOKEN_FILE)")
	fs.StringVar(&cfg.tInterface, "transparent-interface", env("PROXY_TRANSPARENT_INTERFACE", ""), "transparent mode: redirect only traffic arriving on this interface (PROXY_TRANSPARENT_INTERFACE)")
	fs.StringVar(&cfg.tSource, "transparent-source", env("PROXY_TRANSPARENT_SOURCE", ""), "transparent mode: redirect only traffic from this IPv4 CIDR (PROXY_TRANSPARENT_SOURCE)")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("proxy: unexpected arguments %q; all settings are flags (see -h)", fs.Args())
	}
	if cfg.mode != "explicit" && cfg.mode != "transparent" {
		return nil, fmt.Errorf("proxy: --mode %q: want explicit or transparent", cfg.mode)
	}
	if cfg.controlListen != "" && cfg.controlTokenFile == "" {
		return nil, errors.New("proxy: --control-listen needs --control-token-file (the bearer token the server presents)")
	}
	return cfg, nil
}

func runCommand(ctx context.Context, cfg *config, getenv settings.Getenv, logger *slog.Logger) error {
	log := logger.With("component", "proxy")
	authority, err := ca.LoadOrCreate(cfg.caDir)
	if err != nil {
		return fmt.Errorf("proxy: CA: %w", err)
	}
	if cfg.caCertOut != "" {
		if err := authority.WriteCertTo(cfg.caCertOut); err != nil {
			return fmt.Errorf("proxy: publish CA certificate: %w", err)
		}
	}
	roots, err := upstreamRoots(cfg.upstreamCA)
	if err != nil {
		return err
	}
	set, err := apis.Load(cfg.apisDir, getenv)
	if err != nil {
		return fmt.Errorf("proxy: API configs: %w", err)
	}
	p, err := New(Options{
		APIs:                  set,
		CA:                    authority,
		Settings:              cfg.common,
		Logger:                logger,
		UpstreamRoots:         roots,
		AllowPrivateUpstreams: cfg.allowPrivate,
	})
	if err != nil {
		return err
	}

	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("proxy: listen %s: %w", cfg.listen, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	errc := make(chan error, 2)
	var control *http.Server
	if cfg.controlListen != "" {
		token, err := loadOrCreateToken(cfg.controlTokenFile)
		if err != nil {
			l.Close()
			return err
		}
		h, err := p.ControlHandler(token)
		if err != nil {
			l.Close()
			return err
		}
		cl, err := lc.Listen(ctx, "tcp", cfg.controlListen)
		if err != nil {
			l.Close()
			return fmt.Errorf("proxy: control listen %s: %w", cfg.controlListen, err)
		}
		control = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		log.Info("control listening", "addr", cl.Addr().String())
		go func() {
			if err := control.Serve(cl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("proxy: control: %w", err)
			}
		}()
	}

	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	if cfg.mode == "transparent" {
		port := l.Addr().(*net.TCPAddr).Port
		rules := transparent.Rules{ProxyPort: port, InInterface: cfg.tInterface, SourceCIDR: cfg.tSource}
		if err := rules.Clear(); err != nil {
			l.Close()
			return fmt.Errorf("proxy: clear old transparent rules: %w", err)
		}
		if err := rules.Apply(); err != nil {
			l.Close()
			return fmt.Errorf("proxy: transparent rules: %w", err)
		}
		defer func() {
			if err := rules.Clear(); err != nil {
				log.Error("clear transparent rules", "err", err)
			}
		}()
		go func() {
			errc <- transparent.Serve(serveCtx, l, p.ServeTransparentConn, logger)
		}()
	} else {
		go func() {
			if err := p.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("proxy: serve: %w", err)
			}
		}()
	}
	log.Info("listening", "addr", l.Addr().String(), "mode", cfg.mode, "apis", set.Names(), "yolo", cfg.common.YOLO,
		"ca", authority.CertFile(), "allow_private_upstreams", cfg.allowPrivate)

	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			if err != nil {
				runErr = err
				break loop
			}
		case <-hup:
			newSet, err := apis.Load(cfg.apisDir, getenv)
			if err != nil {
				log.Error("reload failed; keeping the previous API configs", "err", p.scrub(err.Error()))
				continue
			}
			if err := p.Reload(newSet); err != nil {
				log.Error("reload failed; keeping the previous API configs", "err", p.scrub(err.Error()))
			}
		}
	}
	stopServe()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if control != nil {
		_ = control.Shutdown(sctx)
	}
	if cfg.mode == "transparent" {
		_ = l.Close()
	}
	if err := p.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return runErr
}

// upstreamRoots is the system pool plus every certificate in file.
func upstreamRoots(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil // the system roots
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("proxy: --upstream-ca: %w", err)
	}
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("proxy: --upstream-ca %s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("proxy: --upstream-ca %s: no PEM certificates found; want one or more -----BEGIN CERTIFICATE----- blocks", file)
	}
	return pool, nil
}

// loadOrCreateToken reads the control token, creating the file with 32
// random bytes (hex) and mode 0600 when it does not exist.
func loadOrCreateToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("proxy: control token: %w", err)
		}
		token := hex.EncodeToString(b)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", fmt.Errorf("proxy: control token: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return loadOrCreateToken(path) // someone else created it meanwhile
		}
		if err != nil {
			return "", fmt.Errorf("proxy: control token: %w", err)
		}
		if _, err := f.WriteString(token + "\n"); err != nil {
			f.Close()
			return "", fmt.Errorf("proxy: control token: %w", err)
		}
		if err := f.Close(); err != nil {
			return "", fmt.Errorf("proxy: control token: %w", err)
		}
		return token, nil
	}
	if err != nil {
		return "", fmt.Errorf("proxy: control token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < 16 {
		return "", fmt.Errorf("proxy: control token file %s holds %d characters; want at least 16 (delete it to have a new one made)", path, len(token))
	}
	return token, nil
}
