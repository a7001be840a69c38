package testenv

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestReapStaleContainers: a test container whose owner process is gone is
// removed; one owned by this (live) process stays.
func TestReapStaleContainers(t *testing.T) {
	t.Parallel()
	Docker(t)
	image := emptyImage(t)
	stale := createContainer(t, image, fmt.Sprintf("%s=%d", OwnerLabel, deadPID(t)))
	live := createContainer(t, image, OwnerLabelArg())
	ReapStaleContainers()
	if containerExists(stale) {
		t.Errorf("container %s of a process that is gone was not removed", stale)
	}
	if !containerExists(live) {
		t.Errorf("container %s of this live process was removed", live)
	}
}

// emptyImage imports an image holding only /tmp (nothing is pulled); it
// stays for the next run.
func emptyImage(t *testing.T) string {
	t.Helper()
	const tag = "codeforge-test/testenv-empty:latest"
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag
	}
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dockerCLI(t, &rootfs, "import", "-", tag)
	return tag
}

// createContainer creates (never starts) a container of image with the
// label key=value, removed when the test ends.
func createContainer(t *testing.T, image, label string) string {
	t.Helper()
	id := dockerCLI(t, nil, "create", "--label", label, "--network", "none", image, "/none")
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", id).Run() })
	return id
}

func containerExists(id string) bool {
	return exec.Command("docker", "container", "inspect", id).Run() == nil
}

// deadPID is a PID no process can have: the kernel's pid_max (PIDs are
// below it).
func deadPID(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid_max %q: %v", data, err)
	}
	return n
}

func dockerCLI(t *testing.T, stdin *bytes.Buffer, args ...string) string {
	t.Helper()
	cmd := exec.Command("docker", args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
