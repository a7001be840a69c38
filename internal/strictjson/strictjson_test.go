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
	for in, want := range map[string]string{
		`"abc"`: `the string "abc"`, `{}`: "an object", `[]`: "a list", `true`: "the boolean true",
		`null`: "null", ` 3.5`: "the number 3.5", ``: "nothing",
	} {
		if got := Kind([]byte(in)); got != want {
			t.Errorf("Kind(%q) = %q, want %q", in, got, want)
		}
	}
}
