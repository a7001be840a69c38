// Package runpolicy is the one place that says how a run's Deno process
// starts: its command line (permission flags and all), its environment,
// the checks every run setting must pass, and the contract of the
// in-sandbox wrapper (codeforge-run: its environment variables, exit
// statuses and messages). The local backend (sandbox/local), the Docker
// backend (sandbox/docker), the Docker socket filter (dockerfilter) and
// the wrapper itself (sandbox/wrapper, built as cmd/codeforge-run) all
// use it, so the backends cannot drift apart.
//
// It uses the standard library only: the wrapper links it into a small
// static binary in the sandbox image.
package runpolicy

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Spec is everything a run's deno command line and environment depend
// on, in the paths the deno process sees.
type Spec struct {
	// Scratch is the run's own directory: working directory, HOME and
	// TMPDIR, readable and writable.
	Scratch string
	// DenoDir is Deno's cache directory (DENO_DIR), the run's own and
	// removed with it (see CacheDir). Not readable or writable by code.
	DenoDir string
	// Skills is the skills directory, readable and writable.
	Skills string
	// ReadPaths are extra read-only files (types.d.ts).
	ReadPaths []string
	// Hosts are the hosts the code may reach (through the proxy); nil
	// and !AllHosts means no network at all.
	Hosts []string
	// AllHosts is YOLO mode: any host (the proxy still decides).
	AllHosts bool
	// MemoryMB caps V8's heap.
	MemoryMB int
	// ProxyURL is the run's proxy identity; "" when it has no network.
	ProxyURL string
	// CACert is the PEM file of the proxy's CA, which Deno trusts in
	// addition to its own roots; "" for none.
	CACert string
}

// Args is the deno command line after the executable's name, for a run
// reading its code from stdin. Every permission not granted here is
// denied without a prompt; env, subprocesses, FFI, system information and
// remote imports are denied explicitly as well, so no later default can
// grant them.
func Args(s Spec) []string {
	read := append([]string{s.Scratch, s.Skills}, s.ReadPaths...)
	args := []string{
		"run",
		"--no-prompt",
		"--no-config",
		"--no-lock",
		"--no-remote",
		"--no-npm",
		"--ext=ts",
		"--allow-read=" + strings.Join(read, ","),
		"--allow-write=" + s.Scratch + "," + s.Skills,
		"--deny-env",
		"--deny-run",
		"--deny-ffi",
		"--deny-sys",
		"--deny-import",
	}
	switch {
	case s.AllHosts:
		args = append(args, "--allow-net")
	case len(s.Hosts) > 0:
		args = append(args, "--allow-net="+strings.Join(s.Hosts, ","))
	default:
		args = append(args, "--deny-net")
	}
	return append(args, "--v8-flags=--max-old-space-size="+strconv.Itoa(s.MemoryMB), "-")
}

// Env is the whole environment of a run's deno process: nothing is
// inherited from whoever starts it (the server holds real secrets).
// DENO_EMIT_CACHE_MODE=disable keeps transpiled code out of the cache,
// which is the run's own anyway. PATH is fixed (subprocesses are denied,
// but without it Deno answers a denied command with NotFound).
func Env(s Spec) []string {
	env := []string{
		"PATH=" + Path,
		"HOME=" + s.Scratch,
		"TMPDIR=" + s.Scratch,
		"DENO_DIR=" + s.DenoDir,
		"DENO_EMIT_CACHE_MODE=disable",
		"NO_COLOR=1",
		"DENO_NO_UPDATE_CHECK=1",
		"DENO_NO_PROMPT=1",
	}
	if s.ProxyURL != "" {
		env = append(env,
			"HTTPS_PROXY="+s.ProxyURL, "HTTP_PROXY="+s.ProxyURL,
			"https_proxy="+s.ProxyURL, "http_proxy="+s.ProxyURL,
			"NO_PROXY=", "no_proxy=")
	}
	if s.CACert != "" {
		env = append(env, "DENO_CERT="+s.CACert)
	}
	return env
}

// Path is the PATH of every run.
const Path = "/usr/local/bin:/usr/bin:/bin"

// CacheDir is the DENO_DIR that belongs to the run whose scratch
// directory is scratch: a sibling, so the code's working directory holds
// only what it wrote, and removed with it (RemoveRun).
func CacheDir(scratch string) string { return scratch + ".deno" }

// RemoveRun deletes a run's scratch directory and its cache directory,
// first making writable any directory the code made read-only. The
// error names what could not be removed.
func RemoveRun(scratch string) error {
	var errs []error
	for _, dir := range []string{scratch, CacheDir(scratch)} {
		if err := RemoveTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveTree deletes dir, first making writable any directory the code
// made read-only.
func RemoveTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// hostPattern is what an --allow-net entry may look like: a host name or
// IP literal with an optional port. It keeps out the commas, spaces and
// leading dashes that would smuggle extra entries or flags into the deno
// command line.
var hostPattern = regexp.MustCompile(`^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?$`)

// plainPathPattern is an absolute path of plain characters, what the
// wrapper's environment may carry (the sandbox's paths are all plain).
var plainPathPattern = regexp.MustCompile(`^/[A-Za-z0-9._@+/-]*$`)

// proxyPattern is a proxy URL of plain characters: scheme, optional
// user:password, host, optional port.
var proxyPattern = regexp.MustCompile(`^https?://([A-Za-z0-9._~-]{1,128}(:[A-Za-z0-9._~-]{0,256})?@)?[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?/?$`)

// CheckHost says why h cannot be an --allow-net entry.
func CheckHost(h string) error {
	if !hostPattern.MatchString(h) {
		return fmt.Errorf("allowed host %q is not a host name or IP address with an optional port", h)
	}
	return nil
}

// CheckReadPath says why p cannot be an extra readable path: it must be
// absolute and clean (no "..") and hold no comma (which separates
// permission entries) or control character.
func CheckReadPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsFunc(p, func(r rune) bool { return r == ',' || r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("read path %q must be an absolute path without commas, \"..\" or control characters", p)
	}
	return nil
}

// checkPlainPath is CheckReadPath for paths inside the sandbox, which
// the wrapper's contract restricts to plain characters.
func checkPlainPath(p string) error {
	if err := CheckReadPath(p); err != nil {
		return err
	}
	if !plainPathPattern.MatchString(p) || slices.Contains(strings.Split(p, "/"), "..") {
		return fmt.Errorf("read path %q must be an absolute path of letters, digits and ._@+-/ only", p)
	}
	return nil
}

// CheckProxyURL says why u cannot be a run's proxy URL. The message never
// repeats u: it holds the run's proxy secret.
func CheckProxyURL(u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || !proxyPattern.MatchString(u) {
		return errors.New("proxy URL is not an http:// or https:// URL of plain characters with a host")
	}
	return nil
}
