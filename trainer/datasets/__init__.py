"""Training data: shard discovery and assignment, per-format record readers, and streaming batches.

Each rank reads only its share of the shards, record by record, so a dataset larger than memory trains; the
order is a function of (seed, epoch) alone, which is what makes an interrupted run resume exactly.
"""
