package settings

import (
	"errors"
	"fmt"
	"io/fs"
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

	mu    sync.Mutex
	stamp fileStamp
	vals  map[string]string
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
	d := &Dotenv{base: base, path: path, report: report}
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
		d.report(err)
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
	fi, err := os.Stat(d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("load %s: %w", d.path, err)
	default:
		stamp = fileStamp{exists: true, size: fi.Size(), mod: fi.ModTime()}
	}
	if stamp == d.stamp && (d.vals != nil || !stamp.exists) {
		return nil
	}
	d.stamp = stamp
	if !stamp.exists {
		d.vals = nil
		return nil
	}
	vals, err := godotenv.Read(d.path)
	if err != nil {
		return fmt.Errorf("load %s: %w (keeping the values read before)", d.path, err)
	}
	d.vals = vals
	return nil
}
