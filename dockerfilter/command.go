package dockerfilter

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/codeforge/codeforge/settings"
)

// Socket defaults: the filter runs as root in its own container (it needs
// the engine's socket); the server connects as uid 10001 through a shared
// volume, so the socket is handed to that user, group-writable and closed
// to everyone else.
const (
	DefaultSocketMode  fs.FileMode = 0o660
	DefaultSocketOwner             = "10001:10001"
)

// Command runs the socket filter until ctx ends: `codeforge dockerfilter`.
func Command(ctx context.Context, args []string, getenv settings.Getenv, stderr io.Writer) error {
	fl := flag.NewFlagSet("dockerfilter", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", "/run/codeforge-filter/docker.sock", "where to listen: a unix socket path (unix:///path or /path), or 127.0.0.1:PORT for tests")
	dockerHost := fl.String("docker-host", DefaultDockerHost, "the real Docker engine socket (unix:///path)")
	service := fl.String("sandbox-service", DefaultSandboxService, "compose service name of the sandbox; also the name clients use for it")
	container := fl.String("sandbox-container", "", "sandbox container name or ID (turns compose discovery off)")
	runUser := fl.String("run-user", DefaultRunUser, "uid:gid every exec runs as (never 0)")
	wrapper := fl.String("wrapper", DefaultWrapper, "absolute path of codeforge-run in the sandbox image")
	mode := fl.String("socket-mode", fmt.Sprintf("%04o", DefaultSocketMode), "file mode of the listening unix socket (octal)")
	owner := fl.String("socket-owner", DefaultSocketOwner, `uid:gid the listening unix socket is given to ("" keeps the filter's own)`)
	heal := fl.Bool("heal", true, "restart containers of the filter's compose project left in a restarted container's old network namespace (compose discovery only; see heal.go)")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: codeforge dockerfilter [flags]\n\n"+
			"Serves a filtered Docker API on --listen that allows only running code in\n"+
			"the sandbox container (exec create/start/inspect) and /_ping, /version.\n\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("dockerfilter: unexpected arguments %q", fl.Args())
	}
	common, err := settings.FromEnv(getenv)
	if err != nil {
		return fmt.Errorf("dockerfilter: %w", err)
	}
	socketMode, err := strconv.ParseUint(*mode, 8, 32)
	if err != nil || socketMode > 0o777 {
		return fmt.Errorf("dockerfilter: --socket-mode %q: want an octal file mode such as 0660", *mode)
	}
	log := settings.NewLogger(stderr, common.Debug)
	f, err := New(Options{
		DockerHost:       *dockerHost,
		SandboxService:   *service,
		SandboxContainer: *container,
		RunUser:          *runUser,
		Wrapper:          *wrapper,
		Logger:           log,
	})
	if err != nil {
		return fmt.Errorf("dockerfilter: %w", err)
	}
	defer f.Close()
	ln, err := Listen(*listen, fs.FileMode(socketMode), *owner)
	if err != nil {
		return fmt.Errorf("dockerfilter: %w", err)
	}
	log.Info("listening", "component", "dockerfilter", "addr", ln.Addr().String(), "docker_host", *dockerHost,
		"sandbox_service", *service, "sandbox_container", *container, "run_user", *runUser, "heal", *heal && *container == "")
	if *heal && *container == "" {
		healCtx, stopHeal := context.WithCancel(ctx)
		healed := make(chan struct{})
		go func() { defer close(healed); f.Heal(healCtx, DefaultHealInterval) }()
		defer func() { stopHeal(); <-healed }()
	}
	return f.Serve(ctx, ln)
}

// Listen opens the filter's listener. A unix socket (addr "unix:///path"
// or "/path") replaces a stale socket file, then gets mode and, when owner
// ("uid:gid") is not empty, that owner. A TCP address must be on loopback:
// the filter has no authentication of its own.
func Listen(addr string, mode fs.FileMode, owner string) (net.Listener, error) {
	path, isUnix := strings.CutPrefix(addr, "unix://")
	if isUnix || strings.HasPrefix(addr, "/") {
		return listenUnix(path, mode, owner)
	}
	hostPort := strings.TrimPrefix(addr, "tcp://")
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: want a unix socket path or 127.0.0.1:PORT", addr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("listen address %q: TCP is allowed on loopback only (the filter has no authentication)", addr)
	}
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", hostPort, err)
	}
	return ln, nil
}

func listenUnix(path string, mode fs.FileMode, owner string) (net.Listener, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("listen socket %q: want an absolute path", path)
	}
	uid, gid := -1, -1
	if owner != "" {
		u, g, ok := strings.Cut(owner, ":")
		var err1, err2 error
		uid, err1 = strconv.Atoi(u)
		gid, err2 = strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return nil, fmt.Errorf("socket owner %q: want numeric uid:gid, or \"\" to keep the filter's own", owner)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listen socket %s: a file that is not a socket is in the way", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	if owner != "" {
		if err := os.Lchown(path, uid, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("chown socket %s to %s: %w (run as root, or pass --socket-owner \"\")", path, owner, err)
		}
	}
	return ln, nil
}

// Serve answers on ln until ctx ends, then shuts down (streams in flight
// are cut when the process exits).
func (f *Filter) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           f,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
