"""Pure rules over stored records (forward-only run changes, leases), shared by adapters and handlers."""
