package warmpool

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// item is a warm sandbox that is only bookkeeping: the pool's logic is
// what is tested here; the backends' own tests drive real Deno processes
// and Docker execs through it.
type item struct {
	spec      runpolicy.Spec
	usable    atomic.Bool
	discarded atomic.Bool
}

func (i *item) Spec() runpolicy.Spec { return i.spec }
func (i *item) Usable() bool         { return i.usable.Load() }
func (i *item) Discard()             { i.discarded.Store(true) }

type starter struct {
	mu      sync.Mutex
	fail    bool
	started []*item
}

func (s *starter) start(key runpolicy.Spec) (*item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return nil, errors.New("sandbox down")
	}
	it := &item{spec: key}
	it.usable.Store(true)
	s.started = append(s.started, it)
	return it, nil
}

func (s *starter) all() []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.started)
}

func waitIdle(t *testing.T, p *Pool[*item], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Idle() != n {
		if time.Now().After(deadline) {
			t.Fatalf("idle = %d, want %d", p.Idle(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func spec(hosts ...string) runpolicy.Spec { return runpolicy.Spec{Hosts: hosts, MemoryMB: 512} }

// TestPool: the first run starts cold and teaches the pool its
// permissions; later runs take warm items, each once, covering them; a
// run needing more starts cold and the pool is replaced by items
// covering both; unusable items are discarded, never handed out; failed
// starts stop after MaxFails until a cold run works; Close discards
// everything.
func TestPool(t *testing.T) {
	s := &starter{}
	p := New(2, s.start, nil)
	seen := map[*item]bool{} // every item a Take handed out
	take := func(sp runpolicy.Spec) (*item, bool) {
		it, ok := p.Take(sp)
		if ok {
			seen[it] = true
		}
		return it, ok
	}
	if _, ok := take(spec("a")); ok {
		t.Fatal("the first take was warm: the pool cannot know what to warm for yet")
	}
	waitIdle(t, p, 2)
	for range 4 {
		waitIdle(t, p, 2)
		it, ok := p.Take(spec("a"))
		if !ok || seen[it] || !slices.Equal(it.spec.Hosts, []string{"a"}) {
			t.Fatalf("take = %+v, %v (seen before: %v)", it, ok, seen[it])
		}
		seen[it] = true
	}
	// A run that needs no network is covered (the claim revokes it).
	if _, ok := take(spec()); !ok {
		t.Error("a run needing less than the warm items have was not served warm")
	}
	waitIdle(t, p, 2)
	old := s.all()
	if _, ok := take(spec("b")); ok {
		t.Fatal("a run needing a host the warm items lack was served warm")
	}
	waitIdle(t, p, 2)
	for _, h := range [][]string{{"a"}, {"b"}, {"a", "b"}} {
		waitIdle(t, p, 2)
		it, ok := take(spec(h...))
		if !ok || !slices.Equal(it.spec.Hosts, []string{"b", "a"}) {
			t.Errorf("after the union, take(%v) = %+v, %v", h, it, ok)
		}
	}

	// Unusable items are discarded, not handed out.
	waitIdle(t, p, 2)
	p.Each(func(it *item) { it.usable.Store(false) })
	if _, ok := take(spec("a")); ok {
		t.Error("an unusable item was handed out")
	}

	// Starts that fail stop after MaxFails; a cold run that works resumes them.
	waitIdle(t, p, 2) // the starts of the take above are done
	s.mu.Lock()
	s.fail = true
	s.mu.Unlock()
	before := len(s.all())
	for range 2 * MaxFails {
		take(spec("a"))
		time.Sleep(20 * time.Millisecond)
	}
	if len(s.all()) != before || p.Idle() != 0 {
		t.Errorf("items appeared while every start failed")
	}
	s.mu.Lock()
	s.fail = false
	s.mu.Unlock()
	take(spec("a")) // MaxFails failed: no new start
	time.Sleep(50 * time.Millisecond)
	if p.Idle() != 0 {
		t.Errorf("the pool went on starting after %d failures", MaxFails)
	}
	p.ColdOK()
	waitIdle(t, p, 2)
	take(spec("a"))

	p.Close() // waits for the discards under way
	for _, it := range old {
		if !seen[it] && !it.discarded.Load() {
			// An idle item of the old permissions must have been discarded.
			t.Errorf("item %p of the old permissions neither used nor discarded", it)
		}
	}
	if _, ok := p.Take(spec("a")); ok {
		t.Error("a closed pool handed out an item")
	}
	for _, it := range s.all() {
		if !seen[it] && it.usable.Load() && !it.discarded.Load() {
			t.Errorf("item %p neither taken nor discarded after Close", it)
		}
	}
}

// TestPoolSizeZero: a pool of size 0 never starts anything.
func TestPoolSizeZero(t *testing.T) {
	s := &starter{}
	p := New(0, s.start, nil)
	for range 3 {
		if _, ok := p.Take(spec("a")); ok {
			t.Fatal("a pool of size 0 served a run warm")
		}
	}
	time.Sleep(50 * time.Millisecond)
	if len(s.all()) != 0 {
		t.Errorf("a pool of size 0 started %d items", len(s.all()))
	}
	p.Close()
}

// TestPoolWaitsForRoom: while as many runs as the pool leaves room for
// are running, nothing new starts (a warm start would only slow them
// down); when one ends, the pool fills.
func TestPoolWaitsForRoom(t *testing.T) {
	s := &starter{}
	p := New(2, s.start, nil)
	defer p.Close()
	var ends []func()
	for range p.room {
		ends = append(ends, p.Run())
	}
	p.Take(spec("a")) // learns what to warm for; no room to start it
	time.Sleep(50 * time.Millisecond)
	if n := len(s.all()); n != 0 {
		t.Fatalf("%d warm starts while %d runs were running (room %d)", n, p.room, p.room)
	}
	ends[0]()
	ends[0]() // twice is once
	waitIdle(t, p, 2)
	for _, end := range ends[1:] {
		end()
	}
}
