//go:build linux

// Package wrapper is codeforge-run, the program the Docker backend execs
// in the sandbox container (built as cmd/codeforge-run into the sandbox
// image). It reads one run's settings from its environment (the contract
// in package runpolicy, which the socket filter has already enforced),
// checks them again, and starts deno exactly as runpolicy says, in a
// session and process group of its own, killed whole when the run's time
// is up or on request (--kill: the Docker API cannot kill an exec). When
// the run ends, its scratch directory and Deno cache are removed: nothing
// it wrote remains in the sandbox.
package wrapper

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// Paths is where the wrapper finds things; the zero value is the
// sandbox image's layout (runpolicy.Sandbox*).
type Paths struct {
	Deno, Runs, CA string
}

func (p Paths) withDefaults() Paths {
	if p.Deno == "" {
		p.Deno = runpolicy.SandboxDeno
	}
	if p.Runs == "" {
		p.Runs = runpolicy.SandboxRuns
	}
	if p.CA == "" {
		p.CA = runpolicy.SandboxCA
	}
	return p
}

// Main runs codeforge-run with args (without the program name) and the
// process's own stdio and environment, and returns its exit status.
func Main(args []string) int {
	w := &wrapper{paths: Paths{}.withDefaults(), stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv}
	return w.main(args)
}

type wrapper struct {
	paths                 Paths
	stdin, stdout, stderr *os.File
	getenv                func(string) (string, bool)
}

// refusal is an exit with runpolicy.ExitRefused and a message.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, a ...any) error { return &refusal{fmt.Sprintf(format, a...)} }

func (w *wrapper) main(args []string) int {
	syscall.Umask(0o077)
	var code int
	var err error
	switch {
	case len(args) == 0:
		code, err = w.run()
	case args[0] == "--warm" && len(args) == 1:
		code, err = w.warm()
	case args[0] == "--kill" && len(args) == 2:
		code, err = w.kill(args[1])
	case args[0] == "--collect" && len(args) == 2:
		code, err = w.collect(args[1])
	case args[0] == "--check" && len(args) == 1:
		code, err = 0, w.check()
	case args[0] == "--check" && len(args) == 2:
		if err = runpolicy.CheckProbeAddr(args[1]); err != nil {
			err = refuse("%v", err)
			break
		}
		if err = w.check(); err == nil {
			code = w.probe(args[1])
		}
	case args[0] == "--idle" && len(args) == 1:
		return idle()
	default:
		err = refuse("%v", runpolicy.ErrUsage)
	}
	if err != nil {
		fmt.Fprintf(w.stderr, "%s%v\n", runpolicy.MessagePrefix, err)
		return runpolicy.ExitRefused
	}
	return code
}

