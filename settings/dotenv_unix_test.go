//go:build unix

package settings

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// unlinkedInfo is what stat shows through a single-file bind mount once the
// host has replaced the file: the old file, with no link left.
type unlinkedInfo struct{ fs.FileInfo }

func (u unlinkedInfo) Sys() any { return &syscall.Stat_t{} }

// A container that mounts .env as a single file keeps the old file when an
// editor replaces it on the host (a new inode); a reload would silently
// use stale values. The lookup says so once, naming the fix, and keeps
// the values it has.
func TestDotenvReportsAReplacedMount(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(path, []byte("OLD=old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var reported []error
	d, err := NewDotenv(func(string) (string, bool) { return "", false }, path, func(err error) { reported = append(reported, err) })
	if err != nil {
		t.Fatal(err)
	}
	d.stat = func(name string) (fs.FileInfo, error) {
		fi, err := os.Stat(name)
		if err != nil {
			return nil, err
		}
		return unlinkedInfo{fi}, nil
	}
	for range 3 {
		if v, _ := d.Lookup("OLD"); v != "old" {
			t.Errorf("OLD = %q; want the values read before", v)
		}
	}
	if len(reported) != 1 {
		t.Fatalf("reported %d errors (%v); want one", len(reported), reported)
	}
	for _, want := range []string{path, "replaced on the host", "edit .env in place", "--force-recreate proxy"} {
		if !strings.Contains(reported[0].Error(), want) {
			t.Errorf("report %q does not say %q", reported[0], want)
		}
	}
}
