package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
)

// smallTmpfs mounts a tmpfs of the given options on a new directory
// and unmounts it when the test ends.
func smallTmpfs(t *testing.T, opts string) string {
	t.Helper()
	testenv.Root(t, "mounts a small tmpfs as the scratch root")
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0700,"+opts); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestFullScratch: on a scratch filesystem with no space left, runs
// (cold and warm) still work (the code goes in through a pipe and Deno
// needs no disk), and code that writes a file gets Deno's "no space
// left" error; with no inodes left, a run is an error that names the
// full filesystem and what to do. Once there is room again runs work,
// and nothing is left behind.
func TestFullScratch(t *testing.T) {
	t.Parallel()
	for _, pool := range []int{0, 2} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) {
			t.Parallel()
			root := smallTmpfs(t, "size=256k,nr_inodes=64")
			r := newRunner(t, func(o *Options) { o.ScratchRoot = filepath.Join(root, "runs"); o.PoolSize = pool })
			run(t, r, sandbox.Request{Code: `console.log(1)`})
			if pool > 0 {
				waitWarm(t, r, pool)
			}
			filler := filepath.Join(root, "filler")
			f, err := os.Create(filler)
			if err != nil {
				t.Fatal(err)
			}
			for _, werr := f.Write(make([]byte, 64<<10)); werr == nil; _, werr = f.Write(make([]byte, 1<<10)) {
			}
			f.Close()
			res := run(t, r, sandbox.Request{Code: `console.log("still runs")`})
			if res.Stdout != "still runs\n" || res.ExitCode != 0 {
				t.Errorf("a run that writes nothing, on a full scratch filesystem: %+v", res)
			}
			res = run(t, r, sandbox.Request{Code: `await Deno.writeTextFile("big.txt", "x".repeat(1 << 20))`})
			if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No space left on device") {
				t.Errorf("a run writing 1 MB on a full scratch filesystem: %+v; want Deno's no-space error", res)
			}
			// No inodes left: no run directory can be made.
			for i := 0; ; i++ {
				f, err := os.Create(filepath.Join(root, fmt.Sprintf("inode-%d", i)))
				if err != nil {
					break
				}
				f.Close()
			}
			res, err = r.Run(context.Background(), sandbox.Request{Code: `console.log(1)`, Timeout: 30 * time.Second})
			// A warm process started while a removed run had freed some
			// room may still serve it; else it is refused, saying why.
			if (err != nil || res.Stdout != "1\n" || pool == 0) && (err == nil || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), filepath.Join(root, "runs"))) {
				t.Errorf("a run with no inodes left: %+v, %v; want an error saying %s is full", res, err, filepath.Join(root, "runs"))
			}
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				if e.Name() != "runs" {
					os.Remove(filepath.Join(root, e.Name()))
				}
			}
			if pool > 0 {
				r.pool.ColdOK()
			}
			if res := run(t, r, sandbox.Request{Code: `console.log(2)`}); res.Stdout != "2\n" {
				t.Errorf("with room again: %+v", res)
			}
			r.Close()
			assertNoRunDirs(t, r)
		})
	}
}
