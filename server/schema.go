package server

import "github.com/google/jsonschema-go/jsonschema"

// Small constructors for the tools' JSON schemas, so that each schema
// reads as a table of its properties. Every call builds a new tree: no
// schema is shared or kept in a package variable. The tool list clients
// see is pinned by testdata/tools.golden.json (TestToolsGolden).

// props are an object schema's properties by name.
type props = map[string]*jsonschema.Schema

// argsSchema is a tool's input schema: an object with exactly these properties
// (additionalProperties: false), of which required must be given. A tool
// without arguments has props{} (rendered "properties": {}).
func argsSchema(p props, required ...string) *jsonschema.Schema {
	s := object(p, required...)
	s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}} // renders as false
	return s
}

// object is an output object: these properties, required ones always
// present, others when they apply.
func object(p props, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: p, Required: required}
}

// withDescription sets s's description and returns s.
func withDescription(s *jsonschema.Schema, description string) *jsonschema.Schema {
	s.Description = description
	return s
}

func str(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: description}
}

// strEnum is a string that must be one of values.
func strEnum(description string, values ...string) *jsonschema.Schema {
	s := str(description)
	for _, v := range values {
		s.Enum = append(s.Enum, v)
	}
	return s
}

func integer(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "integer", Description: description}
}

// intAtLeast is an integer of lo or more.
func intAtLeast(description string, lo int) *jsonschema.Schema {
	s := integer(description)
	s.Minimum = ptr(float64(lo))
	return s
}

// intRange is an integer from lo to hi.
func intRange(description string, lo, hi int) *jsonschema.Schema {
	s := intAtLeast(description, lo)
	s.Maximum = ptr(float64(hi))
	return s
}

func boolean(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "boolean", Description: description}
}

// seconds is a number of seconds more than 0 and at most max.
func seconds(description string, max float64) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "number", ExclusiveMinimum: ptr(0.0), Maximum: ptr(max), Description: description}
}

// arrayOf is an array whose items all match items.
func arrayOf(items *jsonschema.Schema, description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "array", Items: items, Description: description}
}
