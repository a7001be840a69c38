package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/codeforge/codeforge/settings"
)

// healthTimeout bounds one health probe.
const healthTimeout = 5 * time.Second

// health is `codeforge health URL`: GET the URL and succeed only on 200.
// The images are FROM scratch (no shell, no curl), so compose health
// checks call the binary itself.
func health(ctx context.Context, args []string, _ settings.Getenv, stderr io.Writer) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: codeforge health URL   (exit 0 iff GET URL answers 200)")
		return errUsage
	}
	u, err := url.Parse(args[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("health: %q: want an http(s) URL such as http://127.0.0.1:8080/health", args[0])
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return errors.New("health: " + resp.Status + ": " + strings.TrimSpace(string(body)))
	}
	return nil
}
