package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// OwnerLabel marks the containers tests start with the PID of the test
// process (see OwnerLabelArg), so that a later run can remove those of a
// process that was killed before its cleanup ran (ReapStaleContainers).
const OwnerLabel = "codeforge-test-pid"

// OwnerLabelArg is OwnerLabel set to this process's PID, as the value of
// a `docker run --label` flag.
func OwnerLabelArg() string { return fmt.Sprintf("%s=%d", OwnerLabel, os.Getpid()) }

// ReapStaleContainers removes the test containers whose owning test
// process (see OwnerLabel) no longer exists on this machine. It is best
// effort: an engine that does not answer leaves them for the next run.
func ReapStaleContainers() {
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label="+OwnerLabel,
		"--format", `{{.ID}} {{.Label "`+OwnerLabel+`"}}`).Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, pidText, ok := strings.Cut(line, " ")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
	}
}
