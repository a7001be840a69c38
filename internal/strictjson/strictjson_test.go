package strictjson

import (
	"errors"
	"testing"
)

func TestObject(t *testing.T) {
	t.Parallel()
	allowed := []string{"code", "apis"}
	fields, err := Object([]byte(` {"code": "x", "apis" : [1] } `), allowed)
	if err != nil || string(fields["code"]) != `"x"` || string(fields["apis"]) != `[1]` {
		t.Fatalf("fields %v, err %v", fields, err)
	}
	var unknown *UnknownFieldError
	var dup *DuplicateFieldError
	var syntax *SyntaxError
	for _, tc := range []struct {
		in   string
		want func(error) bool
	}{
		{`[1]`, func(err error) bool { return errors.Is(err, ErrNotObject) }},
		{`"code"`, func(err error) bool { return errors.Is(err, ErrNotObject) }},
		{``, func(err error) bool { return errors.Is(err, ErrNotObject) }},
		{`{"code": "x"} {}`, func(err error) bool { return errors.Is(err, ErrTrailing) }},
		{`{"Code": "x"}`, func(err error) bool { return errors.As(err, &unknown) && unknown.Field == "Code" }},
		{`{"code": "x", "code": "y"}`, func(err error) bool { return errors.As(err, &dup) && dup.Field == "code" }},
		{`{"code": tru}`, func(err error) bool { return errors.As(err, &syntax) && syntax.Field == "code" }},
		{`{"code": "x"`, func(err error) bool { return errors.Is(err, ErrNotObject) }},
	} {
		if _, err := Object([]byte(tc.in), allowed); !tc.want(err) {
			t.Errorf("%q: err %v", tc.in, err)
		}
	}
}

func TestKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, typeOnly, short string }{
		{`"abc"`, "a string", `the string "abc"`},
		{`{}`, "an object", "an object"},
		{`{`, "an object", "an object"}, // a Reader token's Raw
		{`[]`, "an array", "an array"},
		{`true`, "a boolean", "the boolean true"},
		{`null`, "null", "null"},
		{` 3.5`, "a number", "the number 3.5"},
		{``, "nothing", "nothing"},
		{`"sk_live_0123456789abcdefghijklmnopqrstuvwxyz"`, "a string", `the string "sk_live_0123456789abcdefghijklmnopqrstu…`},
	} {
		if got := Kind([]byte(tc.in), TypeOnly); got != tc.typeOnly {
			t.Errorf("Kind(%q, TypeOnly) = %q, want %q", tc.in, got, tc.typeOnly)
		}
		if got := Kind([]byte(tc.in), ShortValue); got != tc.short {
			t.Errorf("Kind(%q, ShortValue) = %q, want %q", tc.in, got, tc.short)
		}
	}
}
