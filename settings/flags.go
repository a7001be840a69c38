package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// UsageError is a mistake on the command line (an unknown flag, a stray
// argument, a flag value of the wrong kind); main exits 2 for it and 1 for
// every other error.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Flags is a command's flag set in which every flag may also come from an
// environment variable: the variable gives the default, a flag on the
// command line wins. Every command registers its settings through it, so
// they share one convention (on/off settings are boolean flags; the help
// names each variable) and one way of failing.
type Flags struct {
	fs     *flag.FlagSet
	getenv Getenv
	errs   []error
}

// NewFlags returns an empty flag set for the command name (e.g.
// "codeforge serve"), reading variables with getenv and writing help and
// parse errors to out.
func NewFlags(name string, getenv Getenv, out io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &Flags{fs: fs, getenv: getenv}
}

// FlagSet is the underlying flag set (for a custom Usage).
func (f *Flags) FlagSet() *flag.FlagSet { return f.fs }

// env returns the trimmed value of the variable name, if set and not empty.
func (f *Flags) env(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	v, ok := f.getenv(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func describe(usage, env string) string {
	if env == "" {
		return usage
	}
	return usage + " (" + env + ")"
}

// String registers a text flag --name with the variable env ("" for none).
func (f *Flags) String(p *string, name, env, def, usage string) {
	if v, ok := f.env(env); ok {
		def = v
	}
	f.fs.StringVar(p, name, def, describe(usage, env))
}

// Bool registers an on/off flag --name (given alone it means true; also
// --name=false) with the variable env. A variable that is not a boolean
// is an error of Parse that names it.
func (f *Flags) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := f.env(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s=%q (--%s): want true or false", env, v, name))
		} else {
			def = b
		}
	}
	f.fs.BoolVar(p, name, def, describe(usage, env))
}

// Parse parses args. It returns flag.ErrHelp for -h (the help is written),
// a *UsageError for a bad command line or a stray argument, and an error
// naming the variable for a variable of the wrong kind.
func (f *Flags) Parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flag.ErrHelp
		}
		return &UsageError{Err: fmt.Errorf("%s: %w", f.fs.Name(), err)}
	}
	if f.fs.NArg() > 0 {
		return &UsageError{Err: fmt.Errorf("%s: unexpected argument %q (flags only; see %s -h)", f.fs.Name(), f.fs.Arg(0), f.fs.Name())}
	}
	return errors.Join(f.errs...)
}
