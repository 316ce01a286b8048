// Package codec is the contract between the block codecs (binlog,
// topicblock) and the log layer that keeps their blocks in files
// (segment): the one error that says "a prefix of a block, read more".
//
// It is a package of its own so that the codecs stay free of the file
// layer and the file layer free of any block format, while every caller
// (segment's readers, start-up recovery, tools that scan files) branches
// on the same sentinel with errors.Is, whichever codec produced it.
package codec

import "errors"

// ErrIncomplete is what a decoder's error is (errors.Is) when its buffer
// holds a strict prefix of a block that could still be valid: more bytes
// are needed. Inside a file's committed part, or at the end of a file, it
// means a torn write.
var ErrIncomplete = errors.New("incomplete block")

// Incomplete returns an error that is ErrIncomplete (errors.Is) and reads
// "incomplete <kind> block". A codec builds it once: incomplete blocks are
// routine for a reader at the end of its buffer, so the error must cost no
// allocation per call.
func Incomplete(kind string) error { return &incompleteError{"incomplete " + kind + " block"} }

type incompleteError struct{ text string }

func (e *incompleteError) Error() string { return e.text }

// Is makes every such error ErrIncomplete.
func (e *incompleteError) Is(target error) bool { return target == ErrIncomplete }
