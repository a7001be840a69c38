package server

import (
	"encoding/json"
	"testing"
)

// TestSchemaHelpersRender pins the two renderings the golden file depends
// on that jsonschema.Schema does not give by default: an empty
// "properties" object is kept (not dropped as empty), and
// additionalProperties is the literal false. A jsonschema-go upgrade that
// changes either fails here with the reason, not only as a golden diff.
func TestSchemaHelpersRender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		got  any
		want string
	}{
		{"no arguments", noArgsSchema(), `{"type":"object","properties":{},"additionalProperties":false}`},
		{"bounded integer", intRange("n", 1, 100), `{"type":"integer","description":"n","minimum":1,"maximum":100}`},
		{"seconds", seconds("s", 300), `{"type":"number","description":"s","maximum":300,"exclusiveMinimum":0}`},
		{"array", arrayOf(str(""), ""), `{"type":"array","items":{"type":"string"}}`},
	} {
		b, err := json.Marshal(tc.got)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, b, err, tc.want)
		}
	}
}
