package bridge

import (
	"fmt"
	"strings"
)

// Filter selects topics by include and exclude patterns. A pattern is an
// exact topic name, "*" (every topic), or "prefix*" such as "order.*"
// (every topic that starts with "order."). A topic is mirrored when it
// matches an include pattern and no exclude pattern.
type Filter struct {
	include, exclude []pattern
}

type pattern struct {
	s      string
	prefix bool
}

// NewFilter checks and compiles the patterns. No include pattern means
// every topic.
func NewFilter(include, exclude []string) (*Filter, error) {
	f := &Filter{}
	var err error
	if len(include) == 0 {
		include = []string{"*"}
	}
	if f.include, err = compile("topics", include); err != nil {
		return nil, err
	}
	if f.exclude, err = compile("exclude", exclude); err != nil {
		return nil, err
	}
	return f, nil
}

func compile(key string, ps []string) ([]pattern, error) {
	var out []pattern
	for _, p := range ps {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if i := strings.IndexByte(p, '*'); i >= 0 && i != len(p)-1 {
			return nil, fmt.Errorf("%s: pattern %q: '*' may only end a pattern", key, p)
		}
		if strings.HasSuffix(p, "*") {
			out = append(out, pattern{s: strings.TrimSuffix(p, "*"), prefix: true})
		} else {
			out = append(out, pattern{s: p})
		}
	}
	return out, nil
}

func (p pattern) match(topic string) bool {
	if p.prefix {
		return strings.HasPrefix(topic, p.s)
	}
	return topic == p.s
}

// Match reports whether topic is mirrored.
func (f *Filter) Match(topic string) bool {
	in := false
	for _, p := range f.include {
		if p.match(topic) {
			in = true
			break
		}
	}
	if !in {
		return false
	}
	for _, p := range f.exclude {
		if p.match(topic) {
			return false
		}
	}
	return true
}
