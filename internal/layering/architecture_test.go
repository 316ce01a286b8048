package layering

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The import graph of docs/architecture.md is written three times: as a
// drawing (an overview), as a table (every edge) and as prose. The drawing
// drifted once unnoticed (a whole package, queue, was missing), so the
// tests below hold the table and the drawing to `go list`; the prose is
// left to review.

// archPath is the document, relative to the module root (it is also how
// the messages name it, with a line number, so an editor can jump there).
const archPath = "docs/architecture.md"

// The headers of the two tables the tests read, as written in the document.
var (
	importTableHeader  = []string{"package", "imports (this module)"}
	leftOutTableHeader = []string{"left out", "why"}
)

// notDrawnMark opens the sentence, above the drawing, that names in
// backquotes the packages the drawing leaves out on purpose.
const notDrawnMark = "**Not drawn:**"

// archDoc is what the tests read out of docs/architecture.md. Lines are
// 1-based, as an editor shows them.
type archDoc struct {
	drawing     []string // the first fenced code block: the drawing
	drawingLine int      // line of the drawing's first line

	imports    map[string][]string // package → packages its row lists
	importLine map[string]int      // package → line of its row

	leftOut     []string       // package paths, or "path/..." for a tree
	leftOutLine map[string]int // entry → line of its row

	notDrawn map[string]bool // the backquoted names of the "Not drawn" sentence
}

// leftOutEntry returns the entry of the left-out table that covers pkg,
// or "" if none does. "x/..." covers x and every package below it, as in
// a go package pattern.
func (d *archDoc) leftOutEntry(pkg string) string {
	for _, e := range d.leftOut {
		if tree, ok := strings.CutSuffix(e, "/..."); ok {
			if pkg == tree || strings.HasPrefix(pkg, tree+"/") {
				return e
			}
		} else if pkg == e {
			return e
		}
	}
	return ""
}

// readArchitecture reads and parses docs/architecture.md; a document the
// tests cannot read fails the test (the tables' shape is part of what the
// document promises).
func readArchitecture(t *testing.T) *archDoc {
	t.Helper()
	// The module root, from the go tool rather than a relative path, so the
	// test does not depend on where this package sits in the tree.
	root := goList(t, "-m", "-f", "{{.Dir}}", strings.TrimSuffix(module, "/"))[0]
	data, err := os.ReadFile(filepath.Join(root, archPath))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	d := &archDoc{
		imports:     map[string][]string{},
		importLine:  map[string]int{},
		leftOutLine: map[string]int{},
		notDrawn:    map[string]bool{},
	}

	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "```") })
	if start < 0 {
		t.Fatalf("%s has no fenced code block: the drawing of the imports is gone", archPath)
	}
	end := slices.IndexFunc(lines[start+1:], func(l string) bool { return strings.HasPrefix(l, "```") })
	if end < 0 {
		t.Fatalf("%s:%d: the drawing's code block is not closed", archPath, start+1)
	}
	d.drawing = lines[start+1 : start+1+end]
	d.drawingLine = start + 2

	for _, row := range tableRows(t, lines, importTableHeader) {
		pkgs := cellNames(t, row.line, row.cells[0])
		if len(pkgs) != 1 {
			t.Fatalf("%s:%d: the first cell of the import table must name one package, not %q", archPath, row.line, row.cells[0])
		}
		pkg := pkgs[0]
		if prev, dup := d.importLine[pkg]; dup {
			t.Fatalf("%s:%d: a second row for %s (the first is on line %d)", archPath, row.line, pkg, prev)
		}
		d.imports[pkg] = cellNames(t, row.line, row.cells[1])
		d.importLine[pkg] = row.line
	}
	for _, row := range tableRows(t, lines, leftOutTableHeader) {
		for _, e := range cellNames(t, row.line, row.cells[0]) {
			if prev, dup := d.leftOutLine[e]; dup {
				t.Fatalf("%s:%d: %s is left out twice (also on line %d)", archPath, row.line, e, prev)
			}
			d.leftOut = append(d.leftOut, e)
			d.leftOutLine[e] = row.line
		}
	}

	// The "Not drawn" sentence runs from its mark to the end of its
	// paragraph; only backquoted names count, so that its explanations
	// may mention drawn packages in plain words.
	var para strings.Builder
	for i, l := range lines {
		if _, after, ok := strings.Cut(l, notDrawnMark); ok {
			para.WriteString(after)
			for _, next := range lines[i+1:] {
				if strings.TrimSpace(next) == "" {
					break
				}
				para.WriteString(" " + next)
			}
			break
		}
	}
	if para.Len() == 0 {
		t.Fatalf("%s has no %q sentence naming the packages the drawing leaves out", archPath, notDrawnMark)
	}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(para.String(), -1) {
		d.notDrawn[m[1]] = true
	}
	return d
}

