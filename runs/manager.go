package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/sandbox"
)

// Defaults for the zero values of Options.
const (
	DefaultRetention     = 24 * time.Hour
	DefaultMaxTotalBytes = 1 << 30
	DefaultMaxFiles      = 100
	DefaultMaxFileBytes  = 10 << 20
	DefaultMaxRunBytes   = 50 << 20
	DefaultFlushEvery    = time.Second
	// StoreFile is the database's name in Options.Dir.
	StoreFile = "runs.db"
)

// Causes of a run's context ending early, for its final state.
var (
	// ErrCancelled: cancel_run, or a foreground call whose client went
	// away without keep_running.
	ErrCancelled = errors.New("run cancelled")
	// errServerStopping: the Manager is closing.
	errServerStopping = errors.New("server stopping")
)

// idPattern is what a run id looks like (sandbox.NewRunID).
var idPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// Options configure a Manager. Zero values mean the documented defaults.
type Options struct {
	// Dir is the directory of the store (required); it is created 0700.
	Dir string
	// Retention is how long a finished run is kept (default 24h).
	Retention time.Duration
	// MaxTotalBytes caps the output and files of all kept runs together
	// (default 1 GiB); past it the oldest finished runs go first.
	MaxTotalBytes int64
	// Files caps the files kept per run (defaults 100 files, 10 MiB each,
	// 50 MiB per run).
	Files FileLimits
	// FlushEvery is how often a running run's output is written to the
	// store (default 1s).
	FlushEvery time.Duration
	// SweepEvery is how often retention is applied (default 1 min).
	SweepEvery time.Duration
	// Logger receives lifecycle logs (nil: discard).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now); tests of retention move it.
	Now func() time.Time
}

// Spec is one run to start.
type Spec struct {
	Background bool
	CodeBytes  int
	APIs       []string
	Timeout    time.Duration
	// MaxOutput caps each stream, as the sandbox does (for the live copy).
	MaxOutput int
	// OnStdoutLine, if set, gets each stdout line as it comes (see
	// Run.SetStdoutListener); it must not block.
	OnStdoutLine func(line string)
	// Exec runs the code (required). It must return when ctx ends.
	Exec func(ctx context.Context, r *Run) Outcome
}

// Outcome is what Exec reports.
type Outcome struct {
	// Result is the sandbox's result; nil when the code did not run to an
	// end (then Error says why).
	Result *sandbox.Result
	// Queued is how long the run waited for a free slot.
	Queued  time.Duration
	Network []proxy.NetEntry
	Notes   []string
	// Error is the message for a run that did not produce a Result.
	Error string
}

// Manager owns the runs of one server: those in flight, in memory, and
// all of them in the store.
type Manager struct {
	opts  Options
	store *Store
	log   *slog.Logger
	now   func() time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	live  map[string]*Run
	onEnd []func(id string)
	wg    sync.WaitGroup

	sweepDone chan struct{}

	// Records are written by one goroutine (writeLoop) that commits all
	// the changes waiting at once in one transaction: no run waits for
	// an fsync, and many runs share one.
	wmu        sync.Mutex
	wclosed    bool
	writes     chan pendingWrite
	writerDone chan struct{}
}

// pendingWrite is a write with what to do once it is committed.
type pendingWrite struct {
	w     write
	after func()
}

