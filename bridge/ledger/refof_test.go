package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The archive index's fast paths (refOf: parseTimeBytes, recordOfKey,
// crcMatches) accept and refuse exactly what the plain code they stand in
// for does: time.Parse of timeLayout, the key's JSON prefix, crcHex.
func TestIndexFastPathsAgreeWithTheirReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	times := []string{
		"2026-12-06T22:08:33.539736294Z", "0000-01-01T00:00:00.000000000Z", "9999-12-31T23:59:59.999999999Z",
		"2024-02-29T12:00:00.000000000Z", "2025-02-29T12:00:00.000000000Z", "2026-04-31T00:00:00.000000000Z",
		"2026-13-01T00:00:00.000000000Z", "2026-00-01T00:00:00.000000000Z", "2026-01-00T00:00:00.000000000Z",
		"2026-01-01T24:00:00.000000000Z", "2026-01-01T23:60:00.000000000Z", "2026-01-01T23:59:60.000000000Z",
		"2026-01-01T23:59:59.00000000Z", "2026-01-01T23:59:59.0000000000Z", "2026-01-01 23:59:59.000000000Z",
		"2026-01-01T23:59:59.000000000z", "+026-01-01T23:59:59.000000000Z", "2026-01-01T23:59:59.-00000000Z",
		"2026-1a-01T23:59:59.000000000Z", "", "garbage",
		"2026-01-01T12:30:60.000000000Z", "2026-01-01T12:60:00.000000000Z", "2026-01-15T24:00:00.000000000Z",
	}
	for range 20000 {
		b := []byte(times[0])
		switch r.IntN(4) {
		case 0: // a random valid-looking time
			b = []byte(time.Unix(r.Int64N(1<<40)-1<<39, r.Int64N(1e9)).UTC().Format(timeLayout))
		case 1: // one byte changed
			b[r.IntN(len(b))] = byte(r.IntN(128))
		case 3: // every field two digits (or four, nine), in range or not
			b = fmt.Appendf(nil, "%04d-%02d-%02dT%02d:%02d:%02d.%09dZ", r.IntN(10000), r.IntN(100), r.IntN(100), r.IntN(100), r.IntN(100), r.IntN(100), r.IntN(1e9))
		case 2: // digits anywhere
			for i := range b {
				if r.IntN(3) == 0 {
					b[i] = byte('0' + r.IntN(10))
				}
			}
		}
		times = append(times, string(b))
	}
	for _, s := range times {
		want, werr := parseTime(s)
		got, gerr := parseTimeBytes([]byte(s))
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || !got.Equal(want) || got.Location() != want.Location() {
			t.Fatalf("%q: parseTimeBytes %v %v, parseTime %v %v", s, got, gerr, want, werr)
		}
	}

	keys := []string{"d6fbd4662614846e47cae743ab7aa3c4/004bb6bfb3da350cd8474662a10cd9eb", "a/b", "", "a\"b", "a<b", "é/x", "a\\b", "a\u2028b", "a b"}
	for _, key := range keys {
		kj, _ := json.Marshal(key)
		for _, val := range [][]byte{
			[]byte(`{"v":1,"key":` + string(kj) + `,"agent":"x"}`),
			[]byte(`{"v":1,"key":` + string(kj) + `}`),
			[]byte(`{"v":1,"key":"` + key + `","agent":"x"}`),
			[]byte(`{"v":1,"key":"` + key + `x","agent":"x"}`),
			[]byte(`{"v":1,"key":` + string(kj)),
			[]byte(`{"v":2,"key":` + string(kj) + `,`),
		} {
			want := bytes.HasPrefix(val, []byte(`{"v":1,"key":`+string(kj)+`,`))
			if got := recordOfKey(val, key); got != want {
				t.Errorf("recordOfKey(%q, %q) = %v, want %v", val, key, got, want)
			}
		}
	}

	for range 2000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		sum := []byte(crcHex(b))
		if !crcMatches(b, sum) {
			t.Fatalf("crcMatches(%x, its own CRC %s) = false", b, sum)
		}
		sum[r.IntN(8)] ^= byte(1 + r.IntN(255))
		if crcMatches(b, sum) != (string(sum) == crcHex(b)) {
			t.Fatalf("crcMatches(%x, %q) disagrees with crcHex", b, sum)
		}
	}
	if crcMatches([]byte("x"), []byte(fmt.Sprintf("%08X", 0xFFFFFFFF))) {
		t.Error("an upper-case CRC matched")
	}
}
