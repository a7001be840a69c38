// Command codeforge is the one CodeForge binary: `serve` runs the MCP
// server, `proxy` the credential-substituting egress proxy, `dockerfilter`
// the Docker socket filter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/codeforge/codeforge/settings"
)

const usage = `usage: codeforge <command> [flags]

commands:
  serve         run the MCP server (Streamable HTTP on /mcp)
  proxy         run the egress proxy (credential substitution)
  dockerfilter  run the Docker socket filter
  health URL    exit 0 iff GET URL answers 200 (container health checks)

Each command reads .env from the working directory (or $CODEFORGE_ENV_FILE)
without overriding variables already set; "codeforge <command> -h" lists its flags.
`

// command is what every subcommand implements.
type command func(ctx context.Context, args []string, getenv settings.Getenv, stderr io.Writer) error

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if code := exitCode(err); code != 0 {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "codeforge:", err)
		}
		os.Exit(code)
	}
}

// errUsage means the usage text has been written: the command line was
// wrong.
var errUsage = errors.New("usage")

// exitCode is 0 for success and for -h (the help was asked for and
// written), 2 for a wrong command line (usage), 1 for every other error.
func exitCode(err error) int {
	var usageErr *settings.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage), errors.As(err, &usageErr):
		return 2
	default:
		return 1
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	envFile := ".env"
	if v, ok := os.LookupEnv("CODEFORGE_ENV_FILE"); ok {
		envFile = v
	}
	// The process environment over .env, read again when it changes: a
	// SIGHUP reload sees a secret just added to .env.
	env, err := settings.NewDotenv(os.LookupEnv, envFile, func(err error) {
		fmt.Fprintln(stderr, "codeforge:", err)
	})
	if err != nil {
		return err
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "codeforge: unknown command %q\n\n%s", args[0], usage)
		return errUsage
	}
	return cmd(ctx, args[1:], env.Lookup, stderr)
}
