package settings

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"time"

	"github.com/joho/godotenv"
)

// Dotenv is the process environment over a .env file: a variable set in
// the environment wins; one set only in the file comes from the file. The
// file is read again whenever it has changed since the last lookup, so a
// SIGHUP reload (which looks the API configs' variables up again) sees a
// secret just added to .env without a restart. The process environment is
// never written.
type Dotenv struct {
	base Getenv
	path string
	// report is told about a changed file that does not parse; the values
	// read before stay in force.
	report func(error)

	// stat and open are os.Stat and os.Open; tests replace them to show a
	// file unlinked under a bind mount, or a process that may no longer
	// open it.
	stat func(string) (fs.FileInfo, error)
	open func(string) (*os.File, error)

	mu    sync.Mutex
	stamp fileStamp
	vals  map[string]string
	// unlinkedSeen: the file's removal or replacement has been reported.
	unlinkedSeen bool
	// held is the file as last opened: read again through it when the
	// process may no longer open the path (see read).
	held *os.File
}

// fileStamp tells one version of the file from another.
type fileStamp struct {
	exists bool
	size   int64
	mod    time.Time
}

// NewDotenv reads path (none when path is empty; a missing file is no
// error and may appear later) under base (os.LookupEnv in main). A file
// that does not parse now is an error naming it; later, report is told and
// the previous values kept (nil report: keep them silently).
func NewDotenv(base Getenv, path string, report func(error)) (*Dotenv, error) {
	d := &Dotenv{base: base, path: path, report: report, stat: os.Stat, open: os.Open}
	if err := d.refresh(); err != nil {
		return nil, err
	}
	return d, nil
}

// Lookup is a Getenv: the environment first, then the file as it is now.
func (d *Dotenv) Lookup(name string) (string, bool) {
	if v, ok := d.base(name); ok {
		return v, true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.refreshLocked(); err != nil && d.report != nil {
		d.report(fmt.Errorf("%w (keeping the values read before)", err))
	}
	v, ok := d.vals[name]
	return v, ok
}

func (d *Dotenv) refresh() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refreshLocked()
}

// refreshLocked re-reads the file when it changed. A file that does not
// parse leaves the values as they were (and is reported once per version).
func (d *Dotenv) refreshLocked() error {
	if d.path == "" {
		return nil
	}
	var stamp fileStamp
	fi, err := d.stat(d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("load %s: %w", d.path, err)
	default:
		stamp = fileStamp{exists: true, size: fi.Size(), mod: fi.ModTime()}
		// A path that names a file with no link left is a single-file bind
		// mount (Docker's) whose file the host has since removed or
		// replaced: the old version stays here, unchanged, for good.
		if n, ok := linkCount(fi); ok && n == 0 {
			if d.unlinkedSeen {
				return nil
			}
			d.unlinkedSeen = true
			return fmt.Errorf("load %s: the file was removed or replaced on the host after it was mounted here "+
				"(an editor that saves through a new file, sed -i, mv): this process still sees the old version; "+
				"edit .env in place (for example append with >>) and recreate the container once to mount the new file "+
				"(docker compose up -d --force-recreate proxy)", d.path)
		}
	}
	if stamp == d.stamp && (d.vals != nil || !stamp.exists) {
		return nil
	}
	d.stamp = stamp
	if !stamp.exists {
		d.vals = nil
		return nil
	}
	vals, err := d.read(fi)
	if errors.Is(err, fs.ErrPermission) {
		groups, _ := os.Getgroups()
		return fmt.Errorf("load %s: %w: this process (uid %d, gid %d, groups %v) may not read it; "+
			"give it read access (in the Docker stack: the file's group readable and CODEFORGE_ENV_GID set to that group, "+
			"which ./rebuild.sh does)", d.path, err, os.Getuid(), os.Getgid(), groups)
	}
	if err != nil {
		return fmt.Errorf("load %s: %w", d.path, err)
	}
	d.vals = vals
	return nil
}

// read parses the file, opened afresh by its path (an editor may have put
// a new file there). A process that may no longer open it — one that gave
// up root after starting, as the transparent-mode proxy does — reads it
// through the descriptor it opened before, as long as that is still the
// file at the path: it may read again what it read at the start, edits
// made in place included, and nothing else.
func (d *Dotenv) read(fi fs.FileInfo) (map[string]string, error) {
	f, err := d.open(d.path)
	switch {
	case err == nil:
		if d.held != nil {
			d.held.Close()
		}
		d.held = f
	case errors.Is(err, fs.ErrPermission) && d.held != nil:
		hi, herr := d.held.Stat()
		if herr != nil || !os.SameFile(hi, fi) {
			return nil, err
		}
	default:
		return nil, err
	}
	return godotenv.Parse(io.NewSectionReader(d.held, 0, math.MaxInt64))
}
