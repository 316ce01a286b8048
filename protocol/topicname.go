package protocol

import "fmt"

// MaxTopicNameLen is the longest accepted topic name in bytes (spec §11).
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
