package msgcount

// The count sidecar "<id>.cnt" next to a sealed topic file "<id>.log"
// (format in doc.go): how many blocks the file holds, so that a restart
// does not read every file again to count a topic's messages. The codec is
// exported for tests and tools that inspect a data directory.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

const (
	sidecarMagic = "smsscnt1"
	sidecarSize  = 36
)

// SidecarExt ends the name of a count sidecar: "<id>.cnt" next to "<id>.log".
const SidecarExt = ".cnt"

// ErrBadSidecar is wrapped by every decoding failure: the sidecar is
// ignored and the file is counted again.
var ErrBadSidecar = errors.New("bad count file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sidecar is the content of a count sidecar.
type Sidecar struct {
	Size         int64 // bytes of the .log file it describes
	Blocks       int64 // whole blocks in those bytes
	FirstEventID int64 // eventId of the first block, 0 when there is none
}

// EncodeSidecar returns the 36 bytes of c's sidecar.
func EncodeSidecar(c Sidecar) []byte {
	b := make([]byte, 0, sidecarSize)
	b = append(b, sidecarMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Size))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Blocks))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.FirstEventID))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeSidecar parses a sidecar. Anything but the exact format, or
// figures no file can have, is an error: the sidecar is derived data and a
// doubtful one only costs a recount.
func DecodeSidecar(b []byte) (Sidecar, error) {
	if len(b) != sidecarSize {
		return Sidecar{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadSidecar, len(b), sidecarSize)
	}
	if string(b[:8]) != sidecarMagic {
		return Sidecar{}, fmt.Errorf("%w: magic %q", ErrBadSidecar, b[:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[32:]), crc32.Checksum(b[:32], castagnoli); got != want {
		return Sidecar{}, fmt.Errorf("%w: checksum %08x, want %08x", ErrBadSidecar, got, want)
	}
	c := Sidecar{
		Size:         int64(binary.LittleEndian.Uint64(b[8:])),
		Blocks:       int64(binary.LittleEndian.Uint64(b[16:])),
		FirstEventID: int64(binary.LittleEndian.Uint64(b[24:])),
	}
	// A file's bytes are whole blocks of at least one byte each, and only
	// an empty file has none; eventIds start at 1.
	switch {
	case c.Size < 0 || c.Blocks < 0 || c.FirstEventID < 0:
		return Sidecar{}, fmt.Errorf("%w: negative figure %+v", ErrBadSidecar, c)
	case c.Blocks > c.Size:
		return Sidecar{}, fmt.Errorf("%w: %d blocks in %d bytes", ErrBadSidecar, c.Blocks, c.Size)
	case (c.Size == 0) != (c.Blocks == 0) || (c.Blocks == 0) != (c.FirstEventID == 0):
		return Sidecar{}, fmt.Errorf("%w: inconsistent %+v", ErrBadSidecar, c)
	}
	return c, nil
}

// SidecarName is the name of the sidecar of log file id ("<id>.cnt").
func SidecarName(id int64) string { return strconv.FormatInt(id, 10) + SidecarExt }

// sidecarID parses "<id>.cnt"; ok=false for any other name.
func sidecarID(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, SidecarExt)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 || strconv.FormatInt(id, 10) != s {
		return 0, false
	}
	return id, true
}
