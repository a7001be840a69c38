package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestHasLoneSurrogate(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		`"plain"`:                 false,
		`"\ud83d\ude00"`:          false, // a valid pair (😀)
		`"\uD83D\uDE00"`:          false,
		`"\\ud800"`:               false, // an escaped backslash, then text
		`"\ud800"`:                true,
		`"\udc00"`:                true,
		`"\ud800x"`:               true,
		`"\ud800\u0041"`:          true,
		`"a\\\ud800"`:             true,
		`"\ud83d\ude00\udc00"`:    true,
		`"\u00e9 and \u20ac"`:     false,
		`"ends with \ud83d\ude0"`: true,
	}
	for lit, want := range cases {
		if got := hasLoneSurrogate([]byte(lit)); got != want {
			t.Errorf("hasLoneSurrogate(%s) = %v, want %v", lit, got, want)
		}
	}
}

func TestParseExecuteArgs(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{DefaultTimeout: 30 * time.Second, MaxTimeout: 300 * time.Second, MaxCodeBytes: 100}}
	args, err := s.parseExecuteArgs(json.RawMessage(`{"code": "console.log('😀 \ud83d\ude00')", "timeout": 2.5, "apis": ["a", "b"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if args.Code != "console.log('😀 😀')" || args.Timeout != 2500*time.Millisecond || !args.APIsGiven || len(args.APIs) != 2 {
		t.Fatalf("args = %+v", args)
	}
	args, err = s.parseExecuteArgs(json.RawMessage(`{"code": "x", "timeout": null, "apis": null}`))
	if err != nil || args.Timeout != 30*time.Second || args.APIsGiven {
		t.Fatalf("nulls: %+v %v", args, err)
	}
	if _, err := s.parseExecuteArgs(json.RawMessage(`{"code": "x", "timeout": 300}`)); err != nil {
		t.Fatalf("the maximum itself: %v", err)
	}
	// One strict decoder (internal/strictjson): a key given twice is
	// refused rather than the last one winning unseen; a key in another
	// case is unknown.
	for in, want := range map[string]string{
		`{"code": "console.log(1)", "code": "Deno.exit(3)"}`: `argument "code" is given twice`,
		`{"Code": "x"}`:         `unknown argument "Code"`,
		`{"code": "x"} {"a":1}`: "arguments must be a JSON object",
	} {
		if _, err := s.parseExecuteArgs(json.RawMessage(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", in, err, want)
		}
	}
}
