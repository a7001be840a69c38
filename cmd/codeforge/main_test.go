package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"-h"}, {"help"}} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), "serve") || !strings.Contains(stderr.String(), "dockerfilter") {
			t.Errorf("args %q: err %v, stderr %q; want the usage text", args, err, stderr.String())
		}
	}
}

func TestRunUnknownCommand(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serv"}, &stderr)
	if !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), `unknown command "serv"`) {
		t.Errorf("err %v, stderr %q; want an unknown-command message with the usage", err, stderr.String())
	}
}

func TestEveryCommandIsWired(t *testing.T) {
	cmds := commands()
	for _, name := range []string{"serve", "proxy", "dockerfilter"} {
		if cmds[name] == nil {
			t.Errorf("command %q is not wired", name)
		}
		if !strings.Contains(usage, "  "+name) {
			t.Errorf("command %q is missing from the usage text", name)
		}
	}
}

func TestSubcommandFlagErrorsAreReported(t *testing.T) {
	t.Setenv("CODEFORGE_ENV_FILE", "")
	for _, name := range []string{"serve", "proxy", "dockerfilter"} {
		var stderr bytes.Buffer
		err := run(context.Background(), []string{name, "--no-such-flag"}, &stderr)
		if err == nil {
			t.Errorf("%s --no-such-flag: no error", name)
			continue
		}
		if !strings.Contains(err.Error()+stderr.String(), "no-such-flag") {
			t.Errorf("%s --no-such-flag: err %v, stderr %q; want the bad flag named", name, err, stderr.String())
		}
	}
}
