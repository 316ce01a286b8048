package protocol

import "fmt"

// MaxTopicNameLen is the longest accepted topic name in bytes (docs/protocol.md §11).
const MaxTopicNameLen = 128

// ValidateTopicName applies the §11 rule on every command that names a
// topic: 1–128 bytes, not "." or "..", and no '/', '\\', space, control
// byte (< 0x20) or DEL. The rule guarantees a topic directory can never
// escape store.path and never coincides with a hashing bucket directory.
func ValidateTopicName(name []byte) error {
	switch {
	case len(name) == 0:
		return NewBizError("invalid topic name: must not be empty")
	case len(name) > MaxTopicNameLen:
		return NewBizError(fmt.Sprintf("invalid topic name: longer than %d bytes", MaxTopicNameLen))
	case string(name) == "." || string(name) == "..":
		return NewBizError("invalid topic name: must not be . or ..")
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f || c == ' ' || c == '/' || c == '\\' {
			return NewBizError(fmt.Sprintf("invalid topic name: byte 0x%02x not allowed (no space, '/', '\\\\' or control bytes)", c))
		}
	}
	return nil
}

// ValidateExistingTopicName is the rule for commands that reach an existing
// topic (info, sub, delete): the original created topics with names that
// ValidateTopicName refuses (empty, ".", backslash, space, control bytes,
// longer than 128 bytes), and their data must stay readable and removable.
// Only names whose directory, as the original computed it, could lie
// outside the topic's hashing bucket are refused: "..", or any '/'. Callers
// still answer ValidateTopicName's error for such a name when no topic of
// that name exists.
func ValidateExistingTopicName(name []byte) error {
	if string(name) == ".." {
		return NewBizError("invalid topic name: must not be . or ..")
	}
	for _, c := range name {
		if c == '/' {
			return NewBizError("invalid topic name: byte 0x2f not allowed (no space, '/', '\\\\' or control bytes)")
		}
	}
	return nil
}
