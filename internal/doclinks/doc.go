// Package doclinks holds only tests: they check that every relative link in
// the repository's Markdown (the README, CONTRIBUTING.md, BENCHMARKS.md,
// docs/ and the packages' own README files) names a file that exists and,
// with a #fragment, a heading of that file, by GitHub's anchor rules.
package doclinks
