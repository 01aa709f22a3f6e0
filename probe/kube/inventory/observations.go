package inventory

import "github.com/certdrift/certdrift/probe/desired"

// Observations converts the inventory's current summaries into the desired view the audit judges.
func (inv *Inventory) Observations() []desired.Observation {
	s := inv.Snapshot()
	return s.Observations()
}
