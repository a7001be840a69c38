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
	"strconv"
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
	tDNS                                                []string
	tUID, tGID                                          int
	// runAs is the uid:gid to drop to once the transparent rules are in
	// (runAsSet says whether it was given).
	runAsUID, runAsGID int
	runAsSet           bool
	common             settings.Common
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
	var tUID, tGID, tDNS, runAs string
	fs.StringVar(&tUID, "transparent-uid", env("PROXY_TRANSPARENT_UID", ""), "transparent mode for a sandbox user in the proxy's own network namespace: redirect this uid's HTTP(S) connections and lock it out of everything else (PROXY_TRANSPARENT_UID)")
	fs.StringVar(&tGID, "transparent-gid", env("PROXY_TRANSPARENT_GID", ""), "with --transparent-uid: only processes that also have this gid (PROXY_TRANSPARENT_GID)")
	fs.StringVar(&tDNS, "transparent-dns", env("PROXY_TRANSPARENT_DNS", ""), "with --transparent-uid: IPv4 DNS resolvers that user may still query, comma-separated, e.g. 127.0.0.11 (PROXY_TRANSPARENT_DNS)")
	fs.StringVar(&runAs, "run-as", env("PROXY_RUN_AS", ""), "transparent mode: start as root, install the rules, then run as this uid:gid with no capabilities (PROXY_RUN_AS)")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("proxy: unexpected arguments %q; all settings are flags (see -h)", fs.Args())
	}
	if cfg.mode != "explicit" && cfg.mode != "transparent" {
		return nil, fmt.Errorf("proxy: --mode %q: want explicit or transparent", cfg.mode)
	}
	if err := cfg.parseTransparent(tUID, tGID, tDNS, runAs); err != nil {
		return nil, err
	}
	if cfg.controlListen != "" && cfg.controlTokenFile == "" {
		return nil, errors.New("proxy: --control-listen needs --control-token-file (the bearer token the server presents)")
	}
	return cfg, nil
}

// parseTransparent checks the transparent-mode settings given as text.
func (cfg *config) parseTransparent(uid, gid, dns, runAs string) error {
	id := func(flag, v string) (int, error) {
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("proxy: --%s %q: want a numeric id above 0 (the sandbox user's, e.g. 10001)", flag, v)
		}
		return n, nil
	}
	var err error
	if cfg.tUID, err = id("transparent-uid", uid); err != nil {
		return err
	}
	if cfg.tGID, err = id("transparent-gid", gid); err != nil {
		return err
	}
	if dns != "" {
		cfg.tDNS = strings.Split(dns, ",")
		for i := range cfg.tDNS {
			cfg.tDNS[i] = strings.TrimSpace(cfg.tDNS[i])
		}
	}
	if runAs != "" {
		u, g, ok := strings.Cut(runAs, ":")
		cfg.runAsUID, err = strconv.Atoi(u)
		if err == nil {
			cfg.runAsGID, err = strconv.Atoi(g)
		}
		if !ok || err != nil || cfg.runAsUID <= 0 || cfg.runAsGID <= 0 {
			return fmt.Errorf("proxy: --run-as %q: want uid:gid, both numeric and above 0, e.g. 10001:10002", runAs)
		}
		cfg.runAsSet = true
	}
	if cfg.mode != "transparent" {
		for flag, v := range map[string]string{"transparent-uid": uid, "transparent-gid": gid, "transparent-dns": dns, "run-as": runAs,
			"transparent-interface": cfg.tInterface, "transparent-source": cfg.tSource} {
			if v != "" {
				return fmt.Errorf("proxy: --%s applies to --mode transparent only (the mode is %s)", flag, cfg.mode)
			}
		}
	}
	return nil
}

// transparentRules are the iptables rules of transparent mode for a
// listener on port.
func (cfg *config) transparentRules(port int) transparent.Rules {
	return transparent.Rules{ProxyPort: port, InInterface: cfg.tInterface, SourceCIDR: cfg.tSource,
		UIDOwner: cfg.tUID, GIDOwner: cfg.tGID, AllowDNS: cfg.tDNS}
}