// settings reads the run's variables, and only those: the engine adds
// others (PATH, HOSTNAME, HOME) that mean nothing to a run.
func (w *wrapper) settings() (runpolicy.Run, error) {
	var env []string
	for _, k := range runpolicy.EnvKeys {
		if v, ok := w.getenv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return runpolicy.ParseEnv(env)
}

func (w *wrapper) run() (int, error) {
	r, err := w.settings()
	if err != nil {
		return 0, err
	}
	rd, status, err := w.prepare(r)
	if rd == nil {
		return status, err
	}
	rd.keepOut = r.KeepOut
	cmd := w.deno(runpolicy.Args(rd.spec), rd.spec, w.stdin)
	return w.supervise(rd, cmd, r.Timeout, nil)
}

// warm starts deno for the run settings in the environment, blocked in
// the bootstrap, then waits for its run on stdin: the claim line, then
// the code. EOF before a claim (the runner dropped it) ends it quietly.
// If the warm deno cannot serve the run (it died, or the proxy's CA
// changed since it started), the run starts cold instead.
func (w *wrapper) warm() (int, error) {
	var env []string
	for _, k := range runpolicy.EnvKeys {
		if v, ok := w.getenv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	warm, err := runpolicy.ParseWarmEnv(env)
	if err != nil {
		return 0, err
	}
	ca0 := stampCA(w.paths.CA)
	rd, status, err := w.prepare(warm)
	if rd == nil {
		return status, err
	}
	for name, content := range runpolicy.WarmFiles(rd.spec) {
		f := filepath.Join(rd.spec.DenoDir, name)
		if err := os.WriteFile(f, []byte(content), 0o400); err != nil {
			rd.cleanup()
			return 0, fsError("write", f, err)
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		rd.cleanup()
		return 0, refuse("pipe: %v", err)
	}
	cmd := w.deno(runpolicy.WarmArgs(rd.spec), rd.spec, inR)
	// Its output goes through watchers: once the run's end line has come
	// on both (runpolicy.EndPrefix), the code is done and the runner has
	// answered, so deno is ended there, not left to run on.
	outW, errW := runpolicy.NewEndWatcher(w.stdout), runpolicy.NewEndWatcher(w.stderr)
	cmd.Stdout, cmd.Stderr = outW, errW
	rd.end = func() (runpolicy.End, bool) {
		outW.Flush()
		errW.Flush()
		end, _ := outW.End()
		return end, runpolicy.Ended(outW, errW)
	}
	return w.supervise(rd, cmd, 0, func(cmd *exec.Cmd, exited <-chan struct{}) (*exec.Cmd, time.Duration, error) {
		defer inW.Close()
		in := bufio.NewReaderSize(w.stdin, 4096)
		line, err := readLine(in, runpolicy.MaxClaimLine)
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return nil, 0, errDropped
			}
			return nil, 0, refuse("read the run claim: %v", err)
		}
		run, err := runpolicy.ParseRunClaim(line, warm)
		if err != nil {
			return nil, 0, refuse("%v", err)
		}
		spec := run.Spec(rd.spec.CACert != "")
		spec.Scratch, spec.DenoDir = rd.spec.Scratch, rd.spec.DenoDir
		claim, ok := runpolicy.Covers(rd.spec, spec)
		if !ok {
			return nil, 0, refuse("the run needs permissions this warm exec was not started with")
		}
		claim.End, claim.NodeExit = run.End, run.NodeExit
		rd.keepOut = run.KeepOut
		code, err := io.ReadAll(io.LimitReader(in, maxCode+1))
		if err != nil || len(code) > maxCode {
			return nil, 0, refuse("read the code: %v (at most %d bytes)", err, maxCode)
		}
		select {
		case <-exited:
		default:
			if stampCA(w.paths.CA) == ca0 {
				file := runpolicy.CodeFile(rd.spec.Scratch)
				if err := os.WriteFile(file, code, 0o600); err != nil {
					return nil, 0, fsError("write", file, err)
				}
				cl, err := claim.Line()
				if err != nil {
					return nil, 0, refuse("%v", err)
				}
				if run.End != "" {
					outW.Watch(run.End)
					errW.Watch(run.End)
					go func() {
						if _, ok := runpolicy.WaitEnd(exited, outW, errW); ok {
							_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
						}
					}()
				}
				if _, err := inW.Write(cl); err == nil {
					return cmd, run.Timeout, nil
				}
			}
		}
		// Cold after all: a fresh deno with the run's own flags.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		spec.CACert = ""
		if nonEmpty(w.paths.CA) {
			spec.CACert = w.paths.CA
		}
		cold := w.deno(runpolicy.Args(spec), spec, bytes.NewReader(code))
		return cold, run.Timeout, nil
	})
}

// maxCode bounds the code a warm exec reads.
const maxCode = 16 << 20

// errDropped ends a warm exec whose runner dropped it before a claim.
var errDropped = errors.New("dropped before a run")

// readLine reads one line of at most max bytes (without its newline).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return line, err
		}
	}
}

type caStamp struct {
	size int64
	mod  time.Time
}

func stampCA(file string) caStamp {
	fi, err := os.Stat(file)
	if err != nil {
		return caStamp{size: -1}
	}
	return caStamp{fi.Size(), fi.ModTime()}
}

