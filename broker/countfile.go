package broker

// The count sidecar "<id>.cnt" next to a sealed topic file "<id>.log"
// (format in doc.go): how many blocks the file holds, so that a restart
// does not read every file again to count a topic's messages.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

const (
	countFileMagic = "smsscnt1"
	countFileSize  = 36
	countFileExt   = ".cnt"
)

// errBadCountFile is wrapped by every decoding failure: the sidecar is
// ignored and the file is counted again.
var errBadCountFile = errors.New("bad count file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileTally is the content of a count sidecar.
type fileTally struct {
	Size         int64 // bytes of the .log file it describes
	Blocks       int64 // whole blocks in those bytes
	FirstEventID int64 // eventId of the first block, 0 when there is none
}

func encodeCountFile(c fileTally) []byte {
	b := make([]byte, 0, countFileSize)
	b = append(b, countFileMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Size))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Blocks))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.FirstEventID))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeCountFile parses a sidecar. Anything but the exact format, or
// figures no file can have, is an error: the sidecar is derived data and a
// doubtful one only costs a recount.
func decodeCountFile(b []byte) (fileTally, error) {
	if len(b) != countFileSize {
		return fileTally{}, fmt.Errorf("%w: %d bytes, want %d", errBadCountFile, len(b), countFileSize)
	}
	if string(b[:8]) != countFileMagic {
		return fileTally{}, fmt.Errorf("%w: magic %q", errBadCountFile, b[:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[32:]), crc32.Checksum(b[:32], castagnoli); got != want {
		return fileTally{}, fmt.Errorf("%w: checksum %08x, want %08x", errBadCountFile, got, want)
	}
	c := fileTally{
		Size:         int64(binary.LittleEndian.Uint64(b[8:])),
		Blocks:       int64(binary.LittleEndian.Uint64(b[16:])),
		FirstEventID: int64(binary.LittleEndian.Uint64(b[24:])),
	}
	// A file's bytes are whole blocks of at least one byte each, and only
	// an empty file has none; eventIds start at 1.
	switch {
	case c.Size < 0 || c.Blocks < 0 || c.FirstEventID < 0:
		return fileTally{}, fmt.Errorf("%w: negative figure %+v", errBadCountFile, c)
	case c.Blocks > c.Size:
		return fileTally{}, fmt.Errorf("%w: %d blocks in %d bytes", errBadCountFile, c.Blocks, c.Size)
	case (c.Size == 0) != (c.Blocks == 0) || (c.Blocks == 0) != (c.FirstEventID == 0):
		return fileTally{}, fmt.Errorf("%w: inconsistent %+v", errBadCountFile, c)
	}
	return c, nil
}

func countFileName(id int64) string { return strconv.FormatInt(id, 10) + countFileExt }

// countFileID parses "<id>.cnt"; ok=false for any other name.
func countFileID(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, countFileExt)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 || strconv.FormatInt(id, 10) != s {
		return 0, false
	}
	return id, true
}
