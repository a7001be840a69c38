// Command vsmitm measures the CodeForge proxy against mitmproxy doing the
// same credential substitution, on loopback only, in one run:
//
//	go run ./proxy/bench/vsmitm [-n 2000] [-c 16] [-duration 5s] [-size 64]
//
// It starts a TLS API on 127.0.0.1 (certificate from a test CA), the
// CodeForge proxy in-process (explicit mode, one run identity) and mitmdump
// with an addon (substitute.py, embedded) that swaps the token name for the
// secret in request headers and the secret for the name in response bodies.
// The same clients then measure four figures on each path — direct, through
// CodeForge, through mitmdump: small-request latency one at a time on a
// kept-alive connection (median, p90), requests per second with -c
// concurrent clients for -duration, and the throughput of a -size MiB
// download whose body carries the secret every 64 KiB. Every request checks
// that both substitutions happened. The table goes to stdout, progress to
// stderr.
//
// mitmdump runs with its defaults apart from the addon, its CA and
// --quiet: in particular stream_large_bodies is unset, so it buffers each
// body whole before the addon sees it. mitmproxy 8.1 gathers that buffer
// with bytes += per read (proxy/layers/http/__init__.py), copying all of it
// each time, so its download time grows far faster than the size: compare
// a few -size values. The CodeForge proxy streams, substituting across
// read boundaries.
//
// mitmdump comes from the Debian package mitmproxy (8.1.x); vsmitm never
// installs it and stops it when done, also on error or interrupt.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vsmitm:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	n        int           // sequential small requests per path
	conc     int           // concurrent clients
	duration time.Duration // length of the concurrent phase per path
	sizeMiB  int           // download size
}

// Bounds keep one run finite and its memory sane: mitmdump holds the whole
// download in memory, several times over while it substitutes.
const (
	maxN        = 1_000_000
	maxConc     = 256
	minDuration = 100 * time.Millisecond
	maxDuration = 10 * time.Minute
	maxSizeMiB  = 1024
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("vsmitm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.n, "n", 2000, "small requests per path, one at a time on a kept-alive connection")
	fs.IntVar(&cfg.conc, "c", 16, "concurrent clients in the requests-per-second phase")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "length of the requests-per-second phase, per path")
	fs.IntVar(&cfg.sizeMiB, "size", 64, "download size in MiB")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vsmitm [-n N] [-c CLIENTS] [-duration D] [-size MiB]")
		fmt.Fprintln(stderr, "Compares direct, CodeForge-proxied and mitmdump-proxied HTTPS on loopback.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q: vsmitm takes flags only (see -h)", fs.Arg(0))
	}
	switch {
	case cfg.n < 1 || cfg.n > maxN:
		return config{}, fmt.Errorf("-n %d: want 1 to %d sequential requests", cfg.n, maxN)
	case cfg.conc < 1 || cfg.conc > maxConc:
		return config{}, fmt.Errorf("-c %d: want 1 to %d concurrent clients", cfg.conc, maxConc)
	case cfg.duration < minDuration || cfg.duration > maxDuration:
		return config{}, fmt.Errorf("-duration %s: want %s to %s", cfg.duration, minDuration, maxDuration)
	case cfg.sizeMiB < 1 || cfg.sizeMiB > maxSizeMiB:
		return config{}, fmt.Errorf("-size %d: want 1 to %d MiB", cfg.sizeMiB, maxSizeMiB)
	}
	return cfg, nil
}

// run measures every path and prints the table. Everything it starts —
// API, CodeForge proxy, mitmdump, temp dir — is gone when it returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	bin, err := exec.LookPath("mitmdump")
	if err != nil {
		return errNoMitmdump
	}
	version, err := mitmdumpVersion(ctx, bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "vsmitm-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	api, err := startAPI(filepath.Join(dir, "api"))
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	defer api.close()
	cf, err := startCodeForge(ctx, filepath.Join(dir, "codeforge"), api)
	if err != nil {
		return fmt.Errorf("codeforge proxy: %w", err)
	}
	defer cf.close()
	fmt.Fprintln(stderr, "vsmitm: starting mitmdump")
	mitm, err := startMitmdump(ctx, bin, filepath.Join(dir, "mitmdump"), api)
	if err != nil {
		return fmt.Errorf("mitmdump: %w", err)
	}
	defer mitm.stop()

	paths := []*path{
		api.directPath(cfg.conc),
		cf.path(api, cfg.conc),
		mitm.path(api, cfg.conc),
	}
	results := make([]result, len(paths))
	for i, p := range paths {
		r, err := measure(ctx, p, cfg, stderr)
		if err != nil {
			if p.diag != nil {
				return fmt.Errorf("%s: %w\n%s", p.name, err, p.diag())
			}
			return fmt.Errorf("%s: %w", p.name, err)
		}
		results[i] = r
	}
	report(stdout, cfg, version, paths, results)
	return nil
}
