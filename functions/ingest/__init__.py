"""Ingest: object events and sweep ticks become one TrainingRequest per dataset version."""
