//go:build !linux

package rawsys

import "net"

// Not reached: NewConn leaves rc nil where Enabled is false.
func (c Conn) readRaw(p []byte) (int, error)   { return c.nc.Read(p) }
func (c Conn) writeRaw(p []byte) (int, error)  { return c.nc.Write(p) }
func (c Conn) tryWriteRaw([]byte) (int, error) { return 0, nil }

func (c Conn) writeBuffersRaw(bufs *net.Buffers) (int64, error) { return bufs.WriteTo(c.nc) }
