package main

import "testing"

// worker.inlineDeliveries 0 turns inline delivery off; the broker's zero
// would take its default instead, so 0 must reach it as negative.
func TestInlineDeliveriesMapping(t *testing.T) {
	for _, tc := range []struct{ key, want int }{{0, -1}, {1, 1}, {4, 4}, {1024, 1024}} {
		if got := inlineDeliveries(tc.key); got != tc.want {
			t.Errorf("inlineDeliveries(%d) = %d, want %d", tc.key, got, tc.want)
		}
	}
}
