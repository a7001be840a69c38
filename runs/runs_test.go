package runs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/sandbox"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCollectFilesRefusesLinks is the attack: code plants out/ links to a
// file of the server's (a symlink, and a symlinked out/ directory); the
// server must hand back neither.
func TestCollectFilesRefusesLinks(t *testing.T) {
	t.Parallel()
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "server-secret")
	writeFile(t, secret, "TOP SECRET")
	scratch := t.TempDir()
	out := filepath.Join(scratch, "out")
	writeFile(t, filepath.Join(out, "ok.txt"), "fine")
	if err := os.Symlink(secret, filepath.Join(out, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../"+filepath.Base(secretDir)+"/server-secret", filepath.Join(out, "rel.txt")); err != nil {
		t.Fatal(err)
	}
	files, data, notes := CollectFiles(out, FileLimits{MaxFiles: 10, MaxFileBytes: 1 << 20, MaxRunBytes: 1 << 20})
	if len(files) != 1 || files[0].Name != "ok.txt" || string(data["ok.txt"]) != "fine" {
		t.Fatalf("files = %+v", files)
	}
	for name, b := range data {
		if strings.Contains(string(b), "SECRET") {
			t.Fatalf("%s carries the server's file", name)
		}
	}
	joined := strings.Join(notes, "\n")
	if !strings.Contains(joined, "out/leak.txt not kept: it is a symbolic link") || !strings.Contains(joined, "out/rel.txt not kept") {
		t.Fatalf("notes = %q", notes)
	}

	// out/ itself a link to a directory of the server's.
	scratch2 := t.TempDir()
	if err := os.Symlink(secretDir, filepath.Join(scratch2, "out")); err != nil {
		t.Fatal(err)
	}
	files, data, notes = CollectFiles(filepath.Join(scratch2, "out"), FileLimits{MaxFiles: 10, MaxFileBytes: 1 << 20, MaxRunBytes: 1 << 20})
	for name, b := range data {
		if strings.Contains(string(b), "SECRET") {
			t.Fatalf("out/ as a link to a server directory handed back %s (%+v)", name, files)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "out is not a directory") {
		t.Fatalf("notes for a linked out/ = %q", notes)
	}
}

// TestCollectFilesCaps: per-file, per-run and count caps each leave a
// note; names that would need escaping are refused.
func TestCollectFilesCaps(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	writeFile(t, filepath.Join(out, "a.csv"), "1234")
	writeFile(t, filepath.Join(out, "b.csv"), "12345678")
	writeFile(t, filepath.Join(out, "c.csv"), "123456789012")
	writeFile(t, filepath.Join(out, "d.csv"), "1")
	writeFile(t, filepath.Join(out, "e.csv"), "1")
	writeFile(t, filepath.Join(out, ".hidden"), "1")
	writeFile(t, filepath.Join(out, "sp ace"), "1")
	files, _, notes := CollectFiles(out, FileLimits{MaxFiles: 3, MaxFileBytes: 10, MaxRunBytes: 12})
	joined := strings.Join(notes, "\n")
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "a.csv,b.csv" {
		t.Fatalf("kept %v; notes %q", names, notes)
	}
	for _, want := range []string{
		`out/".hidden" not kept: file names must be`,
		`out/"sp ace" not kept`,
		"out/c.csv not kept: it is 12 bytes, over the cap of 10 bytes per file",
		"out/d.csv not kept: with it the run's files would be 13 bytes, over the cap of 12 bytes per run",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q lack %q", joined, want)
		}
	}
	if _, _, notes := CollectFiles(out, FileLimits{MaxFiles: 1, MaxFileBytes: 10, MaxRunBytes: 100}); !strings.Contains(strings.Join(notes, "\n"), "out/b.csv not kept: a run keeps at most 1 files") {
		t.Errorf("count cap notes: %q", notes)
	}
	if files, _, notes := CollectFiles(filepath.Join(out, "missing"), FileLimits{MaxFiles: 1, MaxFileBytes: 1, MaxRunBytes: 1}); files != nil || notes != nil {
		t.Fatalf("missing out/: %v %v", files, notes)
	}
}

func TestDetectMIME(t *testing.T) {
	t.Parallel()
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
	cases := []struct{ name, data, want string }{
		{"x.png", png, "image/png"},
		{"x.bin", png, "image/png"},
		{"x.png", "not a png", "text/plain"},
		{"x.jpg", "\xff\xd8\xff\xe0", "image/jpeg"},
		{"x.gif", "GIF89a....", "image/gif"},
		{"x.webp", "RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"},
		{"t.csv", "a,b\n", "text/csv"},
		{"x.dat", "\x00\x01\x02", "application/octet-stream"},
	}
	for _, c := range cases {
		if got := DetectMIME(c.name, []byte(c.data)); got != c.want {
			t.Errorf("DetectMIME(%s, %q) = %s, want %s", c.name, c.data, got, c.want)
		}
	}
}

