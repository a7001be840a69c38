package server

import (
	"context"
	"errors"

	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/sandbox"
)

// buildDockerBackend builds the Docker sandbox runner and the gate of the
// proxy container for `serve --sandbox docker`.
func buildDockerBackend(ctx context.Context, cfg *config) (sandbox.Runner, proxy.Gate, error) {
	return nil, nil, errors.New("docker backend not built yet: use --sandbox local (SANDBOX_BACKEND=local)")
}
