package doclinks

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above %s: %v", root, err)
	}
	return root
}

// markdownFiles lists the Markdown files whose links are checked: every
// *.md at the root, everything under docs/, and every README.md of the
// tree (hidden directories and testdata left out).
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "__pycache__") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		top := !strings.ContainsRune(rel, filepath.Separator)
		inDocs := strings.HasPrefix(rel, "docs"+string(filepath.Separator))
		if top || inDocs || d.Name() == "README.md" {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// link is one link found in a file.
type link struct {
	line   int
	target string
}

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// ends at the first blank or ')'. An optional "title" is skipped.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef matches a reference definition: [label]: target
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	// codeSpan matches inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	heading  = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlID   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// scan returns the links of a Markdown file and the anchors its headings
// (and <a name/id> tags) define. Links are looked for paragraph by
// paragraph, so a link whose text wraps onto the next line is found too;
// fenced code blocks and code spans hold no links.
func scan(path string) (links []link, anchors map[string]bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	anchors = map[string]bool{}
	seen := map[string]int{}
	var para []string // the current paragraph's lines
	paraStart := 0    // the line number of its first line
	flush := func() {
		if len(para) == 0 {
			return
		}
		text := strings.Join(para, "\n")
		// Blank out code spans, keeping offsets and line breaks.
		text = codeSpan.ReplaceAllStringFunc(text, func(c string) string {
			return strings.Map(func(r rune) rune {
				if r == '\n' {
					return r
				}
				return ' '
			}, c)
		})
		for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
			line := paraStart + strings.Count(text[:m[0]], "\n")
			links = append(links, link{line, text[m[2]:m[3]]})
		}
		for i, l := range strings.Split(text, "\n") {
			if m := refDef.FindStringSubmatch(l); m != nil {
				links = append(links, link{paraStart + i, m[1]})
			}
		}
		para = para[:0]
	}
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		trimmed := strings.TrimLeft(l, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			flush()
			fence = trimmed[:3]
			continue
		}
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if m := heading.FindStringSubmatch(l); m != nil {
			flush()
			s := Slug(m[2])
			if k := seen[s]; k > 0 {
				anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			anchors[m[1]] = true
		}
		if len(para) == 0 {
			paraStart = n
		}
		para = append(para, l)
	}
	flush()
	return links, anchors, sc.Err()
}

var (
	mdLinkInHeading = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag         = regexp.MustCompile(`<[^>]+>`)
)

// Slug is the anchor GitHub gives a heading: the heading's text (link
// targets and HTML tags dropped) in lower case, every character but
// letters, digits, marks, '_', '-' and ' ' removed, each space turned into
// '-'. A repeated slug gets -1, -2, … in order (done by the caller).
func Slug(h string) string {
	h = mdLinkInHeading.ReplaceAllString(h, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r), unicode.IsNumber(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// external reports whether a link target leaves the repository (a URL with
// a scheme, or an absolute path a web server would resolve).
func external(target string) bool {
	if strings.HasPrefix(target, "//") || strings.HasPrefix(target, "/") {
		return true
	}
	if i := strings.Index(target, ":"); i > 0 {
		scheme := target[:i]
		if !strings.ContainsAny(scheme, "/#.") {
			return true // http:, https:, mailto:, …
		}
	}
	return false
}

// TestRelativeLinksResolve checks every relative link (and image) of the
// Markdown files: the file or directory it names exists, and its #anchor,
// if any, is a heading of the Markdown file it points to (or of the same
// file for a bare #anchor).
func TestRelativeLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files under %s: %v", len(files), root, files)
	}
	anchorsOf := map[string]map[string]bool{}
	linksOf := map[string][]link{}
	anchorsFor := func(rel string) (map[string]bool, error) {
		if a, ok := anchorsOf[rel]; ok {
			return a, nil
		}
		l, a, err := scan(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		anchorsOf[rel], linksOf[rel] = a, l
		return a, nil
	}
	checked := 0
	for _, rel := range files {
		if _, err := anchorsFor(rel); err != nil {
			t.Fatal(err)
		}
		for _, l := range linksOf[rel] {
			if l.target == "" || external(l.target) {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(l.target, "#")
			dest := rel
			if path != "" {
				dest = filepath.Clean(filepath.Join(filepath.Dir(rel), filepath.FromSlash(path)))
				st, err := os.Stat(filepath.Join(root, dest))
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, filepath.ToSlash(dest))
					continue
				}
				if st.IsDir() {
					if frag != "" {
						t.Errorf("%s:%d: link %q: an anchor into a directory", rel, l.line, l.target)
					}
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			anchors, err := anchorsFor(dest)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
				continue
			}
			if !anchors[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", rel, l.line, l.target, filepath.ToSlash(dest), frag)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d relative links in %v", checked, files)
	}
	t.Logf("checked %d relative links in %d files", checked, len(files))
}

// TestSlug holds the slugger to anchors GitHub generates for headings of
// this repository's documents.
func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"1. Wire protocol — request side":                                              "1-wire-protocol--request-side",
		"5.1 Directory layout under `store.path` (default `data`, relative to CWD)":    "51-directory-layout-under-storepath-default-data-relative-to-cwd",
		"10. Weaknesses of the original, and what this server does":                    "10-weaknesses-of-the-original-and-what-this-server-does",
		"12.5 Extension: stored consumer positions (sub from -1, commands 37, 38, 39)": "125-extension-stored-consumer-positions-sub-from--1-commands-37-38-39",
		"The epoll front-end (`server.epoll`, Linux)":                                  "the-epoll-front-end-serverepoll-linux",
		"Threads running Go code (`server.maxProcs`)":                                  "threads-running-go-code-servermaxprocs",
		"snake_case and [a link](x.md) and <b>html</b>":                                "snake_case-and-a-link-and-html",
		"Café §4 → ×": "café-4--",
	} {
		if got := Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestDuplicateHeadings checks the -1, -2 suffixes of repeated headings and
// that links inside code are not taken for links.
func TestDuplicateHeadings(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.md")
	body := "# Limits\n\n## Limits\n\n### Limits\n\n```\n# Limits\n[no](missing.md)\n```\n\n`[no](missing.md)` [yes](x.md#limits-2)\nand [a wrapped\nlink](x.md#limits-1)\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	links, anchors, err := scan(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"limits", "limits-1", "limits-2"} {
		if !anchors[a] {
			t.Errorf("anchor %q missing: %v", a, anchors)
		}
	}
	if anchors["limits-3"] {
		t.Errorf("a heading inside a code block counted: %v", anchors)
	}
	want := []link{{12, "x.md#limits-2"}, {13, "x.md#limits-1"}}
	if fmt.Sprint(links) != fmt.Sprint(want) {
		t.Errorf("links = %v, want %v", links, want)
	}
}

// TestReadmeStaysShort holds the README to what it is for: what smss is,
// the quick start and test commands, and a map of docs/ (the rest lives
// in docs/ by topic).
func TestReadmeStaysShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 200 {
		t.Errorf("README.md has %d lines; keep it under 200 and move detail into docs/", n)
	}
	for _, want := range []string{"go run ./cmd/smss -role master", "bash .ci/run", "](docs/getting-started.md)", "](CONTRIBUTING.md)"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}
