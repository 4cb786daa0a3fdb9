package cachelog

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The writer's record limit is the cache log's, as Strata's Python side sets it
// (strata/log/topics.py MAX_MESSAGE_BYTES, the topic's max.message.bytes): a BIND_GROUP any
// other writer may append, this one may too.
func TestMaxRecordBytesIsTheCacheLogs(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "strata", "log", "topics.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MAX_MESSAGE_BYTES = ([0-9 *]+)`).FindSubmatch(text)
	if m == nil {
		t.Fatal("no MAX_MESSAGE_BYTES = <product> in strata/log/topics.py")
	}
	python := 1
	for _, factor := range strings.Split(string(m[1]), "*") {
		n, err := strconv.Atoi(strings.TrimSpace(factor))
		if err != nil {
			t.Fatalf("MAX_MESSAGE_BYTES = %s: %v", m[1], err)
		}
		python *= n
	}
	if MaxRecordBytes != python {
		t.Errorf("the Go writer's limit is %d bytes, the cache log's %d", MaxRecordBytes, python)
	}
	if franzDefault := 1_000_012; python <= franzDefault {
		t.Errorf("the cache log's limit %d is no more than franz-go's default %d: the check says nothing", python, franzDefault)
	}
	// and the writer is configured with it (a client connects only when used)
	conn, err := SecurityFromEnv(func(string) string { return "" }).Conn("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(conn, Topic("strata."))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.client.OptValue(kgo.ProducerBatchMaxBytes); got != int32(MaxRecordBytes) {
		t.Errorf("the writer's batch limit is %v, want %d", got, MaxRecordBytes)
	}
}
