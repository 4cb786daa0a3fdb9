package avrolog

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// the repository's schemas, two levels up from this package's module
var schemaDir = filepath.Join("..", "..", "..", "schemas", "avsc")

func load(t *testing.T) *Catalog {
	t.Helper()
	c, err := Load(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every schema's Go fingerprint equals the one schemas/fingerprints.lock pins (the Python
// codec's), and every locked file is loaded.
func TestFingerprintsEqualTheLock(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(schemaDir, "..", "fingerprints.lock"))
	if err != nil {
		t.Fatal(err)
	}
	var lock map[string]struct {
		Fingerprint string `json:"fingerprint"`
	}
	if err := json.Unmarshal(text, &lock); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range load(t).Versions() {
		got[v.File] = v.FingerprintHex()
	}
	for file, entry := range lock {
		if got[file] != entry.Fingerprint {
			t.Errorf("%s: Go fingerprint %q, lock %q", file, got[file], entry.Fingerprint)
		}
	}
	if len(got) < len(lock) {
		t.Errorf("loaded %d schema files, the lock pins %d", len(got), len(lock))
	}
}

// The checker above can fail: a schema that differs in its canonical form has another
// fingerprint.
func TestFingerprintSeesACanonicalChange(t *testing.T) {
	dir := t.TempDir()
	orig, err := os.ReadFile(filepath.Join(schemaDir, "Synced.v1.avsc"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(orig, &schema); err != nil {
		t.Fatal(err)
	}
	schema["fields"] = []any{map[string]any{"name": "kind2", "type": "string"}}
	changed, _ := json.Marshal(schema)
	if err := os.WriteFile(filepath.Join(dir, "Synced.v1.avsc"), changed, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fp := c.Versions()[0].FingerprintHex(); fp == "d2f08a9058532e2b" {
		t.Fatalf("a renamed field kept the fingerprint %s", fp)
	}
}

// The Python side of the contract, run in the same test: the repository's interpreter encodes
// each record with strata.schemas and prints the messages as hex. Its interpreter is
// $STRATA_PYTHON, else the repository's .venv; without it (or without the strata package) the
// test fails in one line, unless STRATA_GO_SKIP_PYTHON=1 says a Go-only run may skip it.
const pythonEncoder = `
import json, sys
import strata.schemas as s
out = []
for spec in json.load(sys.stdin):
    fields = dict(spec["fields"])
    if "binds" in fields:
        fields["binds"] = tuple(s.GroupBind(**b) for b in fields["binds"])
    if "object" in fields:
        fields["object"] = bytes.fromhex(fields["object"])
    out.append(s.encode(getattr(s, spec["type"])(**fields)).hex())
json.dump(out, sys.stdout)
`

func pythonPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STRATA_PYTHON"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "..", ".venv", "bin", "python")
}

// pythonEncodes has the Python codec encode each value (a record of this package, its fields
// named by their avro tags, as strata.schemas names them) and returns the messages.
func pythonEncodes(t *testing.T, values []any) [][]byte {
	t.Helper()
	type spec struct {
		Type   string         `json:"type"`
		Fields map[string]any `json:"fields"`
	}
	specs := make([]spec, len(values))
	for i, v := range values {
		specs[i] = spec{reflect.TypeOf(v).Name(), pyFields(reflect.ValueOf(v)).(map[string]any)}
	}
	in, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	python := pythonPath(t)
	cmd := exec.Command(python, "-c", pythonEncoder)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		why := fmt.Sprintf("the Python encoder (%s -c ...) did not run: %v", python, err)
		if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); lines[len(lines)-1] != "" {
			why += ": " + lines[len(lines)-1]
		}
		if os.Getenv("STRATA_GO_SKIP_PYTHON") == "1" {
			t.Skip(why + " (skipped: STRATA_GO_SKIP_PYTHON=1)")
		}
		t.Fatal(why + " (set STRATA_PYTHON to the repository's interpreter, or STRATA_GO_SKIP_PYTHON=1 to skip)")
	}
	var hexes []string
	if err := json.Unmarshal(out, &hexes); err != nil || len(hexes) != len(values) {
		t.Fatalf("the Python encoder printed %q (%v)", out, err)
	}
	msgs := make([][]byte, len(hexes))
	for i, h := range hexes {
		if msgs[i], err = hex.DecodeString(h); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// pyFields is a record's value as the Python encoder takes it: fields by avro tag, nil for a
// null, bytes as hex.
func pyFields(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return pyFields(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		for i := 0; i < v.NumField(); i++ {
			out[v.Type().Field(i).Tag.Get("avro")] = pyFields(v.Field(i))
		}
		return out
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return hex.EncodeToString(v.Bytes())
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = pyFields(v.Index(i))
		}
		return out
	default:
		return v.Interface()
	}
}

func str(s string) *string { return &s }

// vectors: the records of the contract, each with the schema Python writes it under.
func vectors() []struct {
	schema string
	value  any
} {
	many := BindGroup{Replica: str("r-ü")}
	for i := range 300 { // more than one Avro block would hold if the writers split arrays
		many.Binds = append(many.Binds, GroupBind{Pod: fmt.Sprintf("uid-%d", i), Node: fmt.Sprintf("n%d", i%7), Extensions: map[string]string{}})
	}
	return []struct {
		schema string
		value  any
	}{
		{"strata.log.BindGroup", BindGroup{Binds: []GroupBind{
			{Pod: "uid-1", Node: "n1", Extensions: map[string]string{}},
			{Pod: "uid-2", Node: "n2", Extensions: map[string]string{"k": "v"}},
		}, Replica: str("r1")}},
		{"strata.log.BindGroup", BindGroup{Binds: []GroupBind{{Pod: "uid-1", Node: "n1", Extensions: map[string]string{}}}}},
		{"strata.log.BindGroup", many},
		{"strata.log.Evict", Evict{Pod: "uid-1", Reason: str("preempted"), Replica: str("r1")}},
		{"strata.log.Evict", Evict{Pod: "uid-1"}},
		{"strata.log.Synced", Synced{Kind: "Pod"}},
		{"strata.log.Synced", Synced{Kind: "PodGroup"}},
		{"strata.log.WatchEvent", WatchEvent{Op: "MODIFIED", APIVersion: "v1", Kind: "Pod", Namespace: str("ns"), Name: "p0",
			UID: str("u0"), ResourceVersion: str("7"), Source: "watch/Pod", Object: []byte(`{"a":1}`)}},
		{"strata.log.WatchEvent", WatchEvent{Op: "DELETED", APIVersion: "v1", Kind: "Node", Name: "node-ü", Source: "list/Node",
			ObservedTimeMs: func() *int64 { n := int64(1_754_000_000_123); return &n }(), Object: []byte("{\"b\":\"\xc3\xbc\\u0000\"}")}},
		{"strata.log.WatchEvent", WatchEvent{Op: "ADDED", APIVersion: "scheduling.volcano.sh/v1beta1", Kind: "PodGroup",
			Namespace: str(""), Name: "pg", UID: str(""), ResourceVersion: str("18446744073709551615"), Source: "watch/PodGroup", Object: []byte{}}},
	}
}

// mismatches compares one message the Python codec wrote with the record it was given: Go reads
// the records it reads (WatchEvent, Synced) back field for field, and writes every record to
// the same bytes (Go writes BIND_GROUP and EVICT; Python's fold reads them).
func mismatches(c *Catalog, schema string, value any, python []byte) []string {
	var out []string
	rec, err := c.Decode(python)
	if err != nil {
		return []string{fmt.Sprintf("Go cannot decode it: %v", err)}
	}
	if rec.Schema.FullName != schema {
		out = append(out, fmt.Sprintf("schema %s, want %s", rec.Schema.FullName, schema))
	}
	switch v := value.(type) {
	case WatchEvent:
		if rec.Watch == nil || !reflect.DeepEqual(*rec.Watch, v) {
			out = append(out, fmt.Sprintf("Go decodes %+v, Python was given %+v", rec.Watch, v))
		}
	case Synced:
		if rec.Synced == nil || *rec.Synced != v {
			out = append(out, fmt.Sprintf("Go decodes %+v, Python was given %+v", rec.Synced, v))
		}
	}
	goMsg, err := c.Encode(schema, value)
	if err != nil {
		return append(out, fmt.Sprintf("Go cannot encode it: %v", err))
	}
	if !bytes.Equal(goMsg, python) {
		out = append(out, fmt.Sprintf("Go encodes %x\n          Python wrote %x", goMsg, python))
	}
	return out
}

// Messages written by the Python codec (strata.schemas.encode) in this run, read and written by
// Go byte for byte.
func TestPythonMessages(t *testing.T) {
	c := load(t)
	vs := vectors()
	values := make([]any, len(vs))
	for i, v := range vs {
		values[i] = v.value
	}
	msgs := pythonEncodes(t, values)
	for i, v := range vs {
		t.Run(fmt.Sprintf("%d %s", i, v.schema), func(t *testing.T) {
			for _, m := range mismatches(c, v.schema, v.value, msgs[i]) {
				t.Error(m)
			}
		})
	}
}

// The comparison can fail: one flipped byte of a Python message, anywhere past the marker, is
// caught in every vector (as a decode error, another field, or other bytes than Go writes).
func TestPythonMessagesCatchAFlippedByte(t *testing.T) {
	c := load(t)
	vs := vectors()
	values := make([]any, len(vs))
	for i, v := range vs {
		values[i] = v.value
	}
	msgs := pythonEncodes(t, values)
	for i, v := range vs {
		for _, at := range []int{2, HeaderSize, len(msgs[i]) - 1} {
			flipped := bytes.Clone(msgs[i])
			flipped[at] ^= 0x01
			if len(mismatches(c, v.schema, v.value, flipped)) == 0 {
				t.Errorf("%d %s: byte %d flipped, and nothing was noticed", i, v.schema, at)
			}
		}
	}
}

func TestBadMessages(t *testing.T) {
	c := load(t)
	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrNotSingleObject},
		{"json", []byte(`{"type":"BIND","pod":"p"}`), ErrNotSingleObject},
		{"unknown fingerprint", []byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0}, ErrUnknownFingerprint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Decode(tt.msg); !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
		})
	}
}
