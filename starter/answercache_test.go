package starter

import (
	"bytes"
	"testing"

	"github.com/idemflow/idemflow/idem"
)

// The answer cache is bounded by entries and by each answer's size: a
// large answer (an HTTP tool's downstream may send 1 MiB) is read from
// PostgreSQL, never kept, so the cache cannot grow past about
// DefaultAnswerCacheSize * MaxCachedAnswer.
func TestTheAnswerCacheKeepsNoLargeAnswerAndNoMoreThanItsSize(t *testing.T) {
	c := NewAnswerCache(3)
	rec := func(key string, n int) idem.Record {
		return idem.Record{TenantID: "t", Key: key, Status: idem.StatusSuccess,
			Response: idem.Outcome{Status: 201, Body: idem.Answer(bytes.Repeat([]byte("x"), n))}}
	}
	c.keep(rec("small", MaxCachedAnswer))
	c.keep(rec("large", MaxCachedAnswer+1))
	if _, ok := c.get("t", "small"); !ok {
		t.Fatal("an answer within the bound is not kept")
	}
	if _, ok := c.get("t", "large"); ok {
		t.Fatal("an answer over MaxCachedAnswer is kept")
	}
	for _, k := range []string{"a", "b", "c"} {
		c.keep(rec(k, 10))
	}
	if c.lru.Len() != 3 {
		t.Fatalf("%d answers kept, want at most 3", c.lru.Len())
	}
}