type tableRow struct {
	line  int
	cells []string
}

// tableRows returns the rows of the Markdown table whose header cells are
// header, each with as many cells as the header.
func tableRows(t *testing.T, lines []string, header []string) []tableRow {
	t.Helper()
	for i, l := range lines {
		if !slices.Equal(tableCells(l), header) {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|") || strings.Trim(lines[i+1], "|-: ") != "" {
			t.Fatalf("%s:%d: the table is missing its |---| line", archPath, i+2)
		}
		var rows []tableRow
		for j := i + 2; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			cells := tableCells(lines[j])
			if len(cells) != len(header) {
				t.Fatalf("%s:%d: %d cells, want %d (%s)", archPath, j+1, len(cells), len(header), strings.Join(header, " | "))
			}
			rows = append(rows, tableRow{j + 1, cells})
		}
		if len(rows) == 0 {
			t.Fatalf("%s:%d: the table | %s | has no rows", archPath, i+1, strings.Join(header, " | "))
		}
		return rows
	}
	t.Fatalf("%s has no table with the header | %s |", archPath, strings.Join(header, " | "))
	return nil
}

// tableCells splits a Markdown table line into its trimmed cells (nil if
// the line is not one).
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") || len(line) < 2 {
		return nil
	}
	cells := strings.Split(line[1:len(line)-1], "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// namePattern is what a package path of the tables looks like; anything
// else in a name cell (a sentence, a link) is a mistake the test should
// report rather than compare.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*(/[a-z0-9_.-]+)*(/\.\.\.)?$`)

// cellNames reads a cell listing package paths: comma-separated, each
// optionally in backquotes; "—" for none.
func cellNames(t *testing.T, line int, cell string) []string {
	t.Helper()
	if cell == "—" {
		return nil
	}
	var names []string
	for _, f := range strings.Split(cell, ",") {
		name := strings.Trim(strings.TrimSpace(f), "`")
		if !namePattern.MatchString(name) {
			t.Fatalf("%s:%d: cannot read %q as a package path (a cell lists paths separated by commas, or — for none)", archPath, line, name)
		}
		names = append(names, name)
	}
	return names
}

// moduleGraph returns every package of the module (its path below the
// module) with the packages of the module it imports directly, test files
// left out, as the tool that builds it sees them.
func moduleGraph(t *testing.T) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...") {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok {
			continue
		}
		imports := []string{}
		for _, imp := range f[1:] {
			if rel, ours := strings.CutPrefix(imp, module); ours {
				imports = append(imports, rel)
			}
		}
		graph[pkg] = imports
	}
	return graph
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestArchitectureTableIsTheImportGraph: the import table of
// docs/architecture.md holds exactly the graph go list reports. Every
// package of the module has a row or is covered by the left-out table, not
// both; every row lists exactly the module packages its package imports;
// no row or left-out entry names something that is not there. A package
// of the table may not import a left-out one: what is left out is test and
// tool code, and a program that linked it would make the table incomplete.
func TestArchitectureTableIsTheImportGraph(t *testing.T) {
	doc := readArchitecture(t)
	graph := moduleGraph(t)
	update := "; update " + archPath

	covers := map[string]bool{} // left-out entries that cover some package
	for _, pkg := range sortedKeys(graph) {
		entry := doc.leftOutEntry(pkg)
		listed, inTable := doc.imports[pkg]
		if entry != "" {
			covers[entry] = true
			if inTable {
				t.Errorf("%s:%d: %s has a row, but the left-out table (line %d, %s) also leaves it out; keep one of the two%s",
					archPath, doc.importLine[pkg], pkg, doc.leftOutLine[entry], entry, update)
			}
			continue
		}
		if !inTable {
			row := strings.Join(graph[pkg], ", ")
			if row == "" {
				row = "—"
			}
			t.Errorf("%s: package %s has no row in the import table: add | %s | %s | (or, if only tests and tools use it, a row of the left-out table)%s",
				archPath, pkg, pkg, row, update)
			continue
		}
		for _, imp := range graph[pkg] {
			if !slices.Contains(listed, imp) {
				t.Errorf("%s:%d: %s imports %s, but its row does not list it%s", archPath, doc.importLine[pkg], pkg, imp, update)
			}
			if e := doc.leftOutEntry(imp); e != "" {
				t.Errorf("%s:%d: %s imports %s, which the left-out table leaves out (%s) as test or tool code; give it a row%s",
					archPath, doc.importLine[pkg], pkg, imp, e, update)
			}
		}
		for _, imp := range listed {
			if !slices.Contains(graph[pkg], imp) {
				t.Errorf("%s:%d: the row of %s lists %s, but %s does not import %s%s", archPath, doc.importLine[pkg], pkg, imp, pkg, imp, update)
			}
		}
	}
	for _, pkg := range sortedKeys(doc.imports) {
		if _, ok := graph[pkg]; !ok {
			t.Errorf("%s:%d: the import table has a row for %s, which is not a package of the module%s", archPath, doc.importLine[pkg], pkg, update)
		}
	}
	for _, e := range doc.leftOut {
		if !covers[e] {
			t.Errorf("%s:%d: the left-out table names %s, which is no package of the module%s", archPath, doc.leftOutLine[e], e, update)
		}
	}
}

