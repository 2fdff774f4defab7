"""The load test (`make load`) and the drop-to-CreateCustomJob latency benchmark (bench/latency.py): a local stack
of their own whose trainer image is mapped to a no-op, datasets dropped through google-cloud-storage, and the run
records read back to measure where the time went."""
