// Package skills stores saved scripts ("skills"): one <name>.ts file each
// in a directory opened with os.Root, written atomically, patched with
// literal SEARCH/REPLACE blocks that apply all-or-nothing.
package skills

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxSize is the largest skill source, in bytes.
const MaxSize = 1 << 20

// maxPatchSize bounds a patch: room to replace all of a MaxSize skill.
const maxPatchSize = 2 * MaxSize

// ext is the skill file extension.
const ext = ".ts"

// ErrNotFound is wrapped by errors about a skill that does not exist.
var ErrNotFound = errors.New("skill not found")

// Skill describes a saved skill.
type Skill struct {
	Name string
	// Description is the text of the first "@description <text>" line in a
	// comment within the first 4 KiB, or "".
	Description string
	Size        int64
	ModTime     time.Time
}

// Store is a skills directory. Every file access goes through an os.Root,
// so no name can reach outside the directory. Code in the sandbox may
// change the directory at any time; Store copes with that, and serialises
// its own writes. Safe for concurrent use.
type Store struct {
	root *os.Root
	dir  string
	mu   sync.Mutex // serialises Write, Patch and Delete
}

// Open creates dir if needed (0755) and opens it as a Store.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("skills directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create skills directory: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("open skills directory: %w", err)
	}
	return &Store{root: root, dir: abs}, nil
}

// Close releases the directory.
func (s *Store) Close() error { return s.root.Close() }

// Dir returns the absolute path of the skills directory.
func (s *Store) Dir() string { return s.dir }

// entry is a skill file found in the directory.
type entry struct {
	name string
	info fs.FileInfo
}

