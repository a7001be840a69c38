// Package settings reads the settings every CodeForge subcommand shares
// (YOLO_MODE, USER_AGENT, REDACTING_STRINGS, DEBUG_MODE and the proxy's
// per-run caps) from the environment, after an optional .env file has been loaded into it.
package settings

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/joho/godotenv"
)

// Common holds the settings shared by serve and proxy.
type Common struct {
	// YOLO lets the sandbox reach any host (credentials still go only to
	// their own API's hosts).
	YOLO bool
	// UserAgent, when set, replaces the User-Agent of every outgoing request.
	UserAgent string
	// RedactingStrings are replaced by REDACTED in outgoing requests.
	RedactingStrings []string
	// Debug logs submitted code and (redacted) payloads.
	Debug bool
	// MaxTunnelsPerRun caps the CONNECT tunnels one run holds open at the
	// proxy at once (PROXY_MAX_TUNNELS_PER_RUN); 0 means the proxy's
	// default (64).
	MaxTunnelsPerRun int
	// MaxRequestsPerRun caps the requests of one run the proxy works on at
	// once (PROXY_MAX_REQUESTS_PER_RUN); 0 means the proxy's default (32).
	MaxRequestsPerRun int
}

// Getenv looks up an environment variable; os.LookupEnv fits.
type Getenv func(string) (string, bool)

// LoadDotenv reads a .env file into the process environment without
// overriding variables already set. A missing file is not an error.
func LoadDotenv(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return nil
	}
	if err := godotenv.Load(path); err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	return nil
}

// FromEnv reads the common settings.
func FromEnv(getenv Getenv) (Common, error) {
	var c Common
	var err error
	if c.YOLO, err = Bool(getenv, "YOLO_MODE"); err != nil {
		return c, err
	}
	if c.Debug, err = Bool(getenv, "DEBUG_MODE"); err != nil {
		return c, err
	}
	c.UserAgent, _ = getenv("USER_AGENT")
	c.RedactingStrings = List(getenv, "REDACTING_STRINGS")
	if c.MaxTunnelsPerRun, err = Count(getenv, "PROXY_MAX_TUNNELS_PER_RUN"); err != nil {
		return c, err
	}
	if c.MaxRequestsPerRun, err = Count(getenv, "PROXY_MAX_REQUESTS_PER_RUN"); err != nil {
		return c, err
	}
	return c, nil
}

// Count parses a whole number of at least 1; unset or empty is 0 (the
// default of whoever reads it).
func Count(getenv Getenv, name string) (int, error) {
	v, ok := getenv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a whole number of at least 1", name, v)
	}
	return n, nil
}

// Bool parses a boolean variable; unset or empty is false.
func Bool(getenv Getenv, name string) (bool, error) {
	v, ok := getenv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// List splits a comma-separated variable, dropping empty items.
func List(getenv Getenv, name string) []string {
	v, _ := getenv(name)
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// NewLogger returns the process's one logger: text lines on w, debug level
// when debug is set. Components add their tag with .With("component", …).
func NewLogger(w io.Writer, debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