// Open opens the store in opts.Dir, marks the runs a previous process
// left in flight as interrupted, applies retention, and starts the
// background sweep.
func Open(opts Options) (*Manager, error) {
	if opts.Dir == "" {
		return nil, errors.New("runs: Options.Dir is required")
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxTotalBytes <= 0 {
		opts.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if opts.Files.MaxFiles <= 0 {
		opts.Files.MaxFiles = DefaultMaxFiles
	}
	if opts.Files.MaxFileBytes <= 0 {
		opts.Files.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.Files.MaxRunBytes <= 0 {
		opts.Files.MaxRunBytes = DefaultMaxRunBytes
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = DefaultFlushEvery
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	store, err := OpenStore(filepath.Join(opts.Dir, StoreFile))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	m := &Manager{
		opts:       opts,
		store:      store,
		log:        opts.Logger.With("component", "runs"),
		now:        opts.Now,
		ctx:        ctx,
		cancel:     cancel,
		live:       map[string]*Run{},
		sweepDone:  make(chan struct{}),
		writes:     make(chan pendingWrite, 1024),
		writerDone: make(chan struct{}),
	}
	if err := m.markInterrupted(); err != nil {
		store.Close()
		return nil, err
	}
	if _, err := m.Sweep(); err != nil {
		m.log.Warn("retention sweep failed", "err", err)
	}
	go m.sweepLoop()
	go m.writeLoop()
	return m, nil
}

// enqueue hands a record (and, with output, its streams and files) to the
// writer. after, if set, runs once it is committed (or failed).
func (m *Manager) enqueue(rec *Record, output bool, stdout, stderr []byte, files map[string][]byte, after func()) {
	b, err := json.Marshal(rec)
	if err != nil {
		m.log.Error("encode run record", "run", rec.ID, "err", err)
		if after != nil {
			after()
		}
		return
	}
	pw := pendingWrite{w: write{rec: b, id: rec.ID, output: output, stdout: stdout, stderr: stderr, files: files}, after: after}
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.wclosed {
		m.log.Warn("run record not written: the store is closed", "run", rec.ID, "state", rec.State)
		if after != nil {
			after()
		}
		return
	}
	m.writes <- pw
}

// Sync waits until every change made so far is committed to the store.
func (m *Manager) Sync() {
	done := make(chan struct{})
	m.wmu.Lock()
	if m.wclosed {
		m.wmu.Unlock()
		return
	}
	m.writes <- pendingWrite{after: func() { close(done) }}
	m.wmu.Unlock()
	<-done
}

// writeLoop commits queued writes, as many as are waiting in one
// transaction, in the order they came.
func (m *Manager) writeLoop() {
	defer close(m.writerDone)
	for pw := range m.writes {
		batch := []pendingWrite{pw}
	more:
		for len(batch) < 256 {
			select {
			case next, ok := <-m.writes:
				if !ok {
					break more
				}
				batch = append(batch, next)
			default:
				break more
			}
		}
		ws := make([]write, len(batch))
		for i, p := range batch {
			ws[i] = p.w
		}
		if err := m.store.apply(ws); err != nil {
			m.log.Error("write run records", "runs", len(ws), "err", err)
		}
		for _, p := range batch {
			if p.after != nil {
				p.after()
			}
		}
	}
}

// markInterrupted turns every record left queued or running by an
// earlier process into an interrupted one.
func (m *Manager) markInterrupted() error {
	recs, err := m.store.List()
	if err != nil {
		return fmt.Errorf("run store: %w", err)
	}
	now := m.now().UTC()
	n := 0
	for _, rec := range recs {
		if rec.State.Final() {
			continue
		}
		was := rec.State
		rec.State = Interrupted
		rec.Ended = now
		rec.Error = fmt.Sprintf("interrupted: the server stopped while this run was %s; found at the restart at %s. "+
			"Output written until then is kept (run_output); run the code again if it must finish.",
			was, now.Format(time.RFC3339))
		if err := m.store.Put(rec); err != nil {
			return fmt.Errorf("run store: mark run %s interrupted: %w", rec.ID, err)
		}
		n++
	}
	if n > 0 {
		m.log.Warn("runs interrupted by a restart", "runs", n)
	}
	return nil
}

// OnEnd registers f to be called (in a goroutine of its own) with the id
// of each run once its final record is written.
func (m *Manager) OnEnd(f func(id string)) {
	m.mu.Lock()
	m.onEnd = append(m.onEnd, f)
	m.mu.Unlock()
}

// Settings reports the limits in force (defaults filled in).
func (m *Manager) Settings() Options { return m.opts }

// Start records a new queued run and starts spec.Exec in its own goroutine.
func (m *Manager) Start(spec Spec) (*Run, error) {
	if spec.Exec == nil {
		return nil, errors.New("runs: Spec.Exec is required")
	}
	if err := m.ctx.Err(); err != nil {
		return nil, errors.New("the server is shutting down; nothing ran")
	}
	id, err := sandbox.NewRunID()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(m.ctx)
	r := &Run{
		m:        m,
		id:       id,
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		max:      spec.MaxOutput,
		onStdout: spec.OnStdoutLine,
		rec: &Record{
			ID:         id,
			State:      Queued,
			Background: spec.Background,
			CodeBytes:  spec.CodeBytes,
			APIs:       spec.APIs,
			TimeoutMS:  spec.Timeout.Milliseconds(),
			Created:    m.now().UTC(),
			MaxOutput:  spec.MaxOutput,
		},
	}
	m.mu.Lock()
	m.live[id] = r
	m.wg.Add(1)
	m.mu.Unlock()
	m.enqueue(r.rec.clone(), false, nil, nil, nil, nil)
	m.log.Info("run queued", "run", id, "background", spec.Background)
	go r.flushLoop()
	go func() {
		defer m.wg.Done()
		out := spec.Exec(ctx, r)
		r.finish(out)
	}()
	return r, nil
}

// CheckID refuses a string that cannot be a run id, with a message that
// says what one looks like.
func CheckID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%q is not a run id: ids are 16 lowercase hex digits, as execute_code and list_runs return them", truncate(id, 40))
	}
	return nil
}

func notFound(id string) error {
	return fmt.Errorf("no run %s on this server (it may have passed its retention): list_runs shows the runs kept: %w", id, ErrNotFound)
}

// Live returns the run in flight with id, or nil.
func (m *Manager) Live(id string) *Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// Get returns a run's record: the live one while it is in flight.
func (m *Manager) Get(id string) (*Record, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if r := m.Live(id); r != nil {
		return r.Snapshot(), nil
	}
	rec, err := m.store.Get(id)
	if errors.Is(err, ErrNotFound) {
		return nil, notFound(id)
	}
	return rec, err
}

// Output reads a whole stream of a run ("stdout" or "stderr"): what it
// has printed so far while it runs.
func (m *Manager) Output(id, stream string) ([]byte, *Record, error) {
	if err := CheckID(id); err != nil {
		return nil, nil, err
	}
	if stream != "stdout" && stream != "stderr" {
		return nil, nil, fmt.Errorf("stream %q: want stdout or stderr", truncate(stream, 40))
	}
	if r := m.Live(id); r != nil {
		rec, out := r.output(stream)
		return out, rec, nil
	}
	rec, err := m.store.Get(id)
	if errors.Is(err, ErrNotFound) {
		return nil, nil, notFound(id)
	}
	if err != nil {
		return nil, nil, err
	}
	out, err := m.store.Output(id, stream)
	if errors.Is(err, ErrNotFound) {
		out, err = nil, nil // recorded before it printed anything
	}
	return out, rec, err
}

// File reads one of a finished run's files.
func (m *Manager) File(id, name string) ([]byte, File, error) {
	rec, err := m.Get(id)
	if err != nil {
		return nil, File{}, err
	}
	i := slices.IndexFunc(rec.Files, func(f File) bool { return f.Name == name })
	if i < 0 {
		return nil, File{}, fmt.Errorf("run %s has no file %q: its files are listed in run_status: %w", id, truncate(name, 60), ErrNotFound)
	}
	if r := m.Live(id); r != nil {
		// Ended, its final record not committed yet: from memory.
		r.mu.Lock()
		data, ok := r.fileData[name]
		r.mu.Unlock()
		if ok {
			return data, rec.Files[i], nil
		}
	}
	data, err := m.store.File(id, name)
	if err != nil {
		return nil, File{}, fmt.Errorf("read file %s of run %s: %w", name, id, err)
	}
	return data, rec.Files[i], nil
}

// List returns the runs kept, newest first, those in state only when
// state is not "".
func (m *Manager) List(state State) ([]*Record, error) {
	recs, err := m.store.List()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	seen := map[string]bool{}
	for i, rec := range recs {
		seen[rec.ID] = true
		if r := m.live[rec.ID]; r != nil {
			recs[i] = r.Snapshot()
		}
	}
	for id, r := range m.live {
		if !seen[id] {
			recs = append(recs, r.Snapshot()) // not written yet
		}
	}
	m.mu.Unlock()
	recs = slices.DeleteFunc(recs, func(r *Record) bool { return state != "" && r.State != state })
	slices.SortFunc(recs, func(a, b *Record) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return compareStrings(b.ID, a.ID)
	})
	return recs, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Cancel stops a run in flight and waits for its final record; for a run
// that has ended it changes nothing. It returns the record and whether
// this call stopped it.
func (m *Manager) Cancel(ctx context.Context, id string) (*Record, bool, error) {
	if err := CheckID(id); err != nil {
		return nil, false, err
	}
	r := m.Live(id)
	if r == nil {
		rec, err := m.Get(id)
		return rec, false, err
	}
	stopped := r.Cancel()
	select {
	case <-r.Done():
	case <-ctx.Done():
		return r.Snapshot(), stopped, fmt.Errorf("run %s is being stopped but has not ended yet: %w", id, ctx.Err())
	}
	rec, err := m.Get(id)
	return rec, stopped, err
}

// ExpiresAt is when a finished run will be removed at the latest (runs
// may go sooner when all of them pass MaxTotalBytes). Zero while it runs.
func (m *Manager) ExpiresAt(rec *Record) time.Time {
	if !rec.State.Final() || rec.Ended.IsZero() {
		return time.Time{}
	}
	return rec.Ended.Add(m.opts.Retention)
}

// Sweep removes finished runs past their retention, then the oldest
// finished runs while all runs together hold more than MaxTotalBytes. It
// returns how many it removed.
func (m *Manager) Sweep() (int, error) {
	recs, err := m.store.List()
	if err != nil {
		return 0, err
	}
	now := m.now()
	var doomed []string
	var total int64
	var finished []*Record
	for _, rec := range recs {
		if rec.State.Final() && now.After(rec.Ended.Add(m.opts.Retention)) {
			doomed = append(doomed, rec.ID)
			continue
		}
		total += rec.Size()
		if rec.State.Final() && m.Live(rec.ID) == nil {
			finished = append(finished, rec)
		}
	}
	slices.SortFunc(finished, func(a, b *Record) int { return a.Ended.Compare(b.Ended) })
	for _, rec := range finished {
		if total <= m.opts.MaxTotalBytes {
			break
		}
		doomed = append(doomed, rec.ID)
		total -= rec.Size()
	}
	if err := m.store.Delete(doomed...); err != nil {
		return 0, err
	}
	if len(doomed) > 0 {
		m.log.Info("runs removed by retention", "runs", len(doomed), "kept_bytes", total)
	}
	return len(doomed), nil
}

func (m *Manager) sweepLoop() {
	defer close(m.sweepDone)
	ticker := time.NewTicker(m.opts.SweepEvery)
	defer ticker.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-ticker.C:
		}
		if _, err := m.Sweep(); err != nil {
			m.log.Warn("retention sweep failed", "err", err)
		}
	}
}

