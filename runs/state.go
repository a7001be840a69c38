package runs

import (
	"fmt"
	"strings"
)

// State is where a run is in its life.
type State string

// The states of a run. Queued and Running are in flight; the others are
// final.
const (
	Queued      State = "queued"
	Running     State = "running"
	Succeeded   State = "succeeded"
	Failed      State = "failed"
	TimedOut    State = "timed_out"
	Cancelled   State = "cancelled"
	Interrupted State = "interrupted"
)

// States lists every state, in life order.
var States = []State{Queued, Running, Succeeded, Failed, TimedOut, Cancelled, Interrupted}

// Final reports whether a run in state s has ended.
func (s State) Final() bool { return s != Queued && s != Running }

// ParseState checks a state name given by a client.
func ParseState(name string) (State, error) {
	for _, s := range States {
		if string(s) == name {
			return s, nil
		}
	}
	names := make([]string, len(States))
	for i, s := range States {
		names[i] = string(s)
	}
	return "", fmt.Errorf("unknown state %q: want one of %s", truncate(name, 40), strings.Join(names, ", "))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
