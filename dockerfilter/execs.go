package dockerfilter

import (
	"sync"
	"time"
)

// execRegistry remembers the exec IDs the filter created, so that only
// those can be started (once) and inspected. It holds at most max IDs,
// forgetting the oldest first, each for at most ttl.
type execRegistry struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	now   func() time.Time
	execs map[string]*execEntry
	order []string // IDs in creation order (may hold IDs already forgotten)
}

type execEntry struct {
	created time.Time
	started bool
}

func newExecRegistry(max int, ttl time.Duration, now func() time.Time) *execRegistry {
	return &execRegistry{max: max, ttl: ttl, now: now, execs: map[string]*execEntry{}}
}

// add remembers a newly created exec.
func (r *execRegistry) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked()
	for len(r.execs) >= r.max && len(r.order) > 0 {
		delete(r.execs, r.order[0])
		r.order = r.order[1:]
	}
	r.execs[id] = &execEntry{created: r.now()}
	r.order = append(r.order, id)
}

// known reports whether id was created by the filter and has not expired.
func (r *execRegistry) known(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked()
	_, ok := r.execs[id]
	return ok
}

// start marks id started; it reports false when id is unknown, expired or
// already started.
func (r *execRegistry) start(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked()
	e, ok := r.execs[id]
	if !ok || e.started {
		return false
	}
	e.started = true
	return true
}

// expireLocked forgets IDs older than ttl (order is by creation time).
func (r *execRegistry) expireLocked() {
	cutoff := r.now().Add(-r.ttl)
	for len(r.order) > 0 {
		id := r.order[0]
		e, ok := r.execs[id]
		if ok && e.created.After(cutoff) {
			break
		}
		delete(r.execs, id)
		r.order = r.order[1:]
	}
}
