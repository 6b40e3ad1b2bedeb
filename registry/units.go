package registry

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("800ms").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("must be a duration string like \"800ms\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("must be a duration like \"800ms\" or \"2s\" (got %q)", s)
	}
	*d = Duration(v)
	return nil
}

// Size is a byte count written as "1MiB", "512KiB", "64KB" or "65536".
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// ParseSize parses a byte count with an optional unit (B, KB, KiB, MB, MiB,
// GB, GiB). Negative numbers and overflow are errors.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("must be a size like \"1MiB\", \"256KiB\" or \"65536\" (got %q)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

// String writes the size in the largest binary unit that divides it.
func (s Size) String() string {
	switch {
	case s != 0 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s)>>30, 10) + "GiB"
	case s != 0 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s)>>20, 10) + "MiB"
	case s != 0 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s)>>10, 10) + "KiB"
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalJSON writes the size as a string.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a size string (or a bare JSON number of bytes).
func (s *Size) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("must be a size like \"1MiB\"")
		}
		str = strconv.FormatInt(n, 10)
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = v
	return nil
}
