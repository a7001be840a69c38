package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// errBusy means the queue of waiting runs is full.
var errBusy = errors.New("server busy")

// errQueueTimeout means the run's deadline passed while it waited.
var errQueueTimeout = errors.New("timed out while queued")

// queue bounds concurrent runs: a slot per running run, and at most limit
// callers waiting for one.
type queue struct {
	slots   chan struct{}
	limit   int64
	waiting atomic.Int64
	running atomic.Int64
}

func newQueue(concurrent, limit int) *queue {
	return &queue{slots: make(chan struct{}, concurrent), limit: int64(limit)}
}

// acquire takes a slot, waiting until deadline at the latest. It returns
// errBusy at once when limit callers already wait, errQueueTimeout when the
// deadline passes first, and ctx's error when ctx ends first. onWait is
// called once if the caller has to wait.
func (q *queue) acquire(ctx context.Context, deadline time.Time, onWait func()) (release func(), err error) {
	release = func() {
		q.running.Add(-1)
		<-q.slots
	}
	select {
	case q.slots <- struct{}{}:
		q.running.Add(1)
		return release, nil
	default:
	}
	if q.waiting.Add(1) > q.limit {
		q.waiting.Add(-1)
		return nil, errBusy
	}
	defer q.waiting.Add(-1)
	if onWait != nil {
		onWait()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case q.slots <- struct{}{}:
		q.running.Add(1)
		return release, nil
	case <-timer.C:
		return nil, errQueueTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Waiting is how many callers wait for a slot now.
func (q *queue) Waiting() int { return int(q.waiting.Load()) }

// Running is how many slots are taken now.
func (q *queue) Running() int { return int(q.running.Load()) }
