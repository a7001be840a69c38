// Package warmpool keeps a backend's warm sandboxes: Deno processes (or
// Docker execs of them) started ahead of their run and waiting for its
// code. Both backends use it; what a warm sandbox is, how it starts and
// how it ends is theirs (the Item interface), what the pool does is here.
//
// A pool learns the permissions to warm for from the runs it is asked to
// serve: a run that its warm sandboxes cannot cover (runpolicy.Covers)
// starts cold, and the pool is replaced by sandboxes whose permissions
// cover both (runpolicy.Union); what a warm sandbox has beyond its run's
// needs, the run's claim revokes before its code starts. Each serves one
// run and is never reused; the pool refills in the background. Starts
// that fail (the sandbox is down) stop refilling after MaxFails in a row,
// until a cold run works again (ColdOK).
package warmpool

import (
	"log/slog"
	"runtime"
	"sync"

	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// Item is one warm sandbox.
type Item interface {
	// Spec is what it was started with.
	Spec() runpolicy.Spec
	// Usable reports whether it can still serve a run (it has not
	// exited, what it trusts has not changed since it started).
	Usable() bool
	// Discard ends it and removes what it left; it may block (the pool
	// calls it in a goroutine of its own and waits for it on Close).
	Discard()
}

// MaxFails is how many warm starts in a row may fail before the pool
// stops refilling until a cold run works.
const MaxFails = 3

// Pool keeps up to a size of warm items of type T.
type Pool[T Item] struct {
	size  int
	start func(key runpolicy.Spec) (T, error)
	room  int // refills only while fewer runs than this are running
	log   *slog.Logger

	mu       sync.Mutex
	key      *runpolicy.Spec
	ready    []T
	starting int
	gen      int
	closed   bool
	fails    int
	running  int
	wg       sync.WaitGroup
}

// New is a pool of size (0: never warm) whose items start is called to
// start for a key: the permissions of the runs the pool serves, without
// anything that belongs to one run (scratch, cache, proxy).
//
// The pool refills only while fewer runs than half the CPUs are running
// (see Run): a warm start costs what a cold one does, and while runs keep
// the machine busy it would only slow them down. Under such load runs
// start cold, as without a pool; the pool fills again as the load drops.
func New[T Item](size int, start func(key runpolicy.Spec) (T, error), log *slog.Logger) *Pool[T] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pool[T]{size: size, start: start, room: max(1, runtime.NumCPU()/2), log: log}
}

// Run notes that a run has started; the function it returns notes that
// it has ended (and refills the pool if there is room now). A backend
// calls it around every run, warm or cold.
func (p *Pool[T]) Run() (end func()) {
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.running--
			p.refillLocked()
		})
	}
}

// Take returns a warm item whose permissions cover key, and true; or
// false when there is none, and the run starts cold (the pool learns key
// for the next runs).
func (p *Pool[T]) Take(key runpolicy.Spec) (T, bool) {
	var none T
	if p.size <= 0 {
		return none, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return none, false
	}
	if p.key == nil {
		p.replaceLocked(key)
		return none, false
	}
	if _, ok := runpolicy.Covers(*p.key, key); !ok {
		p.replaceLocked(runpolicy.Union(*p.key, key))
		return none, false
	}
	for len(p.ready) > 0 {
		it := p.ready[0]
		p.ready = p.ready[1:]
		if _, ok := runpolicy.Covers(it.Spec(), key); !ok || !it.Usable() {
			p.discardLocked(it)
			continue
		}
		p.refillLocked()
		return it, true
	}
	p.refillLocked()
	return none, false
}

// Flush discards the warm items and starts new ones for the same
// permissions (the sandbox they belong to may be gone).
func (p *Pool[T]) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.key != nil {
		p.replaceLocked(*p.key)
	}
}

// ColdOK tells the pool a cold run just worked: warm starts that failed
// before (the sandbox was down) may be tried again.
func (p *Pool[T]) ColdOK() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fails >= MaxFails {
		p.fails = 0
		p.refillLocked()
	}
}

// Idle reports how many warm items wait for a run.
func (p *Pool[T]) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// Each calls f with each idle item, with the pool locked.
func (p *Pool[T]) Each(f func(T)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range p.ready {
		f(it)
	}
}

// Close discards every warm item and waits until they (and the starts
// under way) are gone.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	p.closed = true
	for _, it := range p.ready {
		p.discardLocked(it)
	}
	p.ready = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Pool[T]) replaceLocked(key runpolicy.Spec) {
	p.key = &key
	p.gen++
	p.fails = 0
	for _, it := range p.ready {
		p.discardLocked(it)
	}
	p.ready = nil
	p.refillLocked()
}

func (p *Pool[T]) refillLocked() {
	for !p.closed && p.key != nil && p.fails < MaxFails && len(p.ready)+p.starting < p.size && p.running < p.room {
		p.starting++
		gen, key := p.gen, *p.key
		p.wg.Go(func() {
			it, err := p.start(key)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.starting--
			switch {
			case err != nil:
				p.fails++
				p.log.Warn("warm start failed", "err", err, "failures", p.fails)
			case p.closed || gen != p.gen:
				p.discardLocked(it)
			default:
				p.fails = 0
				p.ready = append(p.ready, it)
			}
		})
	}
}

func (p *Pool[T]) discardLocked(it T) {
	p.wg.Go(it.Discard)
}
