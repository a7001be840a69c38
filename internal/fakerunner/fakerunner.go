// Package fakerunner is a sandbox.Runner that runs nothing, for tests of
// contracts that do not depend on a run (tool schemas, instructions,
// argument checks): they then need neither Deno nor root. Tests of what a
// run does use the real local or Docker runner.
package fakerunner

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/codeforge/codeforge/sandbox"
)

// Runner answers every run with Result (or Err) and counts the runs.
// The zero value answers an empty successful result with an empty
// Environment; set Environment to what the real backend would report.
type Runner struct {
	Environment sandbox.Environment
	// Result is returned (a copy) for every run; nil means an empty
	// successful result.
	Result *sandbox.Result
	// Err, when set, is returned instead of a result.
	Err error
	// NotReady, when set, is what Ready reports.
	NotReady error

	runs   atomic.Int64
	closed atomic.Bool
}

var _ sandbox.Runner = (*Runner)(nil)

// Run counts the run and answers the canned result.
func (r *Runner) Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error) {
	if r.closed.Load() {
		return nil, errors.New("fake runner is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.runs.Add(1)
	if r.Err != nil {
		return nil, r.Err
	}
	res := sandbox.Result{}
	if r.Result != nil {
		res = *r.Result
	}
	return &res, nil
}

// Runs is how many runs were asked for.
func (r *Runner) Runs() int64 { return r.runs.Load() }

// Env returns Environment.
func (r *Runner) Env() sandbox.Environment { return r.Environment }

// Ready returns NotReady.
func (r *Runner) Ready(context.Context) error { return r.NotReady }

// Close makes later runs fail.
func (r *Runner) Close() error {
	r.closed.Store(true)
	return nil
}
