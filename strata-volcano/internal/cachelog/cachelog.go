// Package cachelog is the Kafka edge of strata-volcano: it follows the cache log (one
// partition, every offset a record) and appends this replica's records to it, over PLAINTEXT,
// TLS or SASL as Strata's other components are configured (security.go).
package cachelog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic is the cache log's name under a deployment's topic prefix.
func Topic(prefix string) string { return prefix + "cache-log" }

// Entry is one message of the log at its offset.
type Entry struct {
	Offset int64
	Value  []byte
}

// ErrGap is returned when an offset does not follow the one before it: a snapshot's version
// is its offset + 1 only while every offset holds a record (docs/log.md).
var ErrGap = errors.New("the cache log must have no gaps")

// Reader follows the cache log from an offset.
type Reader struct {
	client *kgo.Client
	topic  string
	next   int64
}

// NewReader reads topic from offset from on.
func NewReader(conn Conn, topic string, from int64) (*Reader, error) {
	client, err := conn.client(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxPartitionBytes(16<<20),
		kgo.FetchMaxBytes(64<<20),
	)
	if err != nil {
		return nil, fmt.Errorf("creating the cache log reader: %w", err)
	}
	return &Reader{client: client, topic: topic, next: from}, nil
}

// Poll waits for the next messages (none when ctx ends first).
func (r *Reader) Poll(ctx context.Context) ([]Entry, error) {
	fetches := r.client.PollFetches(ctx)
	if ctx.Err() != nil {
		return nil, nil
	}
	var firstErr error
	fetches.EachError(func(topic string, partition int32, err error) {
		if firstErr == nil && !errors.Is(err, context.Canceled) {
			firstErr = fmt.Errorf("fetching %s/%d: %w", topic, partition, err)
		}
	})
	if firstErr != nil {
		return nil, firstErr
	}
	var out []Entry
	var gap error
	fetches.EachRecord(func(rec *kgo.Record) {
		if gap != nil {
			return
		}
		if rec.Offset != r.next {
			gap = fmt.Errorf("%w: the record at offset %d follows offset %d", ErrGap, rec.Offset, r.next-1)
			return
		}
		r.next++
		out = append(out, Entry{Offset: rec.Offset, Value: rec.Value})
	})
	return out, gap
}

// Close ends the reader's connections.
func (r *Reader) Close() { r.client.Close() }

// MaxRecordBytes is the largest record the writer sends: the cache log's max.message.bytes,
// as Strata's Python writer allows (strata/log/topics.py MAX_MESSAGE_BYTES). franz-go's
// default (about 1 MB) would refuse a big gang's BIND_GROUP that every other writer can send.
const MaxRecordBytes = 8 << 20

// Writer appends records to the cache log: idempotent, acks=all, zstd, one partition, in order.
type Writer struct {
	client *kgo.Client
	topic  string
}

// NewWriter writes to topic.
func NewWriter(conn Conn, topic string) (*Writer, error) {
	client, err := conn.client(
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(60*time.Second),
		kgo.ProducerBatchMaxBytes(MaxRecordBytes),
	)
	if err != nil {
		return nil, fmt.Errorf("creating the cache log writer: %w", err)
	}
	return &Writer{client: client, topic: topic}, nil
}

// NotAppended marks, in Append's offsets, a value the log did not take.
const NotAppended int64 = -1

// Append writes values in order and returns their offsets: one per value, NotAppended for each
// the broker did not acknowledge, with the first such error. The others are in the log and will
// get the fold's verdict whatever became of their neighbours.
func (w *Writer) Append(ctx context.Context, values [][]byte) ([]int64, error) {
	records := make([]*kgo.Record, len(values))
	for i, v := range values {
		records[i] = &kgo.Record{Value: v, Partition: 0}
	}
	results := w.client.ProduceSync(ctx, records...)
	offsets := make([]int64, len(records))
	var firstErr error
	for i, r := range results {
		offsets[i] = r.Record.Offset
		if r.Err != nil {
			offsets[i] = NotAppended
			if firstErr == nil {
				firstErr = fmt.Errorf("appending to %s: %w", w.topic, r.Err)
			}
		}
	}
	return offsets, firstErr
}

// AppendAsync appends value after every value appended before (one partition, an idempotent
// producer: the log keeps the order) without waiting, and calls done from franz-go's callback
// once the broker answered.
func (w *Writer) AppendAsync(ctx context.Context, value []byte, done func(offset int64, err error)) {
	w.client.Produce(ctx, &kgo.Record{Value: value, Partition: 0}, func(r *kgo.Record, err error) {
		if err != nil {
			done(NotAppended, fmt.Errorf("appending to %s: %w", w.topic, err))
			return
		}
		done(r.Offset, nil)
	})
}

// Close ends the connections: an AppendAsync still in flight is abandoned (Flush waits for
// every one of its session's).
func (w *Writer) Close() { w.client.Close() }

// EndOffset is the log's end now, after checking that it has exactly one partition.
func EndOffset(ctx context.Context, conn Conn, topic string) (int64, error) {
	client, err := conn.client()
	if err != nil {
		return 0, fmt.Errorf("creating an admin client: %w", err)
	}
	defer client.Close()
	adm := kadm.NewClient(client)
	topics, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describing %s: %w", topic, err)
	}
	detail, ok := topics[topic]
	if !ok || detail.Err != nil {
		return 0, fmt.Errorf("the cache log %s is missing (strata topics create makes it): %v", topic, detail.Err)
	}
	if n := len(detail.Partitions); n != 1 {
		return 0, fmt.Errorf("the cache log %s has %d partitions; it must have exactly one", topic, n)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("listing the end of %s: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		return 0, fmt.Errorf("listing the end of %s: %v", topic, end.Err)
	}
	return end.Offset, nil
}
