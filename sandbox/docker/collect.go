package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/codeforge/codeforge/sandbox/output"
)

// OutDirDescription is what Env reports as the directory of files kept
// with the run.
const OutDirDescription = "out/ in the current working directory"

const (
	// defaultOutMaxBytes is the copy budget when a request gives none.
	defaultOutMaxBytes = 64 << 20
	// maxOutEntries bounds the entries read from one run's out/.
	maxOutEntries = 1000
)

// collectOut copies the regular files of run id's out/ (the wrapper's
// --collect, a tar stream) into a new temporary directory on this side,
// at most budget bytes of them, and removes the run's scratch directory
// in the sandbox. It returns the copy's out/ directory (which the caller
// removes with its parent), and a note for each file not copied. A run
// with no out/ gives an empty directory.
func (r *Runner) collectOut(ctx context.Context, id string, budget int64) (dir string, skipped []string, err error) {
	if budget <= 0 {
		budget = defaultOutMaxBytes
	}
	tmp, err := os.MkdirTemp("", "codeforge-out-")
	if err != nil {
		return "", nil, fmt.Errorf("files out: %w", err)
	}
	dir = filepath.Join(tmp, "out")
	if err := os.Mkdir(dir, 0o700); err != nil {
		os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("files out: %w", err)
	}
	fail := func(err error) (string, []string, error) {
		os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("files out: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fail(err)
	}
	defer root.Close()

	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	created, err := r.cli.ExecCreate(ctx, r.container, client.ExecCreateOptions{
		AttachStdout: true, AttachStderr: true, Cmd: []string{wrapper, "--collect", id},
	})
	if err != nil {
		return fail(fmt.Errorf("docker exec create: %w", err))
	}
	att, err := r.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return fail(fmt.Errorf("docker exec start: %w", err))
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	pr, pw := io.Pipe()
	stderr := output.NewCollector(output.Options{Limit: 4 << 10})
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, att.Reader)
		pw.CloseWithError(err)
	}()
	skipped, err = untarFlat(pr, root, budget)
	pr.CloseWithError(errors.New("done"))
	if err != nil {
		return fail(err)
	}
	code, err := r.exitCode(created.ID, controlTimeout)
	switch {
	case err != nil:
		return fail(fmt.Errorf("docker exec inspect: %w", err))
	case code == 3: // no such run: nothing to collect
	case code != 0:
		return fail(fmt.Errorf("codeforge-run --collect exited with %d: %s", code, firstLine(stderr.String())))
	}
	return dir, skipped, nil
}

// untarFlat writes the regular files of a tar stream whose names are
// "./<name>" into root, at most budget bytes in all; anything else is a
// note. It reads the stream to its end.
func untarFlat(r io.Reader, root *os.Root, budget int64) (skipped []string, err error) {
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return skipped, nil
		}
		if err != nil {
			return skipped, fmt.Errorf("read the tar of out/: %w", err)
		}
		if n >= maxOutEntries {
			skipped = append(skipped, fmt.Sprintf("files: out/ holds more than %d entries; the rest were not read", maxOutEntries))
			_, _ = io.Copy(io.Discard, r)
			return skipped, nil
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		shown := fmt.Sprintf("%q", truncateName(strings.TrimSuffix(name, "/")))
		if hdr.Typeflag != tar.TypeReg || name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			what := "not a regular file"
			switch hdr.Typeflag {
			case tar.TypeDir:
				what = "a directory (only files directly in out/ are kept)"
			case tar.TypeSymlink, tar.TypeLink:
				what = "a link (links are never followed)"
			}
			skipped = append(skipped, fmt.Sprintf("files: out/%s not kept: it is %s", shown, what))
			continue
		}
		if total+hdr.Size > budget {
			skipped = append(skipped, fmt.Sprintf("files: out/%s not kept: with it the run's files would be over the cap of %d bytes per run", shown, budget))
			continue
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("files: out/%s not kept: %v", shown, err))
			continue
		}
		written, err := io.CopyN(f, tr, hdr.Size)
		f.Close()
		if err != nil {
			return skipped, fmt.Errorf("copy out/%s: %w", name, err)
		}
		total += written
	}
}

func truncateName(s string) string {
	if len(s) <= 60 {
		return s
	}
	return s[:60] + "…"
}
