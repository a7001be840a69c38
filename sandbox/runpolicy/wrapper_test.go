package runpolicy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFormatTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1", 1500 * time.Millisecond: "1.5", 1001 * time.Microsecond: "0.002",
		90 * time.Second: "90", 2*time.Second + 10*time.Millisecond: "2.01",
	} {
		if got := formatTimeout(d); got != want {
			t.Errorf("formatTimeout(%v) = %q, want %q", d, got, want)
		}
		if got := parseTimeout(formatTimeout(d)); got != RoundTimeout(d) {
			t.Errorf("parseTimeout(formatTimeout(%v)) = %v, want %v", d, got, RoundTimeout(d))
		}
	}
}

// TestEnvRoundTrip: what the runner sends is what the filter and the
// wrapper read back, field for field.
func TestEnvRoundTrip(t *testing.T) {
	for _, r := range []Run{
		{ID: "a", Timeout: time.Second},
		{ID: "0123456789abcdef", Timeout: 1500 * time.Millisecond, Hosts: []string{"api.test", "b.test:8443", "[::1]:1"}, MemoryMB: 128,
			ReadPaths: []string{"/apis/a/types.d.ts"}, ProxyURL: "http://run-1:s3cret@192.0.2.1:3128"},
		{ID: "x_y-z", Timeout: 24 * time.Hour, AllHosts: true},
	} {
		env, err := r.Env()
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		got, err := ParseEnv(env)
		if err != nil {
			t.Fatalf("ParseEnv(%q): %v", env, err)
		}
		if got.ID != r.ID || got.Timeout != r.Timeout || !slices.Equal(got.Hosts, r.Hosts) || got.AllHosts != r.AllHosts ||
			got.MemoryMB != r.MemoryMB || !slices.Equal(got.ReadPaths, r.ReadPaths) || got.ProxyURL != r.ProxyURL {
			t.Errorf("round trip of %+v gave %+v", r, got)
		}
	}
}

// TestParseEnvRefuses: every malformed setting is refused with a message
// that names the variable and never repeats a proxy URL.
func TestParseEnvRefuses(t *testing.T) {
	ok := []string{"CODEFORGE_RUN_ID=r1", "CODEFORGE_TIMEOUT=5"}
	with := func(extra ...string) []string { return append(slices.Clone(ok), extra...) }
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"empty", nil, "CODEFORGE_RUN_ID"},
		{"id traversal", []string{"CODEFORGE_RUN_ID=../x", "CODEFORGE_TIMEOUT=1"}, "CODEFORGE_RUN_ID"},
		{"id dash", []string{"CODEFORGE_RUN_ID=-x", "CODEFORGE_TIMEOUT=1"}, "CODEFORGE_RUN_ID"},
		{"no timeout", []string{"CODEFORGE_RUN_ID=a"}, "CODEFORGE_TIMEOUT"},
		{"timeout zero", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=0.000"}, "CODEFORGE_TIMEOUT"},
		{"timeout too long", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=86401"}, "CODEFORGE_TIMEOUT"},
		{"timeout unit", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=5s"}, "CODEFORGE_TIMEOUT"},
		{"timeout flag", []string{"CODEFORGE_RUN_ID=a", "CODEFORGE_TIMEOUT=5 --foreground"}, "CODEFORGE_TIMEOUT"},
		{"memory zero", with("CODEFORGE_MEMORY_MB=0"), "CODEFORGE_MEMORY_MB"},
		{"net flag", with("CODEFORGE_ALLOW_NET=--allow-all"), "CODEFORGE_ALLOW_NET"},
		{"net space", with("CODEFORGE_ALLOW_NET=a.test --allow-all"), "CODEFORGE_ALLOW_NET"},
		{"net empty item", with("CODEFORGE_ALLOW_NET=a.test,,b.test"), "CODEFORGE_ALLOW_NET"},
		{"net star and host", with("CODEFORGE_ALLOW_NET=*,a.test"), "CODEFORGE_ALLOW_NET"},
		{"read relative", with("CODEFORGE_READ=etc/passwd"), "CODEFORGE_READ"},
		{"read traversal", with("CODEFORGE_READ=/skills/../etc/shadow"), "CODEFORGE_READ"},
		{"read comma smuggle", with("CODEFORGE_READ=/a,,/b"), "CODEFORGE_READ"},
		{"read space", with("CODEFORGE_READ=/a b"), "CODEFORGE_READ"},
		{"proxy scheme", with("HTTPS_PROXY=socks5://u:s3cret@proxy:1080"), "HTTPS_PROXY"},
		{"proxy newline", with("HTTP_PROXY=http://u:s3cret@proxy:3128\nX=1"), "HTTP_PROXY"},
		{"proxies differ", with("HTTPS_PROXY=http://u:s3cret@a:1", "HTTP_PROXY=http://u:s3cret@b:1"), "differ"},
		{"lowercase proxy", with("https_proxy=http://u:s3cret@proxy:3128"), "https_proxy"},
		{"other key", with("LD_PRELOAD=/tmp/x.so"), "LD_PRELOAD"},
		{"twice", with("CODEFORGE_TIMEOUT=9"), "twice"},
		{"not key=value", with("CODEFORGE_READ"), "KEY=VALUE"},
	} {
		_, err := ParseEnv(tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error repeats the proxy credential: %v", tc.name, err)
		}
	}
}

// TestWarmEnv: a warm exec's settings carry no timeout or proxy (those
// come with its run, and the run can only narrow what the filter saw).
func TestWarmEnv(t *testing.T) {
	r := Run{ID: "w1", Hosts: []string{"a.test"}, ReadPaths: []string{"/apis/a/types.d.ts"}}
	env, err := r.WarmEnv()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseWarmEnv(env)
	if err != nil || got.ID != "w1" || !slices.Equal(got.Hosts, r.Hosts) || got.Timeout != 0 {
		t.Errorf("ParseWarmEnv(%q) = %+v, %v", env, got, err)
	}
	for _, extra := range []string{"CODEFORGE_TIMEOUT=5", "HTTPS_PROXY=http://u:p@proxy:1", "HTTP_PROXY=http://u:p@proxy:1"} {
		if _, err := ParseWarmEnv(append(slices.Clone(env), extra)); err == nil {
			t.Errorf("ParseWarmEnv accepted %s", extra)
		}
	}
	if _, err := (Run{ID: "w1", ProxyURL: "http://u:p@proxy:1"}).WarmEnv(); err == nil {
		t.Error("WarmEnv accepted a proxy")
	}
	claim, _ := NewRunClaim(Run{ID: "other", Timeout: 1500 * time.Millisecond, Hosts: []string{"a.test"}}).Line()
	run, err := ParseRunClaim(claim, got)
	if err != nil || run.ID != "w1" || run.Timeout != 1500*time.Millisecond {
		t.Errorf("ParseRunClaim = %+v, %v", run, err)
	}
	for _, bad := range []string{`{"timeout_ms":0}`, `{"timeout_ms":1000,"hosts":["--allow-all"]}`, `{"timeout_ms":1000,"extra":1}`, `{"timeout_ms":1000,"read_paths":["/a/../etc"]}`} {
		if _, err := ParseRunClaim([]byte(bad), got); err == nil {
			t.Errorf("ParseRunClaim accepted %s", bad)
		}
	}
}
