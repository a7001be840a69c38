package dockerfilter

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
)

// TestHealRejoinsRestartedNamespace crashes a namespace holder the way an
// OOM kill does (SIGKILL of its main process from the host; Docker's
// restart policy brings it back with a new network namespace) and checks
// that the healer restarts the container that shared its namespace, so
// that it joins the new one — but only once the holder and the joiner's
// service_healthy dependencies are healthy: a joiner whose holder has a
// failing health check stays where it is (with no network at all).
func TestHealRejoinsRestartedNamespace(t *testing.T) {
	setup(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test reads containers' namespaces through /proc/<pid>/ns on the host: run it as root")
	}
	sfx := randomSuffix()
	project := "cfheal" + sfx
	labels := func(service, deps string) []string {
		l := []string{"--label", labelProject + "=" + project, "--label", labelService + "=" + service}
		if deps != "" {
			l = append(l, "--label", labelDependsOn+"="+deps)
		}
		return l
	}
	run := func(name string, args ...string) string {
		trackContainer(name)
		base := []string{"run", "-d", "--name", name, "--label", testenv.OwnerLabelArg(),
			"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
			"--memory", "64m", "--pids-limit", "64", "--restart", "unless-stopped"}
		return docker(t, nil, append(append(base, args...), shared.image)...)
	}
	// Two holders: one without a health check, one whose check never passes
	// (the stand-in image has no shell for it to run).
	holder := run("cf-dfilter-heal-holder-"+sfx, append(labels("netguard", ""), "--network", "none")...)
	sick := run("cf-dfilter-heal-sick-"+sfx, append(labels("sickguard", ""), "--network", "none",
		"--health-cmd", "exit 1", "--health-interval", "1s", "--health-retries", "1")...)
	joiner := run("cf-dfilter-heal-joiner-"+sfx, append(labels("sandbox", "netguard:service_healthy:true"), "--network", "container:"+holder)...)
	waiter := run("cf-dfilter-heal-waiter-"+sfx, append(labels("waiter", "sickguard:service_healthy:true"), "--network", "container:"+sick)...)
	filterC := startContainer(t, "cf-dfilter-heal-filter-"+sfx, labels("dockerfilter", "")...)

	tf := startFilter(t, Options{Hostname: filterC[:12]})
	ctx, cancel := context.WithCancel(context.Background())
	healed := make(chan struct{})
	go func() { defer close(healed); tf.f.Heal(ctx, 100*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-healed })

	netns := func(id string) string {
		pid := docker(t, nil, "inspect", "-f", "{{.State.Pid}}", id)
		ns, err := os.Readlink("/proc/" + pid + "/ns/net")
		if err != nil {
			t.Fatalf("namespace of %s: %v", id, err)
		}
		return ns
	}
	crash := func(id string) {
		pid, err := strconv.Atoi(docker(t, nil, "inspect", "-f", "{{.State.Pid}}", id))
		if err != nil || pid <= 1 {
			t.Fatalf("pid of %s: %d %v", id, pid, err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	started := func(id string) string { return docker(t, nil, "inspect", "-f", "{{.State.StartedAt}}", id) }
	poll := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; filter log:\n%s", what, tf.logs.String())
			}
		}
	}
	if a, b := netns(joiner), netns(holder); a != b {
		t.Fatalf("before the crash the joiner is in %s, its holder in %s", a, b)
	}

	joinerStarted, waiterStarted := started(joiner), started(waiter)
	crash(holder)
	crash(sick)
	t0 := time.Now()
	poll("the joiner to be restarted into its holder's new namespace", func() bool {
		running := docker(t, nil, "inspect", "-f", "{{.State.Running}} {{.RestartCount}}", holder)
		if running != "true 1" || started(joiner) == joinerStarted {
			return false
		}
		return netns(joiner) == netns(holder)
	})
	t.Logf("joiner rejoined after %v", time.Since(t0))
	if !strings.Contains(tf.logs.String(), "restarting a container left in a dead network namespace") {
		t.Errorf("the healer did not log the restart:\n%s", tf.logs.String())
	}
	// The sick holder is back too, but never healthy: its joiner waits.
	poll("the healer to report the waiting joiner", func() bool {
		return strings.Contains(tf.logs.String(), "restarting it once sickguard and its dependencies are ready (now: sickguard is ")
	})
	t.Logf("waiter reported after %v", time.Since(t0))
	if started(waiter) != waiterStarted {
		t.Errorf("the healer restarted %s although its holder is not healthy:\n%s", waiter, tf.logs.String())
	}
}
