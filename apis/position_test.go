package apis

import "testing"

// TestPositionAtMatchesPosition: the indexed position agrees with the
// scanning one at every offset, newlines at the start, end and in a row
// included.
func TestPositionAtMatchesPosition(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "{}", "\n", "\n\n{\n \"a\": [1,\n2]\n}\n", "{\"ports\": [443, 444]}", "x\ny"} {
		nl := newlines([]byte(data))
		for off := int64(-1); off <= int64(len(data))+1; off++ {
			if got, want := positionAt(nl, []byte(data), off), position([]byte(data), off); got != want {
				t.Errorf("%q at %d: positionAt %s, position %s", data, off, got, want)
			}
		}
	}
}