// Close stops the runs in flight (they are recorded as interrupted),
// waits for them up to ctx, and closes the store.
func (m *Manager) Close(ctx context.Context) error {
	m.cancel(errServerStopping)
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		m.log.Warn("runs still ending at shutdown; they will be marked interrupted at the next start")
	}
	<-m.sweepDone
	m.wmu.Lock()
	m.wclosed = true
	close(m.writes)
	m.wmu.Unlock()
	<-m.writerDone
	return m.store.Close()
}

// Run is a run in flight.
type Run struct {
	m      *Manager
	id     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	max    int

	// writeMu orders the store writes of the flush loop and finish, so
	// a late flush never overwrites the final record.
	writeMu sync.Mutex
	ended   bool

	mu        sync.Mutex
	rec       *Record
	stdout    []byte
	stderr    []byte
	dirty     bool
	files     []File
	fileData  map[string][]byte
	fileNotes []string
	onStdout  func(string)
}

// ID is the run's id.
func (r *Run) ID() string { return r.id }

// Done is closed once the run's final record is written.
func (r *Run) Done() <-chan struct{} { return r.done }

// Cancel stops the run; it reports false when the run had already ended
// or been stopped.
func (r *Run) Cancel() bool {
	select {
	case <-r.done:
		return false
	default:
	}
	if r.ctx.Err() != nil {
		return false
	}
	r.cancel(ErrCancelled)
	return true
}

