package apis

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeConfig: on any input decodeConfig never panics, every problem
// it reports names the file, and whatever it accepts encoding/json decodes
// strictly to the same Config.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "${A_SECRET}"}`, `"ports": [443, 8443]`, `"active": false`),
		cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "aaaaaaaa", "A_TOKEN": 5}`, `"ports": [0, "x", null]`, `"active": null`),
		`{"domains": "a.com", "description": 5, "restricted_methods": [1], "credentials": {"A_TOKEN": 12345}}`,
		`{"x": [[[[{}]]]], "Domains": 1}`, "{\"a\": \"x\ny\"}", "\n", `{"domains": ["a.com"`, `[1]`, `{} {}`, `{} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeConfig("f.json", data)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.json: ") {
					t.Fatalf("error line %q does not name the file", line)
				}
			}
			return
		}
		var want Config
		dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
		got, _ := json.Marshal(c)
		exp, _ := json.Marshal(&want)
		if !bytes.Equal(got, exp) {
			t.Fatalf("decoded %s, encoding/json %s", got, exp)
		}
	})
}
