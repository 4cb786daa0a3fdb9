// Package avrolog decodes and encodes the records of Strata's cache log: Avro single-object
// encoding (marker C3 01, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
// schema's parsing canonical form, then the Avro binary body) under the repository's own
// schemas (schemas/avsc/<Name>.v<N>.avsc), read at start so that Go and Python share one
// contract.
package avrolog

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/hamba/avro/v2"
)

// Marker starts every single-object encoded message.
var Marker = []byte{0xC3, 0x01}

// HeaderSize is the marker plus the fingerprint.
const HeaderSize = 10

var fileName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\.v([1-9][0-9]*)\.avsc$`)

// Version is one released version of one schema.
type Version struct {
	File        string // e.g. Bind.v2.avsc
	FullName    string // e.g. strata.log.Bind
	Number      int
	Schema      avro.Schema
	Fingerprint [8]byte // CRC-64-AVRO of the parsing canonical form, little-endian
}

// FingerprintHex is the fingerprint as schemas/fingerprints.lock writes it.
func (v *Version) FingerprintHex() string { return hex.EncodeToString(v.Fingerprint[:]) }

// api encodes arrays and maps as one block with a count and no byte size, as the Python codec
// (fastavro) does, so that both write the same bytes.
var api = avro.Config{DisableBlockSizeHeader: true, BlockLength: 1 << 30}.Freeze()

// Catalog holds every schema version of a directory, by fingerprint and by name.
type Catalog struct {
	byFingerprint map[[8]byte]*Version
	byName        map[string][]*Version // ascending version numbers
}

// Load parses every <Name>.v<N>.avsc of dir.
func Load(dir string) (*Catalog, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the schema directory: %w", err)
	}
	c := &Catalog{byFingerprint: map[[8]byte]*Version{}, byName: map[string][]*Version{}}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading schema %s: %w", e.Name(), err)
		}
		// one cache per file: two versions of a schema define the same full name
		schema, err := avro.ParseBytesWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			return nil, fmt.Errorf("parsing schema %s: %w", e.Name(), err)
		}
		named, ok := schema.(avro.NamedSchema)
		if !ok {
			return nil, fmt.Errorf("schema %s is not a named schema", e.Name())
		}
		fp, err := schema.FingerprintUsing(avro.CRC64AvroLE)
		if err != nil {
			return nil, fmt.Errorf("fingerprinting schema %s: %w", e.Name(), err)
		}
		number, _ := strconv.Atoi(m[2])
		v := &Version{File: e.Name(), FullName: named.FullName(), Number: number, Schema: schema}
		copy(v.Fingerprint[:], fp)
		c.byFingerprint[v.Fingerprint] = v
		c.byName[v.FullName] = append(c.byName[v.FullName], v)
	}
	for _, vs := range c.byName {
		sort.Slice(vs, func(i, j int) bool { return vs[i].Number < vs[j].Number })
	}
	if len(c.byName) == 0 {
		return nil, fmt.Errorf("no schema files (<Name>.v<N>.avsc) in %s", dir)
	}
	return c, nil
}

// Versions lists every loaded version, by file name.
func (c *Catalog) Versions() []*Version {
	var out []*Version
	for _, vs := range c.byName {
		out = append(out, vs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// Current is the newest version of a schema, the one writers use.
func (c *Catalog) Current(fullName string) (*Version, error) {
	vs := c.byName[fullName]
	if len(vs) == 0 {
		return nil, fmt.Errorf("no schema named %s", fullName)
	}
	return vs[len(vs)-1], nil
}

// Errors of Decode, in the Python codec's words.
var (
	ErrNotSingleObject    = errors.New("not single-object encoded")
	ErrUnknownFingerprint = errors.New("unknown schema fingerprint")
)

// The records this program reads or writes, field for field as in the schemas.

// WatchEvent is strata.log.WatchEvent.
type WatchEvent struct {
	Op              string  `avro:"op"`
	APIVersion      string  `avro:"api_version"`
	Kind            string  `avro:"kind"`
	Namespace       *string `avro:"namespace"`
	Name            string  `avro:"name"`
	UID             *string `avro:"uid"`
	ResourceVersion *string `avro:"resource_version"`
	ObservedTimeMs  *int64  `avro:"observed_time_ms"`
	Source          string  `avro:"source"`
	Object          []byte  `avro:"object"`
}

// Synced is strata.log.Synced.
type Synced struct {
	Kind string `avro:"kind"`
}

// GroupBind is one bind of a BindGroup.
type GroupBind struct {
	Pod        string            `avro:"pod"`
	Node       string            `avro:"node"`
	Extensions map[string]string `avro:"extensions"`
}

// BindGroup is strata.log.BindGroup: a gang's binds, admitted all or nothing.
type BindGroup struct {
	Binds   []GroupBind `avro:"binds"`
	Replica *string     `avro:"replica"`
}

// Evict is strata.log.Evict.
type Evict struct {
	Pod     string  `avro:"pod"`
	Reason  *string `avro:"reason"`
	Replica *string `avro:"replica"`
}

// Record is one decoded message: its schema, and the value for the kinds this program reads.
type Record struct {
	Schema *Version
	Watch  *WatchEvent // strata.log.WatchEvent
	Synced *Synced     // strata.log.Synced
}

// Decode reads one message. Only WatchEvent and Synced bodies are decoded: every other record
// takes its place in the log (its version) and is the sidecar's fold's business.
func (c *Catalog) Decode(msg []byte) (Record, error) {
	if len(msg) < HeaderSize || !bytes.Equal(msg[:2], Marker) {
		return Record{}, ErrNotSingleObject
	}
	var fp [8]byte
	copy(fp[:], msg[2:HeaderSize])
	v := c.byFingerprint[fp]
	if v == nil {
		return Record{}, fmt.Errorf("%w %x", ErrUnknownFingerprint, fp)
	}
	rec := Record{Schema: v}
	body := msg[HeaderSize:]
	switch v.FullName {
	case "strata.log.WatchEvent":
		rec.Watch = &WatchEvent{}
		if err := api.Unmarshal(v.Schema, body, rec.Watch); err != nil {
			return rec, fmt.Errorf("decoding %s: %w", v.File, err)
		}
	case "strata.log.Synced":
		rec.Synced = &Synced{}
		if err := api.Unmarshal(v.Schema, body, rec.Synced); err != nil {
			return rec, fmt.Errorf("decoding %s: %w", v.File, err)
		}
	}
	return rec, nil
}

// Encode writes value under the newest version of fullName, single-object encoded.
func (c *Catalog) Encode(fullName string, value any) ([]byte, error) {
	v, err := c.Current(fullName)
	if err != nil {
		return nil, err
	}
	body, err := api.Marshal(v.Schema, value)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", v.File, err)
	}
	out := make([]byte, 0, HeaderSize+len(body))
	out = append(out, Marker...)
	out = append(out, v.Fingerprint[:]...)
	return append(out, body...), nil
}
