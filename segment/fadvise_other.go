//go:build !linux

package segment

import "os"

func fadviseDontNeed(*os.File) {}