// TestArchitectureDrawingArrowsAreImports: every arrow of the drawing is a
// direct import. The drawing is read in two dimensions (see
// drawingArrows); a connector it cannot read fails the test rather than
// being skipped, so no arrow goes unchecked.
func TestArchitectureDrawingArrowsAreImports(t *testing.T) {
	doc := readArchitecture(t)
	graph := moduleGraph(t)
	update := "; update " + archPath

	arrows, problems := drawingArrows(doc.drawing)
	for _, p := range problems {
		t.Errorf("%s:%d: the drawing: %s (see drawingArrows for the forms it may use)", archPath, doc.drawingLine+p.row, p.msg)
	}
	if len(arrows) == 0 {
		t.Fatalf("%s:%d: no arrow read from the drawing", archPath, doc.drawingLine)
	}
	for _, a := range arrows {
		line := doc.drawingLine + a.row
		known := true
		for _, name := range []string{a.from, a.to} {
			if _, ok := graph[name]; !ok {
				t.Errorf("%s:%d: the drawing names %q, which is not a package of the module%s", archPath, line, name, update)
				known = false
			}
		}
		if known && !slices.Contains(graph[a.from], a.to) {
			t.Errorf("%s:%d: the drawing has %s ─► %s, but %s does not import %s%s", archPath, line, a.from, a.to, a.from, a.to, update)
		}
	}
}

// TestArchitectureDrawsOrNamesEveryPackage: the drawing may leave packages
// out, but not silently: every package of the import table is an end of
// some arrow or is named in the "Not drawn" sentence, and not both.
func TestArchitectureDrawsOrNamesEveryPackage(t *testing.T) {
	doc := readArchitecture(t)
	arrows, problems := drawingArrows(doc.drawing)
	if len(problems) > 0 {
		t.Fatalf("%s: the drawing cannot be read (TestArchitectureDrawingArrowsAreImports says where)", archPath)
	}
	drawn := map[string]bool{}
	for _, a := range arrows {
		drawn[a.from] = true
		drawn[a.to] = true
	}
	for _, pkg := range sortedKeys(doc.imports) {
		switch {
		case drawn[pkg] && doc.notDrawn[pkg]:
			t.Errorf("%s: %s is drawn, but the %q sentence names it; update %s", archPath, pkg, notDrawnMark, archPath)
		case !drawn[pkg] && !doc.notDrawn[pkg]:
			t.Errorf("%s:%d: %s is neither drawn nor named in the %q sentence above the drawing; update %s",
				archPath, doc.importLine[pkg], pkg, notDrawnMark, archPath)
		}
	}
}

// arrow is one import the drawing shows; row is its line in the drawing.
type arrow struct {
	row      int
	from, to string
}

type drawingProblem struct {
	row int
	msg string
}

// connectorRunes are what the drawing's connectors are made of. The
// vertical line │ is not among them: it only joins a ┬ to the arms and
// joins below it.
const connectorRunes = "─┬┤┘├└►"

