package topicblock

import (
	"path"
	"path/filepath"
	"strconv"
)

// The salts of §5.5; they must never change or every topic is orphaned.
const (
	salt1 = "talk is cheap, show me your code"
	salt2 = "The world is beautiful"
)

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnv1a is FNV-1a 64 of name followed by salt, computed without building the
// concatenation.
func fnv1a(name []byte, salt string) uint64 {
	h := uint64(fnvOffset64)
	for _, c := range name {
		h = (h ^ uint64(c)) * fnvPrime64
	}
	for i := 0; i < len(salt); i++ {
		h = (h ^ uint64(salt[i])) * fnvPrime64
	}
	return h
}

// Buckets returns the two directory levels of a topic (§5.5). folderCount
// must be at least 1; the configuration layer rejects anything smaller.
func Buckets(name []byte, folderCount int) (p1, p2 int) {
	if folderCount < 1 {
		panic("topicblock: folderCount must be at least 1, got " + strconv.Itoa(folderCount))
	}
	m := uint64(folderCount)
	return int(fnv1a(name, salt1) % m), int(fnv1a(name, salt2) % m)
}

// Dir returns the directory of a topic under topicRoot (<store.path>/topic).
// The name must have passed protocol.ValidateTopicName: Join would resolve
// ".." and an empty name would yield the bucket directory itself.
func Dir(topicRoot string, name []byte, folderCount int) string {
	p1, p2 := Buckets(name, folderCount)
	return filepath.Join(topicRoot, strconv.Itoa(p1), strconv.Itoa(p2), string(name))
}

// RelRoot returns "/<p1>/<p2>/<name>", the topicRoot field of the topic info
// JSON (§2.2), joined and cleaned as the original's path join does: a name
// "" or "." (whose directory is the bucket itself) gives "/<p1>/<p2>".
func RelRoot(name []byte, folderCount int) string {
	p1, p2 := Buckets(name, folderCount)
	return path.Join("/", strconv.Itoa(p1), strconv.Itoa(p2), string(name))
}
