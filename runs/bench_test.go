package runs

import (
	"context"
	"testing"
)

// BenchmarkRunLifecycle measures what the run model adds to one run: the
// queued, running and final records written to the store, no sandbox.
//
//	go test ./runs -run '^$' -bench RunLifecycle -benchtime 200x
func BenchmarkRunLifecycle(b *testing.B) {
	m, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	b.ResetTimer()
	for b.Loop() {
		r, err := m.Start(Spec{MaxOutput: 1 << 20, Exec: quick("1\n")})
		if err != nil {
			b.Fatal(err)
		}
		<-r.Done()
	}
}