// quick is an Exec that succeeds at once with stdout.
func quick(stdout string) func(context.Context, *Run) Outcome {
	return func(_ context.Context, r *Run) Outcome {
		r.Running(0)
		return Outcome{Result: &sandbox.Result{Stdout: stdout, Duration: time.Millisecond}}
	}
}

// TestRetention: ended runs go after Retention, and the oldest first once
// all of them pass MaxTotalBytes; runs in flight never.
func TestRetention(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m, err := Open(Options{Dir: t.TempDir(), Retention: time.Hour, MaxTotalBytes: 3 * (1024 + 1000), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	var ids []string
	for i := 0; i < 3; i++ {
		r, err := m.Start(Spec{MaxOutput: 1 << 20, Exec: quick(strings.Repeat("x", 1000))})
		if err != nil {
			t.Fatal(err)
		}
		<-r.Done()
		ids = append(ids, r.ID())
		advance(time.Minute)
	}
	block := make(chan struct{})
	live, err := m.Start(Spec{Exec: func(ctx context.Context, r *Run) Outcome {
		r.Running(0)
		select {
		case <-block:
		case <-ctx.Done():
		}
		return Outcome{Result: &sandbox.Result{}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Over the size cap by the live run's record: the oldest ended run goes.
	// (The sweep kicked by the third run's end may have done it already.)
	waitState(t, m, live.ID(), Running)
	m.Sync()
	if _, err := m.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ids[0]); err == nil {
		t.Fatal("oldest run kept over the size cap")
	}
	rec, err := m.Get(ids[1])
	if err != nil || !m.ExpiresAt(rec).Equal(rec.Ended.Add(time.Hour)) {
		t.Fatalf("run 2: %v %v", rec, err)
	}
	// Past the retention: every ended run goes, the live one stays.
	advance(2 * time.Hour)
	if _, err := m.Sweep(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := m.Get(id); err == nil {
			t.Fatalf("run %s kept past its retention", id)
		}
	}
	if _, err := m.Get(live.ID()); err != nil {
		t.Fatalf("live run removed: %v", err)
	}
	close(block)
	<-live.Done()
	m.Sync()
	if list, _ := m.List(""); len(list) != 1 || list[0].State != Succeeded {
		t.Fatalf("list = %+v", list)
	}
}

// TestReopenKeepsRecords: a closed manager's ended runs are readable when
// the store is opened again; a run in flight at Close is interrupted.
func TestReopenKeepsRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := m.Start(Spec{MaxOutput: 100, Exec: quick("hello\n")})
	<-r.Done()
	hang, _ := m.Start(Spec{MaxOutput: 100, Exec: func(ctx context.Context, r *Run) Outcome {
		r.Running(0)
		r.StdoutLine("partial")
		<-ctx.Done()
		return Outcome{Error: "stopped"}
	}})
	waitState(t, m, hang.ID(), Running)
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The store is locked while open: a second manager on it fails clearly.
	m2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another CodeForge process") {
		t.Fatalf("second open of a store in use: %v", err)
	}
	defer m2.Close(context.Background())
	out, rec, err := m2.Output(r.ID(), "stdout")
	if err != nil || string(out) != "hello\n" || rec.State != Succeeded {
		t.Fatalf("after reopen: %q %+v %v", out, rec, err)
	}
	out, rec, err = m2.Output(hang.ID(), "stdout")
	if err != nil || string(out) != "partial\n" || rec.State != Interrupted || rec.Ended.IsZero() || !strings.Contains(rec.Error, "shut down") {
		t.Fatalf("run in flight at close: %q %+v %v", out, rec, err)
	}
	if _, err := m2.Get("0123456789abcdef"); err == nil || !strings.Contains(err.Error(), "no run 0123456789abcdef") {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := m2.Get("../x"); err == nil || !strings.Contains(err.Error(), "not a run id") {
		t.Fatalf("bad id: %v", err)
	}
}

func waitState(t *testing.T, m *Manager, id string, want State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := m.Get(id)
		if err == nil && rec.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never reached %s (%v, %v)", id, want, rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	if s, err := ParseState("timed_out"); err != nil || s != TimedOut {
		t.Fatal(s, err)
	}
	if _, err := ParseState("done"); err == nil || !strings.Contains(err.Error(), "queued, running, succeeded") {
		t.Fatal(err)
	}
}
