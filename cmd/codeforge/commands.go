package main

import (
	"github.com/codeforge/codeforge/dockerfilter"
	"github.com/codeforge/codeforge/internal/app"
	"github.com/codeforge/codeforge/proxy"
)

// commands maps each subcommand to its package's entry point.
func commands() map[string]command {
	return map[string]command{
		"serve":        app.Serve,
		"proxy":        proxy.Command,
		"dockerfilter": dockerfilter.Command,
		"health":       health,
	}
}