// Snapshot returns a copy of the run's record as it is now.
func (r *Run) Snapshot() *Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.clone()
}

func (r *Run) output(stream string) (*Record, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stream == "stderr" {
		return r.rec.clone(), append([]byte(nil), r.stderr...)
	}
	return r.rec.clone(), append([]byte(nil), r.stdout...)
}

// Running records that the code started (it got a slot).
func (r *Run) Running(queued time.Duration) {
	r.mu.Lock()
	r.rec.State = Running
	r.rec.Started = r.m.now().UTC()
	r.rec.QueuedMS = queued.Milliseconds()
	rec := r.rec.clone()
	r.mu.Unlock()
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.ended {
		return
	}
	r.m.enqueue(rec, false, nil, nil, nil, nil)
}

// SetStdoutListener sets (or, with nil, removes) a func that gets each
// stdout line too; it must not block.
func (r *Run) SetStdoutListener(f func(string)) {
	r.mu.Lock()
	r.onStdout = f
	r.mu.Unlock()
}

// StdoutLine takes one line the code printed on stdout.
func (r *Run) StdoutLine(line string) {
	r.mu.Lock()
	r.stdout = appendLine(r.stdout, line, r.max)
	r.rec.StdoutBytes = int64(len(r.stdout))
	r.dirty = true
	f := r.onStdout
	r.mu.Unlock()
	if f != nil {
		f(line)
	}
}

