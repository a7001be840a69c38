package sandbox

import (
	"context"
	"errors"
)

// ErrNetworkDown marks a backend error that means the sandbox cannot reach
// the egress proxy: its network path is broken (in the Docker stack, a
// restarted netguard, while the socket filter moves the sandbox into its
// new namespace). Ready and Run wrap it; the words are what the user sees.
var ErrNetworkDown = errors.New("the sandbox's network is down and is being restored")

// freshKey marks a context whose Ready must look again.
type freshKey struct{}

// FreshReady returns ctx marked so that Ready checks the backend again
// rather than trust a recent success. Runs use the cached answer (a check
// per run would cost what a run costs); /health uses a fresh one, so that
// it reports an outage while it lasts.
func FreshReady(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshKey{}, true)
}

// WantsFreshReady reports whether ctx came from FreshReady.
func WantsFreshReady(ctx context.Context) bool {
	v, _ := ctx.Value(freshKey{}).(bool)
	return v
}
