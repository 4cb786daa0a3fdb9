package avrolog

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
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

// Messages written by the Python codec (strata.schemas.encode), byte for byte.
func TestPythonMessages(t *testing.T) {
	c := load(t)
	ns, uid, rv := "ns", "u0", "7"
	r1 := "r1"
	reason := "preempted"
	tests := []struct {
		name   string
		hex    string
		schema string
		value  any // what Go encodes to the same bytes (nil: decode only)
		watch  *WatchEvent
		synced *Synced
	}{
		{
			name:   "BindGroup",
			hex:    "c301b642b9db3a9a90dd040a7569642d31046e31000a7569642d32046e3202026b0276000002047231",
			schema: "strata.log.BindGroup",
			value: BindGroup{Binds: []GroupBind{
				{Pod: "uid-1", Node: "n1", Extensions: map[string]string{}},
				{Pod: "uid-2", Node: "n2", Extensions: map[string]string{"k": "v"}},
			}, Replica: &r1},
		},
		{
			name:   "Evict",
			hex:    "c301577f43a6ade5c0560a7569642d310212707265656d7074656402047231",
			schema: "strata.log.Evict",
			value:  Evict{Pod: "uid-1", Reason: &reason, Replica: &r1},
		},
		{
			name:   "Synced",
			hex:    "c301d2f08a9058532e2b06506f64",
			schema: "strata.log.Synced",
			value:  Synced{Kind: "Pod"},
			synced: &Synced{Kind: "Pod"},
		},
		{
			name:   "WatchEvent",
			hex:    "c301a418004f17a4ae490204763106506f6402046e7304703002047530020237001277617463682f506f640e7b2261223a317d",
			schema: "strata.log.WatchEvent",
			watch: &WatchEvent{Op: "MODIFIED", APIVersion: "v1", Kind: "Pod", Namespace: &ns, Name: "p0", UID: &uid,
				ResourceVersion: &rv, Source: "watch/Pod", Object: []byte(`{"a":1}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, _ := hex.DecodeString(tt.hex)
			rec, err := c.Decode(msg)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Schema.FullName != tt.schema {
				t.Fatalf("schema %s, want %s", rec.Schema.FullName, tt.schema)
			}
			if tt.watch != nil && !reflect.DeepEqual(rec.Watch, tt.watch) {
				t.Errorf("watch event %+v, want %+v", rec.Watch, tt.watch)
			}
			if tt.synced != nil && !reflect.DeepEqual(rec.Synced, tt.synced) {
				t.Errorf("synced %+v, want %+v", rec.Synced, tt.synced)
			}
			if tt.value != nil {
				out, err := c.Encode(tt.schema, tt.value)
				if err != nil {
					t.Fatal(err)
				}
				if got := hex.EncodeToString(out); got != tt.hex {
					t.Errorf("Go encodes %s\n          Python wrote %s", got, tt.hex)
				}
			}
		})
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
