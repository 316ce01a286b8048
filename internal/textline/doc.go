/*
Package textline holds the command-line rules shared by the binlog (§5.3)
and topic file (§5.6) block formats, so that the two codecs cannot drift
apart.

A command line is a fixed number of '\t'-separated fields ending in one
'\n'. Numeric fields are canonical non-negative decimals: digits only, no
sign or padding, no leading zero except "0" itself, at most math.MaxInt64
(so at most MaxDigits digits). Canonical form is what makes decode followed
by encode byte-identical. A text field (the binlog topic) is any bytes
without '\t' or '\n'.

The package has two halves with one contract:

  - Split and ParseField are the careful path. They work on complete and
    torn lines alike and name the exact reason when the present bytes prove
    corruption. Their *Error values carry only the reason; each codec wraps
    it into its own CorruptError, so the texts callers see are unchanged.
  - Scan is the fast path for a complete line. It accepts exactly the lines
    that Split followed by ParseField on every numeric field accepts, and
    yields the same values, but it reports no reason: on anything unusual
    a caller falls back to the careful path to learn why.
*/
package textline
