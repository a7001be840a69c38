package runs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNotFound is returned for a run, stream or file the store does not hold.
var ErrNotFound = errors.New("not found")

// Buckets of the store. Keys in output and files start with the run id
// and a NUL, so one prefix scan finds all of a run's entries.
var (
	bucketRuns   = []byte("runs")   // id -> Record (JSON)
	bucketOutput = []byte("output") // id \x00 "stdout"|"stderr" -> bytes
	bucketFiles  = []byte("files")  // id \x00 name -> bytes
)

// Store keeps run records in a bbolt database. Every write is its own
// transaction, committed with an fsync: a crash loses at most the write
// in progress, never an earlier one, and never leaves a half-written
// record (bbolt's copy-on-write pages switch over in one meta-page write).
type Store struct {
	db *bolt.DB
}

// OpenStore opens (creating when missing) the database file path. A second
// process holding the same file makes it fail after a few seconds rather
// than share it.
func OpenStore(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("run store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 3 * time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("run store %s is in use by another CodeForge process: stop it or give this one another --data-dir", path)
	}
	if err != nil {
		return nil, fmt.Errorf("run store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRuns, bucketOutput, bucketFiles} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("run store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func entryKey(id, name string) []byte { return []byte(id + "\x00" + name) }

// Put writes a record.
func (s *Store) Put(rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", rec.ID, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRuns).Put([]byte(rec.ID), b)
	})
}

// PutProgress writes a record and its output so far, together.
func (s *Store) PutProgress(rec *Record, stdout, stderr []byte) error {
	return s.PutFinal(rec, stdout, stderr, nil)
}

// PutFinal writes a record, its output and its files in one transaction.
func (s *Store) PutFinal(rec *Record, stdout, stderr []byte, files map[string][]byte) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", rec.ID, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		out := tx.Bucket(bucketOutput)
		if err := out.Put(entryKey(rec.ID, "stdout"), nonNilBytes(stdout)); err != nil {
			return err
		}
		if err := out.Put(entryKey(rec.ID, "stderr"), nonNilBytes(stderr)); err != nil {
			return err
		}
		fb := tx.Bucket(bucketFiles)
		for name, data := range files {
			if err := fb.Put(entryKey(rec.ID, name), nonNilBytes(data)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketRuns).Put([]byte(rec.ID), b)
	})
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Get reads a record.
func (s *Store) Get(id string) (*Record, error) {
	var rec *Record
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRuns).Get([]byte(id))
		if b == nil {
			return ErrNotFound
		}
		rec = &Record{}
		return json.Unmarshal(b, rec)
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Output reads a run's stdout or stderr as last written.
func (s *Store) Output(id, stream string) ([]byte, error) {
	return s.entry(bucketOutput, id, stream)
}

// File reads one of a run's files.
func (s *Store) File(id, name string) ([]byte, error) {
	return s.entry(bucketFiles, id, name)
}

func (s *Store) entry(bucket []byte, id, name string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket).Get(entryKey(id, name))
		if b == nil {
			return ErrNotFound
		}
		out = append([]byte{}, b...)
		return nil
	})
	return out, err
}

// List reads every record (in no particular order).
func (s *Store) List() ([]*Record, error) {
	var out []*Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			rec := &Record{}
			if err := json.Unmarshal(v, rec); err != nil {
				return fmt.Errorf("decode run %s: %w", k, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// Delete removes runs with their output and files.
func (s *Store) Delete(ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, id := range ids {
			if err := tx.Bucket(bucketRuns).Delete([]byte(id)); err != nil {
				return err
			}
			for _, name := range []string{"stdout", "stderr"} {
				if err := tx.Bucket(bucketOutput).Delete(entryKey(id, name)); err != nil {
					return err
				}
			}
			fb := tx.Bucket(bucketFiles)
			prefix := entryKey(id, "")
			var keys [][]byte
			c := fb.Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				if err := fb.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// write is one change for Apply: a record, and with output its streams,
// and its files.
type write struct {
	rec            []byte
	id             string
	output         bool
	stdout, stderr []byte
	files          map[string][]byte
}

// apply commits writes in one transaction (one fsync for all of them).
func (s *Store) apply(ws []write) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		runs, out, fb := tx.Bucket(bucketRuns), tx.Bucket(bucketOutput), tx.Bucket(bucketFiles)
		for _, w := range ws {
			if w.id == "" {
				continue // a Sync marker
			}
			if w.output {
				if err := out.Put(entryKey(w.id, "stdout"), nonNilBytes(w.stdout)); err != nil {
					return err
				}
				if err := out.Put(entryKey(w.id, "stderr"), nonNilBytes(w.stderr)); err != nil {
					return err
				}
			}
			for name, data := range w.files {
				if err := fb.Put(entryKey(w.id, name), nonNilBytes(data)); err != nil {
					return err
				}
			}
			if err := runs.Put([]byte(w.id), w.rec); err != nil {
				return err
			}
		}
		return nil
	})
}