// StderrLine takes one line the code printed on stderr.
func (r *Run) StderrLine(line string) {
	r.mu.Lock()
	r.stderr = appendLine(r.stderr, line, r.max)
	r.rec.StderrBytes = int64(len(r.stderr))
	r.dirty = true
	r.mu.Unlock()
}

// appendLine adds line and a newline to buf, never past max bytes (the
// sandbox's own cap: the lines it hands over are what it kept).
func appendLine(buf []byte, line string, max int) []byte {
	if max > 0 && len(buf)+len(line)+1 > max {
		room := max - len(buf)
		if room <= 0 {
			return buf
		}
		s := line + "\n"
		cut := room
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return append(buf, s[:cut]...)
	}
	buf = append(buf, line...)
	return append(buf, '\n')
}

// CollectOut keeps the files in dir (the run's out/ directory, read once
// the code has ended); the backend calls it before removing the scratch
// directory, with notes for files it could not hand over.
func (r *Run) CollectOut(dir string, skipped []string) {
	files, data, notes := CollectFiles(dir, r.m.opts.Files)
	notes = append(notes, skipped...)
	r.mu.Lock()
	r.files, r.fileData, r.fileNotes = files, data, notes
	r.mu.Unlock()
}

// flushLoop writes the live output every FlushEvery while it changes, so
// that a crash loses at most that much.
func (r *Run) flushLoop() {
	ticker := time.NewTicker(r.m.opts.FlushEvery)
	defer ticker.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.done:
			return
		case <-ticker.C:
		}
		r.writeMu.Lock()
		r.mu.Lock()
		if !r.dirty || r.ended {
			r.mu.Unlock()
			r.writeMu.Unlock()
			continue
		}
		r.dirty = false
		rec := r.rec.clone()
		stdout := append([]byte(nil), r.stdout...)
		stderr := append([]byte(nil), r.stderr...)
		r.mu.Unlock()
		r.m.enqueue(rec, true, stdout, stderr, nil, nil)
		r.writeMu.Unlock()
	}
}

