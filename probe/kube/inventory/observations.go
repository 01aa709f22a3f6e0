package inventory

import "github.com/certdrift/certdrift/probe/files"

// Observations converts the inventory's current summaries into the desired view the audit judges.
func (inv *Inventory) Observations() []files.Observation {
	s := inv.Snapshot()
	return s.Observations()
}
