package runs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// OutDir is the directory, relative to a run's scratch directory, whose
// files are kept with the run.
const OutDir = "out"

// FileLimits cap what CollectFiles keeps.
type FileLimits struct {
	// MaxFiles is the most files kept per run.
	MaxFiles int
	// MaxFileBytes is the largest file kept.
	MaxFileBytes int64
	// MaxRunBytes is the most bytes kept per run, all files together.
	MaxRunBytes int64
}

// fileNamePattern is what a kept file's name may look like: it becomes
// part of a run://{id}/files/{name} URI and of a notes line, so nothing
// that needs escaping, no leading dot, no path.
var fileNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidFileName reports whether name is a name CollectFiles may keep.
func ValidFileName(name string) bool { return fileNamePattern.MatchString(name) }

// CollectFiles reads the regular files directly in dir (a run's out/
// directory) within lim. It follows no symbolic link and opens nothing
// outside dir (os.Root), so code that plants a link to a file of the
// server's gets a note, not the file. Everything left out gets a note that
// says why; a missing dir is no files and no note.
func CollectFiles(dir string, lim FileLimits) (files []File, data map[string][]byte, notes []string) {
	// out/ itself must be a directory, not a link to one: the scratch
	// directory is opened as a root and out/ looked at without following.
	parent, err := os.OpenRoot(filepath.Dir(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("files: out/ could not be read (%v); no file was kept", err)}
	}
	defer parent.Close()
	fi, err := parent.Lstat(filepath.Base(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("files: out/ could not be read (%v); no file was kept", err)}
	}
	if !fi.IsDir() {
		return nil, nil, []string{"files: out is not a directory (links are never followed); no file was kept"}
	}
	root, err := parent.OpenRoot(filepath.Base(dir))
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("files: out/ could not be read (%v); no file was kept", err)}
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("files: out/ could not be read (%v); no file was kept", err)}
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("files: out/ could not be listed (%v); no file was kept", err)}
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	data = map[string][]byte{}
	var total int64
	for _, e := range entries {
		name := e.Name()
		shown := fmt.Sprintf("%q", truncate(name, 60))
		if !ValidFileName(name) {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: file names must be letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters", shown))
			continue
		}
		fi, err := root.Lstat(name)
		if err != nil {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: %v", name, err))
			continue
		}
		if !fi.Mode().IsRegular() {
			what := "not a regular file"
			switch {
			case fi.IsDir():
				what = "a directory (only files directly in out/ are kept)"
			case fi.Mode()&fs.ModeSymlink != 0:
				what = "a symbolic link (links are never followed)"
			}
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: it is %s", name, what))
			continue
		}
		if len(files) >= lim.MaxFiles {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: a run keeps at most %d files", name, lim.MaxFiles))
			continue
		}
		if fi.Size() > lim.MaxFileBytes {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: it is %s, over the cap of %s per file",
				name, FormatBytes(fi.Size()), FormatBytes(lim.MaxFileBytes)))
			continue
		}
		if total+fi.Size() > lim.MaxRunBytes {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: with it the run's files would be %s, over the cap of %s per run",
				name, FormatBytes(total+fi.Size()), FormatBytes(lim.MaxRunBytes)))
			continue
		}
		b, err := readRegular(root, name, lim.MaxFileBytes)
		if err != nil {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: %v", name, err))
			continue
		}
		if total+int64(len(b)) > lim.MaxRunBytes {
			notes = append(notes, fmt.Sprintf("files: out/%s not kept: over the cap of %s per run", name, FormatBytes(lim.MaxRunBytes)))
			continue
		}
		total += int64(len(b))
		data[name] = b
		files = append(files, File{Name: name, MIMEType: DetectMIME(name, b), Size: int64(len(b))})
	}
	return files, data, notes
}

// readRegular reads name from root, refusing anything that is not a
// regular file once opened (it may have been swapped since Lstat) or that
// grew over max.
func readRegular(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|nofollow|nonblock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("it is not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("it grew over the cap of %s per file", FormatBytes(max))
	}
	return b, nil
}

// imageTypes are the image types that come back inline, by their content.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// IsInlineImage reports whether a file of this MIME type may come back as
// MCP image content.
func IsInlineImage(mimeType string) bool { return slices.Contains(imageTypes, mimeType) }

// byExtension names the types of common non-image files by extension;
// images are named by their content only, so a file called x.png that is
// not a PNG never goes out as one.
var byExtension = map[string]string{
	".csv":   "text/csv",
	".tsv":   "text/tab-separated-values",
	".txt":   "text/plain",
	".md":    "text/markdown",
	".json":  "application/json",
	".jsonl": "application/jsonl",
	".html":  "text/html",
	".xml":   "application/xml",
	".svg":   "image/svg+xml",
	".pdf":   "application/pdf",
	".zip":   "application/zip",
	".ts":    "text/typescript",
	".js":    "text/javascript",
}

// DetectMIME names a file's type: one of the four inline image types when
// its bytes are one, else by extension, else by content.
func DetectMIME(name string, data []byte) string {
	sniffed, _, _ := strings.Cut(http.DetectContentType(data), ";")
	if IsInlineImage(sniffed) {
		return sniffed
	}
	if t, ok := byExtension[strings.ToLower(path.Ext(name))]; ok {
		return t
	}
	if sniffed == "text/plain" {
		return "text/plain"
	}
	return "application/octet-stream"
}

// FormatBytes prints a size for people: 512 bytes, 1.5 KiB, 10 MiB.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return trimUnit(float64(n)/(1<<30)) + " GiB"
	case n >= 1<<20:
		return trimUnit(float64(n)/(1<<20)) + " MiB"
	case n >= 1<<10:
		return trimUnit(float64(n)/(1<<10)) + " KiB"
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

func trimUnit(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v), "0"), ".")
}

// FormatDuration prints a duration without zero units: 24h, 1h30m, 90s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
