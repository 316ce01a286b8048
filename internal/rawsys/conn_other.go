//go:build !linux

package rawsys

// Not reached: NewConn leaves rc nil where Enabled is false.
func (c Conn) readRaw(p []byte) (int, error)  { return c.nc.Read(p) }
func (c Conn) writeRaw(p []byte) (int, error) { return c.nc.Write(p) }
