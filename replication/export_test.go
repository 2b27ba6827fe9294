package replication

// Variants of the data-path rule for the simulation test.
const (
	VariantSound        = variantSound
	VariantPointer      = variantPointer
	VariantNoTombstones = variantNoTombstones
)

// SetVariant switches the rule until the returned function is called.
func SetVariant(v int) (restore func()) {
	old := variant
	variant = v
	return func() { variant = old }
}
