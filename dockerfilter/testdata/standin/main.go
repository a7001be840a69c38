// Command standin plays codeforge-run in the socket filter's tests: with
// --idle it waits for SIGTERM (the container's keepalive); otherwise it
// prints what it was started with (uid, gid, argv, environment, working
// directory and all of stdin) as JSON on stdout, and one line on stderr.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--idle" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		return
	}
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "read stdin:", err)
		os.Exit(3)
	}
	wd, _ := os.Getwd()
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"uid":    os.Getuid(),
		"gid":    os.Getgid(),
		"groups": must(os.Getgroups()),
		"args":   os.Args,
		"env":    os.Environ(),
		"cwd":    wd,
		"stdin":  string(stdin),
	})
	fmt.Fprintln(os.Stderr, "standin stderr line")
	os.Exit(7)
}

func must[T any](v T, _ error) T { return v }