// runDir is a prepared run: its directories exist.
type runDir struct {
	id, pidfile string
	spec        runpolicy.Spec
	cleanup     func()
	// keepOut keeps the scratch directory (not the cache) of a run that
	// ended by itself with an out/ directory, for --collect.
	keepOut, ended bool
	// end, for a warm run, reports its end line once deno is gone.
	end func() (runpolicy.End, bool)
}

// prepare creates run r's directories. A nil runDir means the run must
// not start: status (with err for a refusal).
func (w *wrapper) prepare(r runpolicy.Run) (*runDir, int, error) {
	if err := mkdirAll(w.paths.Runs); err != nil {
		return nil, 0, err
	}
	spec := r.Spec(nonEmpty(w.paths.CA))
	if spec.CACert != "" {
		spec.CACert = w.paths.CA
	}
	spec.Scratch = filepath.Join(w.paths.Runs, r.ID)
	spec.DenoDir = runpolicy.CacheDir(spec.Scratch)
	rd := &runDir{id: r.ID, pidfile: spec.Scratch + ".pid", spec: spec}
	rd.cleanup = func() {
		_ = os.Remove(rd.pidfile)
		var err error
		if rd.keepOut && rd.ended && exists(filepath.Join(spec.Scratch, "out")) {
			err = runpolicy.RemoveTree(spec.DenoDir)
			defer fmt.Fprintf(w.stderr, "%s\n", runpolicy.KeptOutTrailer)
		} else {
			err = runpolicy.RemoveRun(spec.Scratch)
		}
		if err != nil {
			fmt.Fprintf(w.stderr, "%s%v\n", runpolicy.MessagePrefix, err)
		}
	}
	if err := os.Mkdir(spec.Scratch, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, 0, refuse("cannot create %s (run ID reused?)", spec.Scratch)
		}
		return nil, 0, fsError("create the run's directory", spec.Scratch, err)
	}
	if marker := spec.Scratch + ".killed"; exists(marker) {
		// --kill came before this run got here: it never starts.
		_ = os.Remove(marker)
		rd.cleanup()
		fmt.Fprintf(w.stderr, "%srun %s was killed before it started\n", runpolicy.MessagePrefix, r.ID)
		return nil, runpolicy.ExitKilledBeforeStart, nil
	}
	if err := os.Mkdir(spec.DenoDir, 0o700); err != nil {
		rd.cleanup()
		return nil, 0, fsError("create the run's Deno cache", spec.DenoDir, err)
	}
	return rd, 0, nil
}

