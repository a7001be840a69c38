package main

import (
	"github.com/codeforge/codeforge/dockerfilter"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/server"
)

// commands maps each subcommand to its package's entry point.
func commands() map[string]command {
	return map[string]command{
		"serve":        server.Command,
		"proxy":        proxy.Command,
		"dockerfilter": dockerfilter.Command,
		"health":       health,
	}
}
