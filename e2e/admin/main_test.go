package admin

import (
	"testing"

	"github.com/smssmq/smss/e2e/internal/kit"
)

func TestMain(m *testing.M) { kit.Main(m) }