// drawingArrows reads the arrows of the drawing. A connector is a run of
// connectorRunes on one line; it reads in these forms, and any other
// is reported as a problem, not skipped:
//
//	a ─► b            a imports b; "a, b ─► c, d": each of a, b imports each of c, d
//	a ─┬─► b          a imports b, and each arm hanging below the ┬ (├─► or └─►,
//	   ├─► c          on the same column, joined by │) names more packages a imports
//	   └─► d
//	e ─────┤          a join: e imports what the arrow through the ┬ above points
//	f ─────┘          to (┤ while more joins follow below, ┘ for the last)
//
// A name is the word one space before or after the connector; a list is
// names separated by ", ". Text after the last name of a line, such as a
// note in parentheses, is not read. Columns count runes, so the drawing
// must use no wide characters.
func drawingArrows(lines []string) ([]arrow, []drawingProblem) {
	g := make([][]rune, len(lines))
	for i, l := range lines {
		g[i] = []rune(l)
	}
	at := func(r, c int) rune {
		if r < 0 || r >= len(g) || c < 0 || c >= len(g[r]) {
			return ' '
		}
		return g[r][c]
	}
	isConn := func(ch rune) bool { return strings.ContainsRune(connectorRunes, ch) }
	// runAt returns the bounds of the connector that holds column c.
	runAt := func(r, c int) (start, end int) {
		start, end = c, c+1
		for isConn(at(r, start-1)) {
			start--
		}
		for isConn(at(r, end)) {
			end++
		}
		return start, end
	}
	// branchPoint returns the row of the ┬ that the vertical line through
	// column c, above row r, hangs from.
	branchPoint := func(r, c int) (int, bool) {
		for rr := r - 1; rr >= 0; rr-- {
			switch at(rr, c) {
			case '│', '├', '┤':
			case '┬':
				return rr, true
			default:
				return 0, false
			}
		}
		return 0, false
	}

	var arrows []arrow
	var problems []drawingProblem
	for r := range g {
		for c := 0; c < len(g[r]); {
			if !isConn(g[r][c]) {
				c++
				continue
			}
			start, end := runAt(r, c)
			c = end
			run := g[r][start:end]
			problem := func(format string, args ...any) {
				msg := fmt.Sprintf("column %d, %s: ", start+1, string(run)) + fmt.Sprintf(format, args...)
				problems = append(problems, drawingProblem{r, msg})
			}
			first, last := run[0], run[len(run)-1]
			if len(run) < 2 || !strings.ContainsRune("─├└", first) || !strings.ContainsRune("►┤┘", last) ||
				strings.Trim(string(run[1:len(run)-1]), "─┬") != "" {
				problem("not a connector this test reads")
				continue
			}

			var from []string
			if first == '─' {
				from = namesBefore(g[r], start)
			} else {
				r0, ok := branchPoint(r, start)
				if !ok {
					problem("an arm that hangs from no ┬ above it")
					continue
				}
				s0, _ := runAt(r0, start)
				from = namesBefore(g[r0], s0)
			}
			if len(from) == 0 {
				problem("no package name one space before it (or before its ┬)")
				continue
			}

			var to []string
			if last == '►' {
				to = namesAfter(g[r], end)
			} else {
				r0, ok := branchPoint(r, end-1)
				if !ok {
					problem("a join that meets no ┬ above it")
					continue
				}
				_, e0 := runAt(r0, end-1)
				if at(r0, e0-1) != '►' {
					problem("a join whose ┬ leads to no ►")
					continue
				}
				to = namesAfter(g[r0], e0)
			}
			if len(to) == 0 {
				problem("no package name one space after its ►")
				continue
			}
			for _, f := range from {
				for _, dst := range to {
					arrows = append(arrows, arrow{r, f, dst})
				}
			}
		}
	}
	return arrows, problems
}

// namesBefore reads the name, or list "a, b", that ends one space before
// column start of line.
func namesBefore(line []rune, start int) []string {
	end := start - 1
	if end < 1 || line[end] != ' ' || line[end-1] == ' ' {
		return nil
	}
	var names []string
	for {
		b := end
		for b > 0 && line[b-1] != ' ' {
			b--
		}
		word := string(line[b:end])
		if len(names) == 0 {
			if strings.HasSuffix(word, ",") {
				return nil
			}
			names = append(names, word)
		} else {
			name, more := strings.CutSuffix(word, ",")
			if !more {
				break
			}
			names = append(names, name)
		}
		if b < 2 || line[b-1] != ' ' || line[b-2] == ' ' {
			break
		}
		end = b - 1
	}
	return names
}

// namesAfter reads the name, or list "a, b", that starts one space after
// column end of line.
func namesAfter(line []rune, end int) []string {
	if end >= len(line) || line[end] != ' ' {
		return nil
	}
	var names []string
	for i := end + 1; i < len(line); {
		j := i
		for j < len(line) && line[j] != ' ' {
			j++
		}
		if j == i {
			break
		}
		name, more := strings.CutSuffix(string(line[i:j]), ",")
		names = append(names, name)
		if !more {
			break
		}
		i = j + 1
	}
	return names
}
