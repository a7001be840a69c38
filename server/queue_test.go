package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// occupy starts a long run that holds a slot until the returned func is
// called (which cancels it and waits for the call to end).
func (h *harness) occupy() (release func()) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	before := h.runner.inFlight.Load()
	go func() {
		defer close(done)
		h.session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code",
			Arguments: map[string]any{"code": `await new Promise((r) => setTimeout(r, 120_000))`, "timeout": 120}})
	}()
	waitFor(h.t, "the blocking run to start", func() bool { return h.runner.inFlight.Load() > before })
	return func() { cancel(); <-done }
}

func TestQueueFullIsServerBusy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxConcurrent = 1; o.QueueLimit = 1 }})
	release := h.occupy()
	defer release()

	waiting := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := h.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code",
			Arguments: map[string]any{"code": `console.log("waited")`, "timeout": 120}})
		waiting <- res
	}()
	waitFor(t, "a call to wait in the queue", func() bool { return h.srv.queue.Waiting() == 1 })

	runs := h.runner.runs.Load()
	res := h.run(`console.log("third")`)
	if text := allText(res); !res.IsError || !strings.Contains(text, "server busy") || !strings.Contains(text, "nothing ran") {
		t.Fatalf("call beyond the queue limit: IsError=%v %q", res.IsError, text)
	}
	if h.runner.runs.Load() != runs {
		t.Fatal("the refused call started a run")
	}
	release()
	if res := <-waiting; res == nil || allText(res) != "waited\n" {
		t.Fatalf("queued call: %v", res)
	}
}

// TestQueueWaitCountsAgainstTimeout: a call whose timeout passes while it
// waits for a slot times out without running.
func TestQueueWaitCountsAgainstTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxConcurrent = 1 }})
	release := h.occupy()
	defer release()
	runs := h.runner.runs.Load()
	res := h.run(`console.log("late")`, "timeout", 1)
	text := allText(res)
	if !res.IsError || !strings.Contains(text, "timed out after 1s") || !strings.Contains(text, "waiting for a free slot") {
		t.Fatalf("IsError=%v %q", res.IsError, text)
	}
	if out := output(t, res); !out.TimedOut {
		t.Fatalf("structuredContent = %+v", out)
	}
	if h.runner.runs.Load() != runs {
		t.Fatal("a call that timed out in the queue still ran")
	}
}

func TestQueueCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{edit: func(o *Options) { o.MaxConcurrent = 1 }})
	release := h.occupy()
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code",
			Arguments: map[string]any{"code": `console.log(1)`, "timeout": 120}})
		errc <- err
	}()
	waitFor(t, "a call to wait in the queue", func() bool { return h.srv.queue.Waiting() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	waitFor(t, "the waiter to leave the queue", func() bool { return h.srv.queue.Waiting() == 0 })
}

// TestQueueUnit exercises the semaphore alone: limits, deadline, cancel.
func TestQueueUnit(t *testing.T) {
	t.Parallel()
	q := newQueue(1, 1)
	far := time.Now().Add(time.Hour)
	rel, err := q.acquire(context.Background(), far, nil)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	var called bool
	go func() {
		r, err := q.acquire(context.Background(), far, func() { called = true })
		if err == nil {
			r()
		}
		waited <- err
	}()
	waitFor(t, "a waiter", func() bool { return q.Waiting() == 1 })
	if _, err := q.acquire(context.Background(), far, nil); !errors.Is(err, errBusy) {
		t.Fatalf("over the queue limit: %v, want errBusy", err)
	}
	rel()
	if err := <-waited; err != nil || !called {
		t.Fatalf("waiter: err=%v onWait called=%v", err, called)
	}

	rel, _ = q.acquire(context.Background(), far, nil)
	defer rel()
	if _, err := q.acquire(context.Background(), time.Now().Add(50*time.Millisecond), nil); !errors.Is(err, errQueueTimeout) {
		t.Fatalf("deadline while waiting: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.acquire(ctx, far, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while waiting: %v", err)
	}
	if q.Waiting() != 0 || q.Running() != 1 {
		t.Fatalf("waiting=%d running=%d", q.Waiting(), q.Running())
	}
}