// entries lists the regular <valid name>.ts files, sorted by name. Other
// files (temporary ones, bad names, symlinks, directories) are skipped.
func (s *Store) entries() ([]entry, error) {
	d, err := s.root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("open skills directory: %w", err)
	}
	defer d.Close()
	des, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("read skills directory: %w", err)
	}
	var out []entry
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ext)
		if !ok || !de.Type().IsRegular() || ValidName(name) != nil {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		out = append(out, entry{name, info})
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// List returns the saved skills sorted by name. A file that cannot be read
// is still listed, with no description.
func (s *Store) List() ([]Skill, error) {
	es, err := s.entries()
	if err != nil {
		return nil, err
	}
	out := make([]Skill, 0, len(es))
	buf := make([]byte, descriptionWindow)
	for _, e := range es {
		out = append(out, Skill{
			Name:        e.name,
			Description: s.description(e.name, buf),
			Size:        e.info.Size(),
			ModTime:     e.info.ModTime(),
		})
	}
	return out, nil
}

// description parses the @description of a skill, reading its start into buf.
func (s *Store) description(name string, buf []byte) string {
	f, err := s.root.Open(name + ext)
	if err != nil {
		return ""
	}
	defer f.Close()
	n, _ := io.ReadFull(f, buf)
	return parseDescription(string(buf[:n]))
}

// Exists reports whether a skill of that name is saved (false for an
// invalid name).
func (s *Store) Exists(name string) bool {
	if ValidName(name) != nil {
		return false
	}
	fi, err := s.root.Lstat(name + ext)
	return err == nil && fi.Mode().IsRegular()
}

// Read returns a skill's source.
func (s *Store) Read(name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	return s.read(name)
}

func (s *Store) read(name string) (string, error) {
	file := name + ext
	fi, err := s.root.Lstat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", s.notFound(name)
	}
	if err != nil {
		return "", fmt.Errorf("skill %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("skill %q: %s is not a regular file (%s); replace it with a plain file", name, file, fi.Mode().Type())
	}
	f, err := s.root.Open(file)
	if err != nil {
		return "", fmt.Errorf("skill %q: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return "", fmt.Errorf("skill %q: %w", name, err)
	}
	if len(data) > MaxSize {
		return "", fmt.Errorf("skill %q: the file is larger than %d bytes (the limit for a skill); shorten it or delete it", name, MaxSize)
	}
	return string(data), nil
}

// Write saves a skill atomically (a temporary file in the same directory,
// renamed over the old one), mode 0644. src must be valid UTF-8 without
// NUL bytes, not blank, and at most MaxSize bytes.
func (s *Store) Write(name, src string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := checkSource(src); err != nil {
		return fmt.Errorf("skill %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(name, src)
}

// checkSource says what is wrong with a skill's source.
func checkSource(src string) error {
	switch {
	case len(src) > MaxSize:
		return fmt.Errorf("source is %d bytes; the limit is %d (1 MiB)", len(src), MaxSize)
	case strings.TrimSpace(src) == "":
		return errors.New("source is empty; a skill needs code (to remove a skill, delete it)")
	case !utf8.ValidString(src):
		return errors.New("source is not valid UTF-8")
	case strings.IndexByte(src, 0) >= 0:
		return fmt.Errorf("source contains a NUL byte (at byte %d); TypeScript source has none", strings.IndexByte(src, 0))
	}
	return nil
}

func (s *Store) write(name, src string) (err error) {
	tmp := "." + name + ext + ".tmp-" + rand.Text()[:12]
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("skill %q: create temporary file: %w", name, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			s.root.Remove(tmp)
		}
	}()
	if _, err := f.WriteString(src); err != nil {
		return fmt.Errorf("skill %q: write: %w", name, err)
	}
	// The umask may have narrowed the mode; the sandbox user must read it.
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("skill %q: chmod: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("skill %q: sync: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("skill %q: close: %w", name, err)
	}
	if err := s.root.Rename(tmp, name+ext); err != nil {
		return fmt.Errorf("skill %q: rename into place: %w", name, err)
	}
	return nil
}

// Delete removes a skill. A missing one is an error wrapping ErrNotFound.
func (s *Store) Delete(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	file := name + ext
	fi, err := s.root.Lstat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return s.notFound(name)
	}
	if err != nil {
		return fmt.Errorf("delete skill %q: %w", name, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("delete skill %q: %s is a directory, not a skill", name, file)
	}
	if err := s.root.Remove(file); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return s.notFound(name)
		}
		return fmt.Errorf("delete skill %q: %w", name, err)
	}
	return nil
}

// Patch applies SEARCH/REPLACE blocks (see PatchFormat) to a skill and
// returns the new source. It is all or nothing: when any block fails, the
// error names the block and quotes its SEARCH, and the file is untouched.
// The new source is written atomically, and only if it differs.
func (s *Store) Patch(name, patch string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	switch {
	case len(patch) > maxPatchSize:
		return "", fmt.Errorf("patch skill %q: the patch is %d bytes; the limit is %d", name, len(patch), maxPatchSize)
	case !utf8.ValidString(patch):
		return "", fmt.Errorf("patch skill %q: the patch is not valid UTF-8", name)
	case strings.IndexByte(patch, 0) >= 0:
		return "", fmt.Errorf("patch skill %q: the patch contains a NUL byte", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.read(name)
	if err != nil {
		return "", err
	}
	src, err := applyPatch(old, patch)
	if err != nil {
		return "", fmt.Errorf("patch skill %q (nothing changed): %w", name, err)
	}
	if src == old {
		return src, nil
	}
	if err := checkSource(src); err != nil {
		return "", fmt.Errorf("patch skill %q (nothing changed): the patched %w", name, err)
	}
	if err := s.write(name, src); err != nil {
		return "", err
	}
	return src, nil
}

// notFound builds the ErrNotFound error for name, with the saved names as
// a hint.
func (s *Store) notFound(name string) error {
	es, _ := s.entries()
	if len(es) == 0 {
		return fmt.Errorf("%w: %q (no skills are saved yet)", ErrNotFound, name)
	}
	var names []string
	for _, e := range es {
		if strings.EqualFold(e.name, name) {
			return fmt.Errorf("%w: %q (names are case-sensitive; did you mean %q?)", ErrNotFound, name, e.name)
		}
		names = append(names, e.name)
	}
	const show = 20
	list := strings.Join(names[:min(show, len(names))], ", ")
	if len(names) > show {
		list += fmt.Sprintf(" and %d more", len(names)-show)
	}
	return fmt.Errorf("%w: %q (saved skills: %s)", ErrNotFound, name, list)
}

// Fingerprint hashes the name, size, modification time and content of
// every skill, so a caller can tell cheaply whether the set or any source
// changed since the last call (e.g. after each run, to send
// resources/list_changed). It reads every file: see BenchmarkFingerprint
// (300 skills of 2 KiB take a few milliseconds, mostly system calls).
func (s *Store) Fingerprint() (string, error) {
	es, err := s.entries()
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	content := sha256.New()
	buf := make([]byte, 32<<10)
	for _, e := range es {
		f, err := s.root.Open(e.name + ext)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing
		}
		if err != nil {
			return "", fmt.Errorf("fingerprint skill %q: %w", e.name, err)
		}
		content.Reset()
		_, err = io.CopyBuffer(content, f, buf)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("fingerprint skill %q: %w", e.name, err)
		}
		fmt.Fprintf(sum, "%s\x00%d\x00%d\x00%x\n", e.name, e.info.Size(), e.info.ModTime().UnixNano(), content.Sum(nil))
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}
