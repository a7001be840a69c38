//go:build unix

package settings

import (
	"io/fs"
	"syscall"
)

// linkCount is the number of hard links of the file fi describes, when
// the system says.
func linkCount(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}