// deno is the deno command for spec with args, in a session and process
// group of its own (a kill of the group reaches everything it started).
func (w *wrapper) deno(args []string, spec runpolicy.Spec, stdin io.Reader) *exec.Cmd {
	return &exec.Cmd{
		Path:        w.paths.Deno,
		Args:        append([]string{"deno"}, args...),
		Env:         runpolicy.Env(spec),
		Dir:         spec.Scratch,
		Stdin:       stdin,
		Stdout:      w.stdout,
		Stderr:      w.stderr,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
}

// claimFunc waits for a warm exec's run and returns the command that
// serves it (the warm one, or a cold one not yet started) and its
// timeout.
type claimFunc func(cmd *exec.Cmd, exited <-chan struct{}) (*exec.Cmd, time.Duration, error)

// supervise starts cmd, records its process group, and kills the group
// when timeout passes (counted from the claim, for a warm exec), on a
// signal to the wrapper, or when it ends; then removes the run's files.
// The status is deno's, with the trailer after a signal.
func (w *wrapper) supervise(rd *runDir, cmd *exec.Cmd, timeout time.Duration, claim claimFunc) (int, error) {
	defer rd.cleanup()
	// Signals to the wrapper end the run, not just the wrapper.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	start := func(cmd *exec.Cmd) (chan struct{}, error) {
		if err := cmd.Start(); err != nil {
			return nil, refuse("start %s: %v", w.paths.Deno, err)
		}
		if f, ok := cmd.Stdin.(*os.File); ok && f != w.stdin {
			f.Close() // a pipe's read end: the child has its own copy
		}
		pid := cmd.Process.Pid
		if err := os.WriteFile(rd.pidfile, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, fsError("record the run's process group", rd.pidfile, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		return exited, nil
	}
	exited, err := start(cmd)
	if err != nil {
		return 0, err
	}
	if claim != nil {
		claimed := make(chan error, 1)
		var next *exec.Cmd
		go func() {
			var err error
			next, timeout, err = claim(cmd, exited)
			claimed <- err
		}()
		select {
		case err := <-claimed:
			if err != nil {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
				if errors.Is(err, errDropped) {
					return 0, nil
				}
				return 0, err
			}
		case <-sigs:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return 143, nil
		}
		if next != cmd {
			if exited, err = start(next); err != nil {
				return 0, err
			}
			cmd = next
		}
	}
	pid := cmd.Process.Pid
	timer := time.AfterFunc(timeout, func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	defer timer.Stop()
	select {
	case <-exited:
	case <-sigs:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-exited
		return 143, nil
	}
	// Whatever deno left in its group goes too. While a member lives, the
	// group ID cannot have been handed to anyone else.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	rd.ended = true
	if rd.end != nil {
		if end, ok := rd.end(); ok {
			// Ended at its end line: its status is the line's.
			return end.ExitCode, nil
		}
	}
	status := exitStatus(cmd.ProcessState)
	if status > 128 {
		// The runner reads this last line to tell deno being killed (by
		// the timeout or the memory limit), or exiting with such a status
		// by itself (Deno.exit(137)), from the whole sandbox going down,
		// which takes the wrapper with it.
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			fmt.Fprintf(w.stderr, "%s%d\n", runpolicy.SignalTrailer, status-128)
		} else {
			fmt.Fprintf(w.stderr, "%s%d\n", runpolicy.ExitTrailer, status)
		}
	}
	return status, nil
}

// kill ends run id: its whole process group, then its files. The runner
// may ask while the run is still starting: a marker file tells it never
// to start. The run creates its directory, then looks for the marker;
// this writes the marker, then looks for the directory (for up to two
// seconds), so one of the two always sees the other. A marker no run
// took (it had already ended) is removed again.
func (w *wrapper) kill(id string) (int, error) {
	if runpolicy.CheckRunID(id) != nil {
		return 0, refuse("--kill needs a run ID ([A-Za-z0-9][A-Za-z0-9_-]{0,63})")
	}
	if err := mkdirAll(w.paths.Runs); err != nil {
		return 0, err
	}
	scratch := filepath.Join(w.paths.Runs, id)
	pidfile, marker := scratch+".pid", scratch+".killed"
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return 0, fsError("write the kill marker", marker, err)
	}
	for i := 0; i < 40 && !exists(scratch) && !exists(pidfile) && exists(marker); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !exists(marker) {
		return 0, nil // the run saw it and stopped before starting deno
	}
	if !exists(scratch) && !exists(pidfile) {
		_ = os.Remove(marker)
		fmt.Fprintf(w.stderr, "%sno run %s\n", runpolicy.MessagePrefix, id)
		return runpolicy.ExitNoSuchRun, nil
	}
	// The run is between creating its directory and recording its
	// process group: give it a moment to do so (or to see the marker).
	for i := 0; i < 40 && !exists(pidfile) && exists(scratch); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if data, err := os.ReadFile(pidfile); err == nil {
		if pgid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	_ = os.Remove(pidfile)
	err := runpolicy.RemoveRun(scratch)
	_ = os.Remove(marker)
	if err != nil {
		return 0, refuse("%v", err)
	}
	return 0, nil
}

// collect writes a tar of the entries directly in run id's out/ to
// stdout, without descending into directories or following links (a link
// is archived as a link; an out/ that is a link is not entered), so the
// runner can name what it does not keep; then removes the run's files.
func (w *wrapper) collect(id string) (int, error) {
	if runpolicy.CheckRunID(id) != nil {
		return 0, refuse("--collect needs a run ID ([A-Za-z0-9][A-Za-z0-9_-]{0,63})")
	}
	scratch := filepath.Join(w.paths.Runs, id)
	if fi, err := os.Lstat(scratch); err != nil || !fi.IsDir() {
		return runpolicy.ExitNoSuchRun, nil
	}
	if exists(scratch + ".pid") {
		return 0, refuse("run %s is still running", id)
	}
	defer runpolicy.RemoveRun(scratch)
	out := filepath.Join(scratch, "out")
	fi, err := os.Lstat(out)
	if err != nil || !fi.IsDir() {
		tw := tar.NewWriter(w.stdout)
		return 0, tw.Close()
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return 0, refuse("read %s: %v", out, err)
	}
	tw := tar.NewWriter(w.stdout)
	for _, e := range entries {
		p := filepath.Join(out, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			continue // a socket or the like: not archived
		}
		hdr.Name = "./" + e.Name()
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, refuse("write tar: %v", err)
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return 0, refuse("read %s: %v", p, err)
			}
			_, err = io.CopyN(tw, f, fi.Size())
			f.Close()
			if err != nil {
				return 0, refuse("write tar: %v", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return 0, refuse("write tar: %v", err)
	}
	return 0, nil
}

// minFree is the free space --check wants in the runs' filesystem.
const minFree = 1 << 20

// check says why the sandbox cannot take runs: deno does not start, the
// runs' directory cannot be made or its filesystem is full, or the
// proxy's CA is not there yet.
func (w *wrapper) check() error {
	if err := mkdirAll(w.paths.Runs); err != nil {
		return err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(w.paths.Runs, &st); err == nil && st.Bavail*uint64(st.Bsize) < minFree {
		return refuse("%s is full (%d bytes free): runs cannot start; restart the sandbox container to clear it", w.paths.Runs, st.Bavail*uint64(st.Bsize))
	}
	dir, err := os.MkdirTemp(w.paths.Runs, ".check-")
	if err != nil {
		return fsError("create a check directory", w.paths.Runs, err)
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(w.paths.Deno, "--version")
	cmd.Env = []string{"HOME=" + dir, "DENO_DIR=" + dir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "deno ") {
		return refuse("%s does not start: %v", w.paths.Deno, err)
	}
	if !nonEmpty(w.paths.CA) {
		return refuse("%s is missing or empty: the proxy has not published its CA certificate yet", w.paths.CA)
	}
	return nil
}

// probe connects to the proxy at addr (IPv4:port) as a run would (this
// user, this network namespace), for up to runpolicy.ProbeTimeout. When
// it cannot, it says so, with the reason, and returns
// runpolicy.ExitNetworkDown: the sandbox's network is down.
func (w *wrapper) probe(addr string) int {
	c, err := net.DialTimeout("tcp4", addr, runpolicy.ProbeTimeout)
	if err == nil {
		c.Close()
		return 0
	}
	fmt.Fprintf(w.stderr, "%s%sthe sandbox cannot reach the proxy at %s (%s)\n",
		runpolicy.MessagePrefix, runpolicy.NetworkPrefix, addr, probeReason(err))
	return runpolicy.ExitNetworkDown
}

// probeReason words a failed connection as the C library does (e.g.
// "Connection refused"), or says that nothing answered in time.
func probeReason(err error) string {
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.As(err, &errno):
		msg := errno.Error()
		return strings.ToUpper(msg[:1]) + msg[1:]
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no answer within %d s", int(runpolicy.ProbeTimeout/time.Second))
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// idle is the container's keepalive for tests (PID 1): it reaps the
// orphans that exec'd processes leave behind and exits on TERM, INT or
// HUP.
func idle() int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return 0
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}

func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fsError("create", dir, err)
	}
	return nil
}

// fsError words a filesystem failure; a full filesystem says so plainly.
func fsError(what, path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return refuse("the sandbox's %s is full (no space left on device): cannot %s %s; runs remove their files when they end, so restart the sandbox container to clear it", filepath.Dir(path), what, path)
	}
	return refuse("cannot %s %s: %v (is /tmp a writable tmpfs?)", what, path, err)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func nonEmpty(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}

// exitStatus is deno's exit status, or 128+N when signal N ended it.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}