// checkNotOwner refuses a local-mode setup in which the proxy itself
// would match the sandbox user's rules: its upstream connections would be
// redirected to itself and the rest locked out.
func (cfg *config) checkNotOwner() error {
	if cfg.tUID == 0 {
		return nil
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if cfg.runAsSet {
		uid, gid = cfg.runAsUID, cfg.runAsGID
	}
	if uid == cfg.tUID && (cfg.tGID == 0 || gid == cfg.tGID) {
		return fmt.Errorf("proxy: the proxy would run as %d:%d, which --transparent-uid %d / --transparent-gid %d lock down: "+
			"its own upstream connections would loop back to it; run it as another user or group (e.g. --run-as %d:%d)",
			uid, gid, cfg.tUID, cfg.tGID, cfg.tUID, cfg.tUID+1)
	}
	return nil
}

// startTransparent opens the proxy's listener and, in transparent mode,
// installs the rules and then drops to --run-as. It runs before anything
// else, so that the proxy reads no secret and serves nothing as root, and
// so that the control API (which the server waits for) only answers once
// the rules are in. rules is nil in explicit mode.
func startTransparent(ctx context.Context, cfg *config, log *slog.Logger) (l net.Listener, rules *transparent.Rules, err error) {
	if cfg.mode == "transparent" {
		if err := cfg.checkNotOwner(); err != nil {
			return nil, nil, err
		}
	}
	var lc net.ListenConfig
	l, err = lc.Listen(ctx, "tcp", cfg.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("proxy: listen %s: %w", cfg.listen, err)
	}
	if cfg.mode != "transparent" {
		return l, nil, nil
	}
	r := cfg.transparentRules(l.Addr().(*net.TCPAddr).Port)
	if r.UIDOwner == 0 {
		// Router mode: start from a clean slate. Local mode re-applies in
		// place instead, so its lockdown never lapses.
		if err := r.Clear(); err != nil {
			l.Close()
			return nil, nil, fmt.Errorf("proxy: clear old transparent rules: %w", err)
		}
	}
	if err := r.Apply(); err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("proxy: transparent rules: %w", err)
	}
	log.Info("transparent rules applied", "port", r.ProxyPort, "interface", r.InInterface, "source", r.SourceCIDR,
		"sandbox_uid", r.UIDOwner, "sandbox_gid", r.GIDOwner, "dns", r.AllowDNS)
	if cfg.runAsSet {
		if err := transparent.DropPrivileges(cfg.runAsUID, cfg.runAsGID); err != nil {
			l.Close()
			return nil, nil, fmt.Errorf("proxy: --run-as: %w", err)
		}
		log.Info("running unprivileged", "uid", cfg.runAsUID, "gid", cfg.runAsGID)
	}
	return l, &r, nil
}

// stopTransparent clears router-mode rules when the proxy may. Local mode
// keeps its rules on purpose: the sandbox user stays locked out while the
// proxy is away (the rules go with the network namespace, and the next
// start re-applies them in place).
func stopTransparent(cfg *config, rules *transparent.Rules, log *slog.Logger) {
	switch {
	case rules == nil:
	case rules.UIDOwner > 0:
		log.Info("transparent rules kept: the sandbox user stays locked out while the proxy is away")
	case cfg.runAsSet:
		log.Warn("transparent rules left in place: the proxy gave up the privileges to clear them")
	default:
		if err := rules.Clear(); err != nil {
			log.Error("clear transparent rules", "err", err)
			return
		}
		log.Info("transparent rules cleared")
	}
}

func runCommand(ctx context.Context, cfg *config, getenv settings.Getenv, logger *slog.Logger) error {
	log := logger.With("component", "proxy")
	l, rules, err := startTransparent(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopTransparent(cfg, rules, log)
	authority, err := ca.LoadOrCreate(cfg.caDir)
	if err != nil {
		l.Close()
		return fmt.Errorf("proxy: CA: %w", err)
	}
	if cfg.caCertOut != "" {
		if err := authority.WriteCertTo(cfg.caCertOut); err != nil {
			l.Close()
			return fmt.Errorf("proxy: publish CA certificate: %w", err)
		}
	}
	roots, err := upstreamRoots(cfg.upstreamCA)
	if err != nil {
		l.Close()
		return err
	}
	set, err := apis.Load(cfg.apisDir, getenv)
	if err != nil {
		l.Close()
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
		l.Close()
		return err
	}

	var lc net.ListenConfig
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
		control = newControlServer(h, log)
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