// finish writes the final record and ends the run.
func (r *Run) finish(out Outcome) {
	cause := context.Cause(r.ctx)
	r.writeMu.Lock()
	r.mu.Lock()
	r.ended = true
	rec := r.rec
	rec.Ended = r.m.now().UTC()
	if rec.Started.IsZero() && out.Result != nil {
		rec.Started = rec.Ended
	}
	if out.Queued > 0 {
		rec.QueuedMS = out.Queued.Milliseconds()
	}
	rec.Network = out.Network
	rec.Notes = append(append([]string(nil), r.fileNotes...), out.Notes...)
	rec.Files = r.files
	stdout, stderr := r.stdout, r.stderr
	if res := out.Result; res != nil {
		stdout, stderr = []byte(res.Stdout), []byte(res.Stderr)
		rec.ExitCode = res.ExitCode
		rec.TimedOut = res.TimedOut
		rec.OutOfMemory = res.OutOfMemory
		rec.Truncated = res.Truncated
		rec.DroppedBytes = res.DroppedBytes
		rec.DurationMS = res.Duration.Milliseconds()
	}
	rec.StdoutBytes, rec.StderrBytes = int64(len(stdout)), int64(len(stderr))
	switch {
	case errors.Is(cause, errServerStopping):
		rec.State = Interrupted
		rec.Error = fmt.Sprintf("interrupted: the server shut down at %s while this run was in flight; output until then is kept (run_output)",
			rec.Ended.Format(time.RFC3339))
	case errors.Is(cause, ErrCancelled):
		rec.State = Cancelled
		rec.Error = "execute_code: cancelled; the run was stopped"
	case out.Result == nil:
		rec.State = Failed
		rec.Error = out.Error
		if rec.Error == "" {
			rec.Error = "execute_code: the run ended without a result"
		}
	case out.Result.TimedOut:
		rec.State = TimedOut
	case out.Result.ExitCode != 0 || out.Result.OutOfMemory:
		rec.State = Failed
	default:
		rec.State = Succeeded
	}
	if out.Result == nil && rec.DurationMS == 0 && !rec.Started.IsZero() {
		rec.DurationMS = rec.Ended.Sub(rec.Started).Milliseconds()
	}
	r.stdout, r.stderr = stdout, stderr
	final := rec.clone()
	files := r.fileData
	r.mu.Unlock()

	// The run stays in the live map (readers see it from memory) until
	// its final record is committed; waiters need not wait for that.
	r.m.enqueue(final, true, stdout, stderr, files, func() {
		r.m.mu.Lock()
		delete(r.m.live, r.id)
		r.m.mu.Unlock()
		// Retention is checked every SweepEvery, not after each run: a
		// sweep reads every record.
	})
	r.writeMu.Unlock()
	r.cancel(nil)
	close(r.done)
	r.m.log.Info("run ended", "run", r.id, "state", final.State, "duration_ms", final.DurationMS)
	r.m.mu.Lock()
	listeners := slices.Clone(r.m.onEnd)
	r.m.mu.Unlock()
	for _, f := range listeners {
		go f(r.id)
	}
}

// Final returns the final record and output of a run that has ended (from
// memory, so it is there even if retention removed it from the store).
func (r *Run) Final() (*Record, []byte, []byte, map[string][]byte) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.clone(), r.stdout, r.stderr, r.fileData
}
